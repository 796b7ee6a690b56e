"""The one place that talks to array-api-compat.

Everything else in anyclip asks this module for an array namespace, a device or a dtype fact. It
never imports torch, jax or tensorflow: array-api-compat recognises their arrays through
``sys.modules``, so importing anyclip stays cheap and framework-free.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Sequence
from typing import Any

import array_api_compat

__all__ = [
    "Namespace",
    "as_array",
    "comparable_dtype",
    "complex_from_parts",
    "constant",
    "default_namespace",
    "device",
    "dtype_name",
    "is_array",
    "is_jax",
    "is_numpy_scalar",
    "is_torch",
    "is_weak_scalar",
    "library",
    "namespace",
    "quiet",
]

#: An array namespace (a module such as ``array_api_compat.numpy`` or ``jax.numpy``).
Namespace = Any


def is_numpy_scalar(value: object) -> bool:
    """Whether ``value`` is a NumPy scalar (``np.float32(1)``), which TF treats as a value."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.generic)


#: Namespace of each array type met so far; ``None`` for types that are not arrays. A dict
#: lookup per argument keeps dispatch cheap and lets torch.compile trace it without graph breaks.
_NAMESPACE_OF_TYPE: dict[type, Namespace | None] = {
    bool: None,
    int: None,
    float: None,
    complex: None,
    str: None,
    type(None): None,
    list: None,
    tuple: None,
}


def _namespace_of(value: object) -> Namespace | None:
    tp = type(value)
    try:
        return _NAMESPACE_OF_TYPE[tp]
    except KeyError:
        pass
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        # directly, without array-api-compat's cached helpers, which torch.compile warns about
        import array_api_compat.torch as xp
    elif is_numpy_scalar(value) or not array_api_compat.is_array_api_obj(value):
        xp = None
    else:
        xp = array_api_compat.array_namespace(value)
    _NAMESPACE_OF_TYPE[tp] = xp
    return xp


def is_array(value: object) -> bool:
    """Whether ``value`` is an array of a supported namespace (NumPy scalars are not)."""
    return _namespace_of(value) is not None


def namespace(*arrays: Any, names: Sequence[str] = ()) -> Namespace:
    """The array namespace shared by ``arrays`` (non-arrays are ignored).

    ``names`` are the arguments' names, for the error message.

    Raises
    ------
    TypeError
        When the arrays come from different libraries.
    """
    found = None
    first = 0
    for i, a in enumerate(arrays):
        xp = _namespace_of(a)
        if xp is None:
            continue
        if found is None:
            found, first = xp, i
        elif xp is not found:
            name = names[i] if i < len(names) else f"argument {i}"
            other = names[first] if first < len(names) else f"argument {first}"
            msg = (
                f"`{name}` must come from the same array library as `{other}`: got "
                f"{_type_name(a)} and {_type_name(arrays[first])}"
            )
            raise TypeError(msg)
    return default_namespace() if found is None else found


def _type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def default_namespace() -> Namespace:
    """NumPy's namespace, used when a call has no array to take a namespace from."""
    try:
        import numpy as np
    except ImportError as exc:  # pragma: no cover - numpy is installed with every backend
        msg = "a call without any array argument needs NumPy installed to build its result"
        raise TypeError(msg) from exc
    return array_api_compat.array_namespace(np.empty(0))


def device(x: Any) -> Any:
    """The device ``x`` lives on."""
    xp = _namespace_of(x)
    if xp is not None:
        lib = library(xp)
        if lib == "torch":
            return x.device  # direct attribute: no helper call for torch.compile to trace
        if lib == "numpy":
            return "cpu"
    return array_api_compat.device(x)


#: Library name of each namespace met so far, by the namespace's ``__name__``.
_LIBRARY_OF_NAMESPACE: dict[str, str] = {}


def library(xp: Namespace) -> str:
    """``"numpy"``, ``"torch"``, ``"jax"``, ``"cupy"``, ``"dask"`` or the namespace's name."""
    key = xp.__name__
    try:
        return _LIBRARY_OF_NAMESPACE[key]
    except KeyError:
        pass
    # From the module name alone (array-api-compat's own checks are cached in a way that
    # torch.compile warns about): "array_api_compat.torch", "jax.numpy", "dask.array", ...
    parts = key.removeprefix("array_api_compat.").split(".")
    name = parts[0] if parts[0] in ("numpy", "torch", "jax", "cupy", "dask") else key
    _LIBRARY_OF_NAMESPACE[key] = name
    return name


def is_torch(xp: Namespace) -> bool:
    """Whether ``xp`` is PyTorch's namespace."""
    return library(xp) == "torch"


def is_jax(xp: Namespace) -> bool:
    """Whether ``xp`` is JAX's namespace."""
    return library(xp) == "jax"


#: 0-d constants made from Python scalars, by (value, sign, type, dtype, device). They are
#: internal operands only (never returned to a caller), so sharing them is safe.
_CONSTANTS: dict[tuple[Any, ...], Any] = {}
_CONSTANTS_MAX = 512


def _torch_compiling() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


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


def comparable_dtype(xp: Namespace, dtype: Any) -> Any:
    """A wider dtype to compare ``dtype`` in, where the backend cannot; None where it can.

    torch implements no comparison, minimum or maximum for uint16, uint32 or uint64: the first
    two are compared exactly in int64; uint64 has no wider type and is refused.
    """
    if library(xp) != "torch":
        return None
    import torch

    if dtype in (torch.uint16, torch.uint32):
        return torch.int64
    if dtype == torch.uint64:
        msg = "`t` has dtype uint64, which torch cannot compare (no minimum/maximum for it)"
        raise TypeError(msg)
    return None


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


def complex_from_parts(xp: Namespace, re: Any, im: Any, dtype: Any) -> Any:
    """``re + im * 1j`` of complex ``dtype``, each part kept as it is (TF's ``complex``).

    The standard has no such constructor, and ``im * 1j`` puts ``im * 0`` (NaN for an infinite
    ``im``) into the real part; torch and JAX have one, NumPy assigns the parts.
    """
    lib = library(xp)
    if lib == "torch":
        import torch

        return torch.complex(re, im)
    if lib == "jax":
        import jax

        return jax.lax.complex(re, im)
    if lib == "numpy":
        import numpy as np

        out = np.empty(np.broadcast_shapes(re.shape, im.shape), dtype=dtype)
        out.real, out.imag = re, im
        return out
    # ``im * 1j`` is exact for finite ``im``; infinities and NaN are put in by constants.
    finite = xp.isfinite(im)
    zero = xp.zeros_like(im)
    out = xp.astype(re, dtype) + xp.astype(xp.where(finite, im, zero), dtype) * constant(
        xp, 1j, dtype, re
    )
    for special in (complex(0, math.inf), complex(0, -math.inf), complex(0, math.nan)):
        hit = xp.isnan(im) if special.imag != special.imag else im == special.imag
        out = xp.where(hit, out + constant(xp, special, dtype, re), out)
    return out


def is_weak_scalar(value: Any) -> bool:
    """Whether ``value`` is a JAX weakly typed 0-d array: a Python scalar passed through jit."""
    jax = sys.modules.get("jax")
    if jax is None or not isinstance(value, jax.Array) or value.ndim != 0:
        return False
    aval = getattr(value, "aval", None)  # concrete arrays and tracers both have one
    return bool(getattr(aval, "weak_type", False))


def quiet(xp: Namespace) -> Any:
    """A context in which NumPy does not warn about inf/NaN results (TF does not either)."""
    if library(xp) in ("numpy", "array_api_strict", "dask"):  # all compute with NumPy
        import numpy as np

        return np.errstate(all="ignore")
    return contextlib.nullcontext()


def as_array(xp: Namespace, result: Any) -> Any:
    """``result`` as an array: NumPy reductions return scalars, anyclip returns 0-d arrays."""
    if is_numpy_scalar(result):
        import numpy as np

        return np.asarray(result)
    return result


def dtype_name(dtype: Any) -> str:
    """A short, backend-neutral name for ``dtype`` (``"float32"``, ``"bfloat16"``...)."""
    name = getattr(dtype, "name", None)
    if isinstance(name, str):
        return name
    return str(dtype).rsplit(".", 1)[-1]


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
