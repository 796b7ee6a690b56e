"""optax's tree norm, block-RMS clipping and adaptive gradient clipping (AGC, optax and timm).

Layer: public (argument checks, namespace resolution, docstrings; :mod:`anyclip.tree`,
:mod:`anyclip.torch` and :mod:`anyclip.optax` re-export or call these) over this module's own
array-API core (the functions whose names start with ``_core_``: validated arrays in, arrays
out, no Python ``if`` on an array value, so they trace under ``jax.jit`` and
``torch.compile``).

The rules are optax 0.2.8's (``optax.tree.norm``, ``optax.clip_by_block_rms``,
``optax.adaptive_grad_clip``) and timm's ``adaptive_clip_grad``. optax and timm write AGC with
one formula, ``where(g_norm < max_norm, g, g * (max_norm / maximum(g_norm, 1e-6)))`` with
``max_norm = clipping * maximum(p_norm, eps)``; they differ only in which axes a unit spans
(:func:`unit_axes`) and in timm's ``norm_type``. So the formula is written once here and the
layouts are data.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, cast

from anyclip._compat import dtype_name, is_array, namespace
from anyclip._kernels import kernels_for
from anyclip._kernels._dist import all_reduce, check_group
from anyclip._keywords import hints_keywords
from anyclip._numerics import as_array, constant, quiet, sqrt
from anyclip._policy import scalar_operand
from anyclip._policy_dtypes import dtype_kind, resolve_accumulate_dtype, widest_float
from anyclip._pytree import flatten
from anyclip._sparse import is_sparse
from anyclip._typing import Namespace

__all__ = [
    "adaptive_clip",
    "clip_by_block_rms",
    "norm",
    "unit_axes",
]

TreeT = TypeVar("TreeT")
Layout = Literal["optax", "timm"]
LAYOUTS: tuple[str, ...] = ("optax", "timm")

#: ``unitwise_clip``'s floor on the gradient norm (optax ``div_eps``, timm ``clamp(min=1e-6)``).
_DIV_EPS = 1e-6


# ------------------------------------------------------------------ arguments
def _is_namedtuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(type(node), "_fields")


def _describe(node: Any) -> str:
    """A short description of one tree node, for the structure error."""
    if node is None:
        return "None"
    if is_array(node) or is_sparse(node):
        return f"an array of shape {tuple(node.shape)}"
    if isinstance(node, dict):
        keys = ", ".join(repr(k) for k in list(node)[:8]) + (", ..." if len(node) > 8 else "")
        return f"a {type(node).__name__} with keys [{keys}]"
    if _is_namedtuple(node):
        return f"a {type(node).__name__} with fields {tuple(type(node)._fields)}"
    if isinstance(node, (list, tuple)):
        return f"a {type(node).__name__} of {len(node)}"
    return f"a {type(node).__name__}"


def _jax_level(node: Any) -> tuple[list[Any], Any] | None:
    """A JAX pytree node's children and its one-level treedef (only when JAX is imported)."""
    if "jax" not in sys.modules or isinstance(node, (dict, list, tuple)) or is_array(node):
        return None
    import jax

    children, level = jax.tree_util.tree_flatten(node, is_leaf=lambda x: x is not node)
    return None if jax.tree_util.treedef_is_leaf(level) else (children, level)


def _paired(params: Any, grads: Any, path: str = "") -> Any:
    """``params`` checked against the structure of ``grads``, each dict in ``grads``' key order.

    The leaves are then paired in flattening order, which for a dict is its keys' order. JAX
    gives the gradients of a dict of parameters as a dict with sorted keys (``jax.grad``,
    ``jax.tree.map``), so a dict of parameters built in another order would pair other leaves;
    dicts are paired by key, as ``optax.adaptive_grad_clip`` pairs them. Any other difference
    (other keys, a dict facing a list, another length, another namedtuple or JAX node) is a
    ``ValueError``, as optax's structure error: paired by position, it would clip a gradient
    with another parameter's norm where the shapes agree. Lists and tuples face each other
    (``torch.autograd.grad`` gives a tuple for a list of parameters), dicts of any mapping type
    too (a ``state_dict``'s ``OrderedDict``), and a ``None`` gradient any leaf.
    """

    def mismatch() -> ValueError:
        where = f"grads{path}" if path else "the root"
        msg = (
            f"`params` must have the structure of `grads`: at {where}, `grads` has "
            f"{_describe(grads)} and `params` {_describe(params)}; pass the parameters "
            "the gradients are of, in the same structure"
        )
        return ValueError(msg)

    if grads is None or is_array(grads) or is_sparse(grads):
        if isinstance(params, (dict, list, tuple)) or _jax_level(params) is not None:
            raise mismatch()
        return params  # a leaf: the flattening and the leaf checks judge it
    if isinstance(grads, dict):
        if not isinstance(params, dict) or params.keys() != grads.keys():
            raise mismatch()
        return {k: _paired(params[k], grads[k], f"{path}[{k!r}]") for k in grads}
    if isinstance(grads, (list, tuple)):
        named = _is_namedtuple(grads) or _is_namedtuple(params)
        if (
            not isinstance(params, (list, tuple))
            or len(params) != len(grads)
            or (named and type(params) is not type(grads))
        ):
            raise mismatch()
        return [
            _paired(p, g, f"{path}[{i}]")
            for i, (p, g) in enumerate(zip(params, grads, strict=True))
        ]
    g_level, p_level = _jax_level(grads), _jax_level(params)
    if g_level is None or p_level is None or g_level[1] != p_level[1]:
        raise mismatch()  # the flattening refuses a grads node that is no container
    import jax

    children = [
        _paired(p, g, f"{path}.<{i}>")
        for i, (p, g) in enumerate(zip(p_level[0], g_level[0], strict=True))
    ]
    return jax.tree_util.tree_unflatten(p_level[1], children)


def _leaf_names(n: int, arg: str) -> list[str]:
    return [f"{arg} leaf {i}" for i in range(n)]


def _floating_leaves(
    xp: Namespace, arrays: Sequence[Any], arg: str, kinds: tuple[str, ...] = ("real",)
) -> None:
    """Refuse leaves whose dtype kind is not in ``kinds``, naming the argument and the leaf."""
    for i, a in enumerate(arrays):
        kind = dtype_kind(xp, a.dtype)
        if kind not in kinds:
            want = "a real floating dtype" if kinds == ("real",) else "a floating dtype"
            msg = (
                f"`{arg}` leaves must have {want}, got {dtype_name(a.dtype)} at leaf {i}; "
                "cast it with astype (for example to float32)"
            )
            raise TypeError(msg)


def _real_dtype(xp: Namespace, dtype: Any) -> Any:
    name = dtype_name(dtype)
    if name == "complex64":
        return xp.float32
    if name == "complex128":
        return xp.float64
    return dtype


# ------------------------------------------------------------------- tree norm
def _core_abs_sq(xp: Namespace, x: Any) -> Any:
    """``|x| ** 2``: ``x * x``, or ``re * re + im * im`` for complex ``x`` (optax's ``abs_sq``)."""
    if xp.isdtype(x.dtype, "complex floating"):
        re, im = xp.real(x), xp.imag(x)
        return re * re + im * im
    return x * x


def _core_leaf_sum(xp: Namespace, v: Any) -> Any:
    """``sum(v)`` in ``v``'s dtype, as ``jnp.sum``: a 16-bit ``v`` summed in float32, rounded."""
    if dtype_name(v.dtype) in ("float16", "bfloat16"):
        return xp.astype(xp.sum(xp.astype(v, xp.float32)), v.dtype)
    return xp.sum(v)


def _core_tree_norm(
    xp: Namespace, arrays: Sequence[Any], ord: float, squared: bool, acc: Any, like: Any
) -> Any:
    """The tree norm of optax 0.2.8 (``optax.tree.norm``), in its order and dtypes.

    Each leaf is reduced in its own (real) dtype: ``sum(|x| ** 2)``, ``sum(|x|)`` or
    ``max(|x|)`` (an empty leaf skipped by the maximum); the per-leaf results are then added
    (compared) leaf after leaf, each step promoting to the wider dtype, as optax's
    ``jax.tree.reduce(operator.add, sums, initializer=0)``. ``acc`` (the widest real dtype)
    and ``like`` give an empty tree's ``0`` (``-inf`` for ``ord=inf``).
    """
    with quiet(xp):
        if ord == math.inf:
            arrays = [x for x in arrays if math.prod(x.shape) != 0]  # optax skips empty leaves
        if not arrays:
            total = constant(xp, -math.inf if ord == math.inf else 0.0, acc, like)
        elif ord == math.inf:
            total = None
            for x in arrays:
                s = xp.max(xp.abs(x))
                total = s if total is None else xp.maximum(total, s)
        else:
            total = None
            for x in arrays:
                s = _core_leaf_sum(xp, _core_abs_sq(xp, x) if ord == 2 else xp.abs(x))
                total = s if total is None else total + s
        if ord == 2:
            return as_array(total if squared else sqrt(xp, total))
        return as_array(total * total if squared else total)


def _real_number(value: Any) -> float | None:
    """``value`` as a float when it is a real number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def _norm_ord(ord: Any) -> float:
    o = _real_number(ord)
    if ord is None or o == 2:
        return 2.0
    if o == 1:
        return 1.0
    if o == math.inf or (isinstance(ord, str) and ord in ("inf", "infinity")):
        return math.inf
    msg = f"`ord` must be 1, 2 (or None) or inf (or 'inf'), as optax.tree.norm's, got {ord!r}"
    raise ValueError(msg)


@hints_keywords
def norm(tree: Any, ord: Any = 2, squared: bool = False) -> Any:
    """The vector norm of all leaves of ``tree`` together, as ``optax.tree.norm``.

    ``ord=2``: ``sqrt(sum(|x| ** 2))`` over every element of every leaf; ``ord=1``:
    ``sum(|x|)``; ``ord=inf``: ``max(|x|)``. Unlike :func:`anyclip.tree.global_norm` (TF's
    ``tf.linalg.global_norm``, which refuses complex arrays), complex leaves are accepted and
    count through their magnitude, as optax counts them.

    Parameters
    ----------
    tree : nested structure of arrays
        Leaves of floating or complex dtypes, possibly different; ``None`` leaves are skipped.
        Python floats inside lists, tuples and dicts are leaves too, as in optax: of the
        arrays' widest dtype (float32 when there is no array).
    ord : {2, 1, inf, None, "inf", "infinity"}, optional
        The order of the norm (``None`` is 2), as in optax.
    squared : bool, optional
        Return the norm squared (for ``ord=2``, the sum of squares without a root).

    Returns
    -------
    array
        A 0-d array of the widest real dtype of the leaves (float32 for complex64), on the
        first leaf's device. As optax, each leaf is reduced in its own dtype (a float16 leaf
        summed in float32 and rounded to float16, as ``jnp.sum``), and the per-leaf results
        are added leaf after leaf with type promotion. An empty tree gives a NumPy float32
        ``0`` (``-inf`` for ``ord=inf``).

    Raises
    ------
    ValueError
        If ``ord`` is not 1, 2 or inf.
    TypeError
        If a leaf is not floating or complex.

    See Also
    --------
    optax.tree.norm : The optax function this mirrors.
    anyclip.tree.global_norm : TF's global norm (real leaves, TF's exact operation order).

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> grads = {"w": np.array([3.0, -4.0], dtype=np.float32), "b": None}
    >>> tree.norm(grads), tree.norm(grads, ord=1), tree.norm(grads, ord=np.inf)
    (array(5., dtype=float32), array(7., dtype=float32), array(4., dtype=float32))
    >>> tree.norm([np.array([3 + 4j], dtype=np.complex64)], squared=True)
    array(25., dtype=float32)
    """
    o = _norm_ord(ord)
    try:
        leaves, _ = flatten(tree)
    except TypeError as err:  # a Python float leaf (or a bad leaf: the flattening's words)
        try:
            leaves = _leaves_with_floats(tree, frozenset())
        except TypeError:
            raise err from None
    arrays = [a for a in leaves if a is not None and is_array(a)]
    xp = namespace(*arrays, names=_leaf_names(len(arrays), "tree"))
    _floating_leaves(xp, arrays, "tree", ("real", "complex"))
    acc = resolve_accumulate_dtype(xp, "widest", [_real_dtype(xp, a.dtype) for a in arrays])
    like = arrays[0] if arrays else None
    if len(arrays) != sum(v is not None for v in leaves):
        # optax's Python float leaves (weakly typed: of the arrays' dtype, float32 alone)
        dtype = acc if arrays else xp.float32
        arrays = [
            a if is_array(a) else constant(xp, a, dtype, like) for a in leaves if a is not None
        ]
    return _core_tree_norm(xp, arrays, o, bool(squared), acc, like)


def _leaves_with_floats(node: Any, enclosing: frozenset[int]) -> list[Any]:
    """The leaves of ``node``, Python floats (optax's scalar leaves) kept as leaves."""
    if isinstance(node, float):
        return [node]
    if isinstance(node, (dict, list, tuple)):
        if id(node) in enclosing:
            return flatten(node)[0]  # the flattening names the cycle
        inner = enclosing | {id(node)}
        items = node.values() if isinstance(node, dict) else node
        return [leaf for item in items for leaf in _leaves_with_floats(item, inner)]
    return flatten(node)[0]


# ------------------------------------------------------------------- block RMS
def _core_block_rms(xp: Namespace, u: Any, threshold: Any) -> Any:
    """``u / maximum(1, sqrt(mean(|u| ** 2)) / threshold)`` (optax's ``clip_by_block_rms``).

    The mean is ``jnp.mean``'s: of a float16 or bfloat16 ``u``, summed and divided in
    float32 and rounded once (a sum rounded to the half type, then divided, was one half
    ulp off on about 10 % of leaves).
    """
    sq = _core_abs_sq(xp, u)
    if dtype_name(sq.dtype) in ("float16", "bfloat16"):
        # jnp.mean of a 16-bit array sums and divides in float32, then rounds once
        wide = xp.astype(sq, xp.float32)
        size = constant(xp, float(math.prod(u.shape)), xp.float32, wide)
        mean = xp.astype(xp.sum(wide) / size, sq.dtype)
    else:
        mean = xp.sum(sq) / constant(xp, float(math.prod(u.shape)), sq.dtype, sq)
    rms = sqrt(xp, mean)
    denom = xp.maximum(constant(xp, 1.0, sq.dtype, sq), rms / threshold)
    return as_array(u / denom)


@hints_keywords
def clip_by_block_rms(tree: TreeT, threshold: Any) -> TreeT:
    """Scale every leaf so that its root mean square is at most ``threshold``, as optax's.

    Each leaf ``u`` becomes ``u / maximum(1, sqrt(mean(|u| ** 2)) / threshold)``: the
    transformation ``optax.clip_by_block_rms(threshold)`` applies to each block (each leaf).

    Parameters
    ----------
    tree : nested structure of arrays
        Leaves of floating or complex dtypes; ``None`` leaves are kept.
    threshold : number or 0-d array
        The largest RMS of a leaf, converted to each leaf's (real) dtype.

    Returns
    -------
    same structure as ``tree``
        Every leaf keeps its dtype, shape and device. An empty leaf stays empty.

    Raises
    ------
    TypeError
        If a leaf is not floating or complex, or ``threshold`` is not a number or 0-d array.

    See Also
    --------
    optax.clip_by_block_rms : The optax transformation this mirrors
        (:func:`anyclip.optax.clip_by_block_rms` is its drop-in).

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> tree.clip_by_block_rms({"w": np.array([3.0, -4.0, 0.0, 0.0], np.float32)}, 1.0)
    {'w': array([ 1.2, -1.6,  0. ,  0. ], dtype=float32)}
    """
    leaves, unflatten = flatten(tree)
    arrays = [a for a in leaves if a is not None]
    xp = namespace(*arrays, names=_leaf_names(len(arrays), "tree"))
    _floating_leaves(xp, arrays, "tree", ("real", "complex"))
    out: list[Any] = []
    with quiet(xp):
        for leaf in leaves:
            if leaf is None:
                out.append(None)
                continue
            t = scalar_operand(xp, threshold, _real_dtype(xp, leaf.dtype), leaf, "threshold")
            out.append(_core_block_rms(xp, leaf, t))
    return cast(TreeT, unflatten(out))


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
    >>> from anyclip._adaptive import unit_axes
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
    if sum(1 for n in shape if n != 1) <= 1:  # optax: jnp.squeeze(x).ndim <= 1
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
    """The ``p``-norm of ``x`` over ``axes`` (``None``: all), with the reduced axes kept."""
    if p == 2:
        if xp.isdtype(x.dtype, "real floating"):
            return kernels_for(xp, [x]).unit_norm2(xp, x, axes)
        return sqrt(xp, xp.sum(_core_abs_sq(xp, x), axis=axes, keepdims=True))
    a = xp.abs(x)
    if p == math.inf:
        if math.prod(x.shape) == 0:
            return xp.sum(a, axis=axes, keepdims=True)  # 0, the norm of nothing
        return xp.max(a, axis=axes, keepdims=True)
    if p == 1:
        return xp.sum(a, axis=axes, keepdims=True)
    pp = constant(xp, p, a.dtype, a)
    return xp.sum(a**pp, axis=axes, keepdims=True) ** constant(xp, 1.0 / p, a.dtype, a)


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


def _core_agc(
    xp: Namespace,
    g: Any,
    p: Any,
    clipping: Any,
    eps: Any,
    axes: tuple[int, ...] | None,
    norm_type: float,
    reduce: Callable[[Any, str], Any] | None = None,
) -> Any:
    """``where(g_norm < max_norm, g, g * (max_norm / maximum(g_norm, 1e-6)))``.

    ``max_norm = clipping * maximum(p_norm, eps)``; ``clipping`` and ``eps`` are 0-d arrays
    of ``p``'s real dtype. For ``g`` and ``p`` of different dtypes the arithmetic is in the
    wider one and the result is cast to ``g``'s dtype (as timm's ``copy_`` into the gradient).
    ``reduce(x, op)`` (``group=``): the partial unit sums of ``p`` and ``g``, stacked, are
    summed (``op="max"`` for ``norm_type=inf``) over the processes in one all-reduce.
    """
    work = widest_float(xp, [_real_dtype(xp, g.dtype), _real_dtype(xp, p.dtype)])
    gw = g if _real_dtype(xp, g.dtype) == work else xp.astype(g, work)
    pw = p if _real_dtype(xp, p.dtype) == work else xp.astype(p, work)
    if clipping.dtype != work:
        clipping, eps = xp.astype(clipping, work), xp.astype(eps, work)
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
    max_norm = xp.maximum(p_norm, eps) * clipping
    floor = constant(xp, _DIV_EPS, g_norm.dtype, g_norm)
    clipped = gw * (max_norm / xp.maximum(g_norm, floor))
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
        Whose rule infers the unit axes when ``axis`` is not given.
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
        above 5 (pass ``axis=``), ``axis`` does not fit a leaf, a leaf of ``params`` has
        another shape than its gradient, or ``params`` has another structure than ``grads``
        (other dict keys, another length, a container facing a leaf).
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
            if tuple(g.shape) != tuple(p.shape):
                msg = (
                    f"`params` leaf {i} must have its gradient's shape {tuple(g.shape)}, got "
                    f"{tuple(p.shape)}; pass the parameters in the order of the gradients"
                )
                raise ValueError(msg)
            axes = unit_axes(tuple(g.shape), layout, axis)
            pdt = _real_dtype(xp, p.dtype)
            c = scalar_operand(xp, clipping, pdt, p, "clipping", positive=True)
            e = scalar_operand(xp, eps, pdt, p, "eps", nonnegative=True)
            out.append(_core_agc(xp, g, p, c, e, axes, p_ord, reduce))
    return cast(TreeT, unflatten(out))
