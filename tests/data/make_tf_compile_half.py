"""TF 2.21's float16 and bfloat16 clipping of a few arrays, for the compiled half-precision test.

Usage: ``python tests/data/make_tf_compile_half.py [OUT.npz]`` (default:
``tf_compile_half.npz`` next to this script). Needs TensorFlow 2.21; ``test_compile.py`` reads
the committed file, and with ``--live-tf`` also runs this script and checks that the file is
still what TF gives.

Inductor computes a chain of fused float16 or bfloat16 operations in float32 and rounds only
what it stores, where TF (and eager torch) round the result of every operation to the dtype:
these are the values every step rounded. The arrays (:func:`inputs`) are large enough that a
skipped rounding shows on many elements (``a``: 1,280 elements, ``b``: 37), and ``big`` is
``[200, -200]``, whose float16 ``l2_loss`` (40,000) is finite but whose global norm overflows
in TF (``40,000 * 2`` is inf in float16: its clipped list is NaN). ``r`` (9,999 random
values) is an array whose float32 sum of squares Inductor adds in another order than eager
torch, to another bfloat16 value. For each dtype ``d``: ``<d>/<case>/<i>``, every output of
the case in order, as float32 (exact for both dtypes).

The gradients (:func:`grad_cases` of :func:`grad_inputs`, live ``tf.GradientTape``):
``<d>/grad/<case>/<i>``, TF's gradient of ``sum(out_j * w_j)`` over the case's outputs in the
arrays ``i`` it takes, every step in the dtype; ``w_j`` are :func:`weights` (random, rounded to
the dtype).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CASE_NAMES",
    "CLIP",
    "DTYPES",
    "GRAD_CASE_NAMES",
    "cases",
    "grad_cases",
    "grad_inputs",
    "inputs",
    "main",
    "weights",
]

DTYPES = ("bfloat16", "float16")
CLIP = 5.0
#: the names of :func:`cases`, in order
CASE_NAMES = (
    "clip_by_norm",
    "clip_by_norm-axes1",
    "clip_by_global_norm",
    "clip_by_global_norm-big",
    "l2_normalize",
    "l2_normalize-axis0",
    "l2_normalize-random",
)

#: the names of :func:`grad_cases`, in order
GRAD_CASE_NAMES = (
    "clip_by_norm",
    "clip_by_global_norm",
    "global_norm",
    "l2_normalize",
    "normalize",
    "norm",
)


def inputs() -> dict[str, np.ndarray]:
    """The float32 arrays, each exact in both dtypes, with sums of squares exact in float32.

    Multiples of 1/8 up to 15/8: every square (``k * k / 64``, ``k * k`` below 2**8) and every
    sum of squares is exact in float32, so that no sum depends on its order (Inductor's differ
    from eager torch's); what is left to round is each operation's result.
    """
    rng = np.random.default_rng(2113)
    return {
        "a": (rng.integers(-15, 16, (32, 40)) / 8).astype(np.float32),
        "b": (rng.integers(-15, 16, 37) / 8).astype(np.float32),
        "big": np.array([200.0, -200.0], np.float32),
        # random: where Inductor's float32 sum of the bfloat16 squares (in its own order) rounds
        # to the other neighbour of eager torch's (with torch 2.13 on an x86-64 CPU)
        "r": np.random.default_rng(3).standard_normal(9999).astype(np.float32),
    }


def cases(tf: Any, x: dict[str, Any]) -> dict[str, list[Any]]:
    """The TF calls (``tf`` the module, ``x`` the arrays of one dtype): name -> outputs."""
    a, b, big, r = x["a"], x["b"], x["big"], x["r"]
    clipped, norm = tf.clip_by_global_norm([a, b], CLIP)
    clipped_big, norm_big = tf.clip_by_global_norm([a, big], CLIP)
    return {
        "clip_by_norm": [tf.clip_by_norm(a, CLIP)],
        "clip_by_norm-axes1": [tf.clip_by_norm(a, CLIP, axes=[1])],
        "clip_by_global_norm": [*clipped, norm],
        "clip_by_global_norm-big": [*clipped_big, norm_big],
        "l2_normalize": [tf.math.l2_normalize(a)],
        "l2_normalize-axis0": [tf.math.l2_normalize(a, axis=0)],
        "l2_normalize-random": [tf.math.l2_normalize(r)],
    }


def grad_inputs() -> dict[str, np.ndarray]:
    """The float32 arrays differentiated: ``a`` random normal values (24 x 50), ``b`` as
    :func:`inputs`' (each rounded to the dtype)."""
    a = np.random.default_rng(5).standard_normal((24, 50)).astype(np.float32)
    return {"a": a, "b": inputs()["b"]}


def grad_cases(tf: Any, a: Any, b: Any) -> dict[str, tuple[list[Any], list[Any]]]:
    """The TF calls differentiated (``a``, ``b``: the arrays of one dtype): name -> (the
    arrays differentiated, the outputs)."""
    clipped, norm = tf.clip_by_global_norm([a, b], CLIP)
    return {
        "clip_by_norm": ([a], [tf.clip_by_norm(a, CLIP)]),
        "clip_by_global_norm": ([a, b], [*clipped, norm]),
        "global_norm": ([a, b], [tf.linalg.global_norm([a, b])]),
        "l2_normalize": ([a], [tf.math.l2_normalize(a)]),
        "normalize": ([a], list(tf.linalg.normalize(a))),
        "norm": ([a], [tf.norm(a)]),
    }


def weights(name: str, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """The float32 weights of case ``name``'s outputs (of ``shapes``): random normal values,
    each to be rounded to the dtype."""
    seed = GRAD_CASE_NAMES.index(name)
    rng = np.random.default_rng(4000 + seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _grads(tf: Any, dtype: Any, a: Any, b: Any) -> dict[str, list[Any]]:
    """TF's gradients of :func:`grad_cases` in ``dtype``: name -> one per array differentiated."""
    out: dict[str, list[Any]] = {}
    for name in GRAD_CASE_NAMES:
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            xs, outs = grad_cases(tf, a, b)[name]
            ws = [tf.cast(w, dtype) for w in weights(name, [tuple(o.shape) for o in outs])]
            loss = tf.add_n([tf.reduce_sum(o * w) for o, w in zip(outs, ws, strict=True)])
        out[name] = tape.gradient(loss, xs)
    return out


def main(out: Path) -> None:
    """Write the outputs and their provenance to ``out``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    arrays: dict[str, np.ndarray] = {}
    for d in DTYPES:
        x = {k: tf.cast(tf.constant(v), getattr(tf, d)) for k, v in inputs().items()}
        calls = cases(tf, x)
        assert tuple(calls) == CASE_NAMES, tuple(calls)
        for name, outs in calls.items():
            for i, o in enumerate(outs):
                arrays[f"{d}/{name}/{i}"] = tf.cast(o, tf.float32).numpy()
        g = {k: tf.cast(tf.constant(v), getattr(tf, d)) for k, v in grad_inputs().items()}
        for name, grads in _grads(tf, getattr(tf, d), g["a"], g["b"]).items():
            for i, gr in enumerate(grads):
                arrays[f"{d}/grad/{name}/{i}"] = tf.cast(gr, tf.float32).numpy()
    arrays["provenance"] = np.asarray(
        f"tensorflow {tf.__version__}, numpy {np.__version__}; tests/data/make_tf_compile_half.py"
    )
    np.savez_compressed(out, **arrays)


if __name__ == "__main__":
    main(
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("tf_compile_half.npz")
    )
