"""The per-array clippers: ``clip_by_value``, ``clip_by_norm`` and ``clip_by_average_norm``.

Layer: rules (public functions; :mod:`anyclip` re-exports them). Each function resolves its
namespace once, converts and checks its arguments with :mod:`anyclip._policy`, chooses its
kernels once (:func:`anyclip._kernels.kernels_for`) and runs the formula of
:mod:`anyclip._core`. The work is done by a private twin (``_clip_by_norm(kernels, ...)``) that
:func:`anyclip._api.bind` also exposes with fixed kernels; the public function adds the
plain-call fast paths in front of it. The list functions are in :mod:`anyclip._clip`.
"""

from __future__ import annotations

from typing import Any, cast, overload

from anyclip import _core
from anyclip._compat import (
    dtype_name,
    is_array,
    is_numpy_scalar,
    library,
    namespace,
)
from anyclip._kernels import (
    FLUSH_GENERIC,
    Kernels,
    kernels_for,
    plain_clip_by_norm,
    plain_clip_by_value,
)
from anyclip._kernels._dask import joined_call, unknown_broadcast
from anyclip._kernels._tforder_xp import rounded_cast
from anyclip._keywords import hints_keywords
from anyclip._policy import as_input, as_operand, check_broadcastable
from anyclip._policy_axes import normalize_axes
from anyclip._policy_dtypes import cast_like, dtype_kind, require_kind, resolve_accumulate_dtype
from anyclip._policy_words import (
    FLOATS,
    TF_NONE,
    tf_attr,
    tf_cannot_convert,
    tf_expected,
    tf_words,
)
from anyclip._sparse import (
    dense_operand,
    densified,
    through_values,
    through_values_or_jagged,
)
from anyclip._subnormals import OPEN, flushing
from anyclip._typing import (
    Array,
    ArrayT,
    Axes,
    DTypeLike,
    Namespace,
    Operand,
    PythonData,
)

__all__ = [
    "clip_by_average_norm",
    "clip_by_norm",
    "clip_by_value",
]


@overload
def clip_by_value(
    t: ArrayT, clip_value_min: Operand, clip_value_max: Operand, name: str | None = None
) -> ArrayT: ...


@overload
def clip_by_value(
    t: PythonData, clip_value_min: Operand, clip_value_max: Operand, name: str | None = None
) -> Array: ...


@hints_keywords
def clip_by_value(
    t: Array | PythonData,
    clip_value_min: Operand,
    clip_value_max: Operand,
    name: str | None = None,
) -> Array:
    """Clip values elementwise to ``[clip_value_min, clip_value_max]``, as ``tf.clip_by_value``.

    Computes ``maximum(minimum(t, clip_value_max), clip_value_min)``.

    Parameters
    ----------
    t : array
        Input of a real dtype (floating or integer). Python numbers and lists are converted as
        TF converts them (ints to int32, floats to float32). A sparse torch tensor (COO, CSR,
        CSC, BSR, BSC) or JAX ``BCOO`` array is clipped through its stored values, as TF clips
        an ``IndexedSlices``; the bounds then broadcast against those values.
    clip_value_min, clip_value_max : number or array
        The bounds. Python numbers are converted to ``t``'s dtype; arrays must have ``t``'s
        dtype and broadcast to ``t``'s shape without enlarging it.
    name : str, optional
        Accepted for compatibility with TF and ignored.

    Returns
    -------
    array
        Same type, dtype, shape and device as ``t``; for a sparse ``t``, the same layout and
        index arrays (an uncoalesced COO tensor stays uncoalesced) with the clipped values.

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
    if not (OPEN and flushing()):  # the plain call keeps IEEE subnormals (flush_subnormals)
        plain = plain_clip_by_value(t, clip_value_min, clip_value_max)
        if plain is not None:
            return cast(Array, plain)
    return cast(Array, _clip_by_value(None, t, clip_value_min, clip_value_max))


@through_values_or_jagged
def _clip_by_value(
    kernels: Kernels | None,
    t: Any,
    clip_value_min: Any,
    clip_value_max: Any,
    name: str | None = None,
) -> Any:
    """:func:`clip_by_value` without the plain-call fast path (no kernel step to choose)."""
    clip_value_min = dense_operand(clip_value_min, "clip_value_min")
    clip_value_max = dense_operand(clip_value_max, "clip_value_max")
    xp = namespace(t, clip_value_min, clip_value_max, names=_BOUNDS)
    t = as_input(t, xp, "t", beside=(clip_value_min, clip_value_max))
    require_kind(xp, t, "t", ("int", "real"), "a real dtype (floating or integer)", tf_attr)
    # In TF's order: minimum(t, clip_value_max) first, then maximum(.., clip_value_min).
    hi = as_operand(clip_value_max, xp, t, "clip_value_max", tf=tf_expected)
    check_broadcastable(tuple(hi.shape), tuple(t.shape), "clip_value_max", "t")
    lo = as_operand(clip_value_min, xp, t, "clip_value_min", tf=tf_expected)
    check_broadcastable(tuple(lo.shape), tuple(t.shape), "clip_value_min", "t")
    if library(xp) == "dask" and unknown_broadcast((t, lo, hi)):  # shapes known when computed
        return joined_call(_numpy_clip_by_value, (t, lo, hi), dtype=t.dtype)
    return _core.clip_by_value(xp, t, lo, hi, FLUSH_GENERIC if OPEN and flushing() else None)


def _numpy_clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any) -> Any:
    """:func:`clip_by_value` of NumPy arrays, for :func:`~anyclip._kernels._dask.joined_call`."""
    return _clip_by_value(None, t, clip_value_min, clip_value_max)


def _holds_float(value: Any) -> bool:
    """Whether a (nested) list holds a Python float, which TF converts to float32."""
    if isinstance(value, (list, tuple)):
        return any(_holds_float(v) for v in value)
    return isinstance(value, float)


def _clip_norm_operand(xp: Namespace, clip_norm: Any, t: Any, name: str = "clip_norm") -> Any:
    """``clip_norm`` as ``tf.clip_by_norm`` converts it (negative becomes 0).

    ``name``: the argument's name in the caller's errors (``embedding_lookup``'s ``max_norm``).
    """
    if clip_norm is None:
        msg = f"`{name}` must be a number or an array, got None{tf_words(TF_NONE)}"
        raise ValueError(msg)
    if isinstance(clip_norm, (bool, int, float)) or is_numpy_scalar(clip_norm):
        if clip_norm < 0:  # a Python comparison, as in TF; NaN passes through
            clip_norm = 0
        return as_operand(clip_norm, xp, t, name)
    if is_array(clip_norm):
        what = "a real dtype (TF's maximum(clip_norm, 0) refuses bool)"
        require_kind(xp, clip_norm, name, ("int", "real"), what, _tf_clip_norm_kind)
        if xp.isdtype(clip_norm.dtype, "unsigned integer"):
            # never negative, so TF's maximum(clip_norm, 0) is the identity (torch has none)
            return as_operand(clip_norm, xp, t, name, cast_arrays=True)
        zero = as_operand(0, xp, clip_norm, name)
        clipped = _core.nonnegative(xp, clip_norm, zero)
        return as_operand(clipped, xp, t, name, cast_arrays=True)
    if isinstance(clip_norm, (list, tuple)):
        if dtype_name(t.dtype) == "float64" and _holds_float(clip_norm):
            # TF's maximum(clip_norm, 0) makes a float32 tensor of a list of floats, cast to
            # float64 after: [0.1] is 0.10000000149011612 there
            c = as_operand(clip_norm, xp, t, name, dtype=xp.float32)
            c = _core.nonnegative(xp, c, as_operand(0, xp, c, name))
            return xp.astype(c, t.dtype)
        c = as_operand(clip_norm, xp, t, name)
        return _core.nonnegative(xp, c, as_operand(0, xp, t, name))
    msg = f"`{name}` must be a number or an array, got {type(clip_norm).__name__}"
    if isinstance(clip_norm, (str, complex)):  # TF compares it with 0 in Python
        words = f"'<' not supported between instances of '{type(clip_norm).__name__}' and 'int'"
        msg += tf_words(words)
    raise TypeError(msg)


def _tf_clip_norm_kind(dtype: Any) -> str:
    """TF's words for a ``clip_norm`` array of a refused dtype (``maximum(clip_norm, 0)``)."""
    if dtype_name(dtype) == "bool":
        return tf_cannot_convert(0, dtype)
    return tf_attr(dtype)


@hints_keywords
def clip_by_norm(
    t: ArrayT,
    clip_norm: Operand,
    axes: Axes = None,
    name: str | None = None,
    *,
    accumulate_dtype: DTypeLike = None,
) -> ArrayT:
    """Scale ``t`` so its L2 norm over ``axes`` is at most ``clip_norm``, as ``tf.clip_by_norm``.

    Computes ``t * clip_norm / maximum(l2norm(t, axes), clip_norm)``.

    Parameters
    ----------
    t : array
        Input of a real floating dtype. A sparse torch tensor (COO, CSR, CSC, BSR, BSC) or JAX
        ``BCOO`` array is clipped through its stored values, as TF clips an ``IndexedSlices``:
        the norm counts every stored value (a repeated index too) and ``axes`` are axes of the
        values array (``t.values()``, ``t._values()`` for COO, ``t.data`` for BCOO).
    clip_norm : number or array
        The largest norm. A negative number is replaced by 0. An array may have any real dtype
        (it is clamped at 0 in its own dtype, then cast to ``t``'s, as TF does) and may
        broadcast to ``t``'s shape, giving one bound per element.
    axes : int or sequence of int, optional
        Axes of the norm. ``None`` (default) uses every axis; ``[]`` clips each element on its
        own (``sign(t) * minimum(abs(t), clip_norm)``).
        What TF's reductions take: Python ints (``True`` is 1), lists, tuples and ranges of
        them, NumPy integer scalars and arrays (and NumPy floats that hold whole numbers, as TF
        casts them). A torch, JAX or other library's array is refused (``TypeError``): reading
        an axis from it would be a host read; pass a Python int or tuple.
    name : str, optional
        Accepted for compatibility with TF and ignored.
    accumulate_dtype : dtype or str, optional
        Not in TF. Compute in this floating dtype (e.g. ``"float32"`` for float16 input, so
        squares cannot overflow) and cast the result back to ``t``'s dtype. ``None`` (default)
        computes in ``t``'s dtype, as TF. ``"widest"`` is a ``ValueError``: of one array it
        could only mean ``t``'s own dtype.

    Returns
    -------
    array
        Same type, dtype, shape and device as ``t``; for a sparse ``t``, the same layout and
        index arrays (an uncoalesced COO tensor stays uncoalesced) with the clipped values.

    Raises
    ------
    TypeError
        If ``t`` is not a real floating array, ``clip_norm`` has an unusable type, or
        ``accumulate_dtype`` is not a floating dtype; if ``t`` is an uncoalesced COO tensor
        that requires grad while gradients are recorded (torch's autograd does not follow its
        values), or a SciPy sparse matrix; if ``axes`` holds floats or strings, or is an array
        of a library other than NumPy.
    ValueError
        If ``clip_norm`` is None or would enlarge ``t``, an axis is repeated or out of range,
        or ``axes`` is a sequence TF cannot convert (bools mixed with ints, rows of different
        lengths) or not a sequence (a set).

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

    A sparse gradient (index 0 stored twice, as ``nn.Embedding(sparse=True)`` gives them) is
    clipped by the norm of its stored values, 13, not of its dense form:

    >>> import torch
    >>> g = torch.sparse_coo_tensor([[0, 2, 0]], [3.0, 4.0, 12.0], (3,), check_invariants=True)
    >>> out = anyclip.clip_by_norm(g, 6.5)
    >>> out.layout, out._indices(), out._values()
    (torch.sparse_coo, tensor([[0, 2, 0]]), tensor([1.5000, 2.0000, 6.0000]))
    """
    if axes is None and accumulate_dtype is None and not (OPEN and flushing()):
        plain = plain_clip_by_norm(t, clip_norm)
        if plain is not None:
            return cast(ArrayT, plain)
    return cast(ArrayT, _clip_by_norm(None, t, clip_norm, axes, accumulate_dtype=accumulate_dtype))


@through_values
def _clip_by_norm(
    kernels: Kernels | None,
    t: Any,
    clip_norm: Any,
    axes: Any = None,
    name: str | None = None,
    *,
    accumulate_dtype: Any = None,
) -> Any:
    """:func:`clip_by_norm` with ``kernels`` (``None``: :func:`kernels_for` chooses)."""
    clip_norm = dense_operand(clip_norm, "clip_norm")
    xp = namespace(t, clip_norm, names=("t", "clip_norm"))
    t = as_input(t, xp, "t", beside=(clip_norm,))
    require_kind(xp, t, "t", ("real",), FLOATS, tf_attr)
    ax = normalize_axes(axes, t.ndim, "axes")
    acc = resolve_accumulate_dtype(xp, accumulate_dtype, [t.dtype], single="clip_by_norm")
    if acc is not None and acc != t.dtype and ax is None:
        like = cast_like(xp, t, acc)  # no cast copy of all of t
        c = _clip_norm_operand(xp, clip_norm, like)
        if c.ndim == 0:
            k = kernels_for(xp, [t], acc) if kernels is None else kernels
            return _core.upcast_clip_by_norm(xp, k, t, c, acc)
    work = t if acc is None or acc == t.dtype else rounded_cast(xp, t, acc)
    c = _clip_norm_operand(xp, clip_norm, work)
    check_broadcastable(tuple(c.shape), tuple(t.shape), "clip_norm", "t")
    k = kernels_for(xp, (work,)) if kernels is None else kernels
    out = _core.clip_by_norm(xp, k, work, c, ax)
    return out if out.dtype == t.dtype else rounded_cast(xp, out, t.dtype)


_BOUNDS = ("t", "clip_value_min", "clip_value_max")


@hints_keywords
def clip_by_average_norm(t: ArrayT, clip_norm: Operand, name: str | None = None) -> ArrayT:
    """Clip ``t`` so its L2 norm divided by its size is at most ``clip_norm``.

    Mirrors ``tf.compat.v1.clip_by_average_norm``: computes
    ``t * clip_norm * minimum(size(t) / l2norm(t), 1 / clip_norm)``.

    Parameters
    ----------
    t : array
        A float32 array (TF accepts no other dtype). A sparse torch tensor or JAX ``BCOO``
        array is made dense first (repeated indices summed), as TF converts an
        ``IndexedSlices``; the result is dense.
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
    return cast(ArrayT, _clip_by_average_norm(None, t, clip_norm))


@densified("t")
def _clip_by_average_norm(
    kernels: Kernels | None, t: Any, clip_norm: Any, name: str | None = None
) -> Any:
    """:func:`clip_by_average_norm` (its formula has no kernel step)."""
    clip_norm = dense_operand(clip_norm, "clip_norm")
    xp = namespace(t, clip_norm, names=("t", "clip_norm"))
    t = as_input(t, xp, "t", beside=(clip_norm,))
    kind = dtype_kind(xp, t.dtype)
    if kind != "real" or t.dtype != xp.float32:
        msg = (
            f"`t` must have dtype float32 (the only one TF accepts), got {dtype_name(t.dtype)}; "
            f"cast it to float32, or use clip_by_norm(t, clip_norm * size(t))"
        )
        if kind in ("real", "complex"):  # TF multiplies t by its float32 element count
            msg += tf_words(tf_expected(t.dtype, "float32"))
        elif kind in ("int", "bool"):  # TF's Rsqrt (Sum for bool) has no such kernel
            msg += tf_words(tf_attr(t.dtype))
        raise TypeError(msg)
    c = as_operand(clip_norm, xp, t, "clip_norm", tf=tf_expected)
    # TF multiplies without a shape check: only a clip_norm that cannot broadcast fails there.
    check_broadcastable(tuple(c.shape), tuple(t.shape), "clip_norm", "t", tf_static=False)
    return _core.clip_by_average_norm(xp, t, c, FLUSH_GENERIC if OPEN and flushing() else None)
