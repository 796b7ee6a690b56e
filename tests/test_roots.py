"""The square roots of norms are correctly rounded, as TF's (IEEE ``sqrt``) on every backend.

torch's CPU ``sqrt`` is not (its x86-64 wheels take MKL's vector math: 1 ULP off on about a
fifth of float32 inputs and 1 in 80 float64 ones, measured with torch 2.13); anyclip takes
float32 roots in float64 and corrects float64 roots (``anyclip._numerics._torch_sqrt64``).
The reference is Python's ``math.sqrt`` (IEEE double, correctly rounded), and NumPy's float32
``sqrt`` for float32.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import anyclip
from anyclip._numerics import sqrt


def _values(dtype: str) -> np.ndarray:
    """Normal values over the dtype's whole range, values near 1, and the edges.

    No subnormals: TF's CPU kernels flush them (a declared difference of the backends that
    keep them, tested in ``test_subnormals``), which is not what this file checks.
    """
    rng = np.random.default_rng(41)
    info = np.finfo(dtype)
    lo, hi = math.log(float(info.smallest_normal)), math.log(float(info.max))
    wide = np.exp(rng.uniform(lo + 0.01, hi - 0.01, 20_000))
    near = rng.uniform(0.5, 8.0, 20_000)
    edges = [0.0, -0.0, 1.0, 4.0, math.inf, float(info.smallest_normal), float(info.max)]
    return np.concatenate([wide, near, edges]).astype(dtype)


def _reference(v: np.ndarray) -> np.ndarray:
    if v.dtype == np.float32:
        return np.sqrt(v)  # NumPy's float32 sqrt is the CPU's, correctly rounded
    return np.array([math.sqrt(float(a)) for a in v], dtype=np.float64)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sqrt_is_correctly_rounded(backend, make, check, dtype):
    v = _values(dtype)
    check(sqrt(backend.xp, make(v, dtype)), _reference(v), dtype)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_root_gradient_is_tfs_rule(backend, make, check, dtype):
    # TF's SqrtGrad in the dtype, on the correctly rounded root r: torch's own rule used its
    # uncorrected float64 root, and the float32 root's gradient went through the float64 one
    # (26% of float32 gradients 1 ULP off); 0 keeps an infinite gradient. TF's rule is
    # g * (0.5 / r) in Eigen's packets and (g * 0.5) / r on the tail (_tf_sqrt_grad)
    v, g = _root_gradient_case(dtype)
    (got,) = backend.grad(lambda t: sqrt(backend.xp, t), [make(v, dtype)], make(g, dtype))
    check(got, _tf_sqrt_grad(_reference(v), g), dtype)


def _root_gradient_case(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    v = np.concatenate([_values(dtype)[:-3], [0.0]]).astype(dtype)  # no inf or the largest
    g = np.random.default_rng(3).uniform(-3.0, 3.0, v.size).astype(dtype)
    return v, g


def _tf_sqrt_grad(root: np.ndarray, g: np.ndarray) -> np.ndarray:
    """TF 2.21's ``SqrtGrad`` on x86-64 (AVX), by position (checked live below).

    Eigen takes the first ``n - n % packet`` elements in packets (8 float32, 4 float64), where
    the rule is ``g * (0.5 / r)``, and the rest one at a time: ``(0.5 * g) / r``.
    """
    half = g.dtype.type(0.5)
    packet = 8 if g.dtype == np.float32 else 4
    head = g.size // packet * packet
    with np.errstate(divide="ignore"):
        return np.concatenate([g[:head] * (half / root[:head]), (half * g[head:]) / root[head:]])


@pytest.mark.live_tf
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tf_sqrt_grad_is_the_rule_by_position(dtype):
    tf = pytest.importorskip("tensorflow")
    v, g = _root_gradient_case(dtype)
    root = _reference(v)
    got = tf.raw_ops.SqrtGrad(y=tf.constant(root), dy=tf.constant(g)).numpy()
    np.testing.assert_array_equal(got, _tf_sqrt_grad(root, g))


def test_norms_of_one_value_per_row(backend, make, check):
    # tf.norm over a row [v, 0] is the root of the rounded square v * v: Python's float
    # product and math.sqrt give TF's value (torch's float64 sqrt of these sums, which the
    # rows' TF-order sums now feed, is 1 ULP off for about 1 row in 80)
    v = np.random.default_rng(5).uniform(0.1, 100.0, 4000)
    rows = np.stack([v, np.zeros_like(v)], axis=1)
    want = np.array([math.sqrt(a * a) for a in v.tolist()])
    check(anyclip.norm(make(rows, "float64"), axis=1), want, "float64")
