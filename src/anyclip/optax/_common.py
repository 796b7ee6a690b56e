"""What the optax transforms share: the dtype their state and thresholds are kept in.

Layer: adapter helpers, below the plain (:mod:`anyclip.optax._tf_clip`), scheduled
(:mod:`anyclip.optax._scheduled`) and history-based (:mod:`anyclip.optax._history`) transforms.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from anyclip._compat import namespace
from anyclip._policy_dtypes import resolve_accumulate_dtype
from anyclip._pytree import flatten

__all__ = ["_norm_dtype"]


def _norm_dtype(params: Any, accumulate_dtype: Any) -> Any:
    """The dtype of the norm of ``params``' floating leaves (float32 when there are none)."""
    leaves = [leaf for leaf in flatten(params)[0] if leaf is not None]
    dtypes = [leaf.dtype for leaf in leaves if jnp.issubdtype(leaf.dtype, jnp.floating)]
    if not dtypes:
        return jnp.float32
    acc = resolve_accumulate_dtype(namespace(jnp.zeros(0)), accumulate_dtype, dtypes)
    return dtypes[0] if acc is None else acc
