"""Loss-scaler-aware clipping: unscale a ``torch.amp.GradScaler``'s gradients once per step.

Layer: public adapter (no formula): :func:`unscale_once` is ``scaler.unscale_(optimizer)``
that does nothing when this optimizer's gradients were already unscaled since the last
``scaler.update()``, where torch's raises; :func:`anyclip.torch.clip_grad_norm_`
(``scaler=``, ``optimizer=``) calls it before reading the gradients.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.amp.grad_scaler import OptState

__all__ = ["already_unscaled", "unscale_once"]


def unscale_once(scaler: Any, optimizer: Any) -> None:
    """``scaler.unscale_(optimizer)`` unless this step already unscaled ``optimizer``'s gradients.

    torch's ``GradScaler`` keeps a stage per optimizer (ready, unscaled, stepped) and raises
    on a second ``unscale_`` in one step; here a second call (gradient accumulation, a
    second clip for logging) is a no-op, so the gradients are divided by the scale exactly
    once. ``unscale_`` records whether any gradient is inf or NaN, on device, and
    ``scaler.step`` then skips the step, as it does after torch's own ``unscale_``.

    Raises
    ------
    TypeError
        If only one of ``scaler`` and ``optimizer`` is given, or they are of the wrong type.
    RuntimeError
        After ``scaler.step(optimizer)`` and before ``scaler.update()`` (torch's error).
    """
    if scaler is None or optimizer is None:
        given, other = ("scaler", "optimizer") if optimizer is None else ("optimizer", "scaler")
        msg = (
            f"`{given}` needs `{other}` too: the gradients to unscale are those of the "
            f"optimizer the scaler steps; pass scaler=scaler, optimizer=optimizer"
        )
        raise TypeError(msg)
    if not isinstance(scaler, torch.amp.GradScaler):
        msg = (
            "`scaler` must be a torch.amp.GradScaler (or torch.cuda.amp.GradScaler), got "
            f"{type(scaler).__module__}.{type(scaler).__qualname__}"
        )
        raise TypeError(msg)
    if not isinstance(optimizer, torch.optim.Optimizer):
        msg = f"`optimizer` must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        raise TypeError(msg)
    if not scaler.is_enabled():
        return
    if already_unscaled(scaler, optimizer):
        return
    scaler.unscale_(optimizer)


def already_unscaled(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``scaler.unscale_(optimizer)`` ran since the last ``scaler.update()``.

    The only place anyclip reads ``GradScaler``'s private state: ``_per_optimizer_states``, a
    dict from ``id(optimizer)`` to ``{"stage": OptState, ...}`` (torch 2.13, unchanged since
    torch 1.6), where ``OptState.UNSCALED`` means unscaled this step. Reading it does not
    create an entry (``unscale_`` and ``step`` do).

    Raises
    ------
    RuntimeError
        If the installed torch keeps this state differently (a torch release changed it):
        anyclip cannot tell, and unscaling twice would silently shrink the gradients.
    """
    states = getattr(scaler, "_per_optimizer_states", None)
    entry = states.get(id(optimizer)) if isinstance(states, dict) else None
    if states is None or (entry is not None and not isinstance(entry, dict)):
        msg = (
            f"torch {torch.__version__}'s GradScaler no longer keeps `_per_optimizer_states` "
            "as anyclip expects (a dict of {'stage': OptState, ...} per optimizer), so "
            "anyclip cannot tell whether this step's gradients were unscaled; call "
            "scaler.unscale_(optimizer) yourself and clip without scaler=, or use a torch "
            "version anyclip supports"
        )
        raise RuntimeError(msg)
    if entry is None:
        return False
    stage = entry.get("stage")
    if not isinstance(stage, OptState):
        msg = (
            f"torch {torch.__version__}'s GradScaler keeps an optimizer's stage as "
            f"{stage!r}, not a torch.amp.grad_scaler.OptState; anyclip cannot tell whether "
            "this step's gradients were unscaled; call scaler.unscale_(optimizer) yourself "
            "and clip without scaler="
        )
        raise RuntimeError(msg)
    return stage is OptState.UNSCALED
