"""autoclip 0.2's ``QuantileClip``, run live: the reference of ``test_history.py``'s AutoClip tests.

Usage: ``python tests/data/make_autoclip.py [OUT.npz]`` (default: ``autoclip.npz`` next to
this script). Needs ``autoclip`` (``pip install --no-deps autoclip``; its torch module imports
torch only) and torch; the tests run it in a subprocess when autoclip is installed and read the
committed file otherwise.

Two float32 parameters (shapes ``SHAPES``) get, at each of ``STEPS`` steps, the gradients of a
sequence (``sequences()``: seeded normal noise with spikes, a NaN at step 30), and
``autoclip.torch.QuantileClip([p0, p1], **kwargs).step()`` clips them, for each case of
``CASES``. Case ``missing`` leaves the second gradient ``None`` at ``MISSING_STEP`` (autoclip
then neither clips nor records it). The file holds the gradients (``<seq>/grads``, float32,
flattened and concatenated per step), per case the clipped gradients (``<case>/grads``, NaN for
a missing one), and ``provenance`` (a JSON string: versions, seed, the call).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

__all__ = ["CASES", "MISSING_STEP", "SEED", "SHAPES", "STEPS", "main", "run_autoclip", "sequences"]

SHAPES = [(3,), (2, 2)]
STEPS = 45
SEED = 1
MISSING_STEP = 5

#: name: (sequence, QuantileClip's keyword arguments, second gradient missing at MISSING_STEP)
CASES: dict[str, tuple[str, dict[str, object], bool]] = {
    "q90-len7": ("nonfinite", {"quantile": 0.9, "history_length": 7}, False),
    "q50-len1000": ("spikes", {"quantile": 0.5, "history_length": 1000}, False),
    "q25-len5-global": (
        "nonfinite",
        {"quantile": 0.25, "history_length": 5, "global_threshold": True},
        False,
    ),
    "q0-len3": ("spikes", {"quantile": 0.0, "history_length": 3}, False),
    "q100-len4-global": (
        "spikes",
        {"quantile": 1.0, "history_length": 4, "global_threshold": True},
        False,
    ),
    "missing": ("spikes", {"quantile": 0.7, "history_length": 6}, True),
}


def sequences() -> dict[str, np.ndarray]:
    """Gradient sequences, shape (STEPS, 7): noise, spikes, one with a NaN at step 30."""
    rng = np.random.default_rng(SEED)
    size = sum(int(np.prod(s)) for s in SHAPES)
    base = rng.standard_normal((STEPS, size)).astype(np.float32)
    base *= (1 + 0.5 * np.sin(np.arange(STEPS) / 4)).astype(np.float32)[:, None]
    base[[10, 21, 22]] *= 50.0
    nonfinite = base.copy()
    nonfinite[30, 5] = np.nan
    return {"spikes": base, "nonfinite": nonfinite}


def _split(row: np.ndarray) -> list[np.ndarray]:
    out, i = [], 0
    for s in SHAPES:
        n = int(np.prod(s))
        out.append(row[i : i + n].reshape(s))
        i += n
    return out


def run_autoclip(grads: np.ndarray, kwargs: dict[str, object], missing: bool) -> np.ndarray:
    """The gradients after ``QuantileClip(params, **kwargs).step()``, one row a step."""
    import torch
    from autoclip.torch import QuantileClip

    params = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
    clipper = QuantileClip(params, **kwargs)
    out = []
    for step, row in enumerate(grads):
        for p, g in zip(params, _split(row), strict=True):
            p.grad = torch.tensor(g)
        if missing and step == MISSING_STEP:
            params[1].grad = None
        clipper.step()
        out.append(
            np.concatenate(
                [
                    np.full(p.numel(), np.nan, np.float32)
                    if p.grad is None
                    else p.grad.numpy().ravel()
                    for p in params
                ]
            )
        )
    return np.asarray(out)


def main(out: Path) -> None:
    """Write the sequences and every case's clipped gradients to ``out``."""
    import importlib.metadata as md

    import torch

    seqs = sequences()
    arrays: dict[str, np.ndarray] = {f"{k}/grads": v for k, v in seqs.items()}
    for case, (seq, kwargs, missing) in CASES.items():
        arrays[f"{case}/grads"] = run_autoclip(seqs[seq], kwargs, missing)
    provenance = {
        "autoclip": md.version("autoclip"),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "seed": SEED,
        "call": "autoclip.torch.QuantileClip(params, **kwargs).step() after setting p.grad",
        "cases": {k: [s, kw, m] for k, (s, kw, m) in CASES.items()},
    }
    arrays["provenance"] = np.asarray(json.dumps(provenance, sort_keys=True))
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("autoclip.npz"))
