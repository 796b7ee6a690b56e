"""The generic kernels: TF's reductions and steps, in pure array-API code.

Layer: kernels, below the core. :class:`Kernels` is the one seam between the formulas of
:mod:`anyclip._core` and the ways a backend can evaluate their heavy steps. Each method takes
the namespace and arrays the core already validated, computes one step of TF's formula, and
returns arrays; a backend subclass may override a method to compute the same step faster
(fewer passes over memory, no temporaries, fused reductions), never to change the formula.

:meth:`Kernels.total_half_squares` is the one step that reduces *across* arrays: the place
where per-device partial sums meet (torch), and where
:class:`~anyclip._kernels._dist.GroupKernels` adds its all-reduce over a process group or a
JAX axis name.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from anyclip._compat import (
    HALF_PRECISION,
    device,
    dtype_name,
    is_dtensor,
    is_functorch_wrapped,
    library,
    may_be_sharded,
)
from anyclip._gradients import product
from anyclip._kernels._tfaxes import tf_sum_or_none
from anyclip._kernels._tforder import tf_order_dtype
from anyclip._kernels._tforder_xp import rounded_apart, rounded_cast, tf_order_squares
from anyclip._numerics import constant, quotient, reduce_sum, rounded_here, sqrt, tf_cast
from anyclip._typing import Namespace

__all__ = [
    "ATEN_GRAIN",
    "BLOCK",
    "JOIN",
    "ROW",
    "SQUARE_ROW",
    "UPCAST_BLOCK",
    "Kernels",
    "Wrapping",
    "bfloat16_square_sum",
    "every_axis",
    "groups",
    "partials",
    "reduces_one",
]

#: Arrays of this many elements or more are large: their squares are summed on their own (the
#: smaller ones joined first), and the NumPy clip writes its second step in place.
BLOCK = 1 << 16

#: Most elements joined into one temporary by the sums of squares (4 MiB of float32).
JOIN = 1 << 20

#: Elements per row in the sums of squares (one ``einsum`` or ``vector_norm`` per row).
ROW = 256

#: Elements cast to an accumulation dtype at a time (4 MiB of float32): see
#: :meth:`Kernels.blocks`.
UPCAST_BLOCK = 1 << 20

#: ATen's ``GRAIN_SIZE``: a torch CPU operation on fewer elements runs on the calling thread
#: (a sum's bits then depend on no thread count, and no wait for torch's thread pool).
ATEN_GRAIN = 1 << 15

#: Elements per row of torch's float32 sums of an array's bfloat16 squares
#: (:func:`bfloat16_square_sum`): each row's sum runs on one thread (:data:`ATEN_GRAIN`),
#: and the fast path's blocks are whole rows.
SQUARE_ROW = ATEN_GRAIN

#: Libraries whose operations run one at a time on whole arrays, so that a cast of a whole
#: array exists in memory: their arrays are cast one block at a time. JAX arrays have no views
#: (its kernels run a compiled loop over blocks instead); dask casts chunk by chunk itself.
_EAGER = ("numpy", "torch", "cupy", "array_api_strict")

#: Libraries whose float64 sums of squares the generic kernels add in TF's (CPU) order. NumPy
#: and torch have their own kernels for it, dask its own graph; JAX's check its arrays (CPU, not
#: sharded).
_TF_ORDER = ("numpy", "array_api_strict")


class Kernels:
    """The generic implementation of every step the core delegates (any array-API namespace).

    Stateless: one instance serves every call. Subclasses override methods for one backend
    and call ``super()`` for the arguments their fast path does not cover.

    Examples
    --------
    >>> import numpy as np
    >>> import array_api_compat.numpy as xp
    >>> from anyclip._kernels import GENERIC
    >>> GENERIC.norm2(xp, np.array([3.0, 4.0]), None)
    array([5.])
    """

    #: A short name, for reprs and test ids.
    name = "generic"

    #: Whether these kernels flush subnormals to zero as TF's CPU kernels do (FTZ/DAZ): the
    #: core's :meth:`flush` and :meth:`flush_squares` steps, and the list steps, then do;
    #: :func:`anyclip._kernels.kernels_for` gives such kernels inside
    #: :class:`anyclip.flush_subnormals`.
    ftz = False

    def __repr__(self) -> str:
        return f"<anyclip kernels: {self.name}>"

    def flush(self, xp: Namespace, x: Any, also: Any = None, *, owned: bool = False) -> Any:
        """``x`` with subnormal values flushed to 0 where :attr:`ftz` (here: ``x`` itself).

        See :func:`anyclip._subnormals.flush` (``also``: the op's input, for TF's DAZ;
        ``owned``: ``x`` is the caller's temporary).
        """
        return x

    def flush_squares(self, xp: Namespace, x: Any, *, halved: bool = False) -> Any:
        """``x`` with zeros where TF's flushed square is 0, where :attr:`ftz` (here: ``x``).

        See :func:`anyclip._subnormals.flush_squares`.
        """
        return x

    #: Whether :meth:`half_squares` halves each array's sum (TF's ``l2_loss``): False in the
    #: kernels of :meth:`unhalved`. Read through :attr:`halving`.
    _halves = True

    @property
    def halving(self) -> bool:
        """Whether the sums of :meth:`total_half_squares` are halved (TF's ``l2_loss``).

        True, but in the kernels of :meth:`unhalved`, whose sums are whole: the core doubles
        only a halved sum (:func:`anyclip._core.norm_from_total`).
        """
        return self._halves

    def unhalved(self) -> Kernels:
        """These kernels for a sum of squares that TF does not halve: ``reduce_sum(t * t)``.

        Their :meth:`total_half_squares` is the whole sum of the squares, added in the same
        order as the halves here (the same bits, doubled, wherever the halves are normal
        numbers: halving and doubling a normal number are exact), never through a halved sum:
        where a half is subnormal (squares under twice the smallest normal number) it loses
        bits, or is flushed to zero (TF's ``l2_loss``; XLA:CPU), where the whole sum is
        TF's. No square is left out because ``l2_loss`` would flush its half. The sums of
        ``tf.norm``, ``clip_by_norm`` and ``l2_normalize`` taken in an accumulation dtype
        (:meth:`total_squares`), and Keras's global norm (``sum(square(v))``). A copy of
        these kernels with :attr:`halving` False, made once (``self`` where it is already).
        """
        if not self._halves:
            return self
        twin: Kernels | None = self.__dict__.get("_twin")
        if twin is None:
            twin = copy.copy(self)
            twin._halves = False
            twin.name = f"{self.name}-unhalved"
            self._twin = twin
        return twin

    def total_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any = None) -> Any:
        """The sum of the squares of every array, unhalved (0-d): TF's ``reduce_sum(t * t)``.

        :meth:`total_half_squares` of :meth:`unhalved` (``acc`` as there): the sum is never
        formed as half a sum, then doubled.
        """
        return self.unhalved().total_half_squares(xp, arrays, acc)

    def norm2(self, xp: Namespace, x: Any, axes: tuple[int, ...] | None, other: Any = None) -> Any:
        """``sqrt(sum(x * x, axes, keepdims=True))``: the Euclidean norm of ``tf.norm``.

        ``other``: as :meth:`_square_sum`'s.
        """
        return sqrt(xp, self._square_sum(xp, x, axes, other))

    def _square_sum(
        self, xp: Namespace, x: Any, axes: tuple[int, ...] | None, other: Any = None
    ) -> Any:
        """``sum(x * x, axes, keepdims=True)``, in TF's order where it can.

        ``other`` (optional): ``x``'s values through another autograd use
        (:func:`anyclip._gradients.uses`), the second factor of each square.
        """
        if every_axis(x, axes):
            total = self.tf_order_squares(xp, [x], half=False)
            if total is not None:
                return xp.reshape(total, (1,) * x.ndim)
        squares = rounded_here(xp, product(xp, x, x if other is None else other))
        if reduces_one(x, axes):
            # under jax.jit XLA folds sqrt(x * x) over one element into abs(x), dropping the
            # overflow (and underflow) of the square that TF's norm has: 1e30 for TF's inf
            squares = rounded_apart(xp, squares)
        return self.nonnegative_sum(xp, squares, axes)

    def nonnegative_sum(self, xp: Namespace, y: Any, axes: tuple[int, ...] | int | None) -> Any:
        """``sum(y, axes, keepdims=True)`` of addends ``>= 0`` (squares, absolute values).

        In TF's order where :meth:`tf_sum` can, else the library's (settled: one all-reduce
        for a DTensor sharded over a reduced axis).
        """
        total = self.tf_sum(xp, y, axes)
        if total is not None:
            return total
        return self.settle(xp, reduce_sum(xp, y, axes, keepdims=True))

    def tf_sum(self, xp: Namespace, y: Any, axes: tuple[int, ...] | int | None) -> Any | None:
        """``sum(y, axes, keepdims=True)`` of a float64 ``y >= 0`` in TF 2.21's order, or None.

        :func:`~anyclip._kernels._tfaxes.tf_axes_sum` (array-API operations) for the
        libraries of :data:`_TF_ORDER`: every float64 reduction of ``reduce_sum`` and
        ``tf.norm`` over some of the axes lands on TF's bits there, where the library's own
        order was up to 13 ULP away (a 1-norm down the 300 rows of a ``(300, 40)`` array).
        None for other dtypes (float32 sums keep the library's order, within TF's few ULP),
        empty arrays, and other libraries.
        """
        if library(xp) not in _TF_ORDER or dtype_name(y.dtype) != "float64":
            return None
        return tf_sum_or_none(xp, y, axes)

    def tf_order_squares(self, xp: Namespace, arrays: Sequence[Any], *, half: bool) -> Any:
        """The float64 sum of squares of ``arrays`` in TF's order, 0-d, or None.

        :func:`~anyclip._kernels._tforder_xp.tf_order_squares` (with ``half``, the sum of
        their ``l2_loss``) for float64 arrays of the libraries in :data:`_TF_ORDER`, and
        float32 ones with ``half`` (``tf.linalg.global_norm``) (array-API operations:
        ``take``, ``where``, slices, additions); None for the others (their sums keep the
        library's own order). With ``half``, each array's sum is halved where :attr:`halving`
        (else the whole sums are added, in the same order).
        """
        if library(xp) not in _TF_ORDER or not tf_order_dtype(arrays[0].dtype, half=half):
            return None
        return tf_order_squares(xp, arrays, half=half, halve=self.halving)

    def clip_norm2(
        self, xp: Namespace, t: Any, axes: tuple[int, ...] | None, other: Any = None
    ) -> Any:
        """The L2 norm of ``tf.clip_by_norm``: TF's double ``where`` keeps its gradient finite at 0.

        ``where(l2sum > 0, sqrt(where(l2sum > 0, l2sum, 1)), l2sum)``, with the reduced axes
        kept. An override may drop the ``where``s only where no gradient is recorded (the
        values are the same). ``other``: as :meth:`_square_sum`'s.
        """
        l2sum = rounded_here(xp, self._square_sum(xp, t, axes, other))
        pred = l2sum > 0
        ones = xp.ones_like(l2sum)
        return xp.where(pred, rounded_here(xp, sqrt(xp, xp.where(pred, l2sum, ones))), l2sum)

    def divide_into(self, xp: Namespace, owned: Any, divisor: Any) -> Any:
        """``owned / divisor``; ``owned`` is a temporary the core made, which may be reused.

        On JAX :func:`~anyclip._numerics.quotient`'s division, which XLA cannot rewrite as a
        product with the reciprocal: TF's correctly rounded quotients.
        """
        return quotient(xp, owned, divisor)

    def unit_norm2(self, xp: Namespace, x: Any, axes: tuple[int, ...] | None) -> Any:
        """``sqrt(sum(x * x, axes, keepdims=True))`` of a real ``x``: AGC's unit norms.

        optax's and timm's own formula (no TF order to keep); an override may compute it
        without the ``x * x`` temporary.
        """
        squares = rounded_here(xp, x * x)
        total = rounded_here(xp, xp.sum(squares, axis=axes, keepdims=True))
        return rounded_here(xp, sqrt(xp, total))

    def row_squares(self, xp: Namespace, rows: Any) -> Any:
        """``sum(rows * rows, axis=-1)`` of a 2-D array: one sum of squares per row.

        The per-example sums of squares of per-example clipping (one row per example). The
        generic code makes the square (XLA fuses it into the sum under ``jax.jit``);
        overrides sum without it.
        """
        return reduce_sum(xp, rows * rows, -1, keepdims=False)

    def row_norms(self, xp: Namespace, rows: Any) -> Any:
        """``sqrt(sum(rows * rows, axis=-1))`` of a 2-D array: one Euclidean norm per row.

        Opacus's per-sample norms (its ``norm(2, dim=-1)``); overrides may use the backend's
        own vector norm.
        """
        return sqrt(xp, self.row_squares(xp, rows))

    def half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """``sum(l2_loss(t) for t in arrays)`` with ``l2_loss(t) = sum(t * t) * 0.5``.

        The arrays (at least one) share one dtype and one device; the sum is over ``stack``,
        in list order, as TF's. Where :attr:`halving` is False, ``sum(sum(t * t) for t in
        arrays)`` in the same order (:meth:`unhalved`).
        """
        total = self.tf_order_squares(xp, arrays, half=True)
        if total is not None:
            return total
        half = [_half_square_sum(xp, v, halve=self.halving) for v in arrays]
        stacked = xp.stack(half)
        if dtype_name(stacked.dtype) in _ROUNDED_LOSSES:  # each l2_loss rounded to its dtype
            stacked = rounded_apart(xp, stacked)
        return reduce_sum(xp, stacked, None, keepdims=False)

    def total_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any = None) -> Any:
        """:meth:`half_squares` of every array of the call, as one 0-d array.

        The reduction across arrays: an override groups the arrays (by device here; by a
        process group or a JAX axis name in a distributed subclass), sums each group with
        :meth:`cast_half_squares`, and adds the partial sums where ``arrays[0]`` lives. The
        generic one has one group. ``acc`` (a dtype, or None for the arrays' own): the
        dtype the squares are summed in, each array cast one block at a time.
        """
        return self.cast_half_squares(xp, arrays, acc)

    def blocks(self, xp: Namespace, v: Any) -> list[Any] | None:
        """``v``'s elements as flat views of at most ``UPCAST_BLOCK`` elements, in order.

        The one rule for casting a step at a time: on the eager libraries (NumPy, torch,
        CuPy, array-api-strict) a cast of a whole array would exist in memory next to the
        input (twice its size from float16 to float32), so the steps that cast
        (:meth:`cast_half_squares`, :meth:`cast_reduce`, :meth:`cast_map`) take these blocks
        one at a time. None for the other libraries: a slice of a JAX array is a copy (the JAX
        kernels loop over blocks in compiled code instead), and dask casts chunk by chunk.
        """
        if library(xp) not in _EAGER:
            return None
        flat = xp.reshape(v, (-1,))
        n = int(flat.shape[0])
        return [flat[s : min(n, s + UPCAST_BLOCK)] for s in range(0, n, UPCAST_BLOCK)]

    def cast_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any) -> Any:
        """:meth:`half_squares` of ``arrays`` (one device) cast to ``acc``, a block at a time.

        Arrays already of dtype ``acc`` (all of them when ``acc`` is None) are summed as they
        are, together; each other array is cast one of its :meth:`blocks` at a time and that
        block's half sum taken before the next is cast, so no cast of a whole array exists
        (casting every array first kept twice the input alive from float16 to float32). The
        partial sums are added in order (the arrays already in ``acc`` first, then the others'
        blocks in list order). ``self`` are the kernels of ``acc``.
        """
        if acc is None:
            return self.half_squares(xp, arrays)
        same = [v for v in arrays if v.dtype == acc]
        if len(same) == len(arrays):
            return self.half_squares(xp, arrays)
        steps: list[Callable[[], Any]] = [lambda: self.half_squares(xp, same)] if same else []
        for v in arrays:
            if v.dtype == acc:
                continue
            pieces = self.blocks(xp, v)
            if pieces is None:
                pieces = [v]
            elif not pieces:  # an empty array
                pieces = [xp.reshape(v, (-1,))]
            steps += [self._cast_half_step(xp, b, acc) for b in pieces]
        return reduce_sum(xp, partials(xp, steps, acc, arrays), None, keepdims=False)

    def _cast_half_step(self, xp: Namespace, b: Any, acc: Any) -> Callable[[], Any]:
        return lambda: self.half_squares(xp, [rounded_cast(xp, b, acc)])

    def cast_reduce(
        self,
        xp: Namespace,
        x: Any,
        acc: Any,
        fn: Callable[..., Any],
        operands: Sequence[Any],
        combine: str,
    ) -> Any | None:
        """``fn(xp, astype(x, acc), *operands)`` (a 0-d reduction over every axis), by blocks.

        ``fn`` reduces a block to a 0-d array; the blocks' results are combined by a sum
        (``combine="sum"``) or a maximum (``"max"``). None where one piece is as good: one
        block, no :meth:`blocks` (the caller then reduces the whole array), or a gradient
        recorded through ``x`` (ties between blocks would share the maximum's gradient
        otherwise than TF's one reduction).
        """
        if getattr(x, "requires_grad", False):
            return None
        pieces = self.blocks(xp, x)
        if pieces is None or len(pieces) <= 1:
            return None
        steps = [lambda b=b: fn(xp, rounded_cast(xp, b, acc), *operands) for b in pieces]
        stacked = partials(xp, steps, acc, [x])
        if combine == "max":
            return xp.max(stacked)
        return reduce_sum(xp, stacked, None, keepdims=False)

    def cast_map(
        self, xp: Namespace, t: Any, acc: Any, fn: Callable[..., Any], operands: Sequence[Any]
    ) -> Any:
        """``astype(fn(xp, astype(t, acc), *operands), t.dtype)`` a block at a time.

        ``fn`` is elementwise in its first argument and broadcasts 0-d ``operands``. Only one
        of ``t``'s :meth:`blocks` exists in ``acc`` at a time; NumPy and torch (without
        autograd) write the blocks into the output, the others join them at the end.
        """
        pieces = self.blocks(xp, t)
        if pieces is None or len(pieces) <= 1:
            return rounded_cast(xp, fn(xp, rounded_cast(xp, t, acc), *operands), t.dtype)
        outs = (
            rounded_cast(xp, fn(xp, rounded_cast(xp, p, acc), *operands), t.dtype) for p in pieces
        )
        if _writes_in_place(xp, [t]):
            out = xp.empty((math.prod(t.shape),), dtype=t.dtype, device=device(t))
            start = 0
            for piece, o in zip(pieces, outs, strict=True):
                out[start : start + int(piece.shape[0])] = o
                start += int(piece.shape[0])
        else:
            out = xp.concat(list(outs))
        return xp.reshape(out, tuple(t.shape))

    def reduce_max(self, xp: Namespace, x: Any, axis: tuple[int, ...] | int) -> Any:
        """``max(x, axis, keepdims=True)`` of a non-empty ``x``: NaN wherever a NaN is reduced.

        TF's ``reduce_max`` propagates NaN; so does every backend's on one device. Across the
        devices of a JAX array it does not: XLA:CPU's ``maximum`` all-reduce drops a NaN met
        after a number (``jnp.max`` of a sharded array with a NaN in its last shard is
        finite), so a floating JAX array that may be sharded (of any dtype: these kernels
        serve JAX's float16, bfloat16 and complex inputs, whose absolute values are reduced
        here) reduces its values with NaN replaced by ``-inf`` and a NaN flag beside them
        (the same ``max`` reduction, which XLA may combine into one all-reduce), and NaN is
        put back where a flag is set. The gradient is ``max``'s. A dask array of unknown
        chunk sizes (``x[x > 0]``) may be empty: :class:`~anyclip._kernels._dask.DaskKernels`
        start from the lowest value.
        """
        if (
            library(xp) != "jax"
            or not xp.isdtype(x.dtype, "real floating")
            or not may_be_sharded(x)
        ):
            return xp.max(x, axis=axis, keepdims=True)
        nan = xp.isnan(x)
        low = constant(xp, -math.inf, x.dtype, x)
        top = xp.max(xp.where(nan, low, x), axis=axis, keepdims=True)
        flag = xp.max(xp.astype(nan, x.dtype), axis=axis, keepdims=True)
        return xp.where(flag > 0, constant(xp, math.nan, x.dtype, x), top)

    def settle(self, xp: Namespace, r: Any) -> Any:
        """A reduction's result ``r``, made final (the identity here).

        A torch ``DTensor`` reduced over a sharded dimension holds ``Partial`` values, which
        :class:`~anyclip._kernels._torch.TorchKernels` turn into ``Replicate`` by one
        all-reduce of the reduced values.
        """
        return r

    def spectral_input(self, xp: Namespace, x: Any, axis: tuple[int, int]) -> Any:
        """``x``, checked for the matrix 2-norm over ``axis`` (its SVD needs whole matrices)."""
        return x

    def svdvals(self, xp: Namespace, m: Any) -> Any:
        """The singular values of the matrices ``m`` (..., M, N), for the matrix 2-norm."""
        return xp.linalg.svdvals(m)

    def local(self, xp: Namespace, x: Any) -> Any:
        """``x`` as a plain array of this process (a sharded torch tensor's replicated value)."""
        return x

    def replicated(self, xp: Namespace, value: Any, like: Any) -> Any:
        """A 0-d ``value``, equal on every rank, typed as ``like`` (a ``DTensor`` for one)."""
        return value

    def scale(self, xp: Namespace, t_list: Sequence[Any], scale: Any) -> list[Any]:
        """``[None if t is None else t * cast(scale, t.dtype) for t in t_list]``."""
        out: list[Any] = []
        for v in t_list:
            if v is None:
                out.append(None)
                continue
            s = scale if scale.dtype == v.dtype else tf_cast(xp, scale, v.dtype)
            out.append(v * s)
        return out


class Wrapping(Kernels):
    """Kernels that wrap another's (``base``): these steps are ``base``'s, unchanged.

    The base of :class:`~anyclip._kernels._flush.FlushKernels` (TF's flush of subnormals)
    and :class:`~anyclip._kernels._dist.GroupKernels` (one all-reduce over ``group=``),
    which override the steps they change.
    """

    base: Kernels

    @property
    def halving(self) -> bool:
        """As the wrapped kernels'."""
        return self.base.halving

    def unhalved(self) -> Kernels:
        """These kernels around the wrapped kernels' :meth:`~Kernels.unhalved` (made once)."""
        if not self.base.halving:
            return self
        twin: Kernels | None = self.__dict__.get("_twin")
        if twin is None:
            twin = copy.copy(self)
            twin.base = self.base.unhalved()
            twin.name = f"{self.name}-unhalved"
            self._twin = twin
        return twin

    def blocks(self, xp: Namespace, v: Any) -> list[Any] | None:
        """As the wrapped kernels'."""
        return self.base.blocks(xp, v)

    def cast_reduce(
        self,
        xp: Namespace,
        x: Any,
        acc: Any,
        fn: Callable[..., Any],
        operands: Sequence[Any],
        combine: str,
    ) -> Any | None:
        """As the wrapped kernels'."""
        return self.base.cast_reduce(xp, x, acc, fn, operands, combine)

    def cast_map(
        self, xp: Namespace, t: Any, acc: Any, fn: Callable[..., Any], operands: Sequence[Any]
    ) -> Any:
        """As the wrapped kernels'."""
        return self.base.cast_map(xp, t, acc, fn, operands)

    def reduce_max(self, xp: Namespace, x: Any, axis: tuple[int, ...] | int) -> Any:
        """As the wrapped kernels'."""
        return self.base.reduce_max(xp, x, axis)

    def settle(self, xp: Namespace, r: Any) -> Any:
        """As the wrapped kernels'."""
        return self.base.settle(xp, r)

    def spectral_input(self, xp: Namespace, x: Any, axis: tuple[int, int]) -> Any:
        """As the wrapped kernels'."""
        return self.base.spectral_input(xp, x, axis)

    def svdvals(self, xp: Namespace, m: Any) -> Any:
        """As the wrapped kernels'."""
        return self.base.svdvals(xp, m)

    def local(self, xp: Namespace, x: Any) -> Any:
        """As the wrapped kernels'."""
        return self.base.local(xp, x)

    def norm2(self, xp: Namespace, x: Any, axes: tuple[int, ...] | None, other: Any = None) -> Any:
        """As the wrapped kernels'."""
        return self.base.norm2(xp, x, axes, other)

    def nonnegative_sum(self, xp: Namespace, y: Any, axes: tuple[int, ...] | int | None) -> Any:
        """As the wrapped kernels'."""
        return self.base.nonnegative_sum(xp, y, axes)

    def clip_norm2(
        self, xp: Namespace, t: Any, axes: tuple[int, ...] | None, other: Any = None
    ) -> Any:
        """As the wrapped kernels'."""
        return self.base.clip_norm2(xp, t, axes, other)

    def divide_into(self, xp: Namespace, owned: Any, divisor: Any) -> Any:
        """As the wrapped kernels'."""
        return self.base.divide_into(xp, owned, divisor)

    def replicated(self, xp: Namespace, value: Any, like: Any) -> Any:
        """As the wrapped kernels'."""
        return self.base.replicated(xp, value, like)


#: The dtypes whose ``l2_loss`` is rounded to the dtype before the sum of a list's (each
#: array's ``l2_loss`` kept apart under ``jax.jit``, where XLA would keep it in float32).
_ROUNDED_LOSSES = HALF_PRECISION


def _half_square_sum(xp: Namespace, v: Any, *, halve: bool = True) -> Any:
    """TF's ``l2_loss(v)``: ``sum(v * v * 0.5)``, squares and halves rounded to ``v``'s dtype.

    ``halve=False``: ``sum(v * v)``, TF's ``reduce_sum(square(v))`` (the same squares and
    sums, nothing halved: :meth:`Kernels.unhalved`).

    float16 halves each square first, as TF: a float16 square below twice the smallest
    subnormal (``|v|`` under about 3.5e-4) halves to 0, so TF's ``global_norm`` of small
    float16 gradients is smaller than the norm of their sum of squares (0 for gradients of
    about 1e-4). So does bfloat16 off torch (JAX): XLA:CPU flushes the subnormal halves as
    TF's CPU kernels do (``global_norm`` of four bfloat16 1.3e-19 is 0 in both).

    Elsewhere ``sum(v * v) * 0.5``, one step fewer: the same value wherever each half is a
    normal number (halving a normal square is exact, and so is halving every partial sum of
    the float32 accumulation and its rounding to bfloat16). The halves that are not (squares
    below twice the smallest normal: float32 and bfloat16 elements under about 1.6e-19,
    float64 under 2.1e-154) are the ones TF's CPU kernels flush to 0; torch keeps IEEE
    subnormals, a difference declared in docs/tf-behaviour.md (float32 and float64 elements
    whose halves TF flushes are left out of the sum first inside
    :class:`anyclip.flush_subnormals`; the JAX kernels leave them out by themselves). Where
    the float32 sum of bfloat16 squares overflows or rounds to inf and the sum of the halves
    does not, TF's global norm overflows in its ``* 2`` (tested against TF). torch's bfloat16
    squares are summed in float32 by :func:`bfloat16_square_sum`, rounded once, then halved.

    Under ``jax.jit`` on a CPU without native float16 arithmetic, XLA computes a half-precision
    product feeding a reduction in float32 and drops its rounding to the half type (it allows
    "excess precision"): squares too small for float16 were then kept, and a real model's
    float16 norm came out 22 ULP from TF's. Each half-precision product is rounded apart
    (:func:`~anyclip._kernels._tforder_xp.rounded_apart`), as eagerly.

    ``square(v)``, not ``v * v``: the same values, and ``l2_loss``'s gradient ``v * g`` as one
    term, as TF's; ``v * v`` gave torch's autograd two, added one after the other to the
    array's other gradients (``clip_by_global_norm``'s gradients bit-equal to live TF's in 1
    of 40 random float32 lists, now 9).
    """
    name = dtype_name(v.dtype)
    torch = library(xp) == "torch"
    if not halve:
        squares = xp.square(v)
        if name in _ROUNDED_LOSSES:  # (rounded under torch.compile, as eagerly)
            squares = rounded_apart(xp, squares)
        if name == "bfloat16" and torch:
            return rounded_apart(xp, xp.astype(bfloat16_square_sum(xp, squares), v.dtype))
        return reduce_sum(xp, squares, None, keepdims=False)
    half = constant(xp, 0.5, v.dtype, v)
    if name == "float16" or (name == "bfloat16" and not torch):
        halves = rounded_apart(xp, rounded_apart(xp, xp.square(v)) * half)
        return reduce_sum(xp, halves, None, keepdims=False)
    if name != "bfloat16":
        return reduce_sum(xp, xp.square(v), None, keepdims=False) * half
    squares = rounded_apart(xp, xp.square(v))  # (rounded under torch.compile, as eagerly)
    return rounded_apart(xp, xp.astype(bfloat16_square_sum(xp, squares), v.dtype)) * half


def bfloat16_square_sum(xp: Namespace, squares: Any) -> Any:
    """The float32 sum (0-d) of a torch array's bfloat16 ``squares``, by rows.

    Up to :data:`SQUARE_ROW` elements, ``sum(squares, dtype=float32)``. Beyond, the rows of
    :data:`SQUARE_ROW` elements are summed (each on one thread, in torch's cascade), then
    these sums and the sum of the last, shorter row (0 when there is none) are summed. A
    sum of the whole array would be split between torch's threads, its bits depending on
    their number (2 and 4 threads against 1: other bits on arrays of 600,001 elements); by
    rows they are the same on any number (tested) up to 2**30 elements (past that, the sum
    of the 32,768 or more row sums is split between threads again), and the fast path
    (:func:`anyclip._kernels._torch_sums._cpu_half_losses`) sums the same rows block by
    block in buffers that stay in the CPU's cache. A ``DTensor`` is summed whole (rows of
    it would be gathered). The rounding to bfloat16 is the caller's.
    """
    f32 = xp.float32
    n = math.prod(squares.shape)
    if n <= SQUARE_ROW or is_dtensor(squares):
        return xp.sum(squares, dtype=f32)
    flat = xp.reshape(squares, (-1,))
    m = n // SQUARE_ROW
    rows = xp.sum(xp.reshape(flat[: m * SQUARE_ROW], (m, SQUARE_ROW)), axis=1, dtype=f32)
    tail = xp.reshape(xp.sum(flat[m * SQUARE_ROW :], dtype=f32), (1,))
    return xp.sum(xp.concat([rows, tail]))


def _writes_in_place(xp: Namespace, arrays: Sequence[Any]) -> bool:
    """Whether block results may be written into an array made first (else they are joined).

    NumPy, and torch when no gradient is recorded through ``arrays`` and no ``torch.func``
    transform (``vmap``, ``grad``) wraps them: autograd and the transforms refuse or do not
    follow an in-place write of their values into a plain array.
    """
    lib = library(xp)
    if lib == "numpy":
        return True
    if lib != "torch" or any(getattr(a, "requires_grad", False) for a in arrays):
        return False
    return not any(is_functorch_wrapped(a) for a in arrays)


def partials(
    xp: Namespace, steps: Sequence[Callable[[], Any]], dtype: Any, arrays: Sequence[Any]
) -> Any:
    """The 0-d results of ``steps`` (of ``dtype``), run in order, as one 1-D array.

    On NumPy and torch without autograd each result is written into an array made before the
    first step: a 0-d result kept alive after its block's temporaries would sit above them in
    the C heap, which then could not reuse their memory for the next block (glibc's resident
    memory grew by a block per block, measured with torch). Elsewhere, ``stack``.
    """
    if not _writes_in_place(xp, arrays):
        return xp.stack([step() for step in steps])
    out = xp.empty((len(steps),), dtype=dtype, device=device(arrays[0]))
    for i, step in enumerate(steps):
        out[i] = step()
    return out


def _first_at_least(ends: Sequence[int], value: int, lo: int) -> int:
    """The first index from ``lo`` where the ascending ``ends`` reach ``value`` (else their length).

    ``bisect.bisect_left`` in Python: torch.compile cannot trace the C builtin (with
    ``fullgraph=True`` it refused every global norm of small tensors whose sizes add up past a
    group; without, it broke the graph there), and runs this loop of a few steps.
    """
    hi = len(ends)
    while lo < hi:
        mid = (lo + hi) // 2
        if ends[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


def every_axis(x: Any, axes: tuple[int, ...] | None) -> bool:
    """Whether a reduction over ``axes`` (distinct, non-negative, or None) reduces all of ``x``.

    TF reduces ``axes`` that name every axis as it reduces ``axes=None``: one full reduction,
    the same bits (measured, TF 2.21, float64).
    """
    return axes is None or len(axes) == x.ndim


def reduces_one(x: Any, axes: tuple[int, ...] | None) -> bool:
    """Whether each sum over ``axes`` (distinct, non-negative, or None) adds one element.

    Such a sum is its element: XLA then rewrites ``sqrt(x * x)`` to ``abs(x)`` under
    ``jax.jit`` (:meth:`Kernels._square_sum` keeps the square apart there).
    """
    named = range(x.ndim) if axes is None else axes
    return all(x.shape[a] == 1 for a in named)  # an unknown size (dask's NaN, None) is not 1


def groups(
    arrays: Sequence[Any],
    count: Callable[[Any], int],
    *,
    block: int = BLOCK,
    join: int = JOIN,
) -> list[list[Any]]:
    """The arrays, in order, as groups whose squares are summed together.

    One group per array of ``block`` elements or more; the smaller ones between two such are
    joined, up to ``join`` elements per group (a group closes once it holds ``join`` or more,
    so it holds fewer than ``join + block``). ``count`` gives an array's number of elements.
    Joining replaces a reduction per small array by one per group (the per-array cost
    dominates for thousands of small arrays); the cap bounds the temporary a group is joined
    into. The groups keep the list's order (TF's order adds the arrays' sums in it).
    """
    sizes = list(map(count, arrays))
    if not sizes:
        return []
    if max(sizes) < block:  # all small: cut the running total, no loop per array
        ends = list(itertools.accumulate(sizes))
        if ends[-1] < join:
            return [list(arrays)]
        cuts: list[list[Any]] = []
        start, base = 0, 0
        while start < len(ends):
            # the first array with which the group holds `join` elements or more
            stop = min(_first_at_least(ends, base + join, start), len(ends) - 1) + 1
            cuts.append(list(arrays[start:stop]))
            start, base = stop, ends[stop - 1]
        return cuts
    out: list[list[Any]] = []
    batch: list[Any] = []
    size = 0
    for a, n in zip(arrays, sizes, strict=True):
        if n >= block:  # the smaller arrays before it first: the groups keep the list's order
            if batch:
                out.append(batch)
                batch, size = [], 0
            out.append([a])
            continue
        batch.append(a)
        size += n
        if size >= join:
            out.append(batch)
            batch, size = [], 0
    if batch:
        out.append(batch)
    return out
