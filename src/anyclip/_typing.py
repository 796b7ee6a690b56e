"""Types for type checkers: the array protocol, the bound ``ArrayT`` and the argument types.

Layer: typing only. Nothing here runs at call time; the protocol costs one class creation at
import (``typing`` is imported by Python itself), so ``import anyclip`` stays cheap. NumPy
arrays, ``torch.Tensor``, ``jax.Array`` and array-api-strict arrays all match :class:`Array`,
so a type checker keeps numpy -> numpy and torch -> torch through every function.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, Literal, Protocol, SupportsIndex, TypeAlias, TypeVar

__all__ = [
    "Array",
    "ArrayT",
    "Axes",
    "DTypeLike",
    "Namespace",
    "Nonfinite",
    "NormOrd",
    "Operand",
    "PythonData",
]


class Array(Protocol):
    """What anyclip reads of an array: its dtype, shape and number of dimensions.

    A structural type: any array of the supported libraries matches it without inheriting.
    """

    @property
    def dtype(self) -> Any:
        """The array's dtype object."""
        ...

    @property
    def shape(self) -> Any:
        """The array's shape (a tuple of ints; ``torch.Size`` for torch)."""
        ...

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        ...


#: An array type kept from argument to result (numpy in, numpy out; torch in, torch out).
ArrayT = TypeVar("ArrayT", bound=Array)

#: An array namespace: a module such as ``array_api_compat.numpy`` or ``jax.numpy``.
Namespace: TypeAlias = ModuleType

#: Python data that TF converts to a tensor: a number or a (nested) list of numbers.
PythonData: TypeAlias = complex | Sequence[Any]

#: A number, a list of numbers or an array: the bounds, ``clip_norm`` and ``epsilon``.
Operand: TypeAlias = Array | complex | Sequence[Any]

#: A dtype object of the array's library or its name (``"float32"``); ``"widest"`` where noted.
DTypeLike: TypeAlias = Any

#: Axes: an integer, a sequence of integers or ``None`` (every axis).
Axes: TypeAlias = SupportsIndex | Sequence[Any] | None

#: What a non-finite global norm does in the global-norm clippers.
Nonfinite: TypeAlias = Literal["tf", "torch", "skip", "raise"]

#: ``tf.norm``'s ``ord``: ``"euclidean"``, ``"fro"`` (matrix only) or a number ``p > 0``.
NormOrd: TypeAlias = Literal["euclidean", "fro"] | float
