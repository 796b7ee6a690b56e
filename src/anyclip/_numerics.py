"""Numerics shared by the core and the kernels: rounding, constants and warnings.

Layer: helpers below the core. These are facts about arithmetic that every formula needs,
kept apart from :mod:`anyclip._compat` (which only knows namespaces, devices and libraries):
the correctly rounded square root, the cache of 0-d constants, NumPy's warning guard, the
float overflow threshold and NumPy scalars turned back into 0-d arrays.
"""

from __future__ import annotations

import contextlib
import math
import sys
from typing import Any

from anyclip._compat import device, is_numpy_scalar, library
from anyclip._typing import Namespace

__all__ = ["as_array", "constant", "float_overflow_threshold", "quiet", "reduce_sum", "sqrt"]

#: 0-d constants made from Python scalars, by (value, sign, type, dtype, device). They are
#: internal operands only (never returned to a caller), so sharing them is safe.
_CONSTANTS: dict[tuple[Any, ...], Any] = {}
_CONSTANTS_MAX = 512


def _torch_compiling() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


def constant(xp: Namespace, value: Any, dtype: Any, like: Any) -> Any:
    """A constant array of ``dtype`` on ``like``'s device.

    JAX constants are left uncommitted (no ``device=``) so that they follow the traced or
    committed array they meet, under ``jax.jit`` included. NumPy and torch constants made from
    a Python scalar are cached (not while torch.compile traces).
    """
    lib = library(xp)
    if lib == "jax" or like is None:
        return xp.asarray(value, dtype=dtype)
    dev = device(like)
    if lib not in ("numpy", "torch") or type(value) not in (float, int, bool):
        return xp.asarray(value, dtype=dtype, device=dev)
    if lib == "torch" and _torch_compiling():
        return xp.asarray(value, dtype=dtype, device=dev)
    key = (value, math.copysign(1.0, value), type(value), dtype, dev)
    try:
        return _CONSTANTS[key]
    except KeyError:
        pass
    out = xp.asarray(value, dtype=dtype, device=dev)
    if len(_CONSTANTS) >= _CONSTANTS_MAX:
        _CONSTANTS.clear()
    _CONSTANTS[key] = out
    return out


def reduce_sum(xp: Namespace, x: Any, axis: Any, keepdims: bool) -> Any:
    """``reduce_sum`` in ``x``'s own dtype (the standard would widen integers)."""
    return xp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def sqrt(xp: Namespace, x: Any) -> Any:
    """A correctly rounded square root, as TF's.

    ``torch.sqrt`` of float32 is not correctly rounded on some CPUs (1 ULP off on about a fifth
    of inputs); the root of float32 taken in float64 and rounded back is. anyclip takes roots of
    reduced sums only, so the widening costs little. MPS has no float64 and keeps torch.sqrt.
    """
    if library(xp) == "torch":
        import torch

        if x.dtype == torch.float32 and x.device.type != "mps":
            return torch.sqrt(x.double()).float()
    return xp.sqrt(x)


def quiet(xp: Namespace) -> contextlib.AbstractContextManager[Any]:
    """A context in which NumPy does not warn about inf/NaN results (TF does not either)."""
    if library(xp) in ("numpy", "array_api_strict", "dask"):  # all compute with NumPy
        import numpy as np

        return np.errstate(all="ignore")
    return contextlib.nullcontext()


def as_array(result: Any) -> Any:
    """``result`` as an array: NumPy reductions return scalars, anyclip returns 0-d arrays."""
    if is_numpy_scalar(result):
        import numpy as np

        return np.asarray(result)
    return result


_THRESHOLDS: dict[tuple[str, Any], float] = {}


def float_overflow_threshold(xp: Namespace, dtype: Any) -> float:
    """The smallest magnitude that rounds to infinity when converted to ``dtype``."""
    key = (xp.__name__, dtype)  # a string key: torch.compile cannot hash modules
    if key not in _THRESHOLDS:  # a dict, not lru_cache: torch.compile traces through it
        info = xp.finfo(dtype)
        big = float(info.max)
        _, exp = math.frexp(big)
        _THRESHOLDS[key] = big + float(info.eps) * 2.0 ** (exp - 1) / 2
    return _THRESHOLDS[key]
