"""TF 2.21 on the inputs of ``tests/test_dask.py``'s float64 sums of every element and layouts.

Usage: ``python tests/data/make_dask_layouts.py [OUT.npz]`` (default: ``dask_layouts.npz``
next to this script). Needs TensorFlow 2.21; the tests read the committed file, and with
``--live-tf`` also run this script and check that the file is still what TF gives.

The tests chunk the same data in several ways (one chunk, uneven chunks, chunks of no
elements); TF sees the values alone. ``X`` (:func:`inputs`) is a float64 matrix of random
normal values, whose sums of every element land on different bits in different orders of
addition; the file holds ``tf.math.l2_normalize(X)`` (``l2_normalize``), ``tf.norm(X, ord=1)``
(``norm_1``) and ``tf.linalg.normalize(X, ord=1)`` (``normalize_1``, ``normalize_1/norm``).
``ROW`` is one row of 6 values (float64 and float32): ``tf.clip_by_value(ROW, -0.5, 0.5)``
(``<dtype>/row/clip_by_value``), ``tf.clip_by_norm(ROW, 1.0)`` (``<dtype>/row/clip_by_norm``),
``tf.math.l2_normalize(ROW, axis=1)`` (``<dtype>/row/l2_normalize``) and
``tf.linalg.global_norm([ROW, X[:5, :6]])`` (``<dtype>/row/global_norm``, cast to the dtype).
Plus the TensorFlow and NumPy versions (``versions``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DTYPES", "SEED", "SHAPE", "inputs", "main", "run_tf"]

#: The random generator's seed.
SEED = 37
#: ``X``'s shape.
SHAPE = (64, 70)
#: The dtypes of ``ROW`` (and of ``X`` beside it in the global norm).
DTYPES = ("float32", "float64")


def inputs() -> dict[str, np.ndarray]:
    """``X`` (float64, :data:`SHAPE`) and ``ROW`` (float64, one row of 6 values)."""
    rng = np.random.default_rng(SEED)
    return {"X": rng.standard_normal(SHAPE), "ROW": rng.standard_normal((1, 6))}


def run_tf() -> dict[str, Any]:
    """TF's results (see the module docstring for the keys)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    data = inputs()
    x = tf.constant(data["X"], tf.float64)
    out: dict[str, Any] = {
        "l2_normalize": tf.math.l2_normalize(x).numpy(),
        "norm_1": tf.norm(x, ord=1).numpy(),
    }
    values, norm = tf.linalg.normalize(x, ord=1)
    out["normalize_1"], out["normalize_1/norm"] = values.numpy(), norm.numpy()
    for dtype in DTYPES:
        row = tf.constant(data["ROW"].astype(dtype))
        out[f"{dtype}/row/clip_by_value"] = tf.clip_by_value(row, -0.5, 0.5).numpy()
        out[f"{dtype}/row/clip_by_norm"] = tf.clip_by_norm(row, 1.0).numpy()
        out[f"{dtype}/row/l2_normalize"] = tf.math.l2_normalize(row, axis=1).numpy()
        both = [row, tf.constant(data["X"][:5, :6].astype(dtype))]
        out[f"{dtype}/row/global_norm"] = tf.linalg.global_norm(both).numpy()
    out["versions"] = np.array([tf.__version__, np.__version__])
    return out


def main(out: Path) -> None:
    np.savez_compressed(out, **run_tf())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("dask_layouts.npz"))
