"""anyclip's dtype rules: the kind of a dtype, the widest float, the accumulation dtype.

Layer: core (the argument policy's dtype half). TensorFlow never promotes; these functions say
what kind a dtype is (``bool``, ``int``, ``real``, ``complex``, ``other``), refuse the kinds a
function does not take, and resolve ``accumulate_dtype`` (``None``, ``"widest"`` or a dtype)
against the inputs' dtypes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from anyclip._compat import device, dtype_name, library
from anyclip._kernels._dist import is_dtensor
from anyclip._memo import ConstantMemo, constant_by_dtype
from anyclip._policy_words import _dim, tf_words
from anyclip._typing import Namespace

__all__ = [
    "cast_like",
    "default_float",
    "dtype_kind",
    "require_kind",
    "resolve_accumulate_dtype",
    "widest_float",
]


#: dtype_kind's answers, by namespace name, then dtype.
_KINDS: ConstantMemo[str] = ConstantMemo("anyclip._policy_dtypes.kinds")


def dtype_kind(xp: Namespace, dtype: Any) -> str:
    """``"bool"``, ``"int"``, ``"real"`` (floating), ``"complex"`` or ``"other"``."""
    return constant_by_dtype(_KINDS, xp, dtype, _dtype_kind)


def _dtype_kind(xp: Namespace, dtype: Any) -> str:
    if dtype_name(dtype).startswith("float8"):  # torch and ml_dtypes: no arithmetic kernels
        return "other"
    try:
        return _standard_kind(xp, dtype)
    except TypeError:  # a dtype the library's isdtype does not know (ml_dtypes' on NumPy)
        return "other"


def _standard_kind(xp: Namespace, dtype: Any) -> str:
    if xp.isdtype(dtype, "bool"):
        return "bool"
    if xp.isdtype(dtype, "integral"):
        return "int"
    if xp.isdtype(dtype, "real floating"):
        return "real"
    if xp.isdtype(dtype, "complex floating"):
        return "complex"
    return "other"


def require_kind(
    xp: Namespace,
    x: Any,
    name: str,
    kinds: tuple[str, ...],
    what: str,
    tf: Callable[[Any], str | None] | None = None,
) -> str:
    """Raise ``TypeError`` unless ``x``'s dtype is of one of ``kinds``; return its kind.

    ``tf(dtype)`` gives TF's own words for the refusal (quoted at the end of the message), or
    None where TF does not refuse it or has no such dtype.
    """
    kind = dtype_kind(xp, x.dtype)
    if kind not in kinds:
        msg = f"`{name}` must have {what}, got {dtype_name(x.dtype)}"
        if kind == "other":
            msg += _UNSUPPORTED
        elif tf is not None:
            msg += tf_words(tf(x.dtype))
        raise TypeError(msg)
    return kind


_UNSUPPORTED = (
    " (float8 dtypes, and ml_dtypes' bfloat16 in NumPy, have no arithmetic there: cast the"
    " array to float32, or use torch or JAX for bfloat16)"
)


# ------------------------------------------------------- accumulation dtype
def _float_bits(xp: Namespace, dtype: Any) -> int:
    return int(xp.finfo(dtype).bits)


def default_float(xp: Namespace, like: Any) -> Any:
    """The namespace's default real floating dtype on ``like``'s device.

    float32 on JAX without ``jax_enable_x64`` (float64 with it), NumPy's float64; float32
    where the namespace has no ``__array_namespace_info__``.
    """
    info = getattr(xp, "__array_namespace_info__", None)
    if info is None:
        return xp.float32
    return info().default_dtypes(device=device(like))["real floating"]


def widest_float(xp: Namespace, dtypes: Sequence[Any]) -> Any:
    """The real floating dtype that holds every one of ``dtypes`` (float16 + bfloat16: float32)."""
    widest = dtypes[0]
    for dt in dtypes[1:]:
        if dt == widest:
            continue
        a, b = _float_bits(xp, widest), _float_bits(xp, dt)
        if a == b:  # float16 vs bfloat16: neither holds the other
            widest = xp.float32 if a < 32 else widest
        elif b > a:
            widest = dt
    return widest


def cast_like(xp: Namespace, x: Any, acc: Any) -> Any:
    """At most one element of ``x`` cast to ``acc``: a stand-in for ``acc`` on ``x``'s device.

    Operands (``clip_norm``, ``epsilon``) are converted against it, so that ``x`` itself is
    never cast whole. A torch ``DTensor`` gives an element of its local shard (a reshape of the
    DTensor would gather it); a JAX array, a 0-d zero (its elements may be sharded, and JAX
    places a 0-d operand next to them itself); a dask array of unknown shape (which cannot be
    sliced), ``x`` cast lazily, whose values are never computed.
    """
    if library(xp) == "jax":
        return xp.zeros((), dtype=acc)
    if is_dtensor(x):
        x = x.to_local()
    if any(_dim(d) is None for d in x.shape):  # dask, unknown chunks: a lazy cast, never run
        return xp.astype(x, acc)
    return xp.astype(xp.reshape(x, (-1,))[: min(1, math.prod(x.shape))], acc)


def resolve_accumulate_dtype(
    xp: Namespace, value: Any, dtypes: Sequence[Any], *, single: str | None = None
) -> Any:
    """The dtype ``accumulate_dtype=value`` asks for, given the inputs' ``dtypes``.

    ``None`` means TF's behaviour (reduce in the input dtype, refuse mixed dtypes) and is
    returned as ``None``. ``"widest"`` picks :func:`widest_float` of ``dtypes``; a function of
    one array (``single``, its name) refuses it, as it could only mean the array's own dtype.
    A dtype name (``"float32"``) or a dtype object of the namespace is taken as given; it must
    be a real floating dtype.
    """
    if value is None:
        return None
    if isinstance(value, str) and value == "widest":
        if single is not None:
            msg = (
                f"`accumulate_dtype` must be None or a floating dtype for {single}, got "
                "'widest', which picks the widest dtype of several arrays: of one array it is "
                "its own dtype, TF's behaviour; pass None for that, or a dtype such as "
                "'float64' to accumulate in"
            )
            raise ValueError(msg)
        if not dtypes:
            return xp.float32
        return widest_float(xp, list(dtypes))
    dtype = value
    if isinstance(value, str):
        dtype = getattr(xp, value, None)
        if dtype is None and value == "bfloat16":
            dtype = _bfloat16(xp)
        if dtype is None:
            msg = f"`accumulate_dtype` must name a floating dtype of the library, got {value!r}"
            raise TypeError(msg)
    try:
        ok = xp.isdtype(dtype, "real floating") and not dtype_name(dtype).startswith("float8")
    except Exception:  # noqa: BLE001 - a foreign or bogus dtype object
        ok = False
    if not ok:
        msg = f"`accumulate_dtype` must be a real floating dtype, 'widest' or None, got {value!r}"
        raise TypeError(msg)
    return dtype


def _bfloat16(xp: Namespace) -> Any:
    if library(xp) == "torch":
        import torch

        return torch.bfloat16
    if library(xp) == "jax":
        import jax.numpy as jnp

        return jnp.bfloat16
    return None
