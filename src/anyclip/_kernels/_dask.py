"""Dask kernels: the matrix 2-norm through dask's own SVD.

Layer: kernels. Chosen by :func:`anyclip._kernels.kernels_for` for dask arrays. Every step
but one is the generic array-API code, which dask evaluates lazily, chunk by chunk (a global
norm is a tree reduction of per-chunk sums of squares: out of core on a cluster). The one
exception: dask's array-API ``svdvals`` asks for ``full_matrices=True``, which dask refuses,
so :meth:`DaskKernels.svdvals` calls ``dask.array.linalg.svd`` (tall-and-skinny QR) after
putting the shorter dimension in one chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from anyclip._kernels._base import Kernels
from anyclip._typing import Namespace

__all__ = ["DaskKernels"]


class DaskKernels(Kernels):
    """:class:`Kernels` for dask arrays."""

    name = "dask"

    def svdvals(self, xp: Namespace, m: Any) -> Any:
        """Singular values of one matrix by ``dask.array.linalg.svd`` (lazy).

        Raises
        ------
        NotImplementedError
            For a stack of matrices (``m.ndim > 2``): dask's SVD takes one matrix.
        """
        if m.ndim != 2:
            msg = (
                "the matrix 2-norm (`ord=2` with a 2-tuple `axis`) of a dask array takes one "
                f"matrix (dask's SVD); got {m.ndim} dimensions: compute it per matrix, or "
                "call .compute() first"
            )
            raise NotImplementedError(msg)
        import dask.array as da

        rows, cols = m.shape
        if 0 in (rows, cols):
            return xp.zeros((0,), dtype=m.dtype)
        tall = rows >= cols
        m = m.rechunk({1: -1}) if tall else m.rechunk({0: -1})
        svd: Callable[[Any], tuple[Any, Any, Any]] = da.linalg.svd  # untyped in dask
        _, s, _ = svd(m)
        return s
