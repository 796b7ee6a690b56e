"""In-place gradient clipping for PyTorch models, with TF's formulas.

Layer: public adapter over the eight functions (the norm is :func:`anyclip.global_norm`'s).

Drop-in replacements for ``torch.nn.utils.clip_grad_norm_`` and ``clip_grad_value_`` (and a
per-parameter ``clip_grad_by_norm_`` that torch lacks) that give TF's numbers: they work on
``p.grad`` in place, skip parameters without a gradient, and return the global norm as a tensor
(no ``.item()``, so no host sync).

Importing this module imports torch; ``import anyclip`` alone does not.

>>> import torch
>>> from anyclip.torch import clip_grad_norm_
>>> p = torch.nn.Parameter(torch.zeros(2))
>>> p.grad = torch.tensor([3.0, 4.0])
>>> clip_grad_norm_([p], 1.0)
tensor(5.)
>>> p.grad
tensor([0.6000, 0.8000])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from anyclip import _clip, _core
from anyclip._compat import namespace
from anyclip._kernels._dist import is_dtensor
from anyclip._policy import as_operand, check_nonfinite
from anyclip._typing import DTypeLike, Nonfinite

__all__ = ["clip_grad_by_norm_", "clip_grad_norm_", "clip_grad_value_"]

Parameters = torch.Tensor | Iterable[torch.Tensor]


def _local(x: Any) -> Any:
    """A DTensor's local tensor (its shard, sharing storage); anything else unchanged."""
    return x.to_local() if is_dtensor(x) else x


def _grads(parameters: Parameters) -> list[torch.Tensor]:
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


@torch.no_grad()
def clip_grad_norm_(
    parameters: Parameters,
    clip_norm: float | torch.Tensor,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: Any = None,
) -> torch.Tensor:
    """Scale all gradients in place so their global norm is at most ``clip_norm``, as TF.

    Every ``p.grad`` is multiplied by ``clip_norm * minimum(1 / norm, 1 / clip_norm)``
    (:func:`anyclip.clip_by_global_norm`'s factor), with no shortcut when nothing needs clipping.

    Parameters
    ----------
    parameters : Tensor or iterable of Tensor
        Parameters whose ``.grad`` is clipped; those without a gradient are skipped.
    clip_norm : float or Tensor
        The largest global norm (``max_norm`` in torch).
    norm_type : float, optional
        Only 2 (TF clips by the L2 norm); accepted so torch calls run unchanged.
    error_if_nonfinite : bool, optional
        torch's flag: ``True`` is ``nonfinite="raise"``.
    foreach : bool, optional
        Accepted for compatibility and ignored.
    accumulate_dtype : dtype, str, "widest" or None, optional
        The dtype the norm is accumulated in (default: the widest gradient dtype). ``None``:
        TF's rule, one dtype only.
    nonfinite : {"tf", "torch", "skip", "raise"}, optional
        What an inf or NaN global norm does (see :func:`anyclip.clip_by_global_norm`).
        ``"tf"`` (default) makes every gradient NaN; ``"torch"`` matches torch's own result.
    group : ProcessGroup, DeviceMesh or sequence of them, optional
        The processes whose gradients form the global norm with these ones (pipeline stages,
        expert groups): one all-reduce of a scalar over each. Sharded gradients (``DTensor``,
        FSDP2, tensor parallel) need none. Every process of the group must call.

    Returns
    -------
    Tensor
        The global norm of the gradients before clipping (0-d, on the first gradient's device;
        a ``Replicate`` DTensor, equal on every rank, for DTensor gradients).

    Raises
    ------
    ValueError
        If ``norm_type`` is not 2, or ``nonfinite`` is not a policy.
    FloatingPointError
        With ``nonfinite="raise"`` (or ``error_if_nonfinite``) and a non-finite norm.

    Notes
    -----
    The norm is :func:`anyclip.global_norm`'s: gradients on several devices are grouped by
    device, each device sums its own squares, and the partial sums meet on the first
    gradient's device (a device-to-device copy, no host sync); the factor is sent back.
    DTensor gradients are scaled shard by shard in place: no gather, and the only
    communication is the all-reduce of the 0-d partial sum.
    """
    if float(norm_type) != 2.0:
        msg = f"`norm_type` must be 2 (TF clips by the L2 norm), got {norm_type!r}"
        raise ValueError(msg)
    policy = "raise" if error_if_nonfinite else check_nonfinite(nonfinite)
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    parameters = list(parameters)
    grads = _grads(parameters)
    if not grads and group is not None:  # this stage has no gradient: still joins the group
        return _clip.global_norm([], accumulate_dtype=accumulate_dtype, group=group)
    if not grads:  # torch returns 0 too; on the parameters' device
        return torch.zeros((), device=parameters[0].device if parameters else None)
    norm = _clip.global_norm(grads, accumulate_dtype=accumulate_dtype, group=group)
    value = _local(norm)
    if policy == "raise" and not bool(torch.isfinite(value)):  # host sync, by request
        msg = f"the global norm of the gradients is not finite ({float(value)})"
        raise FloatingPointError(msg)
    xp = namespace(value)
    c = as_operand(_local(clip_norm), xp, value, "clip_norm")
    scale = _core.global_scale(xp, c, value, policy)
    by_group: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for g in grads:
        local = _local(g)  # a DTensor's shard, scaled in place: placements unchanged
        by_group.setdefault((local.device, local.dtype), []).append(local)
    for (device, dtype), group in by_group.items():
        torch._foreach_mul_(group, scale.to(device=device, dtype=dtype, non_blocking=True))
    return norm


@torch.no_grad()
def clip_grad_value_(
    parameters: Parameters,
    clip_value_min: float | torch.Tensor,
    clip_value_max: float | torch.Tensor,
) -> None:
    """Clip every ``p.grad`` in place to ``[clip_value_min, clip_value_max]``, as TF.

    :func:`anyclip.clip_by_value` on each gradient: the upper bound first, so the lower bound
    wins when ``clip_value_min > clip_value_max``; NaN stays NaN.
    """
    for g in _grads(parameters):
        g.copy_(_clip.clip_by_value(g, clip_value_min, clip_value_max))


@torch.no_grad()
def clip_grad_by_norm_(
    parameters: Parameters,
    clip_norm: float | torch.Tensor,
    axes: Any = None,
    *,
    accumulate_dtype: Any = None,
) -> None:
    """Clip every ``p.grad`` in place to norm ``clip_norm`` over ``axes``, each on its own.

    :func:`anyclip.clip_by_norm` on each gradient (TF has no list version of it).
    """
    for g in _grads(parameters):
        g.copy_(_clip.clip_by_norm(g, clip_norm, axes, accumulate_dtype=accumulate_dtype))
