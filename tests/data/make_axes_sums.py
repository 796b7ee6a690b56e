"""TF 2.21 on float64 norms over some of the axes: the reference values of ``test_axes_sums.py``.

Usage: ``python tests/data/make_axes_sums.py [OUT.npz]`` (default: ``axes_sums.npz`` next to
this script). Needs TensorFlow 2.21; the tests read the committed file, and with ``--live-tf``
also run this script and check that the file is still what TF gives.

TF's ``reduce_sum`` over some of the axes adds in an order set by the shape it merges the axes
into (one per run of kept or reduced axes): rows as full reductions (their tree's splits on
the whole array's packets), columns by Eigen's four packet accumulators where a packet fits
and one after another elsewhere, the middle axis of three likewise, axes 0 and 2 of three one
after another, more axes after a transpose. ``CASES`` holds a shape and axes for each of those
routes (and their edges: 15 and 16 rows, a row tail, packets that cross a row's end, rows
longer than a leaf of 4,096 that are not a whole number of packets, axes of one element).
Each input is random (``inputs``: from ``SEED``, NumPy's ``default_rng``, scaled exactly);
the file holds their digest (``inputs_sha256``: the tests check that this NumPy generates the
same inputs) and TF's results by the case's index ``<i>``: ``<i>/clip_by_norm`` ``tf.clip_by_norm(x,
CLIP_NORM, axes)``, ``<i>/sum`` ``tf.reduce_sum(x * x, axes, keepdims=True)``, for inputs of
at most ``SMALL`` elements ``<i>/l2_normalize`` ``tf.math.l2_normalize(x, axes)``, and where
the axes are one axis, ``<i>/norm1`` and ``<i>/norm2``: ``tf.norm`` with ``ord=1`` and
``ord=2`` over it (``keepdims=True``), and ``<i>/norm2_grad``: the gradient of the sum of
the latter (``tf.GradientTape``); plus the TensorFlow and NumPy versions
(``versions``). TF runs on its default threads: partial reductions compute each output on
one thread, so their bits do not depend on the thread count.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CASES", "CLIP_NORM", "SEED", "SMALL", "inputs", "inputs_digest", "main", "run_tf"]

#: The random inputs' seed.
SEED = 2026

#: The largest input whose ``l2_normalize`` is stored (the file stays small).
SMALL = 4000

#: ``clip_by_norm``'s bound (the norms are larger: every row or column is clipped).
CLIP_NORM = 0.5

#: ``(shape, axes)``: TF's merged shape and route in the comment.
CASES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((100, 40), (0,)),  # (N, M) over 0: four accumulators, every packet in one row
    ((17, 5), (0,)),  # 17 rows: one row after the four; column 4 one after another
    ((15, 9), (0,)),  # under 16 rows: one after another
    ((500, 7), (0,)),  # long columns, a last column outside the packets
    ((300, 3), (0,)),  # fewer columns than a packet: one after another
    ((20, 301), (0,)),  # wide, a last column outside
    ((10, 300), (1,)),  # (N, M) over 1: one full reduction per row
    ((3, 4099), (1,)),  # rows longer than a leaf, not whole packets: three kinds here
    ((2, 8194), (1,)),  # ... two kinds
    ((27, 10, 4), (1,)),  # (A, B, C) over 1, under 16 rows
    ((5, 33, 7), (1,)),  # over 1: packets that cross a row's end
    ((2, 30, 3, 20), (1, 2)),  # merged to (2, 90, 20) over 1
    ((27, 10, 4), (0, 2)),  # (A, B, C) over 0 and 2: one after another, axis 2 outside
    ((10, 40, 10), (0, 2)),
    ((27, 10, 4), (0, 1)),  # merged to (270, 4) over 0
    ((6, 5, 4, 3), (0, 2)),  # four merged axes: transposed, then rows
    ((2, 3, 4, 5, 6), (1, 3)),
    ((1, 50, 20), (1,)),  # a leading axis of one element dropped
    ((20, 1, 30), (0, 1)),  # an axis of one element joins the run before it
    ((8, 1, 9, 1, 7), (0, 2)),
)


def inputs() -> dict[str, np.ndarray]:
    """Every input, by its key (the case's index), values of both signs and mixed sizes.

    Normal values times 2**-2 to 2**2: scaling by a power of two is exact, so the inputs
    depend on NumPy's random streams alone, not on its ``exp`` (NumPy 1.26's and 2.4's
    ``exp`` differ in the last bit of a fifth of the values an earlier version drew).
    """
    rng = np.random.default_rng(SEED)
    out = {}
    for i, (shape, _) in enumerate(CASES):
        out[str(i)] = np.ldexp(rng.standard_normal(shape), rng.integers(-2, 3, shape))
    return out


def inputs_digest(xs: dict[str, np.ndarray]) -> str:
    """SHA-256 of the inputs' float64 bytes, in the cases' order (stored as ``inputs_sha256``)."""
    h = hashlib.sha256()
    for i in range(len(CASES)):
        h.update(np.ascontiguousarray(xs[str(i)], dtype="<f8").tobytes())
    return h.hexdigest()


def run_tf() -> dict[str, np.ndarray]:
    """TF's results (see the module docstring for the keys)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    out: dict[str, np.ndarray] = {}
    xs = inputs()
    out["inputs_sha256"] = np.array(inputs_digest(xs))
    for key, x in xs.items():
        axes = list(CASES[int(key)][1])
        t = tf.constant(x, tf.float64)
        out[f"{key}/clip_by_norm"] = tf.clip_by_norm(t, CLIP_NORM, axes=axes).numpy()
        if x.size <= SMALL:
            out[f"{key}/l2_normalize"] = tf.math.l2_normalize(t, axis=axes).numpy()
        out[f"{key}/sum"] = tf.reduce_sum(t * t, axis=axes, keepdims=True).numpy()
        if len(axes) == 1:
            for order in (1, 2):
                norm = tf.norm(t, ord=order, axis=axes[0], keepdims=True)
                out[f"{key}/norm{order}"] = norm.numpy()
            with tf.GradientTape() as tape:
                tape.watch(t)
                total = tf.reduce_sum(tf.norm(t, axis=axes[0]))
            out[f"{key}/norm2_grad"] = tape.gradient(total, t).numpy()
    out["versions"] = np.array([tf.__version__, np.__version__])
    return out


def main(out: Path) -> None:
    results: dict[str, Any] = run_tf()
    np.savez_compressed(out, **results)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("axes_sums.npz"))
