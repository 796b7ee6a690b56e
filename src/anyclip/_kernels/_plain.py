"""Plain-call fast paths: the smallest calls, answered before any argument check.

Layer: kernels, called by the public layer only (a bound set of kernels skips them). A NumPy
array or torch tensor (exact types) of a float dtype with Python-number bounds and default
arguments skips the general argument checks, whose Python cost is several times that of the
arithmetic on small arrays (benchmark W5). Anything else returns ``None`` and takes the
general path, which also raises every error. ``clip_by_value`` becomes one ``clamp`` only when
``min <= max``, where ``maximum(minimum(t, max), min)`` and ``clamp`` agree in values, and on
torch only for a tensor that needs no gradient (torch 2.15's ``clamp`` passes none on at the
bounds, where TF's and earlier torch's do).
"""

from __future__ import annotations

import math
from typing import Any

from anyclip._kernels._base import BLOCK, ROW
from anyclip._kernels._tforder import SMALL, small_sum

__all__ = ["plain_clip_by_norm", "plain_clip_by_value", "plain_norm"]

#: Largest array the plain NumPy norms sum with one ``vdot`` (sequential, so kept short).
_SMALL = 32

#: Python ints up to this magnitude convert to a float exactly, so a bound rounds only once.
_EXACT_INT = 1 << 53

#: ``"numpy"`` for ``numpy.ndarray``, ``"torch"`` for ``torch.Tensor``, None for other types
#: (subclasses such as ``torch.nn.Parameter`` included: they take the general path).
_PLAIN_TYPES: dict[type, str | None] = {}

#: Per dtype: its largest finite value; None when no fast path.
_PLAIN_DTYPES: dict[Any, float | None] = {}


def _plain(cls: type) -> str | None:
    """``"numpy"``, ``"torch"`` or None for an array of type ``cls``.

    Dynamo runs this function rather than tracing it and takes its answer as a constant (the
    mark below), so that a trace neither reads nor guards on :data:`_PLAIN_TYPES` (see
    :mod:`anyclip._memo`); the plain calls' own memo lookups, without its helpers' extra call.
    """
    try:
        return _PLAIN_TYPES[cls]
    except KeyError:
        pass
    lib = _PLAIN_TYPES[cls] = {
        ("numpy", "ndarray"): "numpy",
        ("torch", "Tensor"): "torch",
    }.get((cls.__module__, cls.__name__))
    return lib


_plain._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _plain_largest(lib: str, dtype: Any) -> float | None:
    """The largest finite value of ``dtype`` if it has plain paths, else None (run by Dynamo).

    float32/64 for NumPy and torch (each converts a Python float with one rounding, as TF
    does). Not float16: TF converts a Python float to float16 through float32 (two roundings)
    and a NumPy scalar with one, which the general path follows
    (:func:`anyclip._policy.tf_float16`). Dynamo takes
    the answer as a constant, which it cannot guard: it is only compared, never passed to
    ``type()`` (see :mod:`anyclip._memo`).
    """
    try:
        return _PLAIN_DTYPES[dtype]
    except KeyError:
        pass
    largest = None
    if lib == "numpy":
        import numpy as np

        if dtype in (np.float32, np.float64):
            largest = float(np.finfo(dtype).max)
    else:
        import torch

        if dtype in (torch.float32, torch.float64):
            largest = float(torch.finfo(dtype).max)
    _PLAIN_DTYPES[dtype] = largest
    return largest


_plain_largest._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _bound(value: Any, convert: Any, largest: float) -> Any | None:
    """A Python number (or a NumPy scalar of the array's own dtype) as a bound, or None.

    Only values that convert without overflow (or are infinite) qualify; NaN never does.
    """
    kind = type(value)
    if kind is int:
        if not -_EXACT_INT <= value <= _EXACT_INT:
            return None
        value, kind = float(value), float
    if kind is float:
        if -largest <= value <= largest or value in (math.inf, -math.inf):
            return convert(value)
        return None
    if kind is convert and value == value:  # a NumPy scalar of the array's dtype, not NaN
        return value
    return None


def plain_clip_by_value(t: Any, lo: Any, hi: Any) -> Any | None:
    """``clip_by_value`` for a plain float array and ordered number bounds, or None."""
    lib = _plain(type(t))
    if lib is None:
        return None
    largest = _plain_largest(lib, t.dtype)
    if largest is None:
        return None
    convert = t.dtype.type if lib == "numpy" else float
    lo, hi = _bound(lo, convert, largest), _bound(hi, convert, largest)
    if lo is None or hi is None or not lo <= hi:
        return None
    if lib == "torch":
        import torch

        if t.layout != torch.strided or t.is_nested:  # the general path says what to do
            return None
        if t.requires_grad:
            # torch 2.15's clamp with number bounds passes no gradient at the bounds (TF and
            # torch 2.13 pass it on): the general path gives TF's on every version
            return None
        return torch.clamp(t, lo, hi)
    if t.ndim == 0:  # NumPy would return a scalar
        return None
    import numpy as np

    if t.size < BLOCK:
        return np.maximum(np.minimum(t, hi), lo)
    out = np.minimum(t, hi)
    return np.maximum(out, lo, out=out)


def plain_norm(x: Any) -> Any | None:
    """``norm(x)`` (vector 2-norm over every axis) for a plain float array, or None."""
    lib = _plain(type(x))
    if lib == "torch":
        import torch

        # TorchKernels' conditions, spelled out (cheaper than the general check):
        # float32/64, no gradient recorded (TF's at 0 is the core's), 2 to ROW elements
        if x.dtype not in (torch.float32, torch.float64) or x.layout != torch.strided:
            return None
        if x.is_nested:
            return None
        if x.requires_grad and torch.is_grad_enabled():
            return None
        if not 1 < x.numel() <= ROW:
            return None
        if x.dtype == torch.float64:  # in TF's order, as the kernels: on the CPU, uncompiled
            if x.numel() > SMALL or not x.is_cpu or torch.compiler.is_compiling():
                return None
            total = small_sum(x.reshape(-1).tolist(), square=True)
            # math.sqrt rounds correctly; torch.sqrt on the CPU does not (anyclip._numerics.sqrt)
            return torch.tensor(math.sqrt(total), dtype=torch.float64)
        return torch.linalg.vector_norm(x)
    if lib == "numpy" and x.size <= _SMALL:
        import numpy as np

        if x.dtype not in (np.float32, np.float64):  # float16 squares must round in float16
            return None
        return np.asarray(np.sqrt(_small_squares(np, x)))
    return None


def plain_clip_by_norm(t: Any, clip_norm: Any) -> Any | None:
    """``clip_by_norm(t, clip_norm)`` for a small plain NumPy array, or None."""
    if _plain(type(t)) != "numpy" or t.size > _SMALL or t.ndim == 0:
        return None
    import numpy as np

    largest = _plain_largest("numpy", t.dtype)
    if largest is None or t.dtype == np.float16:  # float16 squares must round in float16
        return None
    c = _bound(clip_norm, t.dtype.type, largest)
    if c is None or not c >= 0:  # negative bounds are replaced by 0 on the general path
        return None
    divisor = np.maximum(np.sqrt(_small_squares(np, t)), c)  # scalars: these never warn
    with np.errstate(all="ignore"):  # t * c may overflow, 0 / 0 is NaN, as in TF
        return t * c / divisor


def _small_squares(np: Any, x: Any) -> Any:
    """The sum of the squares of a small float32 or float64 NumPy array, as a scalar.

    float32: one ``vdot`` (BLAS: no warning when squares overflow). float64: in TF's order
    (:mod:`anyclip._kernels._tforder`), as the NumPy kernels sum float64 squares.
    """
    if x.dtype == np.float64:
        return np.float64(small_sum(x.ravel().tolist(), square=True))
    return np.vdot(x, x)
