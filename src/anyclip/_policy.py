"""anyclip's dtype and argument policy, written down once.

Layer: the public layer's checks. Every public function (and adapter) converts and checks its
arguments here before anything reaches :mod:`anyclip._core`.

TensorFlow never promotes: every argument is converted to the dtype of the main input, and what
cannot be converted is refused. anyclip follows it:

* The main input (``t``, ``tensor``, ``x``) is an array of any supported library. A Python scalar
  or (nested) list is converted as TF's ``convert_to_tensor`` does: bool → bool, int → int32,
  float → float32, complex → complex128 (a list by its widest element), in the namespace of
  the other array arguments (NumPy when there is none).
* A Python scalar argument (a bound, ``clip_norm``, ``epsilon``) is converted to the main input's
  dtype: a float (or complex) on an integer dtype is a ``TypeError``; an integer outside an integer
  dtype's range wraps around, as in TF; a float beyond a floating dtype's range becomes ±inf.
* A NumPy scalar (``np.float32(3.7)``) is a *value* in TF and is cast silently, truncating towards
  zero on an integer dtype, as TF does.
* An array argument (a 0-d array included) must come from the main input's library and have its
  dtype, or the call raises ``TypeError``: anyclip never casts an array silently (except where the
  TF function itself casts, such as ``clip_by_norm``'s ``clip_norm``).
* An argument may broadcast against the main input but never enlarge it (``ValueError``).
* ``t_list`` is a list or tuple (not a lone array, a generator or a dict) of arrays or ``None``;
  its arrays share one floating dtype unless an ``accumulate_dtype`` is given.
* ``nonfinite`` is one of :data:`NONFINITE_POLICIES`.

Where TF refuses the same call, the message ends with TF's own wording in parentheses,
``(TF: Incompatible shapes: [2,3] vs. [5])``, spelled as TF 2.21's eager mode spells it for
these arguments (its dtype names: ``float``, ``double``, ``half``; its shapes: ``[2,3]``), so that
a ported ``assertRaisesRegex`` still matches. The ``tf_*`` helpers below build those words; the
exception class stays anyclip's (``TypeError`` for a dtype, ``ValueError`` for a shape or axis,
the class TF raises in graph mode).

Sparse arrays never reach these checks: :mod:`anyclip._sparse` replaces them by their stored
values (or by a dense array) first, as TF treats ``IndexedSlices``.
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from anyclip._compat import (
    all_arrays,
    data_device,
    dtype_name,
    is_array,
    is_numpy_scalar,
    is_weak_scalar,
    library,
    memo_by_dtype,
)
from anyclip._kernels._dist import is_dtensor
from anyclip._numerics import constant, float_overflow_threshold
from anyclip._sparse import sparse_or_refuse
from anyclip._typing import Namespace, Nonfinite

__all__ = [
    "cast_like",
    "FLOATS",
    "NONFINITE_POLICIES",
    "TF_NONE",
    "ListNames",
    "as_input",
    "as_list",
    "as_operand",
    "check_broadcastable",
    "check_compatible",
    "check_meta",
    "check_operand",
    "check_nonfinite",
    "dtype_kind",
    "finite_number",
    "floating_list",
    "is_sequence_of_arrays",
    "keras_option",
    "native_order",
    "normalize_axes",
    "real_list",
    "require_kind",
    "resolve_accumulate_dtype",
    "tf_attr",
    "tf_broadcast",
    "tf_cannot_convert",
    "tf_expected",
    "tf_incompatible",
    "tf_same_dtype",
    "tf_shape_words",
    "tf_type",
    "tf_words",
    "widest_float",
]

#: How the error messages name the floating dtypes TF's clipping functions accept.
FLOATS = "a floating dtype (float16, bfloat16, float32 or float64)"


# ------------------------------------------------------------- TF's wording
#: TF's message for None where it expects a tensor (``convert_to_tensor``).
TF_NONE = (
    "Attempt to convert a value (None) with an unsupported type (<class 'NoneType'>) to a Tensor."
)

#: TF's own names (``DataTypeString``) where they differ from the array API's.
_TF_TYPES = {"float32": "float", "float64": "double", "float16": "half"}


def tf_type(dtype: Any) -> str:
    """TF's name of ``dtype`` (or a dtype name) in kernel messages: ``float``, ``double``..."""
    name = dtype if isinstance(dtype, str) else dtype_name(dtype)
    return _TF_TYPES.get(name, name)


def tf_words(text: str | None) -> str:
    """The suffix that quotes TF's own message (empty for None)."""
    return "" if text is None else f" (TF: {text})"


def tf_attr(dtype: Any) -> str:
    """TF's words for an op kernel that has no ``dtype`` (eager ``InvalidArgumentError``)."""
    return f"Value for attr 'T' of {tf_type(dtype)} is not in the list of allowed values"


def tf_expected(want: Any, got: Any) -> str:
    """TF's words for a tensor of dtype ``got`` where an op wants ``want`` (eager IAE)."""
    return f"expected to be a {tf_type(want)} tensor but is a {tf_type(got)} tensor"


def tf_same_dtype(want: Any, got: Any) -> str:
    """TF's words when Python's ``/`` meets tensors of two dtypes (``TypeError``)."""
    return (
        f"`x` and `y` must have the same dtype, got tf.{dtype_name(want)} != tf.{dtype_name(got)}."
    )


def tf_cannot_convert(value: Any, dtype: Any) -> str:
    """TF's words for a Python value it cannot convert to ``dtype`` (``TypeError``)."""
    return f"Cannot convert {value!r} to EagerTensor of dtype {tf_type(dtype)}"


def _dim(d: Any) -> int | None:
    """A dimension as an int, or None where it is unknown (dask's NaN, the standard's None).

    A dask array whose chunk sizes are unknown (``x[x > 0]``) has NaN dimensions until its
    chunks are computed; shape checks treat such a dimension as matching any other, and dask
    aligns the operands chunk by chunk when the graph is computed.
    """
    if d is None or d != d:  # None or NaN
        return None
    return int(d)


def _tf_dims(shape: Sequence[int]) -> str:
    dims = (_dim(d) for d in shape)
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def tf_incompatible(a: Sequence[int], b: Sequence[int]) -> str:
    """TF's words for shapes a binary op cannot broadcast (eager ``InvalidArgumentError``)."""
    return f"Incompatible shapes: {_tf_dims(a)} vs. {_tf_dims(b)}"


def tf_broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """The broadcast shape of ``a`` and ``b``, or None when they cannot broadcast."""
    out: list[Any] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = _dim(a[-i]) if i <= len(a) else 1
        y = _dim(b[-i]) if i <= len(b) else 1
        if x is None or y is None:  # unknown (dask): the known side unless it is 1
            out.append(y if x is None and y != 1 else x if x != 1 else None)
            continue
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def tf_shape_words(target: Sequence[int], shape: Sequence[int]) -> str:
    """TF's words when an op meets ``target`` (the input) and ``shape`` (an argument).

    ``Incompatible shapes: [2,3] vs. [5]`` when they cannot broadcast (the op's kernel), else
    ``Shapes (2, 3) and (1, 2, 3) are incompatible`` (the static check clip_ops makes after
    the op, when the result is larger than the input).
    """
    both = tf_broadcast(target, shape)
    if both is None:
        return tf_incompatible(target, shape)
    return f"Shapes {tuple(_dim(d) for d in target)} and {both} are incompatible"


#: dtype_kind's answers, by (namespace name, dtype): string keys, which torch.compile can hash.
_KINDS: dict[str, dict[Any, str]] = {}


def dtype_kind(xp: Namespace, dtype: Any) -> str:
    """``"bool"``, ``"int"``, ``"real"`` (floating), ``"complex"`` or ``"other"``."""
    return memo_by_dtype(_KINDS, xp, dtype, _dtype_kind)


def _dtype_kind(xp: Namespace, dtype: Any) -> str:
    if dtype_name(dtype).startswith("float8"):  # torch and ml_dtypes: no arithmetic kernels
        return "other"
    try:
        return _standard_kind(xp, dtype)
    except TypeError:  # a dtype the library's isdtype does not know (ml_dtypes' on NumPy)
        return "other"


def _standard_kind(xp: Namespace, dtype: Any) -> str:
    if xp.isdtype(dtype, "bool"):
        return "bool"
    if xp.isdtype(dtype, "integral"):
        return "int"
    if xp.isdtype(dtype, "real floating"):
        return "real"
    if xp.isdtype(dtype, "complex floating"):
        return "complex"
    return "other"


def require_kind(
    xp: Namespace,
    x: Any,
    name: str,
    kinds: tuple[str, ...],
    what: str,
    tf: Callable[[Any], str | None] | None = None,
) -> str:
    """Raise ``TypeError`` unless ``x``'s dtype is of one of ``kinds``; return its kind.

    ``tf(dtype)`` gives TF's own words for the refusal (quoted at the end of the message), or
    None where TF does not refuse it or has no such dtype.
    """
    kind = dtype_kind(xp, x.dtype)
    if kind not in kinds:
        msg = f"`{name}` must have {what}, got {dtype_name(x.dtype)}"
        if kind == "other":
            msg += _UNSUPPORTED
        elif tf is not None:
            msg += tf_words(tf(x.dtype))
        raise TypeError(msg)
    return kind


_UNSUPPORTED = (
    " (float8 dtypes, and ml_dtypes' bfloat16 in NumPy, have no arithmetic there: cast the"
    " array to float32, or use torch or JAX for bfloat16)"
)


# ---------------------------------------------------------------- main input
def _python_kind(value: Any) -> str:
    """The TF conversion kind of a Python scalar or nested list."""
    if isinstance(value, (list, tuple)):
        kinds = {_python_kind(v) for v in value}
        for kind in ("complex", "float", "int", "bool"):
            if kind in kinds:
                return kind
        return "float"  # an empty list converts to float32 in TF
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, complex):
        return "complex"
    msg = f"expected an array, a Python number or a list of numbers, got {type(value).__name__}"
    raise TypeError(msg)


def native_order(value: Any) -> Any:
    """A byte-swapped NumPy array (``'>f4'`` here) in native byte order; others unchanged.

    TF converts such arrays to its own (native) dtype; without this, ``'>f4'`` would not
    compare equal to float32 and would be refused as "float32, got float32".
    """
    if getattr(getattr(value, "dtype", None), "isnative", True) is False:
        return value.astype(value.dtype.newbyteorder("="))
    return value


def as_input(value: Any, xp: Namespace, name: str, *, beside: Sequence[Any] = ()) -> Any:
    """The main input as an array of ``xp`` (Python data is converted as TF does).

    Python data and NumPy values go to the device of the first array among ``beside`` (the
    call's other arguments; :func:`~anyclip._compat.data_device`), as TF places them with the
    op: a list ``t`` beside a bound on a GPU is made on that GPU.
    """
    if is_array(value):
        return native_order(value)
    dev = data_device(*beside)
    if value is None:
        msg = f"`{name}` must be an array, got None{tf_words(TF_NONE)}"
        raise ValueError(msg)
    if is_numpy_scalar(value):
        import numpy as np

        return xp.asarray(np.asarray(value), device=dev)
    module = type(value).__module__
    if module.startswith("numpy.ma"):
        msg = (
            f"`{name}` must be an array without a mask, got a NumPy masked array: TF drops "
            "masks and would count the masked values; pass `x.filled(0)` to clip with them "
            "as zeros, or `x.compressed()` for the unmasked values only"
        )
        raise TypeError(msg)
    if module.startswith("numpy") and type(value).__name__ == "matrix":
        import numpy as np

        return xp.asarray(np.asarray(value), device=dev)  # as TF converts it: a plain 2-D array
    try:
        kind = _python_kind(value)
    except TypeError as exc:
        msg = f"`{name}`: {exc}"
        raise TypeError(msg) from None
    dtype = {"bool": xp.bool, "int": xp.int32, "float": xp.float32, "complex": xp.complex128}[kind]
    return xp.asarray(value, dtype=dtype, device=dev)


# ----------------------------------------------------------- other arguments
def _scalar_for(xp: Namespace, value: Any, dtype: Any, kind: str, name: str) -> Any:
    """A Python scalar converted to a Python value that ``dtype`` holds, as TF converts it."""
    if isinstance(value, complex) and kind != "complex":
        msg = (
            f"`{name}` must be real for a {dtype_name(dtype)} input, got {value!r}"
            f"{tf_words(tf_cannot_convert(value, dtype))}"
        )
        raise TypeError(msg)
    if kind == "int":
        info = xp.iinfo(dtype)
        # TF converts no Python float to an integer dtype, and a bool only to int32, int64 and
        # uint64 (measured: int8, int16, uint8, uint16 and uint32 refuse True).
        if isinstance(value, float) or (
            isinstance(value, bool) and info.bits < 64 and (int(info.min) == 0 or info.bits < 32)
        ):
            msg = (
                f"`{name}` must be an integer for an input of dtype {dtype_name(dtype)} "
                f"(TF does not convert a Python {type(value).__name__} to it), got {value!r}"
                f"{tf_words(tf_cannot_convert(value, dtype))}"
            )
            raise TypeError(msg)
        value = int(value)
        # TF goes through a 64-bit integer: outside its range (int64's; uint64's for uint64) the
        # conversion fails, inside it the value wraps to narrower dtypes.
        lo, hi = (0, 2**64 - 1) if int(info.min) == 0 and info.bits == 64 else (-(2**63), 2**63 - 1)
        if not lo <= value <= hi:
            if hi != 2**64 - 1:
                words = "Can't convert Python sequence with out-of-range integer to Tensor."
            else:  # uint64: Python's OverflowError
                words = (
                    "can't convert negative int to unsigned"
                    if value < 0
                    else "int too big to convert"
                )
            msg = (
                f"`{name}` is out of the range TF converts for dtype {dtype_name(dtype)} "
                f"([{lo}, {hi}]), got {value}{tf_words(words)}"
            )
            raise ValueError(msg)
        span = 1 << info.bits
        return (value - int(info.min)) % span + int(info.min)  # wraps, as TF does
    if kind == "bool":
        return bool(value)
    if kind == "complex":
        return complex(value)
    if isinstance(value, bool) and dtype_name(dtype) == "bfloat16":
        msg = (
            f"`{name}` must be a number for a bfloat16 input (TF does not convert a Python "
            f"bool to it), got {value!r}; pass {float(value)!r} (a NumPy bool converts)"
            f"{tf_words(tf_cannot_convert(value, dtype))}"
        )
        raise TypeError(msg)
    # real floating
    try:
        as_float = float(value)
    except OverflowError:  # an int too large for a double
        as_float = math.inf if value > 0 else -math.inf
    if math.isfinite(as_float) and abs(as_float) >= float_overflow_threshold(xp, dtype):
        as_float = math.copysign(math.inf, as_float)
    return as_float


def _numpy_scalar_for(value: Any, kind: str) -> Any:
    """A NumPy scalar cast the way TF casts NumPy values (truncation on integer dtypes)."""
    item = value.item()
    if isinstance(item, bool) and kind not in ("bool", "int"):
        # NumPy casts its bools to any float dtype, and TF takes NumPy's cast: bfloat16 too,
        # where TF refuses a Python bool.
        return float(item)
    if kind == "int":
        if isinstance(item, complex):
            item = item.real
        return int(item) if math.isfinite(item) else 0
    return item


def _convert_nested(xp: Namespace, value: Any, dtype: Any, kind: str, name: str) -> Any:
    if isinstance(value, (list, tuple)):
        return [_convert_nested(xp, v, dtype, kind, name) for v in value]
    if is_numpy_scalar(value):
        value = _numpy_scalar_for(value, kind)
    if not isinstance(value, (bool, int, float, complex)):
        msg = (
            f"`{name}` must be a number, a list of numbers or an array, got {value!r}"
            f"{tf_words(tf_cannot_convert(value, dtype))}"
        )
        raise TypeError(msg)
    return _scalar_for(xp, value, dtype, kind, name)


def as_operand(
    value: Any,
    xp: Namespace,
    like: Any,
    name: str,
    *,
    dtype: Any = None,
    cast_arrays: bool = False,
    tf: Callable[[Any, Any], str] | None = None,
) -> Any:
    """Convert argument ``value`` to an array of ``dtype`` (default ``like.dtype``).

    Python data and NumPy scalars are converted as TF converts them. Arrays must already have
    ``dtype``, unless ``cast_arrays`` (then they are cast with ``astype``). ``tf(dtype,
    got)`` gives TF's words for an array of another dtype (:func:`tf_expected` where an op
    kernel meets it, :func:`tf_same_dtype` where Python's ``/`` does).
    """
    target = like.dtype if dtype is None else dtype
    if type(value) is float and dtype_kind(xp, target) == "real":  # the common case, directly
        if abs(value) >= float_overflow_threshold(xp, target) and math.isfinite(value):
            value = math.copysign(math.inf, value)
        return constant(xp, value, target, like)
    if value is None:
        msg = f"`{name}` must be a number or an array, got None{tf_words(TF_NONE)}"
        raise ValueError(msg)
    if is_array(value):
        value = native_order(value)
        check_meta(value, like, name)
        if value.dtype != target and is_weak_scalar(value):  # a Python scalar, through jax.jit
            if dtype_kind(xp, value.dtype) == "real" and dtype_kind(xp, target) != "real":
                msg = (
                    f"`{name}` must be an integer for an input of dtype {dtype_name(target)} "
                    f"(a Python float is not converted to an integer dtype), got a float"
                )
                raise TypeError(msg)
            return xp.astype(value, target)
        if value.dtype != target:
            if cast_arrays:
                return xp.astype(value, target)
            msg = (
                f"`{name}` must have the dtype {dtype_name(target)} of the input "
                f"(anyclip never promotes), got an array of dtype {dtype_name(value.dtype)}; "
                f"cast it to {dtype_name(target)} first"
                f"{tf_words(None if tf is None else tf(target, value.dtype))}"
            )
            raise TypeError(msg)
        return value
    kind = dtype_kind(xp, target)
    converted = _convert_nested(xp, value, target, kind, name)
    return constant(xp, converted, target, like)


def check_operand(value: Any, name: str, *, scalar: bool = False) -> None:
    """Refuse, before any input is seen, an operand that no input could make valid.

    For adapters built before the first update (optax transforms, hooks): what
    :func:`as_operand` would refuse whatever the input is refused here with its class and
    words: None (``ValueError``), a complex number, a string or any other object that is not a
    number, a list of numbers or an array (``TypeError``). ``scalar``: a list (several values)
    is refused too. Arrays (JAX tracers under ``optax.inject_hyperparams`` included) and NumPy
    scalars pass: their dtype and shape are checked against the updates.
    """
    if type(value) in (int, float, bool):
        return
    if sparse_or_refuse(value, name) or is_array(value):  # nested, foreign: refused there
        return
    if value is None:
        msg = f"`{name}` must be a number or an array, got None{tf_words(TF_NONE)}"
        raise ValueError(msg)
    kind = None
    if is_numpy_scalar(value):
        kind = "complex" if value.dtype.kind == "c" else "real"
    elif not scalar or not isinstance(value, (list, tuple)):
        try:
            kind = _python_kind(value)
        except TypeError:
            kind = None
    if kind is None:
        what = "a real number or an array" if scalar else "a real number, a list or an array"
        msg = f"`{name}` must be {what}, got {type(value).__name__} {value!r}"
        if isinstance(value, str):
            msg += f"; pass the number itself, e.g. {name}=1.0"
        raise TypeError(msg)
    if kind == "complex":
        msg = f"`{name}` must be real (the updates are real), got {value!r}; pass its real part"
        raise TypeError(msg)


def check_meta(value: Any, like: Any, name: str, tname: str | None = None) -> None:
    """``TypeError`` for a torch ``meta`` tensor argument when the input holds data.

    A meta tensor has a shape and a dtype but no values: with meta inputs it gives meta
    results (shapes and dtypes only, as torch's own functions do), but beside real data no
    value can come out of it. ``tname`` names the input (default: "the input").
    """
    if getattr(value, "is_meta", False) and not getattr(like, "is_meta", True):
        what = "the input" if tname is None else f"`{tname}`"
        msg = (
            f"`{name}` is a tensor on the meta device (a shape without values) while {what} "
            f"is on {like.device}: nothing can be computed from it; pass `{name}` with values "
            f"(a number, or a tensor on {like.device}), or make {what} a meta tensor too for a "
            "shape-only run"
        )
        raise TypeError(msg)


def finite_number(value: Any, xp: Namespace, dtype: Any) -> bool:
    """Whether ``value`` is a Python number that :func:`as_operand` makes a finite ``dtype`` value.

    Read in Python, with no array and no host sync: a caller may then skip work that only an
    infinite operand needs. False for arrays (their values are not read) and for NaN.
    """
    if type(value) not in (int, float, bool):
        return False
    return bool(abs(value) < float_overflow_threshold(xp, dtype))


def _dims_match(s: Any, t: Any, *, grows: bool) -> bool:
    """Whether dimension ``s`` broadcasts to ``t`` (``grows``: or ``t`` to ``s``).

    An unknown dimension (:func:`_dim`) matches any other: it is checked when dask computes.
    """
    a, b = _dim(s), _dim(t)
    if a is None or b is None:
        return True
    return a in (1, b) or (grows and b == 1)


def check_broadcastable(
    shape: tuple[int, ...],
    target: tuple[int, ...],
    name: str,
    tname: str,
    *,
    tf_static: bool = True,
) -> None:
    """Raise ``ValueError`` unless ``shape`` broadcasts to ``target`` without enlarging it.

    The message quotes TF's words: the op's ``Incompatible shapes`` when the two cannot
    broadcast, else (``tf_static``: TF checks the result's shape, as clip_ops does) its
    ``Shapes ... are incompatible``. Without ``tf_static`` an enlarging argument is anyclip's
    own refusal (TF would enlarge the result) and quotes nothing.
    """
    ok = len(shape) <= len(target) and all(
        _dims_match(s, t, grows=False)
        for s, t in zip(reversed(shape), reversed(target), strict=False)
    )
    if not ok:
        fits = tf_broadcast(target, shape) is not None
        words = tf_shape_words(target, shape) if tf_static or not fits else None
        msg = (
            f"`{name}` of shape {tuple(shape)} must broadcast to the shape {tuple(target)} "
            f"of `{tname}` without enlarging it; reshape it (a size-1 axis broadcasts)"
            f"{tf_words(words)}"
        )
        raise ValueError(msg)


def check_compatible(
    shape: tuple[int, ...],
    target: tuple[int, ...],
    name: str,
    tname: str,
    *,
    tf: str | None = None,
) -> None:
    """Raise ``ValueError`` unless ``shape`` and ``target`` broadcast together (either grows).

    For arguments TF multiplies in without a shape check, so that a larger one enlarges the
    result, as in TF, and one that cannot broadcast fails here, not inside a backend. ``tf``
    is TF's words for it (default: ``Incompatible shapes: [target] vs. [shape]``, the op
    ``target * shape``); the caller passes the operands TF's op really meets.
    """
    pairs = zip(reversed(shape), reversed(target), strict=False)
    ok = all(_dims_match(s, t, grows=True) for s, t in pairs)
    if not ok:
        msg = (
            f"`{name}` of shape {tuple(shape)} must broadcast against the shape "
            f"{tuple(target)} of `{tname}`; reshape it (a size-1 axis broadcasts)"
            f"{tf_words(tf or tf_incompatible(target, shape))}"
        )
        raise ValueError(msg)


# ---------------------------------------------------------------------- axes
def _flatten_axes(axes: Any, name: str) -> list[int]:
    if is_array(axes):
        if type(axes).__module__ != "numpy":
            msg = f"`{name}` must be Python or NumPy integers, got {type(axes).__name__}"
            raise TypeError(msg)
        axes = axes.tolist()
    if isinstance(axes, (list, tuple)):
        out: list[int] = []
        for a in axes:
            out.extend(_flatten_axes(a, name))
        return out
    if isinstance(axes, float) or (is_numpy_scalar(axes) and not hasattr(axes, "__index__")):
        msg = f"`{name}` must contain integers, got {axes!r}"
        if isinstance(axes, float):  # TF converts axes to int32
            msg += tf_words(f"Cannot convert {axes!r} to EagerTensor of dtype int32")
        raise TypeError(msg)
    try:
        return [operator.index(axes)]
    except TypeError:
        msg = f"`{name}` must be None, an integer or a sequence of integers, got {axes!r}"
        raise TypeError(msg) from None


def normalize_axes(axes: Any, ndim: int, name: str) -> tuple[int, ...] | None:
    """``axes`` as a tuple of distinct non-negative axis indices (``None`` stays ``None``)."""
    if axes is None:
        return None
    flat = _flatten_axes(axes, name)
    out: list[int] = []
    for a in flat:  # in order, as TF's reduction checks them
        if not -ndim <= a < ndim:
            words = f"Invalid reduction dimension ({a} for input with {ndim} dimension(s)"
            valid = f"valid: {-ndim} to {ndim - 1}" if ndim else "a 0-d input has no axes"
            msg = (
                f"`{name}` contains {a}, which is out of range for an input with {ndim} dims "
                f"({valid}){tf_words(words)}"
            )
            raise ValueError(msg)
        if a % ndim in out:
            words = f"Invalid reduction arguments: Axes contains duplicate dimension: {a % ndim}"
            msg = (
                f"`{name}` must not repeat an axis, got {flat} (axis {a % ndim} twice)"
                f"{tf_words(words)}"
            )
            raise ValueError(msg)
        out.append(a % ndim)
    return tuple(out)


def is_sequence_of_arrays(value: Any) -> bool:
    """Whether ``value`` is a list-like that TF accepts as ``t_list``."""
    return (
        isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and not is_array(value)
    )


# ------------------------------------------------------- accumulation dtype
def _float_bits(xp: Namespace, dtype: Any) -> int:
    return int(xp.finfo(dtype).bits)


def widest_float(xp: Namespace, dtypes: Sequence[Any]) -> Any:
    """The real floating dtype that holds every one of ``dtypes`` (float16 + bfloat16: float32)."""
    widest = dtypes[0]
    for dt in dtypes[1:]:
        if dt == widest:
            continue
        a, b = _float_bits(xp, widest), _float_bits(xp, dt)
        if a == b:  # float16 vs bfloat16: neither holds the other
            widest = xp.float32 if a < 32 else widest
        elif b > a:
            widest = dt
    return widest


def cast_like(xp: Namespace, x: Any, acc: Any) -> Any:
    """At most one element of ``x`` cast to ``acc``: a stand-in for ``acc`` on ``x``'s device.

    Operands (``clip_norm``, ``epsilon``) are converted against it, so that ``x`` itself is
    never cast whole. A torch ``DTensor`` gives an element of its local shard (a reshape of the
    DTensor would gather it); a JAX array, a 0-d zero (its elements may be sharded, and JAX
    places a 0-d operand next to them itself); a dask array of unknown shape (which cannot be
    sliced), ``x`` cast lazily, whose values are never computed.
    """
    if library(xp) == "jax":
        return xp.zeros((), dtype=acc)
    if is_dtensor(x):
        x = x.to_local()
    if any(_dim(d) is None for d in x.shape):  # dask, unknown chunks: a lazy cast, never run
        return xp.astype(x, acc)
    return xp.astype(xp.reshape(x, (-1,))[: min(1, math.prod(x.shape))], acc)


def resolve_accumulate_dtype(
    xp: Namespace, value: Any, dtypes: Sequence[Any], *, single: str | None = None
) -> Any:
    """The dtype ``accumulate_dtype=value`` asks for, given the inputs' ``dtypes``.

    ``None`` means TF's behaviour (reduce in the input dtype, refuse mixed dtypes) and is
    returned as ``None``. ``"widest"`` picks :func:`widest_float` of ``dtypes``; a function of
    one array (``single``, its name) refuses it, as it could only mean the array's own dtype.
    A dtype name (``"float32"``) or a dtype object of the namespace is taken as given; it must
    be a real floating dtype.
    """
    if value is None:
        return None
    if isinstance(value, str) and value == "widest":
        if single is not None:
            msg = (
                f"`accumulate_dtype` must be None or a floating dtype for {single}, got "
                "'widest', which picks the widest dtype of several arrays: of one array it is "
                "its own dtype, TF's behaviour; pass None for that, or a dtype such as "
                "'float64' to accumulate in"
            )
            raise ValueError(msg)
        if not dtypes:
            return xp.float32
        return widest_float(xp, list(dtypes))
    dtype = value
    if isinstance(value, str):
        dtype = getattr(xp, value, None)
        if dtype is None and value == "bfloat16":
            dtype = _bfloat16(xp)
        if dtype is None:
            msg = f"`accumulate_dtype` must name a floating dtype of the library, got {value!r}"
            raise TypeError(msg)
    try:
        ok = xp.isdtype(dtype, "real floating") and not dtype_name(dtype).startswith("float8")
    except Exception:  # noqa: BLE001 - a foreign or bogus dtype object
        ok = False
    if not ok:
        msg = f"`accumulate_dtype` must be a real floating dtype, 'widest' or None, got {value!r}"
        raise TypeError(msg)
    return dtype


def _bfloat16(xp: Namespace) -> Any:
    if library(xp) == "torch":
        import torch

        return torch.bfloat16
    if library(xp) == "jax":
        import jax.numpy as jnp

        return jnp.bfloat16
    return None


# -------------------------------------------------------------------- lists
class ListNames(Sequence[str]):
    """``t_list[0]``, ``t_list[1]``, ... then ``extra``: argument names, made only when needed."""

    def __init__(self, n: int, extra: tuple[str, ...] = ()) -> None:
        self.n, self.extra = n, extra

    def __len__(self) -> int:
        return self.n + len(self.extra)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        return f"t_list[{i}]" if i < self.n else self.extra[i - self.n]


def _first_is_parameter(iterator: Iterator[Any]) -> bool:
    """Whether the first item of ``iterator`` (read, as the call fails anyway) is a weight.

    A torch ``Parameter`` or a leaf tensor that requires grad: what ``model.parameters()``
    yields, whose ``.grad`` the user means to clip.
    """
    first = next(iterator, None)
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(first, torch.Tensor):
        return False
    return isinstance(first, torch.nn.Parameter) or (first.requires_grad and first.is_leaf)


def as_list(t_list: Any) -> list[Any]:
    """``t_list`` as a new list; ``TypeError`` unless it is a list or tuple (TF's rule).

    The message starts with TF's own (``"`t_list` should be a sequence of tensors"``), then
    says what was expected and the fix for a dict, an iterator or a lone array. For an iterator
    of torch parameters (``model.parameters()``) the fix is to clip their gradients
    (``anyclip.torch.clip_grad_norm_`` or ``[p.grad for p in ...]``), not ``list(...)``, which
    would clip the weights.
    """
    if not is_sequence_of_arrays(t_list):
        if isinstance(t_list, Mapping):
            fix = (
                "for a dict (or any tree) of arrays use anyclip.tree (tree.global_norm, "
                "tree.clip_by_global_norm)"
            )
        elif is_array(t_list):
            fix = "wrap a lone array in a list: [t]"
        elif isinstance(t_list, Iterator) and _first_is_parameter(t_list):
            fix = (
                "these are trainable parameters (`model.parameters()`), and list(...) of them "
                "would use the weights, not their gradients: pass "
                "[p.grad for p in model.parameters()], or clip in place with "
                "anyclip.torch.clip_grad_norm_(model.parameters(), max_norm)"
            )
        elif isinstance(t_list, Iterable) and not isinstance(t_list, (str, bytes)):
            fix = "pass list(...) of it (a generator or iterator can be read only once)"
        else:
            fix = "pass a list or tuple of arrays"
        msg = (
            f"`t_list` should be a sequence of tensors. Received {type(t_list)}. "
            f"anyclip expected a list or tuple of arrays (or None); {fix}"
        )
        raise TypeError(msg)
    return list(t_list)


def floating_list(
    xp: Namespace, t_list: list[Any], *, mixed_ok: bool = False, beside: Sequence[Any] = ()
) -> list[Any]:
    """Convert the entries, check they are floating and (unless ``mixed_ok``) share one dtype.

    Python data goes to the device of the first array among the entries and ``beside`` (the
    call's other arguments), as :func:`as_input` places it.
    """
    present = [v for v in t_list if v is not None]
    if all_arrays(present):  # the common case: one check per distinct type and dtype
        dtypes = {v.dtype for v in present}
        if len(dtypes) <= 1 or mixed_ok:
            for dtype in dtypes:
                if dtype_kind(xp, dtype) != "real":
                    break
            else:
                return list(t_list)
    out: list[Any] = []
    first = None
    home = _first_array(present, beside)
    for i, v in enumerate(t_list):
        if v is None:
            out.append(None)
            continue
        v = as_input(v, xp, f"t_list[{i}]", beside=home)
        require_kind(xp, v, f"t_list[{i}]", ("real",), FLOATS, tf_attr)  # TF's L2Loss
        if first is None:
            first = v
        elif v.dtype != first.dtype and not mixed_ok:
            msg = (
                "`t_list` must hold arrays of one dtype (TF does not promote), got "
                f"{dtype_name(first.dtype)} and {dtype_name(v.dtype)} at t_list[{i}]; cast "
                "them to one dtype, or pass accumulate_dtype='widest'"
                f"{tf_words(tf_expected(first.dtype, v.dtype))}"  # TF's Pack of the sums
            )
            raise TypeError(msg)
        out.append(v)
    return out


def real_list(
    xp: Namespace, t_list: list[Any], *, beside: Sequence[Any] = ()
) -> tuple[list[Any], list[int]]:
    """Entries converted to arrays of a real or bool dtype, and the positions of the bool ones.

    For ``clip_by_global_norm`` with ``use_norm`` (no norm to compute): TF scales integers by
    a truncated factor, and a bool array by the factor cast to bool (its ``*`` on bools is a
    logical and), measured in TF 2.21. Python data goes to the device of the first array
    among the entries and ``beside``, as in :func:`floating_list`.
    """
    out: list[Any] = []
    bools: list[int] = []
    home = _first_array(t_list, beside)
    for i, v in enumerate(t_list):
        if v is None:
            out.append(None)
            continue
        v = as_input(v, xp, f"t_list[{i}]", beside=home)
        kind = require_kind(xp, v, f"t_list[{i}]", ("int", "real", "bool"), "a real or bool dtype")
        if kind == "bool":
            bools.append(i)
        out.append(v)
    return out, bools


def _first_array(*groups: Sequence[Any]) -> tuple[Any, ...]:
    """The first array of ``groups``, as a 1-tuple (empty: none), looked for once per call."""
    for group in groups:
        for v in group:
            if is_array(v):
                return (v,)
    return ()


# --------------------------------------------------------------- nonfinite
#: The non-finite policies of the global-norm clippers (see ``clip_by_global_norm``).
NONFINITE_POLICIES: tuple[Nonfinite, ...] = ("tf", "torch", "skip", "raise")


def check_nonfinite(nonfinite: object) -> Nonfinite:
    """``nonfinite`` itself; ``ValueError`` unless it is one of :data:`NONFINITE_POLICIES`."""
    for policy in NONFINITE_POLICIES:
        if nonfinite == policy:
            return policy
    msg = (
        f"`nonfinite` must be one of {NONFINITE_POLICIES}, got {nonfinite!r}; "
        "pass 'tf' for TensorFlow's behaviour"
    )
    raise ValueError(msg)


# ------------------------------------------------------ Keras optimizers
def _keras_number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        msg = f"`{name}` must be a number or None (as in Keras), got {value!r}"
        raise TypeError(msg) from None


def keras_option(clipnorm: Any, clipvalue: Any, global_clipnorm: Any) -> tuple[str, float] | None:
    """The one Keras clipping option in force, as ``(name, value)``, or None for none.

    Keras 3 (``keras.optimizers.Optimizer``) refuses more than one of the three, and applies
    one only when it is positive (``if self.clipnorm and self.clipnorm > 0``).
    """
    given = {
        "clipnorm": _keras_number(clipnorm, "clipnorm"),
        "clipvalue": _keras_number(clipvalue, "clipvalue"),
        "global_clipnorm": _keras_number(global_clipnorm, "global_clipnorm"),
    }
    if sum(v is not None for v in given.values()) > 1:
        msg = (  # Keras's own wording first, for a ported assertRaisesRegex
            "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. Received: "
            f"clipnorm={clipnorm}, clipvalue={clipvalue}, global_clipnorm={global_clipnorm}"
        )
        raise ValueError(msg)
    for name, value in given.items():
        if value is not None and value > 0:
            return name, value
    return None
