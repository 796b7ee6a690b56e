"""TF's gradient rules for the few primitives where backends disagree with TF.

Layer: primitives of the core (the one place, with :mod:`anyclip._kernels`, that branches on
the backend).

Values come from the backend's own op; only the gradient rule is replaced, and only on the
backends with autodiff (torch autograd, JAX). Every other backend gets the plain op.

* ``maximum(x, y)``: TF sends the whole gradient to ``x`` where ``x >= y`` and to ``y`` elsewhere
  (a tie goes to the first operand; a NaN in ``x`` sends it to ``y``). torch and JAX split ties
  and route NaNs differently.
* ``minimum(x, y)``: likewise, to ``x`` where ``x <= y``.
* ``abs(x)``: TF's gradient is ``sign(x)``: 0 at 0 (JAX's is 1) and NaN at NaN (torch's is 0).
* ``rsqrt(x)``: TF's gradient is ``-0.5 * (r * r) * (r * dy)`` with ``r = rsqrt(x)`` (in that
  order, each product rounded in ``x``'s dtype), and exactly 0 where ``dy`` is 0
  (so ``rsqrt(0) = inf`` with no incoming gradient gives 0, not NaN). The chain rule through
  ``1 / sqrt(x)`` gives NaN there. On JAX this rule is reverse mode only (``custom_vjp``), so
  forward mode (``jax.jvp``) does not go through ``l2_normalize`` or ``clip_by_average_norm``.
* ``square(x)``: TF's ``Square`` has one gradient term, ``g * (2 x)``; ``x * x`` gives torch
  and JAX two, ``g * x`` each, which autograd adds to ``x``'s other gradient terms one at a
  time: ``(c + a) + a`` where TF's is ``c + 2 a`` (1 ULP off in most float32
  ``l2_normalize`` gradients). ``xp.square`` has TF's rule on both (one product by ``2 x``);
  only the libraries' own ops, no custom rule.
* a square TF flushes to zero (inside :class:`anyclip.flush_subnormals`): its value is 0, but
  TF's gradient of ``l2_loss(t)`` is ``t * g`` and that of ``square(t)`` is ``g * (2 t)`` at
  every element, those whose square or half it flushes included. anyclip leaves those
  elements out of its sums; :func:`square_gradient` is a 0-d zero to add to the sum that gives
  them that gradient back.

On JAX, the division by a norm and the square root take TF's gradient order too, as custom
JVPs next to their values in :mod:`anyclip._numerics` (``quotient``, ``sqrt``).

The arguments must share one dtype; shapes broadcast (on the custom-rule paths through the
backend's ``broadcast_arrays``, whose own gradient sums back to the original shapes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from anyclip._compat import is_dtensor, is_functorch_wrapped, library, torch_compiling
from anyclip._memo import Memo, remembered
from anyclip._numerics import constant, quotient, rsqrt_rounded_once, tf_rsqrt_grad, torch_rsqrt
from anyclip._typing import Namespace

__all__ = [
    "abs",
    "divided",
    "maximum",
    "minimum",
    "product",
    "records_gradient",
    "rsqrt",
    "square",
    "square_gradient",
    "uses",
]


def _torch_needs_grad(*tensors: Any) -> bool:
    import torch

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


_CACHE: Memo[dict[str, Any]] = Memo("anyclip._gradients.functions")


def _torch_functions() -> dict[str, Any]:
    return remembered(_CACHE, "torch", _make_torch_functions)


def _jax_functions() -> dict[str, Any]:
    return remembered(_CACHE, "jax", _make_jax_functions)


def _make_torch_functions() -> dict[str, Any]:
    from anyclip._torch_autograd import FUNCTIONS

    return FUNCTIONS


def _torch_function(name: str) -> Any:
    """The autograd Function ``name``; with forward mode, except while torch.compile traces."""
    fns = _torch_functions()
    return fns[name] if torch_compiling() else fns[name + "+jvp"]


def _make_jax_functions() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    # custom_jvp (not custom_vjp) so that forward mode (jax.jvp, jacfwd, hessians) works too;
    # reverse mode follows by transposing the linear tangent rule.
    def make(take_max: bool) -> Any:
        @jax.custom_jvp
        def select(x: Any, y: Any) -> Any:
            return jnp.maximum(x, y) if take_max else jnp.minimum(x, y)

        @select.defjvp
        def select_jvp(primals: Any, tangents: Any) -> Any:
            x, y = primals
            tx, ty = tangents
            mask = x >= y if take_max else x <= y
            return select(x, y), jnp.where(mask, tx, ty)

        return select

    @jax.custom_jvp
    def tf_abs(x: Any) -> Any:
        return jnp.abs(x)

    @tf_abs.defjvp
    def tf_abs_jvp(primals: Any, tangents: Any) -> Any:
        (x,) = primals
        (tx,) = tangents
        return jnp.abs(x), jnp.sign(x) * tx

    # TF's rsqrt rule looks at the cotangent's value (0 gives 0), which a JVP rule, linear in
    # the tangent, cannot express: this one is a custom_vjp (reverse mode only).
    @jax.custom_vjp
    def tf_rsqrt(x: Any) -> Any:
        return rsqrt_rounded_once(jnp, x)

    def rsqrt_fwd(x: Any) -> Any:
        r = rsqrt_rounded_once(jnp, x)
        return r, r

    def rsqrt_bwd(r: Any, dy: Any) -> Any:
        return (tf_rsqrt_grad(jnp, r, dy),)  # in r's dtype, each product rounded (as TF)

    tf_rsqrt.defvjp(rsqrt_fwd, rsqrt_bwd)

    return {"maximum": make(True), "minimum": make(False), "abs": tf_abs, "rsqrt": tf_rsqrt}


def _same_shape(xp: Namespace, x: Any, y: Any) -> tuple[Any, Any]:
    """Broadcast for the custom rules (the broadcast's own gradient sums back)."""
    if tuple(x.shape) == tuple(y.shape):
        return x, y
    bx, by = xp.broadcast_arrays(x, y)
    return bx, by


def _select(xp: Namespace, x: Any, y: Any, take_max: bool) -> Any:
    lib = library(xp)
    if lib == "torch":
        if _torch_needs_grad(x, y):
            return _torch_function("select").apply(*_same_shape(xp, x, y), take_max)
        import torch

        from anyclip import _torch_unsigned

        if x.dtype in _torch_unsigned.BAREBONES:  # uint16/32/64: no minimum/maximum kernels
            return _torch_unsigned.select(x, y, take_max)
        return torch.maximum(x, y) if take_max else torch.minimum(x, y)
    if lib == "jax":
        return _jax_functions()["maximum" if take_max else "minimum"](*_same_shape(xp, x, y))
    return xp.maximum(x, y) if take_max else xp.minimum(x, y)


def maximum(xp: Namespace, x: Any, y: Any) -> Any:
    """``maximum(x, y)`` with TF's gradient: to ``x`` where ``x >= y``, else to ``y``."""
    return _select(xp, x, y, True)


def minimum(xp: Namespace, x: Any, y: Any) -> Any:
    """``minimum(x, y)`` with TF's gradient: to ``x`` where ``x <= y``, else to ``y``."""
    return _select(xp, x, y, False)


def rsqrt(xp: Namespace, x: Any) -> Any:
    """``1 / sqrt(x)`` (TF's scalar rsqrt; :func:`torch_rsqrt` on torch) with TF's gradient."""
    lib = library(xp)
    if lib == "torch":
        if _torch_needs_grad(x):
            return _torch_function("rsqrt").apply(x)
        import torch

        return torch_rsqrt(torch, x)
    if lib == "jax":
        return _jax_functions()["rsqrt"](x)
    return rsqrt_rounded_once(xp, x)


def square(xp: Namespace, x: Any) -> Any:
    """``x * x`` (the same bits) with TF's ``Square`` gradient: one term, ``g * (2 x)``.

    Where TF squares with ``square`` (``l2_normalize``); TF's ``t * t`` (``clip_by_norm``,
    ``tf.norm``) has two gradient terms, as the product has everywhere.
    """
    return xp.square(x)


def abs(xp: Namespace, x: Any) -> Any:
    """``abs(x)`` with TF's gradient ``sign(x)`` (0 at 0) for real ``x``.

    Complex ``x``: C99's ``|z|`` (TF's, NumPy's and torch's), inf where either part is
    infinite, the other NaN included; JAX's ``abs`` gives NaN there.
    """
    if xp.isdtype(x.dtype, "complex floating"):
        out = xp.abs(x)
        if library(xp) == "jax":
            infinite = xp.logical_or(xp.isinf(xp.real(x)), xp.isinf(xp.imag(x)))
            out = xp.where(infinite, constant(xp, math.inf, out.dtype, out), out)
        return out
    lib = library(xp)
    if lib == "torch" and _torch_needs_grad(x):
        return _torch_function("abs").apply(x)
    if lib == "jax":
        return _jax_functions()["abs"](x)
    return xp.abs(x)


def _compiled_half_grad(xp: Namespace, x: Any, y: Any) -> bool:
    """Whether ``torch.compile`` traces a float16 or bfloat16 ``x op y`` recording a gradient."""
    return (
        getattr(x.dtype, "itemsize", 0) == 2
        and library(xp) == "torch"
        and torch_compiling()
        and x.dtype == y.dtype
        and x.dtype.is_floating_point
        and _torch_needs_grad(x, y)
    )


def product(xp: Namespace, x: Any, y: Any) -> Any:
    """``x * y``, its gradient rounded where eager torch's is also under ``torch.compile``.

    The plain product, but while ``torch.compile`` traces a float16 or bfloat16 product that
    records a gradient: there an autograd Function rounds each backward product to the dtype
    (Inductor computes a fused backward in float32). Eager calls get the one ``x * y``.
    """
    if x is not y and _compiled_half_grad(xp, x, y):  # (Dynamo refuses x twice)
        from anyclip._torch_rounding import FUNCTIONS

        return FUNCTIONS["product"].apply(x, y)
    return x * y


def divided(xp: Namespace, x: Any, y: Any) -> Any:
    """``x / y`` (:func:`~anyclip._numerics.quotient`), its gradient rounded as :func:`product`."""
    if _compiled_half_grad(xp, x, y):
        from anyclip._torch_rounding import FUNCTIONS

        return FUNCTIONS["quotient"].apply(x, y)
    return quotient(xp, x, y)


def uses(xp: Namespace, x: Any, n: int) -> tuple[Any, ...]:
    """``n`` uses of ``x``, their gradients added in order as eager torch adds them.

    ``(x,) * n``, but while ``torch.compile`` traces a float16 or bfloat16 ``x`` that records
    a gradient: there ``n`` copies whose gradients an autograd Function adds in the order
    given, each sum rounded to the dtype. Eager torch adds the gradients from a tensor's uses
    one at a time, in the order its backward reaches them, each sum rounded (and so does
    TF's ``AddN`` in half precision); Inductor added them in float32, rounded once (half of
    ``clip_by_norm``'s bfloat16 gradient 1 ULP from eager's). Eager calls add no operation.
    """
    if _compiled_half_grad(xp, x, x):
        from anyclip._torch_rounding import FUNCTIONS

        return tuple(FUNCTIONS["uses"].apply(x, n))
    return (x,) * n


def records_gradient(xp: Namespace, arrays: Sequence[Any]) -> bool:
    """Whether a gradient may be recorded through ``arrays`` (no host read).

    torch: autograd records through one of them, or a ``torch.func`` transform wraps one. JAX:
    always (a traced call may be differentiated; an eager one costs a few small steps more).
    Every other library: never.
    """
    lib = library(xp)
    if lib == "torch":
        return _torch_needs_grad(*arrays) or any(is_functorch_wrapped(a) for a in arrays)
    return lib == "jax"


def square_gradient(xp: Namespace, flushed: Any) -> Any:
    """A 0-d zero of ``flushed``'s dtype whose gradient in ``flushed`` is ``flushed * g``.

    ``g`` is the gradient reaching the zero. Added to a sum of halved squares that left the
    values of ``flushed`` out (their halves flushed to zero, as TF's), it gives them TF's
    gradient of ``l2_loss``, ``t * g`` (one product, as TF's); added twice to a whole sum of
    squares (:meth:`~anyclip._kernels.Kernels.unhalved`), TF's gradient of ``square``,
    ``g * (2 t)`` (the sum of the two products is exact). ``flushed`` holds finite values (0
    elsewhere), so the value is ``sum((f - f') * f')`` with ``f'`` the values without
    gradient: exactly 0.
    A DTensor's local shard (the sum it is added to is a plain tensor on each rank). Only on
    the libraries of :func:`records_gradient`.
    """
    if library(xp) == "jax":
        import jax

        held = jax.lax.stop_gradient(flushed)
    else:
        if is_dtensor(flushed):
            flushed = flushed.to_local()
        held = flushed.detach()
    return xp.sum((flushed - held) * held)
