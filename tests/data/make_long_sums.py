"""TF 2.21 on long float64 sums of equal magnitude: the reference values of ``test_long_sums.py``.

Usage: ``python tests/data/make_long_sums.py [OUT.npz]`` (default: ``long_sums.npz`` next to
this script). Needs TensorFlow 2.21; the tests read the committed file, and with ``--live-tf``
also run this script and check that the file is still what TF gives.

Each input is a float64 vector of ``n`` values ``+-m`` (random signs from ``SEED``): all its
squares are the same number, so the sum of squares is ``n`` times it exactly, and what TF
returns is set by its order of additions alone (10 to 20 ULP from the exact norm for long
vectors). TF runs with one intra-op thread: from about 100,000 elements TF's multi-threaded
sum depends on the machine's thread count (by up to 2 ULP); one thread is the order every
machine can reproduce. The file holds, per input ``<m>/<n>``, ``tf.norm`` (``.../norm``),
``tf.linalg.global_norm`` of the vector alone (``.../global_norm``) and of the vector with
its first ``n // 3`` elements as a second array (``.../global_norm2``), and for ``n <=
CLIP_MAX`` the values of ``tf.clip_by_norm(x, CLIP_NORM)`` (``.../clip_by_norm``), plus the
TensorFlow and NumPy versions (``versions``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CLIP_MAX", "CLIP_NORM", "LENGTHS", "MAGNITUDES", "SEED", "inputs", "main", "run_tf"]

#: The signs' random generator seed.
SEED = 22

#: The magnitudes ``m`` of the values: squares of 1.7 and 3.1 round up, of 0.3 down.
MAGNITUDES = (1.7, 0.3, 3.1)

#: The lengths: short, around one leaf of TF's tree (4096), and long.
LENGTHS = (2, 3, 7, 16, 100, 255, 256, 257, 1000, 1024, 4097, 10_000, 65_536, 100_000, 1_000_000)

#: ``clip_by_norm``'s bound, and the longest input whose clipped values are stored.
CLIP_NORM = 1.0
CLIP_MAX = 4097


def inputs() -> dict[str, np.ndarray]:
    """Every input vector, by its key ``<m>/<n>``."""
    rng = np.random.default_rng(SEED)
    return {f"{m}/{n}": rng.choice([-1.0, 1.0], n) * m for m in MAGNITUDES for n in LENGTHS}


def run_tf() -> dict[str, np.ndarray]:
    """TF's results (see the module docstring for the keys)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    out: dict[str, np.ndarray] = {}
    for key, x in inputs().items():
        t = tf.constant(x, tf.float64)
        out[f"{key}/norm"] = tf.norm(t).numpy()
        out[f"{key}/global_norm"] = tf.linalg.global_norm([t]).numpy()
        out[f"{key}/global_norm2"] = tf.linalg.global_norm([t, t[: x.size // 3]]).numpy()
        if x.size <= CLIP_MAX:
            out[f"{key}/clip_by_norm"] = tf.clip_by_norm(t, CLIP_NORM).numpy()
    out["versions"] = np.array([tf.__version__, np.__version__])
    return out


def main(out: Path) -> None:
    results: dict[str, Any] = run_tf()
    np.savez_compressed(out, **results)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("long_sums.npz"))
