"""TF's flush of subnormal numbers to zero (FTZ/DAZ), on request: :class:`flush_subnormals`.

Layer: public (the switch) and core helpers (the flush). TF 2.21 runs its CPU kernels with
flush-to-zero and denormals-are-zero set for float32 and float64: a subnormal input counts as
0 and a subnormal result becomes 0. NumPy, torch, array-api-strict and dask keep IEEE
subnormals, so where one appears anyclip's result can keep a rounding residue (``1e-45``)
where TF gives 0. Inside ``with anyclip.flush_subnormals():`` anyclip flushes at TF's op
boundaries, on every backend but JAX on the CPU (XLA:CPU flushes by itself; XLA:GPU keeps
IEEE subnormals, and is flushed as the others); outside it, it does not,
because flushing costs a pass over the data per step (docs/tf-behaviour.md, the FTZ row).

The setting is a :class:`contextvars.ContextVar`, read when a call chooses its kernels
(:func:`anyclip._kernels.kernels_for`) or, for the functions without kernels, at their start.
Dynamo (``torch.compile``) cannot read a ``ContextVar``: while it traces, :func:`flushing`
reads a module attribute that every ``flush_subnormals`` block sets on entry and restores on
exit, and that Dynamo guards on (a change recompiles).
"""

from __future__ import annotations

import math
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any

from anyclip._compat import dtype_name, library, torch_compiling, xla_flushes
from anyclip._memo import Memo, memo_by_dtype
from anyclip._numerics import constant
from anyclip._typing import Namespace

__all__ = [
    "OPEN",
    "flush",
    "flush_limits",
    "flush_squares",
    "flush_subnormals",
    "flushing",
    "split_squares",
]

#: Whether anyclip flushes subnormals in this context (``flush_subnormals`` sets it).
_FLUSH: ContextVar[bool] = ContextVar("anyclip.flush_subnormals", default=False)

#: The value the last ``flush_subnormals`` block set (on entry) or restored (on exit), in any
#: thread: what compiled torch code sees (Dynamo cannot trace ``ContextVar.get``).
_traced = False

#: One entry per ``flush_subnormals`` block open in any thread (``append``/``pop`` are atomic):
#: while it is empty nothing is flushed, and a call does not look further. The hot paths test
#: ``OPEN and flushing()``: the default path costs one global lookup.
OPEN: list[None] = []


def flushing() -> bool:
    """Whether subnormals are flushed to zero here (inside ``flush_subnormals()``)."""
    if not OPEN:  # no block anywhere: one list check, the cost of the default path
        return False
    if torch_compiling():
        return _traced
    return _FLUSH.get()


class flush_subnormals:
    """Flush subnormal numbers to zero inside a ``with`` block, as TF's CPU kernels do.

    TF 2.21's CPU kernels run with flush-to-zero and denormals-are-zero (FTZ/DAZ) for float32
    and float64: a subnormal input (below about ``1.2e-38`` in float32, ``2.2e-308`` in
    float64) counts as 0 and a subnormal result becomes 0. By default anyclip keeps IEEE
    subnormals, which is faster but can leave a rounding residue such as ``1e-45`` where TF
    gives exactly 0. Inside this block every anyclip function (and the ``anyclip.tree``,
    ``anyclip.torch`` and ``anyclip.optax`` helpers built on them) flushes at TF's op
    boundaries instead: the inputs, each square, product, quotient and power, and the result.

    Parameters
    ----------
    enabled : bool, optional
        ``True`` (default) flushes inside the block; ``False`` keeps IEEE subnormals there
        (to turn flushing off inside an outer block).

    See Also
    --------
    tf.config.experimental.enable_op_determinism : TF has no switch for FTZ; its CPU kernels
        always flush.

    Notes
    -----
    * float32 and float64 are flushed; float16, bfloat16 and complex dtypes are not (TF
      computes half precision in float32 and rounds each step, which this does not follow).
    * JAX on the CPU needs nothing: XLA:CPU flushes by itself, eagerly and under ``jax.jit``;
      the block changes nothing there. XLA:GPU keeps IEEE subnormals (``--xla_gpu_ftz``
      is off by default): on a GPU the block flushes as on the other backends. torch's CUDA
      kernels keep them too; CuPy's compile with ``-ftz=true`` and flush float32 (not
      float64: NVIDIA GPUs have no flush-to-zero for float64).
    * Flushing costs extra passes over the data: measured at 2.8x to 30x the time of a call
      on the benchmark workloads (docs/tf-behaviour.md, the FTZ row).
    * The setting is a :mod:`contextvars` variable, so threads and asyncio tasks each have
      their own. ``torch.compile`` (Dynamo) cannot read one: code it traces sees the value the
      last ``flush_subnormals`` block set or restored in any thread, and recompiles when that
      changes. Enter the block inside the compiled function, or in the thread that calls it
      while no other thread enters one. While no block is open in any thread, nothing is
      flushed, even in a task or context copied from inside a block that has since exited.
    * A product whose exact value lies in the lower half of the last subnormal step below the
      smallest normal number is 0 in TF (x86 detects tininess after rounding with an
      unbounded exponent) and the smallest normal number here (IEEE rounds it up first).

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> x = np.array([1e-30, 1.0, -3e-25], dtype=np.float32)
    >>> anyclip.clip_by_global_norm([x], 1e-16)[0][0]  # -3e-25 * 1e-16 is subnormal
    array([ 0.e+00,  1.e-16, -3.e-41], dtype=float32)
    >>> with anyclip.flush_subnormals():
    ...     anyclip.clip_by_global_norm([x], 1e-16)[0][0]  # TF's values
    array([ 0.e+00,  1.e-16, -0.e+00], dtype=float32)
    """

    def __init__(self, enabled: bool = True) -> None:
        self._enabled = bool(enabled)
        self._saved: list[tuple[Token[bool] | None, bool]] = []

    def __enter__(self) -> None:
        global _traced
        # Dynamo cannot set a ContextVar: a block inside compiled code sets only the attribute.
        token = None if torch_compiling() else _FLUSH.set(self._enabled)
        self._saved.append((token, _traced))
        _traced = self._enabled
        OPEN.append(None)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _traced
        token, previous = self._saved.pop()
        if token is not None:
            _FLUSH.reset(token)
        _traced = previous
        OPEN.pop()

    def __repr__(self) -> str:
        return f"anyclip.flush_subnormals(enabled={self._enabled})"


# ------------------------------------------------------------------ the flush
#: Real dtypes whose arithmetic TF's CPU kernels flush (FTZ and DAZ in the MXCSR).
_FLUSHED = ("float32", "float64")

#: Per dtype name: (smallest normal, smallest |v| whose square is kept, smallest |v| whose
#: halved square is kept), as Python floats.
_FLUSH_LIMITS: dict[str, tuple[float, float, float]] = {}

#: :func:`_flush_info`'s answers, by (namespace name, dtype).
_FLUSH_INFO: Memo[tuple[float, float, float] | None] = Memo("anyclip._subnormals.flush_info")


def _flush_info(xp: Namespace, x: Any) -> tuple[float, float, float] | None:
    """:func:`flush_limits` of ``x``'s dtype where anyclip flushes it, else None.

    float32 and float64 on every library; on JAX only off the CPU (XLA:CPU flushes by
    itself, XLA:GPU does not: :func:`anyclip._compat.xla_flushes`). One lookup, plus the
    device's platform on JAX.
    """
    info = memo_by_dtype(_FLUSH_INFO, xp, x.dtype, _compute_flush_info)
    if info is not None and library(xp) == "jax" and xla_flushes(x):
        return None
    return info


def _compute_flush_info(xp: Namespace, dtype: Any) -> tuple[float, float, float] | None:
    name = dtype_name(dtype)
    if name not in _FLUSHED:
        return None
    return flush_limits(name)


def flush_limits(dtype_str: str) -> tuple[float, float, float]:
    """(smallest normal, square threshold, halved-square threshold) of float32 or float64.

    A result is flushed when, rounded to the dtype's precision with an unbounded exponent,
    it is below the smallest normal number (x86's FTZ detects tininess after rounding).
    ``v * v`` is kept from ``sqrt(tiny)`` on (a power of two: no square falls in the
    rounding gap below ``tiny``); TF's ``l2_loss`` halves each square, kept when the square
    rounds to ``2 * tiny`` or more, i.e. ``v * v >= 2 * tiny - ulp / 2``.

    >>> flush_limits("float32")[0] == 2.0**-126
    True
    """
    try:
        return _FLUSH_LIMITS[dtype_str]
    except KeyError:
        pass
    from fractions import Fraction

    bits, emin = (24, -126) if dtype_str == "float32" else (53, -1022)
    tiny = 2.0**emin
    square = 2.0 ** (emin // 2)
    bound = Fraction(2) ** (emin + 1) - Fraction(2) ** (emin + 1 - bits - 1)
    v = math.sqrt(float(bound))
    step = 2.0 ** (math.frexp(v)[1] - bits)  # the dtype's spacing at v
    v = math.floor(v / step) * step
    while Fraction(v) ** 2 < bound:
        v += step
    while Fraction(v - step) ** 2 >= bound:
        v -= step
    _FLUSH_LIMITS[dtype_str] = (tiny, square, v)
    return _FLUSH_LIMITS[dtype_str]


def flush(xp: Namespace, x: Any, also: Any = None, *, owned: bool = False) -> Any:
    """``x`` with every value of magnitude below the smallest normal number set to ±0.

    TF's FTZ on an op's result; with ``also`` (the op's array input), its DAZ too: where
    ``also`` is subnormal the result is ``x * 0`` (0 with ``x``'s sign; NaN where ``x`` is
    infinite, as TF's ``0 * inf``). ``owned``: ``x`` is a temporary of the caller's, which
    NumPy may overwrite. The identity for dtypes and libraries anyclip does not flush.
    """
    info = _flush_info(xp, x)
    if info is None:
        return x
    tiny = info[0]
    keep = _kept(xp, x, tiny)
    if also is not None:
        keep = xp.logical_and(keep, _kept(xp, also, tiny))
    if owned and library(xp) == "numpy" and x.ndim:
        import numpy as np

        return np.multiply(x, keep, out=x)
    return x * xp.astype(keep, x.dtype)


def flush_squares(xp: Namespace, x: Any, *, halved: bool = False) -> Any:
    """``x`` with zeros where TF's flushed ``x * x`` (``halved``: ``x * x * 0.5``) is 0.

    Summing the squares of the result gives TF's sum of flushed squares: each kept square
    is normal, so the partial sums are too. The identity for dtypes and libraries anyclip
    does not flush.
    """
    limits = _flush_info(xp, x)
    if limits is None:
        return x
    return x * xp.astype(_kept(xp, x, limits[2] if halved else limits[1]), x.dtype)


def split_squares(xp: Namespace, x: Any, *, halved: bool = False) -> tuple[Any, Any]:
    """``x`` split where TF's flushed ``x * x`` (``halved``: ``x * x * 0.5``) is 0, by selects.

    ``(kept, flushed)``: ``kept`` is :func:`flush_squares`'s value (0 where the square or its
    half is flushed, ``x`` elsewhere, NaN and zeros included), ``flushed`` the values left out
    (``x`` there, 0 elsewhere), or None where anyclip does not flush ``x``'s dtype (``kept``
    is then ``x``). Selects, not products: neither part's gradient reaches the other's
    elements, not even as ``0 * inf`` (NaN), so that a gradient for the flushed values can be
    added apart (:func:`anyclip._gradients.square_gradient`).
    """
    limits = _flush_info(xp, x)
    if limits is None:
        return x, None
    a = xp.abs(x)
    zero = constant(xp, 0.0, x.dtype, x)
    dropped = xp.logical_and(
        a > zero, a < constant(xp, limits[2] if halved else limits[1], x.dtype, x)
    )
    return xp.where(dropped, zero, x), xp.where(dropped, x, zero)


def _kept(xp: Namespace, x: Any, threshold: float) -> Any:
    """``abs(x) >= threshold``, and on torch zeros and NaN too: only ``0 < |x| < threshold`` go.

    Multiplying a zero or NaN by 0 or by 1 gives the same value; keeping them lets autograd
    pass the gradient through (TF's gradient reaches a zero, and a NaN element's reaches
    ``clip_by_value``'s lower bound).
    """
    a = xp.abs(x)
    keep = a >= constant(xp, threshold, x.dtype, x)
    if library(xp) == "torch":  # autograd, or a torch.func transform, may be recording
        keep = xp.logical_or(keep, xp.logical_not(a > constant(xp, 0.0, x.dtype, x)))
    return keep
