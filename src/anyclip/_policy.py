"""anyclip's argument policy, written down once: each argument converted and checked as TF does.

Layer: core (the public layer's checks). Every public function (and adapter) converts and checks
its arguments here before anything reaches :mod:`anyclip._core`: the main input, the operands
(bounds, ``clip_norm``, ``epsilon``), axes, the non-finite policy and Keras's clipping options.
Its parts: :mod:`anyclip._policy_dtypes` (the dtype rules), :mod:`anyclip._policy_lists` (the
``t_list`` arguments), :mod:`anyclip._policy_axes` (the axes) and :mod:`anyclip._policy_words`
(TF's wording in the messages).

TensorFlow never promotes: every argument is converted to the dtype of the main input, and what
cannot be converted is refused. anyclip follows it:

* The main input (``t``, ``tensor``, ``x``) is an array of any supported library. A Python scalar
  or (nested) list is converted as TF's ``convert_to_tensor`` does: bool → bool, int → int32,
  float → float32, complex → complex128 (a list by its widest element), in the namespace of
  the other array arguments (NumPy when there is none).
* A Python scalar argument (a bound, ``clip_norm``, ``epsilon``) is converted to the main input's
  dtype: a float (or complex) on an integer dtype is a ``TypeError``; an integer outside an integer
  dtype's range wraps around, as in TF; a float beyond a floating dtype's range becomes ±inf.
* A NumPy scalar (``np.float32(3.7)``) is a *value* in TF and is cast silently, as NumPy's
  ``astype`` casts it (truncating towards zero on an integer dtype; a complex one keeps its real
  part), as TF does.
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
import numbers
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from anyclip import _gradients
from anyclip._compat import (
    data_device,
    dtype_name,
    imported,
    is_array,
    is_numpy_scalar,
    is_weak_scalar,
    namespace,
)
from anyclip._kernels._dask import nonempty_chunks
from anyclip._numerics import constant, float_overflow_threshold, tf_float16
from anyclip._policy_dtypes import dtype_kind
from anyclip._policy_words import (
    TF_NONE,
    _dim,
    tf_broadcast,
    tf_cannot_convert,
    tf_incompatible,
    tf_shape_words,
    tf_words,
)
from anyclip._sparse import sparse_or_refuse
from anyclip._typing import Namespace, Nonfinite

__all__ = [
    "NONFINITE_POLICIES",
    "as_input",
    "as_operand",
    "check_broadcastable",
    "check_compatible",
    "check_meta",
    "check_operand",
    "check_nonfinite",
    "finite_number",
    "keras_option",
    "native_order",
    "scalar_operand",
]


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
    compare equal to float32 and would be refused as "float32, got float32". A dask array
    with chunks of no elements loses them (:func:`~anyclip._kernels._dask.nonempty_chunks`:
    dask computes some such arrays to the wrong shape).
    """
    if getattr(getattr(value, "dtype", None), "isnative", True) is False:
        return value.astype(value.dtype.newbyteorder("="))
    if type(value).__module__.startswith("dask.array"):
        return nonempty_chunks(value)
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
    elif dtype_name(dtype) == "float16":
        as_float = tf_float16(as_float, via_float32=True)
    return as_float


def _numpy_scalar_for(value: Any, kind: str, dtype: Any) -> Any:
    """A NumPy scalar cast the way TF casts NumPy values: as NumPy's ``astype`` casts it.

    On an integer dtype that is C's cast (truncation towards zero in range; NaN, inf and
    values out of range give what the machine's conversion gives, as in TF: measured equal
    to ``np.asarray(v).astype(dtype)`` on 408 probes of TF 2.21); a complex scalar keeps its
    real part, on any real dtype.
    """
    item = value.item()
    if isinstance(item, bool) and kind not in ("bool", "int"):
        # NumPy casts its bools to any float dtype, and TF takes NumPy's cast: bfloat16 too,
        # where TF refuses a Python bool.
        return float(item)
    if kind == "int":
        np = sys.modules["numpy"]  # a NumPy scalar: NumPy is imported
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # NumPy's ComplexWarning, cast warnings
            return np.asarray(value).astype(dtype_name(dtype)).item()
    if isinstance(item, complex) and kind == "real":
        return item.real
    return item


def _convert_nested(xp: Namespace, value: Any, dtype: Any, kind: str, name: str) -> Any:
    if isinstance(value, (list, tuple)):
        return [_convert_nested(xp, v, dtype, kind, name) for v in value]
    if is_numpy_scalar(value):
        value = _numpy_scalar_for(value, kind, dtype)
        if type(value) is float and dtype_name(dtype) == "float16":
            value = tf_float16(value, via_float32=False)  # NumPy's one rounding
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
        elif dtype_name(target) == "float16":
            value = tf_float16(value, via_float32=True)
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


def keras_option(
    clipnorm: Any, clipvalue: Any, global_clipnorm: Any, *, shown: tuple[Any, ...] | None = None
) -> tuple[str, float] | None:
    """The one Keras clipping option in force, as ``(name, value)``, or None for none.

    Keras 3 (``keras.optimizers.Optimizer``) refuses more than one of the three, and applies
    one only when it is positive (``if self.clipnorm and self.clipnorm > 0``). ``shown``: the
    options as the caller received them, for the error message, where a number stands in for
    a schedule or an array here.
    """
    given = {
        "clipnorm": _keras_number(clipnorm, "clipnorm"),
        "clipvalue": _keras_number(clipvalue, "clipvalue"),
        "global_clipnorm": _keras_number(global_clipnorm, "global_clipnorm"),
    }
    if sum(v is not None for v in given.values()) > 1:
        norm, value, global_norm = shown or (clipnorm, clipvalue, global_clipnorm)
        msg = (  # Keras's own wording first, for a ported assertRaisesRegex
            "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. Received: "
            f"clipnorm={norm}, clipvalue={value}, global_clipnorm={global_norm}"
        )
        raise ValueError(msg)
    for name, value in given.items():
        if value is not None and value > 0:
            return name, value
    return None


def scalar_operand(
    xp: Namespace,
    value: Any,
    dtype: Any,
    like: Any,
    name: str,
    *,
    positive: bool = False,
    nonnegative: bool = False,
) -> Any:
    """``value`` (a real Python number or a 0-d real array) as a 0-d array of ``dtype``.

    A Python number or a NumPy array is checked on the host (``positive``: ``> 0``;
    ``nonnegative``: ``>= 0``); another array is only cast (reading its value would sync the
    device), and with ``nonnegative`` a negative value counts as 0 (``maximum(value, 0)``, as
    ``tf.clip_by_norm`` clamps an array ``clip_norm``).
    """
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) or is_array(value)):
        msg = f"`{name}` must be a real number or a 0-d array, got {type(value).__name__}"
        raise TypeError(msg)
    if not is_array(value):
        v = float(value)
        if math.isnan(v) or (positive and v <= 0) or (nonnegative and v < 0):
            want = "> 0" if positive else ">= 0" if nonnegative else "a number"
            msg = f"`{name}` must be {want}, got {value!r}; pass a {want} value"
            raise ValueError(msg)
        return constant(xp, v, dtype, like)
    if tuple(value.shape) != ():
        msg = (
            f"`{name}` must be a number or a 0-d array, got an array of shape "
            f"{tuple(value.shape)}; pass one value for every leaf"
        )
        raise ValueError(msg)
    np = imported("numpy")
    if (positive or nonnegative) and np is not None and isinstance(value, np.ndarray):
        # a host value: checked as a number (np.array(-1.0) flipped gradients under optax)
        scalar_operand(xp, value[()], dtype, like, name, positive=positive, nonnegative=nonnegative)
    if namespace(value) is not xp:
        value = constant(xp, value, dtype, like)
    elif value.dtype != dtype:
        value = xp.astype(value, dtype)
    if nonnegative:
        # a device value is not read (a host sync): a negative one counts as 0, as
        # tf.clip_by_norm's maximum(clip_norm, 0)
        value = _gradients.maximum(xp, value, constant(xp, 0.0, dtype, like))
    return value
