"""TF 2.21 on the inputs of ``tests/test_dask.py``'s arrays of unknown chunk sizes.

Usage: ``python tests/data/make_dask_unknown.py [OUT.npz]`` (default: ``dask_unknown.npz``
next to this script). Needs TensorFlow 2.21; the tests read the committed file, and with
``--live-tf`` also run this script and check that the file is still what TF gives.

A dask selection ``x[x > 0]`` has unknown chunk sizes until computed; TF sees the selected
values themselves (:func:`selected`). Per dtype (``float32``, ``float64``) the file holds
``tf.clip_by_value`` of the selection with array bounds (``<dtype>/clip``),
``tf.math.l2_normalize`` with an array ``epsilon`` (``<dtype>/l2``, and ``<dtype>/l2_grow``:
one selected value against a 3-element ``epsilon``, which TF broadcasts to 3 values),
``tf.norm(ord=inf)`` of an empty selection, flat and of a 0x3 matrix over axis 0
(``<dtype>/inf_empty``, ``<dtype>/inf_empty_rows``), and the messages of TF's errors for
bounds of the wrong length (``errors/clip_grow``: one value against 3 bounds;
``errors/clip_mismatch``: 4 values against 3), plus the TensorFlow and NumPy versions
(``versions``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DTYPES", "EPSILON", "HI", "LO", "X", "main", "run_tf", "selected"]

DTYPES = ("float32", "float64")
#: The data; ``x[x > 0]`` selects 4 of its 7 values.
X = (1.0, -2.0, 3.0, 4.0, -0.5, 2.5, 0.0)
#: Bounds for the 4 selected values (``LO[0] > HI[0]``: TF's minimum first, then maximum).
LO = (2.0, 0.0, 3.5, 0.0)
HI = (1.5, 3.0, 3.0, 1.0)
#: ``epsilon`` for the 4 selected values (the second and fourth above their squared norm).
EPSILON = (1e-12, 100.0, 1e-12, 50.0)


def selected(dtype: str) -> np.ndarray:
    """``x[x > 0]``, computed."""
    x = np.asarray(X, dtype=dtype)
    return x[x > 0]


def run_tf() -> dict[str, Any]:
    """TF's results (see the module docstring for the keys)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    out: dict[str, Any] = {}
    for dtype in DTYPES:
        dt = tf.as_dtype(dtype)
        s = tf.constant(selected(dtype))
        lo, hi = tf.constant(LO, dt), tf.constant(HI, dt)
        out[f"{dtype}/clip"] = tf.clip_by_value(s, lo, hi).numpy()
        out[f"{dtype}/l2"] = tf.math.l2_normalize(s, epsilon=tf.constant(EPSILON, dt)).numpy()
        one = tf.constant([2.0], dt)
        grow = tf.math.l2_normalize(one, epsilon=tf.constant(EPSILON[:3], dt))
        out[f"{dtype}/l2_grow"] = grow.numpy()
        empty = tf.zeros((0,), dt)
        out[f"{dtype}/inf_empty"] = tf.norm(empty, ord=np.inf).numpy()
        out[f"{dtype}/inf_empty_rows"] = tf.norm(tf.zeros((0, 3), dt), ord=np.inf, axis=0).numpy()
    s = tf.constant(selected("float32"))
    for key, t in (("clip_grow", s[:1]), ("clip_mismatch", s)):
        try:
            tf.clip_by_value(t, tf.constant(LO[:3]), 5.0)
        except (ValueError, tf.errors.InvalidArgumentError) as exc:
            out[f"errors/{key}"] = np.array(str(exc).split(" [Op:")[0].split("}} ")[-1])
    out["versions"] = np.array([tf.__version__, np.__version__])
    return out


def main(out: Path) -> None:
    np.savez_compressed(out, **run_tf())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("dask_unknown.npz"))
