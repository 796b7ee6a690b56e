"""Dask kernels: the matrix 2-norm through dask's own SVD.

Layer: kernels. Chosen by :func:`anyclip._kernels.kernels_for` for dask arrays. Every step
but one is the generic array-API code, which dask evaluates lazily, chunk by chunk (a global
norm is a tree reduction of per-chunk sums of squares: out of core on a cluster). The one
exception: dask's array-API ``svdvals`` asks for ``full_matrices=True``, which dask refuses,
so :meth:`DaskKernels.svdvals` calls ``dask.array.linalg.svd`` (tall-and-skinny QR) after
putting the shorter dimension in one chunk; a stack of matrices goes matrix by matrix, one chunk
holding whole matrices, through NumPy's ``svd`` in ``map_blocks``.

With ``accumulate_dtype``, dask casts chunk by chunk already; :meth:`DaskKernels.cast_map`
makes the cast, the elementwise step and the cast back one task per chunk (``map_blocks``), so
that the cast chunks the sum of squares reads are not kept for the scaling (a shared
``astype`` held every cast chunk until the norm was known).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from anyclip._kernels._base import Kernels
from anyclip._typing import Namespace

__all__ = ["DaskKernels"]


class DaskKernels(Kernels):
    """:class:`Kernels` for dask arrays."""

    name = "dask"

    def cast_map(
        self, xp: Namespace, t: Any, acc: Any, fn: Callable[..., Any], operands: Sequence[Any]
    ) -> Any:
        """As :meth:`Kernels.cast_map`: one task per chunk (``map_blocks``), lazily."""
        if any(getattr(o, "ndim", 0) != 0 for o in operands):
            return super().cast_map(xp, t, acc, fn, operands)
        map_blocks: Callable[..., Any] = t.map_blocks  # untyped in dask
        return map_blocks(_cast_map_chunk, *operands, fn=fn, acc=acc, dtype=t.dtype)

    def svdvals(self, xp: Namespace, m: Any) -> Any:
        """Singular values of a matrix, or of each matrix of a stack, lazily.

        One matrix (``m.ndim == 2``) goes through ``dask.array.linalg.svd`` (tall-and-skinny
        QR: the longer dimension may stay chunked, out of core). A stack (``m.ndim > 2``) is
        rechunked so that every chunk holds whole matrices, and each chunk's singular values
        come from NumPy's ``svd`` (``map_blocks``): each matrix must fit in memory.
        """
        import dask.array as da

        rows, cols = m.shape[-2:]
        k = min(rows, cols)
        if k == 0:
            return xp.zeros((*m.shape[:-2], 0), dtype=m.dtype)
        if m.ndim > 2:
            whole = m.rechunk({m.ndim - 2: -1, m.ndim - 1: -1})
            map_blocks: Callable[..., Any] = da.map_blocks  # untyped in dask
            return map_blocks(
                _stacked_svdvals,
                whole,
                drop_axis=m.ndim - 1,
                chunks=(*whole.chunks[:-2], (k,)),
                dtype=m.dtype,
            )
        tall = rows >= cols
        m = m.rechunk({1: -1}) if tall else m.rechunk({0: -1})
        svd: Callable[[Any], tuple[Any, Any, Any]] = da.linalg.svd  # untyped in dask
        _, s, _ = svd(m)
        return s


def _cast_map_chunk(block: Any, *operands: Any, fn: Any, acc: Any) -> Any:
    """``astype(fn(np, astype(block, acc), *operands), block.dtype)`` for one NumPy chunk."""
    import array_api_compat.numpy as npx
    import numpy as np

    with np.errstate(all="ignore"):  # TF's arithmetic: inf and NaN without warnings
        return fn(npx, block.astype(acc), *operands).astype(block.dtype)


def _stacked_svdvals(block: Any) -> Any:
    """Singular values of every matrix in a NumPy block (the last two axes)."""
    import numpy as np

    return np.linalg.svd(block, compute_uv=False)
