"""torch's uint16, uint32 and uint64: the kernels it lacks, and exact routes around them.

Layer: primitives of the core (the torch side of :func:`anyclip._gradients.maximum` and
``minimum``) and of the torch kernels (the products of
:meth:`anyclip._kernels._torch.TorchKernels.scale`). Imported only when anyclip meets a torch
tensor (importing ``anyclip`` imports no framework).

torch gives these three dtypes "barebones" support only, and its builds differ in what they
lack (measured; TF has every kernel for them, and anyclip must give TF's values):

* every device: no ``minimum``, ``maximum``, ``clamp`` or comparison (torch 2.13 CPU, torch
  2.11 CUDA);
* CUDA: no ``mul`` (``"mul_cuda" not implemented for 'UInt16'``) and no ``where`` (``'UInt32'``,
  ``'UInt64'``) either (torch 2.11, an H200). anyclip's only ``where`` on these dtypes was in
  :func:`anyclip._numerics.tf_cast`, which now selects in int64 and casts once at the end.

The routes reinterpret the bits in the signed type of the same width (``Tensor.view(dtype)``:
no copy) and are exact on every device:

* **multiply**: the low ``n`` bits of a product do not depend on signedness (two's
  complement), so an ``intN`` product, viewed back, is the ``uintN`` product modulo ``2**n``,
  as TF's.
* **minimum, maximum**: flipping the sign bit (``xor`` with ``-2**(n-1)``) maps unsigned order
  onto signed order (0 to ``-2**(n-1)``, ``2**n - 1`` to ``2**(n-1) - 1``); the signed
  minimum or maximum, flipped back and viewed as unsigned, is the unsigned one.

Which device lacks which kernel is decided in one place, :func:`lacks`, from :data:`MISSING`
(tests replace it to force the routes on the CPU). An op that still meets no kernel raises a
``TypeError`` naming the dtype, the device and the op.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["BAREBONES", "MISSING", "lacks", "multiply", "select"]

#: The unsigned dtypes with torch's barebones support (uint8 has every kernel).
BAREBONES: frozenset[Any] = frozenset({torch.uint16, torch.uint32, torch.uint64})

#: The signed dtype of the same width as each of :data:`BAREBONES`, and its lowest value
#: (the sign bit alone).
_SIGNED: dict[Any, tuple[Any, int]] = {
    torch.uint16: (torch.int16, -(2**15)),
    torch.uint32: (torch.int32, -(2**31)),
    torch.uint64: (torch.int64, -(2**63)),
}

#: The ops torch lacks for :data:`BAREBONES` dtypes, by device type; ``"*"`` for every other
#: device type (CUDA measured; the others are taken to lack as much: the routes are exact
#: everywhere and cost no more than the op, a view being free).
MISSING: dict[str, frozenset[str]] = {
    "cpu": frozenset({"compare"}),
    "*": frozenset({"compare", "multiply"}),
}


def lacks(x: Any, op: str) -> bool:
    """Whether torch has no kernel for ``op`` (``"compare"``, ``"multiply"``) on ``x``.

    True only for a :data:`BAREBONES` dtype on a device type whose :data:`MISSING` entry
    names ``op``. Decided from the dtype and the device type alone: no value is read.
    """
    if x.dtype not in BAREBONES:
        return False
    missing = MISSING.get(x.device.type)
    if missing is None:
        missing = MISSING["*"]
    return op in missing


def _unsupported(x: Any, op: str, exc: Exception) -> TypeError:
    """The error for ``op`` on ``x``'s dtype and device, where no route helps."""
    dtype = str(x.dtype).removeprefix("torch.")
    msg = (
        f"an array of dtype {dtype} on device {x.device} cannot be used here: torch has no "
        f"{op} kernel for it there ({exc}); cast it to int64 (or a floating dtype) first"
    )
    return TypeError(msg)


def _ordered(x: Any) -> Any:
    """``x`` (unsigned) as its signed twin, with unsigned order: the sign bit flipped."""
    signed, sign = _SIGNED[x.dtype]
    return torch.bitwise_xor(x.view(signed), sign)


def select(x: Any, y: Any, take_max: bool) -> Any:
    """``maximum(x, y)`` (``take_max``) or ``minimum(x, y)`` of one unsigned dtype.

    Through sign-flipped signed views where :func:`lacks` says so (every device today).
    """
    name = "maximum" if take_max else "minimum"
    try:
        if not lacks(x, "compare"):
            return torch.maximum(x, y) if take_max else torch.minimum(x, y)
        dtype = x.dtype
        sx, sy = _ordered(x), _ordered(y)
        r = torch.maximum(sx, sy) if take_max else torch.minimum(sx, sy)
        return torch.bitwise_xor(r, _SIGNED[dtype][1]).view(dtype)
    except NotImplementedError as exc:
        raise _unsupported(x, name, exc) from exc


def multiply(x: Any, y: Any) -> Any:
    """``x * y`` of one unsigned dtype, wrapping modulo ``2**n`` as TF's.

    Through signed views where :func:`lacks` says so (every device but the CPU).
    """
    try:
        if not lacks(x, "multiply"):
            return x * y
        dtype = x.dtype
        signed = _SIGNED[dtype][0]
        return (x.view(signed) * y.view(signed)).view(dtype)
    except NotImplementedError as exc:
        raise _unsupported(x, "multiply", exc) from exc
