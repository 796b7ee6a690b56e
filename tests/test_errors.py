"""Every error path: the exception class and the argument named in backticks.

Policy (issue 2, docs/tf-reference.md §0.3, trap 18): where TF refuses an input, anyclip raises
``TypeError`` for dtype problems and ``ValueError`` for shape, axis and ord problems, on every
backend, with a message naming the argument (e.g. "`t` must ..."). TF's eager
``InvalidArgumentError`` cases map to the class TF raises in graph mode.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import anyclip


def raises(exc: type[Exception], arg: str):
    """``pytest.raises(exc)`` whose message names ``arg`` (or one of ``a|b``) in backticks.

    An element of a list argument may be named with its index: "`t_list[1]`".
    """
    return pytest.raises(exc, match=rf"`({arg})(\[\d+\])?`")


def foreign(backend, values, dtype="float32"):
    """An array of the same dtype from another library than ``backend``'s."""
    if backend.library == "numpy":
        import array_api_strict as strict

        return strict.asarray(np.asarray(values, dtype=dtype))
    return np.asarray(values, dtype=dtype)


# ------------------------------------------------------------------------ clip_by_value
@pytest.mark.parametrize("dtype", ["bool", "complex64", "complex128"])
def test_clip_by_value_bad_dtype(backend, make, dtype):
    # §1.2: bool / complex are not in TF's list
    t = make([1, 0], dtype)
    with raises(TypeError, "t"):
        anyclip.clip_by_value(t, 0, 1)


@pytest.mark.parametrize(
    ("lo", "hi", "arg"),
    [(-3.1, 3, "clip_value_min"), (-3, 3.1, "clip_value_max"), (1.0, 3, "clip_value_min")],
)
def test_clip_by_value_python_float_on_int(backend, make, lo, hi, arg):
    # §1.3: `TypeError: Cannot convert 3.1 to EagerTensor of dtype int32` (also for 1.0)
    with raises(TypeError, arg):
        anyclip.clip_by_value(make([[1, 2], [3, 4]], "int32"), lo, hi)


def test_clip_by_value_python_complex_on_float(backend, make):
    with raises(TypeError, "clip_value_max"):
        anyclip.clip_by_value(make([1.0]), 0, 1 + 1j)


@pytest.mark.parametrize(
    ("tdtype", "bdtype"),
    [("float32", "float64"), ("float32", "int32"), ("int32", "int64"), ("float64", "float32")],
)
@pytest.mark.parametrize("arg", ["clip_value_min", "clip_value_max"])
def test_clip_by_value_array_of_other_dtype(backend, make, tdtype, bdtype, arg):
    # §1.3: a tensor bound of another dtype is refused (eager IAE, graph TypeError)
    t = make([1, 2, 3], tdtype)
    bounds = {"clip_value_min": 0, "clip_value_max": 5}
    bounds[arg] = make(1, bdtype)
    with raises(TypeError, arg):
        anyclip.clip_by_value(t, **bounds)


def test_clip_by_value_array_from_other_library(backend, make):
    with raises(TypeError, "clip_value_min"):
        anyclip.clip_by_value(make([1.0, 2.0]), foreign(backend, 0.0), 1.0)


@pytest.mark.parametrize("arg", ["clip_value_min", "clip_value_max"])
def test_clip_by_value_none(backend, make, arg):
    # §0.2: None is refused with a ValueError
    bounds = {"clip_value_min": 0.0, "clip_value_max": 1.0}
    bounds[arg] = None
    with raises(ValueError, arg):
        anyclip.clip_by_value(make([1.0]), **bounds)


def test_clip_by_value_string_bound(backend, make):
    with raises(TypeError, "clip_value_max"):
        anyclip.clip_by_value(make([1.0]), 0.0, "1")


@pytest.mark.parametrize(
    ("t_shape", "b_shape"),
    [
        ((2, 3), (1, 2, 3)),  # rank expansion
        ((2, 1), (2, 3)),  # dimension expansion
        ((), (3,)),  # scalar t
        ((2, 3), (4,)),  # incompatible
        ((2, 3), (1, 1, 2)),  # incompatible
    ],
    ids=str,
)
@pytest.mark.parametrize("arg", ["clip_value_min", "clip_value_max"])
def test_clip_by_value_bound_enlarging_t(backend, make, t_shape, b_shape, arg):
    # §1.4: bounds may broadcast but never enlarge t
    bounds = {"clip_value_min": -1.0, "clip_value_max": 1.0}
    bounds[arg] = make(np.zeros(b_shape))
    with raises(ValueError, arg):
        anyclip.clip_by_value(make(np.zeros(t_shape)), **bounds)


# ------------------------------------------------------------------------- clip_by_norm
@pytest.mark.parametrize("dtype", ["int32", "int64", "bool", "complex64"])
def test_clip_by_norm_bad_dtype(backend, make, dtype):
    # §2.2 / B4: int (Sqrt), complex (Greater), bool (Mul) are refused
    with raises(TypeError, "t"):
        anyclip.clip_by_norm(make([3, 4], dtype), 1)


def test_clip_by_norm_python_int_list():
    # §2.2: a Python int list converts to int32, which is refused
    with raises(TypeError, "t"):
        anyclip.clip_by_norm([3, 4], 1.0)


def test_clip_by_norm_none(backend, make):
    with raises(ValueError, "clip_norm"):
        anyclip.clip_by_norm(make([3, 4]), None)


def test_clip_by_norm_string(backend, make):
    # §2.2: TypeError for "1"
    with raises(TypeError, "clip_norm"):
        anyclip.clip_by_norm(make([3, 4]), "1")


def test_clip_by_norm_complex_array(backend, make):
    with raises(TypeError, "clip_norm"):
        anyclip.clip_by_norm(make([3, 4]), make(1, "complex64"))


def test_clip_by_norm_array_from_other_library(backend, make):
    with raises(TypeError, "clip_norm"):
        anyclip.clip_by_norm(make([3, 4]), foreign(backend, 1.0))


@pytest.mark.parametrize("shape", [(3,), (1, 2)], ids=str)
def test_clip_by_norm_clip_enlarging_t(backend, make, shape):
    # §2.2: clip shape [3] on t [2] (incompatible), [1,2] on [2] (rank expansion)
    with raises(ValueError, "clip_norm"):
        anyclip.clip_by_norm(make([3, 4]), make(np.ones(shape)))


@pytest.mark.parametrize("axes", [[1, 1], [1, -1], 2, -3, [0, 2]], ids=str)
def test_clip_by_norm_bad_axes(backend, make, axes):
    # §2.4: duplicate or out-of-range axes
    with raises(ValueError, "axes"):
        anyclip.clip_by_norm(make([[3, 4], [6, 8]]), 5, axes=axes)


def test_clip_by_norm_float_axes(backend, make):
    # §2.4: `TypeError: Cannot convert 1.0 to EagerTensor of dtype int32`
    with raises(TypeError, "axes"):
        anyclip.clip_by_norm(make([[3, 4], [6, 8]]), 5, axes=1.0)


# --------------------------------------------------------- global_norm / clip_by_global_norm
def _gn(t_list):
    return anyclip.global_norm(t_list)


def _cbgn(t_list):
    return anyclip.clip_by_global_norm(t_list, 1.0)


FUNCS = pytest.mark.parametrize("fn", [_gn, _cbgn], ids=["global_norm", "clip_by_global_norm"])


@FUNCS
@pytest.mark.parametrize("kind", ["generator", "array", "numpy", "dict", "str"])
def test_t_list_not_a_sequence(backend, make, fn, kind):
    # §3.2 / §4.2: ``TypeError: `t_list` should be a sequence of tensors``
    a = make([3, 4])
    t_list = {
        "generator": (x for x in [a]),
        "array": a,
        "numpy": np.array([3.0, 4.0], dtype=np.float32),
        "dict": {"a": a},
        "str": "ab",
    }[kind]
    with raises(TypeError, "t_list"):
        fn(t_list)


@FUNCS
@pytest.mark.parametrize("dtype", ["int32", "complex64", "bool"])
def test_t_list_bad_dtype(backend, make, fn, dtype):
    # §3.2: L2Loss takes half, bfloat16, float, double only
    with raises(TypeError, "t_list"):
        fn([make([3, 4], dtype)])


@FUNCS
def test_t_list_range(fn):
    # §3.2: range(3) is a Sequence of Python ints (int32): refused
    with raises(TypeError, "t_list"):
        fn(range(3))


@FUNCS
@pytest.mark.parametrize("other", ["float64", "float16"])
def test_t_list_mixed_dtypes(backend, make, fn, other):
    # §3.2: f32 + f64 (or f16) cannot be stacked
    with raises(TypeError, "t_list"):
        fn([make([3, 4]), make([12], other)])


@FUNCS
def test_t_list_mixed_libraries(backend, make, fn):
    with raises(TypeError, "t_list"):
        fn([make([3, 4]), foreign(backend, [12.0])])


@pytest.mark.parametrize("dtype", ["float64", "float16", "int32"])
def test_clip_by_global_norm_clip_array_of_other_dtype(backend, make, dtype):
    # §4.2: ``TypeError: `x` and `y` must have the same dtype``
    with raises(TypeError, "clip_norm"):
        anyclip.clip_by_global_norm([make([3, 4])], make(1, dtype))


def test_clip_by_global_norm_python_float_use_norm(backend, make):
    # §4.2: TF raises AttributeError ('float' object has no attribute 'dtype'); policy: TypeError
    with raises(TypeError, "use_norm"):
        anyclip.clip_by_global_norm([make([3, 4])], 6.5, use_norm=26.0)


def test_clip_by_global_norm_use_norm_other_library(backend, make):
    with raises(TypeError, "use_norm"):
        anyclip.clip_by_global_norm([make([3, 4])], 6.5, use_norm=foreign(backend, 26.0))


def test_clip_by_global_norm_none_clip(backend, make):
    with raises(ValueError, "clip_norm"):
        anyclip.clip_by_global_norm([make([3, 4])], None)


# ----------------------------------------------------------------- clip_by_average_norm
@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16", "complex64", "int32"])
def test_clip_by_average_norm_not_float32(backend, make, dtype):
    # §5.2 / B17: only float32 works
    with raises(TypeError, "t"):
        anyclip.clip_by_average_norm(make([3, 4], dtype), 1)


def test_clip_by_average_norm_float64_clip(backend, make):
    with raises(TypeError, "clip_norm"):
        anyclip.clip_by_average_norm(make([3, 4]), make(1.0, "float64"))


def test_clip_by_average_norm_none_clip(backend, make):
    with raises(ValueError, "clip_norm"):
        anyclip.clip_by_average_norm(make([3, 4]), None)


def test_clip_by_average_norm_clip_enlarging(backend, make):
    # policy (issue 2): an argument may broadcast but never enlarge the input
    with raises(ValueError, "clip_norm"):
        anyclip.clip_by_average_norm(make([3, 4]), make([[1.0, 2.0]]))


# --------------------------------------------------------------------------------- norm
@pytest.mark.parametrize(
    "ord", ["fro", -np.inf, 0, 0.0, -1, -2, "inf", "nuc", "2", "euclid"], ids=repr
)
def test_norm_bad_vector_ord(backend, make, ord):
    # §6.3: `'ord' must be a supported vector norm, got ...`
    with raises(ValueError, "ord"):
        anyclip.norm(make([3, -4, 0, 12]), ord=ord)


def test_norm_fro_on_matrix_without_axis(backend, make):
    # §6.5: axis None flattens, so 'fro' is a vector ord there and is refused
    with raises(ValueError, "ord"):
        anyclip.norm(make([[1, -2], [3, 4]]), ord="fro")


@pytest.mark.parametrize("ord", [None, 1 + 0j], ids=repr)
def test_norm_ord_not_comparable(backend, make, ord):
    # §6.3: TF raises TypeError ('<=' not supported) for None and complex ords
    with raises(TypeError, "ord"):
        anyclip.norm(make([3, -4]), ord=ord)


@pytest.mark.parametrize("ord", [-1, -2, -np.inf, "nuc", 0.5, 3, 0], ids=repr)
def test_norm_bad_matrix_ord(backend, make, ord):
    # §6.4: `'ord' must be a supported matrix norm in ['euclidean', 'fro', 1, 2, inf]`
    with raises(ValueError, "ord"):
        anyclip.norm(make([[1, -2], [3, 4]]), ord=ord, axis=(0, 1))


@pytest.mark.parametrize(
    "axis",
    [np.int64(0), [0], (0,), (0, 0), (0, 1, 2), (np.int64(0), np.int64(1)), 1.0, "0", (0, 1.0)],
    ids=repr,
)
def test_norm_bad_axis_kind(backend, make, axis):
    # §6.6 / B13: a Python int or a 2-tuple/list of unique Python ints only
    with raises(ValueError, "axis"):
        anyclip.norm(make(np.ones((2, 2, 2))), axis=axis)


def test_norm_array_axis(backend, make):
    # §6.6: tf.constant(0) as axis is refused
    with raises(ValueError, "axis"):
        anyclip.norm(make([[1, 2], [3, 4]]), axis=make(0, "int32"))


@pytest.mark.parametrize("axis", [2, -3, (0, 2), (0, -2)], ids=str)
def test_norm_axis_out_of_range_or_duplicate(backend, make, axis):
    # §6.6: out of range (IAE in TF), (0,-2) is axis 0 twice
    with raises(ValueError, "axis"):
        anyclip.norm(make([[1, 2], [3, 4]]), axis=axis)


def test_norm_axis_on_zero_d(backend, make):
    with raises(ValueError, "axis"):
        anyclip.norm(make(-3.0), axis=0)


@pytest.mark.parametrize("ord", ["euclidean", 2, 3, 0.5])
def test_norm_int_needs_ord_1_or_inf(backend, make, ord):
    # §6.7: int32 euclidean / 2 (Sqrt) and ord 3 (1/3 to int32) are refused
    with raises(TypeError, "tensor"):
        anyclip.norm(make([3, -4], "int32"), ord=ord)


@pytest.mark.parametrize("ord", ["fro", 2])
def test_norm_int_matrix_euclidean(backend, make, ord):
    with raises(TypeError, "tensor"):
        anyclip.norm(make([[1, 2], [3, 4]], "int32"), ord=ord, axis=(0, 1))


@pytest.mark.parametrize("ord", ["euclidean", 1, np.inf])
def test_norm_bool(backend, make, ord):
    # §6.7: `TypeError: Expected numeric or variant tensor, got dtype tf.bool.`
    with raises(TypeError, "tensor"):
        anyclip.norm(make([True, False], "bool"), ord=ord)


def test_norm_keep_dims_kwarg(backend, make):
    # §6.6: v2 has no keep_dims
    with pytest.raises(TypeError, match="keep_dims"):
        anyclip.norm(make([3, 4]), keep_dims=True)


# ------------------------------------------------------------------------- l2_normalize
@pytest.mark.parametrize("axis", [[1, 1], 2, -3, [0, 5]], ids=str)
def test_l2_normalize_bad_axis(backend, make, axis):
    with raises(ValueError, "axis"):
        anyclip.l2_normalize(make([[3, 4], [6, 8]]), axis=axis)


def test_l2_normalize_bad_dim(backend, make):
    with raises(ValueError, "axis|dim"):
        anyclip.l2_normalize(make([[3, 4], [6, 8]]), dim=2)


def test_l2_normalize_axis_and_dim(backend, make):
    # §7.1: ValueError("Cannot specify both 'dim' and 'axis'.")
    with raises(ValueError, "dim|axis"):
        anyclip.l2_normalize(make([[3, 4], [6, 8]]), axis=1, dim=1)


def test_l2_normalize_float_axis(backend, make):
    with raises(TypeError, "axis"):
        anyclip.l2_normalize(make([[3, 4], [6, 8]]), axis=1.0)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_l2_normalize_int(backend, make, dtype):
    # §7.2: `TypeError: Cannot convert 1e-12 to EagerTensor of dtype int32`
    with raises(TypeError, "x|epsilon"):
        anyclip.l2_normalize(make([3, 4], dtype))


def test_l2_normalize_bool(backend, make):
    with raises(TypeError, "x|epsilon"):
        anyclip.l2_normalize(make([True, False], "bool"))


def test_l2_normalize_epsilon_other_dtype(backend, make):
    # §7.2: an f64 epsilon tensor on f32 x is refused
    with raises(TypeError, "epsilon"):
        anyclip.l2_normalize(make([3, 4]), epsilon=make(1e-12, "float64"))


def test_l2_normalize_epsilon_none(backend, make):
    with raises(ValueError, "epsilon"):
        anyclip.l2_normalize(make([3, 4]), epsilon=None)


# ---------------------------------------------------------------------------- normalize
@pytest.mark.parametrize("ord", [0, -1, "nuc", "fro"], ids=repr)
def test_normalize_bad_ord(backend, make, ord):
    # §8.2: `'ord' must be a supported vector norm, got 0`
    with raises(ValueError, "ord"):
        anyclip.normalize(make([3, 4]), ord=ord)


@pytest.mark.parametrize("axis", [(0, 0), [0], np.int64(0), 3])
def test_normalize_bad_axis(backend, make, axis):
    with raises(ValueError, "axis"):
        anyclip.normalize(make([[3, 4], [6, 8]]), axis=axis)


def test_normalize_keepdims_kwarg(backend, make):
    # §8.2: `TypeError: Got an unexpected keyword argument 'keepdims'`
    with pytest.raises(TypeError, match="keepdims"):
        anyclip.normalize(make([3, 4]), keepdims=True)


def test_normalize_int_euclidean(backend, make):
    with raises(TypeError, "tensor"):
        anyclip.normalize(make([3, 4], "int32"))


def test_normalize_bool(backend, make):
    with raises(TypeError, "tensor"):
        anyclip.normalize(make([True, False], "bool"), ord=1)


# ------------------------------------------------------------------- main input kinds
@pytest.mark.parametrize(
    "call",
    [
        lambda: anyclip.clip_by_value(None, 0, 1),
        lambda: anyclip.clip_by_norm(None, 1),
        lambda: anyclip.clip_by_average_norm(None, 1),
        lambda: anyclip.norm(None),
        lambda: anyclip.l2_normalize(None),
        lambda: anyclip.normalize(None),
    ],
    ids=[
        "clip_by_value",
        "clip_by_norm",
        "clip_by_average_norm",
        "norm",
        "l2_normalize",
        "normalize",
    ],
)
def test_none_main_input(call):
    # §0.2: None cannot be converted to a tensor: ValueError
    with pytest.raises(ValueError, match=r"`(t|tensor|x)`"):
        call()


def test_error_message_says_what_came(backend, make):
    # issue 2: the message names the argument, what was expected and what was received
    with pytest.raises(TypeError) as info:
        anyclip.clip_by_norm(make([3, 4], "int32"), 1)
    assert re.search(r"int32", str(info.value))
    with pytest.raises(TypeError) as info:
        anyclip.clip_by_value(make([1, 2], "int32"), 0, 3.1)
    assert "3.1" in str(info.value)


def test_nan_python_bound_on_int(backend, make):
    # a float (even NaN or inf) on an integer tensor is refused like any Python float
    with raises(TypeError, "clip_value_max"):
        anyclip.clip_by_value(make([1, 2], "int32"), 0, math.inf)
