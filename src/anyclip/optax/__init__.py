"""optax ``GradientTransformation``s that clip with TF's formulas.

Layer: public adapter over :mod:`anyclip.tree`.

Drop-in replacements: :func:`clip_by_global_norm` takes optax's arguments (``max_norm``,
positional or by name; TF's ``clip_norm`` also works) and keeps optax's state
(``optax.EmptyState()``), so swapping ``optax.clip_by_global_norm`` for
``anyclip.optax.clip_by_global_norm`` changes the import alone, and checkpoints of the chain
load either way. Unlike optax's (which divides first and leaves the updates unchanged below
the threshold) it multiplies by TF's factor. :func:`keras_clipping` gives an optax chain
Keras's ``clipnorm``, ``clipvalue`` or ``global_clipnorm``. :func:`constrain` applies Keras's weight
constraints (:mod:`anyclip.constraints`) to the parameters after ``optax.apply_updates``, as
``optax.projections`` functions are applied.

>>> import jax.numpy as jnp
>>> import optax
>>> import anyclip.optax
>>> tx = optax.chain(anyclip.optax.clip_by_global_norm(max_norm=1.0), optax.sgd(0.1))
>>> params = {"w": jnp.array([3.0, 4.0], dtype=jnp.float32)}
>>> state = tx.init(params)
>>> updates, state = tx.update(params, state, params)
>>> updates["w"]
Array([-0.06      , -0.08000001], dtype=float32)
>>> state[0]  # optax's own state: the same checkpoint structure
EmptyState()

With ``norm_in_state=True`` the state keeps the last pre-clip norm, for logging:

>>> tx = anyclip.optax.clip_by_global_norm(1.0, norm_in_state=True)
>>> _, state = tx.update(params, tx.init(params))
>>> state.global_norm
Array(5., dtype=float32)

Importing this package imports jax and optax; ``import anyclip`` alone does not.
"""

from __future__ import annotations

from anyclip.optax._adaptive import adaptive_grad_clip, clip_by_block_rms
from anyclip.optax._constraints import constrain
from anyclip.optax._history import (
    QuantileClipState,
    SkipOnSpikeState,
    ZClipState,
    quantile_clip,
    skip_on_spike,
    zclip,
)
from anyclip.optax._if_finite import apply_if_finite
from anyclip.optax._scheduled import ScheduledClipState
from anyclip.optax._tf_clip import (
    ClipByGlobalNormState,
    clip,
    clip_by_global_norm,
    clip_by_norm,
    clip_by_value,
    keras_clipping,
)

__all__ = [
    "ClipByGlobalNormState",
    "ScheduledClipState",
    "adaptive_grad_clip",
    "apply_if_finite",
    "clip_by_block_rms",
    "QuantileClipState",
    "SkipOnSpikeState",
    "ZClipState",
    "clip_by_global_norm",
    "clip_by_norm",
    "clip",
    "constrain",
    "clip_by_value",
    "keras_clipping",
    "quantile_clip",
    "skip_on_spike",
    "zclip",
]
