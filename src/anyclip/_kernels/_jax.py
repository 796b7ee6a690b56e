"""JAX kernels: many small arrays summed in one reduction.

Layer: kernels. Chosen by :func:`anyclip._kernels.kernels_for` for float32 and float64 JAX
arrays. XLA runs one loop per reduction; for thousands of small arrays those loops, not the
arithmetic, take the time (benchmark W3), and one ``concatenate`` (fused into the reduction
under ``jit``) replaces them. Sums and gradients are TF's formula, grouped differently.

Sharded arrays are never reshaped: a large array is summed in its own shape (XLA sums each
shard and all-reduces a scalar), and only arrays that cannot be sharded are joined (a reshape
of an array sharded over ``Explicit`` mesh axes is a ``ShardingTypeError``; over ``Auto`` axes
it makes XLA gather it). See :func:`anyclip._compat.may_be_sharded`.

Casts to an accumulation dtype (``accumulate_dtype``): under ``jit`` XLA fuses the convert
into the reduction or the elementwise step, so no cast of a whole array exists. An eager JAX
call would run each operation alone and keep the whole cast (twice the input from float16 to
float32): :meth:`JaxKernels.cast_half_squares` and :meth:`JaxKernels.cast_map` run their step
through one ``jax.jit`` per step and accumulation dtype (compiled once per shape, cached by
JAX), which XLA fuses the same way. Traced arrays (the caller's ``jit``, ``grad``,
``shard_map``) take the step as it is: it is fused where the caller compiles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from anyclip._compat import dtype_name, may_be_sharded
from anyclip._kernels import _base
from anyclip._kernels._base import Kernels, groups
from anyclip._numerics import constant
from anyclip._typing import Namespace

__all__ = ["JaxKernels"]

#: The compiled cast steps, by (step, function, namespace name, accumulation dtype name).
_FUSED: dict[tuple[str, Any, str, str], Callable[..., Any]] = {}


def _eager_large(arrays: Sequence[Any]) -> bool:
    """Whether an eager step on ``arrays`` should be compiled: no tracer, and large.

    Large: more elements than one block (:data:`~anyclip._kernels._base.UPCAST_BLOCK`), as
    where the eager libraries cut blocks; a smaller cast costs less than a compilation.
    """
    import jax

    if any(isinstance(a, jax.core.Tracer) for a in arrays):
        return False
    return sum(int(a.size) for a in arrays) > _base.UPCAST_BLOCK


def _fused(
    step: str, fn: Any, xp: Namespace, acc: Any, build: Callable[[], Callable[..., Any]]
) -> Any:
    """The ``jax.jit`` of ``build()``, made once per (``step``, ``fn``, ``xp``, ``acc``)."""
    key = (step, fn, xp.__name__, dtype_name(acc))
    try:
        return _FUSED[key]
    except KeyError:
        import jax

        jitted: Callable[..., Any] = jax.jit(build())
        _FUSED[key] = jitted
        return jitted


class JaxKernels(Kernels):
    """:class:`Kernels` for float32 and float64 JAX arrays."""

    name = "jax"

    def half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """As :meth:`Kernels.half_squares`, one reduction per group of arrays under 65,536."""
        joinable = [a for a in arrays if not may_be_sharded(a)]
        grouped = groups(joinable, lambda a: int(a.size))
        if len(grouped) == len(joinable):  # nothing to join
            return super().half_squares(xp, arrays)
        half = constant(xp, 0.5, arrays[0].dtype, arrays[0])
        sums = [xp.sum(a * a) * half for a in arrays if may_be_sharded(a)]
        for group in grouped:
            if len(group) == 1:  # summed in its own shape: no reshape
                sums.append(xp.sum(group[0] * group[0]) * half)
                continue
            flat = xp.concat([xp.reshape(a, (-1,)) for a in group])
            sums.append(xp.sum(flat * flat) * half)
        return xp.sum(xp.stack(sums))

    def cast_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any) -> Any:
        """As :meth:`Kernels.cast_half_squares`; eager calls through one fused ``jit``."""
        if acc is None or all(a.dtype == acc for a in arrays) or not _eager_large(arrays):
            return super().cast_half_squares(xp, arrays, acc)
        base = super().cast_half_squares
        step = _fused("half_squares", None, xp, acc, lambda: lambda *a: base(xp, a, acc))
        return step(*arrays)

    def cast_map(
        self, xp: Namespace, t: Any, acc: Any, fn: Callable[..., Any], operands: Sequence[Any]
    ) -> Any:
        """As :meth:`Kernels.cast_map`; eager calls through one fused ``jit`` per ``fn``."""
        if not _eager_large([t, *operands]):
            return super().cast_map(xp, t, acc, fn, operands)
        base = super().cast_map
        step = _fused("map", fn, xp, acc, lambda: lambda u, *ops: base(xp, u, acc, fn, ops))
        return step(t, *operands)

    def cast_reduce(
        self,
        xp: Namespace,
        x: Any,
        acc: Any,
        fn: Callable[..., Any],
        operands: Sequence[Any],
        combine: str,
    ) -> Any | None:
        """As :meth:`Kernels.cast_reduce`: an eager call reduces in one fused ``jit``."""
        if not _eager_large([x, *operands]):
            return None  # small, or traced: the caller's jit fuses the formula

        def build() -> Callable[..., Any]:
            return lambda u, *ops: fn(xp, u if u.dtype == acc else xp.astype(u, acc), *ops)

        return _fused("reduce", fn, xp, acc, build)(x, *operands)
