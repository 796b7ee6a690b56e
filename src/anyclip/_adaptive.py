"""optax's tree norm and block-RMS clipping, and the tree arguments they share with AGC.

Layer: rules (argument checks, namespace resolution, docstrings; :mod:`anyclip.tree`,
:mod:`anyclip.torch` and :mod:`anyclip.optax` re-export or call these) over this module's own
array-API core (the functions whose names start with ``_core_``: validated arrays in, arrays
out, no Python ``if`` on an array value, so they trace under ``jax.jit`` and
``torch.compile``).

The rules are optax 0.2.8's (``optax.tree.norm``, ``optax.clip_by_block_rms``). The argument
helpers (a tree's floating leaves, parameters paired with gradients, real numbers) serve
adaptive gradient clipping too, which lives in :mod:`anyclip._agc`.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Sequence
from typing import Any, TypeVar, cast

from anyclip._compat import HALF_PRECISION, dtype_name, is_array, library, namespace
from anyclip._core import known_size
from anyclip._kernels import kernels_for
from anyclip._keywords import hints_keywords
from anyclip._numerics import as_array, constant, quiet, sqrt
from anyclip._policy import native_order, scalar_operand
from anyclip._policy_dtypes import default_float, dtype_kind, resolve_accumulate_dtype
from anyclip._pytree import flatten
from anyclip._sparse import is_sparse
from anyclip._typing import Namespace

__all__ = [
    "clip_by_block_rms",
    "norm",
]

TreeT = TypeVar("TreeT")


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
    if dtype_name(v.dtype) in HALF_PRECISION:
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
                if known_size(x.shape) is None:  # dask, unknown chunks: maybe empty
                    a = xp.abs(x)
                    every = tuple(range(a.ndim))
                    s = xp.reshape(kernels_for(xp, [a]).reduce_max(xp, a, every), ())
                else:
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
        Python floats inside lists, tuples and dicts are leaves too, as in optax: on JAX of
        its default floating dtype (float32, float64 with ``jax_enable_x64``), so a Python
        float beside float16 leaves gives a float32 norm, as optax's; on the other
        libraries of the arrays' widest dtype; float32 when there is no array.
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
    arrays = [native_order(a) for a in leaves if a is not None and is_array(a)]
    xp = namespace(*arrays, names=_leaf_names(len(arrays), "tree"))
    _floating_leaves(xp, arrays, "tree", ("real", "complex"))
    dtypes = [_real_dtype(xp, a.dtype) for a in arrays]
    like = arrays[0] if arrays else None
    if len(arrays) != sum(v is not None for v in leaves):
        # optax's Python float leaves: on JAX each reduced (jnp.sum) to a strongly typed
        # array of the default floating dtype (float32, float64 with x64), which promotes
        # the arrays' sums; elsewhere of the arrays' widest dtype (float32 alone)
        if not arrays:
            dtype = xp.float32
        elif library(xp) == "jax":
            dtype = default_float(xp, like)
        else:
            dtype = resolve_accumulate_dtype(xp, "widest", dtypes)
        dtypes.append(dtype)
        arrays = [
            native_order(a) if is_array(a) else constant(xp, a, dtype, like)
            for a in leaves
            if a is not None
        ]
    acc = resolve_accumulate_dtype(xp, "widest", dtypes)
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
def _size(xp: Namespace, u: Any, dtype: Any) -> Any:
    """The number of elements of ``u`` as a 0-d array of ``dtype`` (``jnp.mean``'s divisor).

    A dask array of unknown chunk sizes (``x[x > 0]``) has NaN dimensions: its elements are
    counted when the graph is computed (the NaN size made every value NaN).
    """
    n = known_size(u.shape)
    if n is None:
        return xp.astype(xp.sum(xp.ones_like(u, dtype=xp.int64)), dtype)
    return constant(xp, float(n), dtype, u)


def _core_block_rms(xp: Namespace, u: Any, threshold: Any) -> Any:
    """``u / maximum(1, sqrt(mean(|u| ** 2)) / threshold)`` (optax's ``clip_by_block_rms``).

    The mean is ``jnp.mean``'s: of a float16 or bfloat16 ``u``, summed and divided in
    float32 and rounded once (a sum rounded to the half type, then divided, was one half
    ulp off on about 10 % of leaves).
    """
    sq = _core_abs_sq(xp, u)
    if library(xp) == "jax":
        # jnp.mean itself: eagerly one compiled reduce-and-divide, whose division XLA
        # rounds otherwise than a separate eager one (1 ULP on about 8 % of float32 leaves)
        mean = xp.mean(sq)
    elif dtype_name(sq.dtype) in HALF_PRECISION:
        # jnp.mean of a 16-bit array sums and divides in float32, then rounds once
        wide = xp.astype(sq, xp.float32)
        mean = xp.astype(xp.sum(wide) / _size(xp, wide, xp.float32), sq.dtype)
    else:
        mean = xp.sum(sq) / _size(xp, sq, sq.dtype)
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
            leaf = native_order(leaf)  # dask: without chunks of no elements
            t = scalar_operand(xp, threshold, _real_dtype(xp, leaf.dtype), leaf, "threshold")
            out.append(_core_block_rms(xp, leaf, t))
    return cast(TreeT, unflatten(out))
