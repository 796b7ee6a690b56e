"""Kernels that flush subnormals to zero as TF's CPU kernels do (FTZ/DAZ), around others.

Layer: kernels. :class:`FlushKernels` wraps the kernels :func:`anyclip._kernels.kernels_for`
would choose and is what it gives inside :class:`anyclip.flush_subnormals`. Its
:meth:`~FlushKernels.flush` and :meth:`~FlushKernels.flush_squares` are the core's steps at
TF's op boundaries (the identity in every other kernels, so that the default path is the
unflushed one); the steps over lists of arrays (sums of squares, the scaling of a list) flush
here, around the wrapped kernels' own code: values whose square TF flushes are left out of the
sums, and each product is flushed. Every other step is the wrapped kernels'.

TF flushes a square's value, not its gradient: ``l2_loss``'s is ``t * g`` and ``square``'s
``g * (2 t)`` at every element. Where a gradient may be recorded (torch autograd and
``torch.func``, JAX off the CPU), the values left out of a sum come back into it as a zero
that carries that gradient (:func:`anyclip._gradients.square_gradient`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyclip._compat import library, torch_to
from anyclip._gradients import records_gradient, square_gradient
from anyclip._kernels._base import Kernels, Wrapping
from anyclip._subnormals import flush, flush_squares, split_squares
from anyclip._typing import Namespace

__all__ = ["FlushKernels"]


class FlushKernels(Wrapping):
    """``base``'s steps with TF's flush of subnormals (float32 and float64; JAX off the CPU).

    ``norm2``, ``clip_norm2`` and ``divide_into`` stay ``base``'s (:class:`Wrapping`): the
    core flushes their squares and quotients around them.

    Parameters
    ----------
    base : Kernels
        The kernels wrapped.
    halved : bool, optional
        Whether the sums of squares are TF's ``l2_loss`` (True, the default), whose halves TF
        flushes, or sums it does not halve (False: :meth:`unhalved`'s, around ``base``'s
        :meth:`~Kernels.unhalved`, whose sums are whole), whose squares it flushes.
    """

    ftz = True

    def __init__(self, base: Kernels, *, halved: bool = True) -> None:
        self.base = base if halved else base.unhalved()
        self.halved = halved
        self.name = f"{base.name}+ftz" if halved else f"{base.name}+ftz-unhalved"
        self._unhalved = FlushKernels(base, halved=False) if halved else self

    def unhalved(self) -> Kernels:
        """As :meth:`Kernels.unhalved`: kernels whose sums leave out the squares TF flushes.

        TF flushes a float32 square below ``2**-126`` (``|t|`` under about 1.08e-19) in
        ``reduce_sum(t * t)``; ``l2_loss`` flushes the halves below it, squares up to twice
        that (``|t|`` up to 1.5e-19) included: Keras's global norm of four float32 1.3e-19 is
        2.6e-19, TF's ``global_norm`` 0.
        """
        return self._unhalved

    def flush(self, xp: Namespace, x: Any, also: Any = None, *, owned: bool = False) -> Any:
        """:func:`anyclip._subnormals.flush`."""
        return flush(xp, x, also, owned=owned)

    def flush_squares(self, xp: Namespace, x: Any, *, halved: bool = False) -> Any:
        """:func:`anyclip._subnormals.flush_squares`."""
        return flush_squares(xp, x, halved=halved)

    def _split(
        self, xp: Namespace, arrays: Sequence[Any], acc: Any = None
    ) -> tuple[list[Any], list[Any]]:
        """``arrays`` with zeros where TF's flushed square (:attr:`halved`: half) is 0.

        And the values left out, where a gradient may be recorded
        (:func:`~anyclip._gradients.records_gradient`; otherwise none), for :meth:`_summed`.
        An array cast to another ``acc`` is flushed as a Cast's input (DAZ): its squares in
        the wider dtype are normal.
        """
        if not records_gradient(xp, arrays):
            return [
                flush_squares(xp, v, halved=self.halved)
                if acc is None or v.dtype == acc
                else flush(xp, v)
                for v in arrays
            ], []
        kept: list[Any] = []
        flushed: list[Any] = []
        for v in arrays:
            if acc is not None and v.dtype != acc:
                kept.append(flush(xp, v))
                continue
            k, f = split_squares(xp, v, halved=self.halved)
            kept.append(k)
            if f is not None:
                flushed.append(f)
        return kept, flushed

    def _summed(self, xp: Namespace, total: Any, flushed: list[Any]) -> Any:
        """``total`` plus a zero per array of ``flushed`` that carries TF's gradient there.

        ``l2_loss``'s ``t * g`` (:attr:`halved`), else ``square``'s ``g * (2 t)``: the zero
        twice (the sum is whole, not doubled later).
        """
        torch = library(xp) == "torch"
        for f in flushed:
            zero = square_gradient(xp, f)
            if not self.halved:
                zero = zero + zero
            total = total + (torch_to(zero, total.device) if torch else zero)
        return total

    def half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """The wrapped kernels' sum of the kept (halved) squares, with TF's gradient."""
        kept, flushed = self._split(xp, arrays)
        return self._summed(xp, self.base.half_squares(xp, kept), flushed)

    def total_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any = None) -> Any:
        """The wrapped kernels' sum of the kept (halved) squares, with TF's gradient."""
        kept, flushed = self._split(xp, arrays, acc)
        return self._summed(xp, self.base.total_half_squares(xp, kept, acc), flushed)

    def cast_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any) -> Any:
        """The wrapped kernels' sum of the kept (halved) squares, with TF's gradient."""
        kept, flushed = self._split(xp, arrays, acc)
        return self._summed(xp, self.base.cast_half_squares(xp, kept, acc), flushed)

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
