"""Keras's optimizer clipping options (``clipnorm``, ``clipvalue``, ``global_clipnorm``) for torch.

Layer: adapter (public; :mod:`anyclip.torch` re-exports :func:`keras_clipping`). A step
pre-hook on a torch optimizer that clips as Keras's optimizer does before its update, with the
clippers of :mod:`anyclip.torch._clip_grad` and :mod:`anyclip.torch._clip_value`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from anyclip import _clip, _core
from anyclip._compat import namespace
from anyclip._kernels import FLUSH_GENERIC
from anyclip._keywords import hints_keywords
from anyclip._policy import keras_option
from anyclip._sparse import values_of
from anyclip._subnormals import flushing
from anyclip.torch._clip_value import clip_grad_by_norm_, clip_grad_by_value_
from anyclip.torch._common import _local
from anyclip.torch._scale import _mul_
from anyclip.torch._scheduled import scheduled_keras_clipping

__all__ = [
    "keras_clipping",
]


@hints_keywords
def keras_clipping(
    optimizer: torch.optim.Optimizer,
    *,
    clipnorm: float | Callable[[torch.Tensor], Any] | None = None,
    clipvalue: float | None = None,
    global_clipnorm: float | Callable[[torch.Tensor], Any] | None = None,
) -> RemovableHandle:
    """Give a torch optimizer Keras's ``clipnorm``, ``clipvalue`` or ``global_clipnorm``.

    Registers a step pre-hook that clips the gradients of every parameter of ``optimizer``
    (all its parameter groups) just before each ``optimizer.step()``, as
    ``keras.optimizers.Optimizer`` (Keras 3, TF 2.21) clips them before its update:

    * ``clipnorm``: each gradient on its own, ``tf.clip_by_norm(g, clipnorm)``;
    * ``global_clipnorm``: all together, with Keras's own ``clip_by_global_norm``
      (``keras/src/optimizers/base_optimizer.py``), not ``tf.clip_by_global_norm``: the norm
      ``sqrt(sum(stack([sum(square(g))])))`` (no halved squares: float16 gradients under
      about 3.5e-4 still count) and the factor ``c * minimum(1.0 / norm, 1.0 / c)`` with
      ``1.0 / c`` computed in Python and rounded to the gradients' dtype, so a step that
      needs no clipping is multiplied by ``float32(c) * float32(1 / c)`` (0.99999994 for
      ``c = 2.3``), as Keras's; a scheduled tensor value is divided in the norm's dtype;
    * ``clipvalue``: each element, ``clip(g, -clipvalue, clipvalue)``.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        Any torch optimizer (SGD, Adam, AdamW...).
    clipnorm, clipvalue, global_clipnorm : float, optional
        Keras's options, with its meaning: at most one may be set, and one that is 0 or
        negative clips nothing. ``clipnorm=inf`` or ``global_clipnorm=inf`` makes every
        gradient NaN, as Keras 3 (TF 2.21) does (TF's factor ``inf * 0``), unlike
        :func:`clip_grad_norm_` with ``max_norm=inf``, which follows torch.
        ``clipnorm`` and ``global_clipnorm`` may be schedules: a callable of the step count
        (a 0-d int64 tensor on the parameters' device, 0 at the first step) returning the
        value before each step: a tensor, with Keras's rule applied on device (0 or less
        clips nothing, tested on the value before its cast to the gradients' dtype) and no
        host sync; or a Python number, which clips exactly as the option given that number.

    Returns
    -------
    torch.utils.hooks.RemovableHandle
        ``handle.remove()`` stops the clipping. The optimizer's ``state_dict`` is unchanged
        (the hook holds no state); with a schedule it holds the step count under
        ``"anyclip.keras_clipping.count"``, restored by ``optimizer.load_state_dict``.

    Raises
    ------
    ValueError
        If more than one option is set (Keras's message).
    TypeError
        If ``optimizer`` is not a torch optimizer or an option is not a number.

    Examples
    --------
    >>> import torch
    >>> import anyclip.torch
    >>> model = torch.nn.Linear(2, 1, bias=False)
    >>> opt = torch.optim.SGD(model.parameters(), lr=1.0)
    >>> handle = anyclip.torch.keras_clipping(opt, clipnorm=1.0)  # Keras: SGD(clipnorm=1.0)
    >>> with torch.no_grad():
    ...     _ = model.weight.zero_()
    >>> model.weight.grad = torch.tensor([[3.0, 4.0]])
    >>> opt.step()
    >>> model.weight
    Parameter containing:
    tensor([[-0.6000, -0.8000]], requires_grad=True)
    >>> handle.remove()

    A threshold warming up over the first 100 steps, evaluated on device:

    >>> handle = anyclip.torch.keras_clipping(
    ...     opt, global_clipnorm=lambda step: torch.clamp(step / 100, max=1.0)
    ... )
    >>> handle.remove()
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        msg = f"`optimizer` must be a torch.optim.Optimizer, got {type(optimizer).__name__}"  # type: ignore[unreachable]
        raise TypeError(msg)
    scheduled = [
        (name, v)
        for name, v in (("clipnorm", clipnorm), ("global_clipnorm", global_clipnorm))
        if callable(v)
    ]
    if scheduled:  # Keras's checks (one option only) with a number in the schedule's place
        options = (clipnorm, clipvalue, global_clipnorm)
        keras_option(*(1.0 if callable(v) else v for v in options), shown=options)
        return scheduled_keras_clipping(optimizer, *scheduled[0], _clip_params)
    option = keras_option(clipnorm, clipvalue, global_clipnorm)

    def hook(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if option is None:
            return
        params = [p for group in opt.param_groups for p in group["params"]]
        _clip_params(params, *option)

    return optimizer.register_step_pre_hook(hook)


def _clip_params(params: list[torch.Tensor], name: str, value: float) -> None:
    """Clip the gradients of ``params`` in place with Keras's option ``name`` at ``value``.

    ``value`` a positive Python number (Keras applies an option only then): Keras's clip at
    it, the number converted to each gradient's dtype as Keras converts it.
    """
    if name == "clipnorm":
        clip_grad_by_norm_(params, value)
    elif name == "global_clipnorm":
        _keras_clip_global_(params, value)
    else:
        clip_grad_by_value_(params, -value, value)


@torch.no_grad()
def _keras_clip_global_(params: list[torch.Tensor], clip_norm: float) -> None:
    """Keras 3's ``clip_by_global_norm`` of the parameters' gradients, in place.

    The norm of :func:`anyclip._clip.keras_global_norm`, the factor of
    :func:`anyclip._core.keras_global_scale` (Keras's ``1.0 / clip_norm`` in Python, rounded
    to the norm's dtype; ``inf`` gives NaN), then every gradient multiplied by it.
    """
    values = [values_of(p.grad) for p in params if p.grad is not None]
    if not values:
        return
    norm = _local(_clip.keras_global_norm(values))
    k = FLUSH_GENERIC if flushing() else None
    scale = _core.keras_global_scale(namespace(norm), clip_norm, norm, kernels=k)
    _mul_(values, scale, ftz=k is not None)
