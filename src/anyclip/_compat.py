"""The one place that talks to array-api-compat.

Everything else in anyclip asks this module for an array namespace, a device or a dtype fact. It
never imports torch, jax or tensorflow: array-api-compat recognises their arrays through
``sys.modules``, so importing anyclip stays cheap and framework-free.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
from typing import Any

import array_api_compat

__all__ = [
    "Namespace",
    "as_array",
    "constant",
    "default_namespace",
    "device",
    "dtype_name",
    "is_array",
    "is_jax",
    "is_numpy_scalar",
    "is_torch",
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
    if is_numpy_scalar(value) or not array_api_compat.is_array_api_obj(value):
        xp = None
    else:
        xp = array_api_compat.array_namespace(value)
    _NAMESPACE_OF_TYPE[tp] = xp
    return xp


def is_array(value: object) -> bool:
    """Whether ``value`` is an array of a supported namespace (NumPy scalars are not)."""
    return _namespace_of(value) is not None


def namespace(*arrays: Any) -> Namespace:
    """The array namespace shared by ``arrays`` (non-arrays are ignored).

    Raises
    ------
    TypeError
        When the arrays come from different libraries.
    """
    found = None
    for a in arrays:
        xp = _namespace_of(a)
        if xp is None:
            continue
        if found is None:
            found = xp
        elif xp is not found:
            kinds = sorted(
                {f"{type(b).__module__}.{type(b).__qualname__}" for b in arrays if is_array(b)}
            )
            msg = f"all array arguments must come from one array library, got {', '.join(kinds)}"
            raise TypeError(msg)
    return default_namespace() if found is None else found


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


#: Library name of each namespace met so far.
_LIBRARY_OF_NAMESPACE: dict[Any, str] = {}


def library(xp: Namespace) -> str:
    """``"numpy"``, ``"torch"``, ``"jax"``, ``"cupy"``, ``"dask"`` or the namespace's name."""
    try:
        return _LIBRARY_OF_NAMESPACE[xp]
    except KeyError:
        pass
    for name in ("numpy", "torch", "jax", "cupy", "dask"):
        if getattr(array_api_compat, f"is_{name}_namespace")(xp):
            break
    else:
        name = getattr(xp, "__name__", str(xp))
    _LIBRARY_OF_NAMESPACE[xp] = name
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


@functools.lru_cache(maxsize=64)
def _overflow_threshold(xp: Namespace, dtype: Any) -> float:
    info = xp.finfo(dtype)
    big = float(info.max)
    _, exp = math.frexp(big)
    return big + float(info.eps) * 2.0 ** (exp - 1) / 2


def float_overflow_threshold(xp: Namespace, dtype: Any) -> float:
    """The smallest magnitude that rounds to infinity when converted to ``dtype``."""
    return _overflow_threshold(xp, dtype)
