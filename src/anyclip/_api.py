"""The eight TF-named functions bound to a fixed set of kernels, for tests and experiments.

Layer: public (private entry point). ``bind(kernels)`` returns an object whose attributes are
the eight functions with the public signatures, running the same code as the public ones but
always with ``kernels`` and without the plain-call fast paths. ``bind(GENERIC)`` is the
array-API implementation of everything, on any backend; tests compare it with the public
functions, which choose their kernels per call (:func:`anyclip._kernels.kernels_for`).

>>> import numpy as np
>>> from anyclip._api import bind
>>> from anyclip._kernels import GENERIC
>>> bind(GENERIC).clip_by_norm(np.array([3.0, 4.0], dtype=np.float32), 1.0)
array([0.6, 0.8], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from anyclip import _clip, _clip_tensor, _norms
from anyclip._kernels import Kernels

__all__ = ["Bound", "bind"]


@dataclasses.dataclass(frozen=True)
class Bound:
    """The eight functions of :mod:`anyclip` with their kernels fixed (see :func:`bind`)."""

    kernels: Kernels
    clip_by_value: Callable[..., Any]
    clip_by_norm: Callable[..., Any]
    global_norm: Callable[..., Any]
    clip_by_global_norm: Callable[..., Any]
    clip_by_average_norm: Callable[..., Any]
    norm: Callable[..., Any]
    l2_normalize: Callable[..., Any]
    normalize: Callable[..., Any]


def bind(kernels: Kernels) -> Bound:
    """The eight TF-named functions, always computing with ``kernels``.

    Parameters
    ----------
    kernels : Kernels
        Such as :data:`anyclip._kernels.GENERIC`.

    Returns
    -------
    Bound
        Attributes ``clip_by_value``, ..., ``normalize`` with the public signatures.
    """
    return Bound(
        kernels=kernels,
        clip_by_value=functools.partial(_clip_tensor._clip_by_value, kernels),
        clip_by_norm=functools.partial(_clip_tensor._clip_by_norm, kernels),
        global_norm=functools.partial(_clip._global_norm, kernels),
        clip_by_global_norm=functools.partial(_clip._clip_by_global_norm, kernels),
        clip_by_average_norm=functools.partial(_clip_tensor._clip_by_average_norm, kernels),
        norm=functools.partial(_norms._norm, kernels),
        l2_normalize=functools.partial(_norms._l2_normalize, kernels),
        normalize=functools.partial(_norms._normalize, kernels),
    )
