"""Scheduled thresholds for :func:`anyclip.torch.keras_clipping` (a callable of the step count).

Layer: public adapter over :mod:`anyclip._schedule` (Keras's rule at a value known on device)
and the clippers of :mod:`anyclip._clip` and :mod:`anyclip._clip_tensor`; no formula here. The
step count is a 0-d int64 tensor on the parameters' device, incremented in place after each
clip (no host sync), and saved in the optimizer's ``state_dict`` (an optimizer state-dict
hook), so a checkpoint of the optimizer resumes the schedule where it stopped.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from anyclip import _clip, _clip_tensor, _schedule
from anyclip._compat import namespace
from anyclip._kernels import FLUSH_GENERIC
from anyclip._sparse import values_of
from anyclip._subnormals import flushing
from anyclip.torch._common import _local
from anyclip.torch._scale import _mul_

__all__ = ["STATE_KEY", "scheduled_keras_clipping"]

#: The entry of the optimizer's ``state_dict`` that holds the step count.
STATE_KEY = "anyclip.keras_clipping.count"


class _Handles(RemovableHandle):
    """One handle for several hooks: ``remove()`` removes them all."""

    def __init__(self, handles: list[RemovableHandle]) -> None:
        self._own: OrderedDict[int, Any] = OrderedDict()
        super().__init__(self._own)
        self.handles = handles

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def scheduled_keras_clipping(
    optimizer: torch.optim.Optimizer,
    name: str,
    schedule: Callable[[torch.Tensor], Any],
    constant: Callable[[list[torch.Tensor], str, float], None],
) -> RemovableHandle:
    """:func:`anyclip.torch.keras_clipping` with ``clipnorm`` or ``global_clipnorm`` scheduled.

    Before each ``optimizer.step()`` the value is ``schedule(count)``: a tensor, with Keras's
    rule applied on device (0 or less, or NaN, clips nothing; the value is tested before it
    is cast to the gradients' dtype), or a Python number, which clips exactly as Keras's
    option at that value (``constant(params, name, value)``, the clip of an option given as
    a number; the rule is then tested on the host number: no device read).
    """
    held: list[torch.Tensor] = []

    def count(device: torch.device) -> torch.Tensor:
        if not held:
            held.append(torch.zeros((), dtype=torch.int64, device=device))
        return held[0]

    def first_device(opt: torch.optim.Optimizer) -> torch.device:
        for group in opt.param_groups:
            for p in group["params"]:
                return torch.device(p.device)
        return torch.device("cpu")

    @torch.no_grad()
    def hook(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        n = count(first_device(opt))
        c = schedule(n)
        if isinstance(c, (float, int)) and not isinstance(c, bool):
            # a number: Keras's option at that value (a float32 tensor of it would round it
            # first, and test the rule on the rounded value: 1e-30 clips in Keras)
            if c > 0:
                params = [p for group in opt.param_groups for p in group["params"]]
                constant(params, name, float(c))
            n.add_(1)
            return
        c = torch.as_tensor(c, device=n.device)
        grads = [p.grad for group in opt.param_groups for p in group["params"]]
        values = [values_of(g) for g in grads if g is not None]
        if values:
            xp = namespace(c)
            if name == "clipnorm":
                for v in values:
                    v.copy_(_schedule.keras_gate(xp, c, _clip_tensor.clip_by_norm(v, c), v))
            else:
                norm = _local(_clip.keras_global_norm(values))  # Keras's, not TF's
                k = FLUSH_GENERIC if flushing() else None
                scale = _schedule.keras_global_scale(xp, c.to(norm.device), norm, k)
                if k is None:
                    _mul_(values, scale)
                else:
                    _mul_(values, scale, ftz=True)
        n.add_(1)

    def save(opt: torch.optim.Optimizer, state_dict: dict[str, Any]) -> None:
        state_dict[STATE_KEY] = count(first_device(opt)).clone()

    def load(opt: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
        saved = state_dict.pop(STATE_KEY, None)  # a copy of the caller's dict (torch's)
        if saved is not None:
            n = count(first_device(opt))
            n.copy_(torch.as_tensor(saved).to(n.device))
        return state_dict

    return _Handles(
        [
            optimizer.register_step_pre_hook(hook),
            optimizer.register_state_dict_post_hook(save),
            optimizer.register_load_state_dict_pre_hook(load),
        ]
    )
