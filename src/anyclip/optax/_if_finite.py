"""``optax.apply_if_finite`` as :func:`apply_if_finite`: the same rule, state and numbers.

Layer: public adapter over :mod:`anyclip._if_finite` (the rule); :mod:`anyclip.optax`
re-exports the names in ``__all__``. The state is optax's own ``ApplyIfFiniteState``, so a
checkpoint of either loads in the other; the update runs under ``jax.jit``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from anyclip import _if_finite
from anyclip._keywords import hints_keywords
from anyclip.optax._common import _take_or_skip

__all__ = ["apply_if_finite"]


@hints_keywords
def apply_if_finite(
    inner: optax.GradientTransformation, max_consecutive_errors: int
) -> optax.GradientTransformationExtraArgs:
    """Skip ``inner``'s update when an update holds an inf or a NaN, as ``optax.apply_if_finite``.

    A step whose updates (every element of every leaf) are not all finite returns zero
    updates and keeps ``inner``'s state (``lax.cond``, no Python ``if``: it runs under
    ``jax.jit``), unless more than ``max_consecutive_errors`` such steps came in a row: then
    ``inner``'s update is taken anyway, inf and NaN included. optax 0.2.8's rule and state,
    value for value (``tests/test_optax_if_finite.py`` runs optax's own tests on it and
    compares it with ``optax.apply_if_finite``). Eagerly, updates of the same shapes after the
    first reuse one compiled program (where the updates, state, ``params`` and extra arguments
    are JAX arrays; optax's compiles a new one at every update).

    Parameters
    ----------
    inner : optax.GradientTransformation
        The transformation to wrap (extra arguments of ``update`` are passed on to it).
    max_consecutive_errors : int
        How many non-finite steps in a row are skipped; the next one is taken. 0 or a negative
        number: every step is taken (as in optax).

    Returns
    -------
    optax.GradientTransformationExtraArgs
        Its state is optax's ``ApplyIfFiniteState``: ``notfinite_count`` (int32, non-finite
        steps in a row), ``last_finite`` (bool), ``total_notfinite`` (int32, all of them; both
        counters saturate at ``2**31 - 1``) and ``inner_state``.

    Raises
    ------
    TypeError
        If ``inner`` is not a transformation or ``max_consecutive_errors`` not an integer.

    See Also
    --------
    optax.apply_if_finite : the reference.
    anyclip.torch.apply_if_finite : the same rule around a torch optimizer.
    skip_on_spike : also skips a step whose norm (or loss) spikes.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import optax
    >>> import anyclip.optax
    >>> tx = anyclip.optax.apply_if_finite(optax.sgd(0.1), max_consecutive_errors=2)
    >>> state = tx.init(jnp.zeros(2, dtype=jnp.float32))
    >>> u, state = tx.update(jnp.array([jnp.nan, 1.0], dtype=jnp.float32), state)
    >>> u, state.notfinite_count, state.last_finite
    (Array([0., 0.], dtype=float32), Array(1, dtype=int32), Array(False, dtype=bool))
    """
    errors = _if_finite.check_max_errors(max_consecutive_errors)
    if not (callable(getattr(inner, "init", None)) and callable(getattr(inner, "update", None))):
        msg = (
            "`inner` must be an optax GradientTransformation (with `init` and `update`), got "
            f"{type(inner).__name__}; pass e.g. optax.sgd(0.1)"
        )
        raise TypeError(msg)
    inner = optax.with_extra_args_support(inner)
    take_or_skip = _take_or_skip(inner)

    def init_fn(params: Any) -> optax.ApplyIfFiniteState:
        return optax.ApplyIfFiniteState(
            notfinite_count=jnp.zeros([], jnp.int32),
            last_finite=jnp.array(True, jnp.bool_),
            total_notfinite=jnp.zeros([], jnp.int32),
            inner_state=inner.init(params),
        )

    def update_fn(
        updates: Any, state: optax.ApplyIfFiniteState, params: Any = None, **extra_args: Any
    ) -> tuple[Any, optax.ApplyIfFiniteState]:
        leaves = [jnp.asarray(leaf) for leaf in jax.tree.leaves(updates)]
        d = _if_finite.if_finite_step(
            jnp,
            _if_finite.all_finite(jnp, leaves),
            jnp.asarray(state.notfinite_count),
            jnp.asarray(state.total_notfinite),
            errors,
        )
        new_updates, inner_state = take_or_skip(
            d.apply, updates, state.inner_state, params, extra_args
        )
        return new_updates, optax.ApplyIfFiniteState(
            notfinite_count=d.notfinite_count,
            last_finite=d.finite,
            total_notfinite=d.total_notfinite,
            inner_state=inner_state,
        )

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
