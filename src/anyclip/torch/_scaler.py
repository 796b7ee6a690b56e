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

__all__ = ["unscale_once"]


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
    # GradScaler's per-optimizer stage (no public accessor): UNSCALED means unscale_ ran
    # since the last update()
    if scaler._per_optimizer_states[id(optimizer)]["stage"] is OptState.UNSCALED:
        return
    scaler.unscale_(optimizer)
