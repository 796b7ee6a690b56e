"""JAX kernels: many small arrays summed in one reduction.

Layer: kernels. Chosen by :func:`anyclip._kernels.kernels_for` for float32 and float64 JAX
arrays. XLA runs one loop per reduction; for thousands of small arrays those loops, not the
arithmetic, take the time (benchmark W3), and one ``concatenate`` (fused into the reduction
under ``jit``) replaces them. Sums and gradients are TF's formula, grouped differently.

Sharded arrays are never reshaped: a large array is summed in its own shape (XLA sums each
shard and all-reduces a scalar), and only arrays that cannot be sharded are joined (a reshape
of an array sharded over ``Explicit`` mesh axes is a ``ShardingTypeError``; over ``Auto`` axes
it makes XLA gather it). See :func:`_sharded`.
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
        joinable = [a for a in arrays if not _sharded(a)]
        grouped = groups(joinable, lambda a: int(a.size))
        if len(grouped) == len(joinable):  # nothing to join
            return super().half_squares(xp, arrays)
        half = constant(xp, 0.5, arrays[0].dtype, arrays[0])
        sums = [xp.sum(a * a) * half for a in arrays if _sharded(a)]
        for group in grouped:
            if len(group) == 1:  # summed in its own shape: no reshape
                sums.append(xp.sum(group[0] * group[0]) * half)
                continue
            flat = xp.concat([xp.reshape(a, (-1,)) for a in group])
            sums.append(xp.sum(flat * flat) * half)
        return xp.sum(xp.stack(sums))


def _sharded(a: Any) -> bool:
    """Whether ``a`` may be sharded, so that joining it (a reshape) could gather it.

    True for an array whose sharding is not fully replicated, for a traced array sharded
    over ``Explicit`` mesh axes, and for any traced array while a mesh of several devices is
    set (``jax.set_mesh``): under ``Auto`` axes the tracer does not say how it is sharded.
    """
    import jax

    if isinstance(a, jax.core.Tracer):
        try:
            aval = jax.typeof(a)
            spec = aval.sharding.spec
        except AttributeError:  # older JAX: no sharding in types
            return False
        if any(s is not None for s in spec):
            return True
        mesh = jax.sharding.get_abstract_mesh()
        return not mesh.empty and mesh.size > 1
    sharding = getattr(a, "sharding", None)
    return sharding is not None and not sharding.is_fully_replicated
