"""optax ``GradientTransformation``s that clip with TF's formulas.

Layer: public adapter over :mod:`anyclip.tree`.

Use them in an ``optax.chain`` where ``optax.clip_by_global_norm`` (which divides first and
leaves the updates unchanged below the threshold) or ``optax.clip`` would be:

>>> import jax.numpy as jnp
>>> import optax
>>> import anyclip.optax
>>> tx = optax.chain(anyclip.optax.clip_by_global_norm(1.0), optax.sgd(0.1))
>>> params = {"w": jnp.array([3.0, 4.0], dtype=jnp.float32)}
>>> state = tx.init(params)
>>> updates, state = tx.update(params, state, params)
>>> updates["w"]
Array([-0.06      , -0.08000001], dtype=float32)
>>> state[0].global_norm  # the last norm before clipping, for logging
Array(5., dtype=float32)

Importing this module imports jax and optax; ``import anyclip`` alone does not.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from anyclip import tree
from anyclip._compat import namespace
from anyclip._policy import check_nonfinite, resolve_accumulate_dtype
from anyclip._typing import DTypeLike, Nonfinite

__all__ = [
    "ClipByGlobalNormState",
    "clip_by_global_norm",
    "clip_by_norm",
    "clip_by_value",
]


class ClipByGlobalNormState(NamedTuple):
    """State of :func:`clip_by_global_norm`: the global norm of the last updates, pre-clip."""

    global_norm: jax.Array


def _norm_dtype(params: Any, accumulate_dtype: Any) -> Any:
    leaves = [leaf for leaf in tree.flatten(params)[0] if leaf is not None]
    dtypes = [leaf.dtype for leaf in leaves if jnp.issubdtype(leaf.dtype, jnp.floating)]
    if not dtypes:
        return jnp.float32
    acc = resolve_accumulate_dtype(namespace(jnp.zeros(0)), accumulate_dtype, dtypes)
    return dtypes[0] if acc is None else acc


def clip_by_global_norm(
    clip_norm: float,
    *,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    group: str | tuple[str, ...] | None = None,
) -> optax.GradientTransformation:
    """Clip the updates by their global norm with TF's formula; keep the norm in the state.

    Parameters
    ----------
    clip_norm : float
        The largest global norm.
    accumulate_dtype : dtype, str, "widest" or None, optional
        As in :func:`anyclip.tree.global_norm`.
    nonfinite : {"tf", "torch", "skip"}, optional
        What an inf or NaN global norm does (see :func:`anyclip.clip_by_global_norm`);
        ``"raise"`` reads the norm on the host and does not work under ``jax.jit``.
    group : str or tuple of str, optional
        Inside ``shard_map`` or ``pmap``: the axis name(s) over which the updates are split;
        the norm is then the global one (one ``jax.lax.psum`` of a scalar). Under ``jit``
        with sharded arrays no ``group`` is needed.

    Returns
    -------
    optax.GradientTransformation
        Its state is a :class:`ClipByGlobalNormState` holding the last pre-clip norm.

    Raises
    ------
    ValueError
        If ``nonfinite`` is not one of the policies (checked here, not at the first update).
    """
    policy = check_nonfinite(nonfinite)

    def init_fn(params: Any) -> ClipByGlobalNormState:
        return ClipByGlobalNormState(jnp.zeros((), _norm_dtype(params, accumulate_dtype)))

    def update_fn(
        updates: Any, state: ClipByGlobalNormState, params: Any = None
    ) -> tuple[Any, ClipByGlobalNormState]:
        del params
        clipped, norm = tree.clip_by_global_norm(
            updates, clip_norm, accumulate_dtype=accumulate_dtype, nonfinite=policy, group=group
        )
        return clipped, ClipByGlobalNormState(norm.astype(state.global_norm.dtype))

    return optax.GradientTransformation(init_fn, update_fn)


def _stateless(fn: Any) -> optax.GradientTransformation:
    def update_fn(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        del params
        return fn(updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def clip_by_norm(
    clip_norm: float, axes: Any = None, *, accumulate_dtype: Any = None
) -> optax.GradientTransformation:
    """Clip every update leaf to norm ``clip_norm`` over ``axes`` (TF's ``clip_by_norm``)."""
    return _stateless(
        lambda u: tree.clip_by_norm(u, clip_norm, axes, accumulate_dtype=accumulate_dtype)
    )


def clip_by_value(clip_value_min: float, clip_value_max: float) -> optax.GradientTransformation:
    """Clip every update leaf to ``[clip_value_min, clip_value_max]`` (TF's ``clip_by_value``)."""
    return _stateless(lambda u: tree.clip_by_value(u, clip_value_min, clip_value_max))
