"""Norm-history rules for optax: :func:`zclip`, :func:`quantile_clip`, :func:`skip_on_spike`.

Layer: public adapter over :mod:`anyclip._history` (the formulas) and
:func:`anyclip.tree.global_norm`; :mod:`anyclip.optax` re-exports the names in ``__all__``.
Each state is a ``NamedTuple`` of arrays (a pytree: checkpointable, ``jit``-able); the whole
update runs under ``jax.jit``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from anyclip import _clip, _history, tree
from anyclip._history import History, check_choice, check_int, check_real
from anyclip._kernels._tforder_xp import rounded_apart, rounded_cast
from anyclip._keywords import hints_keywords
from anyclip.optax._common import _jax_ordered, _norm_dtype, _take_or_skip

__all__ = [
    "QuantileClipState",
    "SkipOnSpikeState",
    "ZClipState",
    "quantile_clip",
    "skip_on_spike",
    "zclip",
]


def _state_dtype(params: Any) -> Any:
    return jnp.promote_types(_norm_dtype(params, "widest"), jnp.float32)


def _torch_norm(updates: Any, group: Any = None) -> Any:
    """The global norm of ``updates`` as torch's ``clip_grad_norm_`` takes it (autoclip's).

    In the widest leaf dtype; where that is float16 or bfloat16, or the leaves' dtypes
    differ, as :class:`anyclip.torch.QuantileClip`'s (a float16 norm above 256 stays
    finite): each leaf's norm in its dtype (float16 and bfloat16 squares summed in float32,
    the norm rounded to the dtype), then the norm of those norms in the widest dtype (in
    float32 for halves, rounded once more: torch's ``clip_grad_norm_``); with ``group``
    the squares of all leaves are summed in float32, all-reduced in float32 and the norm
    rounded once. Other dtypes: :func:`anyclip.tree.global_norm`'s.
    """
    dt = _norm_dtype(updates, "widest")
    leaves = [leaf for leaf in _jax_ordered(updates)[0] if leaf is not None]
    mixed = len({leaf.dtype for leaf in leaves}) > 1
    if group is None and (mixed or dt in (jnp.float16, jnp.bfloat16)):
        # torch's: each leaf's norm in its own dtype, stacked in the widest (a float16 or
        # bfloat16 leaf's norm rounded to its dtype beside float32 ones: torch groups the
        # tensors by dtype, then stacks their norms)
        norms = jnp.stack([rounded_cast(jnp, _leaf_norm(leaf, "torch"), dt) for leaf in leaves])
        if dt in (jnp.float16, jnp.bfloat16):
            return rounded_cast(jnp, _clip.global_norm([norms], accumulate_dtype=jnp.float32), dt)
        return _clip.global_norm([norms])
    if dt in (jnp.float16, jnp.bfloat16):
        total = tree.global_norm(updates, accumulate_dtype=jnp.float32, group=group)
        return rounded_cast(jnp, total, dt)
    return tree.global_norm(updates, group=group)


def _leaf_norm(leaf: Any, formula: str) -> Any:
    """One leaf's norm in its dtype: :func:`_torch_norm`'s rule (``"torch"``) or TF's."""
    if formula == "torch" and leaf.dtype in (jnp.float16, jnp.bfloat16):
        # rounded to the dtype also under jax.jit, where XLA drops a cast down before a cast
        # up (the history keeps the norm in float32)
        return rounded_cast(
            jnp, _clip.global_norm([leaf], accumulate_dtype=jnp.float32), leaf.dtype
        )
    return _clip.global_norm([leaf])


def _zclip_norm(updates: Any, group: Any = None) -> Any:
    """The norm of ``updates`` as zclip 1.0 takes it, op for op (its ``_compute_grad_norm``).

    Each leaf cast to the first leaf's dtype (in JAX's order) and its norm taken (torch's:
    float16 and bfloat16 squares summed in float32, the norm rounded to the dtype), then
    ``sqrt(sum(norms ** 2))`` in that dtype (the squares rounded to it, so a float16 norm from
    256 squares to inf; the sum accumulated in float32 for halves, as torch's), each
    rounding made under ``jax.jit`` too. With ``group``:
    :func:`anyclip.tree.global_norm`'s.
    """
    leaves = [leaf for leaf in _jax_ordered(updates)[0] if leaf is not None]
    if group is not None or not leaves:
        return tree.global_norm(updates, group=group)
    dt = leaves[0].dtype
    norms = jnp.stack([_leaf_norm(rounded_cast(jnp, leaf, dt), "torch") for leaf in leaves])
    squares = norms * norms
    if dt in (jnp.float16, jnp.bfloat16):
        # each square and the sum rounded to the dtype, as torch rounds them: under jax.jit
        # XLA computes half-precision products in float32 and drops a cast down before a
        # cast up (1 ULP off zclip's norm in 10 of 300 random bfloat16 trees)
        total = jnp.sum(rounded_cast(jnp, squares, jnp.float32))
        return rounded_apart(jnp, jnp.sqrt(rounded_cast(jnp, total, dt)))
    # each square rounded before the sum, as eagerly: not a fused multiply-add under jax.jit
    return jnp.sqrt(jnp.sum(rounded_apart(jnp, squares)))


def _scale(updates: Any, factor: Any) -> Any:
    return jax.tree.map(lambda u: None if u is None else u * factor.astype(u.dtype), updates)


def _scale_opmath(updates: Any, factor: Any) -> Any:
    """``updates`` times ``factor`` as torch's ``grad.mul_(number)``: in float32 for halves."""

    def one(u: Any) -> Any:
        if u is None:
            return None
        if u.dtype in (jnp.float16, jnp.bfloat16):
            return (u.astype(jnp.float32) * factor.astype(jnp.float32)).astype(u.dtype)
        return u * factor.astype(u.dtype)

    return jax.tree.map(one, updates)


class ZClipState(NamedTuple):
    """State of :func:`zclip`: the norm history (count, EMA mean and variance, warm-up norms).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> state = anyclip.optax.zclip(warmup_steps=3).init({"w": jnp.zeros(2)})
    >>> state.history.window.shape
    (3,)
    """

    history: History


@hints_keywords
def zclip(
    alpha: float = 0.97,
    z_thresh: float = 2.5,
    max_grad_norm: float | None = 1.0,
    eps: float = 1e-6,
    warmup_steps: int = 25,
    mode: str = "zscore",
    clip_option: str = "adaptive_scaling",
    clip_factor: float = 1.0,
    skip_update_on_spike: bool = False,
    *,
    formula: str = "zclip",
    group: str | tuple[str, ...] | None = None,
) -> optax.GradientTransformation:
    """ZClip (``zclip`` 1.0's arguments and numbers) as an optax transformation.

    The rule of :class:`anyclip.torch.ZClip`, on zclip's norm of the updates (each leaf's
    norm, then ``sqrt(sum(norms ** 2))``, in the first leaf's dtype, the first of
    ``jax.tree.leaves``, whose dicts are in sorted key order as under ``jax.jit``; with ``group``,
    :func:`anyclip.tree.global_norm`'s): clipped to ``max_grad_norm`` during
    ``warmup_steps`` (torch's ``clip_grad_norm_``: its norm of the leaves' norms and its
    factor, op for op), then to zclip's adaptive threshold from the EMA mean and variance of
    the norm; the factor multiplies float16 and bfloat16 updates in float32 (torch's product
    with a Python float). In float16 and bfloat16 the norm and the warm-up are zclip's bit
    for bit (float32: within an ulp of torch's CPU reductions).

    Parameters
    ----------
    alpha, z_thresh, max_grad_norm, eps, warmup_steps, mode, clip_option, clip_factor, \
skip_update_on_spike
        zclip 1.0's arguments, with its defaults and meaning.
    formula : {"zclip", "tf"}, optional
        zclip's factor ``limit / (norm + 1e-6)`` (default) or TF's ``clip_by_global_norm``.
    group : str or tuple of str, optional
        Inside ``shard_map`` or ``pmap``: the axis name(s) the updates are split over; the
        norm (and so the state) is then the global one on every device.

    Returns
    -------
    optax.GradientTransformation
        Its state is a :class:`ZClipState`.

    See Also
    --------
    zclip.ZClip : the reference; anyclip.torch.ZClip : the torch drop-in.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> tx = anyclip.optax.zclip(warmup_steps=2, max_grad_norm=None)
    >>> state = tx.init(jnp.zeros(2, dtype=jnp.float32))
    >>> for g in ([3.0, 4.0], [0.6, 0.8], [30.0, 40.0]):
    ...     u, state = tx.update(jnp.array(g, dtype=jnp.float32), state)
    >>> u
    Array([2.1191492, 2.8255322], dtype=float32)
    """
    m, option = _history.check_zclip_options(mode, clip_option)
    f = check_choice(formula, "formula", ("zclip", "tf"))
    cap = check_real(max_grad_norm, "max_grad_norm", none=True)
    a = check_real(alpha, "alpha")
    zt = check_real(z_thresh, "z_thresh")
    e = check_real(eps, "eps")
    cf = check_real(clip_factor, "clip_factor")
    warm = check_int(warmup_steps, "warmup_steps", minimum=0)

    def init_fn(params: Any) -> ZClipState:
        return ZClipState(_history.init_history(jnp, warm, _state_dtype(params)))

    def update_fn(updates: Any, state: ZClipState, params: Any = None) -> tuple[Any, ZClipState]:
        del params
        norm = (
            _zclip_norm(updates, group) if f == "zclip" else tree.global_norm(updates, group=group)
        )
        warm_norm = _torch_norm(updates, group) if f == "zclip" and cap is not None else None
        out = _history.zclip_step(
            jnp,
            state.history,
            norm,
            alpha=a,
            z_thresh=zt,
            max_grad_norm=cap,
            eps=e,
            warmup_steps=warm,
            mode=m,
            clip_option=option,
            clip_factor=cf,
            skip_update_on_spike=bool(skip_update_on_spike),
            formula=f,
            warm_norm=warm_norm,
        )
        scale = _scale_opmath if f == "zclip" else _scale
        return scale(updates, out.factor), ZClipState(out.history)

    return optax.GradientTransformation(init_fn, update_fn)


class QuantileClipState(NamedTuple):
    """State of :func:`quantile_clip`: the norm history, one row per leaf (or one, global).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> tx = anyclip.optax.quantile_clip(history_length=4)
    >>> tx.init({"a": jnp.zeros(2), "b": jnp.zeros(3)}).history.window.shape
    (2, 4)
    """

    history: History


@hints_keywords
def quantile_clip(
    quantile: float = 0.9,
    history_length: int = 1000,
    global_threshold: bool = False,
    *,
    formula: str = "torch",
    group: str | tuple[str, ...] | None = None,
) -> optax.GradientTransformation:
    """AutoClip (``autoclip`` 0.2's ``QuantileClip`` numbers) as an optax transformation.

    Each leaf is clipped to the ``quantile`` of its last ``history_length`` pre-clip norms
    (or, with ``global_threshold=True``, the global norm to that of its history), as
    :class:`anyclip.torch.QuantileClip`; the history is a fixed-size buffer in the state,
    a row per leaf in ``jax.tree.leaves``'s order (a dict's keys sorted, as ``jax.jit``
    passes it), so a state works eagerly, under ``jax.jit`` and with dicts built in any order.

    Parameters
    ----------
    quantile : float, optional
        Between 0 and 1.
    history_length : int, optional
        How many past norms are kept (at least 1).
    global_threshold : bool, optional
        Clip the global norm instead of each leaf's.
    formula : {"torch", "tf"}, optional
        torch's ``clip_grad_norm_`` factor and norm (default, autoclip's: float16 and
        bfloat16 squares summed in float32, each leaf's norm rounded to the updates' dtype,
        and the factor computed in that dtype op for op as torch does: autoclip's bits) or
        TF's (float16 squares summed in float16: inf from 256, as TF's).
    group : str or tuple of str, optional
        With ``global_threshold=True`` inside ``shard_map``/``pmap``: the axis name(s).

    Returns
    -------
    optax.GradientTransformation
        Its state is a :class:`QuantileClipState`.

    See Also
    --------
    autoclip.torch.QuantileClip : the reference; anyclip.torch.QuantileClip : torch's.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> tx = anyclip.optax.quantile_clip(quantile=0.5, history_length=10)
    >>> state = tx.init(jnp.zeros(2, dtype=jnp.float32))
    >>> for g in ([3.0, 4.0], [6.0, 8.0], [30.0, 40.0]):
    ...     u, state = tx.update(jnp.array(g, dtype=jnp.float32), state)
    >>> u
    Array([4.4999995, 5.9999995], dtype=float32)
    """
    _history.check_quantile_arguments(quantile, history_length)
    f = check_choice(formula, "formula", ("torch", "tf"))

    def init_fn(params: Any) -> QuantileClipState:
        leaves = [leaf for leaf in tree.flatten(params)[0] if leaf is not None]
        batch = () if global_threshold else (len(leaves),)
        return QuantileClipState(
            _history.init_history(jnp, history_length, _state_dtype(params), batch=batch)
        )

    def update_fn(
        updates: Any, state: QuantileClipState, params: Any = None
    ) -> tuple[Any, QuantileClipState]:
        del params
        h = state.history
        if global_threshold:
            norm = (
                _torch_norm(updates, group)
                if f == "torch"
                else tree.global_norm(updates, group=group)
            )
            factor, new = _history.quantile_step(jnp, h, norm, quantile=quantile, formula=f)
            # torch multiplies float16 and bfloat16 gradients by its factor in float32 (a
            # factor of a wider norm, for leaves of several dtypes, is not rounded first)
            scale = _scale_opmath if f == "torch" else _scale
            return scale(updates, factor), QuantileClipState(new)
        # a history row per leaf, in JAX's order (that of jax.jit's dicts)
        leaves, unflatten = _jax_ordered(updates)
        present = [leaf for leaf in leaves if leaf is not None]
        # the norms in the leaves' dtype (the factors', as torch's per gradient); the
        # history keeps them in its own
        own = [_leaf_norm(leaf, f) for leaf in present]
        norms = jnp.stack(own)
        factors, new = _history.quantile_step(jnp, h, norms, quantile=quantile, formula=f)
        # autoclip clips each parameter alone: its threshold in its own history's dtype
        # (float32 for float16 and bfloat16 norms) and its factor in its norm's dtype. Where
        # the leaves' dtypes differ, each dtype's rows come from the batch computed in it
        by_dtype = {}
        for d in {n.dtype for n in own}:
            wide = jnp.promote_types(d, jnp.float32)
            if d != norms.dtype or wide != h.window.dtype:
                h_d = h._replace(window=h.window.astype(wide))
                by_dtype[d] = _history.quantile_step(
                    jnp, h_d, norms.astype(d), quantile=quantile, formula=f
                )[0]
        it = iter(range(len(present)))
        scaled: list[Any] = []
        for leaf in leaves:
            if leaf is None:
                scaled.append(None)
                continue
            j = next(it)
            factor = by_dtype.get(own[j].dtype, factors)[j]
            scaled.append(leaf * factor.astype(leaf.dtype))
        return unflatten(scaled), QuantileClipState(new)

    return optax.GradientTransformation(init_fn, update_fn)


class SkipOnSpikeState(NamedTuple):
    """State of :func:`skip_on_spike`.

    ``norms`` (and ``losses`` with ``on_loss=True``, else ``None``): the recorded norms.
    ``notfinite_count``, ``last_finite``, ``total_notfinite``: ``optax.apply_if_finite``'s.
    ``skipped``: all steps skipped (spikes and non-finite), for logging. ``inner_state``: the
    wrapped transformation's, unchanged by a skipped step.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import optax
    >>> import anyclip.optax
    >>> tx = anyclip.optax.skip_on_spike(optax.sgd(0.1))
    >>> int(tx.init(jnp.zeros(2)).skipped)
    0
    """

    norms: History
    losses: History | None
    notfinite_count: Any
    last_finite: Any
    total_notfinite: Any
    skipped: Any
    inner_state: Any


@hints_keywords
def skip_on_spike(
    inner: optax.GradientTransformation,
    rolling_interval_length: int = 128,
    sigma_factor: float = 6,
    *,
    on_loss: bool = False,
    max_consecutive_errors: int | None = None,
    group: str | tuple[str, ...] | None = None,
) -> optax.GradientTransformationExtraArgs:
    """Skip ``inner``'s update on a norm (or loss) spike or a non-finite norm.

    The rule of :func:`anyclip.torch.skip_on_spike`: OLMo-core's ``SkipStepOptimizer`` (more
    than ``sigma_factor`` unbiased standard deviations above the mean of the previous
    ``rolling_interval_length`` values, once ``max(2, rolling_interval_length // 2)``, this one
    included, are seen)
    and ``optax.apply_if_finite`` (a non-finite norm or loss; give up after
    ``max_consecutive_errors`` in a row). A skipped step returns zero updates and keeps
    ``inner``'s state (``lax.cond``, as ``apply_if_finite``). "Non-finite" is read from the
    global norm of the updates, which is inf or NaN whenever an update is (and also when finite
    updates overflow the sum of squares, which ``apply_if_finite`` lets through). Eagerly,
    updates of the same shapes after the first reuse one compiled program.

    Parameters
    ----------
    inner : optax.GradientTransformation
        The transformation to wrap (every extra argument, ``loss`` included, is passed on to
        it).
    rolling_interval_length : int, optional
        The window of past values (at least 2).
    sigma_factor : float, optional
        How many standard deviations above the mean a value may lie.
    on_loss : bool, optional
        Also test the loss: ``update(..., loss=loss)``.
    max_consecutive_errors : int, optional
        Accept the update after this many non-finite ones in a row; ``None``: never.
    group : str or tuple of str, optional
        Inside ``shard_map``/``pmap``: the axis name(s) the norm is reduced over.

    Returns
    -------
    optax.GradientTransformationExtraArgs
        Its state is a :class:`SkipOnSpikeState`.

    See Also
    --------
    optax.apply_if_finite, anyclip.torch.skip_on_spike

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import optax
    >>> import anyclip.optax
    >>> tx = anyclip.optax.skip_on_spike(optax.sgd(0.1))
    >>> state = tx.init(jnp.zeros(2, dtype=jnp.float32))
    >>> u, state = tx.update(jnp.array([jnp.nan, 1.0], dtype=jnp.float32), state)
    >>> u, state.skipped
    (Array([0., 0.], dtype=float32), Array(1, dtype=int32))
    """
    length, sigma, errors = _history.check_spike_arguments(
        rolling_interval_length, sigma_factor, max_consecutive_errors
    )
    if not (callable(getattr(inner, "init", None)) and callable(getattr(inner, "update", None))):
        msg = (
            "`inner` must be an optax GradientTransformation (with `init` and `update`), got "
            f"{type(inner).__name__}; pass e.g. optax.sgd(0.1)"
        )
        raise TypeError(msg)
    inner = optax.with_extra_args_support(inner)
    take_or_skip = _take_or_skip(inner)

    def init_fn(params: Any) -> SkipOnSpikeState:
        dt = _state_dtype(params)
        # an array per counter: a state whose leaves share a buffer cannot be donated
        # (jax.jit(..., donate_argnums=...): "Attempt to donate the same buffer twice")
        return SkipOnSpikeState(
            norms=_history.init_history(jnp, length, dt),
            losses=_history.init_history(jnp, length, dt) if on_loss else None,
            notfinite_count=jnp.zeros([], jnp.int32),
            last_finite=jnp.array(True),
            total_notfinite=jnp.zeros([], jnp.int32),
            skipped=jnp.zeros([], jnp.int32),
            inner_state=inner.init(params),
        )

    def update_fn(
        updates: Any, state: SkipOnSpikeState, params: Any = None, **extra_args: Any
    ) -> tuple[Any, SkipOnSpikeState]:
        loss = extra_args.get("loss")  # passed on as well, as optax.chain passes every extra
        if on_loss and loss is None:
            msg = "`loss` is needed at every update with on_loss=True; pass update(..., loss=loss)"
            raise TypeError(msg)
        norm = tree.global_norm(updates, group=group)
        d = _history.spike_step(
            jnp,
            state.norms,
            norm,
            state.notfinite_count,
            state.total_notfinite,
            state.skipped,
            sigma_factor=sigma,
            losses=state.losses,
            loss=None if loss is None else jnp.asarray(loss),
            max_consecutive_errors=errors,
        )
        new_updates, inner_state = take_or_skip(
            d.apply, updates, state.inner_state, params, extra_args
        )
        return new_updates, SkipOnSpikeState(
            norms=d.norms,
            losses=d.losses,
            notfinite_count=d.notfinite_count,
            last_finite=d.finite,
            total_notfinite=d.total_notfinite,
            skipped=d.skipped,
            inner_state=inner_state,
        )

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
