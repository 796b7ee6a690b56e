"""timm's ``adaptive_clip_grad`` (AGC) as an in-place drop-in over :mod:`anyclip.tree`.

Layer: public adapter; :mod:`anyclip.torch` re-exports the names in ``__all__``. The formula is
:func:`anyclip.tree.adaptive_clip` with ``layout="timm"``.
"""

from __future__ import annotations

from typing import Any

import torch

from anyclip import tree
from anyclip._kernels._dist import is_dtensor
from anyclip._keywords import hints_keywords
from anyclip.torch._common import Parameters, _tensors

__all__ = ["adaptive_clip_grad_"]


@hints_keywords
def adaptive_clip_grad_(
    parameters: Parameters,
    clip_factor: float = 0.01,
    eps: float = 1e-3,
    norm_type: float = 2.0,
    *,
    group: Any = None,
) -> None:
    """Adaptive gradient clipping in place, with timm's ``adaptive_clip_grad`` signature.

    For every parameter ``p`` with a gradient, per output unit (every axis but the first:
    torch's ``OI``, ``OIHW``; the whole tensor for a bias)::

        max_norm = clip_factor * maximum(norm(p), eps)
        p.grad = where(norm(g) < max_norm, g, g * (max_norm / maximum(norm(g), 1e-6)))

    with norms of order ``norm_type`` (:func:`anyclip.tree.adaptive_clip` with
    ``layout="timm"``). The gradient keeps its dtype and device; parameters without a
    gradient are skipped. Runs without a host sync, under ``torch.compile`` too.

    As timm's ``unitwise_norm`` (torch's ``Tensor.norm``), the unit norms of float16 and
    bfloat16 tensors are accumulated in float32 and rounded to the dtype once (a float16
    unit of norm 300 is not inf), and ``clip_factor`` multiplies their clamped parameter
    norms in float32, rounded once, as timm's ``.mul_(clip_factor)``; the rest of the
    formula is in the tensors' dtype: timm's bits.

    Parameters
    ----------
    parameters : Tensor or iterable of Tensors
        The parameters whose ``.grad`` is clipped (``model.parameters()``).
    clip_factor : float, optional
        The largest ratio of a unit's gradient norm to its parameter norm (``> 0``).
    eps : float, optional
        The floor on the parameter norm.
    norm_type : float, optional
        The order of the unit norms (2, 1, inf or any ``p > 0``).
    group : ProcessGroup, DeviceMesh or a sequence of them, optional
        The processes that hold the rest of every unit (each parameter split along its
        input axes, as row-wise tensor parallelism splits it): the unit norms are summed
        over them, one all-reduce per parameter (:func:`anyclip.tree.adaptive_clip`).

    Returns
    -------
    None
        As timm's.

    Raises
    ------
    ValueError
        If ``clip_factor <= 0`` or ``norm_type <= 0``.
    TypeError
        If ``parameters`` is not a tensor or an iterable of tensors, or a gradient is sparse.

    See Also
    --------
    timm.utils.agc.adaptive_clip_grad : The timm function this mirrors.

    Examples
    --------
    >>> import torch
    >>> from anyclip.torch import adaptive_clip_grad_
    >>> p = torch.nn.Parameter(torch.tensor([[3.0, 4.0], [0.0, 1.0]]))  # OI: two units
    >>> p.grad = torch.tensor([[0.3, 0.4], [0.0, 0.001]])
    >>> adaptive_clip_grad_([p], clip_factor=0.01)
    >>> p.grad
    tensor([[0.0300, 0.0400],
            [0.0000, 0.0010]])
    """
    factor: Any = clip_factor
    if isinstance(factor, (int, float)) and not factor > 0:
        msg = f"`clip_factor` must be > 0, got {clip_factor!r}; pass a positive ratio (0.01)"
        raise ValueError(msg)
    params = [p for p in _tensors(parameters, "parameters") if p.grad is not None]
    for i, p in enumerate(params):
        if p.grad is not None and p.grad.is_sparse:
            msg = (
                f"`parameters[{i}]` has a sparse gradient; AGC needs dense unit norms: pass "
                "the dense parameters only, or densify with p.grad = p.grad.to_dense()"
            )
            raise TypeError(msg)
    if not params:
        return
    with torch.no_grad():
        # one parameter at a time, each copied back at once (as timm's loop): the clipped
        # gradient of one parameter is alive at a time, not of all of them
        for p in params:
            g = p.grad.detach() if p.grad is not None else None
            if g is None:
                continue
            (n,) = tree.adaptive_clip(
                [g], [p.detach()], clip_factor, eps, layout="timm", norm_type=norm_type, group=group
            )
            if is_dtensor(g):
                n = _placed_like(n, g)
            g.copy_(n)


def _placed_like(n: Any, g: Any) -> Any:
    """The DTensor ``n`` with ``g``'s placements (a local re-slicing of a ``Replicate``).

    DTensor ops may give the clipped gradient another placement than the gradient's (a
    ``Shard`` over a dim of size 1 comes back ``Replicate``), which its in-place copy refuses.
    """
    if n.placements == g.placements:
        return n
    return n.redistribute(g.device_mesh, g.placements)
