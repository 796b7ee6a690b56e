"""TF 2.21's gradients where its order of rounding shows, run live (GradientTape).

Usage: ``python tests/data/make_tf_gradient_order.py [OUT.npz]`` (default:
``tf_gradient_order.npz`` next to this script). Needs TensorFlow 2.21; ``test_gradients.py``
reads the committed file, and with ``--live-tf`` also runs this script and checks that the file
is still what TF gives.

Each case is the gradient of ``sum(f(x) * w)`` for one of TF's functions ``f``; the cases are
chosen so that nothing but TF's rounding order decides the last bits (found by a differential
fuzz of anyclip's gradients against TF's, 2026-11-29):

* ``sqrt-packets/...``: ``tf.norm``, ``clip_by_norm`` (``clip_norm`` the median norm: about
  half the columns clipped) and ``tf.linalg.normalize`` over an axis that leaves 6 to 29
  norms. TF's ``SqrtGrad`` is ``(0.5 * g) / y`` on one element but
  ``g * (0.5 / y)`` in Eigen's packets (8 float32 or 4 float64 on x86-64 AVX): the leading
  ``n - n % packet`` norms take the packet rule, the tail the scalar one. The reduced axes
  hold two elements (a sum of two addends, the gradient's included, rounds the same in any
  order).
* ``square/...``: ``l2_normalize``, whose ``square(x)`` has one gradient term, ``g * (2 x)``,
  where ``x * x`` gives two. At most 6 norms (TF's float32 ``rsqrt`` of a packet is Eigen's
  approximation, not the correctly rounded root a backend's ``1 / sqrt`` gives).

``x`` holds values of 6 significant bits within a narrow range of exponents (and ``w`` in the
``square`` cases too), so that every square and every sum, the gradient's
``sum(x * w)`` included, is exact whatever the order of its additions: the sums' order (a
backend's own in float32) cannot move a bit here.

The file holds ``cases`` (JSON: for each case its ``name``, ``function``, ``dtype`` and keyword
arguments) and, for each case name ``c``, ``c/x``, ``c/w`` and ``c/grad`` (TF's gradient),
plus ``provenance``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CASES", "main"]

#: (name, function, dtype, shape of x, keyword arguments)
CASES: list[tuple[str, str, str, tuple[int, ...], dict[str, Any]]] = [
    ("sqrt-packets/norm-13", "norm", "float32", (2, 13), {"axis": 0}),
    ("sqrt-packets/norm-29", "norm", "float32", (2, 29), {"axis": 0}),
    ("sqrt-packets/norm-16", "norm", "float32", (2, 16), {"axis": 0}),
    ("sqrt-packets/norm-6-float64", "norm", "float64", (2, 6), {"axis": 0}),
    ("sqrt-packets/norm-14-float64", "norm", "float64", (2, 14), {"axis": 0}),
    ("sqrt-packets/clip_by_norm-29", "clip_by_norm", "float32", (2, 29), {"axes": [0]}),
    ("sqrt-packets/clip_by_norm-15-float64", "clip_by_norm", "float64", (2, 15), {"axes": [0]}),
    ("sqrt-packets/normalize-29", "normalize", "float32", (2, 29), {"axis": 0}),
    ("sqrt-packets/normalize-9-float64", "normalize", "float64", (2, 9), {"axis": 0}),
    ("square/l2_normalize-5", "l2_normalize", "float32", (5,), {}),
    ("square/l2_normalize-17", "l2_normalize", "float32", (17,), {}),
    ("square/l2_normalize-2x3x5-all", "l2_normalize", "float32", (2, 3, 5), {}),
    ("square/l2_normalize-2x3x5-axis2", "l2_normalize", "float32", (2, 3, 5), {"axis": 2}),
    ("square/l2_normalize-4x6-axis1", "l2_normalize", "float32", (4, 6), {"axis": 1}),
    ("square/l2_normalize-17-float64", "l2_normalize", "float64", (17,), {}),
]


def _low_bits(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values of 6 significant bits times one power of two: exact squares and sums."""
    m = rng.integers(-63, 64, shape).astype(np.float64)
    return (m * 2.0 ** int(rng.integers(-8, 4))).astype(dtype)


def inputs(index: int) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``w`` of case ``index`` (seeded by it)."""
    name, function, dtype, shape, kwargs = CASES[index]
    rng = np.random.default_rng([2026, 11, 29, index])
    x = _low_bits(rng, shape, dtype)
    if name.startswith("square/"):
        return x, (rng.integers(-15, 16, shape) / 8.0).astype(dtype)
    reduced = tuple(n for i, n in enumerate(shape) if i != kwargs.get("axis"))
    return x, rng.standard_normal(reduced if function == "norm" else shape).astype(dtype)


def clip_norm(x: np.ndarray) -> float:
    """A ``clip_by_norm`` case's ``clip_norm``: the median norm (about half the columns clip)."""
    return float(np.asarray(np.median(np.sqrt(np.sum(np.square(x), axis=0))), x.dtype))


def tf_function(tf: Any, function: str, kwargs: dict[str, Any]) -> Any:
    """The TF function of a case, with its arguments."""
    if function == "norm":
        return lambda t: tf.norm(t, **kwargs)
    if function == "clip_by_norm":
        return lambda t: tf.clip_by_norm(t, kwargs["clip_norm"], axes=kwargs["axes"])
    if function == "normalize":
        return lambda t: tf.linalg.normalize(t, **kwargs)[0]
    return lambda t: tf.math.l2_normalize(t, **kwargs)


def main(out: Path) -> None:
    """Write TF's gradients and their provenance to ``out``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    arrays: dict[str, np.ndarray] = {}
    cases = []
    for i, (name, function, dtype, _, kwargs) in enumerate(CASES):
        x, w = inputs(i)
        if function == "clip_by_norm":
            kwargs = {**kwargs, "clip_norm": clip_norm(x)}
        v = tf.Variable(x)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf_function(tf, function, kwargs)(v) * w)
        arrays[f"{name}/x"] = x
        arrays[f"{name}/w"] = w
        arrays[f"{name}/grad"] = tape.gradient(loss, v).numpy()
        cases.append({"name": name, "function": function, "dtype": dtype, "kwargs": kwargs})
    arrays["cases"] = np.asarray(json.dumps(cases))
    arrays["provenance"] = np.asarray(
        f"tensorflow {tf.__version__}, numpy {np.__version__}; tests/data/make_tf_gradient_order.py"
    )
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(__file__).with_name("tf_gradient_order.npz")
    )
