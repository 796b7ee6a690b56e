"""The ``axis``/``axes`` arguments, read as TF 2.21's reductions read them: the one axes parser.

Layer: core (the argument policy for axes). Every function with axes (``clip_by_norm``'s
``axes``, ``l2_normalize``'s and the Keras constraints' ``axis``, the pair or int of ``norm``
and ``normalize`` after their own check, the adapters' ``axes``) reads them through
:func:`normalize_axes`. TF converts the axes to a tensor (``convert_to_tensor``) that its
reduction takes if it is int32 or int64, then checks each axis (in range, not repeated); the
rules below are measured on TF 2.21 (``tests/data/make_tf_axes_kinds.py``):

* ``None``: every axis. A Python ``int`` or ``bool`` (``True`` is axis 1) is one axis.
* A ``list``, ``tuple`` or ``range`` (nested too, rectangular, as TF converts it) of Python
  ints, bools, NumPy integer scalars or NumPy integer arrays: those axes, flattened; ``[]`` is
  none (each element is its own norm). Refused as TF refuses them: one sequence that mixes bools
  with other items (``(True, 0)``: ``ValueError``), rows of different lengths (``ValueError``),
  floats, complex numbers, strings and NumPy bools (``TypeError``: TF's sum takes int32 or int64
  axes only), anything else (a set, a generator: ``ValueError``, TF cannot convert it).
* A NumPy scalar or array (any shape, flattened): its values, as TF casts them to int32. Bool
  and integer ones are taken, and floating or complex ones *that hold whole numbers*
  (``np.float64(1.0)`` is axis 1). Refused on purpose, where TF truncates or wraps silently:
  a NumPy float that is not whole (TF reduces ``np.float64(1.5)`` over axis 1 and
  ``np.float64(-0.7)`` over axis 0), a Python int past int32 (TF reduces ``2**40`` over axis 0),
  a NumPy string array (which TF parses). Each is a ``TypeError`` or ``ValueError`` that names
  the value.
* An array of another library (torch, JAX, CuPy, Dask, array-api-strict) is refused with a
  ``TypeError``, although TF reads a CPU torch or JAX array through NumPy: reading an axis from
  an array is a host read (a device synchronisation on an accelerator, a graph break under
  ``torch.compile``, an error under ``jax.jit``), and anyclip never makes one. Pass a Python
  int or tuple (``tuple(axes.tolist())`` where you mean to read it).

The errors follow anyclip's convention (docs/porting.md, "Errors"): ``ValueError`` where TF's
eager mode raises ``InvalidArgumentError`` about the axes' values (out of range, repeated) or
a ``ValueError``, ``TypeError`` where it refuses the axes' dtype; each message names the
argument, says what was expected and what came, and ends with TF's own words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from anyclip._compat import dtype_name, imported, is_array, library, namespace
from anyclip._policy_words import tf_cannot_convert, tf_type, tf_words

__all__ = ["axes_description", "normalize_axes"]

#: A leaf of a sequence: its value, and its NumPy dtype (None for a Python scalar).
Leaf = tuple[Any, Any]

#: TF's words for a sequence it cannot convert (``ValueError``).
_TF_MIXED = "Can't convert Python sequence with mixed types to Tensor."
_TF_RAGGED = "Can't convert non-rectangular Python sequence to Tensor."


def _tf_tidx(tf_dtype: str) -> str:
    """TF's words for axes of a dtype its reductions do not take (eager IAE)."""
    return f"Value for attr 'Tidx' of {tf_dtype} is not in the list of allowed values: int32, int64"


def _tf_unsupported(value: Any) -> str:
    return (
        f"Attempt to convert a value ({_shown(value)}) with an unsupported type "
        f"({type(value)!r}) to a Tensor."
    )


def _shown(value: Any) -> str:
    """``repr(value)``; a torch, JAX or other library's array by its type and shape only.

    :func:`axes_description`: its values are not read, on an error path either.
    """
    if is_array(value) and not _is_numpy(value):
        return axes_description(value)
    return repr(value)


def normalize_axes(
    axes: Any, ndim: int, name: str, *, repeats: bool = False
) -> tuple[int, ...] | None:
    """``axes`` as a tuple of distinct non-negative axis indices (``None`` stays ``None``).

    ``repeats``: keep an axis named twice (``tf.norm``'s pair, which TF checks one by one).
    Raises ``TypeError`` or ``ValueError`` as the module says; no array is read but NumPy's.
    """
    if axes is None:
        return None
    if type(axes) is int:  # the common cases, without the general walk
        flat = [axes]
    elif type(axes) is tuple and all(type(a) is int for a in axes):
        flat = list(axes)
    else:
        flat = _axes_values(axes, name)
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
        if a % ndim in out and not repeats:
            words = f"Invalid reduction arguments: Axes contains duplicate dimension: {a % ndim}"
            msg = (
                f"`{name}` must not repeat an axis, got {flat} (axis {a % ndim} twice)"
                f"{tf_words(words)}"
            )
            raise ValueError(msg)
        out.append(a % ndim)
    return tuple(out)


def axes_description(axes: Any) -> str:
    """``axes`` as an error message shows it: its ``str``, but an array's type only.

    The values of a torch, JAX or other library's array are not read (that would be a host
    read, on an error path too); a NumPy array's are, as TF shows them.
    """
    if is_array(axes) and not _is_numpy(axes):
        return f"a {library(namespace(axes))} array of shape {tuple(axes.shape)}"
    return str(axes)


def _is_numpy(value: Any) -> bool:
    """A NumPy array (``np.matrix`` and masked arrays too) or scalar."""
    np = imported("numpy")
    return np is not None and isinstance(value, (np.ndarray, np.generic))


def _axes_values(axes: Any, name: str) -> list[int]:
    """The axes ``axes`` names, in order (checked for kind; not for range or repeats).

    Python's own types first: torch.compile traces this without a graph break for them.
    """
    if isinstance(axes, (list, tuple, range)):
        leaves: list[Leaf] = []
        _walk(axes, name, leaves)
        return _sequence_values(axes, name, leaves)
    if isinstance(axes, int):  # bool too: True is axis 1
        return [int(axes)]
    if _is_numpy(axes):  # before float: np.float64 is a float
        return _numpy_values(axes, name)
    if isinstance(axes, float):
        msg = (
            f"`{name}` must be integers, got the float {axes!r}; pass an int"
            f"{tf_words(tf_cannot_convert(axes, 'int32'))}"
        )
        raise TypeError(msg)
    if isinstance(axes, (complex, str, bytes)):
        kind = "complex128" if isinstance(axes, complex) else "string"
        msg = (
            f"`{name}` must be integers, got the {type(axes).__name__} {axes!r}; pass an int"
            f"{tf_words(_tf_tidx(kind))}"
        )
        raise TypeError(msg)
    if is_array(axes):
        msg = (
            f"`{name}` must be a Python int, a sequence of them or a NumPy integer array, got "
            f"{axes_description(axes)}: reading an axis from it would be a host read (a device "
            "synchronisation on an accelerator, a graph break under torch.compile or jax.jit); "
            f"pass a Python int or tuple of ints, such as `tuple({name}.tolist())`"
        )
        raise TypeError(msg)
    raise ValueError(_unsupported(axes, name))


def _unsupported(value: Any, name: str) -> str:
    return (
        f"`{name}` must be None, an int, a list, tuple or range of ints or a NumPy integer "
        f"array, got {_shown(value)} of type {type(value).__name__}; pass a tuple of ints"
        f"{tf_words(_tf_unsupported(value))}"
    )


def _numpy_values(value: Any, name: str) -> list[int]:
    """A NumPy scalar or array as axes: its values, if TF's cast to int32 keeps them."""
    kind = value.dtype.kind
    if kind == "O":  # objects: each as TF converts it
        data = value.tolist()
        return _axes_values(data if isinstance(data, list) else [data], name)
    if kind not in "biufc":
        msg = (
            f"`{name}` must hold integers, got a NumPy value of dtype {value.dtype}; pass a "
            "tuple of ints"
        )
        raise TypeError(msg)
    flat = value.reshape(-1).tolist()
    if kind in "fc":
        for v in flat:
            whole = complex(v).imag == 0 and math.isfinite(v.real) and float(v.real).is_integer()
            if not whole:
                msg = (
                    f"`{name}` must hold whole numbers, got {v!r} in a NumPy value of dtype "
                    f"{value.dtype}, which is not a whole number; pass the axis as an int (TF "
                    "2.21 casts it to int32, truncating it towards zero, where anyclip refuses "
                    "to guess)"
                )
                raise TypeError(msg)
        return [int(v.real) for v in flat]
    return [int(v) for v in flat]


def _kind(item: Any) -> str:
    """What TF's conversion of a sequence sees in ``item``: items of two kinds do not mix."""
    if _is_numpy(item):
        return {"b": "bool", "i": "number", "u": "number", "f": "number"}.get(
            item.dtype.kind, str(item.dtype)
        )
    if isinstance(item, bool):
        return "bool"
    return "number" if isinstance(item, (int, float)) else type(item).__name__


def _walk(seq: Sequence[Any], name: str, leaves: list[Leaf]) -> tuple[int, ...]:
    """Append the leaves of ``seq`` to ``leaves``; return its shape.

    TF's conversion of a nested sequence: rectangular, with no mixing of kinds (bools, numbers,
    strings, complex numbers) among the items of one sequence.
    """
    shapes: list[tuple[int, ...]] = []
    kinds: set[str] = set()
    for item in seq:
        if isinstance(item, (list, tuple, range)):
            shapes.append(_walk(item, name, leaves))
            continue
        if _is_numpy(item):
            leaves.extend((v, item.dtype) for v in item.reshape(-1).tolist())
            shapes.append(tuple(int(d) for d in item.shape))
        elif isinstance(item, (int, float, complex, str, bytes)):
            leaves.append((item, None))
            shapes.append(())
        else:
            raise ValueError(_unsupported(item, name))
        kinds.add(_kind(item))
    if len(kinds) > 1:
        msg = (
            f"`{name}` must not mix bools, numbers, strings or complex numbers in one sequence, "
            f"got {seq!r}; pass ints only{tf_words(_TF_MIXED)}"
        )
        raise ValueError(msg)
    if any(s != shapes[0] for s in shapes):
        msg = (
            f"`{name}` must be flat (or rows of one length), got {seq!r}; pass a flat tuple of "
            f"ints{tf_words(_TF_RAGGED)}"
        )
        raise ValueError(msg)
    return (len(shapes), *(shapes[0] if shapes else ()))


def _sequence_values(seq: Any, name: str, leaves: list[Leaf]) -> list[int]:
    """The leaves of a sequence as axes: ints only (TF's sum takes int32 or int64 axes)."""
    for value, dtype in leaves:
        integer = isinstance(value, int) if dtype is None else dtype.kind in "iu"
        if not integer:  # a Python bool is an int; a NumPy bool is not (TF: a bool tensor)
            msg = (
                f"`{name}` must hold integers, got {value!r} in {seq!r}; pass ints only"
                f"{tf_words(_tf_tidx(_tf_sequence_dtype(leaves)))}"
            )
            raise TypeError(msg)
    return [int(v) for v, _ in leaves]


def _tf_sequence_dtype(leaves: list[Leaf]) -> str:
    """TF's name of the dtype it converts a sequence of ``leaves`` to (measured on 2.21).

    Strings, then complex numbers, win; floats give float32 where the sequence holds a Python
    scalar, else the widest NumPy float; bools left alone give bool.
    """
    kinds = {"b" if isinstance(v, bool) else type(v).__name__ for v, d in leaves if d is None}
    kinds |= {d.kind for _, d in leaves if d is not None}
    if kinds & {"str", "bytes", "U", "S"}:
        return "string"
    if kinds & {"complex", "c"}:
        return "complex128"
    floats = [d for _, d in leaves if d is not None and d.kind == "f"]
    if "float" in kinds or (floats and any(d is None for _, d in leaves)):
        return "float"
    if floats:
        return tf_type(dtype_name(max(floats, key=lambda d: d.itemsize)))
    return "bool"
