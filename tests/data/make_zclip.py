"""zclip 1.0's ``ZClip``, run live: the reference of ``test_history.py``'s ZClip tests.

Usage: ``python tests/data/make_zclip.py [OUT.npz] [DEVICE]`` (default: ``zclip.npz`` next to
this script, on ``cpu``). Needs ``zclip`` (``pip install --no-deps zclip``: its module imports
torch only) and torch; the tests run it in a subprocess when zclip is installed, on the device
of the backend under test (``cuda`` for torch-cuda, jax-gpu and CuPy where torch has CUDA), and
read the committed file (made on the CPU) otherwise.

Two parameters (shapes ``SHAPES``) get, at each of ``STEPS`` steps, the gradients of a
sequence (``sequences()``: seeded normal noise with spikes, and one with an inf and a NaN), and
``zclip.ZClip(**kwargs).step(model)`` clips them, for each case of ``CASES``. The file holds
the gradients (``input-<seq>/grads``, float64, flattened and concatenated per step) and, per case,
what zclip returned and left: ``<case>/norm`` (its float), ``<case>/grads`` (the clipped
gradients), ``<case>/mean`` and ``<case>/var`` (its EMA, NaN while warming up), and
``provenance`` (a JSON string: versions, seed, the call).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

__all__ = ["CASES", "SEED", "SHAPES", "STEPS", "main", "run_zclip", "sequences"]

SHAPES = [(3,), (2, 2)]
STEPS = 60
SEED = 0

#: name: (sequence, dtype, zclip's keyword arguments)
CASES: dict[str, tuple[str, str, dict[str, object]]] = {
    "default": ("spikes", "float32", {}),
    "no-cap": ("spikes", "float32", {"max_grad_norm": None}),
    "percentile": ("spikes", "float32", {"mode": "percentile", "max_grad_norm": None}),
    "mean": ("spikes", "float32", {"clip_option": "mean"}),
    "skip-update": (
        "spikes",
        "float32",
        {"skip_update_on_spike": True, "max_grad_norm": None, "clip_factor": 0.7},
    ),
    "no-warmup": ("spikes", "float32", {"warmup_steps": 0, "max_grad_norm": 0.6}),
    "float64": ("spikes", "float64", {"max_grad_norm": None, "warmup_steps": 10}),
    "nonfinite": ("nonfinite", "float32", {}),
    "nonfinite-no-cap": ("nonfinite", "float32", {"max_grad_norm": None}),
}


def sequences() -> dict[str, np.ndarray]:
    """Gradient sequences, shape (STEPS, 7): noise of norm ~0.5, spikes, an inf and a NaN."""
    rng = np.random.default_rng(SEED)
    size = sum(int(np.prod(s)) for s in SHAPES)
    base = rng.standard_normal((STEPS, size)) * 0.2
    base *= (1 + 0.5 * np.sin(np.arange(STEPS) / 5))[:, None]
    spikes = base.copy()
    spikes[[30, 41, 42]] *= 20.0
    spikes[50] *= 0.01
    nonfinite = spikes.copy()
    nonfinite[35, 1] = np.inf
    nonfinite[45, 4] = np.nan
    return {"spikes": spikes, "nonfinite": nonfinite}


def _split(row: np.ndarray) -> list[np.ndarray]:
    out, i = [], 0
    for s in SHAPES:
        n = int(np.prod(s))
        out.append(row[i : i + n].reshape(s))
        i += n
    return out


def run_zclip(
    grads: np.ndarray, dtype: str, kwargs: dict[str, object], device: str = "cpu"
) -> dict[str, np.ndarray]:
    """Run ``zclip.ZClip(**kwargs).step`` on ``grads``, one row a step, on ``device``."""
    import torch
    from zclip import ZClip

    dt = getattr(torch, dtype)
    model = torch.nn.Module()
    params = [torch.nn.Parameter(torch.zeros(s, dtype=dt, device=device)) for s in SHAPES]
    for i, p in enumerate(params):
        model.register_parameter(f"p{i}", p)
    zc = ZClip(**kwargs)
    out: dict[str, list[object]] = {"norm": [], "grads": [], "mean": [], "var": []}
    for row in grads:
        for p, g in zip(params, _split(row), strict=True):
            p.grad = torch.tensor(g, dtype=dt, device=device)
        out["norm"].append(zc.step(model))
        out["grads"].append(np.concatenate([p.grad.double().cpu().numpy().ravel() for p in params]))
        out["mean"].append(np.nan if zc.mean is None else zc.mean)
        out["var"].append(np.nan if zc.var is None else zc.var)
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def main(out: Path, device: str = "cpu") -> None:
    """Write the sequences and every case's results to ``out`` (zclip run on ``device``)."""
    import importlib.metadata as md

    import torch

    seqs = sequences()
    arrays: dict[str, np.ndarray] = {f"input-{k}/grads": v for k, v in seqs.items()}
    for case, (seq, dtype, kwargs) in CASES.items():
        grads = seqs[seq].astype(dtype)
        for k, v in run_zclip(grads, dtype, kwargs, device).items():
            arrays[f"{case}/{k}"] = v
    provenance = {
        "zclip": md.version("zclip"),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "seed": SEED,
        "device": device,
        "call": "zclip.ZClip(**kwargs).step(model) after setting p.grad, per step",
        "cases": {k: [s, d, kw] for k, (s, d, kw) in CASES.items()},
    }
    arrays["provenance"] = np.asarray(json.dumps(provenance, sort_keys=True))
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("zclip.npz"),
        sys.argv[2] if len(sys.argv) > 2 else "cpu",
    )
