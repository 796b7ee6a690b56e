"""The torch adapter's total norm: one norm over many gradients, on any device, in any group.

Layer: adapter helpers, above :mod:`anyclip.torch._common`. The 2-norm is
:func:`anyclip.global_norm`'s; other orders are torch's per-tensor norms (cast block by block
where an ``accumulate_dtype`` widens them), combined across a process group, and the error a
non-finite norm raises when asked to.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from anyclip import _clip
from anyclip._compat import namespace
from anyclip._kernels import _base
from anyclip._kernels._base import partials
from anyclip._kernels._dist import (
    all_reduce_torch,
    check_group,
    dtensor_extreme,
    is_dtensor,
    zero_partial,
)
from anyclip._kernels._torch import TorchKernels
from anyclip._policy_dtypes import resolve_accumulate_dtype
from anyclip.torch._common import _by_device_and_dtype, _check_values, _plain, _use_foreach

__all__ = [
    "NonfiniteNormError",
    "_across",
    "_block_norm",
    "_join_group",
    "_p_norm",
    "_raise_nonfinite",
    "_total_norm",
]


class NonfiniteNormError(RuntimeError, FloatingPointError):
    """The total norm is inf or NaN and clipping was asked to raise.

    A ``RuntimeError`` (what torch's ``error_if_nonfinite=True`` raises, with torch's message)
    and a ``FloatingPointError`` (what anyclip's ``nonfinite="raise"`` raises), so code written
    for either catches it.
    """


def _total_norm(
    values: list[torch.Tensor],
    norm_type: float,
    foreach: bool | None,
    accumulate_dtype: Any,
    group: Any = None,
    name: str = "parameters",
    plain: tuple[torch.device, torch.dtype] | None = None,
) -> torch.Tensor:
    """The norm of ``values`` (dense, at least one) as one vector.

    ``plain``: :func:`~anyclip.torch._common._plain` of ``values``, where the caller has it.

    With ``group``: the 2-norm is :func:`anyclip.global_norm`'s (one all-reduce of the
    partial sum); another order all-reduces this rank's norm (:func:`_across`).
    DTensors of another order: torch's own DTensor norms, made ``Replicate``. ``name`` is the
    caller's argument, for the error messages.
    """
    key = _plain(values) if plain is None else plain
    if key is not None and norm_type == 2.0 and group is None:
        # the common case: one device, one floating dtype, plain dense tensors (no regrouping)
        if foreach:
            _use_foreach(foreach, values, key[0])  # torch's foreach=True error, nothing else
        xp = namespace(values[0])
        return _clip._global_norm_of(None, xp, values, accumulate_dtype)[0]  # type: ignore[no-any-return]
    _check_values(values, accumulate_dtype, name)
    if norm_type == 2.0:
        for (device, _), grp in _by_device_and_dtype(values).items():
            _use_foreach(foreach, grp, device)  # torch's foreach=True error, nothing else
        return _clip.global_norm(values, accumulate_dtype=accumulate_dtype, group=group)
    groups = check_group(namespace(values[0]), group)
    local = _p_norm(values, norm_type, foreach, accumulate_dtype)
    if not is_dtensor(local):
        return _across(local, norm_type, groups) if groups else local
    # DTensors: a Replicate DTensor, as the 2-norm's and torch's own get_total_norm
    norm: Any = TorchKernels().settle(namespace(values[0]), local)
    if not groups:
        return norm  # type: ignore[no-any-return]
    from torch.distributed.tensor import DTensor, Replicate

    mesh = norm.device_mesh
    total = _across(norm.to_local(), norm_type, groups)
    out: torch.Tensor = DTensor.from_local(total, mesh, [Replicate()] * mesh.ndim, run_check=False)
    return out


def _across(local: torch.Tensor, norm_type: float, groups: tuple[Any, ...]) -> torch.Tensor:
    """The norm of order ``norm_type`` (not 2) over ``groups``, from this rank's ``local`` one.

    One all-reduce of a scalar per group (of two for +-inf): the maximum (inf) or minimum
    (-inf), NaN on every rank when on one (:func:`~anyclip._kernels._dist.all_reduce_torch`);
    the sum of the counts for 0 (torch's order 0 counts the tensors with a non-zero element);
    the sum of ``local ** norm_type`` otherwise, as torchtitan.
    """
    out: torch.Tensor
    if math.isinf(norm_type):
        out = all_reduce_torch(local, groups, op="max" if norm_type > 0 else "min")
    elif norm_type == 0:
        out = all_reduce_torch(local, groups)
    else:
        out = all_reduce_torch(local**norm_type, groups) ** (1.0 / norm_type)
    return out


def _p_norm(
    values: list[torch.Tensor], norm_type: float, foreach: bool | None, accumulate_dtype: Any
) -> torch.Tensor:
    """The norm of the per-tensor norms of order ``norm_type`` (not 2), as torch's."""
    xp = namespace(values[0])
    dtypes = list(dict.fromkeys(v.dtype for v in values))  # floating, one unless `acc`
    acc = resolve_accumulate_dtype(xp, accumulate_dtype, dtypes)
    home = values[0].device
    norms: list[torch.Tensor] = []
    for (device, dtype), grp in _by_device_and_dtype(values).items():
        cast = None if acc is None or acc == dtype else acc
        if cast is not None:  # torch casts each tensor whole: large ones go by blocks
            large = [g for g in grp if g.numel() > _base.UPCAST_BLOCK and not is_dtensor(g)]
            grp = [g for g in grp if g.numel() <= _base.UPCAST_BLOCK or is_dtensor(g)]
            norms.extend(_block_norm(g, norm_type, cast) for g in large)
        if not grp:
            continue
        if _use_foreach(foreach, grp, device) and not any(is_dtensor(g) for g in grp):
            norms.extend(torch._foreach_norm(grp, norm_type, dtype=cast))
        else:
            norms.extend(_vector_norm(g, norm_type, cast) for g in grp)
    total: torch.Tensor = torch.linalg.vector_norm(
        torch.stack([n.to(home) for n in norms]), norm_type
    )
    return total


def _vector_norm(g: torch.Tensor, norm_type: float, cast: torch.dtype | None) -> torch.Tensor:
    """``torch.linalg.vector_norm(g, norm_type, dtype=cast)``; a DTensor's inf norms shard-wise.

    DTensor's own inf and -inf norms raise on a rank whose shard is empty (an uneven
    ``Shard``), leaving the other ranks waiting in the all-reduce (torch's ``get_total_norm``
    too): that rank takes the identity of the maximum of norms, 0 (of the minimum, inf)
    instead (:func:`~anyclip._kernels._dist.dtensor_extreme`), a ``Partial`` norm as
    DTensor's.
    """
    if math.isinf(norm_type) and is_dtensor(g) and g.numel() > 0:
        op = "max" if norm_type > 0 else "min"
        out = dtensor_extreme(
            g,
            tuple(range(g.ndim)),
            op,
            lambda t, a: torch.linalg.vector_norm(t, norm_type, dim=a, keepdim=True, dtype=cast),
            dtype=cast,
            identity=0.0 if op == "max" else math.inf,
        )
        if out is not None:
            local: torch.Tensor = out.reshape(())
            return local
    norm: torch.Tensor = torch.linalg.vector_norm(g, norm_type, dtype=cast)
    return norm


def _block_norm(g: torch.Tensor, norm_type: float, cast: torch.dtype) -> torch.Tensor:
    """``vector_norm(g, norm_type, dtype=cast)``, one block of ``g`` cast at a time.

    torch's ``vector_norm(dtype=...)`` and ``_foreach_norm(dtype=...)`` cast the whole tensor
    (3 times the input's memory, float16 to float32). The blocks' norms combine into ``g``'s:
    the p-norm of the blocks' p-norms (max and min of their maxima and minima for +-inf), and
    the sum of their counts for ``norm_type=0`` (a count of non-zero elements).
    """
    xp = namespace(g)
    kernels = TorchKernels()
    blocks = kernels.blocks(xp, g) or [g]
    steps = [lambda b=b: torch.linalg.vector_norm(b, norm_type, dtype=cast) for b in blocks]
    parts: torch.Tensor = partials(xp, steps, cast, [g])
    total: torch.Tensor = (
        parts.sum() if norm_type == 0 else torch.linalg.vector_norm(parts, norm_type)
    )
    return total


def _join_group(norm_type: float, accumulate_dtype: Any, group: Any) -> torch.Tensor:
    """The norm over ``group`` for a process without any tensor (it joins the all-reduce)."""
    if norm_type == 2.0:
        return _clip.global_norm([], accumulate_dtype=accumulate_dtype, group=group)
    import array_api_compat.torch as xp

    groups = check_group(xp, group)
    zero = zero_partial(xp, torch.float32, groups)  # on the device the groups' backend uses
    if norm_type == -math.inf:  # nothing to take the minimum of: the minimum's identity
        return _across(zero + math.inf, norm_type, groups)
    if math.isinf(norm_type) or norm_type == 0:  # a maximum, a count: 0 adds nothing
        return _across(zero, norm_type, groups)
    # the sum of the others' local ** norm_type, then the root
    out: torch.Tensor = all_reduce_torch(zero, groups) ** (1.0 / norm_type)
    return out


def _raise_nonfinite(norm: torch.Tensor, norm_type: float) -> None:
    if not bool(torch.isfinite(norm)):  # host sync, by request
        msg = (  # torch's message word for word, then the value
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False` "
            f"(the global norm of the gradients is not finite: {float(norm)})"
        )
        raise NonfiniteNormError(msg)
