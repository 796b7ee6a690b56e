"""The clip and norm functions over nested structures of arrays ("trees").

Layer: public, on top of the eight functions (it calls them; it has no formula of its own).

TF clips flat lists only. These functions take any nesting of lists, tuples, dicts (torch
``state_dict`` and ``dict(model.named_parameters())`` included), namedtuples and, when JAX is in
use, JAX pytrees; they return the same structure, with ``None`` leaves kept as ``None``.

Each function applies the top-level function of the same name: per leaf for ``clip_by_value``,
``clip_by_norm`` and ``clip_by_average_norm``; over all leaves at once for ``global_norm`` and
``clip_by_global_norm``. The formulas are the top-level ones, not a copy. Unlike TF, the leaves
may have different floating dtypes: the global norm is accumulated in ``accumulate_dtype``
(default ``"widest"``, the widest leaf dtype) and every leaf keeps its own dtype. With
``accumulate_dtype=None`` and one dtype, results are TF's bit for bit. A sparse array (a torch
sparse tensor, a JAX ``BCOO``) is one leaf, handled as the top-level functions handle it.

Rules TF does not have, from optax, timm, TF Privacy and Opacus, live in their own modules and
are re-exported here: :func:`norm` and :func:`clip_by_block_rms` (optax's), :func:`adaptive_clip`
(AGC, optax's and timm's layouts) from :mod:`anyclip._adaptive`; :func:`per_example_clip` and
:func:`per_example_layer_clip` (DP-SGD) from :mod:`anyclip._per_example`.

>>> import numpy as np
>>> from anyclip import tree
>>> grads = {"w": np.array([3.0, 4.0], dtype=np.float32), "b": None}
>>> tree.clip_by_value(grads, -1.0, 1.0)
{'w': array([1., 1.], dtype=float32), 'b': None}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

from anyclip import _clip, _clip_tensor, _groups
from anyclip._adaptive import clip_by_block_rms, norm
from anyclip._agc import adaptive_clip
from anyclip._compat import is_array, namespace
from anyclip._keywords import hints_keywords
from anyclip._per_example import per_example_clip, per_example_layer_clip
from anyclip._pytree import TreeT, flatten, map_leaves
from anyclip._typing import ArrayT, Axes, DTypeLike, Nonfinite, Operand

__all__ = [
    "adaptive_clip",
    "clip_by_average_norm",
    "clip_by_block_rms",
    "clip_by_global_norm",
    "clip_by_norm",
    "clip_by_value",
    "flatten",
    "global_norm",
    "map_leaves",
    "norm",
    "per_example_clip",
    "per_example_layer_clip",
]

K = TypeVar("K")


def _unbounded(t: Any, upper: bool) -> Any:
    """The bound that leaves every value of ``t`` in place: +-inf, or the integer extreme."""
    xp = namespace(t)
    if xp.isdtype(t.dtype, "integral"):
        info = xp.iinfo(t.dtype)
        return info.max if upper else info.min
    return float("inf") if upper else float("-inf")


@hints_keywords
def clip_by_value(
    tree: TreeT, clip_value_min: Operand | None, clip_value_max: Operand | None
) -> TreeT:
    """:func:`anyclip.clip_by_value` on every leaf of ``tree``.

    A ``None`` bound leaves that side unclipped, as ``optax.tree.clip`` (``jnp.clip``) does;
    both ``None`` return the leaves unchanged. The top-level :func:`anyclip.clip_by_value`
    keeps TF's refusal of ``None``.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> tree.clip_by_value([np.array([-3.0, 3.0], dtype=np.float32)], -1.0, 1.0)
    [array([-1.,  1.], dtype=float32)]
    >>> tree.clip_by_value([np.array([-3.0, 3.0], dtype=np.float32)], None, 1.0)
    [array([-3.,  1.], dtype=float32)]
    """
    if clip_value_min is None and clip_value_max is None:
        return map_leaves(lambda t: t, tree)

    def clip(t: Any) -> Any:
        lo = _unbounded(t, False) if clip_value_min is None else clip_value_min
        hi = _unbounded(t, True) if clip_value_max is None else clip_value_max
        return _clip_tensor.clip_by_value(t, lo, hi)

    return map_leaves(clip, tree)


@hints_keywords
def clip_by_norm(
    tree: TreeT, clip_norm: Operand, axes: Axes = None, *, accumulate_dtype: DTypeLike = None
) -> TreeT:
    """:func:`anyclip.clip_by_norm` on every leaf of ``tree``, each with its own norm.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> tree.clip_by_norm({"w": np.array([3.0, 4.0], dtype=np.float32)}, 1.0)
    {'w': array([0.6, 0.8], dtype=float32)}
    """
    return map_leaves(
        lambda t: _clip_tensor.clip_by_norm(t, clip_norm, axes, accumulate_dtype=accumulate_dtype),
        tree,
    )


@hints_keywords
def clip_by_average_norm(tree: TreeT, clip_norm: Operand) -> TreeT:
    """:func:`anyclip.clip_by_average_norm` on every leaf of ``tree`` (float32 leaves only).

    Parameters
    ----------
    tree : nested structure of float32 arrays
        ``None`` leaves are kept.
    clip_norm : number or array
        The largest average norm of each leaf.

    Returns
    -------
    same structure as ``tree``

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> tree.clip_by_average_norm({"w": np.array([3.0, 4.0], dtype=np.float32)}, 1.0)
    {'w': array([1.2, 1.6], dtype=float32)}
    """
    return map_leaves(lambda t: _clip_tensor.clip_by_average_norm(t, clip_norm), tree)


#: ``groups=``: a label tree (names at the leaves or at containers) or a callable giving one.
Labels = Mapping[Any, Any] | Sequence[Any] | Callable[[Any], Any] | str | int


@overload
def global_norm(
    tree: Any,
    *,
    accumulate_dtype: DTypeLike = "widest",
    group: Any = None,
    groups: Labels,
) -> dict[Any, Any]: ...


@overload
def global_norm(
    tree: Mapping[Any, ArrayT | None],
    *,
    accumulate_dtype: DTypeLike = "widest",
    group: Any = None,
    groups: None = None,
) -> ArrayT: ...


@overload
def global_norm(
    tree: Sequence[ArrayT | None],
    *,
    accumulate_dtype: DTypeLike = "widest",
    group: Any = None,
    groups: None = None,
) -> ArrayT: ...


@overload
def global_norm(
    tree: Any, *, accumulate_dtype: DTypeLike = "widest", group: Any = None, groups: None = None
) -> Any: ...


@hints_keywords
def global_norm(
    tree: Any,
    *,
    accumulate_dtype: DTypeLike = "widest",
    group: Any = None,
    groups: Labels | None = None,
) -> Any:
    """:func:`anyclip.global_norm` of all leaves of ``tree``, or of each group of leaves.

    Parameters
    ----------
    tree : nested structure of arrays
        Leaves of real floating dtypes, possibly different; ``None`` leaves are skipped.
    accumulate_dtype : dtype, str, "widest" or None, optional
        The dtype the squares are summed in. ``"widest"`` (default): the widest leaf dtype
        (float32 for float16 with bfloat16). ``None``: TF's rule (one dtype only).
    group : ProcessGroup, DeviceMesh, sequence of them, axis name or tuple of names, optional
        The processes whose trees form the global norm together with this one (one
        all-reduce of a scalar); see :func:`anyclip.global_norm`.
    groups : tree of str or int, or callable, optional
        A group name per leaf, as ``optax.multi_transform``'s labels: a tree of ``tree``'s
        structure (a name at a container names every leaf below it), or a callable that
        takes ``tree`` and returns one. Then the result is a dict name -> norm, each the
        norm of that group alone bit for bit (``"widest"`` resolves per group), in the order
        the names first appear; with ``group``, one all-reduce of the vector of the groups'
        partial sums instead of one per group (every process names the same groups, one it
        holds no leaf of included: label a ``None`` leaf with it).

    Returns
    -------
    array or dict
        A 0-d array of ``accumulate_dtype``; with ``groups``, a dict of them by group name.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> grads = {"w": np.array([3.0, 4.0], dtype=np.float16), "b": np.array([12.0])}
    >>> tree.global_norm(grads)  # float16 and float64 leaves: accumulated in float64
    array(13.)

    One norm per group (labels as ``optax.multi_transform``'s):

    >>> grads = {"w": np.array([3.0, 4.0], np.float32), "b": np.array([12.0], np.float32)}
    >>> tree.global_norm(grads, groups={"w": "weights", "b": "biases"})
    {'weights': array(5., dtype=float32), 'biases': array(12., dtype=float32)}
    """
    leaves, _ = flatten(tree)
    for i, leaf in enumerate(leaves):
        if is_array(leaf) and namespace(leaf).isdtype(leaf.dtype, "complex floating"):
            msg = (
                f"`tree` leaves must be real for tree.global_norm (TF's tf.linalg.global_norm "
                f"refuses complex), got {leaf.dtype} at leaf {i}; use anyclip.tree.norm(tree), "
                "optax's tree norm, which accepts complex leaves"
            )
            raise TypeError(msg)
    if groups is not None:
        named: dict[Any, list[Any]] = {}
        for leaf, label in zip(leaves, _groups.tree_labels(tree, groups), strict=True):
            named.setdefault(label, []).append(leaf)
        return _groups.global_norms(named, accumulate_dtype=accumulate_dtype, group=group)
    return _clip.global_norm(leaves, accumulate_dtype=accumulate_dtype, group=group)


@overload
def clip_by_global_norm(
    tree: dict[K, ArrayT],
    clip_norm: Operand,
    use_norm: ArrayT | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: Any = None,
) -> tuple[dict[K, ArrayT], ArrayT]: ...


@overload
def clip_by_global_norm(
    tree: dict[K, ArrayT | None],
    clip_norm: Operand,
    use_norm: ArrayT | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: Any = None,
) -> tuple[dict[K, ArrayT | None], ArrayT]: ...


@overload
def clip_by_global_norm(
    tree: list[ArrayT],
    clip_norm: Operand,
    use_norm: ArrayT | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: Any = None,
) -> tuple[list[ArrayT], ArrayT]: ...


@overload
def clip_by_global_norm(
    tree: list[ArrayT | None],
    clip_norm: Operand,
    use_norm: ArrayT | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: Any = None,
) -> tuple[list[ArrayT | None], ArrayT]: ...


@overload
def clip_by_global_norm(
    tree: TreeT,
    clip_norm: Operand,
    use_norm: Any | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: Any = None,
) -> tuple[TreeT, Any]: ...


@hints_keywords
def clip_by_global_norm(
    tree: TreeT,
    clip_norm: Operand,
    use_norm: Any = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: Any = None,
) -> tuple[TreeT, Any]:
    """:func:`anyclip.clip_by_global_norm` over all leaves of ``tree``, keeping its structure.

    Parameters
    ----------
    tree : nested structure of arrays
        Leaves of real floating dtypes, possibly different (each keeps its own).
    clip_norm : number or array
        The largest global norm.
    use_norm : array, optional
        A precomputed global norm.
    accumulate_dtype : dtype, str, "widest" or None, optional
        As in :func:`global_norm`.
    nonfinite : {"tf", "torch", "skip", "raise"}, optional
        What an inf or NaN global norm does; see :func:`anyclip.clip_by_global_norm`
        (``"raise"`` reads the norm on the host: a host sync).
    group : ProcessGroup, DeviceMesh, sequence of them, axis name or tuple of names, optional
        As in :func:`global_norm`.

    Returns
    -------
    clipped : same structure as ``tree``
    global_norm : array
        The global norm before clipping (``use_norm`` when given).

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> grads = {"a": np.array([3.0, 4.0], dtype=np.float32), "b": np.array([12.0], np.float32)}
    >>> clipped, norm = tree.clip_by_global_norm(grads, 6.5)
    >>> clipped["a"], clipped["b"], norm
    (array([1.5, 2. ], dtype=float32), array([6.], dtype=float32), array(13., dtype=float32))
    """
    leaves, unflatten = flatten(tree)
    clipped, norm = _clip.clip_by_global_norm(
        leaves,
        clip_norm,
        use_norm,
        accumulate_dtype=accumulate_dtype,
        nonfinite=nonfinite,
        group=group,
    )
    return unflatten(clipped), norm
