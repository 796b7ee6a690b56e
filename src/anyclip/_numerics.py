"""Numerics shared by the core and the kernels: rounding, constants and warnings.

Layer: helpers below the core. These are facts about arithmetic that every formula needs,
kept apart from :mod:`anyclip._compat` (which only knows namespaces, devices and libraries):
TF's sums (bfloat16 in float32, one pass over several JAX axes), complex numbers built from
their parts, the correctly rounded square root, the cache of 0-d constants, NumPy's warning
guard, the float overflow threshold, NumPy scalars turned back into 0-d arrays and TF's cast of
a float to an integer dtype (NaN, inf and out-of-range values included), and TF's rounding
of ``rsqrt`` and of its gradient (which the gradient rules of :mod:`anyclip._gradients` and
its torch Functions in :mod:`anyclip._torch_autograd` share).
"""

from __future__ import annotations

import contextlib
import math
import struct
from collections.abc import Callable
from typing import Any

from anyclip._compat import (
    HALF_PRECISION,
    device,
    dtype_name,
    is_dtensor,
    is_numpy_scalar,
    library,
    may_be_sharded,
    torch_compiling,
)
from anyclip._memo import Memo, memo_by_dtype, remembered
from anyclip._typing import Namespace

__all__ = [
    "as_array",
    "complex_from_parts",
    "constant",
    "float_overflow_threshold",
    "lerp",
    "quiet",
    "quotient",
    "reduce_sum",
    "rounded_here",
    "rsqrt_rounded_once",
    "sqrt",
    "tf_cast",
    "torch_faking",
    "torch_readable",
    "tf_float16",
    "tf_packet_head",
    "tf_rsqrt_grad",
    "rsqrt_in_two_steps",
    "torch_rounded",
    "torch_rsqrt",
]

#: 0-d constants made from Python scalars, by (value, sign, type, dtype, device). They are
#: internal operands only (never returned to a caller), so sharing them is safe.
_CONSTANTS: dict[tuple[Any, ...], Any] = {}
_CONSTANTS_MAX = 512


def _torch_shareable(t: Any) -> bool:
    """Whether a new torch constant may be kept for later calls: a plain tensor, no inference one.

    A constant made under ``torch.inference_mode()`` is an inference tensor: reused by a later
    call that records gradients, autograd refuses it ("Inference tensors cannot be saved for
    backward"). One made under a tensor subclass's mode (``FakeTensorMode``) is no plain
    tensor. Neither is kept.
    """
    import torch

    return type(t) is torch.Tensor and not t.is_inference()


def torch_faking() -> bool:
    """Whether a ``FakeTensorMode`` is active (``torch.export`` and shape propagation use one).

    A cached real constant meeting a fake tensor there is refused ("Please convert all
    Tensors to FakeTensors first"), so such a computation gets constants made under the mode.
    """
    import torch

    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


def torch_readable(t: Any) -> bool:
    """Whether the host may read the torch tensor ``t``'s value: a CPU tensor with data.

    Not a tensor on an accelerator (a host sync), nor a fake one (no data: made under a
    ``FakeTensorMode``, as ``torch.export`` and shape propagation make them).
    """
    from torch._subclasses.fake_tensor import FakeTensor

    return t.device.type == "cpu" and not isinstance(t, FakeTensor) and not torch_faking()


def constant(xp: Namespace, value: Any, dtype: Any, like: Any) -> Any:
    """A constant array of ``dtype`` on ``like``'s device.

    JAX constants are left uncommitted (no ``device=``) so that they follow the traced or
    committed array they meet, under ``jax.jit`` included. NumPy and torch constants made from
    a Python scalar are cached (not while torch.compile traces, nor torch inference or fake
    tensors: see :func:`_torch_shareable`), and a fake torch computation never gets a cached
    real one (:func:`torch_faking`). torch constants are filled on their device
    (:func:`_torch_filled`): no host data is copied, so no host sync, cached or not.
    """
    lib = library(xp)
    if lib == "jax" or like is None:
        return xp.asarray(value, dtype=dtype)
    if lib == "torch" and type(value) is not complex and torch_compiling():
        import torch

        # array-api-compat's asarray for a device given, without its wrapper to trace
        return torch.asarray(value, dtype=dtype, device=like.device)
    dev = device(like)
    if lib not in ("numpy", "torch") or type(value) not in (float, int, bool):
        if lib == "torch" and type(value) is complex:
            return _torch_filled(xp, value, dtype, dev)
        negative_zero = type(value) is float and value == 0 and math.copysign(1.0, value) < 0
        if negative_zero and xp.isdtype(dtype, "real floating"):
            # -0.0 made as the negation of +0.0: CuPy made a 0-d -0.0 +0.0 (GPU run 5)
            return -xp.asarray(0.0, dtype=dtype, device=dev)
        return xp.asarray(value, dtype=dtype, device=dev)
    if lib == "torch" and torch_faking():
        return _torch_filled(xp, value, dtype, dev)
    key = (value, math.copysign(1.0, value), type(value), dtype, dev)
    try:
        return _CONSTANTS[key]
    except KeyError:
        pass
    out = (
        _torch_filled(xp, value, dtype, dev)
        if lib == "torch"
        else xp.asarray(value, dtype=dtype, device=dev)
    )
    if lib == "torch" and not _torch_shareable(out):
        return out
    if len(_CONSTANTS) >= _CONSTANTS_MAX:
        _CONSTANTS.clear()
    _CONSTANTS[key] = out
    return out


def _torch_filled(xp: Namespace, value: Any, dtype: Any, dev: Any) -> Any:
    """The 0-d torch tensor ``asarray(value, dtype=dtype, device=dev)``, filled on ``dev``.

    ``torch.asarray`` of a Python scalar on an accelerator copies it there from pageable host
    memory: a host sync. ``torch.full`` passes the value to a fill kernel (no copy) and
    converts it to ``dtype`` with the same conversion (bit-equal for every value that fits the
    dtype, measured on float16, bfloat16, float32, float64 and complex64). A finite value
    beyond the dtype's range, which ``full`` refuses where ``asarray`` rounds it (to inf or
    the largest finite value), keeps ``asarray``: a copy made once, then cached.
    """
    import torch

    try:
        return torch.full((), value, dtype=dtype, device=dev)
    except RuntimeError:  # "value cannot be converted to type ... without overflow"
        return xp.asarray(value, dtype=dtype, device=dev)


def reduce_sum(xp: Namespace, x: Any, axis: Any, keepdims: bool) -> Any:
    """``reduce_sum`` in ``x``'s own dtype (the standard would widen integers).

    bfloat16 is summed in float32 and rounded once, as TF's ``reduce_sum`` (and, within 2 ULP,
    its ``l2_loss``) does: a sum kept in bfloat16 stops growing at 256 times an addend. On JAX
    a sum over several axes goes through :func:`_jax_sum_once`.
    """
    bf16 = dtype_name(x.dtype) == "bfloat16"
    dtype = xp.float32 if bf16 else x.dtype
    if library(xp) == "jax":
        r = _jax_sum_once(xp, x, axis, keepdims, dtype)
    else:
        r = xp.sum(x, axis=axis, keepdims=keepdims, dtype=dtype)
    return xp.astype(r, x.dtype) if bf16 else r


#: Elements per row in :func:`_jax_sum_once`.
_JAX_ROW = 32


def _jax_sum_once(xp: Namespace, x: Any, axis: Any, keepdims: bool, dtype: Any) -> Any:
    """A JAX sum over several axes: merged into one axis, summed in rows of ``_JAX_ROW``.

    XLA:CPU reduces several axes one loop inside another, which accumulates like a sequential
    sum: 11 to 14 ulp from the exact float32 sum of 420 positive squares of shape
    (7, 2, 2, 5, 3), eager or under ``jit``, where TF stays within 1.4. Merging the axes is
    enough eagerly, but under ``jit`` XLA folds the reshape back into the product that feeds
    the sum; row sums, then the sum of the rows, stay within 2.3 either way (measured).

    float16 row sums pass an ``optimization_barrier`` under ``jit``: without it XLA:CPU
    merges the two sums into one ``reduce-window`` over blocks of ``_JAX_ROW`` rows, a
    sequential float16 sum of 1,024 elements, 20 ulp from TF on a 64 x 64 gradient (0.007248
    where eager JAX and TF give 0.007328). float32 keeps XLA's merged sum: within budget, and
    the barrier moved one float32 case (shape (7, 2, 2, 5, 3) reduced over four axes) from 4
    to 5 ulp.
    """
    shape = tuple(x.shape)
    axes = tuple(range(len(shape))) if axis is None else axis
    # a sharded array keeps XLA's own reduction: merging its axes (a reshape) would gather it
    if not isinstance(axes, tuple) or len(axes) < 2 or may_be_sharded(x):
        return xp.sum(x, axis=axis, keepdims=keepdims, dtype=dtype)
    rest = tuple(i for i in range(len(shape)) if i not in axes)
    perm = (*rest, *axes)
    moved = x if perm == tuple(range(len(shape))) else xp.permute_dims(x, perm)
    kept = tuple(shape[i] for i in rest)
    n = math.prod(shape[a] for a in axes)
    merged = xp.reshape(moved, (*kept, n))
    rows = n // _JAX_ROW
    if rows < 2:
        r = xp.sum(merged, axis=-1, dtype=dtype)
    else:
        head = xp.reshape(merged[..., : rows * _JAX_ROW], (*kept, rows, _JAX_ROW))
        r = xp.sum(head, axis=-1, dtype=dtype)
        if dtype_name(dtype) == "float16":
            r = keep_apart(r)
        r = xp.sum(r, axis=-1, dtype=dtype)
        if n > rows * _JAX_ROW:
            r = r + xp.sum(merged[..., rows * _JAX_ROW :], axis=-1, dtype=dtype)
    if keepdims:
        return xp.reshape(r, tuple(1 if i in axes else n for i, n in enumerate(shape)))
    return r


def keep_apart(x: Any) -> Any:
    """The JAX array ``x``, which XLA may not merge with the operations that read it.

    An ``optimization_barrier`` when ``x`` is traced (under ``jit``): XLA then computes ``x``
    as written and cannot fold a later reduction into the one that made it. Eager arrays are
    computed one operation at a time already and are returned as they are.
    """
    import jax

    if not isinstance(x, jax.core.Tracer):
        return x
    barrier: Callable[[Any], Any] = jax.lax.optimization_barrier  # untyped in JAX
    return barrier(x)


def rounded_here(xp: Namespace, x: Any) -> Any:
    """``x`` rounded to its dtype here, at an op boundary, as eager torch and TF round it.

    The identity, but while ``torch.compile`` traces a float16 or bfloat16 tensor
    (:func:`torch_rounded`). Eager calls (every library) get ``x`` itself: no operation is
    added.
    """
    if getattr(x.dtype, "itemsize", 2) != 2 or library(xp) != "torch":
        return x  # (a cheap first test: eager float32 calls pass here many times a call)
    return torch_rounded(x)


def torch_rounded(x: Any) -> Any:
    """The torch tensor ``x`` rounded to its dtype here, as eager torch rounds each operation.

    The identity, but while ``torch.compile`` traces a float16 or bfloat16 tensor: Inductor
    computes a chain of fused half-precision operations in float32 and rounds only what it
    stores, so the rounding to the dtype that eager torch and TF make after each operation is
    skipped (1 ULP on a quarter of ``clip_by_norm``'s bfloat16 results; a float16
    ``global_norm`` whose ``sum * 2`` overflows came back finite). A cast to float32 and back
    is dropped the same way; a bit view through ``int16`` with a no-op ``& -1`` is kept, and
    to view the bits Inductor rounds the value (both on the CPU and in Triton's code). Where a
    gradient is recorded, the gradient flowing back through here is rounded the same way
    (:class:`anyclip._torch_rounding.Rounded`), where eager's backward rounds it.
    """
    if getattr(x.dtype, "itemsize", 2) != 2:
        return x
    import torch  # (imported: ``x`` is its tensor)

    if not torch.compiler.is_compiling() or dtype_name(x.dtype) not in HALF_PRECISION:
        return x
    from anyclip import _torch_rounding

    if not (torch.is_grad_enabled() and x.requires_grad):
        return _torch_rounding.bit_rounded(x)
    return _torch_rounding.FUNCTIONS["rounded"].apply(x)


def complex_from_parts(xp: Namespace, re: Any, im: Any, dtype: Any) -> Any:
    """``re + im * 1j`` of complex ``dtype``, each part kept as it is (TF's ``complex``).

    The standard has no such constructor, and ``im * 1j`` puts ``im * 0`` (NaN for an infinite
    ``im``) into the real part; torch and JAX have one, NumPy assigns the parts.
    """
    lib = library(xp)
    if lib == "torch":
        import torch

        return torch.complex(re, im)
    if lib == "jax":
        import jax

        return jax.lax.complex(re, im)
    if lib == "numpy":
        import numpy as np

        out = np.empty(np.broadcast_shapes(re.shape, im.shape), dtype=dtype)
        out.real, out.imag = re, im
        return out
    # ``im * 1j`` is exact for finite ``im``; infinities and NaN are put in by constants.
    finite = xp.isfinite(im)
    zero = xp.zeros_like(im)
    out = xp.astype(re, dtype) + xp.astype(xp.where(finite, im, zero), dtype) * constant(
        xp, 1j, dtype, re
    )
    for special in (complex(0, math.inf), complex(0, -math.inf), complex(0, math.nan)):
        hit = xp.isnan(im) if special.imag != special.imag else im == special.imag
        out = xp.where(hit, out + constant(xp, special, dtype, re), out)
    return out


def quotient(xp: Namespace, a: Any, b: Any) -> Any:
    """``a / b`` of real floating arrays, ``b`` broadcast against ``a`` (a norm kept over axes).

    XLA's simplifier rewrites a division by a broadcast value as a product with the
    divisor's reciprocal: two roundings, 1 ULP from TF's correctly rounded quotient in 18,200
    of 64,000 float32 quotients (a 64 x 1000 array by its 64 row values; measured against
    NumPy's division, which is TF's), and 0 or inf where that reciprocal leaves the dtype's
    normal range: a divisor above about 8.5e37 (float32, bfloat16) or 4.5e307 (float64) made
    every quotient 0 (XLA:CPU flushes the subnormal reciprocal), a float16 divisor below
    about 1.5e-5 made them inf or NaN (``normalize`` of ``[2e38, 1e38, 1]``: TF
    ``[1, 0.5, 0]``). On JAX the divisor is broadcast behind an optimization barrier, which
    the simplifier cannot see through, so that the program divides element by element, TF's
    quotients (XLA still fuses the broadcast into the division: no full-size divisor is
    stored), in one ``jax.jit`` program. Under ``jax.jit`` XLA then no longer reassociates
    ``(t * c) / d`` through it either. Elsewhere (and for other dtypes) a plain division.
    """
    if library(xp) != "jax" or not xp.isdtype(b.dtype, "real floating"):
        return a / b
    rule = _jax_rule_for(a, b)
    return remembered(_JAX_RULES, ("quotient", rule), rule, _divided_apart, _divided_apart_jvp)(
        a, b
    )


#: JAX's quotient and square root with TF's gradients, each made at its first call.
_JAX_RULES: Memo[Callable[..., Any]] = Memo("anyclip._numerics.jax_rules")


def _jax_rule(value: Callable[..., Any], jvp: Callable[..., Any]) -> Callable[..., Any]:
    """``value`` with the JVP ``jvp`` (TF's gradient), as one ``jax.jit`` program.

    Compiled: called eagerly, a bare ``custom_jvp`` function is traced anew at each call
    (145 us for a 0-d square root, 8 us compiled), and the steps of one would each cost a
    dispatch.
    """
    import jax

    rule = jax.custom_jvp(value)
    rule.defjvp(jvp)
    return jax.jit(rule)


def _jax_rule_in_steps(value: Callable[..., Any], jvp: Callable[..., Any]) -> Callable[..., Any]:
    """``value`` with the JVP ``jvp``, not compiled on its own: for arrays being differentiated.

    A compiled rule's gradient is compiled too, and in it XLA:CPU fused the products of the
    divisor's gradient into their sum as fused multiply-adds (one product left unrounded:
    2 to 8 ULP off TF's ``clip_by_norm`` gradient over axes of two elements, 256 where
    ``normalize``'s cancels). Differentiated eagerly, this one runs its steps one operation
    at a time, TF's roundings; under ``jax.jit`` it is compiled with the caller's program.
    """
    import jax

    rule = jax.custom_jvp(value)
    rule.defjvp(jvp)
    return rule


def _jax_rule_for(*arrays: Any) -> Callable[..., Any]:
    """:func:`_jax_rule_in_steps` where JAX differentiates through one of ``arrays``.

    (``jax.grad``, ``jax.vjp``, ``jax.jvp``: a JVP or linearize tracer), else the compiled
    :func:`_jax_rule`: the calls that record no gradient keep their speed.
    """
    import jax

    for a in arrays:
        if isinstance(a, jax.core.Tracer) and type(a).__name__ in _JAX_DIFFERENTIATING:
            return _jax_rule_in_steps
    return _jax_rule


#: The tracers of JAX's differentiation (``jax.grad`` and ``jax.vjp`` linearize; forward mode
#: and ``jax.grad`` of older releases trace JVPs).
_JAX_DIFFERENTIATING = ("JVPTracer", "LinearizeTracer")


def _apart(a: Any, b: Any) -> Any:
    """``b`` broadcast against ``a`` behind an optimization barrier."""
    import jax
    import jax.numpy as jnp

    shape = jnp.broadcast_shapes(jnp.shape(a), jnp.shape(b))
    barrier: Callable[[Any], Any] = jax.lax.optimization_barrier  # untyped in JAX
    return barrier(jnp.broadcast_to(b, shape))


def _divided_apart(a: Any, b: Any) -> Any:
    """``a / b`` with ``b`` broadcast to the result's shape behind an optimization barrier."""
    return a / _apart(a, b)


def _divided_apart_jvp(primals: Any, tangents: Any) -> Any:
    """TF's gradient of ``RealDiv``: ``da / b`` and ``db * ((-a / b) / b)``, in that order.

    JAX's own rule multiplies by ``b ** -2``, whose other rounding leaves residues where TF's
    cancels exactly (``clip_by_norm`` of a clipped 0-d ``-5.87``: TF's gradient 0, JAX's
    1.1e-16) and moves others by a few ULP. Written as a JVP, so that forward mode works too;
    JAX transposes it into TF's reverse-mode steps: ``g / b`` and the sum of
    ``g * ((-a / b) / b)`` over the axes ``b`` was broadcast along. ``-a / b`` is taken as
    ``-q`` (the same bits): written as ``(-a / b) / b``, XLA folds it into ``-a / (b * b)``.
    Two divisions per element, as TF's: under ``jax.jit`` on a 2-core CPU the gradient of
    ``clip_by_norm`` of 2048 x 2048 float32 took about 2.9 ms, 1.6-1.9 ms with JAX's rule.
    """
    import jax.numpy as jnp

    a, b = primals
    da, db = tangents
    wide = _apart(a, b)
    shape = jnp.shape(wide)
    q = a / wide
    return q, da / wide + jnp.broadcast_to(db, shape) * ((-q) / wide)


def sqrt(xp: Namespace, x: Any) -> Any:
    """A correctly rounded square root, as TF's.

    ``torch.sqrt`` is not correctly rounded on the CPU (torch's x86-64 wheels take MKL's
    vector math: 1 ULP off on about a fifth of float32 inputs and 1 in 80 float64 ones); the
    root of float32 taken in float64 and rounded back is (53 >= 2 * 24 + 2 bits: no double
    rounding), and a float64 root is corrected by :func:`_torch_sqrt64`. The gradient is TF's
    rule on the rounded root (:func:`_with_tf_root_gradient`; through the float64 root, the
    float32 gradient was 1 ULP off TF's in places). anyclip takes roots of reduced sums only,
    so this costs little. MPS has no float64 and keeps torch.sqrt.
    """
    lib = library(xp)
    if lib == "torch":
        import torch

        if x.dtype == torch.float32 and x.device.type != "mps":
            if not (torch.is_grad_enabled() and x.requires_grad):
                return torch.sqrt(x.double()).float()
            with torch.no_grad():
                root = torch.sqrt(x.double()).float()
            return _with_tf_root_gradient(torch, x, root, torch.sqrt(x))
        if x.dtype == torch.float64 and x.device.type == "cpu":
            return _torch_sqrt64(torch, x)
    if lib == "jax" and xp.isdtype(x.dtype, "real floating"):
        rule = _jax_rule_for(x)
        return remembered(_JAX_RULES, ("sqrt", rule), rule, _jax_sqrt, _sqrt_jvp)(x)
    return xp.sqrt(x)


#: :func:`_torch_sqrt64` scales ``x`` below ``2**-500`` up by ``2**600`` and above
#: ``2**500`` down by as much (exact), so that Dekker's products neither overflow nor
#: underflow, and the root back by ``2**300``.
_SQRT64_SCALE = (2.0**-500, 2.0**500, 2.0**600, 2.0**300)

#: Veltkamp's splitter for float64: ``2**27 + 1``.
_SPLIT64 = 134217729.0

#: Veltkamp's splitter for float32: ``2**12 + 1``.
_SPLIT32 = 4097.0


def _torch_sqrt64(torch: Any, x: Any) -> Any:
    """The correctly rounded square root of a float64 CPU tensor, on the device.

    ``torch.sqrt``'s root ``y`` is within 1 ULP; the rounded root is ``y``'s neighbour above
    exactly when ``x > y * up`` and the one below when ``x <= y * down`` (the squares of the
    midpoints differ from those products by less than the spacing of ``x``). Each product is
    compared exactly: Dekker's product ``p + e`` (Veltkamp's split, no fused multiply-add
    needed) against ``x - p``, which is exact (Sterbenz); very small and very large ``x``
    (subnormals included) are scaled by an even power of two first, the root back by half
    of it (:data:`_SQRT64_SCALE`: exact). Elementwise, no host read.

    The gradient is TF's rule on the corrected root (:func:`_with_tf_root_gradient`). While
    ``torch.compile`` traces, ``torch.sqrt`` alone (Inductor's root is the CPU's, rounded
    correctly).
    """
    y = torch.sqrt(x)
    if torch.compiler.is_compiling():
        return y
    lo, hi, scale, root = _SQRT64_SCALE
    with torch.no_grad():
        xd, yd = x.detach(), y.detach()
        small, large = xd < lo, xd > hi
        xs = torch.where(small, xd * scale, torch.where(large, xd * (1 / scale), xd))
        ys = torch.where(small, yd * root, torch.where(large, yd * (1 / root), yd))
        up = torch.nextafter(ys, torch.full_like(ys, math.inf))
        down = torch.nextafter(ys, torch.zeros_like(ys))
        p_up, e_up = _split_product(ys, up)
        p_down, e_down = _split_product(ys, down)
        fixed = torch.where(xs - p_up > e_up, up, ys)
        fixed = torch.where(xs - p_down <= e_down, down, fixed)
        fixed = torch.where(small, fixed * (1 / root), torch.where(large, fixed * root, fixed))
    return _with_tf_root_gradient(torch, x, fixed, y)


def _with_tf_root_gradient(torch: Any, x: Any, root: Any, plain: Any) -> Any:
    """``root`` (the rounded root of ``x``, no gradient) with TF's ``SqrtGrad``.

    ``root`` plus ``(x - x) / (2 root)``: zero, whose derivative (backward and forward mode)
    is TF's scalar rule on ``root`` in ``x``'s dtype (``(g * 0.5) / root`` is
    ``g / (2 root)``: the halving is exact), and ``(x - x) * (0.5 / root)``, TF's packet
    rule, for the elements :func:`tf_packet_head` counts. ``plain`` (``torch.sqrt(x)``)
    where ``x`` is 0, negative or not finite: its value and gradient are TF's there already.
    """
    head = tf_packet_head(tuple(x.shape), x.dtype)
    n = math.prod(x.shape)
    with torch.no_grad():
        xd = x.detach()
        regular = (xd > 0) & (xd < math.inf)
        ones = torch.ones_like(root)
        twice = torch.where(regular, root * 2, ones)
        half_inverse = torch.where(regular, 0.5 / root, ones) if head else ones
    delta = x - xd
    if head == 0 or (head != n and is_dtensor(x)):
        # a DTensor's positions are its shards': no plain mask can mix with it (DTensor
        # refuses), so its gradient takes the scalar rule everywhere (the value is the same)
        step = delta / twice
    elif head == n:
        step = delta * half_inverse
    else:
        packed = (torch.arange(n, device=x.device) < head).reshape(x.shape)
        step = torch.where(packed, delta * half_inverse, delta / twice)
    return torch.where(regular, root + step, plain)


def lerp(xp: Namespace, start: Any, end: Any, weight: Any) -> Any:
    """``torch.lerp(start, end, weight)``: torch's rule, with its fused multiply-add.

    ATen's lerp (CPU and CUDA kernels, the one ``torch.quantile`` interpolates with) takes
    ``start + weight * (end - start)`` for a weight below 0.5, else
    ``end - (end - start) * (1 - weight)``, each as one fused multiply-add (rounded once;
    two roundings give another last bit for about one value in ten), in float32 for float16
    and bfloat16. On torch it is ``torch.lerp`` itself; elsewhere the fused multiply-add is
    emulated with Veltkamp's split and Knuth's two-sum (exact products and sums, then one
    rounding but in rare double-rounding cases), in float32 for float16 and bfloat16. An
    inf or NaN operand, or a product too large to split, gives the plain (twice-rounded)
    value: the same inf or NaN.
    """
    if library(xp) == "torch":
        import torch

        return torch.lerp(start, end, weight)
    dt = start.dtype
    name = dtype_name(dt)
    wide = xp.float32 if name in HALF_PRECISION else dt
    a, b, w = (x if x.dtype == wide else xp.astype(x, wide) for x in (start, end, weight))
    split = _SPLIT64 if dtype_name(wide) == "float64" else _SPLIT32
    d = b - a
    one = constant(xp, 1.0, wide, a)
    small = w < constant(xp, 0.5, wide, a)
    # small weight: w * d + a; else (w - 1) * d + b (w - 1 is exact for w in [0.5, 1])
    coeff = xp.where(small, w, w - one)
    base = xp.where(small, a, b)
    p, e = _split_product(coeff, d, split)
    s = p + base
    bb = s - p
    t = (p - (s - bb)) + (base - bb)  # Knuth's two-sum: s + t == p + base exactly
    fused = s + (t + e)
    out = xp.where(xp.isfinite(fused), fused, s)
    return out if out.dtype == dt else xp.astype(out, dt)


def _split_product(a: Any, b: Any, split: float = _SPLIT64) -> tuple[Any, Any]:
    """Dekker's exact product of ``a`` and ``b``: ``(p, e)`` with ``p + e == a * b``.

    In ``a``'s dtype (float32 or float64); ``split``: its Veltkamp splitter (``2**12 + 1``
    for float32, ``2**27 + 1`` for float64), a Python number, which every library multiplies
    in the array's dtype.
    """
    p = a * b
    c = a * split
    ah = c - (c - a)
    al = a - ah
    d = b * split
    bh = d - (d - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def _jax_sqrt(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.sqrt(x)


def _sqrt_jvp(primals: Any, tangents: Any) -> Any:
    """TF's gradient of ``Sqrt``: ``(0.5 * g) / y``, and ``g * (0.5 / y)`` in Eigen's packets.

    Written as the tangents ``(dx / y) * 0.5`` and ``dx * (0.5 / y)``, which JAX transposes
    into TF's order; which element takes which: :func:`tf_packet_head`. JAX's own rule is
    the packet one everywhere.
    """
    import jax.numpy as jnp

    (x,), (dx,) = primals, tangents
    y = jnp.sqrt(x)
    half = jnp.asarray(0.5, dtype=y.dtype)
    shape = jnp.shape(x)
    head = tf_packet_head(shape, y.dtype)
    n = math.prod(shape)
    if head == 0:
        return y, (dx / y) * half
    if head == n:
        return y, dx * (half / y)
    packed = (jnp.arange(n) < head).reshape(shape)
    # each branch's transpose meets zeros where the other is taken: factors kept finite there
    one = jnp.ones_like(y)
    packet = dx * jnp.where(packed, half / y, jnp.zeros_like(y))
    return y, jnp.where(packed, packet, (dx / jnp.where(packed, one, y)) * half)


#: Elements per Eigen packet in TF's CPU kernels (x86-64, AVX), by dtype name.
_TF_PACKET = {"float32": 8, "float64": 4}


def tf_packet_head(shape: tuple[int, ...], dtype: Any) -> int:
    """How many leading elements (C order) TF's elementwise CPU kernels take in packets.

    Eigen computes an elementwise op in packets of 8 float32 or 4 float64 and the remainder,
    ``n % packet`` elements at the end, one at a time; TF's threads split the array on packet
    boundaries, so only that tail is scalar. Some ops round otherwise in a packet: TF 2.21's
    ``SqrtGrad`` (the gradient of ``sqrt``) is ``(0.5 * g) / y`` on a scalar and
    ``g * (0.5 / y)`` in a packet (measured, ``tf.raw_ops.SqrtGrad`` on 3 to 100,003
    elements; ``RsqrtGrad`` rounds the same in both). 0 for other dtypes.
    """
    packet = _TF_PACKET.get(dtype_name(dtype))
    if packet is None:
        return 0
    n = math.prod(shape)
    return n // packet * packet


def quiet(xp: Namespace) -> contextlib.AbstractContextManager[Any]:
    """A context in which NumPy does not warn about inf/NaN results (TF does not either)."""
    if library(xp) in ("numpy", "array_api_strict", "dask"):  # all compute with NumPy
        import numpy as np

        return np.errstate(all="ignore")
    return contextlib.nullcontext()


def as_array(result: Any) -> Any:
    """``result`` as an array: NumPy reductions return scalars, anyclip returns 0-d arrays."""
    if is_numpy_scalar(result):
        import numpy as np

        return np.asarray(result)
    return result


_THRESHOLDS: Memo[float] = Memo("anyclip._numerics.thresholds")


def float_overflow_threshold(xp: Namespace, dtype: Any) -> float:
    """The smallest magnitude that rounds to infinity when converted to ``dtype``."""
    return memo_by_dtype(_THRESHOLDS, xp, dtype, _overflow_threshold)


def _overflow_threshold(xp: Namespace, dtype: Any) -> float:
    info = xp.finfo(dtype)
    big = float(info.max)
    _, exp = math.frexp(big)
    return big + float(info.eps) * 2.0 ** (exp - 1) / 2


def tf_cast(xp: Namespace, x: Any, dtype: Any) -> Any:
    """``x`` cast to ``dtype`` as TF's ``Cast`` does: ``astype``, but floats to integers as TF.

    TF's CPU kernel converts a float to an integer with the x86 truncating conversion: to
    int32 for a destination of 8, 16 or 32 bits (uint32 excepted), to int64 for int64, uint32
    and uint64, then keeps the destination's low bits. NaN, infinities and values whose
    truncation falls outside the intermediate type become its lowest value (-2**31 or
    -2**63), so NaN gives int32 -2147483648, int8 0 and int64 -2**63; uint64 converts values
    in [2**63, 2**64) exactly (measured on 0-d tensors, every float dtype into every integer
    dtype: ``tests/data/make_value_paths.py``). NumPy and torch agree for most pairs, JAX
    saturates (NaN gives 0); this formula, on values only ``where`` selects, gives TF's on
    every backend. Other casts are ``astype``.
    """
    if not (xp.isdtype(dtype, "integral") and xp.isdtype(x.dtype, "real floating")):
        return xp.astype(x, dtype)
    info = xp.iinfo(dtype)
    bits, signed = int(info.bits), int(info.min) < 0
    wide = 64 if bits == 64 or (bits == 32 and not signed) else 32
    if xp.finfo(x.dtype).bits < 32:  # float16 and bfloat16 hold neither 2**31 nor 2**63
        x = xp.astype(x, xp.float32)
    t = xp.trunc(x)
    limit = constant(xp, 2.0 ** (wide - 1), x.dtype, x)
    valid = xp.logical_and(xp.isfinite(t), xp.logical_and(t >= -limit, t < limit))
    safe = xp.where(valid, t, xp.zeros_like(t))
    if wide == 32:  # int8, int16, int32, uint8, uint16: int32's low bits
        i32 = xp.where(valid, xp.astype(safe, xp.int32), constant(xp, -(2**31), xp.int32, x))
        return i32 if bits == 32 else xp.astype(i32, dtype)
    if bits == 32:  # uint32: the low 32 bits of int64; -2**63 (not valid) has none set
        return _low_32_bits(xp, safe)
    i64 = xp.where(valid, xp.astype(safe, xp.int64), constant(xp, -(2**63), xp.int64, x))
    if signed:
        return i64
    # uint64: int64's bits, and [2**63, 2**64) converted exactly. Every select is made in
    # int64 and the result cast once (torch has no `where` for uint64 on CUDA): t - 2**64 is
    # exact there (Sterbenz: t is within a factor 2 of 2**64) and has t's low 64 bits.
    big = xp.logical_and(t >= limit, t < limit * 2)
    wrapped = xp.astype(xp.where(big, t - limit * 2, xp.zeros_like(t)), xp.int64)
    return xp.astype(xp.where(big, wrapped, i64), dtype)


def _low_32_bits(xp: Namespace, t: Any) -> Any:
    """The low 32 bits of the integer-valued float ``t`` (0 where ``t`` is 0), as uint32.

    Through int64 where the namespace has it, cast once (no select in uint32, for which torch
    has no CUDA ``where``); JAX without x64 has no int64, so there ``|t|`` is split at 2**32
    in floating point (exact: both parts are representable) and negated in uint32, which
    wraps.
    """
    if "int64" in xp.__array_namespace_info__().dtypes(kind="signed integer"):
        return xp.astype(xp.astype(t, xp.int64), xp.uint32)
    a = xp.abs(t)
    two32 = constant(xp, 2.0**32, t.dtype, t)
    low = xp.astype(a - xp.floor(a / two32) * two32, xp.uint32)
    return xp.where(t < constant(xp, 0.0, t.dtype, t), xp.zeros_like(low) - low, low)


def rsqrt_rounded_once(xp: Any, x: Any) -> Any:
    """``1 / sqrt(x)``; float16 and bfloat16 computed in float32 and rounded once, as TF's."""
    name = str(getattr(x.dtype, "name", x.dtype)).rsplit(".", 1)[-1]
    half = name in HALF_PRECISION
    s = xp.sqrt(xp.astype(x, xp.float32) if half else x)
    r = 1 / s
    if r.dtype != s.dtype:
        # NumPy 1.x divides 1 by a float32 scalar (a 0-d input's sqrt) in float64; rounding
        # that to float32 gives the float32 quotient (53 >= 2 * 24 + 2 bits: no double rounding)
        r = xp.astype(r, s.dtype)
    return xp.astype(r, x.dtype) if half else r


def torch_rsqrt(torch: Any, x: Any) -> Any:
    """``1 / sqrt(x)`` of a torch tensor as TF's CPU kernels round it, on any device.

    On the CPU ``torch.rsqrt`` is that already (a correctly rounded square root, then a
    correctly rounded division; half precision in float32, rounded once). CUDA's ``rsqrt`` is
    the device's approximate ``rsqrtf``/``rsqrt`` (up to 2 ULP): measured on an H200 (GPU run
    3), the one-element ``l2_normalize`` gradient, whose two terms TF's ``r`` makes cancel
    exactly, left residues of 2**-37 .. 2**-18 in float32. Off the CPU: ``sqrt`` then
    ``reciprocal`` (both correctly rounded on CUDA), half precision in float32, rounded once.
    """
    if x.device.type == "cpu":
        return torch.rsqrt(x)
    return rsqrt_in_two_steps(torch, x)


def rsqrt_in_two_steps(torch: Any, x: Any) -> Any:
    """:func:`torch_rsqrt` off the CPU, on any device: ``reciprocal(sqrt(x))``."""
    half = x.dtype in (torch.float16, torch.bfloat16)
    r = torch.reciprocal(torch.sqrt(x.float() if half else x))
    return r.to(x.dtype) if half else r


def tf_rsqrt_grad(mod: Any, r: Any, dy: Any) -> Any:
    """TF's RsqrtGrad, ``-0.5 * r**3 * dy`` in TF's order of operations; 0 where ``dy`` is 0.

    Eigen's ``scalar_rsqrt_gradient_op`` (its packet path, the one TF takes on arrays; the
    scalar path rounds the same products) is ``mul_no_nan(-0.5 * (r * r), mul_no_nan(r,
    dy))``: ``r * dy`` and ``r * r`` are rounded apart and then multiplied, each step in
    ``r``'s dtype (float16 and bfloat16 too). The order matters where l2_normalize's gradient
    cancels: ``-0.5 * dy * (r * r * r)`` left ``-6.1e-05`` where TF's gradient of a
    one-element float32 ``l2_normalize`` is exactly 0. Each product is rounded to a half
    dtype under ``torch.compile`` too (:func:`rounded_here`).
    """
    zero = mod.zeros_like(dy)
    r_dy = mod.where(dy == 0, zero, rounded_here(mod, r * dy))
    zeroed = r_dy == 0
    half_r2 = rounded_here(mod, -0.5 * rounded_here(mod, r * r))
    return mod.where(zeroed, zero, rounded_here(mod, half_r2 * r_dy))


def tf_float16(value: float, *, via_float32: bool) -> float:
    """``value`` rounded to float16 as TF converts it, as a Python float (exact in float16).

    TF converts a Python number (alone or in a list) to float16 through float32, so it is
    rounded twice (``via_float32``); a NumPy scalar is cast by NumPy, once. The two differ
    for about 50 in a million doubles (measured, TF 2.21: -46.765625312855775 is -46.75 from
    a Python float, -46.78 from ``np.float64``). Each backend's own conversion took one rule
    for both (NumPy and JAX the single rounding, torch the double one); a value that float16
    holds exactly converts the same everywhere.
    """
    v = value
    try:
        if via_float32:
            v = struct.unpack("<f", struct.pack("<f", v))[0]
        out: float = struct.unpack("<e", struct.pack("<e", v))[0]
    except OverflowError:  # past float32's or float16's range: TF's inf
        return math.copysign(math.inf, value)
    return out
