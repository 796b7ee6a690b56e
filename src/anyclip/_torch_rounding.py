"""Rounding to float16 and bfloat16 under ``torch.compile``, forward and backward.

Layer: foundation (torch only; :func:`anyclip._numerics.torch_rounded` and
:mod:`anyclip._gradients` pick these). Imported only while ``torch.compile`` traces a
half-precision tensor (importing ``anyclip`` imports no framework); an import inside a traced
function Dynamo runs for real, so the classes are defined at import time, never in a trace.

Inductor computes a chain of fused float16 or bfloat16 operations in float32 and rounds only
what it stores, where eager torch and TF round the result of every operation, forward and
backward. A bit view through ``int16`` with a no-op ``& -1`` (:func:`bit_rounded`) is kept by
Inductor, which rounds the value to view its bits. The autograd Functions here put that
rounding into the backward too: at each forward rounding point (:class:`Rounded`), after
each step of a product's and a quotient's gradient (:class:`Product`, :class:`Quotient`) and
after each addition of the gradients that reach a tensor from its several uses
(:class:`Uses`), where eager's backward rounds.
"""

from __future__ import annotations

from typing import Any

import torch

from anyclip._compat import HALF_PRECISION, dtype_name

__all__ = ["FUNCTIONS", "Product", "Quotient", "Rounded", "Uses", "bit_rounded"]


def bit_rounded(x: Any) -> Any:
    """The float16 or bfloat16 torch tensor ``x`` viewed as ``int16``, ``& -1``, viewed back.

    The value of ``x``; under ``torch.compile`` Inductor rounds it to the dtype to view its
    bits. Any other dtype (a float32 gradient) is returned as it is.
    """
    if dtype_name(x.dtype) not in HALF_PRECISION:
        return x
    return (x.view(torch.int16) & -1).view(x.dtype)


class Rounded(torch.autograd.Function):
    """``x`` rounded to its half-precision dtype, and its incoming gradient rounded too.

    Only while ``torch.compile`` traces (:func:`anyclip._numerics.torch_rounded`): the
    forward is the bit view that Inductor keeps, and so is the backward, so that the
    gradient flowing back through a rounding point is rounded where eager torch's is (eager
    rounds the result of every backward operation; Inductor fuses them in float32).
    """

    #: torch.func.vmap batches forward and setup_context (per-sample gradients: vmap(grad))
    generate_vmap_rule = True

    @staticmethod
    def forward(x: Any) -> Any:
        return bit_rounded(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return bit_rounded(grad)


def _summed_to(g: Any, like: Any) -> Any:
    """``g`` summed over the axes ``like`` was broadcast along (autograd's ``sum_to``), rounded."""
    if tuple(g.shape) == tuple(like.shape):
        return g
    return bit_rounded(g.sum_to_size(like.shape))


class Product(torch.autograd.Function):
    """``x * y`` of half-precision tensors, each backward product rounded as eager's.

    Only while ``torch.compile`` traces (:func:`anyclip._gradients.product`): Inductor fuses
    a backward formula into its neighbours in float32, so that ``g * y`` reached the next
    operation (or a sum over broadcast axes) unrounded, where eager torch and TF round it.
    The incoming gradient is rounded first (a sum of gradients from several uses, which
    Inductor adds in float32 too).
    """

    #: torch.func.vmap batches forward and setup_context (per-sample gradients: vmap(grad))
    generate_vmap_rule = True

    @staticmethod
    def forward(x: Any, y: Any) -> Any:
        return bit_rounded(x * y)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x, y = ctx.saved_tensors
        g = bit_rounded(grad)
        gx = _summed_to(bit_rounded(g * y), x) if ctx.needs_input_grad[0] else None
        gy = _summed_to(bit_rounded(g * x), y) if ctx.needs_input_grad[1] else None
        return gx, gy


class Quotient(torch.autograd.Function):
    """``x / y`` of half-precision tensors, each backward step rounded as eager's.

    As :class:`Product`: eager torch's gradient in ``y`` is ``-g * ((x / y) / y)`` (TF's
    ``g * ((-x / y) / y)``, the same roundings), three rounded operations that Inductor fused
    in float32 with the sum over ``y``'s broadcast axes.
    """

    #: torch.func.vmap batches forward and setup_context (per-sample gradients: vmap(grad))
    generate_vmap_rule = True

    @staticmethod
    def forward(x: Any, y: Any) -> Any:
        return bit_rounded(x / y)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        x, y = inputs
        ctx.save_for_backward(x, y, output)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x, y, q = ctx.saved_tensors
        g = bit_rounded(grad)
        gx = _summed_to(bit_rounded(g / y), x) if ctx.needs_input_grad[0] else None
        gy = None
        if ctx.needs_input_grad[1]:
            gy = _summed_to(bit_rounded(-g * bit_rounded(q / y)), y)
        return gx, gy


class Uses(torch.autograd.Function):
    """``n`` uses of ``x`` whose gradients are added in order, each sum rounded as eager's.

    Only while ``torch.compile`` traces (:func:`anyclip._gradients.uses`): autograd adds the
    gradients that reach a tensor from its several uses, and Inductor fuses those additions
    in float32 (``c + g + g`` rounded once, where eager rounds ``c + g`` first).
    """

    #: torch.func.vmap batches forward and setup_context (per-sample gradients: vmap(grad))
    generate_vmap_rule = True

    @staticmethod
    def forward(x: Any, n: int) -> Any:
        return tuple(bit_rounded(x) for _ in range(n))

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        total = None
        for g in grads:
            if g is None:
                continue
            g = bit_rounded(g)
            total = g if total is None else bit_rounded(total + g)
        return total, None


#: The Functions by name (``apply`` is untyped in torch)
FUNCTIONS: dict[str, Any] = {
    "rounded": Rounded,
    "product": Product,
    "quotient": Quotient,
    "uses": Uses,
}
