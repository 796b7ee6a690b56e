"""TF 2.21's gradients of ``l2_normalize`` and ``clip_by_average_norm`` of one element, run live.

Usage: ``python tests/data/make_l2_normalize_grads.py [OUT.npz]`` (default:
``l2_normalize_grads.npz`` next to this script). Needs TensorFlow 2.21; ``test_gradients.py``
reads the committed file, and with ``--live-tf`` also runs this script and checks that the file
is still what TF gives.

Of one element, ``l2_normalize(x)`` is ``x * rsqrt(x * x)``, ``sign(x)`` up to rounding, so its
gradient is a difference of two terms that cancel exactly in real arithmetic: ``rsqrt(s)``
(through ``x``) and ``x * 2x * RsqrtGrad`` (through the sum of squares). What is left is the
rounding of TF's own operations in TF's order (Eigen's ``RsqrtGrad`` is
``(-0.5 * (r * r)) * (r * dy)``), exactly 0 for most ``x`` (fuzzing round 4 found
``x = 0.001474859775044024``, where ``-0.5 * dy * r**3`` left ``-6.1e-05``). One element takes
TF's scalar ``rsqrt``, which is ``1 / sqrt`` correctly rounded (a vector takes its approximate
SIMD path), so the values are exact targets.

The file holds, for each dtype ``d`` of :data:`DTYPES`: ``x/<d>`` (one value per case; each case
is a separate one-element tensor), ``l2_normalize/<d>`` (the gradient of
``sum(l2_normalize(x))``), and for float32 (TF's ``clip_by_average_norm`` multiplies by a
float32 size, so it refuses float64) ``clip_by_average_norm/float32/<clip>`` (the gradient of
``sum(clip_by_average_norm(x, clip))`` for each clip of :data:`CLIPS`, active or not).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

__all__ = ["CLIPS", "DTYPES", "inputs", "main"]

DTYPES = ("float32", "float64")
CLIPS = (0.5, 2.0)
#: the value of issue 28 (fuzzing round 4), first in the float32 cases
ISSUE_28 = 0.001474859775044024


def inputs(dtype: str) -> np.ndarray:
    """One value per case: the issue's, then random signs and magnitudes from 1e-3 to 1e3."""
    rng = np.random.default_rng([28, DTYPES.index(dtype)])
    x = rng.choice([-1.0, 1.0], 47) * 10 ** rng.uniform(-3, 3, 47) * rng.uniform(1, 10, 47)
    return np.concatenate([[ISSUE_28], x]).astype(dtype)


def main(out: Path) -> None:
    """Write the gradients and their provenance to ``out``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    def grad(fn: object, x: np.ndarray) -> np.ndarray:
        rows = []
        for v in x:
            t = tf.constant(v.reshape(1))
            with tf.GradientTape() as tape:
                tape.watch(t)
                loss = tf.reduce_sum(fn(t))  # type: ignore[operator]
            rows.append(tape.gradient(loss, t).numpy()[0])
        return np.asarray(rows, dtype=x.dtype)

    arrays: dict[str, np.ndarray] = {}
    for d in DTYPES:
        x = inputs(d)
        arrays[f"x/{d}"] = x
        arrays[f"l2_normalize/{d}"] = grad(tf.math.l2_normalize, x)
        for c in CLIPS if d == "float32" else ():  # TF's Mul by a float32 size refuses float64
            clip = tf.constant(c, dtype=d)
            arrays[f"clip_by_average_norm/{d}/{c}"] = grad(
                lambda t, clip=clip: tf.compat.v1.clip_by_average_norm(t, clip), x
            )
    arrays["provenance"] = np.asarray(
        f"tensorflow {tf.__version__}, numpy {np.__version__}; "
        "tests/data/make_l2_normalize_grads.py"
    )
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(__file__).with_name("l2_normalize_grads.npz")
    )
