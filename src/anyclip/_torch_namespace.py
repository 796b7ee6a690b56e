"""anyclip's array namespace for torch tensors: array-api-compat's, minus a cost per operation.

Layer: helpers below the public layer, beside :mod:`anyclip._compat` (the only importer, once a
torch tensor is met: importing anyclip still imports no framework).

array-api-compat's torch namespace wraps ``where`` and the two-argument functions
(``maximum``, ``logical_and``, ...) in ``_fix_promotion``, which works out the array API's
promotion of the operands' dtypes (torch lets a 0-d tensor take the other operand's dtype,
where the standard promotes): two ``result_type`` table look-ups and two ``Tensor.to`` calls
for each call with a 0-d operand, even when both operands already have one dtype. anyclip's
rules make such calls by the dozen per step (``skip_on_spike``'s decision alone: 18), so that
work was a sixth of an eager step's host time on the CPU (0.6 ms a step for four small
tensors), and about a fifth of the bytecode ``torch.compile`` traced for it.

Here those functions call torch's own operation directly when both operands are tensors of one
dtype (then the promotion is that dtype, and array-api-compat's ``Tensor.to`` calls return
their input: the same operation on the same tensors), and array-api-compat's function
otherwise (a Python scalar, two dtypes); ``cumulative_sum`` calls ``torch.cumsum``
(array-api-compat's looks up the namespace first, which ``torch.compile`` cannot trace).
Everything else is array-api-compat's, the same objects. The namespace is :data:`NAMESPACE`,
a module object of its own (this module's globals hold only the functions below: pytest's
doctest finder, which walks a source module's globals, trips over some of torch's objects);
``library`` maps its ``__name__`` to ``"torch"``.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import array_api_compat.torch as compat_torch
import torch

__all__ = ["NAME", "NAMESPACE"]

#: The namespace's ``__name__``.
NAME = "anyclip._torch_namespace.NAMESPACE"

#: A module's own attributes, not copied from array-api-compat's namespace.
MODULE_ATTRIBUTES = frozenset(
    {
        *("__name__", "__qualname__", "__doc__", "__file__", "__cached__", "__loader__"),
        *("__spec__", "__package__", "__path__", "__builtins__", "__all__", "__annotations__"),
    }
)


def _one_dtype(x1: Any, x2: Any) -> bool:
    """Whether ``x1`` and ``x2`` are tensors of one dtype (array-api-compat promotes nothing)."""
    return isinstance(x1, torch.Tensor) and isinstance(x2, torch.Tensor) and x1.dtype == x2.dtype


def _where(condition: Any, x1: Any, x2: Any, /) -> Any:
    """``torch.where`` for operands of one dtype; array-api-compat's ``where`` otherwise."""
    if _one_dtype(x1, x2):
        return torch.where(condition, x1, x2)
    return compat_torch.where(condition, x1, x2)


def _two_arguments(op: Callable[..., Any], fallback: Callable[..., Any]) -> Callable[..., Any]:
    def call(x1: Any, x2: Any, /) -> Any:
        if _one_dtype(x1, x2):
            return op(x1, x2)
        return fallback(x1, x2)

    call.__name__ = call.__qualname__ = fallback.__name__
    call.__doc__ = (
        f"``torch.{op.__name__}`` for operands of one dtype; array-api-compat's otherwise."
    )
    return call


def _cumulative_sum(
    x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
) -> Any:
    """``torch.cumsum`` where array-api-compat's would call it (``include_initial=False``).

    array-api-compat's ``cumulative_sum`` first looks up ``x``'s namespace, which
    ``torch.compile`` cannot trace (``torch.compile(fullgraph=True)`` of ZClip's step fails).
    """
    if include_initial or (axis is None and x.ndim > 1):  # its other cases, its errors
        return compat_torch.cumulative_sum(
            x, axis=axis, dtype=dtype, include_initial=include_initial
        )
    return torch.cumsum(x, dim=0 if axis is None else axis, dtype=dtype)


def _namespace() -> types.ModuleType:
    """A module object: array-api-compat's torch namespace, the fast functions in its place.

    All of array-api-compat's (functions, dtypes, ``linalg``, ``fft``, the constants,
    ``__array_api_version__``, ``__array_namespace_info__``).
    """
    ns = types.ModuleType(NAME, __doc__)
    names = vars(ns)
    names.update({k: v for k, v in vars(compat_torch).items() if k not in MODULE_ATTRIBUTES})
    names["where"] = _where
    names["maximum"] = _two_arguments(torch.maximum, compat_torch.maximum)
    names["minimum"] = _two_arguments(torch.minimum, compat_torch.minimum)
    names["logical_and"] = _two_arguments(torch.logical_and, compat_torch.logical_and)
    names["logical_or"] = _two_arguments(torch.logical_or, compat_torch.logical_or)
    names["cumulative_sum"] = _cumulative_sum
    return ns


#: anyclip's torch namespace.
NAMESPACE = _namespace()
