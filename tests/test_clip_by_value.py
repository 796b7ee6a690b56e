"""``anyclip.clip_by_value`` against docs/tf-reference.md §1 (error paths: test_errors.py).

clip_by_value is bit-exact in TF's op order (§11), so every comparison here is exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import anyclip

FLOATS = ["float16", "bfloat16", "float32", "float64"]
SIGNED = ["int8", "int16", "int32", "int64"]
UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]


# §1.2: every real dtype keeps its dtype; the TF doc example [[-10,-1,0],[0,2,10]], (-1, 1).
@pytest.mark.parametrize("dtype", FLOATS + SIGNED)
def test_doc_example_every_signed_dtype(backend, make, check, dtype):
    t = make([[-10, -1, 0], [0, 2, 10]], dtype)
    out = anyclip.clip_by_value(t, -1, 1)
    check(out, [[-1, -1, 0], [0, 1, 1]], dtype)


# §1.2: f16 / bf16 / f32 / f64 / ints `[-5,0,5]`, (-1, 3) gives `[-1,0,3]`.
@pytest.mark.parametrize("dtype", FLOATS + SIGNED)
def test_python_int_bounds(backend, make, check, dtype):
    check(anyclip.clip_by_value(make([-5, 0, 5], dtype), -1, 3), [-1, 0, 3], dtype)


# §1.2: uint8 `[0,1,5]`, (1,3) gives `[1,1,3]` (exp_clip_by_value: uint16/32/64 the same).
# torch has no minimum or maximum for uint16/32/64: tests/test_unsigned.py has the routes.
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned(backend, make, check, dtype):
    check(anyclip.clip_by_value(make([0, 1, 5], dtype), 1, 3), [1, 1, 3], dtype)


@pytest.mark.parametrize("dtype", [*FLOATS, "int32"])
def test_array_bounds_same_dtype(backend, make, check, dtype):
    t = make([-5, 0, 5], dtype)
    out = anyclip.clip_by_value(t, make(-1, dtype), make(3, dtype))
    check(out, [-1, 0, 3], dtype)


# exp_clip_by_value "basic": Python float bounds on a float32 tensor.
def test_python_float_bounds(backend, make, check):
    check(anyclip.clip_by_value(make([1.0, 5.0, 9.0]), 2.0, 6.0), [2, 5, 6], "float32")


# exp_clip_by_value: 0-d 7.0, (0, 5) gives 5.0 (0-d); empty inputs keep their shape.
def test_zero_d(backend, make, check):
    check(anyclip.clip_by_value(make(7.0), 0, 5), np.float32(5.0), "float32")


def test_empty(backend, make, check):
    check(anyclip.clip_by_value(make(np.zeros(0)), 0, 5), np.zeros(0), "float32")


def test_empty_with_broadcast_bound(backend, make, check):
    t = make(np.zeros((0, 3)))
    out = anyclip.clip_by_value(t, make([1.0, 2.0, 3.0]), 5.0)
    check(out, np.zeros((0, 3)), "float32")


# §1.4: bounds broadcast as long as they do not enlarge t.
def test_broadcast_min_column(backend, make, check):
    t = make([[-1, 0, 10], [-1, 0, 10]])
    out = anyclip.clip_by_value(t, make([[2.0], [1.0]]), 100.0)
    check(out, [[2, 2, 10], [1, 1, 10]], "float32")


def test_broadcast_max_column(backend, make, check):
    t = make([[-1, 0, 10], [-1, 0, 10]])
    out = anyclip.clip_by_value(t, -100.0, make([[2.0], [1.0]]))
    check(out, [[-1, 0, 2], [-1, 0, 1]], "float32")


def test_broadcast_min_row(backend, make, check):
    t_np = np.array([[-1, 0, 10], [-1, 0, 10]], dtype=np.float64)
    lo = np.array([0.0, 1.0, 2.0])
    t = make(t_np)
    out = anyclip.clip_by_value(t, make(lo), 100.0)
    # independent formula: maximum(minimum(t, max), min)
    check(out, np.maximum(np.minimum(t_np, 100.0), lo), "float32")


def test_broadcast_per_element_bounds(backend, make, check):
    t = make([[-1.0, 0.5], [3.0, -4.0]])
    lo = make([[0.0, 0.0], [-1.0, -3.0]])
    hi = make([[0.25, 1.0], [2.0, 2.0]])
    check(anyclip.clip_by_value(t, lo, hi), [[0.0, 0.5], [2.0, -3.0]], "float32")


# §1.5 / B2: min > max returns min (upper bound applied first, lower bound last).
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_min_greater_than_max_returns_min(backend, make, check, dtype):
    check(anyclip.clip_by_value(make([0, 5, 10], dtype), 6, 4), [6, 6, 6], dtype)


# §1.5: NaN propagates from t and from either bound; infinities clip.
def test_nan_and_inf_in_t(backend, make, check):
    t = make([math.nan, -math.inf, math.inf, 0.5])
    check(anyclip.clip_by_value(t, 0.0, 1.0), [math.nan, 0, 1, 0.5], "float32")


def test_nan_min(backend, make, check):
    out = anyclip.clip_by_value(make([1.0, 2.0, 3.0]), math.nan, 2.0)
    check(out, [math.nan] * 3, "float32")


def test_nan_max(backend, make, check):
    out = anyclip.clip_by_value(make([1.0, 2.0, 3.0]), 0.0, math.nan)
    check(out, [math.nan] * 3, "float32")


def test_infinite_bounds(backend, make, check):
    out = anyclip.clip_by_value(make([1.0, 2.0, 3.0]), -math.inf, math.inf)
    check(out, [1, 2, 3], "float32")


def test_nan_array_bound(backend, make, check):
    out = anyclip.clip_by_value(make([1.0, 2.0, 3.0]), make(math.nan), make(2.0))
    check(out, [math.nan] * 3, "float32")


# §0.2 / §1.3 / B1: out-of-range Python ints wrap in the target dtype, as TF converts them.
def test_int8_bound_1000_wraps(backend, make, check):
    check(anyclip.clip_by_value(make([1, 2], "int8"), 0, 1000), [0, 0], "int8")


def test_uint8_bound_minus_one_wraps(backend, make, check):
    check(anyclip.clip_by_value(make([1, 2], "uint8"), -1, 1), [255, 255], "uint8")


def test_int32_bound_2_pow_40_wraps(backend, make, check):
    out = anyclip.clip_by_value(make([1, 2, 3, 4], "int32"), 0, 2**40)
    check(out, [0, 0, 0, 0], "int32")


def test_int32_numpy_int64_bound_wraps(backend, make, check):
    out = anyclip.clip_by_value(make([1, 2, 3, 4], "int32"), 0, np.int64(2**40))
    check(out, [0, 0, 0, 0], "int32")


# exp_misc: NumPy scalars are values and are cast (truncated towards zero on ints).
def test_numpy_float32_bound_truncated_on_int(backend, make, check):
    out = anyclip.clip_by_value(make([1, 2, 3, 4], "int32"), 0, np.float32(3.7))
    check(out, [1, 2, 3, 3], "int32")


def test_numpy_float64_min_truncated_on_int(backend, make, check):
    out = anyclip.clip_by_value(make([1, 2, 3, 4], "int32"), np.float64(2.5), 10)
    check(out, [2, 2, 3, 4], "int32")


@pytest.mark.parametrize("scalar", [np.float32, np.int64], ids=["np.float32", "np.int64"])
def test_numpy_scalar_bounds_on_int32(backend, make, check, scalar):
    out = anyclip.clip_by_value(make([[1, 2], [3, 4]], "int32"), scalar(1), scalar(3))
    check(out, [[1, 2], [3, 3]], "int32")


@pytest.mark.parametrize("scalar", [np.float64, np.int64], ids=["np.float64", "np.int64"])
def test_numpy_scalar_bounds_on_float32(backend, make, check, scalar):
    out = anyclip.clip_by_value(make([-2.0, 0.5, 2.0]), scalar(-1), scalar(1))
    check(out, [-1, 0.5, 1], "float32")


def test_numpy_float32_bound_on_float64(backend, make, check):
    out = anyclip.clip_by_value(make([1.5], "float64"), np.float32(0), np.float32(1))
    check(out, [1.0], "float64")


# exp_clip_by_value: Python float 0.1 is rounded to t's dtype.
def test_python_float_rounds_to_float32(backend, make, check):
    out = anyclip.clip_by_value(make([0.0, 0.1, 0.2]), 0.1, 0.1)
    check(out, np.full(3, 0.1, dtype=np.float32), "float32")


def test_bfloat16_bound_0_1(backend, make, check):
    # exp_clip_by_value: "bfloat16 t, bound 0.1" gives 0.100098 (= bf16(0.1))
    out = anyclip.clip_by_value(make([0.0], "bfloat16"), 0.1, 1.0)
    check(out, [0.100098], "bfloat16")


# exp_misc: Python 1e6 is inf in float16.
def test_float16_huge_max_is_inf(backend, make, check):
    check(anyclip.clip_by_value(make([1e4], "float16"), 0.0, 1e6), [1e4], "float16")


def test_float16_huge_min_is_inf(backend, make, check):
    check(anyclip.clip_by_value(make([1.0], "float16"), 1e6, 1e7), [math.inf], "float16")


# exp_misc: Python max 1e39 becomes inf in float32.
def test_float32_huge_max(backend, make, check):
    check(anyclip.clip_by_value(make([1e38]), 0.0, 1e39), [1e38], "float32")


# exp_clip_by_value: Python list bounds are converted like Python scalars.
def test_python_list_bound(backend, make, check):
    out = anyclip.clip_by_value(make([-2.0, 0.5, 2.0]), [-1, -1, -1], [1.0, 1.0, 1.0])
    check(out, [-1, 0.5, 1], "float32")


def test_large_random_matches_formula(backend, make, check):
    rng = np.random.default_rng(0)
    t_np = rng.standard_normal((7, 33)).astype(np.float32) * 3
    lo = rng.standard_normal(33).astype(np.float32)
    out = anyclip.clip_by_value(make(t_np), make(lo), 1.5)
    check(out, np.maximum(np.minimum(t_np, np.float32(1.5)), lo), "float32")
