"""torch kernels: accurate sums of squares without temporaries, and lists over several devices.

Layer: kernels. Chosen by :func:`anyclip._kernels.kernels_for` for every torch call, because
two of its jobs hold for any dtype:

* **several devices**: :meth:`TorchKernels.total_half_squares` sums the squares of each
  device's arrays on that device, moves the partial sums (0-d tensors, never the data) to the
  first array's device and adds them there; :meth:`TorchKernels.scale` sends the factor to
  each device. So :func:`anyclip.global_norm` and :func:`anyclip.clip_by_global_norm` (and
  ``anyclip.torch.clip_grad_norm_``) take a model split over several GPUs. Moves are
  device-to-device copies (``non_blocking``), never a host sync.
* **fast sums** for float32 and float64 when no gradient is recorded through the arrays
  (float16 and bfloat16 keep TF's in-dtype squares, which ``_foreach_norm`` would widen; the
  generic code carries TF's gradients): sums of squares from norms of at most ``ROW``
  elements, squared and summed by ``torch.sum``; the scaling with ``torch._foreach_mul``; the
  division of ``clip_by_norm`` in place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from anyclip._kernels._base import ROW, Kernels, groups
from anyclip._numerics import reduce_sum, sqrt
from anyclip._typing import Namespace

__all__ = ["TorchKernels"]


def _fast_ok(arrays: Sequence[Any]) -> bool:
    """float32 or float64, one dtype, and no gradient recorded through any of ``arrays``."""
    import torch

    dtype = arrays[0].dtype
    if dtype not in (torch.float32, torch.float64):
        return False
    if torch.is_grad_enabled() and any(a.requires_grad for a in arrays):
        return False
    return all(a.dtype == dtype for a in arrays)


def _reduced_count(shape: Sequence[int], axes: tuple[int, ...] | None) -> int:
    """The number of elements in each norm over ``axes`` of ``shape``.

    When it is 1, ``vector_norm`` returns ``abs(x)`` where TF squares (so ``x * x`` can
    overflow to inf or underflow to 0 first): the fast paths step aside.
    """
    count = 1
    for a in range(len(shape)) if axes is None else axes:
        count *= shape[a]
    return count


def _partial_norms(torch: Any, arrays: Sequence[Any]) -> Any:
    """A 1-D tensor of norms whose squares sum to the sum of squares of every element.

    ``torch._foreach_norm`` and ``torch.linalg.vector_norm`` accumulate float32 sequentially on
    CPU: over a million elements they are hundreds of ULP off (measured; TF is within a few).
    So each norm here covers at most ``ROW`` elements: every group of :func:`groups` (small
    arrays joined by one ``_flatten_dense_tensors`` call) is cut into rows of ``ROW``, one
    ``vector_norm(dim=1)`` gives the row norms, the leftover tails go to one
    ``_foreach_norm``, and ``torch.sum`` (pairwise) adds the squares.
    """
    from torch._utils import _flatten_dense_tensors

    flatten: Callable[[Sequence[Any]], Any] = _flatten_dense_tensors  # untyped in torch
    tails: list[Any] = []
    parts: list[Any] = []

    def rows(flat: Any) -> None:
        m = flat.numel() // ROW
        if flat.numel() > m * ROW:
            tails.append(flat[m * ROW :])
        if m:
            parts.append(torch.linalg.vector_norm(flat[: m * ROW].view(m, ROW), dim=1))

    for group in groups(arrays, lambda a: int(a.numel())):
        rows(group[0].reshape(-1) if len(group) == 1 else flatten(group))
    if tails:
        parts.append(torch.stack(torch._foreach_norm(tails, 2)))
    if not parts:  # only empty arrays
        return torch.zeros(1, dtype=arrays[0].dtype, device=arrays[0].device)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _check_devices(devices: Sequence[Any]) -> None:
    """``ValueError`` for ``meta`` with another device: a meta tensor has no value to move."""
    meta = [d for d in devices if d.type == "meta"]
    if meta:
        other = next(d for d in devices if d.type != "meta")
        msg = (
            f"`t_list` mixes devices {meta[0]} and {other}: a meta tensor has no values, so "
            "its squares cannot be added to the others'; move every array to one device (or "
            "materialise the model with `to_empty`) first"
        )
        raise ValueError(msg)


class TorchKernels(Kernels):
    """:class:`Kernels` for torch tensors (every dtype, every device)."""

    name = "torch"

    def _l2norm(self, xp: Namespace, x: Any, axes: tuple[int, ...] | None) -> Any | None:
        if axes == () or not _fast_ok([x]):
            return None
        count = _reduced_count(x.shape, axes)
        if count == 1:
            return None
        import torch

        if count <= ROW:
            return torch.linalg.vector_norm(x, dim=axes, keepdim=True)
        if axes is not None and len(axes) < x.ndim:  # many long norms: the generic sums
            return None
        norms = _partial_norms(torch, [x])
        return torch.reshape(sqrt(xp, torch.sum(norms * norms)), (1,) * x.ndim)

    def norm2(self, xp: Namespace, x: Any, axes: tuple[int, ...] | None) -> Any:
        """As :meth:`Kernels.norm2`; by ``vector_norm`` rows when no gradient is recorded."""
        fast = self._l2norm(xp, x, axes)
        return super().norm2(xp, x, axes) if fast is None else fast

    def clip_norm2(self, xp: Namespace, t: Any, axes: tuple[int, ...] | None) -> Any:
        """As :meth:`Kernels.clip_norm2`; no ``where`` needed when no gradient is recorded."""
        fast = self._l2norm(xp, t, axes)
        return super().clip_norm2(xp, t, axes) if fast is None else fast

    def divide_into(self, xp: Namespace, owned: Any, divisor: Any) -> Any:
        """``owned / divisor`` in place, when no gradient is recorded through either."""
        import torch

        if torch.is_grad_enabled() and (owned.requires_grad or divisor.requires_grad):
            return owned / divisor
        return owned.div_(divisor)

    def half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """As :meth:`Kernels.half_squares`; by :func:`_partial_norms` when :func:`_fast_ok`."""
        if not _fast_ok(arrays):
            return super().half_squares(xp, arrays)
        import torch

        norms = _partial_norms(torch, arrays)
        return torch.sum(norms * norms * 0.5)

    def total_half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """One :meth:`half_squares` per device; the partial sums meet on ``arrays[0]``'s."""
        home = arrays[0].device
        by_device: dict[Any, list[Any]] = {}
        for a in arrays:
            by_device.setdefault(a.device, []).append(a)
        if len(by_device) == 1:
            return self.half_squares(xp, arrays)
        _check_devices(list(by_device))
        partials = [
            self.half_squares(xp, group).to(home, non_blocking=True) for group in by_device.values()
        ]
        return reduce_sum(xp, xp.stack(partials), None, keepdims=False)

    def scale(self, xp: Namespace, t_list: Sequence[Any], scale: Any) -> list[Any]:
        """As :meth:`Kernels.scale`, with the factor sent to each array's device and dtype.

        One ``torch._foreach_mul`` per (device, dtype) group when :func:`_fast_ok`.
        """
        import torch

        by_group: dict[tuple[Any, Any], list[int]] = {}
        for i, v in enumerate(t_list):
            if v is not None:
                by_group.setdefault((v.device, v.dtype), []).append(i)
        out: list[Any] = [None] * len(t_list)
        recorded = torch.is_grad_enabled() and scale.requires_grad
        for (dev, dtype), where in by_group.items():
            group = [t_list[i] for i in where]
            s = scale
            if s.dtype != dtype or s.device != dev:
                s = s.to(device=dev, dtype=dtype, non_blocking=True)
            results: Sequence[Any]
            if scale.ndim == 0 and not recorded and _fast_ok(group):
                results = torch._foreach_mul(group, s)
            else:
                results = [v * s for v in group]
            for i, r in zip(where, results, strict=True):
                out[i] = r
        return out
