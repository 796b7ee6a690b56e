"""Keras weight constraints applied to torch parameters, after each optimizer step as Keras does.

Layer: public adapter over :mod:`anyclip.constraints` (the constraints are any callables
``w -> w``; this module holds no formula). Keras 3 applies ``variable.constraint`` to each
variable that received a gradient, right after the optimizer's update
(``BaseOptimizer.apply``); :func:`constrain_after_step` does the same through
``optimizer.register_step_post_hook``, and :func:`constrain_` applies the constraints once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from anyclip._keywords import hints_keywords

__all__ = ["constrain_", "constrain_after_step"]

Constraint = Callable[[torch.Tensor], torch.Tensor]
Constraints = Mapping[Any, Constraint]


def _resolve(module_or_params: Any, constraints: Any) -> list[tuple[torch.Tensor, Constraint]]:
    """``(parameter, constraint)`` pairs; names are looked up in ``module_or_params``.

    The arguments are typed ``Any`` here: they come from users and are checked at run time.
    """
    if not isinstance(constraints, Mapping):
        msg = (
            "`constraints` must be a mapping {parameter name or parameter: constraint}, got "
            f"{type(constraints).__name__}; e.g. {{'fc.weight': MaxNorm(3, axis=1)}}"
        )
        raise TypeError(msg)
    if isinstance(module_or_params, torch.nn.Module):
        named = dict(module_or_params.named_parameters())
        known = {id(p) for p in named.values()}
    else:
        params = [module_or_params] if isinstance(module_or_params, torch.Tensor) else None
        params = list(module_or_params) if params is None else params
        named, known = {}, {id(p) for p in params}
    pairs: list[tuple[torch.Tensor, Constraint]] = []
    for key, constraint in constraints.items():
        if not callable(constraint):
            msg = (
                f"`constraints[{key!r}]` must be callable (a function w -> w such as "
                f"anyclip.constraints.MaxNorm(3)), got {type(constraint).__name__}"
            )
            raise TypeError(msg)
        if isinstance(key, str):
            if key not in named:
                where = "the module's parameters" if named else "a module (pass the module)"
                msg = (
                    f"`constraints` names {key!r}, which is not one of {where}; use a name "
                    "from `module.named_parameters()` or the parameter itself"
                )
                raise KeyError(msg)
            pairs.append((named[key], constraint))
        elif isinstance(key, torch.Tensor):
            if id(key) not in known:
                msg = (
                    "`constraints` has a parameter (as a key) that is not in "
                    "`module_or_params`; pass the module or the parameters it belongs to"
                )
                raise ValueError(msg)
            pairs.append((key, constraint))
        else:
            msg = f"`constraints` keys must be parameter names or tensors, got {key!r}"
            raise TypeError(msg)
    return pairs


def _apply(pairs: list[tuple[torch.Tensor, Constraint]], only_with_grad: bool) -> None:
    with torch.no_grad():
        for p, constraint in pairs:
            if only_with_grad and p.grad is None:
                continue
            p.copy_(constraint(p.detach()))


@hints_keywords
def constrain_(
    module_or_params: torch.nn.Module | Iterable[torch.Tensor] | torch.Tensor,
    constraints: Constraints,
) -> None:
    """Project parameters in place with their constraints, as Keras after an update.

    Parameters
    ----------
    module_or_params : torch.nn.Module, tensor or iterable of tensors
        Where the parameters come from: a module (keys may then be names from
        ``module.named_parameters()``) or the parameters themselves.
    constraints : mapping
        ``{name or parameter: constraint}``; a constraint is a callable ``w -> w`` such as
        :class:`anyclip.constraints.MaxNorm` or ``functools.partial(anyclip.constraints.
        max_norm, max_value=3, axis=1)``. Its ``axis`` is in torch's layout: ``Linear.weight``
        is ``(out, in)``, so Keras's ``Dense`` ``axis=0`` is ``axis=1`` here.

    Raises
    ------
    TypeError
        If ``constraints`` is not a mapping, a value is not callable or a key is neither a name
        nor a tensor.
    KeyError
        If a name is not one of the module's parameters.
    ValueError
        If a parameter key is not in ``module_or_params``.

    See Also
    --------
    keras.optimizers.Optimizer.apply : Where Keras applies ``variable.constraint``.
    constrain_after_step : The same after every optimizer step.

    Examples
    --------
    >>> import torch
    >>> from anyclip.constraints import MaxNorm
    >>> from anyclip.torch import constrain_
    >>> fc = torch.nn.Linear(2, 1, bias=False)
    >>> with torch.no_grad():
    ...     _ = fc.weight.copy_(torch.tensor([[3.0, 4.0]]))
    >>> constrain_(fc, {"weight": MaxNorm(1.0, axis=1)})
    >>> fc.weight
    Parameter containing:
    tensor([[0.6000, 0.8000]], requires_grad=True)
    """
    _apply(_resolve(module_or_params, constraints), only_with_grad=False)


@hints_keywords
def constrain_after_step(
    optimizer: torch.optim.Optimizer,
    module_or_params: torch.nn.Module | Iterable[torch.Tensor] | torch.Tensor,
    constraints: Constraints,
) -> Any:
    """Apply ``constraints`` after every ``optimizer.step()``, as Keras's optimizer does.

    The parameters (names are resolved now, once) are projected in place under
    ``torch.no_grad()`` by a step post-hook, each only when it has a gradient (Keras skips
    variables without one). A step the caller skips (``GradScaler`` on a non-finite gradient,
    as Keras's ``LossScaleOptimizer``) applies no constraint. Nothing is added to the
    optimizer's ``state_dict``.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        Any torch optimizer.
    module_or_params, constraints
        As in :func:`constrain_`.

    Returns
    -------
    torch.utils.hooks.RemovableHandle
        ``handle.remove()`` detaches the constraints.

    See Also
    --------
    keras.optimizers.Optimizer.apply : Where Keras applies ``variable.constraint``.
    constrain_ : One projection, now.

    Examples
    --------
    >>> import torch
    >>> from anyclip.constraints import NonNeg
    >>> from anyclip.torch import constrain_after_step
    >>> fc = torch.nn.Linear(2, 1, bias=False)
    >>> with torch.no_grad():
    ...     _ = fc.weight.copy_(torch.tensor([[0.5, 0.5]]))
    >>> opt = torch.optim.SGD(fc.parameters(), lr=1.0)
    >>> handle = constrain_after_step(opt, fc, {"weight": NonNeg()})
    >>> fc(torch.tensor([[1.0, -1.0]])).sum().backward()  # grad [1, -1]
    >>> opt.step()  # [-0.5, 1.5], then the constraint
    >>> fc.weight
    Parameter containing:
    tensor([[0.0000, 1.5000]], requires_grad=True)
    >>> handle.remove()
    """
    pairs = _resolve(module_or_params, constraints)

    def hook(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        _apply(pairs, only_with_grad=True)

    return optimizer.register_step_post_hook(hook)
