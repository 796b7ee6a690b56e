"""The torch adapter's arguments: tensors, numbers and options coerced as torch takes them.

Layer: adapter helpers, below every public module of :mod:`anyclip.torch`. Parameters and
gradients as lists of tensors (a DTensor by its local shard), ``max_norm`` and ``norm_type``
read as torch reads them, the non-finite policy, and the tensors grouped by device and dtype
with torch's rule for ``foreach``.
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from collections.abc import Iterable
from typing import Any, cast

import torch
import torch.utils._contextlib

from anyclip._compat import imported, torch_compiling_off_the_cpu
from anyclip._kernels._dist import is_dtensor
from anyclip._policy import check_nonfinite
from anyclip._sparse import dense_operand
from anyclip._typing import Nonfinite

__all__ = [
    "Parameters",
    "_as_float",
    "_by_device_and_dtype",
    "_check_devices",
    "_check_values",
    "_describe",
    "_foreach",
    "_grads",
    "_local",
    "_max_norm",
    "_norm_type",
    "_no_meta",
    "_plain",
    "_policy",
    "_tensors",
    "_truth",
    "_use_foreach",
]


Parameters = torch.Tensor | Iterable[torch.Tensor]


def _tensors(value: Any, name: str, *, warn_empty: bool = False) -> list[torch.Tensor]:
    """``value`` (a tensor or an iterable of tensors) as a list, as torch accepts it.

    ``warn_empty``: warn of an empty generator, as torch's ``clip_grad_norm_`` does (its
    ``get_total_norm``, ``clip_grads_with_norm_`` and ``clip_grad_value_`` do not), at the
    caller's line.
    """
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        msg = (
            f"`{name}` must be a tensor or an iterable of tensors, got a dict; pass "
            f"`model.parameters()` or `list(d.values())` (for a tree of arrays use anyclip.tree)"
        )
        raise TypeError(msg)
    try:
        is_generator = isinstance(value, types.GeneratorType)
        out = list(value)
    except TypeError:
        msg = (
            f"`{name}` must be a tensor or an iterable of tensors, "
            f"got {type(value).__module__}.{type(value).__qualname__}"
        )
        raise TypeError(msg) from None
    if warn_empty and is_generator and not out:  # torch's own warning, word for word
        warnings.warn(
            f"`{name}` is an empty generator, no gradient clipping will occur.",
            stacklevel=_caller_level(),
        )
    for i, t in enumerate(out):
        if not isinstance(t, torch.Tensor):
            msg = f"`{name}[{i}]` must be a tensor, got {type(t).__module__}.{type(t).__name__}"
            raise TypeError(msg)
    return out


def _grads(parameters: Any, *, warn_empty: bool = False) -> list[torch.Tensor]:
    params = _tensors(parameters, "parameters", warn_empty=warn_empty)
    return [p.grad for p in params if p.grad is not None]


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside anyclip, for the caller's ``warn``.

    Frames of anyclip's own modules (the public function, its decorators) and of torch's
    ``no_grad`` decorator are skipped, so the warning names the user's line, as torch's.
    """
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the anyclip package
    wrapper = os.path.abspath(torch.utils._contextlib.__file__)
    frame: Any = sys._getframe(1)  # the function that calls warnings.warn: stacklevel 1
    level = 1
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not (path.startswith(here + os.sep) or path == wrapper):
            break
        frame = frame.f_back
        level += 1
    return level


def _local(x: Any) -> Any:
    """A DTensor's local tensor (its shard, sharing storage); anything else unchanged."""
    return x.to_local() if is_dtensor(x) else x


def _foreach(foreach: Any) -> bool | None:
    """``foreach`` read as torch reads it: ``None``, or its truth value.

    torch tests it with ``if``, so ``"x"`` or ``1`` mean True, and a tensor of several values
    raises torch's own ``RuntimeError``.
    """
    return None if foreach is None else _truth(foreach, "foreach")


def _truth(value: Any, name: str) -> bool:
    """``bool(value)``, as torch's ``if``; a meta tensor is torch's ``RuntimeError``, named."""
    _no_meta(value, name, "a truth value")
    return bool(value)


def _no_meta(value: Any, name: str, what: str = "a number") -> None:
    """A ``RuntimeError`` (torch's) for a meta tensor that torch reads on the host, named.

    torch's own (``Tensor.item() cannot be called on meta tensors``) names no argument.
    """
    if isinstance(value, torch.Tensor) and _local(value).is_meta:
        msg = (
            f"`{name}` is a tensor on the meta device (a shape without values), which torch "
            f"reads as {what}: it has none to read; pass a Python value or a tensor with values"
        )
        raise RuntimeError(msg)


def _describe(value: Any) -> str:
    """``value`` for an error message: a tensor by its shape and dtype, anything else by repr."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return repr(value)


def _as_float(value: Any, name: str, example: str) -> float:
    """``float(value)``, as torch converts its number arguments, with an error naming ``name``.

    torch's error classes are kept: ``TypeError`` (None, a list, a complex number),
    ``ValueError`` (a string that is no number, a tensor of several values), ``RuntimeError``
    (a complex tensor).
    """
    _no_meta(value, name)
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
            raise  # a valid tensor whose read failed: set_sync_debug_mode("error") refused it
        cls: type[Exception] = RuntimeError
        if isinstance(exc, TypeError):
            cls = TypeError
        elif isinstance(exc, ValueError):
            cls = ValueError
        msg = (
            f"`{name}` must be a real number or a one-element real tensor (torch converts it "
            f"with float()), got {_describe(value)}; pass e.g. {name}={example}"
        )
        raise cls(msg) from None


def _max_norm(max_norm: Any) -> float | torch.Tensor:
    """``max_norm`` as torch takes it: a number, or a one-element real tensor of any dtype.

    A number goes through ``float()`` (strings such as ``'inf'`` too); a tensor is kept on its
    device (no host sync).
    """
    max_norm = dense_operand(max_norm, "max_norm")  # a sparse one, as torch takes it
    local = _local(max_norm)
    if not isinstance(local, torch.Tensor):
        return _as_float(max_norm, "max_norm", "1.0")
    if local.numel() != 1:  # torch's float() raises ValueError
        msg = (
            f"`max_norm` must hold one value, got a tensor of shape {tuple(local.shape)}; "
            "pass a 0-d tensor or a number"
        )
        raise ValueError(msg)
    if local.is_complex():  # torch's float() raises RuntimeError
        msg = f"`max_norm` must be real, got a tensor of dtype {local.dtype}; pass its real part"
        raise RuntimeError(msg)
    return local.reshape(())


def _use_foreach(foreach: bool | None, group: list[torch.Tensor], device: torch.device) -> bool:
    """Torch's rule: ``None`` uses foreach where supported; ``True`` raises where it is not.

    While ``torch.compile`` traces tensors off the CPU, never: Inductor writes its own kernels
    there (``foreach`` chooses none of torch's), and its multi-tensor kernel for
    ``_foreach_mul_`` read the clipping factor before the same launch wrote it (GPU run 5:
    torch 2.11, an H200, gradients made in the compiled function came back unscaled);
    per-tensor ops give the eager results.
    """
    from torch.utils._foreach_utils import _device_has_foreach_support, _foreach_supported_types

    if foreach is None:  # torch's _has_foreach_support, one pass over the types
        types = {type(t) for t in group}
        supported = types <= set(_foreach_supported_types)
        return (
            supported
            and bool(_device_has_foreach_support(device))
            and not torch_compiling_off_the_cpu(device)
        )
    if foreach and not _device_has_foreach_support(device):
        msg = f"foreach=True was passed, but can't use the foreach API on {device.type} tensors"
        raise RuntimeError(msg)
    return foreach and not torch_compiling_off_the_cpu(device)


def _by_device_and_dtype(
    tensors: list[torch.Tensor],
) -> dict[tuple[torch.device, torch.dtype], list[torch.Tensor]]:
    out: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for t in tensors:
        out.setdefault((t.device, t.dtype), []).append(t)
    return out


#: The types of a plain dense tensor: no subclass (a DTensor, a jagged nested tensor, a
#: tensor subclass of another library), whose methods and layout anyclip would have to ask.
_PLAIN_TYPES = frozenset((torch.Tensor, torch.nn.Parameter))

#: The dtypes :func:`_plain` answers for: those every global-norm route takes as they are.
_PLAIN_DTYPES = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))


def _fake_types() -> frozenset[type]:
    """:data:`_PLAIN_TYPES` and torch's ``FakeTensor``, once torch has loaded it.

    A fake tensor is a dense tensor's stand-in without data, made under ``FakeTensorMode``
    (torch's tracing, the host-sync tests).
    """
    fake = imported("torch._subclasses.fake_tensor")
    cls = getattr(fake, "FakeTensor", None)
    return _PLAIN_TYPES if cls is None else _PLAIN_TYPES | {cls}


def _plain(tensors: list[torch.Tensor]) -> tuple[torch.device, torch.dtype] | None:
    """The one (device, dtype) of ``tensors``, the common case; None for anything else.

    The common case: at least one tensor, each a plain ``torch.Tensor`` or ``Parameter`` (no
    subclass, so no DTensor; torch's ``FakeTensor`` too), strided and not nested, all on one
    device with one of the floating dtypes float16, bfloat16, float32, float64. Decided with
    one pass over the types, one over the layouts and torch's C++ grouping by device and
    dtype (what torch's own ``clip_grad_norm_`` groups with), instead of a helper call per
    tensor (sparse values, DTensor shards, a dict of groups): such a list is its own values
    and local shards, in one group. None while ``torch.compile`` traces (it traces the
    general code).
    """
    if not tensors or torch.compiler.is_compiling():
        return None
    types = {type(t) for t in tensors}
    if not types <= _PLAIN_TYPES and not types <= _fake_types():
        return None
    if {t.layout for t in tensors} != {torch.strided} or any([t.is_nested for t in tensors]):
        return None  # sparse or nested: the general code (its refusals and values)
    from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype

    grouped = _group_tensors_by_device_and_dtype([cast("list[torch.Tensor | None]", tensors)])
    if len(grouped) != 1:
        return None
    key: tuple[torch.device, torch.dtype] = next(iter(grouped))
    return key if key[1] in _PLAIN_DTYPES else None


def _check_devices(tensors: list[torch.Tensor], name: str) -> None:
    """``ValueError`` for a list mixing the ``meta`` device with another: no value can move."""
    devices = list(dict.fromkeys(t.device for t in tensors))
    if len(devices) > 1 and any(d.type == "meta" for d in devices):
        msg = (
            f"`{name}` mixes devices {devices[0]} and {devices[1]}: a meta tensor has no "
            "values, so no norm can combine it with the others; move every tensor to one "
            "device (or materialise the model with `to_empty`) first"
        )
        raise ValueError(msg)


def _norm_type(norm_type: Any) -> float:
    """``float(norm_type)``, as torch: any number, ``'inf'``, and NaN (a NaN norm)."""
    return _as_float(norm_type, "norm_type", "2.0 (or 'inf')")


def _policy(error_if_nonfinite: bool, nonfinite: Any) -> Nonfinite:
    error_if_nonfinite = _truth(error_if_nonfinite, "error_if_nonfinite")
    policy = check_nonfinite(nonfinite)
    if error_if_nonfinite and policy not in ("tf", "raise"):
        msg = (
            f"`error_if_nonfinite=True` asks to raise on a non-finite norm but `nonfinite` is "
            f"{policy!r}, which asks not to; pass one of them only"
        )
        raise ValueError(msg)
    return "raise" if error_if_nonfinite else policy


def _check_values(values: list[torch.Tensor], accumulate_dtype: Any, name: str) -> None:
    """``TypeError`` or ``ValueError`` unless ``values`` can form one norm (see below)."""
    _check_devices(values, name)
    dtypes = list(dict.fromkeys(v.dtype for v in values))
    for dtype in dtypes:
        if not dtype.is_floating_point:
            msg = (
                f"`{name}` must hold real floating tensors (float16, bfloat16, float32 or "
                f"float64), got one of dtype {dtype}; convert it (e.g. with `.float()`)"
            )
            raise TypeError(msg)
    if accumulate_dtype is None and len(dtypes) > 1:
        msg = (
            f"`{name}` must hold tensors of one dtype with `accumulate_dtype=None` (TF does "
            f"not promote), got {dtypes[0]} and {dtypes[1]}; pass accumulate_dtype='widest'"
        )
        raise TypeError(msg)
