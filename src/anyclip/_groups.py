"""Per-group global norms: one norm per named group of arrays, with one reduction across processes.

Layer: public helper (argument checks, the namespace, the kernels, the labels of a tree) over
:func:`anyclip._core.group_global_norms`. :func:`anyclip.tree.global_norm` (``groups=``) and
:func:`anyclip.torch.get_total_norm` / :func:`anyclip.torch.clip_grad_norm_` (``groups=``)
call :func:`global_norms`; neither holds a formula of its own.

Each group's norm is the norm :func:`anyclip.global_norm` gives for that group alone, bit for
bit: the same kernels, the same accumulation dtype (``"widest"`` resolves per group), the same
order of operations. With ``group=`` the partial sums of every group are all-reduced together,
as one vector (one all-reduce per dtype of the partial sums, which is one unless the groups
accumulate in different dtypes), instead of one all-reduce per group. The vector is ordered by
group name, so every process must name the same groups (a group it holds nothing of included:
its partial sum is 0) but may meet them in any order. torch ``DTensor`` leaves are still summed
over their own mesh group by group (:func:`anyclip._kernels._dist.dtensor_half_squares`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from anyclip import _core
from anyclip._compat import device, is_array, library, namespace, to_device
from anyclip._kernels import GENERIC, kernels_for
from anyclip._kernels._dist import GroupKernels, check_group, group_namespace, zero_partial
from anyclip._numerics import constant
from anyclip._policy_dtypes import resolve_accumulate_dtype
from anyclip._policy_lists import ListNames, floating_list
from anyclip._pytree import flatten
from anyclip._sparse import is_sparse, values_list
from anyclip._typing import Namespace

__all__ = ["check_label", "global_norms", "tree_labels"]


def check_label(label: Any, where: str) -> Hashable:
    """``label`` if it can name a group (a str or an int), else ``TypeError``."""
    if isinstance(label, (str, int)) and not isinstance(label, bool):
        return label
    msg = (
        f"`groups` must give each leaf a group name (a str or an int), got "
        f"{type(label).__name__} at groups{where}; label every leaf, as optax.multi_transform's "
        "labels do"
    )
    raise TypeError(msg)


def _is_leaf(node: Any) -> bool:
    return node is None or is_array(node) or is_sparse(node)


def tree_labels(tree: Any, labels: Any) -> list[Hashable]:
    """The group name of every leaf of ``tree``, in :func:`anyclip.tree.flatten`'s order.

    ``labels`` has ``tree``'s structure with a name where ``tree`` has a leaf (``None`` leaves
    included), or a name at a container (then every leaf below it has that name); a callable
    is called with ``tree`` first, as ``optax.multi_transform`` calls its ``param_labels``.
    """
    if callable(labels) and not isinstance(labels, (str, Mapping, Sequence)):
        labels = labels(tree)
    out: list[Hashable] = []
    _walk(tree, labels, "", out)
    return out


def _walk(node: Any, labels: Any, where: str, out: list[Hashable]) -> None:
    if isinstance(labels, (str, int)) and not isinstance(labels, bool):  # a prefix label
        out.extend(labels for _ in flatten(node)[0])
        return
    if _is_leaf(node) or type(node).__name__ == "matrix":
        out.append(check_label(labels, where))
        return
    if isinstance(node, Mapping) and isinstance(labels, Mapping):
        for k in node:
            if k not in labels:
                msg = (
                    f"`groups` must have the tree's structure: the tree has key {k!r} at "
                    f"tree{where}, the labels do not; label every leaf"
                )
                raise ValueError(msg)
            _walk(node[k], labels[k], f"{where}[{k!r}]", out)
        return
    if isinstance(node, (list, tuple)) and isinstance(labels, (list, tuple)):
        if len(node) != len(labels):
            msg = (
                f"`groups` must have the tree's structure: {len(node)} children at "
                f"tree{where}, {len(labels)} labels; label every leaf"
            )
            raise ValueError(msg)
        for i, (c, lab) in enumerate(zip(node, labels, strict=True)):
            _walk(c, lab, f"{where}[{i}]", out)
        return
    jax = sys.modules.get("jax")
    if jax is not None and not isinstance(node, (Mapping, list, tuple)):
        _, treedef = jax.tree_util.tree_flatten(node, is_leaf=_is_leaf)
        try:
            sub = treedef.flatten_up_to(labels)
        except (ValueError, TypeError):
            sub = None
        if sub is not None:
            for i, (c, lab) in enumerate(
                zip(jax.tree_util.tree_leaves(node, is_leaf=_is_leaf), sub, strict=True)
            ):
                _walk(c, lab, f"{where}<{i}>", out)
            return
    msg = (
        f"`groups` must have the tree's structure (or be a callable giving it), got "
        f"{type(labels).__name__} where the tree has {type(node).__name__} at tree{where}"
    )
    raise ValueError(msg)


def global_norms(
    named: Mapping[Hashable, Sequence[Any]],
    *,
    accumulate_dtype: Any = "widest",
    group: Any = None,
) -> dict[Hashable, Any]:
    """The global norm of each group of ``named`` (name -> arrays, ``None`` entries skipped).

    Each is :func:`anyclip.global_norm` of that group with ``accumulate_dtype`` (bit for bit);
    with ``group=``, one all-reduce of the vector of partial sums (per dtype).
    """
    names = list(named)
    lists = [values_list(list(named[n]))[0] for n in names]
    flat = [v for items in lists for v in items]
    xp = namespace(*flat, names=ListNames(len(flat)))
    if group is not None and all(v is None for v in flat):  # joins its group's all-reduce
        xp = group_namespace(group) or xp
    groups = check_group(xp, group)
    present = [v for v in flat if v is not None]
    like = present[0] if present else None
    parts = []
    for items in lists:
        values = floating_list(xp, items, mixed_ok=accumulate_dtype is not None, beside=flat)
        arrays = [v for v in values if v is not None]
        acc = resolve_accumulate_dtype(xp, accumulate_dtype, [v.dtype for v in arrays])
        upcast = acc is not None and any(v.dtype != acc for v in arrays)
        if arrays:
            k = kernels_for(xp, arrays, acc) if upcast else kernels_for(xp, arrays)
            dtype = acc if upcast else arrays[0].dtype
        else:
            k, dtype = GENERIC, xp.float32 if acc is None else acc
        zero = zero_partial(xp, dtype, groups) if groups and like is None else None
        if zero is None:
            zero = constant(xp, 0.0, dtype, arrays[0] if arrays else like)
        parts.append((k, arrays, acc if upcast else None, zero))
    # the vector's order: by name, the same on every process whatever order it met them in
    order = sorted(range(len(names)), key=lambda i: (type(names[i]).__name__, names[i]))
    reduce = _reducer(xp, groups, order) if groups else None
    norms = _core.group_global_norms(xp, parts, reduce)
    out = {}
    for name, (k, arrays, _, _), norm in zip(names, parts, norms, strict=True):
        out[name] = k.replicated(xp, norm, arrays[0]) if arrays else norm
    return out


def _reducer(
    xp: Namespace, groups: tuple[Any, ...], order: list[int]
) -> Callable[[list[Any]], list[Any]]:
    """Sum partial sums over ``groups``: one reduction of a vector per dtype among them.

    The vector holds the partial sums in ``order`` (the groups sorted by name), so that
    processes that met the groups in different orders add the same groups together.
    """
    grouped = GroupKernels(GENERIC, library(xp), groups)

    def reduce(totals: list[Any]) -> list[Any]:
        out = list(totals)
        by_dtype: dict[Any, list[int]] = {}
        for i in order:
            by_dtype.setdefault(_wire_dtype(xp, totals[i].dtype), []).append(i)
        for wire, idx in by_dtype.items():
            home = device(totals[idx[0]])
            parts = [
                _cast(xp, t if device(t) == home else to_device(t, home), wire)
                for t in (totals[i] for i in idx)
            ]
            summed = grouped.reduce(xp, xp.stack(parts))
            for j, i in enumerate(idx):
                out[i] = _cast(xp, summed[j], totals[i].dtype)
        return out

    return reduce


def _cast(xp: Namespace, x: Any, dtype: Any) -> Any:
    return x if x.dtype == dtype else xp.astype(x, dtype)


def _wire_dtype(xp: Namespace, dtype: Any) -> Any:
    """The dtype a partial sum of ``dtype`` is all-reduced in, as one group's would be.

    torch: float32 for float16, bfloat16 and float32 (``all_reduce_torch`` sums narrower
    partial sums in float32 and rounds once), so the groups of every process share one
    vector even where a process holds nothing of a float16 group (its zero is float32);
    float64 for float64. JAX: the dtype itself (``psum``, as one group's).
    """
    if library(xp) != "torch" or dtype == xp.float64:
        return dtype
    return xp.float32
