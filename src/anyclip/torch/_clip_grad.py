"""torch's global-norm drop-ins: get_total_norm, clip_grads_with_norm_ and clip_grad_norm_.

Layer: adapter (public; :mod:`anyclip.torch` re-exports the names in ``__all__``). Argument
coercion is in :mod:`anyclip.torch._common`, the norm in :mod:`anyclip.torch._total_norm`, the
scaling in :mod:`anyclip.torch._scale`; the per-tensor clippers in
:mod:`anyclip.torch._clip_value`, Keras's options in :mod:`anyclip.torch._keras`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, overload

import torch

from anyclip._compat import namespace
from anyclip._keywords import hints_keywords
from anyclip._policy import check_nonfinite
from anyclip._policy_dtypes import resolve_accumulate_dtype
from anyclip._sparse import values_of
from anyclip._typing import DTypeLike, Nonfinite
from anyclip.torch._common import (
    Parameters,
    _describe,
    _foreach,
    _grads,
    _local,
    _max_norm,
    _norm_type,
    _plain,
    _policy,
    _tensors,
    _truth,
)
from anyclip.torch._groups import Groups, clip_grad_norm_groups, total_norms
from anyclip.torch._scale import _scale_
from anyclip.torch._scaler import unscale_once
from anyclip.torch._total_norm import _join_group, _raise_nonfinite, _total_norm

__all__ = [
    "clip_grad_norm_",
    "clip_grads_with_norm_",
    "get_total_norm",
]


@overload
def get_total_norm(
    tensors: Parameters,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    group: Any = None,
    groups: None = None,
) -> torch.Tensor: ...


@overload
def get_total_norm(
    tensors: Parameters | None,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    group: Any = None,
    groups: Groups,
) -> dict[Hashable, torch.Tensor]: ...


@hints_keywords
@torch.no_grad()
def get_total_norm(
    tensors: Parameters | None,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    group: Any = None,
    groups: Groups | None = None,
) -> torch.Tensor | dict[Hashable, torch.Tensor]:
    """The norm of all ``tensors`` together, as ``torch.nn.utils.get_total_norm``.

    For ``norm_type=2`` (the default) this is :func:`anyclip.global_norm`, TF's
    ``sqrt(sum(l2_loss(t)) * 2)``; any other order is torch's norm of the per-tensor norms.

    Parameters
    ----------
    tensors : Tensor or iterable of Tensor
        The tensors (usually gradients); sparse ones count through their stored values.
    norm_type : float or 'inf', optional
        The order of the norm, converted with ``float`` as in torch (``2.0``, ``1``,
        ``math.inf``, ``'inf'``...; NaN gives a NaN norm, as torch's; a tensor is read on the
        host).
    error_if_nonfinite : bool, optional
        Raise :class:`NonfiniteNormError` if the norm is inf or NaN. This reads the norm on
        the host (a host sync, as torch's own): the only argument here that syncs.
    foreach : bool, optional
        torch's switch: ``None`` uses the foreach kernels where supported, ``True`` requires
        them (``RuntimeError`` on a device without them), ``False`` avoids them. Another value
        counts by its truth value, as in torch.
    accumulate_dtype : dtype, str, "widest" or None, optional
        The dtype the norm is accumulated in (default: the widest dtype). ``None``: TF's rule,
        one dtype only.
    group : ProcessGroup, DeviceMesh or sequence of them, optional
        Not in torch. The processes whose gradients form the norm with these ones (pipeline
        stages, expert groups): one all-reduce of a scalar over each (of the norm and its NaN
        flag for ``norm_type=inf``, so that a NaN on one rank is NaN on all, which torch's
        ``MAX`` alone would drop). Sharded gradients (``DTensor``: FSDP2, tensor parallel)
        need none. Every process of the group calls.
    groups : dict, list of dict or sequence of names, optional
        Not in torch: one norm per group. A dict name -> tensors (``tensors`` is then None),
        an optimizer's ``param_groups`` (the norms of its parameters' gradients, named by
        each group's ``"name"`` entry or its index; ``tensors`` is then None), or one name
        per tensor of ``tensors`` (as :func:`anyclip.tree.global_norm`'s labels). Each norm
        equals this function's on that group alone, bit for bit; for the 2-norm all groups
        are summed in one pass and, with ``group``, all-reduced together as one vector
        (every process names the same groups, an empty one included; DTensor gradients are
        still reduced over their mesh group by group).

    Returns
    -------
    Tensor or dict
        A 0-d tensor on the first tensor's device; ``tensor(0.)`` for no tensors, as torch
        (with ``group``, the norm of the other processes' tensors). A ``Replicate`` DTensor
        for DTensor inputs. With ``groups``, a dict name -> norm.

    Raises
    ------
    NonfiniteNormError
        With ``error_if_nonfinite=True`` and an inf or NaN norm.
    TypeError
        If ``norm_type`` is None, a list or complex (torch's class), or ``tensors`` holds
        something else than real floating tensors of one dtype (one dtype with
        ``accumulate_dtype=None`` only).
    ValueError
        If ``norm_type`` is a string that is no number or a tensor of several values (torch's
        class), or ``meta`` tensors are mixed with others.
    RuntimeError
        With ``foreach=True`` on a device without foreach kernels (torch's error).

    Examples
    --------
    >>> import torch
    >>> from anyclip.torch import get_total_norm
    >>> get_total_norm([torch.tensor([3.0, 4.0]), torch.tensor([[12.0]])])
    tensor(13.)
    >>> get_total_norm([torch.tensor([3.0, -4.0])], norm_type="inf")
    tensor(4.)

    One norm per group:

    >>> get_total_norm(None, groups={"a": [torch.tensor([3.0, 4.0])], "b": torch.ones(4)})
    {'a': tensor(5.), 'b': tensor(2.)}
    """
    if groups is not None:
        return total_norms(
            tensors, groups, norm_type, error_if_nonfinite, foreach, accumulate_dtype, group
        )
    each = _foreach(foreach)
    p = _norm_type(norm_type)
    given = _tensors(tensors, "tensors")
    plain = _plain(given)  # the common case: its own values, one device and dtype
    values = given if plain is not None else [values_of(t) for t in given]
    if not values and group is not None:  # still joins its group's all-reduce
        return _join_group(p, accumulate_dtype, group)
    if not values:
        return torch.tensor(0.0)
    norm = _total_norm(values, p, each, accumulate_dtype, group, name="tensors", plain=plain)
    if _truth(error_if_nonfinite, "error_if_nonfinite"):
        _raise_nonfinite(norm, p)
    return norm


@hints_keywords
@torch.no_grad()
def clip_grads_with_norm_(
    parameters: Parameters,
    max_norm: float | torch.Tensor,
    total_norm: torch.Tensor,
    foreach: bool | None = None,
    *,
    nonfinite: Nonfinite = "tf",
) -> None:
    """Scale every ``p.grad`` in place by TF's factor for ``total_norm``, as torch's function.

    ``torch.nn.utils.clip_grads_with_norm_`` with TF's factor
    ``max_norm * minimum(1 / total_norm, 1 / max_norm)`` instead of
    ``min(max_norm / (total_norm + 1e-6), 1)``. ``max_norm=inf`` leaves the gradients
    unchanged, as torch's (NaN for a non-finite ``total_norm``, as torch's).

    Parameters
    ----------
    parameters : Tensor or iterable of Tensor
        Parameters whose ``.grad`` is scaled; those without a gradient are skipped.
    max_norm : float or Tensor
        The largest norm: a number (converted with ``float``, as torch: ``'inf'`` works) or
        a one-element real tensor of any dtype (cast to the norm's dtype on its device, with
        no host sync).
    total_norm : Tensor
        The norm to clip by (usually from :func:`get_total_norm`), a 0-d real tensor (an
        integer one is cast to torch's default dtype, as torch's arithmetic does).
    foreach : bool, optional
        As in :func:`get_total_norm`.
    nonfinite : {"tf", "torch", "skip", "raise"}, optional
        What an inf or NaN ``total_norm`` does (see :func:`anyclip.clip_by_global_norm`);
        ``"raise"`` reads it on the host (a host sync), the others do not.

    Raises
    ------
    TypeError
        If ``total_norm`` is not a tensor, or ``max_norm`` is None, a list or complex.
    ValueError
        If ``max_norm`` is a string that is no number or a tensor of several values.
    RuntimeError
        If ``total_norm`` is not 0-d or ``max_norm`` is a complex tensor (torch's classes).
    NotImplementedError
        If ``total_norm`` is complex (torch's class).

    Examples
    --------
    >>> import torch
    >>> from anyclip.torch import clip_grads_with_norm_, get_total_norm
    >>> p = torch.nn.Parameter(torch.zeros(2))
    >>> p.grad = torch.tensor([3.0, 4.0])
    >>> clip_grads_with_norm_([p], 1.0, get_total_norm([p.grad]))
    >>> p.grad
    tensor([0.6000, 0.8000])
    """
    each = _foreach(foreach)
    policy = check_nonfinite(nonfinite)
    grads = _grads(parameters)
    plain = _plain(grads)  # the common case: its own values, one device and dtype
    values = grads if plain is not None else [values_of(g) for g in grads]
    c = _max_norm(max_norm)  # torch converts it before looking at the gradients, too
    norm = _total_norm_arg(total_norm)
    if not values:
        return
    if _local(norm).is_meta and not all(_local(v).is_meta for v in values):
        msg = (  # torch's class (its copy of the factor to the gradients' device), named
            "`total_norm` is a tensor on the meta device (a shape without values) while the "
            "gradients hold values: no factor can come from it; pass the norm itself (from "
            "anyclip.torch.get_total_norm on these gradients)"
        )
        raise NotImplementedError(msg)
    if policy == "raise":
        _raise_nonfinite(norm, 2.0)
    _scale_(values, c, norm, each, policy, plain=plain)


def _total_norm_arg(total_norm: Any) -> torch.Tensor:
    """``clip_grads_with_norm_``'s ``total_norm``: a 0-d real tensor, with torch's error classes.

    An integer one is cast to torch's default dtype, as torch's ``total_norm + 1e-6`` does.
    """
    if not isinstance(total_norm, torch.Tensor):
        msg = (
            "`total_norm` must be a 0-d tensor (from anyclip.torch.get_total_norm), got "
            f"{type(total_norm).__name__}; wrap a number with torch.tensor(...)"
        )
        raise TypeError(msg)
    local = _local(total_norm)
    if local.ndim != 0:  # torch's scaling raises RuntimeError
        msg = (
            "`total_norm` must be a 0-d tensor (from anyclip.torch.get_total_norm), got "
            f"{_describe(local)}; pass the norm itself, e.g. `total_norm.reshape(())`"
        )
        raise RuntimeError(msg)
    if local.is_complex():  # torch's clamp raises NotImplementedError
        msg = f"`total_norm` must be real, got a tensor of dtype {local.dtype}; pass its `.abs()`"
        raise NotImplementedError(msg)
    if not local.is_floating_point():
        return total_norm.to(torch.get_default_dtype())
    return total_norm


@overload
def clip_grad_norm_(
    parameters: Parameters,
    max_norm: float | torch.Tensor,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: Any = None,
    groups: None = None,
    scaler: torch.amp.GradScaler | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> torch.Tensor: ...


@overload
def clip_grad_norm_(
    parameters: Parameters | None,
    max_norm: float | torch.Tensor | Mapping[Any, float | torch.Tensor | None],
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: Any = None,
    groups: Groups,
    scaler: torch.amp.GradScaler | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> dict[Hashable, torch.Tensor]: ...


@hints_keywords
@torch.no_grad()
def clip_grad_norm_(
    parameters: Parameters | None,
    max_norm: float | torch.Tensor | Mapping[Any, float | torch.Tensor | None],
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: Any = None,
    groups: Groups | None = None,
    scaler: torch.amp.GradScaler | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> torch.Tensor | dict[Hashable, torch.Tensor]:
    """Scale all gradients in place so their total norm is at most ``max_norm``, as TF.

    torch's signature, TF's numbers: every ``p.grad`` is multiplied by
    ``max_norm * minimum(1 / norm, 1 / max_norm)`` (:func:`anyclip.clip_by_global_norm`'s
    factor), with no shortcut when nothing needs clipping and no ``1e-6`` in the divisor.
    One exception, torch's: ``max_norm=inf`` (torch's idiom for reading the norm alone)
    leaves the gradients unchanged, bit for bit, where TF's factor ``inf * 0`` is NaN.

    Parameters
    ----------
    parameters : Tensor or iterable of Tensor
        Parameters whose ``.grad`` is clipped; those without a gradient are skipped. Sparse
        gradients are clipped through their values, as TF clips ``IndexedSlices``.
    max_norm : float or Tensor
        The largest total norm (``clip_norm`` in TF): a number (converted with ``float``, as
        torch: ``'inf'`` works) or a tensor holding one real value (any shape and dtype, such
        as ``torch.tensor([1.0])``, as torch's own accepts; cast on its device, no host
        sync). ``inf`` (number or tensor) leaves the gradients unchanged, as torch's; a
        non-finite norm still makes them NaN, as torch's (and TF's).
    norm_type : float or 'inf', optional
        The order of the norm, converted with ``float`` as in torch (a tensor is read on the
        host). 2 (default) is TF's
        global norm; any other order is torch's norm of the per-gradient norms, scaled with
        TF's factor (NaN gives a NaN norm and NaN gradients, as torch's).
    error_if_nonfinite : bool, optional
        torch's flag: raise :class:`NonfiniteNormError` (a ``RuntimeError``, with torch's
        message) on an inf or NaN norm; the same as ``nonfinite="raise"``. Both read the norm
        on the host (a host sync, as torch's own); no other argument value syncs.
    foreach : bool, optional
        torch's switch, honoured: ``None`` uses the foreach kernels where supported, ``True``
        requires them, ``False`` avoids them; another value counts by its truth value, as in
        torch.
    accumulate_dtype : dtype, str, "widest" or None, optional
        The dtype the norm is accumulated in (default: the widest gradient dtype). ``None``:
        TF's rule, one dtype only.
    nonfinite : {"tf", "torch", "skip", "raise"}, optional
        What an inf or NaN norm does (see :func:`anyclip.clip_by_global_norm`). ``"tf"``
        (default) makes every gradient NaN; ``"torch"`` matches torch's own result.
    group : ProcessGroup, DeviceMesh or sequence of them, optional
        Not in torch. The processes whose gradients form the norm with these ones (pipeline
        stages, expert groups): one all-reduce of a scalar over each (of the norm and its NaN
        flag for ``norm_type=inf``, so that a NaN on one rank is NaN on all, which torch's
        ``MAX`` alone would drop). Sharded gradients (``DTensor``: FSDP2, tensor parallel)
        need none. Every process of the group calls.
    groups : dict, list of dict or sequence of names, optional
        Not in torch: clip each group of parameters by its own norm. A dict name ->
        parameters or an optimizer's ``param_groups`` (named by their ``"name"`` entry or
        their index), with ``parameters=None``; or one name per parameter of
        ``parameters``. ``max_norm`` is then one limit for every group, or a dict name ->
        limit with every group, ``None`` leaving that group unclipped (its norm is still
        returned). The norms are :func:`get_total_norm`'s with ``groups`` (one pass; with
        ``group``, one all-reduce of the vector of the groups' partial sums).
    scaler, optimizer : torch.amp.GradScaler and torch.optim.Optimizer, optional
        Not in torch: the gradients are still multiplied by ``scaler``'s loss scale;
        ``scaler.unscale_(optimizer)`` runs first, unless it already ran since the last
        ``scaler.update()`` (a second call in the same step, under gradient accumulation or
        for logging, does not unscale again, where torch's ``unscale_`` raises). The norm
        returned is the unscaled one; an inf or NaN gradient is recorded by ``unscale_`` and
        ``scaler.step(optimizer)`` skips the step, as after torch's own ``unscale_``. Pass
        both or neither.

    Returns
    -------
    Tensor or dict
        The total norm of the gradients before clipping (0-d, on the first gradient's device;
        a ``Replicate`` DTensor, equal on every rank, for DTensor gradients). With
        ``groups``, a dict name -> norm of each group before clipping.

    Raises
    ------
    TypeError
        If ``max_norm`` or ``norm_type`` is None, a list or complex (torch's class), or the
        gradients are not real floating tensors of one dtype (one dtype with
        ``accumulate_dtype=None`` only).
    ValueError
        If ``max_norm`` or ``norm_type`` is a string that is no number or a tensor of several
        values (torch's class), ``nonfinite`` is not a policy, or ``error_if_nonfinite=True``
        comes with ``nonfinite`` "torch" or "skip".
    NonfiniteNormError
        With ``error_if_nonfinite=True`` (or ``nonfinite="raise"``) and a non-finite norm.
    RuntimeError
        With ``foreach=True`` on a device without foreach kernels (torch's error), or a
        complex tensor as ``max_norm`` or ``norm_type`` (torch's class).

    Notes
    -----
    The 2-norm is :func:`anyclip.global_norm`'s: gradients on several devices are grouped by
    device, each device sums its own squares, and the partial sums meet on the first
    gradient's device (a device-to-device copy, no host sync); the factor is sent back.
    DTensor gradients are summed shard by shard and scaled in place, shard by shard: no
    gather, and the only communication is one all-reduce of a scalar per mesh.

    Examples
    --------
    >>> import torch
    >>> from anyclip.torch import clip_grad_norm_
    >>> model = torch.nn.Linear(2, 1)
    >>> model.weight.grad = torch.tensor([[3.0, 4.0]])
    >>> model.bias.grad = torch.tensor([12.0])
    >>> clip_grad_norm_(model.parameters(), max_norm=6.5)
    tensor(13.)
    >>> model.weight.grad, model.bias.grad
    (tensor([[1.5000, 2.0000]]), tensor([6.]))

    ``max_norm=inf`` reads the norm and leaves the gradients as they are, as torch's:

    >>> clip_grad_norm_(model.parameters(), max_norm=float("inf"))
    tensor(6.5000)
    >>> model.weight.grad, model.bias.grad
    (tensor([[1.5000, 2.0000]]), tensor([6.]))

    Per-group limits (``None``: measure, do not clip):

    >>> model.weight.grad = torch.tensor([[3.0, 4.0]])
    >>> clip_grad_norm_(
    ...     None, {"w": 1.0, "b": None}, groups={"w": [model.weight], "b": [model.bias]}
    ... )
    {'w': tensor(5.), 'b': tensor(6.)}
    >>> model.weight.grad, model.bias.grad
    (tensor([[0.6000, 0.8000]]), tensor([6.]))
    """
    if scaler is not None or optimizer is not None:
        unscale_once(scaler, optimizer)
    if groups is not None:
        return clip_grad_norm_groups(
            parameters,
            max_norm,
            groups,
            norm_type,
            error_if_nonfinite,
            foreach,
            accumulate_dtype=accumulate_dtype,
            nonfinite=nonfinite,
            group=group,
        )
    return _clip_grad_norm(
        parameters,
        max_norm,
        norm_type,
        error_if_nonfinite,
        foreach,
        accumulate_dtype=accumulate_dtype,
        nonfinite=nonfinite,
        group=group,
        unclipped_at_inf=True,
    )


@torch.no_grad()
def _clip_grad_norm(
    parameters: Any,
    max_norm: Any,
    norm_type: Any,
    error_if_nonfinite: Any,
    foreach: Any,
    *,
    accumulate_dtype: Any,
    nonfinite: Any,
    group: Any,
    unclipped_at_inf: bool,
) -> torch.Tensor:
    """:func:`clip_grad_norm_`, with the choice for an infinite ``max_norm``.

    ``unclipped_at_inf=False`` keeps TF's NaN (:func:`keras_clipping`, as Keras).
    """
    each = _foreach(foreach)
    p = _norm_type(norm_type)
    policy = _policy(error_if_nonfinite, nonfinite)
    params = _tensors(parameters, "parameters", warn_empty=True)  # torch's warning
    c = _max_norm(max_norm)
    resolve_accumulate_dtype(namespace(torch.zeros(())), accumulate_dtype, [])  # no grad too
    grads = [q.grad for q in params if q.grad is not None]
    plain = _plain(grads)  # the common case: its own values, one device and dtype
    values = grads if plain is not None else [values_of(g) for g in grads]
    if not values and group is not None:  # this stage has no gradient: still joins the group
        return _join_group(p, accumulate_dtype, group)
    if not values:  # torch returns 0 too; on the parameters' device
        return torch.zeros((), device=params[0].device if params else None)
    norm = _total_norm(values, p, each, accumulate_dtype, group, name="parameters", plain=plain)
    if policy == "raise":
        _raise_nonfinite(norm, p)
    _scale_(values, c, norm, each, policy, unclipped_at_inf, plain=plain)
    return norm
