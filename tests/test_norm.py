"""``anyclip.norm`` against docs/tf-reference.md §6 (error paths: test_errors.py).

Budgets in float32: 2 ULP for sums and square roots, 5 ULP for p-norms (pow, §11) and for the
spectral norm (SVD: TF and LAPACK differ by 2 ULP, §6.4). ord 1 / inf on exact data are exact.
"""

from __future__ import annotations

import math
import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip_conformance.budgets import gpu_budget

from .conftest import assert_live_reference

ULP = 2
ULP_POW = 5
ULP_SVD = 5
NAN = math.nan
INF = math.inf
V = [3, -4, 0, 12]
M = [[1, -2], [3, 4]]
CUBE = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


# §6.3: vector ords, axis None.
@pytest.mark.parametrize(
    "ord",
    ["euclidean", 2, 2.0, np.float32(2), np.int64(2)],
    ids=["euclid", "2", "2.0", "f32", "i64"],
)
def test_vector_euclidean(backend, make, check, ord):
    check(anyclip.norm(make(V), ord=ord), np.float32(13), "float32", ULP)


@pytest.mark.parametrize("ord", [1, 1.0, np.int64(1), True], ids=["1", "1.0", "np.int64", "True"])
def test_vector_ord_1(backend, make, check, ord):
    check(anyclip.norm(make(V), ord=ord), np.float32(19), "float32")


@pytest.mark.parametrize("ord", [np.inf, float("inf")], ids=["np.inf", "float"])
def test_vector_ord_inf(backend, make, check, ord):
    check(anyclip.norm(make(V), ord=ord), np.float32(12), "float32")


@pytest.mark.parametrize(("ord", "expected"), [(0.5, 51.784615), (3, 12.207056), (2.5, 12.445443)])
def test_vector_p_norms(backend, make, check, ord, expected):
    check(anyclip.norm(make(V), ord=ord), np.float32(expected), "float32", ULP_POW)


def test_default_ord_positional(backend, make, check):
    check(anyclip.norm(make(V)), np.float32(13), "float32", ULP)


# §6.4: matrix ords on m = [[1,-2],[3,4]], axis (0,1).
@pytest.mark.parametrize(
    ("ord", "expected", "ulp"),
    [
        ("euclidean", 5.477226, ULP),
        ("fro", 5.477226, ULP),
        (1, 6, 0),
        (2, 5.1166735, ULP_SVD),
        (np.inf, 7, 0),
    ],
)
def test_matrix_ords(backend, make, check, ord, expected, ulp):
    check(anyclip.norm(make(M), ord=ord, axis=(0, 1)), np.float32(expected), "float32", ulp)


@pytest.mark.parametrize(("ord", "expected"), [(1, 7), (np.inf, 6)])
def test_matrix_swapped_axes(backend, make, check, ord, expected):
    check(anyclip.norm(make(M), ord=ord, axis=(1, 0)), np.float32(expected), "float32")


@pytest.mark.parametrize("axis", [[0, 1], (-2, -1), (1, 0)], ids=str)
def test_matrix_ord_2_axis_spellings(backend, make, check, axis):
    # §6.4: 5.1166735 for [0,1] and (-2,-1); (1,0) gives 5.116672 in TF (B14), within budget
    check(anyclip.norm(make(M), ord=2, axis=axis), np.float32(5.1166735), "float32", ULP_SVD)


def test_matrix_3d_ord_2(backend, make, check):
    out = anyclip.norm(make(CUBE), ord=2, axis=(0, 2))
    check(out, [27.278746, 36.79501, 47.103096], "float32", ULP_SVD)


def test_matrix_3d_ord_2_keepdims(backend, make, check):
    out = anyclip.norm(make(CUBE), ord=2, axis=(0, 2), keepdims=True)
    check(out, np.array([27.278746, 36.79501, 47.103096]).reshape(1, 3, 1), "float32", ULP_SVD)


def test_matrix_3d_ord_1(backend, make, check):
    check(anyclip.norm(make(CUBE), ord=1, axis=(2, 0)), [54, 70, 86], "float32")
    check(anyclip.norm(make(CUBE), ord=1, axis=(0, 2)), [18, 26, 34], "float32")


def test_matrix_3d_fro(backend, make, check):
    out = anyclip.norm(make(CUBE), ord="fro", axis=(0, 1))
    check(out, [29.664793, 31.717503, 33.82307, 35.97221], "float32", ULP)


def test_matrix_ord_2_matches_svd(backend, make, check):
    rng = np.random.default_rng(8)
    a = rng.standard_normal((3, 5, 4))
    out = anyclip.norm(make(a, "float64"), ord=2, axis=(1, 2))
    check(out, np.linalg.svd(a, compute_uv=False).max(axis=-1), "float64", 8)


# §6.5 / trap 1: axis=None flattens whatever the rank.
@pytest.mark.parametrize(
    ("ord", "expected", "ulp"),
    [("euclidean", 5.477226, ULP), (1, 10, 0), (2, 5.477226, ULP), (np.inf, 4, 0)],
)
def test_2d_axis_none_is_vector_norm(backend, make, check, ord, expected, ulp):
    check(anyclip.norm(make(M), ord=ord), np.float32(expected), "float32", ulp)


def test_3d_axis_none(backend, make, check):
    check(anyclip.norm(make(CUBE)), np.float32(65.757126), "float32", ULP)
    check(anyclip.norm(make(CUBE), ord=3), np.float32(42.39091), "float32", ULP_POW)


# §6.6: axis kinds and keepdims.
def test_axis_0_and_minus_1(backend, make, check):
    check(anyclip.norm(make(M), axis=0), [3.1622777, 4.472136], "float32", ULP)
    check(anyclip.norm(make(M), axis=-1), [2.236068, 5.0], "float32", ULP)


def test_axis_true_is_1(backend, make, check):
    check(anyclip.norm(make(M), axis=True), [2.236068, 5.0], "float32", ULP)


def test_keepdims_axis_none(backend, make, check):
    check(anyclip.norm(make(M), keepdims=True), [[5.477226]], "float32", ULP)


@pytest.mark.parametrize("keepdims", [True, 1])
def test_keepdims_axis_0(backend, make, check, keepdims):
    out = anyclip.norm(make(M), axis=0, keepdims=keepdims)
    check(out, [[3.1622777, 4.472136]], "float32", ULP)


def test_keepdims_none_is_false(backend, make, check):
    check(anyclip.norm(make(M), keepdims=None), np.float32(5.477226), "float32", ULP)


def test_keepdims_matrix(backend, make, check):
    out = anyclip.norm(make(M), ord=2, axis=(0, 1), keepdims=True)
    check(out, [[5.1166735]], "float32", ULP_SVD)


def test_zero_d(backend, make, check):
    check(anyclip.norm(make(-3.0)), np.float32(3), "float32")
    check(anyclip.norm(make(-3.0), ord=1), np.float32(3), "float32")


def test_only_reduced_axis_squeezed(backend, make, check):
    check(anyclip.norm(make(np.ones((1, 1, 3))), axis=2), [[1.7320508]], "float32", ULP)
    check(anyclip.norm(make(np.ones((1, 3))), ord=np.inf, axis=1), [1.0], "float32")


# §6.7: dtypes.
@pytest.mark.parametrize(
    ("dtype", "ulp"), [("float16", 1), ("bfloat16", 1), ("float32", ULP), ("float64", ULP)]
)
def test_float_dtypes_euclidean(backend, make, check, dtype, ulp):
    check(anyclip.norm(make([3, 4], dtype)), np.float32(5), dtype, ulp)


@pytest.mark.parametrize(
    ("dtype", "expected", "ulp"),
    [
        ("float16", 4.496, 1),
        ("bfloat16", 4.5, 1),
        ("float32", 4.4979415, ULP_POW),
        ("float64", 91 ** (1 / 3), ULP_POW),
    ],
)
def test_float_dtypes_ord_3(backend, make, check, dtype, expected, ulp):
    check(anyclip.norm(make([3, 4], dtype), ord=3), np.float64(expected), dtype, ulp)


@pytest.mark.parametrize(("ord", "expected"), [("euclidean", INF), (1, 300), (np.inf, 300)])
def test_float16_overflow(backend, make, check, ord, expected):
    check(anyclip.norm(make([300, 0], "float16"), ord=ord), np.float16(expected), "float16")


def test_float16_ord_3(backend, make, check):
    check(anyclip.norm(make([30, 0], "float16"), ord=3), np.float16(29.98), "float16", 1)


# §6.7 / trap 14: integer input with ord 1 / inf stays integer.
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
@pytest.mark.parametrize(("ord", "expected"), [(1, 7), (np.inf, 4)])
def test_int_ord_1_inf(backend, make, check, dtype, ord, expected):
    out = anyclip.norm(make([3, -4], dtype), ord=ord)
    check(out, np.asarray(expected, dtype=dtype), dtype)


def test_int_matrix_ord_1(backend, make, check):
    out = anyclip.norm(make(M, "int32"), ord=1, axis=(0, 1))
    check(out, np.int32(6), "int32")


def test_int_axis(backend, make, check):
    out = anyclip.norm(make([[3, -4], [-1, 2]], "int32"), ord=1, axis=1)
    check(out, [7, 3], "int32")


# §6.7 / B11: complex input, euclidean / 2 / fro return complex; the others real.
@pytest.mark.parametrize("ord", ["euclidean", 2])
def test_complex64_euclidean_is_complex(backend, make, check, ord):
    out = anyclip.norm(make([3 + 4j, 0], "complex64"), ord=ord)
    check(out, np.complex64(5 + 0j), "complex64", ULP)


@pytest.mark.parametrize(
    ("ord", "expected", "ulp"),
    [(1, 5, ULP), (np.inf, 5, 0), (3, 5.0000005, ULP_POW), (0.5, 5, ULP_POW)],
)
def test_complex64_other_ords_are_real(backend, make, check, ord, expected, ulp):
    out = anyclip.norm(make([3 + 4j, 0], "complex64"), ord=ord)
    check(out, np.float32(expected), "float32", ulp)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("ord", [1, np.inf, 3])
@pytest.mark.parametrize(
    "entry",
    [complex(math.nan, math.inf), complex(math.inf, math.nan), complex(math.nan, -math.inf)],
    ids=str,
)
def test_complex_entry_with_an_infinite_part_has_an_infinite_size(
    backend, make, check, dtype, ord, entry
):
    # C99's |z| (TF 2.21 measured: tf.norm([entry, 1+1j], ord) is inf for these three ords and
    # both dtypes; JAX's abs gave NaN)
    real = "float32" if dtype == "complex64" else "float64"
    check(anyclip.norm(make([entry, 1 + 1j], dtype), ord=ord), np.inf, real)


def test_complex128(backend, make, check):
    check(anyclip.norm(make([3 + 4j], "complex128")), np.complex128(5), "complex128", ULP)


@pytest.mark.parametrize(
    ("ord", "expected", "dtype", "ulp"),
    [
        ("fro", 2.6457512 + 0j, "complex64", ULP),
        ("euclidean", 2.6457512 + 0j, "complex64", ULP),
        (1, 3, "float32", ULP),
        (np.inf, 3.4142137, "float32", ULP),
        (2, 2.5887375, "float32", ULP_SVD),
    ],
)
def test_complex64_matrix(backend, make, check, ord, expected, dtype, ulp):
    out = anyclip.norm(make([[1 + 1j, 2], [0, 1j]], "complex64"), ord=ord, axis=(0, 1))
    check(out, np.asarray(expected, dtype=dtype), dtype, ulp)


# §6.8: special values.
@pytest.mark.parametrize(("ord", "expected"), [("euclidean", 0), (1, 0), (3, 0), (np.inf, -INF)])
def test_empty(backend, make, check, ord, expected):
    # B12: ord inf of an empty tensor is -inf (the identity of max)
    check(anyclip.norm(make(np.zeros(0)), ord=ord), np.float32(expected), "float32")


def test_empty_axis_ord_inf(backend, make, check):
    out = anyclip.norm(make(np.zeros((0, 3))), ord=np.inf, axis=0)
    check(out, [-INF, -INF, -INF], "float32")


@pytest.mark.parametrize(("ord", "expected"), [(2, -INF), (1, 0)])
def test_empty_matrix(backend, make, check, ord, expected):
    out = anyclip.norm(make(np.zeros((0, 3))), ord=ord, axis=(0, 1))
    check(out, np.float32(expected), "float32")


@pytest.mark.parametrize("ord", ["euclidean", 1, 3, np.inf])
@pytest.mark.parametrize("t", [[NAN, 1], [1, NAN]])
def test_nan(backend, make, check, ord, t):
    check(anyclip.norm(make(t), ord=ord), np.float32(NAN), "float32")


def test_nan_inf_ord_inf(backend, make, check):
    check(anyclip.norm(make([NAN, INF]), ord=np.inf), np.float32(NAN), "float32")


def test_inf(backend, make, check):
    check(anyclip.norm(make([INF, 1])), np.float32(INF), "float32")
    check(anyclip.norm(make([-INF, 1]), ord=3), np.float32(INF), "float32")


def test_overflow_no_scaling(backend, make, check):
    check(anyclip.norm(make([1e20, 1e20])), np.float32(INF), "float32")
    check(anyclip.norm(make([10, 1]), ord=100), np.float32(INF), "float32")


def test_underflow(backend, make, check):
    check(anyclip.norm(make([1e-30, 1e-30])), np.float32(0), "float32")
    check(anyclip.norm(make([-0.0])), np.float32(0), "float32")


# independent float64 formulas on random data
@pytest.mark.parametrize("ord", ["euclidean", 1, np.inf, 3, 0.5])
def test_random_vector_float64(backend, make, check, ord):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((6, 7))
    out = anyclip.norm(make(a, "float64"), ord=ord, axis=-1)
    if ord == "euclidean":
        expected = np.sqrt(np.sum(a * a, axis=-1))
    elif ord == np.inf:
        expected = np.max(np.abs(a), axis=-1)
    else:
        expected = np.sum(np.abs(a) ** ord, axis=-1) ** (1 / ord)
    check(out, expected, "float64", ULP_POW)


# ------------------- sums of squares TF does not halve, below twice the smallest normal number
#: TF 2.21's ``norm``, ``clip_by_norm`` and ``l2_normalize`` of bfloat16 arrays accumulated in
#: float32 (``tests/data/make_unhalved_sums.py``; re-checked live with ``--live-tf``): one
#: element whose square is normal and whose half is not. anyclip took the sum as half a sum,
#: then doubled it: 0 on XLA:CPU (which flushes the half: the norm 0, ``clip_by_norm``
#: unclipped, ``l2_normalize`` 1.095 where TF gives 1). And float16 subnormal squares, which
#: anyclip halved one by one (``l2_loss``'s rounding: 0.0026 where TF's norm is 0.00305).
UNHALVED_SCRIPT = Path(__file__).with_name("data") / "make_unhalved_sums.py"
UNHALVED = dict(np.load(UNHALVED_SCRIPT.with_name("unhalved_sums.npz")))
unhalved = SimpleNamespace(**runpy.run_path(str(UNHALVED_SCRIPT)))


def _accumulated(fn: str, x: Any, arg: float, acc: str) -> Any:
    """``fn`` of ``x`` with ``accumulate_dtype=acc`` (``arg``: clip_norm or epsilon)."""
    if fn == "norm":
        return anyclip.norm(x, accumulate_dtype=acc)
    if fn == "clip_by_norm":
        return anyclip.clip_by_norm(x, arg, accumulate_dtype=acc)
    return anyclip.l2_normalize(x, epsilon=arg, accumulate_dtype=acc)


@pytest.mark.parametrize("case", list(unhalved.CASES))
def test_accumulated_sum_of_squares_is_not_halved(backend, make, check, case):
    fn, _, _, dtype, acc = unhalved.CASES[case]
    backend.dtype(acc)  # skips where the library has no such dtype
    x = make(UNHALVED[f"{case}/x"], dtype)
    arg = float(UNHALVED[f"{case}/arg"])
    out = _accumulated(fn, x, arg, acc)
    ulp = gpu_budget("device-sum-order", backend.name, 0, acc) + gpu_budget(
        "xla-gpu-float32", backend.name, 0, acc
    )
    check(out, UNHALVED[f"{case}/out"], dtype, ulp, case)


@pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
@pytest.mark.parametrize("case", list(unhalved.CASES))
def test_accumulated_sum_of_squares_is_not_halved_while_recording_a_gradient(
    backend, make, check, case
):
    # torch adds float32/float64 sums in TF's order in autograd-recorded operations while a
    # gradient is recorded (TorchKernels.tf_order_squares); those sums must not be halved
    # either: a merge left them halved, and norm([300, 0]) in float32 was 212.125 with
    # requires_grad=True (300 without)
    fn, _, _, dtype, acc = unhalved.CASES[case]
    backend.dtype(acc)
    x = make(UNHALVED[f"{case}/x"], dtype).requires_grad_(True)
    arg = float(UNHALVED[f"{case}/arg"])
    out = _accumulated(fn, x, arg, acc)
    ulp = gpu_budget("device-sum-order", backend.name, 0, acc)
    check(out.detach(), UNHALVED[f"{case}/out"], dtype, ulp, case)


@pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
@pytest.mark.parametrize("fn", ["norm", "clip_by_norm", "l2_normalize"])
def test_accumulated_norm_of_normal_values_while_recording_a_gradient(backend, make, fn):
    # the same with values far from the subnormal range: float16 [300, 0] accumulated in
    # float32, whose norm is 300 exactly (TF: tf.norm(cast([300, 0], float32)) = 300)
    x = make([300.0, 0.0], "float16").requires_grad_(True)
    want = {"norm": 300.0, "clip_by_norm": [1.0, 0.0], "l2_normalize": [1.0, 0.0]}[fn]
    out = _accumulated(fn, x, 1.0 if fn == "clip_by_norm" else 1e-12, "float32")
    np.testing.assert_array_equal(backend.to_numpy(out.detach()), np.asarray(want, "float16"))


@pytest.mark.live_tf
def test_unhalved_sums_file_is_tfs(tmp_path):
    assert_live_reference(UNHALVED_SCRIPT, UNHALVED, tmp_path)
