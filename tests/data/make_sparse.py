"""TF 2.21 on ``tf.IndexedSlices``: the reference values of ``test_sparse.py``.

Usage: ``python tests/data/make_sparse.py [OUT.npz]`` (default: ``sparse.npz`` next to this
script). Needs TensorFlow 2.21; the tests read the committed file, and with ``--live-tf`` also
run this script and check that the file is still what TF gives.

Each input of :data:`INPUTS` is an ``IndexedSlices(values, indices, dense_shape)`` whose values
are the stored values of one torch sparse layout built by the tests from the same ``indices``
(positions along the first axis of ``dense_shape``: rows for a hybrid COO tensor, flat
row-major positions for a COO, CSR or CSC matrix, block positions for BSR and BSC). The file
holds, per input ``<name>``, the inputs (``<name>/values``, ``<name>/indices``) and what TF
returns: ``<name>/<function>`` for the values of an ``IndexedSlices`` result or a dense result
(in ``dense_shape``'s layout; the tests arrange it like the torch tensor), and
``<name>/grad_<function>``: the gradient of ``sum(w * result)`` (``w = 1..n``) with respect to
the values.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BOUNDS", "CLIP_NORM", "INPUTS", "OTHER", "main", "run_tf"]

f32 = np.float32

#: name: (values, indices, dense_shape of the IndexedSlices).
INPUTS: dict[str, tuple[np.ndarray, list[int], tuple[int, ...]]] = {
    # a hybrid COO tensor (one sparse dim) with row 0 stored twice, as nn.Embedding(sparse=True)
    "rows": (np.array([[3.0, 4.0], [1.0, 2.0], [0.5, -1.0]], f32), [0, 2, 0], (4, 2)),
    # the same layout coalesced (sorted, unique rows): torch's autograd follows its values
    "rows_unique": (np.array([[3.0, 4.0], [-1.0, 2.0], [0.5, 1.0]], f32), [0, 1, 3], (4, 2)),
    # a 2x3 COO matrix (two sparse dims) with position 1 stored twice
    "flat": (np.array([3.0, -4.0, 1.0, 12.0], f32), [1, 5, 3, 1], (6,)),
    # a 2x3 CSR matrix (row-major order) and a CSC one (column-major order)
    "csr": (np.array([2.0, -1.0, 4.0, 0.5], f32), [0, 2, 4, 5], (6,)),
    "csc": (np.array([1.0, -2.0, 3.0, 4.0], f32), [0, 4, 2, 5], (6,)),
    # 4x4 BSR and BSC matrices of 2x2 blocks: blocks (0, 1) and (1, 0) of the 2x2 block grid
    "bsr": (np.arange(1.0, 9.0, dtype=f32).reshape(2, 2, 2) - 3, [1, 2], (4, 2, 2)),
    "bsc": (np.array([[[0.5, -2], [1, 3]], [[-1.5, 0], [4, 0.25]]], f32), [2, 1], (4, 2, 2)),
}

#: A dense array beside the sparse one in ``t_list`` (with a ``None``).
OTHER = np.array([12.0], f32)

#: clip_by_value's bounds, and the clip_norm of clip_by_norm and clip_by_global_norm.
BOUNDS = (-0.5, 2.5)
CLIP_NORM = 2.0


def _weights(shape: Any) -> Any:
    return np.arange(1, int(np.prod(shape)) + 1, dtype=f32).reshape(shape)


def run_tf(values: np.ndarray, indices: list[int], dense_shape: tuple[int, ...]) -> dict:
    """TF's results on one input (see the module docstring for the keys)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    v = tf.constant(values)
    idx = tf.constant(indices, tf.int64)
    shape = tf.constant(dense_shape, tf.int64)
    other = tf.constant(OTHER)

    def sl(vals: Any) -> Any:
        return tf.IndexedSlices(vals, idx, shape)

    def clip_by_global_norm(vals: Any) -> Any:
        return tf.clip_by_global_norm([sl(vals), None, other], CLIP_NORM)

    slices: dict[str, Any] = {  # functions returning IndexedSlices
        "clip_by_value": lambda x: tf.clip_by_value(sl(x), *BOUNDS),
        "clip_by_norm": lambda x: tf.clip_by_norm(sl(x), CLIP_NORM),
        "clip_by_norm_axes0": lambda x: tf.clip_by_norm(sl(x), CLIP_NORM, axes=[0]),
        "clip_by_global_norm": lambda x: clip_by_global_norm(x)[0][0],
    }
    if values.ndim > 1:
        slices["clip_by_norm_axes_last"] = lambda x: tf.clip_by_norm(
            sl(x), CLIP_NORM, axes=[values.ndim - 1]
        )
    dense: dict[str, Any] = {  # functions returning dense tensors
        "global_norm": lambda x: tf.linalg.global_norm([sl(x), None, other]),
        "clip_by_global_norm_other": lambda x: clip_by_global_norm(x)[0][2],
        "clip_by_global_norm_norm": lambda x: clip_by_global_norm(x)[1],
        "clip_by_average_norm": lambda x: tf.compat.v1.clip_by_average_norm(sl(x), 1.0),
        "norm": lambda x: tf.norm(sl(x)),
        "l2_normalize": lambda x: tf.math.l2_normalize(sl(x)),
        "normalize": lambda x: tf.linalg.normalize(sl(x))[0],
        "normalize_norm": lambda x: tf.linalg.normalize(sl(x))[1],
    }
    if len(dense_shape) == 2:
        dense["norm_ord1_axis1"] = lambda x: tf.norm(sl(x), ord=1, axis=1)
        dense["l2_normalize_axis1"] = lambda x: tf.math.l2_normalize(sl(x), axis=1)
    out: dict[str, np.ndarray] = {}
    for name, fn in {**slices, **dense}.items():
        with tf.GradientTape() as tape:
            tape.watch(v)
            r = fn(v)
            if name in slices:
                assert isinstance(r, tf.IndexedSlices)
                assert r.indices is idx and r.dense_shape is shape  # untouched
                r = r.values
            else:
                assert isinstance(r, tf.Tensor)
            loss = tf.reduce_sum(r * _weights(r.shape))
        out[name] = r.numpy()
        grad = tape.gradient(loss, v)
        out[f"grad_{name}"] = tf.convert_to_tensor(grad).numpy()
    return out


def main(out: Path) -> None:
    """Write the inputs and TF's results on each to ``out``."""
    arrays: dict[str, np.ndarray] = {"other": OTHER}
    for name, (values, indices, dense_shape) in INPUTS.items():
        arrays[f"{name}/values"] = values
        arrays[f"{name}/indices"] = np.array(indices, np.int64)
        arrays[f"{name}/dense_shape"] = np.array(dense_shape, np.int64)
        for key, value in run_tf(values, indices, dense_shape).items():
            arrays[f"{name}/{key}"] = value
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("sparse.npz"))
