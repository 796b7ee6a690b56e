"""TF's gradient rules as torch autograd Functions (:mod:`anyclip._gradients`' torch side).

Layer: primitives of the core (and the differentiable all-reduce of ``_kernels._dist``).
Imported only when anyclip meets a torch tensor that needs a gradient (importing ``anyclip``
imports no framework). The classes are defined when this module is imported, not when a
function first needs them: Dynamo (``torch.compile``) cannot trace a class definition, so a
first call inside ``torch.compile(fullgraph=True)`` failed; an import it runs for real.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from anyclip._numerics import tf_rsqrt_grad, torch_rsqrt

__all__ = ["FUNCTIONS", "AllReduce"]


class _Select(torch.autograd.Function):
    """Elementwise binary max/min whose gradient goes to the side ``mask`` names."""

    #: torch.func.vmap batches forward and setup_context (per-sample gradients: vmap(grad))
    generate_vmap_rule = True

    @staticmethod
    def forward(x: Any, y: Any, take_max: bool) -> Any:
        return torch.maximum(x, y) if take_max else torch.minimum(x, y)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        x, y, take_max = inputs
        mask = x >= y if take_max else x <= y
        ctx.save_for_backward(mask)
        ctx.save_for_forward(mask)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (mask,) = ctx.saved_tensors
        zero = torch.zeros((), dtype=grad.dtype, device=grad.device)
        return torch.where(mask, grad, zero), torch.where(mask, zero, grad), None


class _SelectWithJvp(_Select):
    """The same, with forward mode (torch.compile cannot trace a custom ``jvp``)."""

    @staticmethod
    def jvp(ctx: Any, tx: Any, ty: Any, _: Any) -> Any:
        (mask,) = ctx.saved_tensors
        return torch.where(mask, tx, ty)


class _Rsqrt(torch.autograd.Function):
    """``rsqrt`` with TF's gradient: 0 where the incoming gradient is 0."""

    #: torch.func.vmap batches forward and setup_context (per-sample gradients: vmap(grad))
    generate_vmap_rule = True

    @staticmethod
    def forward(x: Any) -> Any:
        return torch_rsqrt(torch, x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (r,) = ctx.saved_tensors
        return tf_rsqrt_grad(torch, r, grad)


class _RsqrtWithJvp(_Rsqrt):
    @staticmethod
    def jvp(ctx: Any, tx: Any) -> Any:
        (r,) = ctx.saved_tensors
        return tf_rsqrt_grad(torch, r, tx)


class _Abs(torch.autograd.Function):
    """``abs`` with TF's gradient ``sign(x)`` (NaN at NaN)."""

    #: torch.func.vmap batches forward and setup_context (per-sample gradients: vmap(grad))
    generate_vmap_rule = True

    @staticmethod
    def forward(x: Any) -> Any:
        return torch.abs(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        (x,) = inputs
        sign = torch.where(torch.isnan(x), x, torch.sign(x))
        ctx.save_for_backward(sign)
        ctx.save_for_forward(sign)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (sign,) = ctx.saved_tensors
        return grad * sign


class _AbsWithJvp(_Abs):
    @staticmethod
    def jvp(ctx: Any, tx: Any) -> Any:
        (sign,) = ctx.saved_tensors
        return tx * sign


#: The Functions by name; ``+jvp``: with forward mode (torch.compile cannot trace a custom
#: ``jvp``).
FUNCTIONS: dict[str, Any] = {
    "abs": _Abs,
    "abs+jvp": _AbsWithJvp,
    "select": _Select,
    "rsqrt": _Rsqrt,
    "select+jvp": _SelectWithJvp,
    "rsqrt+jvp": _RsqrtWithJvp,
}


class AllReduce(torch.autograd.Function):
    """All-reduce forward (into a copy), identity backward: see ``_kernels._dist``."""

    @staticmethod
    def forward(ctx: Any, x: Any, op: Any, group: Any) -> Any:
        out = x.clone()
        dist.all_reduce(out, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad, None, None
