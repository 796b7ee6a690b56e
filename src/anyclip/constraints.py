"""Keras 3's weight constraints (``keras.constraints``) for any array library.

Layer: public, over :mod:`anyclip._constraints` (the formulas). Each function projects a weight
array as Keras 3.15's constraint of the same name does after every optimizer step, with Keras's
formulas, defaults, ``epsilon`` (``1e-7``, rounded to the weight's dtype: 1.19e-7 in float16)
and dtype rules (floating weights keep their dtype; integer weights give float32, Keras's
``floatx``). The classes :class:`MaxNorm`, :class:`UnitNorm`, :class:`MinMaxNorm` and
:class:`NonNeg` carry Keras's class names and arguments, so ``kernel_constraint=MaxNorm(3)``
ports as it reads; calling one calls the function.

To apply them after each step: :func:`anyclip.torch.constrain_` and
:func:`anyclip.torch.constrain_after_step` on torch, :func:`anyclip.optax.constrain` after
``optax.apply_updates`` on JAX. Keras's ``axis`` refers to Keras's layouts: a ``Dense`` kernel is
``(in, out)`` (``axis=0``), where ``torch.nn.Linear.weight`` is ``(out, in)`` (``axis=1``).

>>> import numpy as np
>>> from anyclip import constraints
>>> w = np.array([[3.0, 0.3], [4.0, 0.4]], dtype=np.float32)  # two columns: norms 5 and 0.5
>>> constraints.max_norm(w, 2.0)
array([[1.2       , 0.29999995],
       [1.6       , 0.39999992]], dtype=float32)
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from anyclip import _constraints
from anyclip._compat import namespace
from anyclip._kernels import kernels_for
from anyclip._keywords import hints_keywords
from anyclip._policy import as_input, as_operand, check_broadcastable
from anyclip._policy_axes import normalize_axes
from anyclip._policy_dtypes import require_kind
from anyclip._typing import ArrayT, Axes, Namespace, Operand, PythonData

__all__ = [
    "MaxNorm",
    "MinMaxNorm",
    "NonNeg",
    "UnitNorm",
    "max_norm",
    "min_max_norm",
    "non_neg",
    "unit_norm",
]

#: Keras's default ``keras.config.epsilon()``, added to the norms before dividing.
_EPSILON = 1e-7

_WEIGHT = "a real dtype (floating, or integer: computed in float32)"


def _weight(w: Any, names: tuple[str, ...], *bounds: Any) -> tuple[Namespace, Any]:
    """``w`` as a floating array of its namespace (integers become float32, Keras's dtype)."""
    xp = namespace(w, *bounds, names=names)
    w = as_input(w, xp, "w", beside=bounds)
    kind = require_kind(xp, w, "w", ("int", "real"), _WEIGHT)
    if kind == "int":  # Keras's sqrt casts integers to floatx (float32), then w to its dtype
        w = xp.astype(w, xp.float32)
    return xp, w


def _axes(xp: Namespace, w: Any, axis: Axes) -> tuple[int, ...] | None:
    return normalize_axes(axis, w.ndim, "axis")


def _norm_shape(w: Any, axes: tuple[int, ...] | None) -> tuple[int, ...]:
    shape = tuple(w.shape)
    if axes is None:
        return tuple(1 for _ in shape)
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _bound(xp: Namespace, value: Any, w: Any, name: str, axes: tuple[int, ...] | None) -> Any:
    """A bound (``max_value``, ``min_value``, ``rate``) as an array of ``w``'s dtype.

    Python numbers are converted to ``w``'s dtype, as Keras's ``clip`` and ``*`` convert them;
    an array must have ``w``'s dtype (Keras refuses another) and broadcast to the norms' shape.
    """
    out = as_operand(value, xp, w, name)
    check_broadcastable(tuple(out.shape), _norm_shape(w, axes), name, "the norms")
    return out


def _epsilon(xp: Namespace, epsilon: Any, w: Any) -> Any:
    return _bound(xp, epsilon, w, "epsilon", None)


@hints_keywords
def max_norm(
    w: ArrayT | PythonData,
    max_value: Operand = 2.0,
    axis: Axes = 0,
    *,
    epsilon: Operand = _EPSILON,
) -> ArrayT:
    """Scale the slices of ``w`` along ``axis`` to a norm of at most ``max_value``.

    Keras 3's ``MaxNorm(max_value=2, axis=0)``: with ``norms = sqrt(sum(w ** 2, axis,
    keepdims=True))``, returns ``w * (clip(norms, 0, max_value) / (epsilon + norms))``.

    Parameters
    ----------
    w : array
        The weights, of a real dtype (integers are cast to float32 first; Keras squares and
        sums them in their integer dtype, which wraps around, then takes the root in float32).
    max_value : number or array, default 2.0
        The largest norm. A negative value gives zeros (``clip`` to ``[0, max_value]`` applies
        the lower bound last). An array must have ``w``'s dtype.
    axis : int, sequence of int or None, default 0
        The axes each norm is taken over (Keras's layouts: ``0`` for a ``Dense`` kernel
        ``(in, out)``, ``[0, 1, 2]`` for a ``Conv2D`` kernel ``(h, w, in, out)``; for torch's
        ``Linear.weight`` ``(out, in)`` use ``1``, for ``Conv2d.weight`` ``[1, 2, 3]``).
        ``None``: one norm over all of ``w``. The kinds of :func:`anyclip.clip_by_norm`'s
        ``axes`` (Keras 3 reduces with TF's ``reduce_sum``): a torch or JAX array is refused.
    epsilon : number or array, default 1e-7
        Not an argument of Keras's class: ``keras.config.epsilon()``. Converted to ``w``'s
        dtype.

    Returns
    -------
    array
        Same type, shape and device as ``w``; ``w``'s dtype, or float32 for integer ``w``.

    Raises
    ------
    TypeError
        If ``w`` is bool or complex, ``max_value`` is an array of another dtype, or ``axis``
        holds floats or strings or is an array of a library other than NumPy.
    ValueError
        If an axis is out of range or repeated, ``axis`` is a sequence TF cannot convert, or
        ``max_value`` does not broadcast to the norms' shape.

    See Also
    --------
    keras.constraints.MaxNorm : The Keras 3 constraint this mirrors.
    anyclip.clip_by_norm : TF's ``clip_by_norm`` (no epsilon: different numbers).

    Notes
    -----
    Slices already under ``max_value`` are scaled by ``norm / (epsilon + norm)``, slightly
    below 1, as in Keras: a weight shrinks by about ``epsilon / norm`` relative at every step.
    An all-zero slice stays zero; a slice with a NaN or an infinite norm becomes NaN (an
    infinite one keeps 0 where ``w`` is finite).

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip.constraints import max_norm
    >>> max_norm(np.array([[3.0], [4.0]], dtype=np.float32), 1.0)  # the column's norm is 5
    array([[0.6],
           [0.8]], dtype=float32)
    """
    xp, arr = _weight(w, ("w", "max_value"), max_value)
    axes = _axes(xp, arr, axis)
    hi = _bound(xp, max_value, arr, "max_value", axes)
    eps = _epsilon(xp, epsilon, arr)
    return cast(ArrayT, _constraints.max_norm(xp, kernels_for(xp, [arr]), arr, hi, eps, axes))


@hints_keywords
def unit_norm(w: ArrayT | PythonData, axis: Axes = 0, *, epsilon: Operand = _EPSILON) -> ArrayT:
    """Scale the slices of ``w`` along ``axis`` to unit norm.

    Keras 3's ``UnitNorm(axis=0)``: ``w / (epsilon + sqrt(sum(w ** 2, axis, keepdims=True)))``.

    Parameters
    ----------
    w : array
        The weights, of a real dtype (integers are cast to float32 first; Keras squares and
        sums them in their integer dtype, which wraps around, then takes the root in float32).
    axis : int, sequence of int or None, default 0
        The axes of each norm, in Keras's layout (see :func:`max_norm`).
    epsilon : number or array, default 1e-7
        ``keras.config.epsilon()``, converted to ``w``'s dtype.

    Returns
    -------
    array
        Same type, shape and device as ``w``; ``w``'s dtype, or float32 for integer ``w``.

    Raises
    ------
    TypeError
        If ``w`` is bool or complex.
    ValueError
        If an axis is out of range or repeated.

    See Also
    --------
    keras.constraints.UnitNorm : The Keras 3 constraint this mirrors.
    anyclip.l2_normalize : TF's ``l2_normalize`` (``epsilon`` on the squared norm instead).

    Notes
    -----
    The norm of each result slice is ``norm / (epsilon + norm)``, just below 1; an all-zero
    slice stays zero.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip.constraints import unit_norm
    >>> unit_norm(np.array([[3.0, 0.0], [4.0, 0.0]], dtype=np.float32))
    array([[0.6, 0. ],
           [0.8, 0. ]], dtype=float32)
    """
    xp, arr = _weight(w, ("w",))
    axes = _axes(xp, arr, axis)
    eps = _epsilon(xp, epsilon, arr)
    return cast(ArrayT, _constraints.unit_norm(xp, kernels_for(xp, [arr]), arr, eps, axes))


@hints_keywords
def min_max_norm(
    w: ArrayT | PythonData,
    min_value: Operand = 0.0,
    max_value: Operand = 1.0,
    rate: Operand = 1.0,
    axis: Axes = 0,
    *,
    epsilon: Operand = _EPSILON,
) -> ArrayT:
    """Move the norms of the slices of ``w`` along ``axis`` towards ``[min_value, max_value]``.

    Keras 3's ``MinMaxNorm(min_value=0.0, max_value=1.0, rate=1.0, axis=0)``: with ``norms`` as
    in :func:`max_norm`, ``desired = rate * clip(norms, min_value, max_value) + (1 - rate) *
    norms`` and the result is ``w * (desired / (epsilon + norms))``.

    Parameters
    ----------
    w : array
        The weights, of a real dtype (integers are cast to float32 first; Keras squares and
        sums them in their integer dtype, which wraps around, then takes the root in float32).
    min_value, max_value : number or array, default 0.0 and 1.0
        The bounds of the norms. ``clip`` applies ``max_value`` first, so ``min_value`` wins
        when it is larger.
    rate : number or array, default 1.0
        ``1.0`` enforces the bounds; a smaller rate moves the norms part of the way. A Python
        ``rate`` gives ``1 - rate`` computed in Python (float64) and then converted, as Keras.
    axis : int, sequence of int or None, default 0
        The axes of each norm, in Keras's layout (see :func:`max_norm`).
    epsilon : number or array, default 1e-7
        ``keras.config.epsilon()``, converted to ``w``'s dtype.

    Returns
    -------
    array
        Same type, shape and device as ``w``; ``w``'s dtype, or float32 for integer ``w``.

    Raises
    ------
    TypeError
        If ``w`` is bool or complex, or a bound is an array of another dtype.
    ValueError
        If an axis is out of range or repeated, or a bound does not broadcast to the norms.

    See Also
    --------
    keras.constraints.MinMaxNorm : The Keras 3 constraint this mirrors.

    Notes
    -----
    As in Keras, ``(1 - rate) * norms`` is computed even for ``rate=1.0``: an infinite norm
    gives NaN.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip.constraints import min_max_norm
    >>> w = np.array([[0.3, 3.0], [0.4, 4.0]], dtype=np.float32)  # norms 0.5 and 5
    >>> min_max_norm(w, min_value=1.0, max_value=2.0)
    array([[0.5999999 , 1.2       ],
           [0.79999983, 1.6       ]], dtype=float32)
    """
    xp, arr = _weight(w, ("w", "min_value", "max_value", "rate"), min_value, max_value, rate)
    axes = _axes(xp, arr, axis)
    lo = _bound(xp, min_value, arr, "min_value", axes)
    hi = _bound(xp, max_value, arr, "max_value", axes)
    r = _bound(xp, rate, arr, "rate", axes)
    if isinstance(rate, (bool, int, float)):
        rest = _bound(xp, 1 - rate, arr, "rate", axes)
    else:
        rest = _bound(xp, 1, arr, "rate", axes) - r
    eps = _epsilon(xp, epsilon, arr)
    return cast(
        ArrayT,
        _constraints.min_max_norm(xp, kernels_for(xp, [arr]), arr, lo, hi, r, rest, eps, axes),
    )


@hints_keywords
def non_neg(w: ArrayT | PythonData, *, legacy: bool = False) -> ArrayT:
    """Replace the negative weights by zero.

    Keras 3's ``NonNeg``: ``maximum(w, 0)``. With ``legacy=True``, tf.keras 2's (Keras 2.x,
    ``tf_keras``): ``w * cast(w >= 0, w.dtype)``.

    Parameters
    ----------
    w : array
        The weights, of a real dtype (floating or integer; the dtype is kept).
    legacy : bool, default False
        Not in Keras 3. Use tf.keras 2's formula, for a checkpoint trained with it. The two
        differ where the product shows: a negative weight gives ``-0.0`` (Keras 3: ``0``) and
        ``-inf`` gives NaN (Keras 3: ``0``). NaN stays NaN in both.

    Returns
    -------
    array
        Same type, dtype, shape and device as ``w``.

    Raises
    ------
    TypeError
        If ``w`` is bool or complex.

    See Also
    --------
    keras.constraints.NonNeg : The Keras 3 constraint this mirrors.

    Notes
    -----
    The sign of a zero result from ``-0.0`` input is not specified by Keras 3 (TF's
    ``maximum`` returns ``-0.0`` or ``0.0`` depending on SIMD lanes).

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip.constraints import non_neg
    >>> w = np.array([-2.0, 0.5, np.nan, -np.inf], dtype=np.float32)
    >>> non_neg(w)
    array([0. , 0.5, nan, 0. ], dtype=float32)
    >>> non_neg(w, legacy=True)
    array([-0. ,  0.5,  nan,  nan], dtype=float32)
    """
    xp = namespace(w, names=("w",))
    arr = as_input(w, xp, "w")
    require_kind(xp, arr, "w", ("int", "real"), "a real dtype (floating or integer)")
    zero = as_operand(0, xp, arr, "w")
    if legacy:
        return cast(ArrayT, _constraints.legacy_non_neg(xp, arr, zero))
    return cast(ArrayT, _constraints.non_neg(xp, arr, zero))


# ------------------------------------------------------------- Keras's classes
@dataclasses.dataclass(frozen=True)
class MaxNorm:
    """Keras's ``MaxNorm(max_value=2, axis=0)`` as a callable: ``MaxNorm(3)(w)``, :func:`max_norm`.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip.constraints import MaxNorm
    >>> MaxNorm(1.0)(np.array([3.0, 4.0], dtype=np.float32))
    array([0.6, 0.8], dtype=float32)
    """

    max_value: Operand = 2.0
    axis: Axes = 0
    epsilon: Operand = _EPSILON

    def __call__(self, w: ArrayT) -> ArrayT:
        """:func:`max_norm` of ``w`` with these arguments."""
        return max_norm(w, self.max_value, self.axis, epsilon=self.epsilon)


@dataclasses.dataclass(frozen=True)
class UnitNorm:
    """Keras's ``UnitNorm(axis=0)`` as a callable: ``UnitNorm()(w)`` is :func:`unit_norm`.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip.constraints import UnitNorm
    >>> UnitNorm()(np.array([3.0, 4.0], dtype=np.float32))
    array([0.6, 0.8], dtype=float32)
    """

    axis: Axes = 0
    epsilon: Operand = _EPSILON

    def __call__(self, w: ArrayT) -> ArrayT:
        """:func:`unit_norm` of ``w`` with these arguments."""
        return unit_norm(w, self.axis, epsilon=self.epsilon)


@dataclasses.dataclass(frozen=True)
class MinMaxNorm:
    """Keras's ``MinMaxNorm(min_value=0.0, max_value=1.0, rate=1.0, axis=0)`` as a callable.

    ``MinMaxNorm(0.5, 1.0)(w)`` is :func:`min_max_norm`.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip.constraints import MinMaxNorm
    >>> MinMaxNorm(1.0, 2.0)(np.array([0.3, 0.4], dtype=np.float32))
    array([0.5999999 , 0.79999983], dtype=float32)
    """

    min_value: Operand = 0.0
    max_value: Operand = 1.0
    rate: Operand = 1.0
    axis: Axes = 0
    epsilon: Operand = _EPSILON

    def __call__(self, w: ArrayT) -> ArrayT:
        """:func:`min_max_norm` of ``w`` with these arguments."""
        return min_max_norm(
            w, self.min_value, self.max_value, self.rate, self.axis, epsilon=self.epsilon
        )


@dataclasses.dataclass(frozen=True)
class NonNeg:
    """Keras's ``NonNeg()`` as a callable: ``NonNeg()(w)`` is :func:`non_neg`.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip.constraints import NonNeg
    >>> NonNeg()(np.array([-1.0, 2.0], dtype=np.float32))
    array([0., 2.], dtype=float32)
    """

    legacy: bool = False

    def __call__(self, w: ArrayT) -> ArrayT:
        """:func:`non_neg` of ``w``."""
        return non_neg(w, legacy=self.legacy)
