"""Keras weight constraints as a projection of JAX parameters, applied after ``apply_updates``.

Layer: public adapter over :mod:`anyclip.constraints` (the constraints are any callables
``w -> w``; this module holds no formula). optax keeps constraints out of the gradient
transformation: ``optax.projections`` functions map the parameters after
``optax.apply_updates``. :func:`constrain` is such a projection, driven by a tree of
constraints: Keras's ``variable.constraint``, one per parameter.

It lives here rather than in :mod:`anyclip.tree` because the parameters it maps are JAX pytrees
(Flax ``FrozenDict``, Equinox modules, any registered node), walked by ``jax.tree``; torch users
have :func:`anyclip.torch.constrain_`, which projects in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import jax

from anyclip._keywords import hints_keywords

__all__ = ["constrain"]

ParamsT = TypeVar("ParamsT")


def _is_constraint(node: Any) -> bool:
    return node is None or callable(node)


@hints_keywords
def constrain(params: ParamsT, constraints: Any) -> ParamsT:
    """Project ``params`` with a tree of constraints, as Keras does after every update.

    Parameters
    ----------
    params : pytree of arrays
        The parameters after ``optax.apply_updates``.
    constraints : pytree of callables or None
        A tree prefix of ``params``: at each of its leaves, a callable ``w -> w`` (such as
        :class:`anyclip.constraints.MaxNorm`) applied to every array below that position, or
        ``None`` for no constraint. Its ``axis`` is in the parameters' layout (Flax's
        ``Dense`` kernel is ``(in, out)`` as Keras's: the same ``axis``).

    Returns
    -------
    pytree
        ``params`` with the constrained leaves replaced; the others are the same objects.

    Raises
    ------
    ValueError
        If ``constraints`` is not a tree prefix of ``params`` (``jax.tree``'s message).

    See Also
    --------
    keras.optimizers.Optimizer.apply : Where Keras applies ``variable.constraint``.
    optax.projections.projection_non_negative : optax's own projections, used the same way.

    Notes
    -----
    Keras skips variables without a gradient; in JAX every parameter has one, so every
    constrained parameter is projected. Runs under ``jax.jit`` (the constraints are static
    Python callables; pass them by closure, not as traced arguments).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import optax
    >>> from anyclip.constraints import MaxNorm, NonNeg
    >>> from anyclip.optax import constrain
    >>> f32 = jnp.float32
    >>> params = {"w": jnp.array([[3.0], [4.0]], f32), "b": jnp.array([-1.0, 2.0], f32)}
    >>> updates = {"w": jnp.zeros((2, 1), f32), "b": jnp.zeros(2, f32)}
    >>> params = optax.apply_updates(params, updates)
    >>> params = constrain(params, {"w": MaxNorm(1.0), "b": NonNeg()})
    >>> params["w"].ravel(), params["b"]
    (Array([0.6, 0.8], dtype=float32), Array([0., 2.], dtype=float32))
    """

    def project(constraint: Callable[[Any], Any] | None, subtree: Any) -> Any:
        if constraint is None:
            return subtree
        return jax.tree.map(constraint, subtree)

    for leaf in jax.tree.leaves(constraints, is_leaf=_is_constraint):
        if not _is_constraint(leaf):
            msg = (
                "`constraints` leaves must be callables (such as "
                f"anyclip.constraints.MaxNorm(3)) or None, got {leaf!r}"
            )
            raise TypeError(msg)
    out: ParamsT = jax.tree.map(project, constraints, params, is_leaf=_is_constraint)
    return out
