"""Per-group norms and limits for :func:`get_total_norm` and :func:`clip_grad_norm_` (``groups=``).

Layer: public adapter over :func:`anyclip._groups.global_norms` (the 2-norm of every group, one
all-reduce of a vector with ``group=``) and the single-group helpers of
:mod:`anyclip.torch._common` (checks), :mod:`anyclip.torch._total_norm` (other orders) and
:mod:`anyclip.torch._scale` (the in-place scaling); no formula here.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import torch

from anyclip import _groups
from anyclip._sparse import values_of
from anyclip.torch._common import (
    _by_device_and_dtype,
    _check_values,
    _foreach,
    _max_norm,
    _norm_type,
    _policy,
    _tensors,
    _use_foreach,
)
from anyclip.torch._scale import _scale_
from anyclip.torch._total_norm import _join_group, _raise_nonfinite, _total_norm

__all__ = ["Groups", "clip_grad_norm_groups", "total_norms"]

#: What ``groups=`` takes: name -> tensors, an optimizer's ``param_groups``, or one name per tensor.
Groups = (
    Mapping[Any, torch.Tensor | Iterable[torch.Tensor]]
    | Sequence[Mapping[str, Any]]
    | Sequence[Hashable]
)


def _named(groups: Any, tensors: Any, arg: str) -> dict[Hashable, list[torch.Tensor]]:
    """``groups`` as name -> list of tensors (parameters for ``clip_grad_norm_``)."""
    if isinstance(groups, Mapping):
        if tensors is not None:
            msg = (
                f"`{arg}` must be None when `groups` maps names to tensors (the groups hold "
                f"every tensor), got {type(tensors).__name__}; pass {arg}=None"
            )
            raise TypeError(msg)
        return {name: _tensors(ts, f"groups[{name!r}]") for name, ts in groups.items()}
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        msg = (
            "`groups` must be a dict of name -> tensors, an optimizer's `param_groups` or one "
            f"group name per tensor of `{arg}`, got {type(groups).__name__}"
        )
        raise TypeError(msg)
    if _is_param_groups(groups):
        if tensors is not None:
            msg = (
                f"`{arg}` must be None with an optimizer's `param_groups` as `groups` (they "
                f"hold every parameter), got {type(tensors).__name__}; pass {arg}=None"
            )
            raise TypeError(msg)
        out: dict[Hashable, list[torch.Tensor]] = {}
        for i, g in enumerate(groups):
            name = g.get("name", i)
            if name in out:
                msg = f"`groups` names two parameter groups {name!r}; give each a distinct 'name'"
                raise ValueError(msg)
            out[name] = _tensors(g["params"], f"groups[{i}]['params']")
        return out
    if tensors is None:
        msg = (
            f"`groups` is a sequence of group names, one per tensor of `{arg}`, but `{arg}` "
            "is None; pass the tensors, or a dict of name -> tensors as `groups`"
        )
        raise TypeError(msg)
    ts = _tensors(tensors, arg)
    if len(ts) != len(groups):
        msg = (
            f"`groups` must name the group of each of the {len(ts)} tensors of `{arg}`, got "
            f"{len(groups)} names; give one name per tensor"
        )
        raise ValueError(msg)
    labelled: dict[Hashable, list[torch.Tensor]] = {}
    for i, (t, name) in enumerate(zip(ts, groups, strict=True)):
        labelled.setdefault(_groups.check_label(name, f"[{i}]"), []).append(t)
    return labelled


def _is_param_groups(groups: Any) -> bool:
    """Whether ``groups`` is an optimizer's ``param_groups`` (dicts with a ``"params"`` entry)."""
    return (
        isinstance(groups, Sequence)
        and not isinstance(groups, (str, bytes))
        and bool(groups)
        and all(isinstance(g, Mapping) and "params" in g for g in groups)
    )


def _norms(
    named: dict[Hashable, list[torch.Tensor]],
    p: float,
    each: bool | None,
    accumulate_dtype: Any,
    group: Any,
) -> dict[Hashable, torch.Tensor]:
    """The norm of each group's (dense) values: the 2-norm with one reduction for all."""
    for name, values in named.items():
        if values:
            _check_values(values, accumulate_dtype, f"groups[{name!r}]")
    if p == 2.0 and group is None and not any(named.values()):
        # no gradient anywhere: nothing names a library, so the shared core answered in
        # NumPy; torch's get_total_norm([]) is torch.tensor(0.0), as an empty group's below
        # (with `group`, the one all-reduce of all groups' sums below joins the others')
        return {name: torch.tensor(0.0) for name in named}
    if p == 2.0:
        for values in named.values():
            for (device, _), grp in _by_device_and_dtype(values).items():
                _use_foreach(each, grp, device)  # torch's foreach=True error
        out: dict[Hashable, torch.Tensor] = _groups.global_norms(
            named, accumulate_dtype=accumulate_dtype, group=group
        )
        return out
    # another order: torch's norm of the per-tensor norms, one reduction per group
    return {
        name: (
            _total_norm(values, p, each, accumulate_dtype, group, name=f"groups[{name!r}]")
            if values
            else _join_group(p, accumulate_dtype, group)
            if group is not None
            else torch.tensor(0.0)
        )
        for name, values in named.items()
    }


def total_norms(
    tensors: Any,
    groups: Any,
    norm_type: Any,
    error_if_nonfinite: bool,
    foreach: Any,
    accumulate_dtype: Any,
    group: Any,
) -> dict[Hashable, torch.Tensor]:
    """:func:`anyclip.torch.get_total_norm` with ``groups``: the norm of each group."""
    each = _foreach(foreach)
    p = _norm_type(norm_type)
    named = _named(groups, tensors, "tensors")
    if _is_param_groups(groups):  # an optimizer's parameters: the norms of their gradients
        named = {name: [q.grad for q in ps if q.grad is not None] for name, ps in named.items()}
    named = {name: [values_of(t) for t in ts] for name, ts in named.items()}
    norms = _norms(named, p, each, accumulate_dtype, group)
    if error_if_nonfinite:
        for norm in norms.values():
            _raise_nonfinite(norm, p)
    return norms


def clip_grad_norm_groups(
    parameters: Any,
    max_norm: Any,
    groups: Any,
    norm_type: Any,
    error_if_nonfinite: bool,
    foreach: Any,
    *,
    accumulate_dtype: Any,
    nonfinite: Any,
    group: Any,
) -> dict[Hashable, torch.Tensor]:
    """:func:`anyclip.torch.clip_grad_norm_` with ``groups``: each group by its own limit."""
    each = _foreach(foreach)
    p = _norm_type(norm_type)
    policy = _policy(error_if_nonfinite, nonfinite)
    params = _named(groups, parameters, "parameters")
    limits = _limits(max_norm, list(params))
    named = {
        name: [values_of(q.grad) for q in ps if q.grad is not None] for name, ps in params.items()
    }
    norms = _norms(named, p, each, accumulate_dtype, group)
    if policy == "raise":
        for name, norm in norms.items():
            if limits[name] is not None:
                _raise_nonfinite(norm, p)
    for name, values in named.items():
        c = limits[name]
        if c is not None and values:
            _scale_(values, c, norms[name], each, policy, unclipped_at_inf=True)
    return norms


def _limits(max_norm: Any, names: list[Hashable]) -> dict[Hashable, float | torch.Tensor | None]:
    """``max_norm`` per group: one limit for all, or a dict with every group (None: no clip)."""
    if not isinstance(max_norm, Mapping):
        c = _max_norm(max_norm)
        return dict.fromkeys(names, c)
    missing = [n for n in names if n not in max_norm]
    extra = [n for n in max_norm if n not in names]
    if missing or extra:
        msg = (
            f"`max_norm` must give a limit (or None: do not clip) for every group and no "
            f"other, got no limit for {missing} and limits for unknown groups {extra}; "
            f"the groups are {names}"
        )
        raise ValueError(msg)
    return {n: None if max_norm[n] is None else _max_norm(max_norm[n]) for n in names}
