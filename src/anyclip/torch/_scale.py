"""The torch adapter's in-place scaling: gradients multiplied by TF's clip factor, per device.

Layer: adapter helpers, above :mod:`anyclip.torch._common`. TF's factor from a norm and a
threshold, applied in place (foreach where torch would use it, DTensors shard by shard), with
subnormals flushed inside :class:`anyclip.flush_subnormals`.
"""

from __future__ import annotations

from typing import Any

import torch

from anyclip import _core
from anyclip._compat import namespace, torch_compiling, torch_to
from anyclip._kernels import FLUSH_GENERIC
from anyclip._numerics import torch_rounded
from anyclip._policy import as_operand, finite_number
from anyclip._subnormals import flush, flushing
from anyclip.torch._common import _by_device_and_dtype, _local, _no_meta, _plain, _use_foreach

__all__ = ["_flush_", "_mul_", "_scale_"]


def _scale_(
    values: list[torch.Tensor],
    max_norm: float | torch.Tensor,
    total_norm: torch.Tensor,
    foreach: bool | None,
    policy: Any,
    unclipped_at_inf: bool = True,
    plain: tuple[torch.device, torch.dtype] | None = None,
) -> None:
    """Multiply every tensor of ``values`` in place by TF's factor ``c * min(1/norm, 1/c)``.

    ``max_norm`` comes from :func:`_max_norm`. ``unclipped_at_inf`` (the drop-ins): a
    ``max_norm`` of ``+inf`` gives the factor 1 (NaN for a non-finite norm), as torch's
    clamped coefficient, instead of TF's ``inf * 0 = NaN``; ``False`` (Keras) keeps TF's.
    """
    total_norm = _local(total_norm)  # a Replicate DTensor's value
    if not total_norm.is_meta:  # torch reads max_norm with float(): its RuntimeError, named
        _no_meta(max_norm, "max_norm")
    xp = namespace(total_norm)
    at_inf = unclipped_at_inf and not finite_number(max_norm, xp, total_norm.dtype)
    c = as_operand(max_norm, xp, total_norm, "max_norm", cast_arrays=True)
    k = FLUSH_GENERIC if flushing() else None
    scale = _core.global_scale(xp, c, total_norm, policy, unclipped_at_inf=at_inf, kernels=k)
    _mul_(values, scale, foreach, ftz=k is not None, plain=plain)


def _mul_(
    values: list[torch.Tensor],
    scale: torch.Tensor,
    foreach: bool | None = None,
    *,
    ftz: bool = False,
    plain: tuple[torch.device, torch.dtype] | None = None,
    opmath: bool = False,
) -> None:
    """Multiply every tensor of ``values`` in place by the 0-d ``scale``, cast to its dtype.

    ``ftz`` (inside :class:`anyclip.flush_subnormals`): subnormal values count as 0 and
    subnormal products become 0, as in TF. ``plain``:
    :func:`~anyclip.torch._common._plain` of ``values``, where the caller has it.
    ``opmath``: float16 and bfloat16 tensors are multiplied by ``scale`` cast to float32
    instead (torch's ``grad.mul_(python_float)``: the number rounded to float32, the product
    in float32, rounded once; on the CPU, where torch reads a 0-d float32 tensor the same way).
    """
    key = None if ftz else _plain(values) if plain is None else plain
    if key is not None:  # the common case: one device, one dtype, plain dense tensors
        device, dtype = key
        s = torch_rounded(torch_to(scale, device, _opmath(dtype) if opmath else dtype))
        if _compiled_opmath(values, s, device):
            return
        if _use_foreach(foreach, values, device):
            torch._foreach_mul_(values, s)
        else:
            for g in values:
                g.mul_(s)
        return
    shards = [_local(v) for v in values]  # DTensors scaled shard by shard, in place
    if ftz:
        _flush_(shards)
    for (device, dtype), grp in _by_device_and_dtype(shards).items():
        s = torch_rounded(torch_to(scale, device, _opmath(dtype) if opmath and not ftz else dtype))
        if ftz:
            s = flush(namespace(s), s)
        if _compiled_opmath(grp, s, device):
            continue
        if _use_foreach(foreach, grp, device):
            torch._foreach_mul_(grp, s)
        else:
            for g in grp:
                g.mul_(s)
    if ftz:
        _flush_(shards)


def _compiled_opmath(values: list[torch.Tensor], s: torch.Tensor, device: torch.device) -> bool:
    """Under ``torch.compile`` on the CPU, ``values`` (of one dtype) times a wider ``s``.

    Eager torch on the CPU multiplies a float16 or bfloat16 tensor by a 0-d float32 tensor in
    float32 and rounds once; Inductor rounds a factor computed in the graph to the tensor's
    dtype first (ZClip's bfloat16 gradients: 1 ULP off on 28% of the elements). Here the
    product is taken in ``s``'s dtype and written back, rounded once, as eagerly. Returns
    whether it did (False: eager calls, other devices, a factor of the tensors' dtype).
    """
    if not values or s.dtype == values[0].dtype or device.type != "cpu":
        return False
    if not torch_compiling():
        return False
    for g in values:
        g.copy_(g.to(s.dtype) * s)
    return True


def _opmath(dtype: torch.dtype) -> torch.dtype:
    """The dtype torch computes ``dtype``'s products with a number in: float32 for halves."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _flush_(values: list[torch.Tensor]) -> None:
    """Flush every tensor of ``values`` in place: subnormal entries become 0 (TF's FTZ/DAZ)."""
    for v in values:
        v.copy_(flush(namespace(v), v))
