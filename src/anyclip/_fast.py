"""Backend fast paths, each proven by ``benchmarks/`` and checked by the same conformance data.

The array-API core (:mod:`anyclip._core`) asks this module first for the steps that dominate
the cost of clipping long lists; each function here returns ``None`` when it has no fast path
for the arguments, and the core then runs its generic code. Every fast path keeps TF's formula
(``l2_loss`` sums, then ``sqrt(sum * 2)``; then one multiply per array) and changes only how a
reduction is evaluated, so results stay within the reductions' ULP budget.

* **torch**: sums of squares from norms of at most 256 elements (``torch._foreach_norm`` for
  small arrays, ``vector_norm`` over rows of 256 for the rest; no temporary the size of the
  data), squared and summed by ``torch.sum``; the scaling with ``torch._foreach_mul``. Used
  for float32 and float64 only (float16 and bfloat16 keep TF's in-dtype squares, which
  ``_foreach_norm`` would widen), and only when no gradient is being recorded through the
  arrays (the generic path carries TF's gradients).
* **numpy**: sums of squares as ``einsum`` row sums of 256 elements, then a pairwise ``sum``
  of the rows: one pass over memory instead of three, and no temporary.
* **jax**: arrays under 65,536 elements joined into one reduction (XLA runs one loop per
  reduction, which dominates for thousands of small arrays).
* **one large array** (``clip_by_norm``, ``norm``): the L2 norm without the temporary ``x * x``
  (the same row sums), and the final division done in place into the temporary ``t * c`` the
  core owns.
* **plain calls** (:func:`plain_clip_by_value`, :func:`plain_clip_by_norm`, :func:`plain_norm`):
  a NumPy array or torch tensor (exact types) of a float dtype with Python-number bounds and
  default arguments skips the general argument checks, whose Python cost is several times that
  of the arithmetic on small arrays. Anything else returns ``None`` and takes the general path,
  which also raises every error. ``clip_by_value`` becomes one ``clamp`` only when
  ``min <= max``, where ``maximum(minimum(t, max), min)`` and ``clamp`` agree in values and in
  ``t``'s gradient (both pass it on at the bounds and drop it at NaN).

:func:`disabled` turns every fast path off, for tests that run both paths on the same data.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

from anyclip._compat import Namespace, constant, library, sqrt

__all__ = [
    "disabled",
    "divide_owned",
    "half_squared_sum",
    "l2norm",
    "plain_clip_by_norm",
    "plain_clip_by_value",
    "plain_norm",
    "scale_arrays",
]

_ENABLED = True

#: Arrays of this many elements or more are large: their squares are summed on their own (the
#: smaller ones joined first), and the NumPy clip writes its second step in place.
_BLOCK = 1 << 16

#: Most elements joined into one temporary by the sums of squares (4 MiB of float32).
_JOIN = 1 << 20

#: Elements per row in the sums of squares (one ``einsum`` or ``vector_norm`` per row).
_ROW = 256

#: Largest array the plain NumPy norms sum with one ``vdot`` (sequential, so kept short).
_SMALL = 32

#: Python ints up to this magnitude convert to a float exactly, so a bound rounds only once.
_EXACT_INT = 1 << 53


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
        norms = _torch_partial_norms(torch, arrays)
        return torch.sum(norms * norms * 0.5)
    if lib == "numpy":
        import numpy as np

        dtype = arrays[0].dtype
        if dtype not in (np.float32, np.float64) or any(a.dtype != dtype for a in arrays):
            return None
        return np.asarray(_numpy_squared_sum(np, arrays, dtype, half=True))
    if lib == "jax":
        return _jax_half_squared_sum(xp, arrays)
    return None


def _groups(arrays: Sequence[Any], count: Any) -> list[list[Any]]:
    """The arrays, in order, as groups whose squares are summed together.

    One group per array of ``_BLOCK`` elements or more; the smaller ones are joined, up to
    ``_JOIN`` elements per group. ``count`` gives an array's number of elements. Joining
    replaces a reduction per small array by one per group (the per-array cost dominates for
    thousands of small arrays); the cap bounds the temporary a group is joined into.
    """
    groups: list[list[Any]] = []
    batch: list[Any] = []
    size = 0
    for a in arrays:
        n = count(a)
        if n >= _BLOCK:
            groups.append([a])
            continue
        batch.append(a)
        size += n
        if size >= _JOIN:
            groups.append(batch)
            batch, size = [], 0
    if batch:
        groups.append(batch)
    return groups


def _jax_half_squared_sum(xp: Namespace, arrays: Sequence[Any]) -> Any | None:
    """JAX: one reduction per group of :func:`_groups`, instead of one per array.

    XLA runs one loop per reduction; for thousands of small arrays those loops, not the
    arithmetic, take the time (W3), and one ``concatenate`` (fused into the reduction under
    ``jit``) replaces them. Sums and gradients are TF's formula, grouped differently.
    """
    if arrays[0].dtype not in (xp.float32, xp.float64):
        return None
    groups = _groups(arrays, lambda a: a.size)
    if len(groups) == len(arrays):  # nothing to join
        return None
    half = constant(xp, 0.5, arrays[0].dtype, arrays[0])
    sums = []
    for group in groups:
        flats = [xp.reshape(a, (-1,)) for a in group]
        flat = flats[0] if len(flats) == 1 else xp.concat(flats)
        sums.append(xp.sum(flat * flat) * half)
    return xp.sum(xp.stack(sums))


def _numpy_squared_sum(np: Any, arrays: Sequence[Any], dtype: Any, *, half: bool) -> Any:
    """The sum of squares of every element: rows of ``_ROW`` elements, then their pairwise sum.

    ``einsum`` squares and sums each row in one pass without a temporary array; the row sums
    (1/``_ROW`` of the data) are then summed pairwise, which keeps float32 sums of tens of
    millions of squares within a few ULP (a single ``vdot`` loses about 1e-4 there). With
    ``half``, each row sum is halved first (TF's ``l2_loss``). Small arrays are joined first
    (:func:`_groups`).
    """
    flats = [
        group[0].reshape(-1) if len(group) == 1 else np.concatenate(group, axis=None)
        for group in _groups(arrays, lambda a: a.size)
    ]
    sums = []
    for flat in flats:
        rows = flat.size // _ROW
        if rows:
            head = flat[: rows * _ROW].reshape(rows, _ROW)
            sums.append(np.einsum("ij,ij->i", head, head))
        if flat.size > rows * _ROW:
            tail = flat[rows * _ROW :]
            sums.append(np.einsum("i,i->", tail, tail).reshape(1))
    if not sums:  # only empty arrays
        return dtype.type(0)
    total = np.concatenate(sums) if len(sums) > 1 else sums[0]
    return (total * dtype.type(0.5) if half else total).sum()


def _torch_partial_norms(torch: Any, arrays: Sequence[Any]) -> Any:
    """A 1-D tensor of norms whose squares sum to the sum of squares of every element.

    ``torch._foreach_norm`` and ``torch.linalg.vector_norm`` accumulate float32 sequentially on
    CPU: over a million elements they are hundreds of ULP off (measured; TF is within a few).
    So each norm here covers at most ``_ROW`` elements: every group of :func:`_groups` (small
    arrays joined by one ``_flatten_dense_tensors`` call) is cut into rows of ``_ROW``, one
    ``vector_norm(dim=1)`` gives the row norms, the leftover tails go to one
    ``_foreach_norm``, and ``torch.sum`` (pairwise) adds the squares.
    """
    from torch._utils import _flatten_dense_tensors

    tails: list[Any] = []
    parts: list[Any] = []

    def rows(flat: Any) -> None:
        m = flat.numel() // _ROW
        if flat.numel() > m * _ROW:
            tails.append(flat[m * _ROW :])
        if m:
            parts.append(torch.linalg.vector_norm(flat[: m * _ROW].view(m, _ROW), dim=1))

    for group in _groups(arrays, lambda a: a.numel()):
        rows(group[0].reshape(-1) if len(group) == 1 else _flatten_dense_tensors(group))
    if tails:
        parts.append(torch.stack(torch._foreach_norm(tails, 2)))
    if not parts:  # only empty arrays
        return torch.zeros(1, dtype=arrays[0].dtype, device=arrays[0].device)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def l2norm(xp: Namespace, x: Any, axes: tuple[int, ...] | None) -> Any | None:
    """``sqrt(sum(x * x, axes, keepdims=True))`` without a temporary, or None."""
    if not _ENABLED or axes == ():
        return None
    lib = library(xp)
    if lib == "torch":
        if not _torch_ok([x]):
            return None
        count = _reduced_count(x.shape, axes)
        if count == 1:
            return None
        import torch

        if count <= _ROW:
            return torch.linalg.vector_norm(x, dim=axes, keepdim=True)
        if axes is not None and len(axes) < x.ndim:  # many long norms: the generic sums
            return None
        norms = _torch_partial_norms(torch, [x])
        return torch.reshape(sqrt(xp, torch.sum(norms * norms)), (1,) * x.ndim)
    if lib == "numpy" and axes is None:
        import numpy as np

        if x.dtype not in (np.float32, np.float64):
            return None
        total = np.sqrt(_numpy_squared_sum(np, [x], x.dtype, half=False))
        return np.reshape(total, (1,) * x.ndim)
    return None


def _reduced_count(shape: Sequence[int], axes: tuple[int, ...] | None) -> int:
    """The number of elements in each norm over ``axes`` of ``shape``.

    When it is 1, ``vector_norm`` returns ``abs(x)`` where TF squares (so ``x * x`` can
    overflow to inf or underflow to 0 first): the fast paths step aside.
    """
    count = 1
    for a in range(len(shape)) if axes is None else axes:
        count *= shape[a]
    return count


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


# ------------------------------------------------------------------------------ plain calls
#: ``"numpy"`` for ``numpy.ndarray``, ``"torch"`` for ``torch.Tensor``, None for other types
#: (subclasses such as ``torch.nn.Parameter`` included: they take the general path).
_PLAIN_TYPES: dict[type, str | None] = {}

#: Per dtype: (scalar type to convert bounds to, largest finite value); None when no fast path.
_PLAIN_DTYPES: dict[Any, tuple[Any, float] | None] = {}


def _plain(x: Any) -> str | None:
    cls = type(x)
    try:
        return _PLAIN_TYPES[cls]
    except KeyError:
        pass
    name = (cls.__module__, cls.__name__)
    lib = {("numpy", "ndarray"): "numpy", ("torch", "Tensor"): "torch"}.get(name)
    _PLAIN_TYPES[cls] = lib
    return lib


def _plain_dtype(lib: str, dtype: Any) -> tuple[Any, float] | None:
    """The dtypes with plain paths, with their bound conversion and largest finite value.

    float16/32/64 for NumPy (each converts a Python float with one rounding, as TF does);
    float32/64 for torch (its float16 bounds would round twice, through float32).
    """
    try:
        return _PLAIN_DTYPES[dtype]
    except KeyError:
        pass
    info = None
    if lib == "numpy":
        import numpy as np

        if dtype in (np.float16, np.float32, np.float64):
            info = (dtype.type, float(np.finfo(dtype).max))
    else:
        import torch

        if dtype in (torch.float32, torch.float64):
            info = (float, torch.finfo(dtype).max)
    _PLAIN_DTYPES[dtype] = info
    return info


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
    if not _ENABLED:
        return None
    lib = _plain(t)
    if lib is None:
        return None
    info = _plain_dtype(lib, t.dtype)
    if info is None:
        return None
    lo, hi = _bound(lo, *info), _bound(hi, *info)
    if lo is None or hi is None or not lo <= hi:
        return None
    if lib == "torch":
        import torch

        return torch.clamp(t, lo, hi)
    if t.ndim == 0:  # NumPy would return a scalar
        return None
    import numpy as np

    if t.size < _BLOCK:
        return np.maximum(np.minimum(t, hi), lo)
    out = np.minimum(t, hi)
    return np.maximum(out, lo, out=out)


def plain_norm(x: Any) -> Any | None:
    """``norm(x)`` (vector 2-norm over every axis) for a plain float array, or None."""
    if not _ENABLED:
        return None
    lib = _plain(x)
    if lib == "torch":
        import torch

        # l2norm's conditions, spelled out (``_torch_ok`` costs more than this whole call):
        # float32/64, no gradient recorded (TF's at 0 is the core's), 2 to _ROW elements
        if x.dtype not in (torch.float32, torch.float64):
            return None
        if x.requires_grad and torch.is_grad_enabled():
            return None
        if not 1 < x.numel() <= _ROW:
            return None
        return torch.linalg.vector_norm(x)
    if lib == "numpy" and x.size <= _SMALL:
        import numpy as np

        if x.dtype not in (np.float32, np.float64):  # float16 squares must round in float16
            return None
        return np.asarray(np.sqrt(np.vdot(x, x)))  # BLAS: no warning when squares overflow
    return None


def plain_clip_by_norm(t: Any, clip_norm: Any) -> Any | None:
    """``clip_by_norm(t, clip_norm)`` for a small plain NumPy array, or None."""
    if not _ENABLED or _plain(t) != "numpy" or t.size > _SMALL or t.ndim == 0:
        return None
    import numpy as np

    info = _plain_dtype("numpy", t.dtype)
    if info is None or t.dtype == np.float16:  # float16 squares must round in float16
        return None
    c = _bound(clip_norm, *info)
    if c is None or not c >= 0:  # negative bounds are replaced by 0 on the general path
        return None
    divisor = np.maximum(np.sqrt(np.vdot(t, t)), c)  # scalars: these never warn
    with np.errstate(all="ignore"):  # t * c may overflow, 0 / 0 is NaN, as in TF
        return t * c / divisor
