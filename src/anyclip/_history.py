"""Norm history and the rules built on it: ZClip, AutoClip's quantile, skip on spike.

Layer: array-API core, beside :mod:`anyclip._core`. Every function is pure (a :class:`History`
in, a new one out), takes the namespace ``xp`` first and device arrays only: no Python ``if``
on an array value and no host read, so one training step runs under ``jax.jit`` and
``torch.compile(fullgraph=True)``. The numbers fed in are the *reduced* norms (the global norm
:func:`anyclip.global_norm` computes, all-reduced over the group), so every process holds the
same history and takes the same decision. The adapters (:mod:`anyclip.torch`,
:mod:`anyclip.optax`) store the state, compute the norm and call these functions; they hold no
formula of their own.

The three rules and their references:

- :func:`zclip_step`: ``zclip`` 1.0's ``ZClip.step`` (EMA mean and variance after a warm-up,
  a z-score or percentile threshold, its ``max / (norm + 1e-6)`` factor);
- :func:`quantile_step`: ``autoclip`` 0.2's ``QuantileClip`` (the threshold is
  ``torch.quantile`` of the recorded norms, linear interpolation, NaN if any is NaN; torch's
  ``clip_grad_norm_`` factor);
- :func:`spike_step`: OLMo-core's ``SkipStepOptimizer.get_step_factor`` (skip when the value
  exceeds the mean of the previous ``rolling_interval_length`` values by more than
  ``sigma_factor`` unbiased standard deviations, once ``max(2, length // 2)`` values, this one
  included, are seen) together with ``optax.apply_if_finite`` (skip a non-finite step, give up
  after ``max_consecutive_errors``).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from anyclip._compat import HALF_PRECISION, _namespace_of, device, dtype_name, library
from anyclip._core import global_scale
from anyclip._if_finite import INT_MAX, if_finite_step, saturating_increment
from anyclip._kernels._tforder_xp import rounded_cast
from anyclip._numerics import constant, lerp, quiet, rounded_here, sqrt, torch_readable
from anyclip._policy_dtypes import widest_float
from anyclip._typing import Namespace

F = TypeVar("F", bound=Callable[..., Any])


def _quiet(fn: F) -> F:
    """Run a rule without NumPy's inf/NaN warnings (a NaN z-score is part of the rules)."""

    @functools.wraps(fn)
    def wrapper(xp: Namespace, *args: Any, **kwargs: Any) -> Any:
        with quiet(xp):
            return fn(xp, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


__all__ = [
    "INT_MAX",
    "History",
    "SpikeDecision",
    "init_history",
    "quantile_step",
    "record",
    "spike_step",
    "ZClipStep",
    "ZClipOptionError",
    "check_choice",
    "check_spike_arguments",
    "check_int",
    "check_mapping",
    "check_quantile_arguments",
    "check_real",
    "check_zclip_options",
    "window_quantile",
    "zclip_factor",
    "zclip_step",
]


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """``value`` lower-cased if it is one of ``choices``, else a ``ValueError`` naming ``name``.

    The rules' string options (``mode``, ``clip_option``, ``formula``), checked by the torch
    and optax adapters alike.
    """
    if not isinstance(value, str) or value.lower() not in choices:
        msg = f"`{name}` must be one of {choices}, got {value!r}"
        raise ValueError(msg)
    return value.lower()


class ZClipOptionError(ValueError, AssertionError):
    """A bad ``mode`` or ``clip_option`` of ZClip: a ``ValueError``, and an ``AssertionError``.

    zclip 1.0 raises ``ValueError`` for ``mode`` and ``AssertionError`` (an ``assert``) for
    ``clip_option``; code written against it catches either, anyclip's own code ``ValueError``
    (as NumPy's ``AxisError`` is both a ``ValueError`` and an ``IndexError``).
    """


def check_zclip_options(mode: Any, clip_option: Any) -> tuple[str, str | None]:
    """ZClip's ``mode`` and ``clip_option`` lower-cased (``clip_option`` None in percentile mode).

    The messages hold zclip 1.0's own sentence (code and tests match on it), then the argument,
    what came and the fix.
    """
    modes = ("zscore", "percentile")
    if not isinstance(mode, str) or mode.lower() not in modes:
        msg = (
            f"mode must be either 'zscore' or 'percentile'. `mode` got {mode!r}; pass "
            "mode='zscore' (the default) or mode='percentile' (either case)"
        )
        raise ZClipOptionError(msg)
    if mode.lower() == "percentile":
        return "percentile", None
    options = ("mean", "adaptive_scaling")
    if not isinstance(clip_option, str) or clip_option.lower() not in options:
        msg = (
            "For zscore mode, clip_option must be either 'mean' or 'adaptive_scaling'. "
            f"`clip_option` got {clip_option!r}; pass clip_option='adaptive_scaling' (the "
            "default) or clip_option='mean', or mode='percentile' (which takes none)"
        )
        raise ZClipOptionError(msg)
    return "zscore", clip_option.lower()


def _kind_error(value: Any, name: str, kind: str, none: bool) -> TypeError:
    also = " or None" if none else ""
    return TypeError(f"`{name}` must be {kind}{also}, got {value!r} ({type(value).__name__})")


def check_real(value: Any, name: str, *, minimum: float | None = None, none: bool = False) -> Any:
    """``value`` as a Python float, else a ``TypeError``/``ValueError`` naming ``name``.

    A real number (Python, NumPy; not ``bool`` nor a string), not NaN, at least ``minimum``;
    ``None`` passes through where ``none``. The rules' numeric options, checked by the torch
    and optax adapters alike.
    """
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _kind_error(value, name, "a real number", none)
    x = float(value)
    if math.isnan(x) or (minimum is not None and x < minimum):
        bound = "not NaN" if minimum is None else f">= {minimum}"
        msg = f"`{name}` must be a number {bound}, got {value!r}"
        raise ValueError(msg)
    return x


def check_int(value: Any, name: str, *, minimum: int, none: bool = False) -> Any:
    """``value`` as a Python int of at least ``minimum`` (or ``None`` where ``none``)."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _kind_error(value, name, "an int", none)
    if int(value) < minimum:
        msg = f"`{name}` must be an int >= {minimum}, got {value!r}"
        raise ValueError(msg)
    return int(value)


def check_mapping(value: Any, name: str, keys: tuple[str, ...], what: str) -> dict[str, Any]:
    """``value`` as a dict holding ``keys``, else an error naming ``name`` and ``what`` fits."""
    if not isinstance(value, Mapping):
        msg = f"`{name}` must be a mapping ({what}), got {type(value).__name__}"
        raise TypeError(msg)
    missing = [k for k in keys if k not in value]
    if missing:
        msg = (
            f"`{name}` must hold the keys {list(keys)} ({what}); it lacks {missing} "
            f"(its keys: {list(value)})"
        )
        raise KeyError(msg)
    return dict(value)


def check_quantile_arguments(
    quantile: Any, history_length: Any, tensor: type | None = None
) -> None:
    """AutoClip's ``quantile`` and ``history_length``, checked as ``autoclip`` 0.2 checks them.

    ``TypeError`` unless ``quantile`` is a float (or a ``tensor``, the adapter's array type:
    autoclip takes a torch tensor) and ``history_length`` an int; ``ValueError`` unless the
    quantile lies in [0, 1] (a tensor: holds one value, and lies in [0, 1] when on the CPU;
    a tensor on another device is not read, as that would be a host sync, so its range is
    not checked) and the length is positive. Both adapters call it.
    """
    kinds: tuple[type, ...] = (float,) if tensor is None else (float, tensor)
    if not isinstance(quantile, kinds):
        what = "a float" if tensor is None else "a float or a tensor"
        msg = (
            f"`quantile` must be {what} (as autoclip), got {quantile!r} "
            f"({type(quantile).__name__}); pass e.g. quantile=0.9"
        )
        raise TypeError(msg)
    if isinstance(history_length, bool) or not isinstance(history_length, int):
        msg = (
            f"`history_length` must be an int, got {history_length!r} "
            f"({type(history_length).__name__}); pass e.g. history_length=1000"
        )
        raise TypeError(msg)
    if tensor is not None and isinstance(quantile, tensor):
        if quantile.numel() != 1:  # type: ignore[attr-defined]
            msg = (
                f"`quantile` must hold one value, got a tensor of shape "
                f"{tuple(quantile.shape)}; pass a 0-d tensor or a float"  # type: ignore[attr-defined]
            )
            raise ValueError(msg)
        if not torch_readable(quantile):
            # not read: that would be a host sync, or a fake tensor's (its range is not checked;
            # a value outside [0, 1] gives the quantile rule's extrapolation instead of an error)
            q = 0.5
        else:
            q = float(quantile)  # type: ignore[arg-type]  # a one-element tensor
    else:
        q = float(quantile)  # type: ignore[arg-type]
    if not 0.0 <= q <= 1.0:
        msg = f"`quantile` must lie in [0, 1], got {q}; pass e.g. quantile=0.9"
        raise ValueError(msg)
    if history_length <= 0:
        msg = (
            f"`history_length` must be greater than zero, got {history_length}; pass e.g. "
            "history_length=1000"
        )
        raise ValueError(msg)


def check_spike_arguments(
    rolling_interval_length: Any, sigma_factor: Any, max_consecutive_errors: Any
) -> tuple[int, float, int | None]:
    """``skip_on_spike``'s numeric arguments, checked (both adapters)."""
    length = check_int(rolling_interval_length, "rolling_interval_length", minimum=2)
    sigma = check_real(sigma_factor, "sigma_factor", minimum=0.0)
    errors = check_int(max_consecutive_errors, "max_consecutive_errors", minimum=0, none=True)
    return length, sigma, errors


class History(NamedTuple):
    """A norm history: device arrays of one batch shape ``b`` (``()`` for one norm).

    ``count`` (int32, shape ``b``): how many values were recorded (saturates at 2**31 - 1).
    ``mean`` and ``var`` (shape ``b``): an exponential moving mean and variance (ZClip).
    ``window`` (shape ``b + (length,)``): the last ``length`` recorded values, a ring buffer
    whose slot ``count % length`` is written next.
    """

    count: Any
    mean: Any
    var: Any
    window: Any


def _c(xp: Namespace, value: float, like: Any) -> Any:
    return constant(xp, value, like.dtype, like)


def init_history(
    xp: Namespace, length: int, dtype: Any, device: Any = None, batch: tuple[int, ...] = ()
) -> History:
    """An empty :class:`History` holding ``length`` values (at least 1) per batch entry."""
    n = max(int(length), 1)
    zeros = xp.zeros(batch, dtype=dtype, device=device)
    return History(
        count=xp.zeros(batch, dtype=xp.int32, device=device),
        mean=zeros,
        var=xp.zeros(batch, dtype=dtype, device=device),
        window=xp.zeros((*batch, n), dtype=dtype, device=device),
    )


def record(xp: Namespace, h: History, value: Any, where: Any = None) -> History:
    """``h`` with ``value`` written into the window's next slot (only where ``where``)."""
    window = _recorded_window(xp, h, value, where)
    if where is None:
        return History(saturating_increment(xp, h.count), h.mean, h.var, window)
    # the count advances where `where` holds and it has not saturated: one select
    more = xp.logical_and(where, h.count < _c(xp, INT_MAX, h.count))
    count = xp.where(more, h.count + _c(xp, 1, h.count), h.count)
    return History(count, h.mean, h.var, window)


def _recorded_window(xp: Namespace, h: History, value: Any, where: Any = None) -> Any:
    """:func:`record`'s window: ``value`` in the slot ``count % length`` (where ``where``)."""
    length = h.window.shape[-1]
    slots = xp.arange(length, dtype=h.count.dtype, device=_device(h.window))
    slot = h.count % _c(xp, length, h.count)
    v = xp.astype(value, h.window.dtype, copy=False)  # read only: no copy
    hit = slots == slot[..., None]
    if where is not None:
        hit = xp.logical_and(hit, where[..., None])
    return xp.where(hit, v[..., None], h.window)


def _device(x: Any) -> Any:
    """The device for an array made beside ``x``: ``x``'s, or None (the default) on JAX.

    A JAX array made with ``device=`` is committed to it; made without, it follows the
    arrays it meets. optax's ``init`` makes the state uncommitted on the default device, and
    a state array's device committed to that one device clashed with gradients sharded over
    several ("Received incompatible devices"), eagerly.
    """
    xp = _namespace_of(x)
    if xp is not None and library(xp) == "jax":
        return None
    return device(x)


def _filled(xp: Namespace, h: History) -> tuple[Any, Any]:
    """The number of values in the window (``min(count, length)``) and the mask of them."""
    length = h.window.shape[-1]
    n = xp.minimum(h.count, _c(xp, length, h.count))
    slots = xp.arange(length, dtype=h.count.dtype, device=_device(h.window))
    return n, slots < n[..., None]


@_quiet
def window_quantile(xp: Namespace, h: History, q: Any) -> Any:
    """``torch.quantile(values, q)`` of the recorded values, over the window's last axis.

    torch's ``"linear"`` rule, op for op: rank ``q * (n - 1)`` in the values' dtype, the values
    at its floor and ceiling, ``torch.lerp`` between them (:func:`anyclip._numerics.lerp`:
    torch's fused multiply-add); NaN if any value is NaN. The value
    for an empty window is meaningless (callers select another). ``q``: a number, or a
    one-element array (cast to the values' dtype on their device, as ``torch.quantile`` takes
    a number; never read on the host).
    """
    w = h.window
    n, valid = _filled(xp, h)
    inf = _c(xp, math.inf, w)
    ordered = xp.sort(xp.where(valid, w, inf), axis=-1)
    last = xp.astype(xp.maximum(n - _c(xp, 1, n), _c(xp, 0, n)), w.dtype)
    if isinstance(q, (int, float)):
        qw = _c(xp, q, w)
    else:  # an array: its one value, in the values' dtype and on their device (no host read)
        qw = xp.reshape(xp.astype(xp.asarray(q, device=_device(w)), w.dtype), ())
    rank = qw * last
    lo = xp.floor(rank)
    hi = xp.ceil(rank)
    slots = xp.astype(xp.arange(w.shape[-1], device=_device(w)), w.dtype)
    zero = _c(xp, 0.0, w)
    below = xp.sum(xp.where(slots == lo[..., None], ordered, zero), axis=-1)
    above = xp.sum(xp.where(slots == hi[..., None], ordered, zero), axis=-1)
    interpolated = lerp(xp, below, above, rank - lo)
    has_nan = xp.any(xp.logical_and(valid, xp.isnan(w)), axis=-1)
    return xp.where(has_nan, _c(xp, math.nan, w), interpolated)


def _clip_coef(xp: Namespace, limit: Any, norm: Any) -> Any:
    """Torch's ``clip_grad_norm_`` factor for a number ``limit``, op for op, in ``norm``'s dtype.

    ``clip_grad_norm_`` takes ``max_norm = float(max_norm)`` (autoclip passes its quantile
    tensor) and computes ``clamp(max_norm / (total_norm + 1e-6), max=1.0)``, where a Python
    number over a tensor is ``Tensor.__rdiv__``: ``total_norm.reciprocal() * max_norm``. Each
    op with a Python number runs in torch's opmath dtype (float32 for float16 and bfloat16,
    the number rounded to it) and rounds to ``norm``'s dtype: ``norm + 1e-6``, the
    reciprocal and the product are each rounded once. A float16 reciprocal of a sum below
    ``2 ** -16`` is inf: the factor is then 1, or NaN where ``limit`` is 0 (``inf * 0``), as
    torch's. ``limit`` (the threshold: an array of any real dtype, or a Python number, as
    zclip's ``max_grad_norm``) enters as its value in the opmath dtype.
    """
    dt = norm.dtype
    # torch computes half precision in float32 (its opmath dtype) and rounds back
    wide = xp.float32 if dtype_name(dt) in HALF_PRECISION else dt

    def up(a: Any) -> Any:
        return a if a.dtype == wide else xp.astype(a, wide)

    def down(a: Any) -> Any:
        return rounded_here(xp, a if a.dtype == dt else xp.astype(a, dt))

    lim = constant(xp, limit, wide, norm) if isinstance(limit, numbers.Real) else up(limit)
    d = down(up(norm) + constant(xp, 1e-6, wide, norm))
    r = down(constant(xp, 1.0, wide, norm) / up(d))
    coef = down(up(r) * lim)
    return xp.minimum(coef, _c(xp, 1.0, coef))


@_quiet
def quantile_step(
    xp: Namespace,
    h: History,
    norm: Any,
    *,
    quantile: Any,
    formula: str = "torch",
    where: Any = None,
) -> tuple[Any, History]:
    """One step of AutoClip's ``QuantileClip``: the factor for the gradients, the new history.

    The threshold is :func:`window_quantile` of the norms recorded so far (``inf`` before the
    first); the factor is torch's ``clip_grad_norm_`` one (``formula="torch"``, autoclip's:
    :func:`_clip_coef`, in ``norm``'s dtype, which should be the gradients' own) or TF's
    ``clip_by_global_norm`` one (``formula="tf"``, in the history's dtype); then the pre-clip
    ``norm`` is recorded (in the history's dtype).
    Works elementwise over a batch of histories (one per parameter); ``where`` (bool, the
    batch shape) records only the entries that had a gradient.
    """
    given = norm
    norm = rounded_cast(xp, norm, h.window.dtype)  # a half-precision norm's rounding kept
    inf = _c(xp, math.inf, norm)
    threshold = xp.where(h.count == _c(xp, 0, h.count), inf, window_quantile(xp, h, quantile))
    if formula == "tf":
        factor = global_scale(xp, threshold, norm, "tf", unclipped_at_inf=True)
    else:
        factor = _clip_coef(xp, threshold, given)
    return factor, record(xp, h, norm, where=where)


def zclip_factor(xp: Namespace, limit: Any, norm: Any) -> Any:
    """Zclip's in-place factor: ``limit / (norm + 1e-6)`` where ``norm > limit``, else 1.

    ``ZClip.apply_in_place_clipping``'s ``clip_coef`` (a NaN ``norm`` or ``limit`` gives 1).
    """
    return xp.where(norm > limit, limit / (norm + _c(xp, 1e-6, norm)), _c(xp, 1.0, norm))


class ZClipStep(NamedTuple):
    """What :func:`zclip_step` returns: factor, new history, threshold, spike flag."""

    factor: Any
    history: History
    threshold: Any
    spike: Any


@_quiet
def zclip_step(
    xp: Namespace,
    h: History,
    norm: Any,
    *,
    alpha: float,
    z_thresh: float,
    max_grad_norm: float | None,
    eps: float,
    warmup_steps: int,
    mode: str,
    clip_option: str | None,
    clip_factor: float,
    skip_update_on_spike: bool,
    formula: str = "zclip",
    warm_norm: Any = None,
) -> ZClipStep:
    """One step of ``zclip`` 1.0's ``ZClip.step`` on the pre-clip global ``norm``.

    ``h.window`` holds the warm-up norms (its length is ``max(warmup_steps, 1)``, as zclip
    initialises after its first step when ``warmup_steps`` is 0). During warm-up the factor is
    torch's ``clip_grad_norm_(max_grad_norm)`` one; at its last step the EMA starts from the
    mean and population variance of the warm-up norms; ``warm_norm`` is the norm that
    ``clip_grad_norm_`` computes (torch's: the norm of the per-tensor norms, in the gradients'
    dtype; default ``norm``), and the warm-up factor is :func:`_clip_coef`'s, op for op, in
    its dtype. After it: zclip's threshold (z-score
    with ``adaptive_scaling`` or ``mean``, or ``percentile``), the effective limit
    ``min(threshold or norm, max_grad_norm)`` with Python's ``min`` rule (a NaN first operand
    wins), the factor ``limit / (norm + 1e-6)`` where ``norm > limit`` (``formula="zclip"``) or
    TF's factor (``formula="tf"``), and the EMA update with the threshold (or the norm), skipped
    on a spike when ``skip_update_on_spike``.
    """
    dtype = h.mean.dtype
    x = rounded_cast(xp, norm, dtype)  # a half-precision norm's rounding kept under jit
    one = _c(xp, 1.0, x)
    warm_len = h.window.shape[-1]
    warm = h.count < _c(xp, warm_len, h.count)

    # warm-up: record, initialise at the last warm-up step (the count before it is
    # warm_len - 1, so it is a warm-up step)
    window = _recorded_window(xp, h, x, where=warm)
    starts = h.count == _c(xp, warm_len - 1, h.count)
    n = _c(xp, float(warm_len), x)
    # zclip's Python sums, value after value (cumulative_sum adds in order on NumPy, torch's
    # CPU and array-api-strict; a pairwise sum differs in the last bits)
    mean0 = xp.cumulative_sum(window, axis=-1)[..., -1] / n
    dev = window - mean0[..., None]
    var0 = xp.cumulative_sum(dev * dev, axis=-1)[..., -1] / n
    if max_grad_norm is None:
        warm_factor = one
        warm_limit = _c(xp, math.inf, x)
    else:
        warm_limit = _c(xp, max_grad_norm, x)
        if formula == "tf":
            warm_factor = global_scale(xp, warm_limit, x, "tf")
        else:  # torch's clip_grad_norm_(max_norm=float), in its norm's dtype (exact in x's)
            # kept in its dtype where that is wider than the statistics' (torch's norm of
            # gradients of mixed dtypes is in the widest, a float64 factor for float64 ones)
            warm_factor = _clip_coef(xp, max_grad_norm, norm if warm_norm is None else warm_norm)

    # after warm-up: zclip's threshold and factor
    mean, var = h.mean, h.var
    # zclip's `var ** 0.5` (the C library's pow: correctly rounded but in rare cases), a
    # correctly rounded root here: torch's float64 pow(x, 0.5) on the CPU is not (1 ULP off
    # for about 1% of values, so thresholds and gradients were)
    std = sqrt(xp, var)
    zt = _c(xp, z_thresh, x)
    if mode == "percentile":
        clip_val = mean + zt * std
        spike = x > clip_val
    else:
        z = (x - mean) / (std + _c(xp, eps, x))
        spike = z > zt
        if clip_option == "mean":
            clip_val = mean
        else:
            eta = z / zt
            clip_val = (mean + (zt * std) / eta) * _c(xp, clip_factor, x)
    adaptive = xp.where(spike, clip_val, x)
    if max_grad_norm is None:
        limit = adaptive
    else:
        m = _c(xp, max_grad_norm, x)
        limit = xp.where(m < adaptive, m, adaptive)  # Python's min(adaptive, m)
    if formula == "tf":
        factor = global_scale(xp, limit, x, "tf")
    else:
        factor = zclip_factor(xp, limit, x)
    a = _c(xp, alpha, x)
    new_mean = a * mean + (one - a) * adaptive
    d = adaptive - new_mean
    new_var = a * var + (one - a) * (d * d)  # not `** 2`: NumPy 1.x squares a scalar in float64
    # the EMA is kept during warm-up (and on a spike with skip_update_on_spike), replaced by
    # the warm-up's mean and variance at its last step
    keep = xp.logical_or(warm, spike) if skip_update_on_spike else warm

    history = History(
        # a warm-up step counts one more too (the count is then below warm_len: no saturation)
        count=saturating_increment(xp, h.count),
        mean=xp.where(starts, mean0, xp.where(keep, mean, new_mean)),
        var=xp.where(starts, var0, xp.where(keep, var, new_var)),
        window=window,
    )
    wide = widest_float(xp, [warm_factor.dtype, factor.dtype])  # torch.compile traces it
    return ZClipStep(
        factor=xp.where(
            warm, xp.astype(warm_factor, wide, copy=False), xp.astype(factor, wide, copy=False)
        ),
        history=history,
        threshold=xp.where(warm, warm_limit, limit),
        spike=xp.logical_and(xp.logical_not(warm), spike),
    )


class SpikeDecision(NamedTuple):
    """What :func:`spike_step` returns.

    ``apply`` (bool): take the step. ``finite``: the norm (and loss) were finite.
    ``spike``: a finite step the sigma rule refused. ``norms`` and ``losses``: the new histories
    (only finite steps are recorded). ``notfinite_count``, ``total_notfinite``, ``skipped``
    (int32): consecutive and total non-finite steps (``optax.apply_if_finite``'s counters) and
    all steps not taken.
    """

    apply: Any
    finite: Any
    spike: Any
    norms: History
    losses: History | None
    notfinite_count: Any
    total_notfinite: Any
    skipped: Any


def _sigma_ok(xp: Namespace, h: History, x: Any, sigma: float) -> Any:
    """OLMo-core's test, one-sided: ``x - mean <= sigma * std`` (``std_mean`` of the window).

    The standard deviation is the unbiased one (NaN for one value, which refuses the step, as
    ``torch.std_mean`` of one value does in OLMo-core); a value below the mean always passes.
    """
    n, valid = _filled(xp, h)
    nf = xp.astype(n, h.window.dtype)
    zero = _c(xp, 0.0, h.window)
    mean = xp.sum(xp.where(valid, h.window, zero), axis=-1) / nf
    dev = xp.where(valid, h.window - mean[..., None], zero)
    std = xp.sqrt(xp.sum(dev * dev, axis=-1) / (nf - _c(xp, 1.0, nf)))
    return (x - mean) <= _c(xp, sigma, std) * std


@_quiet
def spike_step(
    xp: Namespace,
    norms: History,
    norm: Any,
    notfinite_count: Any,
    total_notfinite: Any,
    skipped: Any,
    *,
    sigma_factor: float,
    losses: History | None = None,
    loss: Any = None,
    max_consecutive_errors: int | None = None,
) -> SpikeDecision:
    """Decide whether to take a step: OLMo-core's sigma rule and ``optax.apply_if_finite``.

    A step whose ``norm`` (or ``loss``) is inf or NaN is not taken, unless more than
    ``max_consecutive_errors`` such steps came in a row (optax's rule; ``None``: never), and is
    not recorded. A finite step is recorded; while fewer than ``max(2, length // 2)`` values
    (this one included) are recorded it is taken, after that only if its norm (and loss) exceed
    the mean of the previous ``length`` values by at most ``sigma_factor`` of their unbiased
    standard deviation: OLMo-core's ``get_step_factor``, ``value - mean <= sigma_factor *
    std``, one-sided (a value below the mean passes) and ``<=``, so NaN statistics (one
    previous value: the second step when ``length < 6``) refuse the step.
    """
    # a half-precision norm (and loss) widened with its rounding kept: under jax.jit XLA
    # dropped a cast down before the cast up, and recorded the unrounded value
    x = rounded_cast(xp, norm, norms.window.dtype)
    finite = xp.isfinite(x)
    if losses is not None:
        lv = rounded_cast(xp, loss, losses.window.dtype)
        finite = xp.logical_and(finite, xp.isfinite(lv))
    length = norms.window.shape[-1]
    # OLMo-core keeps at most length + 1 values (this one included) and tests that number
    seen = xp.minimum(norms.count, _c(xp, length, norms.count)) + _c(xp, 1, norms.count)
    warm = seen < _c(xp, max(2, length // 2), norms.count)
    ok = _sigma_ok(xp, norms, x, sigma_factor)
    new_losses = None
    if losses is not None:
        ok = xp.logical_and(ok, _sigma_ok(xp, losses, lv, sigma_factor))
        new_losses = record(xp, losses, lv, where=finite)
    passes = xp.logical_or(warm, ok)
    # optax.apply_if_finite's counters and rule (None: never give up; the count saturates at
    # INT_MAX, so it never exceeds it): a non-finite step is taken only when it gives up
    counted = if_finite_step(
        xp,
        finite,
        notfinite_count,
        total_notfinite,
        INT_MAX if max_consecutive_errors is None else max_consecutive_errors,
    )
    apply = xp.where(finite, passes, counted.apply)
    return SpikeDecision(
        apply=apply,
        finite=finite,
        spike=xp.logical_and(finite, xp.logical_not(passes)),
        norms=record(xp, norms, x, where=finite),
        losses=new_losses,
        notfinite_count=counted.notfinite_count,
        total_notfinite=counted.total_notfinite,
        skipped=xp.where(apply, skipped, saturating_increment(xp, skipped)),
    )
