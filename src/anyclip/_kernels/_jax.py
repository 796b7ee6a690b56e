"""JAX kernels: many small arrays summed in one reduction.

Layer: kernels. Chosen by :func:`anyclip._kernels.kernels_for` for float32 and float64 JAX
arrays. XLA runs one loop per reduction; for thousands of small arrays those loops, not the
arithmetic, take the time (benchmark W3), and one ``concatenate`` (fused into the reduction
under ``jit``) replaces them. Sums and gradients are TF's formula, grouped differently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyclip._kernels._base import Kernels, groups
from anyclip._numerics import constant
from anyclip._typing import Namespace

__all__ = ["JaxKernels"]


class JaxKernels(Kernels):
    """:class:`Kernels` for float32 and float64 JAX arrays."""

    name = "jax"

    def half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """As :meth:`Kernels.half_squares`, one reduction per group of arrays under 65,536."""
        grouped = groups(arrays, lambda a: int(a.size))
        if len(grouped) == len(arrays):  # nothing to join
            return super().half_squares(xp, arrays)
        half = constant(xp, 0.5, arrays[0].dtype, arrays[0])
        sums = []
        for group in grouped:
            flats = [xp.reshape(a, (-1,)) for a in group]
            flat = flats[0] if len(flats) == 1 else xp.concat(flats)
            sums.append(xp.sum(flat * flat) * half)
        return xp.sum(xp.stack(sums))
