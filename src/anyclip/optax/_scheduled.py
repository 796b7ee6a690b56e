"""Scheduled thresholds for the optax clippers: a step -> value callable, a count in the state.

Layer: public adapter over :mod:`anyclip._clip`, :mod:`anyclip.tree` and
:mod:`anyclip._schedule`. :func:`anyclip.optax.clip_by_global_norm`,
:func:`anyclip.optax.clip_by_norm` and :func:`anyclip.optax.keras_clipping` come here when
their threshold is callable (an optax schedule, or any ``count -> value`` function); with a
number they keep their stateless ``optax.EmptyState()``, so old checkpoints still load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from anyclip import _clip, _clip_tensor, _schedule, tree
from anyclip._compat import namespace
from anyclip._kernels import kernels_for
from anyclip._typing import Nonfinite
from anyclip.optax._common import _norm_dtype

__all__ = [
    "ScheduledClipState",
    "keras_on_device",
    "scheduled_clip_by_norm",
    "scheduled_global_norm",
    "scheduled_keras",
]

Schedule = Callable[[jax.Array], Any]


class ScheduledClipState(NamedTuple):
    """State of a clipper with a scheduled threshold: the step count (and the last norm).

    ``count`` (int32) is the number of updates so far, the argument of the schedule, as in
    optax's ``ScaleByScheduleState``; ``global_norm`` is the last pre-clip norm with
    ``norm_in_state=True``, else ``None``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from anyclip.optax import ScheduledClipState
    >>> ScheduledClipState(jnp.zeros([], jnp.int32)).count
    Array(0, dtype=int32)
    """

    count: jax.Array  # type: ignore[assignment]  # optax's name (tuple.count is shadowed)
    global_norm: jax.Array | None = None


def _count() -> jax.Array:
    return jnp.zeros([], jnp.int32)


def _value(schedule: Schedule, count: jax.Array) -> jax.Array:
    """The schedule at ``count``, as a 0-d array (on device; no host read)."""
    return jnp.asarray(schedule(count))


def scheduled_global_norm(
    schedule: Schedule,
    accumulate_dtype: Any,
    policy: Nonfinite,
    norm_in_state: bool,
    group: Any,
) -> optax.GradientTransformation:
    """:func:`anyclip.optax.clip_by_global_norm` with ``max_norm = schedule(count)``."""

    def init_fn(params: Any) -> ScheduledClipState:
        if not norm_in_state:
            return ScheduledClipState(_count())
        leaves = tree.flatten(params)[0]
        dtype = jnp.promote_types(_norm_dtype(leaves, accumulate_dtype), jnp.float32)
        return ScheduledClipState(_count(), jnp.zeros((), dtype))

    def update_fn(
        updates: Any, state: ScheduledClipState, params: Any = None
    ) -> tuple[Any, ScheduledClipState]:
        del params
        leaves, unflatten = tree.flatten(updates)
        # the threshold in the norm's dtype, as TF converts a number (known at trace time)
        c = _value(schedule, state.count).astype(_norm_dtype(leaves, accumulate_dtype))
        clipped, norm = _clip._clip_global(
            None, leaves, c, None, accumulate_dtype, policy, group, unclipped_at_inf=True
        )
        kept = None if state.global_norm is None else norm.astype(state.global_norm.dtype)
        return unflatten(clipped), ScheduledClipState(optax.safe_increment(state.count), kept)

    return optax.GradientTransformation(init_fn, update_fn)


def scheduled_clip_by_norm(
    schedule: Schedule, axes: Any, accumulate_dtype: Any
) -> optax.GradientTransformation:
    """:func:`anyclip.optax.clip_by_norm` with ``clip_norm = schedule(count)``."""

    def update_fn(
        updates: Any, state: ScheduledClipState, params: Any = None
    ) -> tuple[Any, ScheduledClipState]:
        del params
        c = _value(schedule, state.count)
        out = tree.clip_by_norm(updates, c, axes, accumulate_dtype=accumulate_dtype)
        return out, ScheduledClipState(optax.safe_increment(state.count))

    return optax.GradientTransformation(lambda params: ScheduledClipState(_count()), update_fn)


def keras_on_device(name: str, c: Any, updates: Any) -> Any:
    """Keras's option ``name`` at the 0-d array ``c`` on ``updates``: 0 or less clips nothing.

    The rule of :func:`anyclip.optax.keras_clipping` taken on device, for a scheduled value
    and for an array value (``optax.inject_hyperparams`` passes one, traced under
    ``jax.jit``): ``clipnorm`` is TF's ``clip_by_norm`` of each leaf, ``global_clipnorm``
    Keras's global factor (its ``1.0 / c`` divided in the norm's dtype), ``clipvalue``
    ``clip(u, -c, c)`` with ``c`` cast to each leaf's dtype (as Keras's ``ops.clip`` takes
    a number); a NaN value clips nothing, as Keras's ``nan > 0`` is False.
    """
    xp = namespace(c)
    leaves, unflatten = tree.flatten(updates)
    if name in ("clipnorm", "clipvalue"):
        if name == "clipnorm":
            clipped = [None if t is None else _clip_tensor.clip_by_norm(t, c) for t in leaves]
        else:
            clipped = [None if t is None else _clip_value(t, c) for t in leaves]
        out = [
            None if t is None else _schedule.keras_gate(xp, c, k, t)
            for t, k in zip(leaves, clipped, strict=True)
        ]
    else:
        present = [t for t in leaves if t is not None]
        norm = _clip.keras_global_norm(present)  # Keras's: float16 squares unhalved
        k = kernels_for(xp, present) if present else None
        scale = _schedule.keras_global_scale(xp, c, norm, k)
        out = k.scale(xp, leaves, scale) if k is not None else leaves
    return unflatten(out)


def _clip_value(t: Any, c: Any) -> Any:
    """``clip(t, -c, c)`` with the 0-d array ``c`` cast to ``t``'s dtype, as TF's bounds."""
    d = c if c.dtype == t.dtype else c.astype(t.dtype)
    return _clip_tensor.clip_by_value(t, -d, d)


def scheduled_keras(name: str, schedule: Schedule) -> optax.GradientTransformation:
    """:func:`anyclip.optax.keras_clipping` with ``clipnorm`` or ``global_clipnorm`` scheduled.

    At each step Keras's rule on the value: 0 or less (or NaN) clips nothing.
    """

    def update_fn(
        updates: Any, state: ScheduledClipState, params: Any = None
    ) -> tuple[Any, ScheduledClipState]:
        del params
        out = keras_on_device(name, _value(schedule, state.count), updates)
        return out, ScheduledClipState(optax.safe_increment(state.count))

    return optax.GradientTransformation(lambda params: ScheduledClipState(_count()), update_fn)
