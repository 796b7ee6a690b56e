"""The array-API core: TF's formulas, op for op, for arrays that are already validated.

Layer: core, below the public layer. Every function takes the namespace ``xp`` first and arrays
that the public layer has already checked and converted (dtypes agree, axes normalised, shapes
broadcastable); the functions with a heavy step (a norm, a sum of squares over a list, a
division, the scaling of a list) take a ``kernels`` argument (:class:`anyclip._kernels.Kernels`)
chosen once per call by the public layer, and delegate that step to it. The operation order
is TF 2.21's, with no shortcut when nothing needs clipping, so results round as TF's do. There
is no Python ``if`` on an array value anywhere below: only shapes and dtypes steer the code, so
everything traces under ``jax.jit`` and ``torch.compile``.

TF's CPU kernels flush subnormal float32/float64 values to zero (FTZ/DAZ); the core does it at
TF's op boundaries through ``kernels.flush`` and ``kernels.flush_squares``, which are the
identity unless the kernels flush (inside :class:`anyclip.flush_subnormals`).

``maximum``, ``minimum``, ``abs`` and ``rsqrt`` come from :mod:`anyclip._gradients`, which
gives them TF's gradient rules on the autodiff backends.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from anyclip import _gradients as g
from anyclip._compat import HALF_PRECISION, device, dtype_name, is_array, library
from anyclip._kernels import Kernels
from anyclip._kernels._tforder_xp import rounded_apart, rounded_cast
from anyclip._numerics import (
    as_array,
    complex_from_parts,
    constant,
    quiet,
    quotient,
    reduce_sum,
    rounded_here,
    sqrt,
    tf_float16,
)
from anyclip._subnormals import flush
from anyclip._typing import Namespace, Nonfinite

__all__ = [
    "clip_by_average_norm",
    "clip_by_global_norm",
    "clip_by_norm",
    "clip_by_value",
    "global_norm",
    "global_scale",
    "group_global_norms",
    "keras_global_norm",
    "keras_global_scale",
    "known_size",
    "l2_normalize",
    "nonnegative",
    "norm",
    "norm_from_half_squares",
    "norm_from_total",
    "normalize",
    "upcast_clip_by_norm",
    "upcast_global_norm",
    "upcast_l2_normalize",
]


F = TypeVar("F", bound=Callable[..., Any])


def _entry(fn: F, *, can_warn: bool = True) -> F:
    """Run a core function without NumPy's inf/NaN warnings; return arrays, not NumPy scalars.

    ``can_warn=False`` skips the warning guard for functions that cannot raise one.
    """

    @functools.wraps(fn)
    def wrapper(xp: Namespace, *args: Any, **kwargs: Any) -> Any:
        if can_warn:
            with quiet(xp):
                out = fn(xp, *args, **kwargs)
        else:
            out = fn(xp, *args, **kwargs)
        if library(xp) != "numpy":  # only NumPy turns 0-d results into scalars
            return out
        if isinstance(out, (tuple, list)):
            scalar = sys.modules["numpy"].generic
            if not any(issubclass(tp, scalar) for tp in {type(o) for o in out}):  # by type
                return out
            return type(out)(as_array(o) if isinstance(o, scalar) else o for o in out)
        return as_array(out)

    return wrapper  # type: ignore[return-value]


def _scalar(xp: Namespace, value: float, like: Any) -> Any:
    """A 0-d constant of ``like``'s dtype on ``like``'s device."""
    return constant(xp, value, like.dtype, like)


def known_size(shape: Sequence[Any]) -> int | None:
    """The number of elements of ``shape``, or None where a dimension is unknown.

    Dask arrays with unknown chunk sizes (``x[x > 0]``) have NaN dimensions; the standard
    allows None.
    """
    size = 1
    for d in shape:
        if d is None or d != d:
            return None
        size *= int(d)
    return size


def _max(xp: Namespace, x: Any, axis: Any, kernels: Kernels | None = None) -> Any:
    """``reduce_max`` with ``keepdims``; an empty reduction gives the lowest value, as in TF.

    ``kernels`` reduce a non-empty ``x`` (:meth:`Kernels.reduce_max`: NaN kept across devices),
    and an ``x`` of unknown shape (dask), which may be empty.
    """
    shape = tuple(x.shape)
    axes = range(len(shape)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    if kernels is not None and known_size(shape) is None:  # dask, unknown chunks: maybe empty
        return kernels.reduce_max(xp, x, tuple(axes) if axis is None else axis)
    # An empty input (a zero in any axis) takes this branch too: its result is empty when a kept
    # axis is 0, so the values do not matter, and some backends (dask) refuse ``max`` of it.
    if 0 in shape:
        if xp.isdtype(x.dtype, "integral"):
            lowest = xp.iinfo(x.dtype).min
        else:
            lowest = -math.inf
        # ``sum`` over the empty axes is 0 and keeps the result connected to ``x`` (a zero
        # gradient, as TF's), where a bare ``full`` would leave autodiff without a graph.
        return reduce_sum(xp, x, axis, keepdims=True) * _scalar(xp, 0, x) + _scalar(xp, lowest, x)
    # every axis named (not ``None``): torch DTensor reduces named axes shard by shard
    named = tuple(axes) if axis is None else axis
    if kernels is None:
        return xp.max(x, axis=named, keepdims=True)
    return kernels.reduce_max(xp, x, named)


def _squeeze_reduced(xp: Namespace, r: Any, axis: Any) -> Any:
    """Drop the axes a ``keepdims`` reduction over ``axis`` kept (``None``: all of them)."""
    if axis is None:
        return xp.reshape(r, ())
    if isinstance(axis, tuple) and axis[0] == axis[1]:  # ord 1 or inf over one axis twice
        axis = axis[0]
    return xp.squeeze(r, axis=axis)


# ----------------------------------------------------------------- clipping
def _clip_by_value(xp: Namespace, t: Any, lo: Any, hi: Any, kernels: Kernels | None = None) -> Any:
    """``maximum(minimum(t, hi), lo)``: the upper bound first, so ``lo`` wins when ``lo > hi``.

    The bounds broadcast to ``t``'s shape (the caller checked they cannot enlarge it).
    ``kernels`` (only to flush): subnormal bounds count as 0 and a subnormal result becomes
    0, as in TF (FTZ/DAZ); with bounds that are normal or 0, flushing the result is flushing
    ``t`` first.
    """
    if kernels is None or not kernels.ftz:
        return g.maximum(xp, g.minimum(xp, t, hi), lo)
    lo, hi = kernels.flush(xp, lo), kernels.flush(xp, hi)
    return kernels.flush(xp, g.maximum(xp, g.minimum(xp, t, hi), lo), owned=True)


clip_by_value = _entry(_clip_by_value, can_warn=False)  # minimum and maximum never warn


def nonnegative(xp: Namespace, clip_norm: Any, zero: Any) -> Any:
    """``maximum(clip_norm, 0)``, as ``tf.clip_by_norm`` clamps an array ``clip_norm``.

    TF's ``maximum`` with TF's gradient (to ``clip_norm`` where it is ``>= 0``; none where it
    is negative or NaN), except that a zero ``clip_norm`` is taken as it is: TF's scalar
    ``maximum`` returns its first operand on a tie, so ``-0.0`` stays ``-0.0`` (and every zero
    of ``t * clip_norm`` keeps its sign), where NumPy's float32 and float64 ``maximum`` return
    the second operand (its float16 one the first) and XLA's gives ``+0.0``. A NumPy 0-d result
    is a NumPy scalar, as NumPy's ``maximum`` returns (its cast to ``t``'s dtype then follows
    TF's conversion of a scalar: silent where it overflows).
    """
    out = xp.where(clip_norm == zero, clip_norm, g.maximum(xp, clip_norm, zero))
    if library(xp) == "numpy" and out.ndim == 0:
        return out[()]
    return out


@_entry
def clip_by_norm(
    xp: Namespace, kernels: Kernels, t: Any, clip_norm: Any, axes: tuple[int, ...] | None
) -> Any:
    """``(t * c) / maximum(l2norm, c)`` with TF's double ``where`` for a finite gradient at 0.

    Flushing kernels: subnormal inputs count as 0 and subnormal results (each square,
    ``t * c``, the quotient) become 0, as in TF.
    """
    if not kernels.ftz:
        # t's uses in the order eager torch's backward adds their gradients (under
        # torch.compile each addition rounded as eager's: anyclip._gradients.uses)
        scaled, squared, other = g.uses(xp, t, 3)
        l2norm = kernels.clip_norm2(xp, squared, axes, other)
        intermediate = rounded_here(xp, g.product(xp, scaled, clip_norm))
        divisor = g.maximum(xp, l2norm, clip_norm)
        return kernels.divide_into(xp, intermediate, divisor)
    clip_norm = kernels.flush(xp, clip_norm)
    l2norm = kernels.clip_norm2(xp, kernels.flush_squares(xp, t), axes)
    intermediate = kernels.flush(xp, t * clip_norm, t, owned=True)
    divisor = g.maximum(xp, l2norm, clip_norm)
    return kernels.flush(xp, kernels.divide_into(xp, intermediate, divisor), owned=True)


def norm_from_half_squares(xp: Namespace, total: Any) -> Any:
    """``sqrt(total * 2)``: the global norm from the sum of every ``l2_loss``."""
    doubled = rounded_here(xp, rounded_here(xp, total) * _scalar(xp, 2.0, total))
    return rounded_here(xp, sqrt(xp, doubled))


def norm_from_total(xp: Namespace, kernels: Kernels, total: Any) -> Any:
    """The norm from ``kernels``' :meth:`~Kernels.total_half_squares` ``total``.

    ``sqrt(total * 2)`` where the kernels halve (:attr:`~Kernels.halving`: TF's
    ``l2_loss``), ``sqrt(total)`` where their sums are whole (:meth:`~Kernels.unhalved`).
    Each step rounded to the dtype under ``torch.compile`` too (:func:`rounded_here`), as in
    :func:`norm_from_half_squares`: a float16 root cast to bfloat16 was otherwise rounded
    once, from float32.
    """
    if kernels.halving:
        return norm_from_half_squares(xp, total)
    return rounded_here(xp, sqrt(xp, rounded_here(xp, total)))


@_entry
def global_norm(
    xp: Namespace, kernels: Kernels, arrays: Sequence[Any], dtype: Any, like: Any
) -> Any:
    """``sqrt(sum(l2_loss(t) for t) * 2)`` with ``l2_loss(t) = sum(t * t) / 2``.

    Kernels of :meth:`~Kernels.unhalved`: ``sqrt(sum(sum(t * t) for t))``, the same order.
    """
    if not arrays:
        return constant(xp, 0.0, dtype, like)
    return norm_from_total(xp, kernels, kernels.total_half_squares(xp, arrays))


def _scale_step(xp: Namespace, b: Any, clip_norm: Any, divisor: Any) -> Any:
    """``(b * clip_norm) / divisor``: :func:`clip_by_norm`'s elementwise step."""
    return quotient(xp, rounded_here(xp, b * clip_norm), divisor)


def _inv_norm_step(xp: Namespace, b: Any, x_inv_norm: Any) -> Any:
    """``b * x_inv_norm``: :func:`l2_normalize`'s elementwise step."""
    return b * x_inv_norm


@_entry
def upcast_clip_by_norm(xp: Namespace, kernels: Kernels, t: Any, clip_norm: Any, acc: Any) -> Any:
    """:func:`clip_by_norm` over all axes, in ``acc``, of a 0-d ``clip_norm`` (of ``acc``).

    The same formula; ``kernels`` cast ``t`` to ``acc`` one block at a time for the sum of
    squares (:meth:`Kernels.total_squares`: TF's ``reduce_sum(t * t)`` halves nothing, and
    neither do they) and again for the scaling (:meth:`Kernels.cast_map`), so no cast of
    all of ``t`` exists.
    """
    l2sum = rounded_here(xp, kernels.total_squares(xp, [t], acc))
    pred = l2sum > 0
    root = rounded_here(xp, sqrt(xp, xp.where(pred, l2sum, xp.ones_like(l2sum))))
    l2norm = xp.where(pred, root, l2sum)
    divisor = g.maximum(xp, l2norm, clip_norm)
    return kernels.cast_map(xp, t, acc, _scale_step, (clip_norm, divisor))


@_entry
def upcast_l2_normalize(xp: Namespace, kernels: Kernels, x: Any, epsilon: Any, acc: Any) -> Any:
    """:func:`l2_normalize` over all axes, in ``acc``, of a 0-d ``epsilon``, block by block.

    The sum of squares is :meth:`Kernels.total_squares` (TF's ``reduce_sum(square(x))``).
    """
    square_sum = rounded_here(xp, kernels.total_squares(xp, [x], acc))
    x_inv_norm = rounded_here(xp, g.rsqrt(xp, g.maximum(xp, square_sum, epsilon)))
    return kernels.cast_map(xp, x, acc, _inv_norm_step, (x_inv_norm,))


@_entry
def upcast_global_norm(xp: Namespace, kernels: Kernels, arrays: Sequence[Any], acc: Any) -> Any:
    """:func:`global_norm` of ``arrays`` accumulated in ``acc``, cast block by block.

    ``kernels.unhalved()`` for ``tf.norm``'s sum of squares (nothing halved).
    """
    return norm_from_total(xp, kernels, kernels.total_half_squares(xp, arrays, acc))


def global_scale(
    xp: Namespace,
    clip_norm: Any,
    use_norm: Any,
    nonfinite: Nonfinite = "tf",
    *,
    unclipped_at_inf: bool = False,
    kernels: Kernels | None = None,
    norm_uses: tuple[Any, Any, Any] | None = None,
) -> Any:
    """The factor ``clip_by_global_norm`` multiplies every array by, in ``use_norm``'s dtype.

    ``c * minimum(1 / use_norm, 1 / c)``, plus ``use_norm - use_norm`` (NaN for a non-finite
    norm) under the ``"tf"`` and ``"raise"`` policies; ``"torch"`` keeps the bare factor and
    ``"skip"`` replaces it by 1 where the norm is not finite.

    ``unclipped_at_inf`` (the torch and optax drop-ins): where ``c`` is ``+inf`` the factor is
    1 (NaN for a non-finite norm, except under ``"skip"``), as torch's and optax's, instead of
    TF's ``inf * 0 = NaN``; selected with ``where``, so a finite ``c`` gives TF's factor bit
    for bit and an array ``c`` is never read on the host.

    ``kernels`` (only to flush): subnormal inputs, reciprocals and products become 0.

    The reciprocals are :func:`~anyclip._numerics.quotient`'s: on JAX with TF's ``RealDiv``
    gradient, ``g * ((-1 / n) / n)``; JAX's own multiplies by ``n ** -2``, and the gradient
    of ``clip_by_global_norm``, which cancels through the norm, came out 1 to 8 ULP from TF's
    (``sum(clip_by_global_norm([[1, t, -t, 3]], c)[0][0])``, float64 ``t = 1e-10``: 4 ULP, eager
    and under ``jax.jit``).

    ``norm_uses`` (optional): ``use_norm``'s values through three other autograd uses
    (:func:`anyclip._gradients.uses`), for the two sides of ``use_norm - use_norm`` and the
    reciprocal, in the order eager torch's backward adds their gradients.
    """
    one = _scalar(xp, 1.0, use_norm)
    minuend, subtrahend, divisor = (use_norm,) * 3 if norm_uses is None else norm_uses
    if kernels is None or not kernels.ftz:
        inverses = (
            rounded_here(xp, g.divided(xp, one, divisor)),
            rounded_here(xp, g.divided(xp, one, clip_norm)),
        )
        scale_for_finite = rounded_here(xp, g.product(xp, clip_norm, g.minimum(xp, *inverses)))
    else:
        f = kernels.flush
        clip_norm, use_norm = f(xp, clip_norm), f(xp, use_norm)
        inverse = g.minimum(xp, f(xp, one / use_norm), f(xp, one / clip_norm))
        scale_for_finite = f(xp, clip_norm * inverse)
    if nonfinite == "torch":
        scale = scale_for_finite
    elif nonfinite == "skip":
        scale = xp.where(xp.isfinite(use_norm), scale_for_finite, one)
    else:
        scale = scale_for_finite + (minuend - subtrahend)
    if not unclipped_at_inf:
        return scale
    unclipped = one if nonfinite == "skip" else one + (use_norm - use_norm)
    return xp.where(clip_norm == _scalar(xp, math.inf, use_norm), unclipped, scale)


#: Dtypes in which Keras 3's global norm differs from TF's: ``l2_loss`` halves each square
#: before the sum, and a square below twice the smallest subnormal halves to 0.
KERAS_UNHALVED = HALF_PRECISION


@_entry
def keras_global_norm(xp: Namespace, kernels: Kernels, arrays: Sequence[Any]) -> Any:
    """Keras 3's ``global_norm``: ``sqrt(sum(stack([sum(square(v)) for v in arrays])))``.

    ``keras/src/optimizers/base_optimizer.py`` (Keras 3.15, the ``global_clipnorm`` of every
    optimizer), for float16 and bfloat16 arrays (at least one, of one dtype): each square
    rounded to the dtype and summed whole (TF's ``reduce_sum``: bfloat16 in float32, rounded
    once), each array's sum rounded to the dtype, then the sum of the stacked sums. In
    float32 and float64 it is :func:`global_norm` with :meth:`Kernels.unhalved` (TF 2.21's
    ``reduce_sum(square(v))`` is ``2 * l2_loss(v)`` bit for bit, measured on arrays of 3 to
    10**6 elements, but for the squares whose half ``l2_loss`` flushes), which keeps TF's
    float64 order and the multi-device and distributed sums. The sums of the arrays
    meet on ``arrays[0]``'s device. Flushing kernels: subnormal squares count as 0.
    """
    home = device(arrays[0]) if library(xp) == "torch" else None  # one device elsewhere
    sums = []
    for v in arrays:
        squares = rounded_apart(xp, xp.square(kernels.flush_squares(xp, v)))
        s = xp.reshape(kernels.nonnegative_sum(xp, squares, None), ())
        sums.append(s if home is None or s.device == home else s.to(home))
    total = rounded_here(
        xp, reduce_sum(xp, rounded_apart(xp, xp.stack(sums)), None, keepdims=False)
    )
    return rounded_here(xp, sqrt(xp, kernels.flush(xp, total)))


@_entry
def keras_global_scale(
    xp: Namespace, clip_norm: Any, use_norm: Any, *, kernels: Kernels | None = None
) -> Any:
    """Keras 3's ``clip_by_global_norm`` factor, in ``use_norm``'s dtype.

    ``clip_norm * minimum(1.0 / use_norm, 1.0 / clip_norm) + (use_norm - use_norm)``, op for
    op as Keras: for a Python number ``clip_norm``, ``1.0 / clip_norm`` is Python's (float64)
    quotient rounded once to the dtype, and ``clip_norm`` is rounded to it, so the factor of
    an unclipped step is ``float32(c) * float32(1 / c)``, 1 ULP off 1 for some ``c`` (2.3
    gives 0.99999994, 1.7 gives 1.0000001), where TF's :func:`global_scale` divides in the
    dtype and gives 1. An array ``clip_norm`` (a scheduled value, of ``use_norm``'s dtype) is
    divided in its dtype, as Keras's ``1.0 / tensor``. ``inf`` gives NaN (``inf * 0``), and
    so does a non-finite norm. ``kernels`` (only to flush, as :func:`global_scale`).
    """
    one = _scalar(xp, 1.0, use_norm)
    if is_array(clip_norm):
        c, inverse = clip_norm, one / clip_norm
    else:  # Keras's Python number: its quotient in Python, then converted as TF converts it
        c, inv = float(clip_norm), 1.0 / clip_norm
        if dtype_name(use_norm.dtype) == "float16":  # TF: a Python float through float32
            c, inv = tf_float16(c, via_float32=True), tf_float16(inv, via_float32=True)
        c, inverse = _scalar(xp, c, use_norm), _scalar(xp, inv, use_norm)
    if kernels is None or not kernels.ftz:
        scale_for_finite = c * g.minimum(xp, one / use_norm, inverse)
    else:
        f = kernels.flush
        c, norm = f(xp, c), f(xp, use_norm)
        scale_for_finite = f(xp, c * g.minimum(xp, f(xp, one / norm), f(xp, inverse)))
    return scale_for_finite + (use_norm - use_norm)


@_entry
def clip_by_global_norm(
    xp: Namespace,
    kernels: Kernels,
    t_list: Sequence[Any],
    clip_norm: Any,
    use_norm: Any,
    nonfinite: Nonfinite = "tf",
    *,
    unclipped_at_inf: bool = False,
    bools: Sequence[int] = (),
    norm_uses: tuple[Any, Any, Any] | None = None,
) -> list[Any]:
    """Multiply every array by :func:`global_scale`, cast to the array's dtype.

    ``bools``: the positions of bool arrays (with a given ``use_norm`` only). TF casts the
    scale to bool (``scale != 0``, so NaN is True) and its ``*`` on bools is a logical and.
    ``norm_uses``: as :func:`global_scale`'s.
    """
    scale = global_scale(
        xp,
        clip_norm,
        use_norm,
        nonfinite,
        unclipped_at_inf=unclipped_at_inf,
        kernels=kernels,
        norm_uses=norm_uses,
    )
    if not bools:
        return kernels.scale(xp, t_list, scale)
    numeric = list(t_list)
    for i in bools:
        numeric[i] = None
    out = kernels.scale(xp, numeric, scale)
    keep = scale != _scalar(xp, 0, scale)
    for i in bools:
        out[i] = xp.logical_and(t_list[i], keep)
    return out


@_entry
def clip_by_average_norm(
    xp: Namespace, t: Any, clip_norm: Any, kernels: Kernels | None = None
) -> Any:
    """``t * c * minimum(rsqrt(sum(t * t)) * size(t), 1 / c)``.

    ``kernels`` (only to flush): subnormal inputs and results of each step become 0.
    """
    size = known_size(t.shape)
    if size is None:  # unknown (dask): counted when the graph is computed, rounded as TF's cast
        n_element = xp.astype(xp.sum(xp.ones_like(t, dtype=xp.int64)), t.dtype)
    else:
        n_element = _scalar(xp, float(size), t)
    axes = tuple(range(t.ndim))
    if kernels is None or not kernels.ftz:
        l2norm_inv = g.rsqrt(xp, reduce_sum(xp, t * t, axes, keepdims=False))
        bound = g.minimum(xp, l2norm_inv * n_element, _scalar(xp, 1.0, t) / clip_norm)
        return t * clip_norm * bound
    f = kernels.flush
    clip_norm = f(xp, clip_norm)
    ts = kernels.flush_squares(xp, t)
    l2norm_inv = g.rsqrt(xp, reduce_sum(xp, ts * ts, axes, keepdims=False))
    inverse = f(xp, _scalar(xp, 1.0, t) / clip_norm)
    bound = g.minimum(xp, f(xp, l2norm_inv * n_element), inverse)
    return f(xp, f(xp, t * clip_norm, t, owned=True) * bound, owned=True)


# -------------------------------------------------------------------- norms
@_entry
def norm(
    xp: Namespace,
    kernels: Kernels,
    x: Any,
    ord: Any,
    axis: int | tuple[int, int] | None,
    keepdims: bool,
    acc: Any = None,
    other: Any = None,
) -> Any:
    """``tf.norm`` for validated arguments: ``axis`` is ``None``, an int or a 2-tuple of ints.

    ``acc`` (with ``axis=None`` and an ``ord`` other than the Euclidean one only): the dtype
    the norm is computed in, ``x`` cast to it a block at a time (:func:`_vector_p_norm`).
    ``other`` (optional): ``x``'s values through another autograd use, the second factor of
    each square of a Euclidean norm (:meth:`~anyclip._kernels.Kernels.norm2`).
    """
    r = None
    if kernels.ftz or (acc is not None and acc != x.dtype):
        other = None  # (x is replaced below)
    if kernels.ftz and not xp.isdtype(x.dtype, "complex floating"):  # TF's DAZ
        x = kernels.flush_squares(xp, x) if ord in ("fro", "euclidean", 2) else kernels.flush(xp, x)
    if axis is None and ord not in ("fro", "euclidean", 2) and (known_size(x.shape) or 0) > 0:
        r = _vector_p_norm(xp, kernels, x, ord, x.dtype if acc is None else acc)
    if r is None and acc is not None and acc != x.dtype:
        x = rounded_cast(xp, x, acc)
    if r is not None:
        pass
    elif ord in ("fro", "euclidean", 2) and not (isinstance(axis, tuple) and ord == 2):
        if xp.isdtype(x.dtype, "complex floating"):
            # TF's ``x * conj(x)`` has the real part re*re + im*im and an imaginary part of
            # exactly 0; summed as a complex product here, it would not be (FMA, rounding).
            # The imaginary part re * -im + im * re is 0, or NaN where a part is inf or NaN
            # or a product overflows (TF's norm of inf j is inf + nan j).
            re, im = xp.real(x), xp.imag(x)
            r = sqrt(xp, kernels.settle(xp, reduce_sum(xp, re * re + im * im, axis, True)))
            i = kernels.settle(xp, reduce_sum(xp, re * im - im * re, axis, keepdims=True))
            r = complex_from_parts(xp, r, i, x.dtype)
        else:
            axes = axis if axis is None or isinstance(axis, tuple) else (axis,)
            r = kernels.norm2(xp, x, axes, other)
    elif isinstance(axis, tuple) and ord == 2:
        r = _spectral_norm(xp, kernels, kernels.spectral_input(xp, x, axis), axis)
    else:
        a = g.abs(xp, x)
        if ord == 1:
            if isinstance(axis, tuple):
                r = _max(xp, _sum_kept(xp, kernels, a, axis[0]), axis[1], kernels)
            else:
                r = _sum_kept(xp, kernels, a, axis)
        elif ord == math.inf:
            if isinstance(axis, tuple):
                r = _max(xp, _sum_kept(xp, kernels, a, axis[1]), axis[0], kernels)
            else:
                r = _max(xp, a, axis, kernels)
        else:
            p = _scalar(xp, ord, a)
            inv_p = _scalar(xp, 1.0 / ord, a)
            if kernels.ftz:
                f = kernels.flush
                r = f(xp, f(xp, _sum_kept(xp, kernels, f(xp, a**p), axis)) ** inv_p)
            else:
                r = _sum_kept(xp, kernels, a**p, axis) ** inv_p
    r = kernels.settle(xp, r)
    if keepdims:
        return r
    return _squeeze_reduced(xp, r, axis)


def _sum_kept(xp: Namespace, kernels: Kernels | None, a: Any, axis: Any) -> Any:
    """``sum(a, axis, keepdims=True)`` of ``a >= 0``: in TF's order where ``kernels`` can.

    :meth:`~anyclip._kernels.Kernels.nonnegative_sum` (TF's order for float64; settled: a
    DTensor's partial sum all-reduced), else the library's own sum.
    """
    if kernels is None:
        return reduce_sum(xp, a, axis, keepdims=True)
    return kernels.nonnegative_sum(xp, a, axis)


def _abs_sum(xp: Namespace, b: Any) -> Any:
    """``sum(abs(b))``: the 1-norm of a block."""
    return reduce_sum(xp, g.abs(xp, b), None, keepdims=False)


def _abs_max(xp: Namespace, b: Any) -> Any:
    """``max(abs(b))``: the inf-norm of a non-empty block."""
    return xp.max(g.abs(xp, b))


def _abs_pow_sum(xp: Namespace, b: Any, p: Any) -> Any:
    """``sum(abs(b) ** p)``: the p-norm of a block, to the power ``p``."""
    return reduce_sum(xp, g.abs(xp, b) ** p, None, keepdims=False)


def _flushed_abs_pow_sum(xp: Namespace, b: Any, p: Any) -> Any:
    """:func:`_abs_pow_sum` with subnormal powers flushed to 0, as in TF."""
    return reduce_sum(xp, flush(xp, g.abs(xp, b) ** p), None, keepdims=False)


def _vector_p_norm(xp: Namespace, kernels: Kernels, x: Any, ord: Any, acc: Any) -> Any | None:
    """The vector ``ord``-norm over every axis of a non-empty ``x``, in ``acc``, or None.

    TF's ``sum(abs(x))``, ``max(abs(x))`` and ``sum(abs(x) ** p) ** (1 / p)`` with the inner
    reduction taken by :meth:`Kernels.cast_reduce`: a block at a time (the partial sums then
    added, or the partial maxima compared), so neither ``abs(x)`` nor a cast of ``x`` exists
    whole. None where the kernels reduce in one piece (the caller then uses the formula on
    the whole array). bfloat16 sums are left whole: TF sums them once in float32.
    """
    if ord != math.inf and dtype_name(acc) == "bfloat16":
        return None
    if ord == 1:
        r = kernels.cast_reduce(xp, x, acc, _abs_sum, (), "sum")
    elif ord == math.inf:
        r = kernels.cast_reduce(xp, x, acc, _abs_max, (), "max")
    else:
        p = constant(xp, ord, acc, x)
        fn = _flushed_abs_pow_sum if kernels.ftz else _abs_pow_sum
        r = kernels.cast_reduce(xp, x, acc, fn, (p,), "sum")
        if r is not None:
            f = kernels.flush
            r = f(xp, f(xp, r) ** constant(xp, 1.0 / ord, acc, x))
    return None if r is None else xp.reshape(r, (1,) * x.ndim)


def _spectral_norm(xp: Namespace, kernels: Kernels, x: Any, axis: tuple[int, int]) -> Any:
    """Largest singular value over the two ``axis``, kept as two size-1 axes."""
    ndim = x.ndim
    rest = [i for i in range(ndim) if i not in axis]
    perm = (*rest, *axis)
    moved = xp.permute_dims(x, perm) if perm != tuple(range(ndim)) else x
    # A matrix holding inf or NaN has norm NaN and an all-NaN gradient (TF's SVD gives NaN
    # everywhere; NumPy's raises): take the SVD of a finite stand-in, then add
    # sum(matrix * poison), with poison NaN for such matrices and 0 for the others, which puts
    # the NaN back in the value and in the gradient without a branch on values.
    finite = xp.isfinite(moved)
    bad = xp.logical_not(xp.all(finite, axis=(-2, -1)))
    s = kernels.svdvals(xp, xp.where(finite, moved, xp.zeros_like(moved)))
    # TF's max(|s|): abs's gradient at 0 is 0, so an all-zero matrix has gradient 0.
    top = _max(xp, g.abs(xp, s), s.ndim - 1, kernels)
    nan, zero = _scalar(xp, math.nan, top), _scalar(xp, 0.0, top)
    poison = xp.expand_dims(xp.expand_dims(xp.where(bad, nan, zero), axis=-1), axis=-1)
    parts = (
        (xp.real(moved), xp.imag(moved))
        if xp.isdtype(moved.dtype, "complex floating")
        else (moved,)
    )
    for part in parts:
        top = top + xp.expand_dims(xp.sum(part * poison, axis=(-2, -1)), axis=-1)
    r = xp.expand_dims(top, axis=-1)
    inverse = [perm.index(i) for i in range(ndim)]
    return xp.permute_dims(r, tuple(inverse)) if perm != tuple(range(ndim)) else r


@_entry
def l2_normalize(
    xp: Namespace,
    x: Any,
    axis: tuple[int, ...] | None,
    epsilon: Any,
    kernels: Kernels | None = None,
) -> Any:
    """``x * rsqrt(maximum(sum(x * x), epsilon))``: ``epsilon`` floors the *squared* norm.

    ``kernels`` (optional) settles the sum of squares (:meth:`Kernels.settle`: one
    all-reduce when ``x`` is a DTensor sharded over a reduced axis), and flushes subnormal
    squares and results to 0 where they flush.
    """

    def settle(r: Any) -> Any:
        return r if kernels is None else kernels.settle(xp, r)

    if xp.isdtype(x.dtype, "complex floating"):
        re, im = xp.real(x), xp.imag(x)
        square_sum = settle(reduce_sum(xp, g.square(xp, re) + g.square(xp, im), axis, True))
        x_inv_norm = g.rsqrt(xp, g.maximum(xp, square_sum, epsilon))
        # TF scales the parts apart: inf + 0j gives nan + 0j, not nan + nan j
        return complex_from_parts(xp, re * x_inv_norm, im * x_inv_norm, x.dtype)
    if kernels is None or not kernels.ftz:
        # x's uses in the order eager torch's backward adds their gradients (as clip_by_norm);
        # TF squares with `square`: one gradient term, g * (2 x)
        scaled, squared = g.uses(xp, x, 2)
        square_sum = _sum_kept(
            xp, kernels, rounded_here(xp, g.square(xp, squared)), axis
        )  # settled
        floored = g.maximum(xp, rounded_here(xp, square_sum), epsilon)
        return g.product(xp, scaled, rounded_here(xp, g.rsqrt(xp, floored)))
    xs = kernels.flush_squares(xp, x)
    square_sum = _sum_kept(xp, kernels, xs * xs, axis)  # settled
    x_inv_norm = g.rsqrt(xp, g.maximum(xp, square_sum, kernels.flush(xp, epsilon)))
    return kernels.flush(xp, x * x_inv_norm, x, owned=True)


def _complex_quotient(xp: Namespace, x: Any, n: Any) -> Any:
    """``x / n`` for a complex norm ``n = c + d j`` kept over axes, as TF's kernels divide.

    TF (Eigen) divides by Smith's rule, ``ratio = d / c``, ``denom = c + d * ratio``, parts
    ``(a + b * ratio) / denom`` and ``(b - a * ratio) / denom``. A norm's ``d`` is 0, so each
    part is divided by ``c`` (correctly rounded, the zeros' signs from ``+ 0``), where NumPy's
    and torch's complex division multiply by ``1 / c``: 1 ULP from TF's quotient in most random
    vectors (41 of 45 on NumPy, measured against TF 2.21, complex64 and complex128). Non-finite
    norms: the Euclidean norm of an infinite part is ``inf + nan j``; TF's complex128 division
    by it gives NaN (``ratio`` is NaN here), its complex64 division 0 for finite entries, as
    dividing by the real part does (``d`` taken as 0 here; catalogue ``imag/`` cases). Dividing
    by a real ``inf`` (a finite input whose norm overflows, or ``ord=1`` of an infinite part)
    gives 0 for finite entries and NaN for non-finite ones, TF's scalar loop's values (its
    vector loop gives NaN: docs/tf-behaviour.md).
    """
    complex64 = dtype_name(x.dtype) == "complex64"
    c = xp.real(n)
    d = xp.zeros_like(c) if complex64 else xp.imag(n)
    ratio = d / c
    denom = c + d * ratio
    a, b = xp.real(x), xp.imag(x)
    re = quotient(xp, a + b * ratio, denom)
    im = quotient(xp, b - a * ratio, denom)
    return complex_from_parts(xp, re, im, x.dtype)


#: TF's true division of integers: int8/int16 (and uint8/uint16) give float32, wider give float64.
_TRUEDIV_FLOAT_BITS = {8: 32, 16: 32, 32: 64, 64: 64}


@_entry
def normalize(
    xp: Namespace,
    kernels: Kernels,
    x: Any,
    ord: Any,
    axis: int | tuple[int, int] | None,
) -> tuple[Any, Any]:
    """``(x / norm, norm)`` with the norm kept over ``axis`` and cast to ``x``'s dtype."""
    # x's uses in the order eager torch's backward adds their gradients (as clip_by_norm)
    divided, squared, other = g.uses(xp, x, 3)
    n = norm(xp, kernels, squared, ord, axis, keepdims=True, other=other)
    if n.dtype != x.dtype:
        n = xp.astype(n, x.dtype)
    if xp.isdtype(x.dtype, "complex floating"):
        return _complex_quotient(xp, x, n), n
    if xp.isdtype(x.dtype, "integral"):
        bits = _TRUEDIV_FLOAT_BITS[xp.iinfo(x.dtype).bits]
        fdt = xp.float32 if bits == 32 else xp.float64
        return kernels.flush(xp, quotient(xp, xp.astype(x, fdt), xp.astype(n, fdt)), owned=True), n
    return kernels.flush(xp, g.divided(xp, divided, n), x, owned=True), n


# ------------------------------------------------------------ group norms
@_entry
def group_global_norms(
    xp: Namespace,
    parts: Sequence[tuple[Kernels, Sequence[Any], Any, Any]],
    reduce: Callable[[list[Any]], list[Any]] | None = None,
) -> list[Any]:
    """:func:`global_norm` of several groups of arrays, with one cross-process reduction.

    ``parts[i] = (kernels, arrays, acc, zero)``: group ``i``'s kernels, its arrays, the dtype
    to accumulate in (``None``: the arrays' own, as :func:`global_norm`; a dtype: as
    :func:`upcast_global_norm`) and its 0-d zero (an empty group's sum). Each group's sum of
    ``l2_loss`` is its kernels' :meth:`~Kernels.total_half_squares`, the same call the
    single-group norm makes, so each norm is that group's :func:`global_norm` bit for bit.
    ``reduce`` (with ``group=``) sums the partial sums over the processes, all of them
    together (one all-reduce of a vector); then each norm is ``sqrt(total * 2)``
    (:func:`norm_from_total`).
    """
    totals = [
        zero if not arrays else k.total_half_squares(xp, arrays, acc)
        for k, arrays, acc, zero in parts
    ]
    if reduce is None:
        return [
            zero if not arrays else norm_from_total(xp, k, t)
            for (k, arrays, _, zero), t in zip(parts, totals, strict=True)
        ]
    reduced = reduce(totals)
    return [norm_from_total(xp, k, t) for (k, _, _, _), t in zip(parts, reduced, strict=True)]
