"""OLMo-core's skip-step rule with ``optax.apply_if_finite``'s: the reference decisions of
``test_history.py``'s skip-on-spike tests.

Usage: ``python tests/data/make_skip_step.py [OUT.npz] [DEVICE]`` (default: ``skip_step.npz``
next to this script, the statistics on ``cpu``). Needs torch only.

OLMo-core's package is heavy, so the rule of ``SkipStepOptimizer.get_step_factor``
(``src/olmo_core/optim/skip_step_optimizer.py`` of allenai/OLMo-core, read at commit
``067267cab2aecb935b1dab1dbfcecc1a5754b1e0``) is restated here in :func:`olmo_rule`, from its
documented behaviour, not copied: the trainer appends each step's loss and grad norm to two
lists that keep the last ``rolling_interval_length + 1`` values; while the loss list holds
fewer than ``max(20, rolling_interval_length // 2)`` values the step is taken; otherwise
``torch.std_mean`` (unbiased) of all values but the latest gives each z-score
``|latest - mean| / std``, and the step is taken when both are ``<= sigma_factor``. For the
grad-norm-only rule the norm series stands in for the loss too (both z-scores are then one).

Non-finite steps follow ``optax.apply_if_finite`` instead (:func:`decisions`): such a step is
not taken (unless more than ``max_consecutive_errors`` came in a row) and, unlike in
OLMo-core, its values are not appended (OLMo-core's NaN statistics would refuse every step
until the NaN leaves the window); that is anyclip's documented rule.

The file holds the gradients (``<seq>/grads``, float32, two parameters flattened and
concatenated per step), the losses (``<seq>/loss``) and per case ``<case>/apply`` (1 where the
step is taken) and ``<case>/skipped`` (the running count of skipped steps), and ``provenance``
(a JSON string).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

__all__ = ["CASES", "SEED", "SHAPES", "STEPS", "decisions", "main", "olmo_rule", "sequences"]

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
}


def sequences() -> dict[str, np.ndarray]:
    """Gradients (STEPS, 7) and losses (STEPS,): noise, spikes, and one with inf and NaN."""
    rng = np.random.default_rng(SEED)
    size = sum(int(np.prod(s)) for s in SHAPES)
    grads = (rng.standard_normal((STEPS, size)) * 0.3).astype(np.float32)
    grads[[70, 90, 131]] *= 40.0  # grad-norm spikes
    grads[100] *= 0.001  # a dip (OLMo-core's z-score is two-sided)
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


def olmo_rule(
    losses: list[float], norms: list[float], length: int, sigma: float, device: str = "cpu"
) -> bool:
    """OLMo-core's decision (restated): take the step? ``losses`` and ``norms`` end with it.

    The statistics (``torch.std_mean``) run on ``device``.
    """
    import torch

    if len(losses) < max(20, length // 2):
        return True
    ok = True
    for values in (losses, norms):
        series = torch.tensor(values, dtype=torch.float32, device=device)
        std, mean = torch.std_mean(series[:-1])
        z = (series[-1] - mean).abs().div(std)
        ok = ok and bool(z <= sigma)
    return ok


def decisions(
    norms: np.ndarray,
    losses: np.ndarray,
    length: int,
    sigma: float,
    on_loss: bool,
    max_consecutive_errors: int | None,
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """Per step: taken (0/1) and the running count of skipped steps."""
    kept_losses: list[float] = []
    kept_norms: list[float] = []
    consecutive = 0
    skipped = 0
    apply_out, skipped_out = [], []
    for norm, loss in zip(norms.tolist(), losses.tolist(), strict=True):
        loss_value = loss if on_loss else norm
        if math.isfinite(norm) and math.isfinite(loss_value):
            consecutive = 0
            kept_norms = [*kept_norms, norm][-(length + 1) :]
            kept_losses = [*kept_losses, loss_value][-(length + 1) :]
            take = olmo_rule(kept_losses, kept_norms, length, sigma, device)
        else:  # optax.apply_if_finite
            consecutive += 1
            take = max_consecutive_errors is not None and consecutive > max_consecutive_errors
        skipped += 0 if take else 1
        apply_out.append(int(take))
        skipped_out.append(skipped)
    return np.asarray(apply_out, np.int32), np.asarray(skipped_out, np.int32)


def main(out: Path, device: str = "cpu") -> None:
    """Write the sequences and every case's decisions to ``out`` (statistics on ``device``)."""
    import torch

    arrays = sequences()
    for case, (seq, length, sigma, on_loss, errors) in CASES.items():
        g = arrays[f"{seq}/grads"].astype(np.float64)
        norms = np.sqrt(np.sum(g * g, axis=1)).astype(np.float32)
        apply, skipped = decisions(
            norms, arrays[f"{seq}/loss"], length, sigma, on_loss, errors, device
        )
        arrays[f"{case}/apply"] = apply
        arrays[f"{case}/skipped"] = skipped
    provenance = {
        "rule": "OLMo-core SkipStepOptimizer.get_step_factor, restated (allenai/OLMo-core "
        "src/olmo_core/optim/skip_step_optimizer.py @ 067267cab2aecb935b1dab1dbfcecc1a5754b1e0)"
        " + optax.apply_if_finite for non-finite steps",
        "torch": torch.__version__,
        "numpy": np.__version__,
        "seed": SEED,
        "device": device,
        "cases": {k: list(v) for k, v in CASES.items()},
    }
    arrays["provenance"] = np.asarray(json.dumps(provenance, sort_keys=True))
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("skip_step.npz"),
        sys.argv[2] if len(sys.argv) > 2 else "cpu",
    )
