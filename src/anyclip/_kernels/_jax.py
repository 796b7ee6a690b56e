"""JAX kernels: many small arrays summed in one reduction.

Layer: kernels. Chosen by :func:`anyclip._kernels.kernels_for` for float32 and float64 JAX
arrays. XLA runs one loop per reduction; for thousands of small arrays those loops, not the
arithmetic, take the time (benchmark W3), and one ``concatenate`` (fused into the reduction
under ``jit``) replaces them. Sums and gradients are TF's formula, grouped differently.

Sharded arrays are never reshaped: a large array is summed in its own shape (XLA sums each
shard and all-reduces a scalar), and only arrays that cannot be sharded are joined (a reshape
of an array sharded over ``Explicit`` mesh axes is a ``ShardingTypeError``; over ``Auto`` axes
it makes XLA gather it). See :func:`anyclip._compat.may_be_sharded`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyclip._compat import may_be_sharded
from anyclip._kernels._base import Kernels, groups
from anyclip._numerics import constant
from anyclip._typing import Namespace

__all__ = ["JaxKernels"]


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
