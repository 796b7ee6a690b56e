"""Scheduled thresholds: Keras's "0 or less clips nothing" for a threshold known only on device.

Layer: core (array API, ``xp`` first, no Python ``if`` on a value). The stateful adapters
(:func:`anyclip.optax.clip_by_global_norm`, :func:`anyclip.optax.clip_by_norm`,
:func:`anyclip.optax.keras_clipping`, :func:`anyclip.torch.keras_clipping`) keep a step count,
evaluate the schedule on it (a device scalar) and clip with TF's formulas of
:mod:`anyclip._core`, which already follow TF at every value (``clip_norm=0`` gives zeros for a
finite non-zero norm). Keras reads its options on the host (``if clipnorm and clipnorm > 0``);
at a scheduled value that test becomes the ``where`` below.
"""

from __future__ import annotations

from typing import Any

from anyclip import _core
from anyclip._kernels import Kernels
from anyclip._numerics import constant
from anyclip._typing import Namespace

__all__ = ["keras_gate", "keras_global_scale"]


def keras_gate(xp: Namespace, value: Any, clipped: Any, unclipped: Any) -> Any:
    """``clipped`` where Keras's option ``value`` is positive, else ``unclipped`` (Keras's rule).

    ``value`` is the scheduled ``clipnorm`` (0-d); a NaN value clips nothing, as Keras's
    ``nan > 0`` is False.
    """
    return xp.where(value > constant(xp, 0.0, value.dtype, value), clipped, unclipped)


def keras_global_scale(xp: Namespace, value: Any, norm: Any, kernels: Kernels | None = None) -> Any:
    """Keras's ``global_clipnorm`` factor at a scheduled ``value``, or 1 when ``value <= 0``.

    Keras's factor is :func:`anyclip._core.keras_global_scale` with a tensor value (its
    ``1.0 / value`` divided in the norm's dtype; NaN for a non-finite norm, and for
    ``value=inf``, as Keras 3); ``value`` is cast to the norm's dtype first. ``kernels``
    (only to flush subnormals, as :func:`~anyclip._core.keras_global_scale`).
    """
    c = value if value.dtype == norm.dtype else xp.astype(value, norm.dtype)
    one = constant(xp, 1.0, norm.dtype, norm)
    # Keras's rule on the value given, before the cast (a float32 1e-30 clips float16
    # gradients, to zeros, where its float16 0 would clip nothing)
    return keras_gate(xp, value, _core.keras_global_scale(xp, c, norm, kernels=kernels), one)
