"""Keras 3's weight constraints: the formulas, op for op.

Layer: core, beside :mod:`anyclip._core` (whose ``clip_by_value`` and ``clip_by_norm`` it
reuses). Every function takes the namespace ``xp`` first and arrays that the public layer
(:mod:`anyclip.constraints`) has already checked and converted:
``w`` is floating (or, for :func:`non_neg`, any real dtype), the bounds and ``epsilon`` are 0-d
arrays of ``w``'s dtype, ``axes`` is a tuple of distinct non-negative axes or ``None``. The
operation order is Keras 3.15's (``keras/src/constraints/constraints.py``), so results round
as Keras's do on the TF backend; nothing branches on an array value, so everything traces under
``jax.jit`` and ``torch.compile``.

The constraints are projections applied after an optimizer step, not differentiated through;
their gradients are whatever the backend's autodiff gives for these ops.

The norms are the kernels' (``kernels.norm2``, chosen by the public layer), as ``tf.norm``'s:
Keras's ``sqrt(sum(square(w)))`` is the same TF ops, so float64 sums take TF's order where the
kernels have it, and with flushing kernels (inside :class:`anyclip.flush_subnormals`) every op
flushes its subnormal inputs and results, as TF's CPU kernels do.
"""

from __future__ import annotations

from typing import Any

from anyclip import _core
from anyclip import _gradients as g
from anyclip._compat import dtype_name
from anyclip._kernels import Kernels
from anyclip._kernels._tforder_xp import rounded_apart
from anyclip._numerics import quotient, sqrt
from anyclip._typing import Namespace

__all__ = [
    "legacy_non_neg",
    "max_norm",
    "min_max_norm",
    "non_neg",
    "norms",
    "unit_norm",
]


def _divide(xp: Namespace, a: Any, b: Any) -> Any:
    """``a / b``, correctly rounded; float16 through float32, as TF's (Eigen's) half division.

    The float32 quotient rounded to float16 is the correctly rounded float16 quotient. On JAX
    through :func:`~anyclip._numerics.quotient`, which XLA cannot turn into a multiplication by
    the reciprocal of a broadcast divisor (1 ULP from Keras' quotient in places, and
    ``1 / 1.19e-7``, float16's epsilon, overflowed into ``inf``, which made an all-zero float16
    slice NaN on JAX where Keras gives 0).
    """
    if dtype_name(a.dtype) != "float16":
        return quotient(xp, a, b)
    return xp.astype(quotient(xp, xp.astype(a, xp.float32), xp.astype(b, xp.float32)), a.dtype)


def norms(xp: Namespace, kernels: Kernels, w: Any, axes: tuple[int, ...] | None) -> Any:
    """``sqrt(sum(square(w), axis=axes, keepdims=True))``: Keras's ``norms``.

    ``kernels.norm2``: TF's order for float64 sums where the kernels have it, the square kept
    apart under ``jax.jit`` where a norm spans one element (XLA would fold ``sqrt(w * w)``
    into ``abs(w)``, without the square's overflow), subnormal squares flushed by flushing
    kernels. ``axes=()`` reduces nothing (TF's ``reduce_sum`` over no axis), giving
    ``sqrt(w * w)``; torch's ``sum(dim=())`` would reduce every axis, so that case does not
    call it.
    """
    if axes == ():  # each norm is one element: the square kept apart, as in norm2
        return sqrt(xp, rounded_apart(xp, kernels.flush(xp, w * w, w)))
    return kernels.norm2(xp, kernels.flush_squares(xp, w), axes)


@_core._entry
def max_norm(
    xp: Namespace,
    kernels: Kernels,
    w: Any,
    max_value: Any,
    epsilon: Any,
    axes: tuple[int, ...] | None,
) -> Any:
    """``w * (clip(norms, 0, max_value) / (epsilon + norms))``: Keras's ``MaxNorm``."""
    f = kernels.flush
    n = norms(xp, kernels, w, axes)
    desired = _core.clip_by_value(xp, n, xp.zeros_like(max_value), max_value, kernels)
    q = f(xp, _divide(xp, desired, f(xp, f(xp, epsilon) + n)))
    return f(xp, w * q, w)


@_core._entry
def unit_norm(
    xp: Namespace, kernels: Kernels, w: Any, epsilon: Any, axes: tuple[int, ...] | None
) -> Any:
    """``w / (epsilon + norms)``: Keras's ``UnitNorm``."""
    f = kernels.flush
    return f(xp, _divide(xp, w, f(xp, f(xp, epsilon) + norms(xp, kernels, w, axes))), w)


@_core._entry
def min_max_norm(
    xp: Namespace,
    kernels: Kernels,
    w: Any,
    min_value: Any,
    max_value: Any,
    rate: Any,
    one_minus_rate: Any,
    epsilon: Any,
    axes: tuple[int, ...] | None,
) -> Any:
    """``w * ((rate * clip(norms, lo, hi) + (1 - rate) * norms) / (epsilon + norms))``.

    Keras's ``MinMaxNorm``; ``one_minus_rate`` is ``1 - rate`` as Keras computes it (in Python
    for a Python ``rate``), passed in so that its rounding is the caller's choice.
    """
    f = kernels.flush
    n = norms(xp, kernels, w, axes)
    clipped = _core.clip_by_value(xp, n, min_value, max_value, kernels)
    desired = f(xp, f(xp, f(xp, rate) * clipped) + f(xp, f(xp, one_minus_rate) * n))
    q = f(xp, _divide(xp, desired, f(xp, f(xp, epsilon) + n)))
    return f(xp, w * q, w)


@_core._entry
def non_neg(xp: Namespace, w: Any, zero: Any) -> Any:
    """``maximum(w, 0)``: Keras 3's ``NonNeg`` (NaN stays NaN; negatives become +0)."""
    return g.maximum(xp, w, zero)


@_core._entry
def legacy_non_neg(xp: Namespace, w: Any, zero: Any) -> Any:
    """``w * cast(w >= 0, w.dtype)``: tf.keras 2's ``NonNeg``.

    Differs from :func:`non_neg` where the product shows it: a negative ``w`` gives ``-0.0``
    and ``-inf`` gives NaN (``-inf * 0``). An unsigned ``w`` is never negative: its product is
    ``w`` itself, returned as a copy (torch has no ``>=`` for uint16, uint32 and uint64, nor a
    CUDA ``*``).
    """
    if xp.isdtype(w.dtype, "unsigned integer"):
        return xp.asarray(w, copy=True)
    return w * xp.astype(w >= zero, w.dtype)
