"""What torch's optimizers give their lazily created state, for :class:`SkipOnSpike`.

Layer: torch adapter helper (torch-specific by nature: it knows torch's optimizers). A step
that :func:`anyclip.torch.skip_on_spike` skips still runs the wrapped optimizer, which creates
its state for a parameter's first gradient. For the skipped step to leave the optimizer as if
it had not stepped, that state must then behave as never created: at the next step the
optimizer's update on it must equal its update from a fresh start. Two cases:

- the state torch initialises to fixed values (zeros, and the few below): reset to those
  values, the next update from them is the fresh one (:func:`initial_value`);
- SGD's momentum buffer, which torch initialises to the first gradient itself (no fixed value
  gives the fresh update when ``dampening != 0``): :func:`needs_fresh_step` flags the group,
  and :func:`fresh_sgd_step` recomputes the fresh update with torch's own functional SGD, to
  be selected on the device where the buffer was never really created.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["fresh_sgd_step", "initial_value", "needs_fresh_step"]


def _lr(group: dict[str, Any]) -> Any:
    lr = group["lr"]
    return lr.detach().clone() if isinstance(lr, torch.Tensor) else lr


def initial_value(optimizer: torch.optim.Optimizer, group: dict[str, Any], key: str, p: Any) -> Any:
    """The value torch gives ``state[key]`` when it creates it (a number or a 0-d tensor).

    As torch 2.x's ``_init_group`` methods do: NAdam's ``mu_product`` 1; Rprop's
    ``step_size`` the learning rate (``complex(lr, lr)`` for complex parameters); ASGD's
    ``eta`` the learning rate and ``mu`` 1; Adagrad's ``sum`` its
    ``initial_accumulator_value``. Every other state tensor of torch's optimizers starts at 0
    (and so, as an assumption, does that of any other optimizer).
    """
    if isinstance(optimizer, torch.optim.NAdam) and key == "mu_product":
        return 1.0
    if isinstance(optimizer, torch.optim.ASGD):
        if key == "eta":
            return _lr(group)
        if key == "mu":
            return 1.0
    if isinstance(optimizer, torch.optim.Rprop) and key == "step_size":
        lr = _lr(group)
        if torch.is_complex(p):
            return torch.complex(torch.as_tensor(lr), torch.as_tensor(lr))
        return lr
    if isinstance(optimizer, torch.optim.Adagrad) and key == "sum":
        value = optimizer.defaults["initial_accumulator_value"]
        return complex(value, value) if torch.is_complex(p) else value
    return 0


def reset(v: torch.Tensor, where: torch.Tensor, value: Any) -> None:
    """``v`` set to ``value`` where ``where`` (in place, no host read)."""
    if isinstance(value, torch.Tensor):
        torch.where(where, value.to(device=v.device, dtype=v.dtype), v, out=v)
    else:
        v.masked_fill_(where, value)


def needs_fresh_step(optimizer: torch.optim.Optimizer, group: dict[str, Any]) -> bool:
    """SGD with momentum and ``dampening != 0``: its first update is not one from zeros."""
    return (
        isinstance(optimizer, torch.optim.SGD)
        and group.get("momentum", 0) != 0
        and group.get("dampening", 0) != 0
    )


def fresh_sgd_step(
    group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
) -> list[torch.Tensor]:
    """SGD's update from a fresh start, done by torch's functional SGD on ``params`` in place.

    Returns the momentum buffers it created (each the first gradient, as torch's SGD makes
    them).
    """
    from torch.optim.sgd import sgd

    buffers: list[torch.Tensor | None] = [None] * len(params)
    sgd(
        params,
        grads,
        buffers,
        has_sparse_grad=any(g.is_sparse for g in grads),
        foreach=group.get("foreach"),
        fused=group.get("fused"),
        weight_decay=group["weight_decay"],
        momentum=group["momentum"],
        lr=group["lr"],
        dampening=group["dampening"],
        nesterov=group["nesterov"],
        maximize=group["maximize"],
    )
    return [b for b in buffers if b is not None]
