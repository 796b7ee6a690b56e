"""Adaptive gradient clipping (AGC), optax's and timm's layouts: one formula, the units as data.

Layer: rules (argument checks, namespace resolution, docstrings; :mod:`anyclip.tree`,
:mod:`anyclip.torch` and :mod:`anyclip.optax` re-export or call :func:`adaptive_clip`) over
this module's own array-API core (the ``_core_`` functions). optax 0.2.8's
``adaptive_grad_clip`` and timm's ``adaptive_clip_grad`` write AGC with one formula,
``where(g_norm < max_norm, g, g * (max_norm / maximum(g_norm, 1e-6)))`` with
``max_norm = clipping * maximum(p_norm, eps)``; they differ only in which axes a unit spans
(:func:`unit_axes`), in timm's ``norm_type``, and in the dtype a float16 or bfloat16 unit
norm is accumulated in (:func:`_core_unit_norms`). The tree walk and argument helpers it
shares with the tree norm are in :mod:`anyclip._adaptive`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

from anyclip._adaptive import (
    _core_abs_sq,
    _floating_leaves,
    _paired,
    _real_dtype,
    _real_number,
)
from anyclip._compat import HALF_PRECISION, dtype_name, namespace
from anyclip._kernels import kernels_for
from anyclip._kernels._dist import all_reduce, check_group
from anyclip._keywords import hints_keywords
from anyclip._numerics import as_array, constant, quiet, rounded_here, sqrt
from anyclip._policy import native_order, scalar_operand
from anyclip._policy_dtypes import widest_float
from anyclip._pytree import TreeT, flatten
from anyclip._typing import Namespace

__all__ = [
    "LAYOUTS",
    "Layout",
    "adaptive_clip",
    "unit_axes",
]


Layout = Literal["optax", "timm"]


LAYOUTS: tuple[str, ...] = ("optax", "timm")


#: ``unitwise_clip``'s floor on the gradient norm (optax ``div_eps``, timm ``clamp(min=1e-6)``).
_DIV_EPS = 1e-6


# ------------------------------------------------------------------------- AGC
def unit_axes(shape: Sequence[int], layout: str, axis: Any = None) -> tuple[int, ...] | None:
    """The axes one AGC unit spans for a leaf of ``shape``; ``None`` is every axis.

    ``axis`` (an int or a tuple of ints) overrides the layout. ``layout="optax"`` is optax
    0.2.8's ``unitwise_norm``: every axis for a leaf with at most one axis longer than 1,
    axis 0 for rank 2 and 3 (``IO``, multi-head ``HIO``), axes 0-2 for rank 4 (``HWIO``),
    axes 0-3 for rank 5 (``DHWIO``), refused otherwise. ``layout="timm"`` is timm's
    ``unitwise_norm``: every axis for rank 0 and 1, every axis but the first otherwise
    (torch's ``OI``, ``OIHW``, ``OIDHW``: one unit per output channel).

    Examples
    --------
    >>> from anyclip._agc import unit_axes
    >>> unit_axes((3, 3, 8, 16), "optax"), unit_axes((16, 8, 3, 3), "timm")
    ((0, 1, 2), (1, 2, 3))
    """
    ndim = len(shape)
    if axis is not None:
        axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
        out: list[int] = []
        for a in axes:
            if isinstance(a, bool) or not isinstance(a, int) or not -ndim <= a < ndim:
                msg = (
                    f"`axis` must hold integers in [-{ndim}, {ndim}) for a leaf of shape "
                    f"{tuple(shape)}, got {axis!r}; pass axes that every leaf has"
                )
                raise ValueError(msg)
            out.append(int(a) % ndim)
        if len(set(out)) != len(out):
            msg = f"`axis` must not repeat an axis, got {axis!r}"
            raise ValueError(msg)
        return tuple(out)
    if layout == "timm":
        return None if ndim <= 1 else tuple(range(1, ndim))
    if layout != "optax":
        msg = f"`layout` must be one of {LAYOUTS}, got {layout!r}"
        raise ValueError(msg)
    longer = sum(1 for n in shape if n == n and n != 1)
    unknown = sum(1 for n in shape if n != n)  # NaN: dask, unknown chunk sizes
    if longer <= 1 < longer + unknown:  # an unknown length of 1 or more decides
        msg = (
            f"`layout='optax'` needs to know which axes of a leaf hold one element, got a leaf "
            f"of shape {tuple(shape)} (a dask array of unknown chunk sizes, such as "
            "`x[x > 0]`); call `x.compute_chunk_sizes()` on it first, or pass `axis=`"
        )
        raise ValueError(msg)
    if longer <= 1:  # optax: jnp.squeeze(x).ndim <= 1
        return None
    if ndim in (2, 3):
        return (0,)
    if ndim == 4:
        return (0, 1, 2)
    if ndim == 5:
        return (0, 1, 2, 3)
    msg = (
        f"`layout='optax'` infers the unit axes for ranks 1 to 5 only, got a leaf of shape "
        f"{tuple(shape)}; pass `axis=` (the axes one unit spans) or `layout='timm'`"
    )
    raise ValueError(msg)


def _core_unit_norm(xp: Namespace, x: Any, axes: tuple[int, ...] | None, p: float) -> Any:
    """The ``p``-norm of ``x`` over ``axes`` (``None``: all), with the reduced axes kept.

    A torch ``DTensor`` sharded over a unit axis is reduced shard by shard and its partial
    norms made final by the kernels (:meth:`~anyclip._kernels.Kernels.settle`: one all-reduce,
    NaN kept by the maximum, which DTensor's own ``MAX`` over gloo drops), an empty shard
    included (:meth:`~anyclip._kernels.Kernels.reduce_max`).
    """
    k = kernels_for(xp, [x])
    if p == 2:
        if xp.isdtype(x.dtype, "real floating"):
            return k.settle(xp, k.unit_norm2(xp, x, axes))
        return sqrt(xp, k.settle(xp, xp.sum(_core_abs_sq(xp, x), axis=axes, keepdims=True)))
    a = xp.abs(x)
    if p == math.inf:
        if math.prod(x.shape) == 0:
            return xp.sum(a, axis=axes, keepdims=True)  # 0, the norm of nothing
        every = tuple(range(x.ndim)) if axes is None else axes
        return k.settle(xp, k.reduce_max(xp, a, every))
    if p == 1:
        return k.settle(xp, xp.sum(a, axis=axes, keepdims=True))
    pp = constant(xp, p, a.dtype, a)
    total = k.settle(xp, xp.sum(a**pp, axis=axes, keepdims=True))
    return total ** constant(xp, 1.0 / p, a.dtype, a)


def _core_unit_partial(xp: Namespace, x: Any, axes: tuple[int, ...] | None, p: float) -> Any:
    """The local part of :func:`_core_unit_norm`, reduced axes kept.

    The sum of ``|x| ** p`` (the maximum of ``|x|`` for ``p = inf``); once summed over the
    processes, :func:`_core_unit_finish` ends it.
    """
    if p == 2:
        return xp.sum(_core_abs_sq(xp, x), axis=axes, keepdims=True)
    a = xp.abs(x)
    if p == math.inf:
        if math.prod(x.shape) == 0:
            return xp.sum(a, axis=axes, keepdims=True)
        return xp.max(a, axis=axes, keepdims=True)
    if p == 1:
        return xp.sum(a, axis=axes, keepdims=True)
    return xp.sum(a ** constant(xp, p, a.dtype, a), axis=axes, keepdims=True)


def _core_unit_finish(xp: Namespace, s: Any, p: float) -> Any:
    """The unit norms from the partials summed (maximised) over the processes."""
    if p == 2:
        return sqrt(xp, s)
    if p in (1, math.inf):
        return s
    return s ** constant(xp, 1.0 / p, s.dtype, s)


def _core_unit_norms(
    xp: Namespace,
    pw: Any,
    gw: Any,
    axes: tuple[int, ...] | None,
    norm_type: float,
    reduce: Callable[[Any, str], Any] | None,
    widen: bool,
) -> tuple[Any, Any]:
    """The unit norms of ``pw`` and ``gw`` (one dtype), in that dtype.

    ``widen`` (timm's layout) with a float16 or bfloat16 dtype: the norms are computed in
    float32 (the partial sums, their all-reduce and the root too) and rounded to the dtype
    once, as torch's ``Tensor.norm`` (timm's ``unitwise_norm``) accumulates a 16-bit tensor
    in float32; otherwise (optax's layout: ``jnp.sqrt(jnp.sum(abs_sq(x)))`` in the dtype)
    every step is in the dtype, and a float16 unit norm overflows from 256.
    """
    dtype = pw.dtype
    if widen and dtype_name(dtype) in HALF_PRECISION:
        pw, gw = xp.astype(pw, xp.float32), xp.astype(gw, xp.float32)
    if reduce is None:
        p_norm = _core_unit_norm(xp, pw, axes, norm_type)
        g_norm = _core_unit_norm(xp, gw, axes, norm_type)
    else:
        both = xp.stack(
            [
                _core_unit_partial(xp, pw, axes, norm_type),
                _core_unit_partial(xp, gw, axes, norm_type),
            ]
        )
        both = _core_unit_finish(
            xp, reduce(both, "max" if norm_type == math.inf else "sum"), norm_type
        )
        p_norm, g_norm = both[0, ...], both[1, ...]
    if p_norm.dtype != dtype:
        p_norm, g_norm = xp.astype(p_norm, dtype), xp.astype(g_norm, dtype)
    return rounded_here(xp, p_norm), rounded_here(xp, g_norm)


def _core_agc(
    xp: Namespace,
    g: Any,
    p: Any,
    clipping: Any,
    eps: Any,
    axes: tuple[int, ...] | None,
    norm_type: float,
    reduce: Callable[[Any, str], Any] | None = None,
    widen: bool = False,
) -> Any:
    """``where(g_norm < max_norm, g, g * (max_norm / maximum(g_norm, 1e-6)))``.

    ``max_norm = clipping * maximum(p_norm, eps)``; ``clipping`` and ``eps`` are 0-d arrays
    of ``p``'s real dtype (``clipping`` float32 for a float16 or bfloat16 ``p`` with
    ``widen``). For ``g`` and ``p`` of different dtypes the arithmetic is in the
    wider one and the result is cast to ``g``'s dtype (as timm's ``copy_`` into the gradient).
    ``reduce(x, op)`` (``group=``): the partial unit sums of ``p`` and ``g``, stacked, are
    summed (``op="max"`` for ``norm_type=inf``) over the processes in one all-reduce.
    ``widen`` (``layout="timm"``): float16 and bfloat16 unit norms are accumulated in float32
    and rounded once (:func:`_core_unit_norms`), and ``clipping`` multiplies in float32,
    the product rounded to the dtype once: torch's
    ``Tensor.mul_`` by a Python number (timm's ``.mul_(clip_factor)``) computes in its opmath
    dtype, float32, with the number rounded to float32 only. The rest of the formula is in
    the dtype (torch's float16 and bfloat16 divisions and products are correctly rounded).
    """
    work = widest_float(xp, [_real_dtype(xp, g.dtype), _real_dtype(xp, p.dtype)])
    gw = g if _real_dtype(xp, g.dtype) == work else xp.astype(g, work)
    pw = p if _real_dtype(xp, p.dtype) == work else xp.astype(p, work)
    opmath = xp.float32 if widen and dtype_name(work) in HALF_PRECISION else work
    if clipping.dtype != opmath:
        clipping = xp.astype(clipping, opmath)
    if eps.dtype != work:
        eps = xp.astype(eps, work)
    p_norm, g_norm = _core_unit_norms(xp, pw, gw, axes, norm_type, reduce, widen)
    max_norm = xp.maximum(p_norm, eps)  # torch's clamp_(min=eps): the same in the dtype
    if opmath != work:  # timm's half-precision .mul_(clip_factor): in float32, rounded once
        max_norm = xp.astype(xp.astype(max_norm, opmath) * clipping, work)
    else:
        max_norm = max_norm * clipping
    max_norm = rounded_here(xp, max_norm)
    floor = constant(xp, _DIV_EPS, g_norm.dtype, g_norm)
    clipped = gw * rounded_here(xp, max_norm / xp.maximum(g_norm, floor))
    out = xp.where(g_norm < max_norm, gw, clipped)
    return as_array(out if out.dtype == g.dtype else xp.astype(out, g.dtype))


def _norm_type(norm_type: Any) -> float:
    p = _real_number(norm_type)
    if p is None or not p > 0:
        msg = f"`norm_type` must be a number > 0 (2.0, 1.0, inf, ...), got {norm_type!r}"
        raise ValueError(msg)
    return p


@hints_keywords
def adaptive_clip(
    grads: TreeT,
    params: Any,
    clipping: Any = 0.01,
    eps: Any = 1e-3,
    *,
    axis: Any = None,
    layout: Layout = "optax",
    norm_type: float = 2.0,
    group: Any = None,
) -> TreeT:
    """Adaptive gradient clipping (AGC): a unit's gradient norm <= ``clipping`` * its weight norm.

    For every leaf, with norms taken over the axes one unit spans (:func:`unit_axes`)::

        max_norm = clipping * maximum(p_norm, eps)
        g = where(g_norm < max_norm, g, g * (max_norm / maximum(g_norm, 1e-6)))

    optax's ``adaptive_grad_clip`` and timm's ``adaptive_clip_grad`` both compute this; they
    differ in which axes form a unit. ``layout="optax"`` (default) infers them from the rank
    for JAX's layouts (``IO``, ``HWIO``, ``DHWIO``: the output channel is last);
    ``layout="timm"`` reduces over every axis but the first, for torch's (``OI``, ``OIHW``:
    the output channel is first). Passing a torch model's gradients with the default
    layout, or a JAX model's with ``"timm"``, clips along the wrong axes.

    The layouts also differ in half precision, each as its reference computes. With
    ``layout="timm"`` the unit norms of float16 and bfloat16 leaves are accumulated in
    float32 and rounded to the leaf's dtype once, as torch's ``Tensor.norm`` (timm's
    ``unitwise_norm``) does; with ``layout="optax"`` they are ``sqrt(sum(x * x))`` in the
    leaf's dtype, as optax's ``unitwise_norm`` (a float16 unit norm from 256 on is then inf,
    and the unit's gradient NaN, as optax's). With ``layout="timm"`` the product of a
    float16 or bfloat16 ``maximum(p_norm, eps)`` with ``clipping`` is taken in float32 and
    rounded once, as timm's ``.mul_(clip_factor)`` (torch's opmath for a Python number);
    with ``layout="optax"`` it is in the dtype, as optax's. The rest of the formula is in
    the dtype for both.

    Parameters
    ----------
    grads : nested structure of arrays
        The gradients; ``None`` leaves are kept.
    params : nested structure of arrays
        The parameters, with the structure of ``grads`` and the same shape leaf by leaf (a
        ``None`` gradient may face any parameter). Dict leaves are paired by key, whatever
        the order of the keys (as optax's; ``jax.grad`` gives a dict with sorted keys). A
        list may face a tuple of the same length (``torch.autograd.grad`` gives a tuple) and
        a dict any mapping with the same keys; any other difference is refused, as optax
        refuses it.
    clipping : number or 0-d array, optional
        The largest ratio of gradient norm to parameter norm (optax ``clipping``, timm
        ``clip_factor``); a number must be ``> 0``.
    eps : number or 0-d array, optional
        The floor on the parameter norm, so that zero-initialised parameters still move.
    axis : int or tuple of ints, optional
        The axes one unit spans, for every leaf; overrides ``layout`` (optax's ``axis``).
    layout : {"optax", "timm"}, optional
        Whose rule infers the unit axes when ``axis`` is not given, and whose half-precision
        unit norms are computed (``"timm"``: accumulated in float32; ``"optax"``: in the
        dtype).
    norm_type : float, optional
        The order of the unit norms (timm's ``norm_type``: 2, 1, inf or any ``p > 0``).
    group : torch ProcessGroup, DeviceMesh, JAX axis name, or a sequence of them, optional
        The processes that hold the rest of every unit: each leaf (and its parameter) split
        across them along axes its units span (for torch's ``OIHW`` with ``layout="timm"``,
        the input channels: row-wise tensor parallelism). The unit norms of the parameter
        and of the gradient are summed over them (the maxima for ``norm_type=inf``), one
        all-reduce per leaf; each process clips its part with the whole units' norms.

    Returns
    -------
    same structure as ``grads``
        Every leaf keeps its dtype, shape and device.

    Raises
    ------
    ValueError
        If ``clipping <= 0``, ``layout`` is unknown, ``layout="optax"`` meets a leaf of rank
        above 5 (pass ``axis=``) or a dask leaf whose unknown length (``x[x > 0]``) decides
        its unit axes (call ``compute_chunk_sizes()``), ``axis`` does not fit a leaf, a leaf
        of ``params`` has another shape than its gradient, or ``params`` has another
        structure than ``grads`` (other dict keys, another length, a container facing a
        leaf).
    TypeError
        If a leaf is not of a real floating dtype, or ``group`` is not a group of the
        leaves' library.

    See Also
    --------
    optax.adaptive_grad_clip : optax's transformation (:func:`anyclip.optax.adaptive_grad_clip`).
    timm.utils.agc.adaptive_clip_grad : timm's in-place torch function
        (:func:`anyclip.torch.adaptive_clip_grad_`).

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> params = {"w": np.array([[3.0, 0.0], [4.0, 1.0]], np.float32)}  # IO: two units
    >>> grads = {"w": np.array([[0.3, 0.0], [0.4, 0.001]], np.float32)}
    >>> tree.adaptive_clip(grads, params, clipping=0.01)["w"]
    array([[0.03 , 0.   ],
           [0.04 , 0.001]], dtype=float32)
    """
    if layout not in LAYOUTS:
        msg = f"`layout` must be one of {LAYOUTS}, got {layout!r}"
        raise ValueError(msg)
    p_ord = _norm_type(norm_type)
    g_leaves, unflatten = flatten(grads)
    p_leaves, _ = flatten(_paired(params, grads))
    if len(g_leaves) != len(p_leaves):
        msg = (
            f"`params` must have the structure of `grads`: got {len(p_leaves)} leaves in "
            f"`params` and {len(g_leaves)} in `grads`; pass the parameters the gradients are of"
        )
        raise ValueError(msg)
    pairs = [(g, p) for g, p in zip(g_leaves, p_leaves, strict=True) if g is not None]
    arrays = [a for pair in pairs for a in pair]
    xp = namespace(
        *arrays,
        names=[n for i in range(len(pairs)) for n in (f"grads leaf {i}", f"params leaf {i}")],
    )
    _floating_leaves(xp, [g for g, _ in pairs], "grads")
    if any(p is None for _, p in pairs):
        msg = "`params` must have an array wherever `grads` has one, got None"
        raise ValueError(msg)
    _floating_leaves(xp, [p for _, p in pairs], "params")
    groups = check_group(xp, group)
    reduce = None if not groups else (lambda x, op: all_reduce(xp, x, groups, op))
    out: list[Any] = []
    with quiet(xp):
        for i, (g, p) in enumerate(zip(g_leaves, p_leaves, strict=True)):
            if g is None:
                out.append(None)
                continue
            g, p = native_order(g), native_order(p)  # dask: without chunks of no elements
            if tuple(g.shape) != tuple(p.shape):
                msg = (
                    f"`params` leaf {i} must have its gradient's shape {tuple(g.shape)}, got "
                    f"{tuple(p.shape)}; pass the parameters in the order of the gradients"
                )
                raise ValueError(msg)
            axes = unit_axes(tuple(g.shape), layout, axis)
            pdt = _real_dtype(xp, p.dtype)
            # timm multiplies a float16 or bfloat16 norm by clip_factor in float32
            half = layout == "timm" and dtype_name(pdt) in HALF_PRECISION
            cdt = xp.float32 if half else pdt
            c = scalar_operand(xp, clipping, cdt, p, "clipping", positive=True)
            e = scalar_operand(xp, eps, pdt, p, "eps", nonnegative=True)
            out.append(_core_agc(xp, g, p, c, e, axes, p_ord, reduce, layout == "timm"))
    return cast(TreeT, unflatten(out))
