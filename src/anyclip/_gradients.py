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

The arguments must share one dtype; shapes broadcast (on the custom-rule paths through the
backend's ``broadcast_arrays``, whose own gradient sums back to the original shapes).
"""

from __future__ import annotations

from typing import Any

from anyclip._compat import library
from anyclip._typing import Namespace

__all__ = ["abs", "maximum", "minimum", "rsqrt"]


def _torch_needs_grad(*tensors: Any) -> bool:
    import torch

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


_CACHE: dict[str, dict[str, Any]] = {}


def _torch_functions() -> dict[str, Any]:
    if "torch" not in _CACHE:
        _CACHE["torch"] = _make_torch_functions()
    return _CACHE["torch"]


def _jax_functions() -> dict[str, Any]:
    if "jax" not in _CACHE:
        _CACHE["jax"] = _make_jax_functions()
    return _CACHE["jax"]


def _make_torch_functions() -> dict[str, Any]:
    from anyclip._torch_autograd import FUNCTIONS

    return FUNCTIONS


def _torch_function(name: str) -> Any:
    """The autograd Function ``name``; with forward mode, except while torch.compile traces."""
    import torch

    fns = _torch_functions()
    return fns[name] if torch.compiler.is_compiling() else fns[name + "+jvp"]


def _rsqrt_rounded_once(xp: Any, x: Any) -> Any:
    """``1 / sqrt(x)``; float16 and bfloat16 computed in float32 and rounded once, as TF's."""
    name = str(getattr(x.dtype, "name", x.dtype)).rsplit(".", 1)[-1]
    half = name in ("float16", "bfloat16")
    s = xp.sqrt(xp.astype(x, xp.float32) if half else x)
    r = 1 / s
    if r.dtype != s.dtype:
        # NumPy 1.x divides 1 by a float32 scalar (a 0-d input's sqrt) in float64; rounding
        # that to float32 gives the float32 quotient (53 >= 2 * 24 + 2 bits: no double rounding)
        r = xp.astype(r, s.dtype)
    return xp.astype(r, x.dtype) if half else r


def _tf_rsqrt_grad(mod: Any, r: Any, dy: Any) -> Any:
    """TF's RsqrtGrad, ``-0.5 * r**3 * dy`` in TF's order of operations; 0 where ``dy`` is 0.

    Eigen's ``scalar_rsqrt_gradient_op`` (its packet path, the one TF takes on arrays; the
    scalar path rounds the same products) is ``mul_no_nan(-0.5 * (r * r), mul_no_nan(r,
    dy))``: ``r * dy`` and ``r * r`` are rounded apart and then multiplied, each step in
    ``r``'s dtype (float16 and bfloat16 too). The order matters where l2_normalize's gradient
    cancels: ``-0.5 * dy * (r * r * r)`` left ``-6.1e-05`` where TF's gradient of a
    one-element float32 ``l2_normalize`` is exactly 0.
    """
    zero = mod.zeros_like(dy)
    r_dy = mod.where(dy == 0, zero, r * dy)
    return mod.where(r_dy == 0, zero, (-0.5 * (r * r)) * r_dy)


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
        return _rsqrt_rounded_once(jnp, x)

    def rsqrt_fwd(x: Any) -> Any:
        r = _rsqrt_rounded_once(jnp, x)
        return r, r

    def rsqrt_bwd(r: Any, dy: Any) -> Any:
        return (_tf_rsqrt_grad(jnp, r, dy),)  # in r's dtype, each product rounded (as TF)

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
    """``1 / sqrt(x)`` (TF's scalar rsqrt; ``torch.rsqrt`` on torch) with TF's gradient."""
    lib = library(xp)
    if lib == "torch":
        if _torch_needs_grad(x):
            return _torch_function("rsqrt").apply(x)
        import torch

        return torch.rsqrt(x)
    if lib == "jax":
        return _jax_functions()["rsqrt"](x)
    return _rsqrt_rounded_once(xp, x)


def abs(xp: Namespace, x: Any) -> Any:
    """``abs(x)`` with TF's gradient ``sign(x)`` (0 at 0) for real ``x``."""
    if xp.isdtype(x.dtype, "complex floating"):
        return xp.abs(x)
    lib = library(xp)
    if lib == "torch" and _torch_needs_grad(x):
        return _torch_function("abs").apply(x)
    if lib == "jax":
        return _jax_functions()["abs"](x)
    return xp.abs(x)
