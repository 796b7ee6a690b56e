"""NumPy kernels: sums of squares in one pass over memory, divisions in place.

Layer: kernels. Chosen by :func:`anyclip._kernels.kernels_for` for float32 and float64 NumPy
arrays. Sums of squares are ``einsum`` row sums of ``ROW`` elements, then a pairwise ``sum``
of the rows: one pass over memory instead of three, no temporary the size of the data, and
float32 sums of tens of millions of squares within a few ULP (a single ``vdot`` loses about
1e-4 there). The formula is TF's; only the order of the additions inside a reduction changes.

float64 sums of squares take TF's own order of additions (:func:`tf_order_sums`): for
values of equal magnitude each order has its own error of up to about 20 ULP (TF's included),
so only TF's order lands on TF's value; the rows' order was 11 ULP from TF at 256 elements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyclip._kernels._base import ROW, Kernels, every_axis, groups
from anyclip._kernels._tfaxes import tf_sum_or_none
from anyclip._kernels._tforder import (
    numpy_in_turn,
    tf_order_sums,
    tf_order_total,
)
from anyclip._kernels._tforder_xp import numpy_tf_row_sums
from anyclip._typing import Namespace

__all__ = ["NumpyKernels", "squared_sum"]


class NumpyKernels(Kernels):
    """:class:`Kernels` for float32 and float64 NumPy arrays."""

    name = "numpy"

    def _norm_over_all(self, x: Any, axes: tuple[int, ...] | None) -> Any | None:
        if not every_axis(x, axes):
            return None
        import numpy as np

        total = np.sqrt(squared_sum(np, [x], x.dtype, half=False))
        return np.reshape(total, (1,) * x.ndim)

    def norm2(self, xp: Namespace, x: Any, axes: tuple[int, ...] | None, other: Any = None) -> Any:
        """As :meth:`Kernels.norm2`; over every axis by row sums, without ``x * x``."""
        fast = self._norm_over_all(x, axes)
        return super().norm2(xp, x, axes, other) if fast is None else fast

    def clip_norm2(
        self, xp: Namespace, t: Any, axes: tuple[int, ...] | None, other: Any = None
    ) -> Any:
        """As :meth:`Kernels.clip_norm2` (NumPy records no gradient, so no ``where``)."""
        fast = self._norm_over_all(t, axes)
        return super().clip_norm2(xp, t, axes, other) if fast is None else fast

    def tf_sum(self, xp: Namespace, y: Any, axes: tuple[int, ...] | int | None) -> Any | None:
        """As :meth:`Kernels.tf_sum`; the rows of the packet accumulators added by NumPy."""
        if y.dtype != xp.float64:
            return None
        return tf_sum_or_none(xp, y, axes, row_sums=numpy_tf_row_sums, in_turn=numpy_in_turn)

    def divide_into(self, xp: Namespace, owned: Any, divisor: Any) -> Any:
        """``owned / divisor`` written into ``owned``."""
        if owned.ndim == 0:  # NumPy would return a scalar
            return owned / divisor
        import numpy as np

        return np.divide(owned, divisor, out=owned)

    def row_squares(self, xp: Namespace, rows: Any) -> Any:
        """As :meth:`Kernels.row_squares`, by ``einsum`` (no ``rows * rows`` array)."""
        import numpy as np

        return np.einsum("ij,ij->i", rows, rows)

    def half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """As :meth:`Kernels.half_squares`, by row sums (small arrays joined first)."""
        import numpy as np

        total = squared_sum(np, arrays, arrays[0].dtype, half=True, halve=self.halving)
        return np.asarray(total)


def squared_sum(
    np: Any, arrays: Sequence[Any], dtype: Any, *, half: bool, halve: bool = True
) -> Any:
    """The sum of squares of every element: rows of ``ROW`` elements, then their pairwise sum.

    ``einsum`` squares and sums each row in one pass without a temporary array; the row sums
    (1/``ROW`` of the data) are then summed pairwise. With ``half``, each row sum is halved
    first (TF's ``l2_loss``), but with ``halve=False`` (the same sums, whole:
    :meth:`~anyclip._kernels.Kernels.unhalved`). Small arrays are joined first
    (:func:`groups`).
    """
    grouped = groups(arrays, lambda a: int(a.size))
    flats = [
        group[0].reshape(-1) if len(group) == 1 else np.concatenate(group, axis=None)
        for group in grouped
    ]
    # TF's order: its float64 error, not the rows' own; float32 in global_norm (``half``),
    # where the rows' sums were up to 2 ulp from TF's norm on real gradients
    if dtype == np.float64 or (half and dtype == np.float32):
        per_array: list[float] = []
        for flat, group in zip(flats, grouped, strict=True):
            sizes = [int(a.size) for a in group]
            per_array += tf_order_sums(np, flat, sizes, square=True)
        return dtype.type(tf_order_total(np, per_array, half=half, dtype=dtype, halve=halve))
    sums = []
    for flat in flats:
        rows = flat.size // ROW
        if rows:
            head = flat[: rows * ROW].reshape(rows, ROW)
            sums.append(np.einsum("ij,ij->i", head, head))
        if flat.size > rows * ROW:
            tail = flat[rows * ROW :]
            sums.append(np.einsum("i,i->", tail, tail).reshape(1))
    if not sums:  # only empty arrays
        return dtype.type(0)
    total = np.concatenate(sums) if len(sums) > 1 else sums[0]
    return (total * dtype.type(0.5) if half and halve else total).sum()
