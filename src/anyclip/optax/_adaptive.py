"""optax's ``adaptive_grad_clip`` and ``clip_by_block_rms`` as drop-ins over :mod:`anyclip.tree`.

Layer: public adapter; :mod:`anyclip.optax` re-exports the names in ``__all__``. The formulas
are :func:`anyclip.tree.adaptive_clip` and :func:`anyclip.tree.clip_by_block_rms`.
"""

from __future__ import annotations

from typing import Any

import optax

from anyclip import tree
from anyclip._agc import Layout
from anyclip._keywords import hints_keywords

__all__ = ["adaptive_grad_clip", "clip_by_block_rms"]

#: optax's own message for a transformation that needs ``params`` (``optax.NO_PARAMS_MSG``).
_NO_PARAMS = (
    "`params` must be passed to `update` for adaptive_grad_clip (the unit norms of the "
    "parameters set the thresholds): call tx.update(updates, state, params)"
)


@hints_keywords
def adaptive_grad_clip(
    clipping: Any,
    eps: Any = 1e-3,
    axis: Any = None,
    *,
    layout: Layout = "optax",
    group: Any = None,
) -> optax.GradientTransformation:
    """``optax.adaptive_grad_clip``: each unit's update norm <= ``clipping`` * its weight norm.

    The transformation applies :func:`anyclip.tree.adaptive_clip` to the updates, with
    optax's unit axes inferred from the rank (``IO``, ``HWIO``, ``DHWIO``) unless ``axis``
    is given. Its state is ``optax.EmptyState()``, as optax's.

    Parameters
    ----------
    clipping : float or 0-d array
        The largest ratio of an update's unit norm to its parameter's (``> 0``).
    eps : float or 0-d array, optional
        The floor on the parameter norm.
    axis : int or tuple of ints, optional
        The axes one unit spans, for every leaf (optax's ``axis``).
    layout : {"optax", "timm"}, optional
        Not in optax: ``"timm"`` takes every axis but the first as a unit (torch's layouts).
    group : JAX axis name or tuple of names, optional
        Not in optax: inside ``shard_map``, the axes over which each parameter and its update
        are split along axes their units span (e.g. the input channels of ``IO``, ``HWIO``);
        the unit norms are summed over them, one all-reduce per leaf, as
        :func:`anyclip.tree.adaptive_clip`'s ``group``.

    Returns
    -------
    optax.GradientTransformation
        Its ``update`` needs ``params``.

    Raises
    ------
    ValueError
        At ``update``: without ``params``, or as :func:`anyclip.tree.adaptive_clip`.
    TypeError
        At ``update``: if ``group`` is not a group of the updates' library.

    See Also
    --------
    optax.adaptive_grad_clip : The optax transformation this mirrors.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> params = {"w": jnp.array([[3.0, 0.0], [4.0, 1.0]], dtype=jnp.float32)}
    >>> tx = anyclip.optax.adaptive_grad_clip(0.01)
    >>> updates, _ = tx.update({"w": jnp.array([[0.3, 0.0], [0.4, 0.001]], jnp.float32)}, tx.init(params), params)
    >>> updates["w"]
    Array([[0.03 , 0.   ],
           [0.04 , 0.001]], dtype=float32)
    """  # noqa: E501

    def update_fn(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        if params is None:
            raise ValueError(_NO_PARAMS)
        return (
            tree.adaptive_clip(
                updates, params, clipping, eps, axis=axis, layout=layout, group=group
            ),
            state,
        )

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


@hints_keywords
def clip_by_block_rms(threshold: Any) -> optax.GradientTransformation:
    """``optax.clip_by_block_rms``: every update leaf to a root mean square <= ``threshold``.

    Each leaf ``u`` becomes ``u / maximum(1, rms(u) / threshold)``
    (:func:`anyclip.tree.clip_by_block_rms`); the state is ``optax.EmptyState()``.

    Parameters
    ----------
    threshold : float or 0-d array
        The largest RMS of a leaf.

    Returns
    -------
    optax.GradientTransformation

    See Also
    --------
    optax.clip_by_block_rms : The optax transformation this mirrors.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> tx = anyclip.optax.clip_by_block_rms(1.0)
    >>> tx.update([jnp.array([3.0, -4.0, 0.0, 0.0], dtype=jnp.float32)], tx.init(None))[0]
    [Array([ 1.2, -1.6,  0. ,  0. ], dtype=float32)]
    """

    def update_fn(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        del params
        return tree.clip_by_block_rms(updates, threshold), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)
