"""Backend fast paths, each proven by ``benchmarks/`` and checked by the same conformance data.

The array-API core (:mod:`anyclip._core`) asks this module first for the steps that dominate
the cost of clipping long lists; each function here returns ``None`` when it has no fast path
for the arguments, and the core then runs its generic code. Every fast path keeps TF's formula
(``l2_loss`` sums, then ``sqrt(sum * 2)``; then one multiply per array) and changes only how a
reduction is evaluated, so results stay within the reductions' ULP budget.

* **torch**: sums of squares from ``torch._foreach_norm`` (one call for the whole list, no
  temporary per array; the per-array squared norm is rounded once more than ``sum(t * t)``),
  and the scaling with ``torch._foreach_mul``. Used for float32 and float64 only (float16 and
  bfloat16 keep TF's in-dtype squares, which ``_foreach_norm`` would widen), and only when no
  gradient is being recorded through the arrays (the generic path carries TF's gradients).
* **numpy**: sums of squares in cache-sized blocks (``multiply`` into a reused buffer, then a
  pairwise ``sum``), one pass over memory instead of three.
* **one large array** (``clip_by_norm``, ``norm``): the L2 norm without the temporary ``x * x``
  (``torch.linalg.vector_norm``, which accumulates float32 in float64 on CPU; NumPy's blocked
  sums), and the final division done in place into the temporary ``t * c`` the core owns.

:func:`disabled` turns every fast path off, for tests that run both paths on the same data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from anyclip._compat import Namespace, library

__all__ = ["disabled", "divide_owned", "half_squared_sum", "l2norm", "scale_arrays"]

_ENABLED = True

#: Elements per block in the NumPy sum of squares (a 256 KiB float32 buffer stays in cache).
_BLOCK = 1 << 16


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the generic array-API code only, inside this block (for tests)."""
    global _ENABLED
    previous, _ENABLED = _ENABLED, False
    try:
        yield
    finally:
        _ENABLED = previous


def _torch_ok(arrays: Sequence[Any]) -> bool:
    import torch

    dtype = arrays[0].dtype
    if dtype not in (torch.float32, torch.float64):
        return False
    if torch.is_grad_enabled() and any(a.requires_grad for a in arrays):
        return False
    return all(a.dtype == dtype for a in arrays)


def half_squared_sum(xp: Namespace, arrays: Sequence[Any]) -> Any | None:
    """``sum(sum(t * t) * 0.5 for t in arrays)`` by a fast path, or None."""
    if not _ENABLED or not arrays:
        return None
    lib = library(xp)
    if lib == "torch":
        if not _torch_ok(arrays):
            return None
        import torch

        if len({a.device for a in arrays}) != 1:
            return None
        norms = torch._foreach_norm(list(arrays), 2)
        squares = torch.stack(norms)
        return torch.sum(squares * squares * 0.5)
    if lib == "numpy":
        import numpy as np

        dtype = arrays[0].dtype
        if dtype not in (np.float32, np.float64) or any(a.dtype != dtype for a in arrays):
            return None
        return np.asarray(_numpy_half_squared_sum(np, arrays, dtype))
    return None


def _numpy_half_squared_sum(np: Any, arrays: Sequence[Any], dtype: Any) -> Any:
    """Blocked sums of squares; arrays smaller than a block are first joined into one."""
    buf = np.empty(_BLOCK, dtype=dtype)
    small = [a.reshape(-1) for a in arrays if a.size < _BLOCK]
    large = [a.reshape(-1) for a in arrays if a.size >= _BLOCK]
    if len(small) > 1:
        large.append(np.concatenate(small))
    elif small:
        large.append(small[0])
    partials = []
    for flat in large:
        for start in range(0, flat.size, _BLOCK):
            chunk = flat[start : start + _BLOCK]
            part = buf[: chunk.size]
            np.multiply(chunk, chunk, out=part)
            partials.append(part.sum())
    half = np.asarray(partials, dtype=dtype) * dtype.type(0.5)
    return half.sum()


def l2norm(xp: Namespace, x: Any, axes: tuple[int, ...] | None) -> Any | None:
    """``sqrt(sum(x * x, axes, keepdims=True))`` without a temporary, or None."""
    if not _ENABLED or axes == ():
        return None
    lib = library(xp)
    if lib == "torch":
        if not _torch_ok([x]):
            return None
        import torch

        return torch.linalg.vector_norm(x, dim=axes, keepdim=True)
    if lib == "numpy" and axes is None:
        import numpy as np

        if x.dtype not in (np.float32, np.float64):
            return None
        two = x.dtype.type(2)
        total = np.sqrt(_numpy_half_squared_sum(np, [x], x.dtype) * two)
        return np.reshape(total, (1,) * x.ndim)
    return None


def divide_owned(xp: Namespace, owned: Any, divisor: Any) -> Any | None:
    """``owned / divisor`` written into ``owned`` (a temporary the caller made), or None."""
    if not _ENABLED:
        return None
    lib = library(xp)
    if lib == "torch":
        import torch

        if torch.is_grad_enabled() and (owned.requires_grad or divisor.requires_grad):
            return None
        return owned.div_(divisor)
    if lib == "numpy" and owned.ndim > 0:
        import numpy as np

        return np.divide(owned, divisor, out=owned)
    return None


def scale_arrays(xp: Namespace, arrays: Sequence[Any | None], scale: Any) -> list[Any] | None:
    """``[None if t is None else t * cast(scale, t.dtype) for t in arrays]`` fast, or None."""
    if not _ENABLED or library(xp) != "torch":
        return None
    present = [a for a in arrays if a is not None]
    if not present or scale.ndim != 0 or not _torch_ok(present) or scale.requires_grad:
        return None
    import torch

    dtype = present[0].dtype
    factor = scale if scale.dtype == dtype else scale.to(dtype)
    scaled = iter(torch._foreach_mul(present, factor))
    return [None if a is None else next(scaled) for a in arrays]
