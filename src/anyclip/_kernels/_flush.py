"""Kernels that flush subnormals to zero as TF's CPU kernels do (FTZ/DAZ), around others.

Layer: kernels. :class:`FlushKernels` wraps the kernels :func:`anyclip._kernels.kernels_for`
would choose and is what it gives inside :class:`anyclip.flush_subnormals`. Its
:meth:`~FlushKernels.flush` and :meth:`~FlushKernels.flush_squares` are the core's steps at
TF's op boundaries (the identity in every other kernels, so that the default path is the
unflushed one); the steps over lists of arrays (sums of squares, the scaling of a list) flush
here, around the wrapped kernels' own code: values whose square TF flushes are left out of the
sums, and each product is flushed. Every other step is the wrapped kernels'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyclip._kernels._base import Kernels, Wrapping
from anyclip._subnormals import flush, flush_squares
from anyclip._typing import Namespace

__all__ = ["FlushKernels"]


class FlushKernels(Wrapping):
    """``base``'s steps with TF's flush of subnormals (float32 and float64; not on JAX).

    ``norm2``, ``clip_norm2`` and ``divide_into`` stay ``base``'s (:class:`Wrapping`): the
    core flushes their squares and quotients around them.
    """

    ftz = True

    def __init__(self, base: Kernels) -> None:
        self.base = base
        self.name = f"{base.name}+ftz"

    def flush(self, xp: Namespace, x: Any, also: Any = None, *, owned: bool = False) -> Any:
        """:func:`anyclip._subnormals.flush`."""
        return flush(xp, x, also, owned=owned)

    def flush_squares(self, xp: Namespace, x: Any, *, halved: bool = False) -> Any:
        """:func:`anyclip._subnormals.flush_squares`."""
        return flush_squares(xp, x, halved=halved)

    def _halved(self, xp: Namespace, arrays: Sequence[Any], acc: Any = None) -> list[Any]:
        """``arrays`` with zeros where TF's flushed halved square is 0.

        An array cast to another ``acc`` is flushed as a Cast's input (DAZ): its squares in
        the wider dtype are normal.
        """
        return [
            flush_squares(xp, v, halved=True) if acc is None or v.dtype == acc else flush(xp, v)
            for v in arrays
        ]

    def half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """The wrapped kernels' sum of the kept halved squares."""
        return self.base.half_squares(xp, self._halved(xp, arrays))

    def total_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any = None) -> Any:
        """The wrapped kernels' sum of the kept halved squares."""
        return self.base.total_half_squares(xp, self._halved(xp, arrays, acc), acc)

    def cast_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any) -> Any:
        """The wrapped kernels' sum of the kept halved squares."""
        return self.base.cast_half_squares(xp, self._halved(xp, arrays, acc), acc)

    def row_squares(self, xp: Namespace, rows: Any) -> Any:
        """The wrapped kernels' sums of the kept squares."""
        return self.base.row_squares(xp, flush_squares(xp, rows))

    def scale(self, xp: Namespace, t_list: Sequence[Any], scale: Any) -> list[Any]:
        """The wrapped kernels' products, flushed (a subnormal array value gives 0)."""
        out = self.base.scale(xp, t_list, flush(xp, scale))
        return [
            o if o is None else flush(xp, o, v, owned=o is not v)
            for o, v in zip(out, t_list, strict=True)
        ]
