"""Mathematical properties with hypothesis, on NumPy, PyTorch and JAX.

Inputs are float32 arrays with moderate magnitudes (no overflow of squares: |x| <= 1e3), so the
properties are those of the exact functions, up to a small relative tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import anyclip
from anyclip_conformance import assert_array

pytestmark = pytest.mark.parametrize("backend", ["numpy", "torch", "jax"], indirect=True)

SETTINGS = settings(
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
EPS32 = float(np.finfo(np.float32).eps)

# zero, or 1e-6 <= |x| <= 1e3: no subnormal intermediate results (t*c with c >= 1e-3)
elements = st.one_of(
    st.just(0.0),
    st.floats(9.999999974752427e-07, 1e3, width=32),
    st.floats(-1e3, -9.999999974752427e-07, width=32),
)
arrays = hnp.arrays(
    np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5), elements=elements
)
nonempty_2d = hnp.arrays(
    np.float32, hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=6), elements=elements
)
positive = st.floats(0.0010000000474974513, 1e3, width=32)  # 1e-3 rounded to float32


def norm64(x, axis=None, keepdims=False) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))


@SETTINGS
@given(x=arrays, c=positive)
def test_clip_by_norm_bounds_the_norm(backend, x, c):
    out = backend.to_numpy(anyclip.clip_by_norm(backend.asarray(x), c))
    assert norm64(out) <= c * (1 + 8 * EPS32)


@SETTINGS
@given(x=arrays, c=positive)
def test_clip_by_norm_keeps_direction_and_small_inputs(backend, x, c):
    out = anyclip.clip_by_norm(backend.asarray(x), c)
    n = norm64(x)
    scale = min(1.0, float(np.float32(c)) / n) if n > 0 else 1.0
    assert_array(out, x.astype(np.float64) * scale, backend=backend, dtype="float32", ulp=8)


@SETTINGS
@given(x=nonempty_2d, c=positive)
def test_clip_by_norm_per_row(backend, x, c):
    out = backend.to_numpy(anyclip.clip_by_norm(backend.asarray(x), c, axes=1))
    assert np.all(norm64(out, axis=1) <= c * (1 + 8 * EPS32))


@SETTINGS
@given(x=arrays, lo=elements, hi=elements)
def test_clip_by_value_formula_and_idempotence(backend, x, lo, hi):
    t = backend.asarray(x)
    once = anyclip.clip_by_value(t, lo, hi)
    twice = anyclip.clip_by_value(once, lo, hi)
    expected = np.maximum(np.minimum(x, np.float32(hi)), np.float32(lo))
    assert_array(once, expected, backend=backend, dtype="float32", what="clip once")
    assert_array(twice, expected, backend=backend, dtype="float32", what="clip twice")


@SETTINGS
@given(x=arrays, lo=st.integers(-1000, 0), hi=st.integers(0, 1000))
def test_clip_by_value_within_bounds_int(backend, x, lo, hi):
    xi = x.astype(np.int32)
    out = anyclip.clip_by_value(backend.asarray(xi), lo, hi)
    assert_array(out, np.clip(xi, lo, hi), backend=backend, dtype="int32")  # lo <= hi here
    assert np.all((backend.to_numpy(out) >= lo) & (backend.to_numpy(out) <= hi))


@SETTINGS
@given(x=nonempty_2d, k=st.integers(-4, 4))
def test_l2_normalize_scale_invariance(backend, x, k):
    # scaling by 2**k is exact, so the squared norm scales exactly by 4**k
    assume(np.all(np.sum(x.astype(np.float64) ** 2, axis=1) > 1e-4))
    a = anyclip.l2_normalize(backend.asarray(x), axis=1)
    b = anyclip.l2_normalize(backend.asarray(x * np.float32(2.0**k)), axis=1)
    assert_array(b, backend.to_numpy(a), backend=backend, dtype="float32", ulp=4)


@SETTINGS
@given(x=nonempty_2d)
def test_l2_normalize_unit_norm(backend, x):
    out = backend.to_numpy(anyclip.l2_normalize(backend.asarray(x), axis=1))
    ss = np.sum(x.astype(np.float64) ** 2, axis=1)
    n = norm64(out, axis=1)
    big = ss >= 1e-12
    assert np.all(np.abs(n[big] - 1.0) <= 8 * EPS32), n
    assert np.all(n[~big] <= 1.0 + 8 * EPS32), n


@SETTINGS
@given(xs=st.lists(arrays, min_size=1, max_size=4), c=positive)
def test_clip_by_global_norm_bounds_the_global_norm(backend, xs, c):
    out, g = anyclip.clip_by_global_norm([backend.asarray(x) for x in xs], c)
    g_np = float(backend.to_numpy(g))
    exact = float(np.sqrt(sum(norm64(x) ** 2 for x in xs)))
    assert abs(g_np - exact) <= 8 * EPS32 * exact
    total = np.sqrt(sum(norm64(backend.to_numpy(o)) ** 2 for o in out))
    assert total <= c * (1 + 8 * EPS32)
    same = backend.to_numpy(anyclip.global_norm([backend.asarray(x) for x in xs]))
    assert same == g_np  # the returned norm is global_norm(t_list)


@SETTINGS
@given(x=arrays, c=positive)
def test_clip_by_average_norm_bounds_the_average_norm(backend, x, c):
    out = backend.to_numpy(anyclip.clip_by_average_norm(backend.asarray(x), c))
    if x.size:
        assert norm64(out) / x.size <= c * (1 + 8 * EPS32)


@SETTINGS
@given(x=arrays, k=st.integers(-4, 4), ord=st.sampled_from(["euclidean", 1, np.inf]))
def test_norm_homogeneity(backend, x, k, ord):
    a = anyclip.norm(backend.asarray(x), ord=ord)
    b = anyclip.norm(backend.asarray(x * np.float32(2.0**k)), ord=ord)
    expected = backend.to_numpy(a) * np.float32(2.0**k)
    assert_array(b, expected, backend=backend, dtype="float32", ulp=0)


@SETTINGS
@given(x=arrays, ord=st.sampled_from(["euclidean", 1, np.inf, 3, 1.5]))
def test_norm_matches_float64(backend, x, ord):
    out = anyclip.norm(backend.asarray(x), ord=ord)
    a = np.abs(x.astype(np.float64)).ravel()
    if ord == "euclidean":
        expected = np.sqrt(np.sum(a * a))
    elif ord == np.inf:
        expected = np.max(a) if a.size else -np.inf
    else:
        expected = np.sum(a**ord) ** (1 / ord)
    got = float(backend.to_numpy(out))
    assert abs(got - expected) <= 16 * EPS32 * abs(expected) or got == expected


@SETTINGS
@given(x=nonempty_2d, ord=st.sampled_from(["euclidean", 1, np.inf]))
def test_normalize_is_x_over_norm(backend, x, ord):
    assume(np.all(np.max(np.abs(x), axis=1) > 1e-3))
    normalized, norm = anyclip.normalize(backend.asarray(x), ord=ord, axis=1)
    a = np.abs(x.astype(np.float64))
    if ord == "euclidean":
        exact = np.sqrt(np.sum(a * a, axis=1, keepdims=True))
    elif ord == 1:
        exact = np.sum(a, axis=1, keepdims=True)
    else:
        exact = np.max(a, axis=1, keepdims=True)
    assert_array(norm, exact, backend=backend, dtype="float32", ulp=4, what="norm")
    assert_array(normalized, x / exact, backend=backend, dtype="float32", ulp=6, what="normalized")
