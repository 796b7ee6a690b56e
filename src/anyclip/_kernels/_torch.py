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
  (the generic code carries TF's gradients): sums of squares from norms of at most ``ROW``
  elements, squared and summed by ``torch.sum``; the scaling with ``torch._foreach_mul``; the
  division of ``clip_by_norm`` in place. bfloat16 and float16 keep TF's in-dtype squares and
  halves (``_foreach_norm(dtype=float32)`` of the arrays would square them in float32): the
  generic formula in multi-tensor ops, :func:`_half_precision_half_squares`, and the scaling
  with ``torch._foreach_mul``.

This module holds :class:`TorchKernels` (the choice of path, devices, DTensors, the scaling);
the fast sums of squares and the test of when they apply are in
:mod:`anyclip._kernels._torch_sums`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from anyclip._compat import HALF_PRECISION, torch_to
from anyclip._gradients import divided, product, uses
from anyclip._kernels import _base
from anyclip._kernels._base import ROW, Kernels, every_axis
from anyclip._kernels._dist import (
    any_dtensor,
    dtensor_extreme,
    dtensor_half_squares,
    is_dtensor,
    replicate_partials,
)
from anyclip._kernels._tfaxes import tf_sum_or_none
from anyclip._kernels._tforder import tf_order_dtype
from anyclip._kernels._tforder_xp import tf_order_squares
from anyclip._kernels._torch_multi import cuda_half_squares, cuda_norm
from anyclip._kernels._torch_sums import (
    _FAST,
    _fast_ok,
    _half_precision_half_squares,
    _partial_norms,
    _reduced_count,
    _tf_order,
    torch_in_turn,
    torch_tf_row_sums,
)
from anyclip._numerics import reduce_sum, sqrt, tf_cast
from anyclip._typing import Namespace

__all__ = [
    "TorchKernels",
]


def _one_device(tensors: Sequence[Any]) -> bool:
    """Whether ``tensors`` (at least one) share one device.

    All on the CPU answers it without a ``torch.device`` object per tensor (``is_cpu`` is a
    flag; ``.device`` builds an object, several times the cost for 2,000 tensors).
    """
    if all([t.is_cpu for t in tensors]):
        return True
    return len({t.device for t in tensors}) == 1


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

        if x.is_cuda:  # CUDA's reduction tree needs no rows: one launch
            return cuda_norm(torch, x, axes)
        if every_axis(x, axes):
            total = _tf_order(xp, torch, [x], half=False)
            if total is not None:
                return torch.reshape(sqrt(xp, total), (1,) * x.ndim)
        elif self.tf_sum_ok(x):  # some axes: TF's order (the generic steps, tf_sum)
            return None
        if count <= ROW:
            return torch.linalg.vector_norm(x, dim=axes, keepdim=True)
        if not every_axis(x, axes):  # many long norms: the generic sums
            return None
        norms = _partial_norms(torch, [x])
        return torch.reshape(sqrt(xp, torch.sum(norms * norms)), (1,) * x.ndim)

    @staticmethod
    def tf_sum_ok(y: Any) -> bool:
        """Whether :meth:`tf_sum` adds ``y`` in TF's order: float64, on the CPU, plain, eager."""
        import torch

        return (
            y.dtype == torch.float64
            and y.is_cpu
            and not any_dtensor([y])
            and not torch.compiler.is_compiling()
        )

    def tf_sum(self, xp: Namespace, y: Any, axes: tuple[int, ...] | int | None) -> Any | None:
        """As :meth:`Kernels.tf_sum`, for float64 CPU tensors (not DTensors, not compiling).

        Where no gradient is recorded, on a NumPy view of the tensor's memory
        (:func:`~anyclip._kernels._torch_sums.torch_in_turn` and ``torch_tf_row_sums``);
        else in torch operations (``cumsum`` adds in order on the CPU).
        """
        if not self.tf_sum_ok(y):
            return None
        return tf_sum_or_none(xp, y, axes, row_sums=torch_tf_row_sums, in_turn=torch_in_turn)

    def norm2(self, xp: Namespace, x: Any, axes: tuple[int, ...] | None, other: Any = None) -> Any:
        """As :meth:`Kernels.norm2`; by ``vector_norm`` rows when no gradient is recorded."""
        fast = self._l2norm(xp, x, axes)
        return super().norm2(xp, x, axes, other) if fast is None else fast

    def clip_norm2(
        self, xp: Namespace, t: Any, axes: tuple[int, ...] | None, other: Any = None
    ) -> Any:
        """As :meth:`Kernels.clip_norm2`; no ``where`` needed when no gradient is recorded."""
        fast = self._l2norm(xp, t, axes)
        return super().clip_norm2(xp, t, axes, other) if fast is None else fast

    def unit_norm2(self, xp: Namespace, x: Any, axes: tuple[int, ...] | None) -> Any:
        """As :meth:`Kernels.unit_norm2`; by ``vector_norm`` (timm's ``norm``) where it may.

        Only when no gradient is recorded and ``torch.func`` does not wrap ``x``.
        """
        if not _fast_ok([x]):
            return super().unit_norm2(xp, x, axes)
        import torch

        return torch.linalg.vector_norm(x, dim=axes, keepdim=True)

    def row_norms(self, xp: Namespace, rows: Any) -> Any:
        """As :meth:`Kernels.row_norms`; by ``vector_norm`` (Opacus's) where it may."""
        if not _fast_ok([rows]):
            return super().row_norms(xp, rows)
        import torch

        return torch.linalg.vector_norm(rows, dim=-1)

    def row_squares(self, xp: Namespace, rows: Any) -> Any:
        """As :meth:`Kernels.row_squares`; by ``vecdot`` (no ``rows * rows``) where it may.

        Only when no gradient is recorded and ``torch.func`` does not wrap ``rows``.
        """
        if not _fast_ok([rows]):
            return super().row_squares(xp, rows)
        import torch

        return torch.linalg.vecdot(rows, rows)

    def divide_into(self, xp: Namespace, owned: Any, divisor: Any) -> Any:
        """``owned / divisor`` in place, when no gradient is recorded through either."""
        import torch

        if torch.is_grad_enabled() and (owned.requires_grad or divisor.requires_grad):
            return divided(xp, owned, divisor)
        if is_dtensor(owned) and _broadcast_over_shards(owned, divisor):
            # DTensor refuses the in-place division of a Shard over a dim of size 1 by a
            # Replicate divisor (no strategy keeps the placement); shard by shard it is local
            owned.to_local().div_(divisor.to_local())
            return owned
        return owned.div_(divisor)

    def tf_order_squares(self, xp: Namespace, arrays: Sequence[Any], *, half: bool) -> Any:
        """As :meth:`Kernels.tf_order_squares` with ``half``, for CPU tensors recording a gradient.

        The fast paths (no gradient recorded) sum float64 squares, and float32 ones with
        ``half``, in TF's order already (:func:`_tf_order`, on NumPy views). While autograd
        records, the generic code summed the ``l2_loss`` in torch's order: a ``global_norm``
        of float64 ``[1, 1e-3, -1e-3, 3]`` 1 ULP from TF's, its ``clip_by_global_norm``
        gradient 1 ULP off in three of four elements. Here in TF's order in torch operations
        (gathers and additions, which autograd records: :func:`tf_order_squares`). None
        without ``half`` (``tf.norm``'s sum: its gradient would add the two terms of each
        square before ``t * c``'s, 1 ULP from TF's ``clip_by_norm`` gradient, as on JAX), on
        other devices, for DTensors and while ``torch.compile`` traces.
        """
        import torch

        if not half or not tf_order_dtype(arrays[0].dtype, half=half):
            return None
        if torch.compiler.is_compiling():
            return None
        if any_dtensor(arrays) or not all([a.is_cpu for a in arrays]):
            return None
        return tf_order_squares(xp, arrays, half=half, halve=self.halving)

    def half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """As :meth:`Kernels.half_squares`; by :func:`_partial_norms` when :func:`_fast_ok`.

        bfloat16 and float16: :func:`_half_precision_half_squares` (multi-tensor ops), but
        unhalved (:meth:`~Kernels.unhalved`: the generic sums, whole).
        """
        import torch

        halve = self.halving
        if not _fast_ok(arrays, one_dtype=True):  # one dtype: the method's contract
            half = _half_precision_half_squares(xp, torch, arrays) if halve else None
            return super().half_squares(xp, arrays) if half is None else half

        if arrays[0].is_cuda:  # one multi-tensor norm, not a launch per large array
            return cuda_half_squares(torch, arrays, halve=halve)
        total = _tf_order(xp, torch, arrays, half=True, halve=halve)
        if total is not None:
            return total
        norms = _partial_norms(torch, arrays)
        return torch.sum(norms * norms * 0.5) if halve else torch.sum(norms * norms)

    def total_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any = None) -> Any:
        """One :meth:`cast_half_squares` per device; the partial sums meet on ``arrays[0]``'s.

        DTensors (FSDP2, tensor parallel): the squares of each local shard, one all-reduce
        per mesh of the 0-d partial sum (:func:`~anyclip._kernels._dist.dtensor_half_squares`).
        With ``acc``, every device's arrays (every local shard) are cast there, a block at
        a time.
        """
        if any_dtensor(arrays):
            return dtensor_half_squares(
                lambda ts: self._by_device(xp, ts, acc), xp, arrays, dtype=acc
            )
        return self._by_device(xp, arrays, acc)

    def blocks(self, xp: Namespace, v: Any) -> list[Any] | None:
        """As :meth:`Kernels.blocks`, by ``torch.split`` (its backward is one ``cat``).

        None for a ``DTensor``: :meth:`total_half_squares` and :meth:`cast_map` take the
        blocks of its local shard (a reshape of the DTensor itself would gather it).
        """
        if is_dtensor(v):
            return None
        import torch

        return list(torch.split(v.reshape(-1), _base.UPCAST_BLOCK))

    def cast_map(
        self, xp: Namespace, t: Any, acc: Any, fn: Callable[..., Any], operands: Sequence[Any]
    ) -> Any:
        """As :meth:`Kernels.cast_map`; a ``DTensor``'s local shard block by block.

        ``fn`` is elementwise with 0-d operands (the same on every rank), so each shard is
        mapped on its own and the result keeps the input's mesh, placements, shape and
        stride, without communication. A ``Partial`` DTensor takes DTensor's own ops.
        """
        if not is_dtensor(t) or any(p.is_partial() for p in t.placements):
            return super().cast_map(xp, t, acc, fn, operands)
        from torch.distributed.tensor import DTensor

        local_ops = [self.local(xp, o) for o in operands]
        out = super().cast_map(xp, t.to_local(), acc, fn, local_ops)
        return DTensor.from_local(
            out, t.device_mesh, t.placements, run_check=False, shape=t.shape, stride=t.stride()
        )

    def reduce_max(self, xp: Namespace, x: Any, axis: tuple[int, ...] | int) -> Any:
        """As :meth:`Kernels.reduce_max`; a DTensor shard by shard (an empty one included).

        DTensor's own ``amax`` raises on a rank whose shard is empty along a reduced axis
        (``Shard(0)`` of 1 row on 2 ranks) and the others wait for it in the all-reduce:
        :func:`~anyclip._kernels._dist.dtensor_extreme` gives that rank the identity -inf.
        """
        if is_dtensor(x):
            import torch

            out = dtensor_extreme(x, axis, "max", lambda t, a: torch.amax(t, dim=a, keepdim=True))
            if out is not None:
                return out
        return super().reduce_max(xp, x, axis)

    def settle(self, xp: Namespace, r: Any) -> Any:
        """A DTensor result with ``Partial`` placements redistributed to ``Replicate``.

        DTensor reduces over a sharded dimension locally and marks the result ``Partial``;
        one all-reduce of the reduced values (never of the input) makes it final; a maximum
        or minimum (inf norms) keeps a NaN of any rank
        (:func:`~anyclip._kernels._dist.replicate_partials`).
        """
        if not is_dtensor(r) or not any(p.is_partial() for p in r.placements):
            return r
        return replicate_partials(r)

    def spectral_input(self, xp: Namespace, x: Any, axis: tuple[int, int]) -> Any:
        """``x``; a DTensor sharded over a matrix axis is refused (its SVD needs a gather)."""
        if is_dtensor(x):
            ndim = x.ndim
            matrix = {a % ndim for a in axis}
            sharded = [p.dim % ndim for p in x.placements if p.is_shard()]
            if any(d in matrix for d in sharded):
                msg = (
                    "the matrix 2-norm (`ord=2` with a 2-tuple `axis`) of a DTensor sharded "
                    f"over a matrix axis is not implemented (placements {tuple(x.placements)}, "
                    f"axis={axis}): an SVD needs whole matrices; pass x.full_tensor(), or "
                    "shard over a batch axis"
                )
                raise NotImplementedError(msg)
        return x

    def local(self, xp: Namespace, x: Any) -> Any:
        """A DTensor's value on this rank as a plain tensor (``Replicate`` placements only)."""
        if not is_dtensor(x):
            return x
        if not all(p.is_replicate() for p in x.placements):
            msg = (
                "`use_norm` must be a replicated value; got a DTensor with placements "
                f"{tuple(x.placements)}: pass norm.full_tensor() or the result of global_norm"
            )
            raise ValueError(msg)
        return x.to_local()

    def replicated(self, xp: Namespace, value: Any, like: Any) -> Any:
        """``value`` as a ``Replicate`` DTensor on ``like``'s mesh when ``like`` is a DTensor."""
        if not is_dtensor(like):
            return value
        from torch.distributed.tensor import DTensor, Replicate

        mesh = like.device_mesh
        return DTensor.from_local(
            value, mesh, [Replicate()] * mesh.ndim, run_check=False, shape=value.shape
        )

    def _by_device(self, xp: Namespace, arrays: Sequence[Any], acc: Any) -> Any:
        home = arrays[0].device
        if _one_device(arrays):  # no grouping
            return self.cast_half_squares(xp, arrays, acc)
        by_device: dict[Any, list[Any]] = {}
        for a in arrays:
            by_device.setdefault(a.device, []).append(a)
        if len(by_device) == 1:
            return self.cast_half_squares(xp, arrays, acc)
        _check_devices(list(by_device))
        partials = [
            torch_to(self.cast_half_squares(xp, group, acc), home) for group in by_device.values()
        ]
        return reduce_sum(xp, xp.stack(partials), None, keepdims=False)

    def scale(self, xp: Namespace, t_list: Sequence[Any], scale: Any) -> list[Any]:
        """As :meth:`Kernels.scale`, with the factor sent to each array's device and dtype.

        One ``torch._foreach_mul`` per (device, dtype) group when :func:`_foreach_scale_ok`.
        """
        import torch

        scale = self.local(xp, scale)
        if any_dtensor(t_list):  # scale each local shard; placements kept
            return _scale_dtensors(self, xp, t_list, scale)
        by_group: dict[tuple[Any, Any], list[int]] = {}
        present = [v for v in t_list if v is not None]
        if not present:
            return [None] * len(t_list)
        first = present[0]
        if len(present) == len(t_list) and _one_device(present):
            dtypes = {v.dtype for v in present}
            if dtypes == {first.dtype}:  # one group, the common case: no per-tensor grouping
                by_group[(first.device, first.dtype)] = list(range(len(t_list)))
        if not by_group:
            for i, v in enumerate(t_list):
                if v is not None:
                    by_group.setdefault((v.device, v.dtype), []).append(i)
        out: list[Any] = [None] * len(t_list)
        recorded = torch.is_grad_enabled() and scale.requires_grad
        for (dev, dtype), where in by_group.items():
            group = list(t_list) if len(where) == len(t_list) else [t_list[i] for i in where]
            s = scale
            if s.device != dev:
                s = torch_to(s, dev)
            if s.dtype != dtype:
                s = tf_cast(xp, s, dtype)
            results: Sequence[Any]
            if scale.ndim == 0 and not recorded and _foreach_scale_ok(group):
                results = torch._foreach_mul(group, s)
            else:
                results = _products(xp, group, s)
            if len(where) == len(t_list):
                return list(results)
            for i, r in zip(where, results, strict=True):
                out[i] = r
        return out


def _foreach_scale_ok(group: Sequence[Any]) -> bool:
    """Whether ``group`` (one device, one dtype) is scaled by one ``torch._foreach_mul``.

    float32, float64, bfloat16 and float16 (each product is ``v * s`` in ``v``'s dtype,
    rounded once, as the per-array loop), under :func:`_fast_ok`'s other conditions.
    """
    return _fast_ok(group, one_dtype=True, dtypes=_FAST + HALF_PRECISION)


def _products(xp: Namespace, group: Sequence[Any], s: Any) -> list[Any]:
    """``[v * s for v in group]`` (one dtype, one device; ``s`` of that dtype).

    uint16, uint32 and uint64 through :func:`anyclip._torch_unsigned.multiply`, exact where
    torch has no ``mul`` kernel for them (CUDA). ``s``'s gradients from the products are
    added as eager torch's backward adds them, the last array's first
    (:func:`~anyclip._gradients.uses`: each sum rounded under ``torch.compile`` too).
    """
    from anyclip import _torch_unsigned

    if group[0].dtype in _torch_unsigned.BAREBONES:
        return [_torch_unsigned.multiply(v, s) for v in group]
    factors = uses(xp, s, len(group))[::-1]
    return [product(xp, v, f) for v, f in zip(group, factors, strict=True)]


def _broadcast_over_shards(owned: Any, divisor: Any) -> bool:
    """Whether ``divisor`` is a ``Replicate`` DTensor of size 1 on every dim ``owned`` shards.

    Each shard of ``owned`` is then divided by the divisor's local value, broadcast.
    """
    if not is_dtensor(divisor) or divisor.device_mesh != owned.device_mesh:
        return False
    if not all(p.is_replicate() for p in divisor.placements) or divisor.ndim != owned.ndim:
        return False
    if any(p.is_partial() for p in owned.placements):
        return False
    return all(divisor.shape[p.dim] == 1 for p in owned.placements if p.is_shard())


def _scale_dtensors(
    kernels: TorchKernels, xp: Namespace, t_list: Sequence[Any], scale: Any
) -> list[Any]:
    """:meth:`TorchKernels.scale` of a list holding DTensors: each local shard is scaled.

    No communication: the factor is the same on every rank, and each result is rebuilt from
    its scaled shard with the input's mesh, placements, shape and stride.
    """
    from torch.distributed.tensor import DTensor

    plain = [None if v is None or is_dtensor(v) else v for v in t_list]
    locals_ = [v.to_local() if is_dtensor(v) else None for v in t_list]
    scaled_plain = kernels.scale(xp, plain, scale)
    scaled_local = kernels.scale(xp, locals_, scale)
    out: list[Any] = []
    for v, p, loc in zip(t_list, scaled_plain, scaled_local, strict=True):
        if v is None or not is_dtensor(v):
            out.append(p)
            continue
        out.append(
            DTensor.from_local(
                loc,
                v.device_mesh,
                v.placements,
                run_check=False,
                shape=v.shape,
                stride=v.stride(),
            )
        )
    return out
