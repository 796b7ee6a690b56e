"""TF's order of additions for float64 sums over some of the axes (Eigen's partial reductions).

Layer: kernels. :func:`tf_axes_sum` adds as TF 2.21's CPU ``reduce_sum`` adds when its axes
leave other axes: TF first merges runs of kept and of reduced axes (an axis of one element
joins its left neighbour's run) and then, by the merged shape, reduces

* one axis (all of it): Eigen's full reduction (:func:`~anyclip._kernels.tf_vector_sum`);
* ``(N, M)`` over axis 1: each row as a full reduction of its own, its tree's splits aligned
  on the packets of the whole array (:func:`_row_sums`);
* ``(N, M)`` over axis 0 and ``(A, B, C)`` over axis 1: Eigen's ``InnerMostDimPreserver``,
  :func:`_columns`;
* ``(A, B, C)`` over axes 0 and 2: each output adds its elements one after another, axis 2
  outside, axis 0 inside (``GenericDimReducer``);
* more merged axes: TF moves the reduced ones last (a transpose) and reduces the rows of the
  ``(kept, reduced)`` matrix.

Measured bit for bit against TF 2.21 (x86-64 wheel, AVX packets of 4 doubles): this order
through the kernels of NumPy, array-api-strict, torch and JAX on 162 random cases (23 shapes
of 2 to 5 axes, every proper subset of their axes, rows of up to 50,001 elements), and a
model of it on 456 more and on long columns (up to ``(100, 100003)``); ``tests/test_axes_sums.py``
keeps TF's values for each route. The addends are non-negative (squares, absolute values): a
sum that starts from the first addend and one that starts from ``+0.0`` then agree.

``in_turn`` adds the slices of an array's first axis one after another: a cumulative sum's
last slice (NumPy, array-api-strict and torch on the CPU accumulate in order), or a
``lax.fori_loop`` on JAX (:mod:`anyclip._kernels._jax`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from anyclip._compat import device
from anyclip._kernels._tforder import eigen_packet
from anyclip._kernels._tforder_xp import tf_order_row_sums, tf_order_vector_sum

__all__ = ["cumulative_in_turn", "named_axes", "tf_axes_sum", "tf_layout", "tf_sum_or_none"]

#: Rows from which Eigen's ``InnerMostDimPreserver`` adds into four packet accumulators.
_FOUR_FROM = 16


def tf_layout(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[tuple[int, ...], bool]:
    """TF's merged shape for a reduction of ``shape`` over ``axes``, and whether its first is.

    TF's ``ReductionHelper``: leading axes of one element are dropped, an axis of one element
    joins the run of the axis before it, and runs of reduced and of kept axes are merged into
    one axis each. ``((), True)`` when every axis holds one element.

    Examples
    --------
    >>> from anyclip._kernels._tfaxes import tf_layout
    >>> tf_layout((2, 3, 4, 5), (1, 2))
    ((2, 12, 5), False)
    >>> tf_layout((1, 6, 1, 7), (0, 3))
    ((6, 7), False)
    """
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    if i == len(shape):
        return (), True
    first = prev = i in axes
    dims = [shape[i]]
    for j in range(i + 1, len(shape)):
        reduced = prev if shape[j] == 1 else j in axes
        if reduced == prev:
            dims[-1] *= shape[j]
        else:
            dims.append(shape[j])
        prev = reduced
    return tuple(dims), first


def cumulative_in_turn(xp: Any, z: Any) -> Any:
    """The slices of ``z``'s first axis added one after another: the last of their running sums.

    ``cumulative_sum`` accumulates in order on NumPy, array-api-strict and torch's CPU kernel
    (torch's backward is its reversed running sum: the gradient of a sum, whatever its order).
    """
    if int(z.shape[0]) == 1:
        return z[0, ...]
    return xp.cumulative_sum(z, axis=0)[-1, ...]


def tf_axes_sum(
    xp: Any,
    y: Any,
    axes: tuple[int, ...],
    *,
    packet: int,
    leaf: int,
    in_turn: Callable[[Any, Any], Any] = cumulative_in_turn,
    row_sums: Callable[..., Any] = tf_order_row_sums,
    vector_sum: Callable[..., Any] = tf_order_vector_sum,
    whole: tuple[int, ...] | None = None,
    place: Any = None,
) -> Any:
    """``sum(y, axes, keepdims=True)`` of a non-negative ``y`` in TF 2.21's CPU order.

    ``axes``: distinct, non-negative, in order. ``packet`` and ``leaf``: Eigen's for ``y``'s
    dtype (:func:`~anyclip._kernels._tforder.eigen_packet`). Array-API operations, a
    transpose where TF makes one, and ``in_turn`` (see the module); no host round trip.
    ``row_sums`` and ``vector_sum``: the forms of
    :func:`~anyclip._kernels._tforder_xp.tf_order_row_sums` and
    :func:`~anyclip._kernels._tforder_xp.tf_order_vector_sum` to use (a backend's compiled
    or NumPy-view ones).

    ``whole`` and ``place`` (a NumPy ``y`` only: a dask chunk that holds every reduced axis
    whole): the shape of the array ``y`` is a block of, whose route TF takes, and each of
    ``y``'s outputs' index among the whole array's outputs (C order over the kept axes; an
    integer NumPy array of the output's shape). Eigen's packets and row splits fall by that
    index.

    Examples
    --------
    >>> import array_api_strict as xp
    >>> from anyclip._kernels._tfaxes import tf_axes_sum
    >>> y = xp.reshape(xp.arange(12, dtype=xp.float64), (3, 4))
    >>> tf_axes_sum(xp, y, (0,), packet=4, leaf=4096)
    Array([[12., 15., 18., 21.]], dtype=array_api_strict.float64)
    """
    shape = tuple(int(d) for d in y.shape)
    full = shape if whole is None else whole
    out = tuple(1 if i in axes else n for i, n in enumerate(shape))
    dims, first = tf_layout(full, axes)
    if len(dims) <= 1:
        if not dims or not first:  # nothing reduced: TF copies
            return xp.reshape(y, out)
        total = vector_sum(xp, xp.reshape(y, (-1,)), packet=packet, leaf=leaf, lanes=None)
        return xp.reshape(total, out)
    # the route's view of y by its axes (axes of one element anywhere change no order)
    red = [i for i in range(len(full)) if i in axes and full[i] > 1]
    kept = [i for i in range(len(full)) if i not in red]
    size = functools.partial(_size, shape)
    if (len(dims) == 2 and not first) or len(dims) > 3:  # rows (TF's transpose past 3 axes)
        rows = xp.reshape(xp.permute_dims(y, (*kept, *red)), (size(kept), size(red)))
        r = _row_sums(xp, rows, packet, leaf, row_sums, place)
    elif len(dims) == 3 and first:  # the middle kept: axis 2 outside, axis 0 inside
        middle = next(i for i in kept if full[i] > 1)
        outer = [i for i in red if i > middle]
        inner = [i for i in red if i < middle]
        view = xp.permute_dims(y, (*outer, *inner, *kept))
        r = in_turn(xp, xp.reshape(view, (size(red), size(kept))))
    else:  # columns: (N, M) over 0, (A, B, C) over 1
        before = [i for i in kept if i < red[0]]
        after = [i for i in kept if i > red[0]]
        view = xp.permute_dims(y, (*before, *red, *after))
        view = xp.reshape(view, (size(before), size(red), size(after)))
        use = _packed(xp, view, packet, _size(full, after), _size(full, kept), place)
        r = _columns(xp, view, use, in_turn)
    return xp.reshape(r, out)


def _size(shape: tuple[int, ...], which: list[int]) -> int:
    return math.prod(shape[i] for i in which)


def tf_sum_or_none(
    xp: Any,
    y: Any,
    axes: tuple[int, ...] | int | None,
    **forms: Any,
) -> Any | None:
    """:func:`~anyclip._kernels._tfaxes.tf_axes_sum` of ``y`` (``axes`` as ``tf.norm``'s), or None.

    ``axes``: None (every axis), one axis or several (negative ones counted from the end).
    None for an empty ``y`` (the library's sum of nothing is TF's 0). ``forms``: a backend's
    ``in_turn``, ``row_sums`` and ``vector_sum`` (:func:`tf_axes_sum`).
    """
    shape = tuple(int(d) for d in y.shape)
    if math.prod(shape) == 0:
        return None
    packet, leaf = eigen_packet(y.dtype)
    return tf_axes_sum(xp, y, named_axes(axes, len(shape)), packet=packet, leaf=leaf, **forms)


def named_axes(axes: tuple[int, ...] | int | None, ndim: int) -> tuple[int, ...]:
    """``axes`` (None for every axis, one or several, negative from the end), sorted, >= 0."""
    if axes is None:
        return tuple(range(ndim))
    listed = (axes,) if isinstance(axes, int) else axes
    return tuple(sorted({a % ndim for a in listed}))


def _packed(xp: Any, z: Any, packet: int, c: int, outputs: int, place: Any) -> bool | Any:
    """Which outputs of :func:`_columns` Eigen computes a packet at a time: a bool or a mask.

    Output ``o`` (``a * C + c`` in the whole array) is, where its packet (``P`` outputs from a
    multiple of ``P``, before the last ``outputs % P``) lies in one row of ``C``. All of them
    when ``C`` is a multiple of ``P``, none when ``C < P``; else a mask of ``z``'s outputs
    (``place``: their indices, else ``z``'s own).
    """
    if c % packet == 0:
        return True
    if c < packet:
        return False
    a, _, cz = (int(d) for d in z.shape)
    if place is None:
        o = xp.reshape(xp.arange(a * cz, device=device(z)), (a, cz))
    else:
        o = xp.reshape(xp.asarray(place), (a, cz))
    start = o - o % packet
    return (start % c + (packet - 1) < c) & (start + packet <= outputs)


def _columns(xp: Any, z: Any, use: bool | Any, in_turn: Callable[[Any, Any], Any]) -> Any:
    """``(A, B, C)`` summed over axis 1 as Eigen's ``InnerMostDimPreserver``: ``(A, C)``.

    Eigen computes the outputs a packet at a time where ``use`` (:func:`_packed`): from 16
    rows ``B`` on, its four accumulators take the rows ``j % 4`` of the first ``4 (B // 4)``,
    are combined as ``((a0 + a1) + a2) + a3``, then the last ``B % 4`` rows are added in
    turn. The other outputs add the rows in turn.
    """
    b = int(z.shape[1])
    w = xp.permute_dims(z, (1, 0, 2))
    if b < _FOUR_FROM or use is False:
        return in_turn(xp, w)
    a, c = int(z.shape[0]), int(z.shape[2])
    four = b - b % 4
    acc = in_turn(xp, xp.reshape(w[:four, ...], (four // 4, 4, a, c)))
    fast = ((acc[0, ...] + acc[1, ...]) + acc[2, ...]) + acc[3, ...]
    for j in range(four, b):
        fast = fast + w[j, ...]
    if use is True:
        return fast
    return xp.where(use, fast, in_turn(xp, w))


def _row_sums(xp: Any, rows: Any, packet: int, leaf: int, row_sums: Any, place: Any) -> Any:
    """Each row of the ``(N, M)`` ``rows`` summed as TF's ``reduce_sum`` over axis 1: ``(N,)``.

    Each row is one full reduction, but Eigen aligns its tree's splits (rows longer than a
    leaf) on packets of the whole array: row ``n`` starts ``n M`` elements in (``n`` from
    ``place`` if given), so rows of a length that is not a multiple of the packet fall into
    ``P / gcd(M, P)`` kinds (``phase``), summed apart and put back in order.
    """
    n, m = (int(d) for d in rows.shape)
    kinds = 1 if m <= leaf else packet // math.gcd(m, packet)
    if kinds == 1:
        return row_sums(xp, rows, packet=packet, leaf=leaf)
    if place is not None:  # a NumPy block of a dask array
        index = xp.reshape(xp.asarray(place), (-1,))
        got = xp.zeros((n,), dtype=rows.dtype)
        for phase in range(0, packet, packet // kinds):
            which = xp.nonzero(index * m % packet == phase)[0]
            if which.shape[0]:
                part = xp.take(rows, which, axis=0)
                got[which] = row_sums(xp, part, packet=packet, leaf=leaf, phase=phase)
        return got
    per = -(-n // kinds)
    parts = []
    for k in range(min(kinds, n)):
        got = row_sums(xp, rows[k::kinds, ...], packet=packet, leaf=leaf, phase=k * m % packet)
        short = per - int(got.shape[0])
        if short:
            got = xp.concat([got, xp.zeros((short,), dtype=got.dtype, device=device(got))])
        parts.append(got)
    while len(parts) < kinds:  # fewer rows than kinds
        parts.append(xp.zeros((per,), dtype=parts[0].dtype, device=device(parts[0])))
    return xp.reshape(xp.stack(parts, axis=1), (-1,))[:n]
