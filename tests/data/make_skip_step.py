"""OLMo-core's skip-step rule, run from its own file, with ``optax.apply_if_finite``'s: the
reference decisions of ``test_history.py``'s skip-on-spike tests.

Usage: ``python tests/data/make_skip_step.py [OUT.npz] [--olmo FILE]`` (default:
``skip_step.npz`` next to this script). Needs torch, and OLMo-core's
``SkipStepOptimizer``: imported from ``olmo_core`` when that is installed, else loaded from
``FILE``, a copy of ``src/olmo_core/optim/skip_step_optimizer.py`` (OLMo-core itself pulls in
heavy dependencies; the file imports only torch, ``typing_extensions`` and two helpers of
``olmo_core.utils``, which :func:`olmo_class` stands in for: the device is the CPU). Get it
with ``pip download --no-deps ai2-olmo-core==3.0.0`` and unzip, or from a clone of
allenai/OLMo-core.

Provenance of the committed file: ``skip_step_optimizer.py`` of ``ai2-olmo-core`` 3.0.0 (the
PyPI wheel), byte-identical to allenai/OLMo-core at commit
``fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d`` (sha256 of the file
``91ddfd0bb95dc40ec0104a80ef90bf876ceec6ddba1e0f7a2040960ed4b90725``, recorded in the data's
``provenance``); its ``get_step_factor`` is unchanged since commit ``1d5c8237a`` (2025-03-06).
The rule it holds: the trainer sets ``latest_loss`` and ``latest_grad_norm`` each step, two
lists that keep the last ``rolling_interval_length + 1`` values; while the loss list holds
fewer than ``max(2, rolling_interval_length // 2)`` values the step is taken; otherwise
``torch.std_mean`` (unbiased) of all values but the latest gives ``latest - mean <=
sigma_factor * std`` for the loss and the grad norm, and the step is taken when both hold
(one-sided; NaN statistics refuse it). For anyclip's grad-norm-only rule the norm is fed as
OLMo-core's loss and no grad norm is set.

Non-finite steps follow ``optax.apply_if_finite`` instead (:func:`decisions`): such a step is
not taken (unless more than ``max_consecutive_errors`` came in a row) and, unlike in
OLMo-core, its values are not fed to the rule (OLMo-core's NaN statistics would refuse every
step until the NaN leaves the window); that is anyclip's documented rule.

The file holds the gradients (``<seq>/grads``, float32, two parameters flattened and
concatenated per step), the losses (``<seq>/loss``) and per case ``<case>/apply`` (1 where the
step is taken) and ``<case>/skipped`` (the running count of skipped steps); the window sweep
(``sweep/norms``, float32 ``(SWEEP_SEQUENCES, SWEEP_STEPS)`` finite norm sequences, and
``sweep/apply``, the decisions for every length of ``SWEEP_LENGTHS`` with
:func:`sweep_sigma`, packed bits of shape ``(len(SWEEP_LENGTHS), SWEEP_SEQUENCES,
SWEEP_STEPS)``); and ``provenance`` (a JSON string).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CASES",
    "SEED",
    "SHAPES",
    "STEPS",
    "SWEEP_LENGTHS",
    "SWEEP_SEQUENCES",
    "SWEEP_STEPS",
    "decisions",
    "main",
    "olmo_class",
    "sweep_sequences",
    "sweep_sigma",
    "sweep_steps",
    "sequences",
]

SHAPES = [(3,), (2, 2)]
STEPS = 160
SEED = 2

#: name: (sequence, rolling_interval_length, sigma_factor, on_loss, max_consecutive_errors)
CASES: dict[str, tuple[str, int, float, bool, int | None]] = {
    "norm-L32-s3": ("spikes", 32, 3.0, False, None),
    "loss-default": ("spikes", 128, 6.0, True, None),
    "norm-default": ("spikes", 128, 6.0, False, None),
    "nonfinite-L32-s4": ("nonfinite", 32, 4.0, True, None),
    "nonfinite-give-up": ("nonfinite", 32, 4.0, False, 1),
    "L10": ("spikes", 10, 3.0, False, None),
    "L2": ("spikes", 2, 3.0, False, None),
    "L16-s6": ("spikes", 16, 6.0, False, None),
    "loss-L18-s6": ("spikes", 18, 6.0, True, None),
}

SWEEP_LENGTHS = list(range(2, 257))
SWEEP_SEQUENCES = 6
SWEEP_STEPS = max(SWEEP_LENGTHS) + 48
SWEEP_SEED = 7

#: A sweep decision whose margin ``latest - mean - sigma * std`` (float64) lies within this
#: fraction of ``|mean| + sigma * std`` would depend on the rounding of the statistics: the
#: sequences are drawn so that none does (:func:`main` checks).
BORDER = 1e-4


def sweep_sigma(length: int) -> float:
    """The ``sigma_factor`` the sweep uses for ``length``: 2, 3 and 6 in turn."""
    return (2.0, 3.0, 6.0)[length % 3]


def sweep_steps(length: int) -> int:
    """How many steps of each sweep sequence are decided for ``length``."""
    return min(SWEEP_STEPS, length + 48)


def sequences() -> dict[str, np.ndarray]:
    """Gradients (STEPS, 7) and losses (STEPS,): noise, spikes, and one with inf and NaN."""
    rng = np.random.default_rng(SEED)
    size = sum(int(np.prod(s)) for s in SHAPES)
    grads = (rng.standard_normal((STEPS, size)) * 0.3).astype(np.float32)
    grads[[70, 90, 131]] *= 40.0  # grad-norm spikes
    grads[100] *= 0.001  # a dip (OLMo-core's rule is one-sided: a dip is taken)
    loss = (2.0 + 0.05 * rng.standard_normal(STEPS)).astype(np.float32)
    loss[[80, 140]] = 9.0  # loss spikes
    bad = grads.copy()
    bad_loss = loss.copy()
    bad[[60, 61, 62]] = np.inf
    bad[75, 2] = np.nan
    bad_loss[110] = np.nan
    return {
        "spikes/grads": grads,
        "spikes/loss": loss,
        "nonfinite/grads": bad,
        "nonfinite/loss": bad_loss,
    }


def sweep_sequences() -> np.ndarray:
    """Finite positive norm sequences, ``(SWEEP_SEQUENCES, SWEEP_STEPS)`` float32.

    0: noise around 2 with 40x spikes; 1: a decaying log-normal trend with 3x-10x spikes;
    2: noise with dips to 1/1000 and spikes (a dip is taken); 3: heavy-tailed noise (many
    decisions near the threshold at sigma 2 and 3); 4: the issue's MLP-like norms (1.6 to 3.5,
    a spike of 148.9 at step 30, more later); 5: 40 equal values (zero deviation: a value equal
    to the mean is taken, a larger one skipped), then noise with spikes.
    """
    rng = np.random.default_rng(SWEEP_SEED)
    n = SWEEP_STEPS
    t = np.arange(n)
    out = np.empty((SWEEP_SEQUENCES, n))

    def spikes(p: float, lo: float, hi: float) -> np.ndarray:
        return np.where(rng.random(n) < p, rng.uniform(lo, hi, n), 1.0)

    out[0] = (2.0 + 0.1 * rng.standard_normal(n)) * spikes(0.04, 40.0, 40.0)
    trend = 3.0 * np.exp(-t / 150) + 0.5
    out[1] = trend * np.exp(0.3 * rng.standard_normal(n)) * spikes(0.06, 3.0, 10.0)
    dips = np.where(rng.random(n) < 0.05, 1e-3, 1.0)
    out[2] = (1.0 + 0.05 * rng.standard_normal(n)) * dips * spikes(0.03, 5.0, 20.0)
    out[3] = 1.0 + 0.1 * np.abs(rng.standard_t(2.0, n))
    out[4] = rng.uniform(1.6, 3.5, n) * spikes(0.02, 30.0, 60.0)
    out[4, 30] = 148.9
    out[5] = (1.0 + 0.2 * rng.random(n)) * spikes(0.04, 4.0, 8.0)
    out[5, :40] = 1.0
    out[5, 40:48] = [1.0, 2.0, 1.0, 0.5, 1.0, 1.0, 3.0, 1.0]
    return out.astype(np.float32)


def olmo_class(olmo_file: Path | None = None) -> Any:
    """OLMo-core's ``SkipStepOptimizer``: from ``olmo_core`` if installed, else ``olmo_file``."""
    if importlib.util.find_spec("olmo_core") is not None:
        from olmo_core.optim.skip_step_optimizer import SkipStepOptimizer

        return SkipStepOptimizer
    if olmo_file is None:
        msg = "olmo_core is not installed: pass --olmo PATH/TO/skip_step_optimizer.py"
        raise SystemExit(msg)
    import torch

    utils = types.ModuleType("olmo_core.utils")
    utils.get_default_device = lambda: torch.device("cpu")  # type: ignore[attr-defined]
    utils.move_to_device = lambda o, device, non_blocking=None: o.to(device)  # type: ignore[attr-defined]
    sys.modules.setdefault("olmo_core", types.ModuleType("olmo_core"))
    sys.modules["olmo_core.utils"] = utils
    spec = importlib.util.spec_from_file_location("olmo_skip_step_optimizer", olmo_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.SkipStepOptimizer


class _Rule:
    """One OLMo-core ``SkipStepOptimizer`` fed a value (or a loss and a norm) per step."""

    def __init__(self, cls: Any, length: int, sigma: float) -> None:
        import torch

        self.torch = torch
        param = torch.zeros(1, requires_grad=True)
        self.opt = cls([param], {}, rolling_interval_length=length, sigma_factor=sigma)

    def take(self, loss: float, norm: float | None = None) -> bool:
        torch = self.torch
        self.opt.latest_loss = torch.tensor(loss, dtype=torch.float32)
        if norm is not None:
            self.opt.latest_grad_norm = torch.tensor(norm, dtype=torch.float32)
        with warnings.catch_warnings():  # std of one value: NaN, with torch's warning
            warnings.simplefilter("ignore")
            return bool(self.opt.get_step_factor() == 1.0)


def decisions(
    cls: Any,
    norms: np.ndarray,
    losses: np.ndarray,
    length: int,
    sigma: float,
    on_loss: bool,
    max_consecutive_errors: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per step: taken (0/1) and the running count of skipped steps."""
    rule = _Rule(cls, length, sigma)
    consecutive = 0
    skipped = 0
    apply_out, skipped_out = [], []
    for norm, loss in zip(norms.tolist(), losses.tolist(), strict=True):
        loss_value = loss if on_loss else norm
        if math.isfinite(norm) and math.isfinite(loss_value):
            consecutive = 0
            take = rule.take(loss, norm) if on_loss else rule.take(norm)
        else:  # optax.apply_if_finite
            consecutive += 1
            take = max_consecutive_errors is not None and consecutive > max_consecutive_errors
        skipped += 0 if take else 1
        apply_out.append(int(take))
        skipped_out.append(skipped)
    return np.asarray(apply_out, np.int32), np.asarray(skipped_out, np.int32)


def _margins(values: np.ndarray, length: int, sigma: float) -> np.ndarray:
    """``latest - mean - sigma * std`` over the previous ``length`` values, relative, float64."""
    v = values.astype(np.float64)
    out = np.full(len(v), np.inf)
    for i in range(max(2, length // 2) - 1, len(v)):
        prev = v[max(0, i - length) : i]
        if len(prev) < 2:
            continue
        mean, std = prev.mean(), prev.std(ddof=1)
        if std == 0 and v[i] == mean:  # exact: equal values, no rounding
            continue
        out[i] = abs(v[i] - mean - sigma * std) / (abs(mean) + sigma * std)
    return out


def sweep(cls: Any) -> np.ndarray:
    """The decisions for every sweep length: ``(len(SWEEP_LENGTHS), SEQUENCES, STEPS)`` 0/1."""
    norms = sweep_sequences()
    out = np.zeros((len(SWEEP_LENGTHS), SWEEP_SEQUENCES, SWEEP_STEPS), np.uint8)
    for i, length in enumerate(SWEEP_LENGTHS):
        sigma = sweep_sigma(length)
        steps = sweep_steps(length)
        for k in range(SWEEP_SEQUENCES):
            seq = norms[k, :steps]
            margin = _margins(seq, length, sigma)
            if np.any(margin < BORDER):
                where = np.flatnonzero(margin < BORDER).tolist()
                msg = f"sweep: length {length}, sequence {k}: steps {where} are borderline"
                raise SystemExit(msg)
            rule = _Rule(cls, length, sigma)
            out[i, k, :steps] = [rule.take(v) for v in seq.tolist()]
    return out


def main(out: Path, olmo_file: Path | None = None) -> None:
    """Write the sequences and every case's decisions to ``out``."""
    import torch

    cls = olmo_class(olmo_file)
    source = Path(sys.modules[cls.__module__].__file__ or "")
    arrays = sequences()
    for case, (seq, length, sigma, on_loss, errors) in CASES.items():
        g = arrays[f"{seq}/grads"].astype(np.float64)
        norms = np.sqrt(np.sum(g * g, axis=1)).astype(np.float32)
        apply, skipped = decisions(
            cls, norms, arrays[f"{seq}/loss"], length, sigma, on_loss, errors
        )
        arrays[f"{case}/apply"] = apply
        arrays[f"{case}/skipped"] = skipped
    arrays["sweep/norms"] = sweep_sequences()
    arrays["sweep/apply"] = np.packbits(sweep(cls), axis=-1)
    provenance = {
        "rule": "OLMo-core SkipStepOptimizer.get_step_factor, run from its file "
        "(ai2-olmo-core 3.0.0 src/olmo_core/optim/skip_step_optimizer.py = allenai/OLMo-core "
        "@ fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d) + optax.apply_if_finite for non-finite "
        "steps",
        "olmo_file_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "seed": SEED,
        "sweep_seed": SWEEP_SEED,
        "cases": {k: list(v) for k, v in CASES.items()},
    }
    arrays["provenance"] = np.asarray(json.dumps(provenance, sort_keys=True))
    np.savez(out, **arrays)


if __name__ == "__main__":
    args = sys.argv[1:]
    olmo = None
    if "--olmo" in args:
        i = args.index("--olmo")
        olmo = Path(args[i + 1])
        del args[i : i + 2]
    main(Path(args[0]) if args else Path(__file__).with_name("skip_step.npz"), olmo)
