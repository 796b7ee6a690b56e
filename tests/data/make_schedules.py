"""TF's clippers at scheduled thresholds: the reference of ``tests/test_schedules.py``.

Usage: ``python tests/data/make_schedules.py [OUT.npz]`` (default: ``schedules.npz`` next to
this script). Needs TensorFlow 2.21; the tests run it in a subprocess when TensorFlow is
installed and read the committed file otherwise.

A warm-up schedule of the threshold, ``VALUES`` (``optax.linear_schedule(0.0, 2.0, 4)`` at steps
0 to 5, written out here so the reference does not depend on optax), meets one list of float32
gradients per step (``inputs``, seeded). For each step the file holds the gradients
(``g/<step>/<i>``), ``tf.clip_by_global_norm(grads, value)`` (``global/<step>/<i>`` and its
norm ``global_norm/<step>``) and ``tf.clip_by_norm(g, value)`` of each gradient
(``norm/<step>/<i>``). ``zero/global/<i>`` and ``zero/norm/<i>`` are the same at value 0 for
all-zero gradients (TF: NaN, 0 / 0). Provenance in ``provenance``: the TF version, the seed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

__all__ = ["SEED", "SHAPES", "VALUES", "inputs", "main"]

#: The scheduled threshold at steps 0..5: 0 (TF: zeros for a finite non-zero norm) up to 2.
VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 2.0]
SHAPES = [(3, 2), (4,), (1,)]
SEED = 7


def inputs() -> list[list[np.ndarray]]:
    """One list of float32 gradients per step (norms from about 1 to 4: every value clips some)."""
    rng = np.random.default_rng(SEED)
    return [
        [(rng.standard_normal(s) * (0.5 + step * 0.3)).astype(np.float32) for s in SHAPES]
        for step in range(len(VALUES))
    ]


def main(out: Path) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    data: dict[str, np.ndarray] = {}
    for step, (value, grads) in enumerate(zip(VALUES, inputs(), strict=True)):
        ts = [tf.constant(g) for g in grads]
        clipped, norm = tf.clip_by_global_norm(ts, np.float32(value))
        data[f"global_norm/{step}"] = np.asarray(norm)
        for i, (g, c) in enumerate(zip(grads, clipped, strict=True)):
            data[f"g/{step}/{i}"] = g
            data[f"global/{step}/{i}"] = np.asarray(c)
            data[f"norm/{step}/{i}"] = np.asarray(tf.clip_by_norm(tf.constant(g), value))
    zeros = [tf.zeros(s, tf.float32) for s in SHAPES]
    clipped, _ = tf.clip_by_global_norm(zeros, np.float32(0.0))
    for i, (z, c) in enumerate(zip(zeros, clipped, strict=True)):
        data[f"zero/global/{i}"] = np.asarray(c)
        data[f"zero/norm/{i}"] = np.asarray(tf.clip_by_norm(z, 0.0))
    data["provenance"] = np.asarray(
        f"tensorflow {tf.__version__}; seed {SEED}; tf.clip_by_global_norm(grads, value), "
        f"tf.clip_by_norm(g, value) at values {VALUES}"
    )
    np.savez(out, **data)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("schedules.npz"))
