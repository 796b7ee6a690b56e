"""optax ``GradientTransformation``s that clip with TF's formulas.

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
from anyclip._convert import resolve_accumulate_dtype
from anyclip._core import NONFINITE_POLICIES

__all__ = [
    "ClipByGlobalNormState",
    "clip_by_global_norm",
    "clip_by_norm",
    "clip_by_value",
]


class ClipByGlobalNormState(NamedTuple):
    """State of :func:`clip_by_global_norm`: the global norm of the last updates, pre-clip.

    Its dtype is fixed at ``init`` (a state's dtypes must not change between steps under
    ``jax.jit`` and ``lax.scan``): float32, or float64 when the parameters' norm dtype is
    float64. A float16 or bfloat16 norm is held exactly, and a float32 norm too, whatever
    dtype the parameters had at ``init`` (float16 parameters do not turn a norm of 1e6 into
    inf).
    """

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
    accumulate_dtype: Any = "widest",
    nonfinite: str = "tf",
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

    Returns
    -------
    optax.GradientTransformation
        Its state is a :class:`ClipByGlobalNormState` holding the last pre-clip norm, in
        float32 (float64 for float64 parameters), whatever the updates' dtype.

    Raises
    ------
    ValueError
        If ``nonfinite`` is not one of the policies (checked here, not at the first update).
    """
    if nonfinite not in NONFINITE_POLICIES:
        msg = f"`nonfinite` must be one of {NONFINITE_POLICIES}, got {nonfinite!r}"
        raise ValueError(msg)

    def init_fn(params: Any) -> ClipByGlobalNormState:
        # at least float32: the updates may be wider than the parameters seen here
        dtype = jnp.promote_types(_norm_dtype(params, accumulate_dtype), jnp.float32)
        return ClipByGlobalNormState(jnp.zeros((), dtype))

    def update_fn(
        updates: Any, state: ClipByGlobalNormState, params: Any = None
    ) -> tuple[Any, ClipByGlobalNormState]:
        del params
        clipped, norm = tree.clip_by_global_norm(
            updates, clip_norm, accumulate_dtype=accumulate_dtype, nonfinite=nonfinite
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
