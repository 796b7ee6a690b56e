"""``anyclip.l2_normalize`` (§7) and ``anyclip.normalize`` (§8) against docs/tf-reference.md.

Budgets: 3 ULP for l2_normalize in float32 (TF's vectorised rsqrt, §11); normalize divides by
``tf.norm`` (§8.1), 2 ULP (3 with the spectral norm). Error paths are in test_errors.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import anyclip

ULP = 3
ULP_DIV = 2
NAN = math.nan
INF = math.inf
M = [[3.0, 4.0], [6.0, 8.0]]
M_ALL = [[0.26832816, 0.3577709], [0.5366563, 0.7155418]]


def l2_formula(x: np.ndarray, axis=None, epsilon=1e-12) -> np.ndarray:
    """§7.1 in float64 NumPy: x / sqrt(max(sum(x*x), epsilon))."""
    x = np.asarray(x, dtype=np.float64)
    ss = np.sum(x * x, axis=axis, keepdims=True)
    return x / np.sqrt(np.maximum(ss, epsilon))


# ------------------------------------------------------------------ l2_normalize (§7)
@pytest.mark.parametrize(
    ("dtype", "expected", "ulp"),
    [
        ("float16", [0.5996, 0.8], 1),
        ("bfloat16", [0.601562, 0.800781], 1),
        ("float32", [0.6, 0.8], ULP),
        ("float64", [0.6, 0.8], ULP),
    ],
)
def test_l2_dtypes(backend, make, check, dtype, expected, ulp):
    check(anyclip.l2_normalize(make([3, 4], dtype)), expected, dtype, ulp)


@pytest.mark.parametrize("axis", [None, [0, 1], (0, 1)], ids=str)
def test_l2_axis_all(backend, make, check, axis):
    # §7.2 / trap 3: axis None normalizes over every element
    check(anyclip.l2_normalize(make(M), axis=axis), M_ALL, "float32", ULP)


def test_l2_axis_0(backend, make, check):
    expected = [[0.4472136, 0.4472136], [0.8944272, 0.8944272]]
    check(anyclip.l2_normalize(make(M), axis=0), expected, "float32", ULP)


@pytest.mark.parametrize("axis", [1, -1, np.int64(1), [1]], ids=str)
def test_l2_axis_1(backend, make, check, axis):
    check(anyclip.l2_normalize(make(M), axis=axis), [[0.6, 0.8], [0.6, 0.8]], "float32", ULP)


def test_l2_dim(backend, make, check):
    # §7.1: the deprecated `dim` is an alias of `axis`
    check(anyclip.l2_normalize(make(M), dim=1), [[0.6, 0.8], [0.6, 0.8]], "float32", ULP)


def test_l2_axis_empty_is_elementwise(backend, make, check):
    check(anyclip.l2_normalize(make(M), axis=[]), [[1, 1], [1, 1]], "float32", ULP)


def test_l2_zero_d(backend, make, check):
    check(anyclip.l2_normalize(make(-3.0)), np.float32(-1), "float32", ULP)


def test_l2_empty(backend, make, check):
    check(anyclip.l2_normalize(make(np.zeros(0))), np.zeros(0), "float32")
    check(anyclip.l2_normalize(make(np.zeros((2, 0))), axis=1), np.zeros((2, 0)), "float32")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float64"])
def test_l2_zero_vector(backend, make, check, dtype):
    check(anyclip.l2_normalize(make([0, 0], dtype)), [0, 0], dtype)


def test_l2_signed_zeros_kept(backend, make, check):
    out = anyclip.l2_normalize(make([-0.0, 0.0]))
    check(out, [0, 0], "float32")
    assert list(np.signbit(backend.to_numpy(out))) == [True, False]


# §7.2 / trap 3: epsilon floors the squared norm (a norm floor of 1e-6).
def test_l2_below_floor(backend, make, check):
    check(anyclip.l2_normalize(make([1e-7, 0])), [0.1, 0], "float32", ULP)


def test_l2_at_floor(backend, make, check):
    check(anyclip.l2_normalize(make([1e-6, 0])), [1, 0], "float32", ULP)


@pytest.mark.parametrize("epsilon", [0, -1, 0.0, -1.0])
def test_l2_nonpositive_epsilon_zero_vector(backend, make, check, epsilon):
    check(anyclip.l2_normalize(make([0, 0]), epsilon=epsilon), [NAN, NAN], "float32")


def test_l2_negative_epsilon(backend, make, check):
    check(anyclip.l2_normalize(make([3, 4]), epsilon=-1), [0.6, 0.8], "float32", ULP)


def test_l2_large_epsilon(backend, make, check):
    check(anyclip.l2_normalize(make([3, 4]), epsilon=100), [0.3, 0.4], "float32", ULP)


def test_l2_nan_epsilon(backend, make, check):
    check(anyclip.l2_normalize(make([3, 4]), epsilon=NAN), [NAN, NAN], "float32")


def test_l2_epsilon_array(backend, make, check):
    check(anyclip.l2_normalize(make([3, 4]), epsilon=make(1e-12)), [0.6, 0.8], "float32", ULP)


def test_l2_epsilon_python_int(backend, make, check):
    check(anyclip.l2_normalize(make([0, 0]), epsilon=1), [0, 0], "float32")


def test_l2_epsilon_per_element(backend, make, check):
    check(anyclip.l2_normalize(make([0, 0]), epsilon=make([1.0, 4.0])), [0, 0], "float32")
    out = anyclip.l2_normalize(make([3, 4]), axis=[], epsilon=make([100.0, 4.0]))
    check(out, [0.3, 1.0], "float32", ULP)


def test_l2_epsilon_broadcasts_like_the_formula(backend, make, check):
    # §7.1: x * rsqrt(maximum(square_sum, epsilon)) has no shape check, so an epsilon of a larger
    # shape broadcasts the result (as TF)
    out = anyclip.l2_normalize(make([3, 4]), epsilon=make(np.ones((2, 2))))
    check(out, [[0.6, 0.8], [0.6, 0.8]], "float32", ULP)


# §7.2 / B15: float16 epsilon rounds to 0, so a zero vector gives NaN.
def test_l2_float16_zero_vector_is_nan(backend, make, check):
    check(anyclip.l2_normalize(make([0, 0], "float16")), [NAN, NAN], "float16")


def test_l2_float16_square_overflow(backend, make, check):
    check(anyclip.l2_normalize(make([300, 0], "float16")), [0, 0], "float16")


def test_l2_float32_square_overflow(backend, make, check):
    check(anyclip.l2_normalize(make([1e20, 1e20])), [0, 0], "float32")


def test_l2_non_finite(backend, make, check):
    check(anyclip.l2_normalize(make([NAN, 1])), [NAN, NAN], "float32")
    check(anyclip.l2_normalize(make([INF, 1])), [NAN, 0], "float32")


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_l2_complex(backend, make, check, dtype):
    check(anyclip.l2_normalize(make([3 + 4j, 0], dtype)), [0.6 + 0.8j, 0], dtype, ULP)
    check(anyclip.l2_normalize(make([0, 0], dtype)), [0, 0], dtype)


def test_l2_complex128_diagonal(backend, make, check):
    s = 1 / math.sqrt(2)
    check(anyclip.l2_normalize(make([1 + 1j], "complex128")), [s + s * 1j], "complex128", ULP)


def test_l2_complex_axis(backend, make, check):
    rng = np.random.default_rng(10)
    z = rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))
    out = anyclip.l2_normalize(make(z, "complex128"), axis=1)
    ss = np.sum(z.real**2 + z.imag**2, axis=1, keepdims=True)
    check(out, z / np.sqrt(ss), "complex128", ULP)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_l2_random_matches_formula(backend, make, check, dtype):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((64, 33)).astype(dtype)
    out = anyclip.l2_normalize(make(x, dtype), axis=1)
    check(out, l2_formula(x, axis=1), dtype, ULP)


# ------------------------------------------------------------------ normalize (§8)
def test_normalize_vector(backend, make, check):
    normalized, norm = anyclip.normalize(make([3, 4]))
    check(normalized, [0.6, 0.8], "float32", ULP_DIV, what="normalized")
    check(norm, [5], "float32", ULP_DIV, what="norm")


#: Norms whose reciprocal is outside the dtype's normal range, with TF 2.21's results
#: (``tf.linalg.normalize``, measured; re-checked live with ``--live-tf``): XLA rewrote JAX's
#: division by the norm as a product with its reciprocal, which flushed to 0 (float32,
#: bfloat16 and float64 norms above about 8.5e37 and 4.5e307: every quotient 0) or overflowed
#: (float16 norms below about 1.5e-5: inf and NaN). The inf norm of the cube's overflow keeps
#: TF's zeros. (dtype, x, ord, TF's x / norm)
EXTREME_NORMS = [
    ("float32", [2e38, 1e38, 3e37], "inf", [1.0, 0.5, 0.15000000596046448]),
    ("float32", [1e38, -1e38, 5e37], "1", [0.4000000059604645, -0.4000000059604645, 0.2]),
    ("float32", [3e37, 2e38, -1.0], "3", [0.0, 0.0, -0.0]),
    ("bfloat16", [2e38, 1e38, 3e37], "inf", [1.0, 0.5, 0.150390625]),
    ("float64", [1.5e308, -1e308, 3e307], "inf", [1.0, -0.6666666666666666, 0.19999999999999998]),
    ("float64", [1e308, 5e307, -2.5e307], "1", [4 / 7, 2 / 7, -1 / 7]),
    ("float16", [1e-7, 5e-8, 0.0], "1", [0.66650390625, 0.333251953125, 0.0]),
    ("float16", [6e-8, -1.2e-7, 0.0], "inf", [0.5, -1.0, 0.0]),
]


def _ord(name: str) -> float:
    return INF if name == "inf" else float(name)


@pytest.mark.parametrize(("dtype", "x", "ord_", "tf"), EXTREME_NORMS, ids=lambda v: str(v))
def test_normalize_by_a_norm_whose_reciprocal_leaves_the_normal_range(
    backend, make, check, dtype, x, ord_, tf
):
    normalized, _ = anyclip.normalize(make(x, dtype), ord=_ord(ord_))
    check(normalized, tf, dtype, ULP_DIV)
    with anyclip.flush_subnormals():
        flushed, _ = anyclip.normalize(make(x, dtype), ord=_ord(ord_))
    check(flushed, tf, dtype, ULP_DIV, what="flush_subnormals")


@pytest.mark.live_tf
def test_extreme_norms_table_is_tfs():
    tf = pytest.importorskip("tensorflow")
    import ml_dtypes

    for dtype, x, ord_, want in EXTREME_NORMS:
        np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
        got = tf.linalg.normalize(tf.constant(np.array(x, np_dtype)), ord=_ord(ord_))[0]
        got = tf.cast(got, tf.float64).numpy()
        np.testing.assert_array_equal(got, np.array(want, np_dtype).astype(np.float64))
        assert list(np.signbit(got)) == list(np.signbit(want)), (dtype, x, ord_)


#: Complex vectors and TF 2.21's ``tf.linalg.normalize`` of them (measured; re-checked live
#: with ``--live-tf``). TF divides each part by the norm's real part (Eigen's rule for a
#: divisor ``c + 0j``), where NumPy's and torch's complex division multiply by ``1 / c``: one
#: part 1 ULP away in each of these but the last, whose zero's sign comes from ``-0 + -3 * 0``.
#: (dtype, x, ord, TF's x / norm)
COMPLEX_QUOTIENTS = [
    ("complex128", [1 + 2j, 3 - 1j], "euclidean",
     [0.2581988897471611 + 0.5163977794943222j, 0.7745966692414834 - 0.2581988897471611j]),
    ("complex128", [1e30, 1], "1", [1 + 0j, 9.999999999999999e-31 + 0j]),
    ("complex64", [1 + 2j, 3 - 1j], "euclidean",
     [0.25819888710975647 + 0.5163977742195129j, 0.774596631526947 - 0.25819888710975647j]),
    ("complex128", [0.1 + 0.2j, complex(-0.0, -0.3), 0.7], "inf",
     [0.14285714285714288 + 0.28571428571428575j, complex(-0.0, -0.4285714285714286), 1 + 0j]),
    ("complex64", [0.5 - 1.5j, 2 + 0.25j, complex(-0.0, -3.0)], "1",
     [0.07579543441534042 - 0.22738629579544067j, 0.3031817376613617 + 0.03789771720767021j,
      complex(-0.0, -0.45477259159088135)]),
]  # fmt: skip


def _complex_ord(name: str) -> str | float:
    return name if name == "euclidean" else _ord(name)


@pytest.mark.parametrize(("dtype", "x", "ord_", "tf"), COMPLEX_QUOTIENTS, ids=lambda v: str(v))
def test_complex_normalize_divides_each_part_as_tf(backend, make, check, dtype, x, ord_, tf):
    normalized, _ = anyclip.normalize(make(x, dtype), ord=_complex_ord(ord_))
    check(normalized, tf, dtype, 0)
    got = backend.to_numpy(normalized)
    want = np.array(tf, dtype)
    assert list(np.signbit(got.real)) == list(np.signbit(want.real))
    assert list(np.signbit(got.imag)) == list(np.signbit(want.imag))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_normalize_is_each_part_divided_by_the_norm(backend, make, check, dtype):
    # the property behind the table above, on random rows: parts divided by the kept norm
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((8, 33)) * 10 + 1j * rng.standard_normal((8, 33))).astype(dtype)
    normalized, norm = anyclip.normalize(make(x, dtype), ord=1, axis=1)
    c = backend.to_numpy(norm).real
    want = np.empty_like(x)
    want.real, want.imag = x.real / c, x.imag / c
    check(normalized, want, dtype, 0)


@pytest.mark.live_tf
def test_complex_quotients_table_is_tfs():
    tf = pytest.importorskip("tensorflow")
    for dtype, x, ord_, want in COMPLEX_QUOTIENTS:
        got = tf.linalg.normalize(tf.constant(np.array(x, dtype)), ord=_complex_ord(ord_))[0]
        got = got.numpy()
        want = np.array(want, dtype)
        np.testing.assert_array_equal(got, want)
        assert list(np.signbit(got.real)) == list(np.signbit(want.real)), (dtype, x, ord_)


def test_normalize_returns_tuple(backend, make):
    result = anyclip.normalize(make([3, 4]))
    assert isinstance(result, tuple)
    assert len(result) == 2


def test_normalize_matrix_default(backend, make, check):
    normalized, norm = anyclip.normalize(make(M))
    check(normalized, M_ALL, "float32", ULP_DIV, what="normalized")
    check(norm, [[11.18034]], "float32", ULP_DIV, what="norm")


def test_normalize_axis_1(backend, make, check):
    normalized, norm = anyclip.normalize(make(M), axis=1)
    check(normalized, [[0.6, 0.8], [0.6, 0.8]], "float32", ULP_DIV, what="normalized")
    check(norm, [[5], [10]], "float32", ULP_DIV, what="norm")


def test_normalize_ord_1_axis_1(backend, make, check):
    normalized, norm = anyclip.normalize(make(M), ord=1, axis=1)
    expected = [[0.42857143, 0.5714286], [0.42857143, 0.5714286]]
    check(normalized, expected, "float32", ULP_DIV, what="normalized")
    check(norm, [[7], [14]], "float32", 0, what="norm")


def test_normalize_ord_inf_axis_0(backend, make, check):
    normalized, norm = anyclip.normalize(make(M), ord=np.inf, axis=0)
    check(normalized, [[0.5, 0.5], [1, 1]], "float32", 0, what="normalized")
    check(norm, [[6, 8]], "float32", 0, what="norm")


def test_normalize_ord_2_matrix(backend, make, check):
    normalized, norm = anyclip.normalize(make(M), ord=2, axis=(0, 1))
    expected = [[0.2683281, 0.35777083], [0.5366562, 0.71554166]]
    check(normalized, expected, "float32", ULP_DIV + 3, what="normalized")
    check(norm, [[11.180342]], "float32", 5, what="norm")


def test_normalize_fro_list_axis(backend, make, check):
    normalized, norm = anyclip.normalize(make(M), ord="fro", axis=[0, 1])
    check(normalized, M_ALL, "float32", ULP_DIV, what="normalized")
    check(norm, [[11.18034]], "float32", ULP_DIV, what="norm")


def test_normalize_zero_vector_nan(backend, make, check):
    # §8.2 / B16: no epsilon
    normalized, norm = anyclip.normalize(make([0, 0]))
    check(normalized, [NAN, NAN], "float32", what="normalized")
    check(norm, [0], "float32", what="norm")


def test_normalize_int_gives_float64_and_int_norm(backend, make, check):
    # §8.2 / B16: int32 normalized is float64 (true division), the norm stays int32
    normalized, norm = anyclip.normalize(make([3, 4], "int32"), ord=1)
    check(normalized, [3 / 7, 4 / 7], "float64", 0, what="normalized")
    check(norm, [7], "int32", what="norm")


@pytest.mark.parametrize("ord", ["euclidean", 1])
def test_normalize_complex(backend, make, check, ord):
    # §8.2: the norm is cast to complex64
    normalized, norm = anyclip.normalize(make([3 + 4j, 0], "complex64"), ord=ord)
    check(normalized, [0.6 + 0.8j, 0], "complex64", ULP_DIV, what="normalized")
    check(norm, [5 + 0j], "complex64", ULP_DIV, what="norm")


def test_normalize_float16_overflow(backend, make, check):
    normalized, norm = anyclip.normalize(make([300, 0], "float16"))
    check(normalized, [0, 0], "float16", what="normalized")
    check(norm, [INF], "float16", what="norm")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_normalize_dtypes(backend, make, check, dtype):
    normalized, norm = anyclip.normalize(make([3, 4], dtype))
    check(normalized, [0.6, 0.8], dtype, 1, what="normalized")
    check(norm, [5], dtype, 0, what="norm")


@pytest.mark.xfail_backend(
    "jax-gpu",
    reason="1 ULP from TF's correctly rounded division on a GPU (an H200, JAX 0.11.2): XLA's "
    "rewrite of x / broadcast(d) as x * (1 / d) (undone since on the CPU, by an optimization "
    "barrier on the divisor; not yet run on a GPU) or XLA:GPU's float32 division "
    "(div.full.f32, not correctly rounded)",
)
def test_normalize_is_division_by_norm(backend, make, check):
    # §8.1: normalized == x / norm(x, keepdims=True), bit for bit (division, not rsqrt)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((16, 9)).astype(np.float32)
    normalized, norm = anyclip.normalize(make(x), axis=1)
    norm_np = backend.to_numpy(norm)
    check(norm, np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=1, keepdims=True)), "float32", 2)
    check(normalized, x / norm_np, "float32", 0, what="normalized vs x / norm")


def test_normalize_zero_d(backend, make, check):
    # §8.1: norm(keepdims=True) of a 0-d input is 0-d; x / |x|
    normalized, norm = anyclip.normalize(make(-3.0))
    check(normalized, np.float32(-1), "float32", what="normalized")
    check(norm, np.float32(3), "float32", what="norm")


def test_normalize_empty(backend, make, check):
    # §8.1 with §6.8: the norm of an empty vector is 0 (shape [1] with keepdims)
    normalized, norm = anyclip.normalize(make(np.zeros(0)))
    check(normalized, np.zeros(0), "float32", what="normalized")
    check(norm, [0], "float32", what="norm")


def test_normalize_empty_axis(backend, make, check):
    normalized, norm = anyclip.normalize(make(np.zeros((2, 0))), ord=1, axis=1)
    check(normalized, np.zeros((2, 0)), "float32", what="normalized")
    check(norm, np.zeros((2, 1)), "float32", what="norm")
