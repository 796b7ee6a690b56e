"""TF's wording in anyclip's error messages: dtype names, shapes and TF's own sentences.

Layer: core (the argument policy's words; :mod:`anyclip._policy` and the rule modules build
their messages with them). Where TF refuses the same call, a message ends with TF's own wording
in parentheses, ``(TF: Incompatible shapes: [2,3] vs. [5])``, spelled as TF 2.21's eager mode
spells it (its dtype names: ``float``, ``double``, ``half``; its shapes: ``[2,3]``), so that
a ported ``assertRaisesRegex`` still matches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyclip._compat import (
    dtype_name,
)

__all__ = [
    "FLOATS",
    "TF_NONE",
    "tf_attr",
    "tf_broadcast",
    "tf_cannot_convert",
    "tf_expected",
    "tf_incompatible",
    "tf_same_dtype",
    "tf_shape_words",
    "tf_type",
    "tf_words",
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
