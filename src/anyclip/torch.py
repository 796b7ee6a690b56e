"""In-place gradient clipping for PyTorch models, with TF's formulas.

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
from anyclip._convert import as_operand, resolve_accumulate_dtype

__all__ = ["clip_grad_by_norm_", "clip_grad_norm_", "clip_grad_value_"]

Parameters = torch.Tensor | Iterable[torch.Tensor]


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
    accumulate_dtype: Any = "widest",
    nonfinite: str = "tf",
) -> torch.Tensor:
    """Scale all gradients in place so their global norm is at most ``clip_norm``, as TF.

    Every ``p.grad`` is multiplied by ``clip_norm * minimum(1 / norm, 1 / clip_norm)``
    (:func:`anyclip.clip_by_global_norm`'s factor), with no shortcut when nothing needs clipping.

    Parameters
    ----------
    parameters : Tensor or iterable of Tensor
        Parameters whose ``.grad`` is clipped; those without a gradient are skipped.
    clip_norm : float or Tensor
        The largest global norm (``max_norm`` in torch); a tensor holds one value (any shape,
        such as ``torch.tensor([1.0])``, as torch's own accepts).
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

    Returns
    -------
    Tensor
        The global norm of the gradients before clipping (0-d, on the first gradient's device).

    Raises
    ------
    ValueError
        If ``norm_type`` is not 2, ``nonfinite`` is not a policy, or a ``clip_norm`` tensor
        holds more than one value.
    FloatingPointError
        With ``nonfinite="raise"`` (or ``error_if_nonfinite``) and a non-finite norm.

    Notes
    -----
    Gradients are grouped by device: each device sums its own squares, the partial sums meet
    on the first gradient's device (a device-to-device copy, no host sync), and the factor is
    sent back. On one device the norm is computed exactly as :func:`anyclip.global_norm`.
    """
    if float(norm_type) != 2.0:
        msg = f"`norm_type` must be 2 (TF clips by the L2 norm), got {norm_type!r}"
        raise ValueError(msg)
    if error_if_nonfinite:
        nonfinite = "raise"
    if nonfinite not in _core.NONFINITE_POLICIES:
        msg = f"`nonfinite` must be one of {_core.NONFINITE_POLICIES}, got {nonfinite!r}"
        raise ValueError(msg)
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    parameters = list(parameters)
    grads = _grads(parameters)
    if not grads:  # torch returns 0 too; on the parameters' device
        return torch.zeros((), device=parameters[0].device if parameters else None)
    xp = namespace(grads[0])
    _clip._floating_list(xp, list(grads), mixed_ok=accumulate_dtype is not None)
    acc = resolve_accumulate_dtype(xp, accumulate_dtype, [g.dtype for g in grads])
    acc = grads[0].dtype if acc is None else acc
    home = grads[0].device
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for g in grads:
        by_device.setdefault(g.device, []).append(g)
    # gradients of another dtype are cast one block at a time, not all at once
    partials = [_core.upcast_half_squared_sum(xp, group, acc) for group in by_device.values()]
    partials = [p.to(home, non_blocking=True) for p in partials]
    norm = _core.norm_from_half_sums(xp, partials)
    if nonfinite == "raise" and not bool(torch.isfinite(norm)):  # host sync, by request
        msg = f"the global norm of the gradients is not finite ({float(norm)})"
        raise FloatingPointError(msg)
    c = as_operand(clip_norm, xp, norm, "clip_norm")
    if c.ndim:  # torch's own takes a one-element tensor, whatever its shape
        if c.numel() != 1:
            msg = f"`clip_norm` must hold one value, got a tensor of shape {tuple(c.shape)}"
            raise ValueError(msg)
        c = c.reshape(())
    scale = _core.global_scale(xp, c, norm, nonfinite)
    by_group: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for g in grads:
        by_group.setdefault((g.device, g.dtype), []).append(g)
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
