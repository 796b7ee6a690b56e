"""Public clipping functions: argument checks, namespace resolution and docs.

The arithmetic lives in :mod:`anyclip._core`; the dtype policy in :mod:`anyclip._convert`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

from anyclip import _core, _fast, _gradients
from anyclip._compat import comparable_dtype, dtype_name, is_array, is_numpy_scalar, namespace
from anyclip._convert import (
    as_input,
    as_operand,
    check_broadcastable,
    check_compatible,
    dtype_kind,
    is_sequence_of_arrays,
    native_order,
    normalize_axes,
    require_kind,
    resolve_accumulate_dtype,
)

__all__ = [
    "clip_by_average_norm",
    "clip_by_global_norm",
    "clip_by_norm",
    "clip_by_value",
    "global_norm",
]

ArrayT = TypeVar("ArrayT")

_FLOATS = "a floating dtype (float16, bfloat16, float32 or float64)"


def clip_by_value(
    t: ArrayT, clip_value_min: Any, clip_value_max: Any, name: str | None = None
) -> ArrayT:
    """Clip values elementwise to ``[clip_value_min, clip_value_max]``, as ``tf.clip_by_value``.

    Computes ``maximum(minimum(t, clip_value_max), clip_value_min)``.

    Parameters
    ----------
    t : array
        Input of a real dtype (floating or integer). Python numbers and lists are converted as
        TF converts them (ints to int32, floats to float32).
    clip_value_min, clip_value_max : number or array
        The bounds. Python numbers are converted to ``t``'s dtype; arrays must have ``t``'s
        dtype and broadcast to ``t``'s shape without enlarging it.
    name : str, optional
        Accepted for compatibility with TF and ignored.

    Returns
    -------
    array
        Same type, dtype, shape and device as ``t``.

    Raises
    ------
    TypeError
        If ``t`` is bool or complex, if a bound is a Python float while ``t`` is an integer
        array, or if a bound is an array of another dtype.
    ValueError
        If a bound is None, or would broadcast ``t`` to a larger shape.

    See Also
    --------
    tf.clip_by_value : The TensorFlow function this mirrors.

    Notes
    -----
    TF's rules are kept on purpose:

    * The upper bound is applied first and the lower bound last, so when
      ``clip_value_min > clip_value_max`` every element becomes ``clip_value_min`` (NumPy, torch
      and JAX ``clip`` give ``clip_value_max``).
    * NaN propagates: a NaN element, or a NaN bound, gives NaN.
    * No type promotion: a Python int bound outside an integer dtype's range wraps around as in
      TF (``int8`` with a bound of 1000 uses -24), and NumPy scalar bounds are cast silently
      (``np.float32(3.7)`` is 3 on an int32 array).
    * Gradients follow TF: an element exactly at a bound passes its gradient to ``t``; a NaN
      element sends its gradient to ``clip_value_min``; broadcast bounds receive the sum.
    * The sign of a zero result is not specified (TF's own depends on SIMD lanes).

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> anyclip.clip_by_value(np.array([-2.0, 0.5, 3.0], dtype=np.float32), -1.0, 1.0)
    array([-1. ,  0.5,  1. ], dtype=float32)
    >>> anyclip.clip_by_value(np.array([0, 5, 10]), 6, 4)  # min > max: min wins, as in TF
    array([6, 6, 6])
    """
    plain = _fast.plain_clip_by_value(t, clip_value_min, clip_value_max)
    if plain is not None:
        return plain
    xp = namespace(t, clip_value_min, clip_value_max, names=_BOUNDS)
    t = as_input(t, xp, "t")
    require_kind(xp, t, "t", ("int", "real"), "a real dtype (floating or integer)")
    lo = as_operand(clip_value_min, xp, t, "clip_value_min")
    hi = as_operand(clip_value_max, xp, t, "clip_value_max")
    check_broadcastable(tuple(lo.shape), tuple(t.shape), "clip_value_min", "t")
    check_broadcastable(tuple(hi.shape), tuple(t.shape), "clip_value_max", "t")
    widened = comparable_dtype(xp, t.dtype)
    if widened is not None:  # a backend without min/max for this dtype: exact in a wider one
        out = _core.clip_by_value(
            xp, xp.astype(t, widened), xp.astype(lo, widened), xp.astype(hi, widened)
        )
        return xp.astype(out, t.dtype)
    return _core.clip_by_value(xp, t, lo, hi)


def _clip_norm_operand(xp: Any, clip_norm: Any, t: Any) -> Any:
    """``clip_norm`` as ``tf.clip_by_norm`` converts it (negative becomes 0)."""
    if clip_norm is None:
        msg = "`clip_norm` must be a number or an array, got None"
        raise ValueError(msg)
    if isinstance(clip_norm, (bool, int, float)) or is_numpy_scalar(clip_norm):
        if clip_norm < 0:  # a Python comparison, as in TF; NaN passes through
            clip_norm = 0
        return as_operand(clip_norm, xp, t, "clip_norm")
    if is_array(clip_norm):
        what = "a real dtype (TF's maximum(clip_norm, 0) refuses bool)"
        require_kind(xp, clip_norm, "clip_norm", ("int", "real"), what)
        if xp.isdtype(clip_norm.dtype, "unsigned integer"):
            # never negative, so TF's maximum(clip_norm, 0) is the identity (torch has none)
            return as_operand(clip_norm, xp, t, "clip_norm", cast_arrays=True)
        zero = as_operand(0, xp, clip_norm, "clip_norm")
        clipped = _gradients.maximum(xp, clip_norm, zero)
        return as_operand(clipped, xp, t, "clip_norm", cast_arrays=True)
    if isinstance(clip_norm, (list, tuple)):
        c = as_operand(clip_norm, xp, t, "clip_norm")
        return _gradients.maximum(xp, c, as_operand(0, xp, t, "clip_norm"))
    msg = f"`clip_norm` must be a number or an array, got {type(clip_norm).__name__}"
    raise TypeError(msg)


def clip_by_norm(
    t: ArrayT,
    clip_norm: Any,
    axes: Any = None,
    name: str | None = None,
    *,
    accumulate_dtype: Any = None,
) -> ArrayT:
    """Scale ``t`` so its L2 norm over ``axes`` is at most ``clip_norm``, as ``tf.clip_by_norm``.

    Computes ``t * clip_norm / maximum(l2norm(t, axes), clip_norm)``.

    Parameters
    ----------
    t : array
        Input of a real floating dtype.
    clip_norm : number or array
        The largest norm. A negative number is replaced by 0. An array may have any real dtype
        (it is clamped at 0 in its own dtype, then cast to ``t``'s, as TF does) and may
        broadcast to ``t``'s shape, giving one bound per element.
    axes : int or sequence of int, optional
        Axes of the norm. ``None`` (default) uses every axis; ``[]`` clips each element on its
        own (``sign(t) * minimum(abs(t), clip_norm)``).
    name : str, optional
        Accepted for compatibility with TF and ignored.
    accumulate_dtype : dtype or str, optional
        Not in TF. Compute in this floating dtype (e.g. ``"float32"`` for float16 input, so
        squares cannot overflow) and cast the result back to ``t``'s dtype. ``None`` (default)
        computes in ``t``'s dtype, as TF.

    Returns
    -------
    array
        Same type, dtype, shape and device as ``t``.

    Raises
    ------
    TypeError
        If ``t`` is not a real floating array, ``clip_norm`` has an unusable type, or
        ``accumulate_dtype`` is not a floating dtype.
    ValueError
        If ``clip_norm`` is None or would enlarge ``t``, or an axis is repeated or out of range.

    See Also
    --------
    tf.clip_by_norm : The TensorFlow function this mirrors.

    Notes
    -----
    TF's behaviour is kept on purpose:

    * There is no shortcut when the norm is already small: the result is ``(t * c) / c``, which
      can differ from ``t`` by one rounding, and ``t * c`` can overflow or underflow.
    * The squares are summed in ``t``'s dtype: a float16 element of magnitude 256 or more makes
      the norm inf and the result 0.
    * An all-zero ``t`` stays zero with a finite gradient (TF's double ``where``); with
      ``clip_norm`` 0 it gives NaN, and ``clip_norm`` inf gives NaN everywhere.
    * When the norm equals ``clip_norm`` the gradient is the clipping branch's, as in TF.

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> anyclip.clip_by_norm(np.array([3.0, 4.0], dtype=np.float32), 1.0)
    array([0.6, 0.8], dtype=float32)
    >>> m = np.array([[3.0, 4.0], [0.3, 0.4]], dtype=np.float32)
    >>> anyclip.clip_by_norm(m, 1.0, axes=1)  # one norm per row
    array([[0.6, 0.8],
           [0.3, 0.4]], dtype=float32)
    """
    if axes is None and accumulate_dtype is None:
        plain = _fast.plain_clip_by_norm(t, clip_norm)
        if plain is not None:
            return plain
    xp = namespace(t, clip_norm, names=("t", "clip_norm"))
    t = as_input(t, xp, "t")
    require_kind(xp, t, "t", ("real",), _FLOATS)
    ax = normalize_axes(axes, t.ndim, "axes")
    acc = resolve_accumulate_dtype(xp, accumulate_dtype, [t.dtype])
    if acc is not None and acc != t.dtype and ax is None:  # no cast copy of all of t
        like = xp.astype(xp.reshape(t, (-1,))[: min(1, math.prod(t.shape))], acc)
        c = _clip_norm_operand(xp, clip_norm, like)
        if c.ndim == 0:
            return _core.upcast_clip_by_norm(xp, t, c, acc)
    work = t if acc is None or acc == t.dtype else xp.astype(t, acc)
    c = _clip_norm_operand(xp, clip_norm, work)
    check_broadcastable(tuple(c.shape), tuple(t.shape), "clip_norm", "t")
    out = _core.clip_by_norm(xp, work, c, ax)
    return out if out.dtype == t.dtype else xp.astype(out, t.dtype)


_BOUNDS = ("t", "clip_value_min", "clip_value_max")


class _ListNames(Sequence[str]):
    """``t_list[0]``, ``t_list[1]``, ... then ``extra``: argument names, made only when needed."""

    def __init__(self, n: int, extra: tuple[str, ...] = ()) -> None:
        self.n, self.extra = n, extra

    def __len__(self) -> int:
        return self.n + len(self.extra)

    def __getitem__(self, i: Any) -> Any:
        if not isinstance(i, int):
            return [self[j] for j in range(len(self))[i]]
        return f"t_list[{i}]" if i < self.n else self.extra[i - self.n]


def _check_t_list(t_list: Any) -> list[Any]:
    if not is_sequence_of_arrays(t_list):
        msg = (
            "`t_list` must be a sequence (list or tuple) of arrays, "
            f"got {type(t_list).__module__}.{type(t_list).__qualname__}"
        )
        raise TypeError(msg)
    return list(t_list)


def _floating_list(xp: Any, t_list: list[Any], *, mixed_ok: bool = False) -> list[Any | None]:
    """Convert the entries, check they are floating and (unless ``mixed_ok``) share one dtype."""
    present = [v for v in t_list if v is not None]
    if all(is_array(v) for v in present):  # the common case: one check per distinct dtype
        dtypes = {v.dtype for v in present}
        if len(dtypes) <= 1 or mixed_ok:
            for dtype in dtypes:
                if dtype_kind(xp, dtype) != "real":
                    break
            else:
                return list(t_list)
    out: list[Any | None] = []
    first = None
    for i, v in enumerate(t_list):
        if v is None:
            out.append(None)
            continue
        v = as_input(v, xp, f"t_list[{i}]")
        require_kind(xp, v, f"t_list[{i}]", ("real",), _FLOATS)
        if first is None:
            first = v
        elif v.dtype != first.dtype and not mixed_ok:
            msg = (
                "`t_list` must hold arrays of one dtype (TF does not promote), got "
                f"{dtype_name(first.dtype)} and {dtype_name(v.dtype)} at t_list[{i}]"
            )
            raise TypeError(msg)
        out.append(v)
    return out


def global_norm(
    t_list: Sequence[Any], name: str | None = None, *, accumulate_dtype: Any = None
) -> Any:
    """The L2 norm of all arrays in ``t_list`` together, as ``tf.linalg.global_norm``.

    Computes ``sqrt(sum(sum(t * t) / 2 for t in t_list) * 2)``.

    Parameters
    ----------
    t_list : list or tuple of arrays
        Arrays of one real floating dtype; ``None`` entries are skipped.
    name : str, optional
        Accepted for compatibility with TF and ignored.
    accumulate_dtype : dtype, str or "widest", optional
        Not in TF. Cast every array to this floating dtype before squaring and summing, which
        also lets arrays of different dtypes be mixed; ``"widest"`` picks the widest dtype of
        the arrays (float32 for float16 with bfloat16). ``None`` (default) is TF's behaviour:
        sum in the arrays' own dtype and refuse mixed dtypes.

    Returns
    -------
    array
        A 0-d array of the arrays' dtype (or ``accumulate_dtype``), on their device. For an
        empty list (or only ``None`` entries) a float32 zero, as TF returns; without any array
        to take a library from, it is a NumPy array.

    Raises
    ------
    TypeError
        If ``t_list`` is not a list or tuple (a lone array, a generator or a dict), its arrays
        are not floating or (without ``accumulate_dtype``) do not share one dtype, or
        ``accumulate_dtype`` is not a floating dtype.

    See Also
    --------
    tf.linalg.global_norm : The TensorFlow function this mirrors.

    Notes
    -----
    As in TF, squares are summed in the arrays' own dtype (a float16 element of magnitude 256
    or more gives inf), and the gradient at an all-zero input is NaN (the derivative of the
    square root at 0).

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> a = np.array([3.0, 4.0], dtype=np.float32)
    >>> b = np.array([[12.0]], dtype=np.float32)
    >>> anyclip.global_norm([a, None, b])
    array(13., dtype=float32)
    """
    items = _check_t_list(t_list)
    xp = namespace(*items, names=_ListNames(len(items)))
    return _global_norm(xp, items, accumulate_dtype)


def _global_norm(xp: Any, items: list[Any], accumulate_dtype: Any, *, checked: bool = False) -> Any:
    """``global_norm`` of ``items`` (arrays or None; already converted when ``checked``)."""
    if not checked:
        items = _floating_list(xp, items, mixed_ok=accumulate_dtype is not None)
    arrays = [v for v in items if v is not None]
    acc = resolve_accumulate_dtype(xp, accumulate_dtype, [v.dtype for v in arrays])
    if acc is not None and any(v.dtype != acc for v in arrays):
        return _core.upcast_global_norm(xp, arrays, acc)  # no cast copy of every array
    if arrays:
        return _core.global_norm(xp, arrays, arrays[0].dtype, arrays[0])
    return _core.global_norm(xp, [], xp.float32 if acc is None else acc, None)


def clip_by_global_norm(
    t_list: Sequence[Any],
    clip_norm: Any,
    use_norm: Any = None,
    name: str | None = None,
    *,
    accumulate_dtype: Any = None,
    nonfinite: str = "tf",
) -> tuple[list[Any], Any]:
    """Scale every array in ``t_list`` by one factor so their global norm is at most ``clip_norm``.

    Mirrors ``tf.clip_by_global_norm``: every array is multiplied by
    ``clip_norm * minimum(1 / use_norm, 1 / clip_norm)``, where ``use_norm`` defaults to
    :func:`global_norm` of ``t_list``.

    Parameters
    ----------
    t_list : list or tuple of arrays
        Arrays of one real floating dtype; ``None`` entries are kept as ``None``.
    clip_norm : number or array
        The largest global norm. An array must have ``use_norm``'s dtype.
    use_norm : array, optional
        A precomputed global norm (a 0-d floating array). Its dtype is the dtype of the scale,
        which is then cast to each array's dtype.
    name : str, optional
        Accepted for compatibility with TF and ignored.
    accumulate_dtype : dtype, str or "widest", optional
        Not in TF. As in :func:`global_norm`: the dtype the global norm (and so the scale) is
        computed in; with it the arrays may have different floating dtypes, each of which is
        kept. ``None`` (default) is TF's behaviour.
    nonfinite : {"tf", "torch", "skip", "raise"}, optional
        Not in TF. What a non-finite global norm does. ``"tf"`` (default): every output is NaN.
        ``"torch"``: what ``torch.nn.utils.clip_grad_norm_`` gives, the bare factor
        ``c * minimum(1 / norm, 1 / c)``: 0 for an inf norm (finite entries become 0, infinite
        ones NaN), NaN for a NaN norm. ``"skip"``: the arrays are returned unchanged; the
        returned norm, inf or NaN, is the report (``isfinite(norm)`` tells, with no host
        sync). ``"raise"``: raise ``FloatingPointError``; this reads the norm on the host
        (a device sync; not usable under ``jax.jit``).

    Returns
    -------
    list_clipped : list
        The scaled arrays (always a list, even for a tuple input), ``None`` entries kept.
    global_norm : array
        ``use_norm``, or the computed global norm, unchanged.

    Raises
    ------
    TypeError
        If ``t_list`` is not a list or tuple, its arrays are not floating or (without
        ``accumulate_dtype``) do not share one dtype, ``use_norm`` is not an array,
        ``clip_norm`` is an array of another dtype, or ``accumulate_dtype`` is not floating.
    ValueError
        If ``clip_norm`` is None, ``clip_norm`` or ``use_norm`` cannot broadcast against every
        array (a larger one enlarges the outputs, as in TF), or ``nonfinite`` is not one of
        the policies.
    FloatingPointError
        With ``nonfinite="raise"``, if the global norm is inf or NaN.

    See Also
    --------
    tf.clip_by_global_norm : The TensorFlow function this mirrors.

    Notes
    -----
    TF's behaviour is kept on purpose:

    * If the global norm is inf or NaN, **every** output is NaN, finite entries included.
    * There is no shortcut below the threshold: the factor is ``c * (1 / c)``, which is not
      exactly 1 for some ``c`` (41 gives ``0.99999994`` in float32).
    * A negative ``clip_norm`` leaves the arrays unchanged; a negative ``use_norm`` flips their
      signs; ``clip_norm`` 0 on an all-zero input gives NaN.
    * The gradient flows through the global norm; at an all-zero input it is NaN even though
      nothing is clipped. At a norm exactly equal to ``clip_norm`` it is the clipping branch's.

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> a = np.array([3.0, 4.0], dtype=np.float32)
    >>> b = np.array([[12.0]], dtype=np.float32)
    >>> clipped, norm = anyclip.clip_by_global_norm([a, None, b], 6.5)
    >>> clipped
    [array([1.5, 2. ], dtype=float32), None, array([[6.]], dtype=float32)]
    >>> norm
    array(13., dtype=float32)
    """
    if nonfinite not in _core.NONFINITE_POLICIES:
        msg = f"`nonfinite` must be one of {_core.NONFINITE_POLICIES}, got {nonfinite!r}"
        raise ValueError(msg)
    items = _check_t_list(t_list)
    xp = namespace(
        *items, clip_norm, use_norm, names=_ListNames(len(items), ("clip_norm", "use_norm"))
    )
    if use_norm is None:
        values = _floating_list(xp, items, mixed_ok=accumulate_dtype is not None)
        use_norm = _global_norm(xp, values, accumulate_dtype, checked=True)
    elif not is_array(use_norm):
        msg = (
            "`use_norm` must be a 0-d floating array (the precomputed global norm), "
            f"got {type(use_norm).__name__}"
        )
        raise TypeError(msg)
    else:
        values = _any_list(xp, items)
        use_norm = native_order(use_norm)
        require_kind(xp, use_norm, "use_norm", ("real",), _FLOATS)
    c = as_operand(clip_norm, xp, use_norm, "clip_norm")
    for i, v in enumerate(values):  # TF multiplies each array by the scale, of any shape
        if v is not None:
            check_compatible(tuple(c.shape), tuple(v.shape), "clip_norm", f"t_list[{i}]")
            check_compatible(tuple(use_norm.shape), tuple(v.shape), "use_norm", f"t_list[{i}]")
    if nonfinite == "raise" and not bool(xp.all(xp.isfinite(use_norm))):  # host sync
        msg = f"the global norm is not finite ({float(use_norm)}); `nonfinite` is 'raise'"
        raise FloatingPointError(msg)
    return _core.clip_by_global_norm(xp, values, c, use_norm, nonfinite), use_norm


def _any_list(xp: Any, t_list: list[Any]) -> list[Any | None]:
    """Entries converted to arrays, any real dtype (TF scales integers by a truncated factor)."""
    out: list[Any | None] = []
    for i, v in enumerate(t_list):
        if v is None:
            out.append(None)
            continue
        v = as_input(v, xp, f"t_list[{i}]")
        require_kind(xp, v, f"t_list[{i}]", ("int", "real"), "a real dtype")
        out.append(v)
    return out


def clip_by_average_norm(t: ArrayT, clip_norm: Any, name: str | None = None) -> ArrayT:
    """Clip ``t`` so its L2 norm divided by its size is at most ``clip_norm``.

    Mirrors ``tf.compat.v1.clip_by_average_norm``: computes
    ``t * clip_norm * minimum(size(t) / l2norm(t), 1 / clip_norm)``.

    Parameters
    ----------
    t : array
        A float32 array (TF accepts no other dtype).
    clip_norm : number or array
        The largest average norm: a Python number or a float32 array broadcastable to ``t``.
    name : str, optional
        Accepted for compatibility with TF and ignored.

    Returns
    -------
    array
        Same type, dtype, shape and device as ``t``.

    Raises
    ------
    TypeError
        If ``t`` is not float32, or ``clip_norm`` is an array of another dtype.
    ValueError
        If ``clip_norm`` is None or would enlarge ``t``.

    See Also
    --------
    tf.compat.v1.clip_by_average_norm : The TensorFlow function this mirrors.
    clip_by_norm : ``clip_by_norm(t, clip_norm * size(t))`` gives close, not identical, bits.

    Notes
    -----
    As in TF: only float32 is accepted; a negative ``clip_norm`` leaves ``t`` unchanged; an
    all-zero ``t`` stays zero (and gives NaN with ``clip_norm`` 0); inf or NaN ``clip_norm``
    gives NaN.

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> anyclip.clip_by_average_norm(np.array([3.0, 4.0], dtype=np.float32), 1.0)
    array([1.2, 1.6], dtype=float32)
    """
    xp = namespace(t, clip_norm, names=("t", "clip_norm"))
    t = as_input(t, xp, "t")
    if dtype_kind(xp, t.dtype) != "real" or t.dtype != xp.float32:
        msg = f"`t` must have dtype float32 (the only one TF accepts), got {dtype_name(t.dtype)}"
        raise TypeError(msg)
    c = as_operand(clip_norm, xp, t, "clip_norm")
    check_broadcastable(tuple(c.shape), tuple(t.shape), "clip_norm", "t")
    return _core.clip_by_average_norm(xp, t, c)
