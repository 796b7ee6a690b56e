"""TF's order of additions for float64 sums: Eigen's tree reduction, reproduced.

Layer: kernels, used by the kernels for float64 sums of squares. Every
order of additions has its own rounding error; for many values of equal magnitude it reaches
10 to 20 ULP in float64 whatever the order (TF's included), so a more accurate order is still
that far from TF. Only TF's own order lands on TF's value: :func:`tf_order_sums` adds in the
order of TF 2.21's CPU ``reduce_sum`` (and ``l2_loss``), Eigen's ``InnerMostDimReducer``
with AVX packets of 4 doubles, and :func:`tf_order_total` adds the per-array sums as
``tf.linalg.global_norm`` does (a ``reduce_sum`` of their stack).

Two forms of the same order. :func:`tf_order_sums` (NumPy, and torch on the CPU through a
NumPy view of the tensor's memory) takes NumPy arrays: it sums the leaves of TF's tree a
batch of leaves at a time and adds the tree's nodes a level at a time, in NumPy operations,
and reads the sums back as Python floats. The array-API form, for JAX on the CPU,
array-api-strict, and torch without NumPy, is :mod:`anyclip._kernels._tforder_xp` (gathers,
``where``, slices, additions: no host round trip, so it traces under ``jax.jit``). This module
holds TF's tree (its leaves, levels and walk), which both forms follow, and the NumPy form.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from anyclip._compat import dtype_name

__all__ = [
    "SMALL",
    "eigen_packet",
    "numpy_in_turn",
    "numpy_rows_in_order",
    "small_sum",
    "tf_order_dtype",
    "tf_order_nodes",
    "tf_order_sums",
    "tf_order_total",
    "tf_order_walk",
]

#: TF's (Eigen's) float64 packet on x86-64 (AVX: 4 doubles), and its tree's leaf: 1024 packets.
_PACKET = 4
_LEAF = 1024 * _PACKET

#: float32's packet (AVX: 8 floats) and leaf (1024 packets): :func:`eigen_packet`.
_PACKET32 = 8
_LEAF32 = 1024 * _PACKET32

#: Segments of at most this many elements are summed in Python floats (:func:`small_sum`):
#: fewer steps than the vectorised leaves for a short array.
SMALL = 64


def tf_order_dtype(dtype: Any, *, half: bool) -> bool:
    """Whether sums of squares of ``dtype`` take TF's order: float64, and float32 with ``half``.

    ``half``: the sum of every array's ``l2_loss`` (``tf.linalg.global_norm``). In float32
    another order (rows of 256, then pairwise) was up to 2 ulp from TF's global norm on
    the gradients of real programs, whose arrays are mostly under TF's 8,192-element leaf;
    the float32 norms of one array (``tf.norm``, ``clip_by_norm``) keep the faster sums.
    """
    name = dtype_name(dtype)
    return name == "float64" or (half and name == "float32")


def eigen_packet(dtype: Any) -> tuple[int, int]:
    """Eigen's ``(packet, leaf)`` in elements for a float32 or float64 sum on x86-64 (AVX).

    float32 sums take packets of 8 floats, float64 sums packets of 4 doubles; the tree's
    leaf is 1024 packets either way.
    """
    return (_PACKET32, _LEAF32) if dtype_name(dtype) == "float32" else (_PACKET, _LEAF)


def tf_order_sums(np: Any, flat: Any, sizes: Sequence[int], *, square: bool) -> list[float]:
    """The sums of consecutive segments of ``sizes`` elements of the 1-D float64 ``flat``.

    A float32 ``flat`` is summed in float32 with float32's packets (:func:`eigen_packet`: 8
    lanes, leaves of 8,192 elements), as TF's float32 ``l2_loss`` and ``reduce_sum``.

    ``np`` is NumPy and ``flat`` a NumPy array (the torch kernels pass a view of a CPU
    tensor's memory). Each segment is summed (its squares with ``square``) in TF 2.21's
    order on CPU (one ``reduce_sum`` or ``l2_loss`` each). TF's full reduction is Eigen's
    tree reduction: a range longer than a leaf of ``_LEAF`` elements is split at its middle
    (rounded up to a packet of ``_PACKET`` elements) and its halves' sums added; a leaf is
    summed in four packet accumulators (added in turn, then the leftover packets into the
    first), reduced across the packet's lanes as ``(a0 + a2) + (a1 + a3)``, and its last
    ``< _PACKET`` elements added to that sequentially. Bit-equal to single-threaded TF 2.21
    for every length checked (0 to 333,333); from about 100,000 elements TF splits the sum
    across its threads as well, which moves its own result by up to 2 ULP with the thread
    count.

    Every step is a NumPy operation over many leaves at once (:func:`_leaf_sums`), then
    over every node of one level of the trees (each node's two children added, float64
    additions as Eigen's); the tree's shape for ``sizes`` is computed once and kept
    (:func:`_plan`).

    Examples
    --------
    The squares of 1,000 values 1.7 (TF 2.21: 2889.9999999999964; ``np.sum``: 2890.0):

    >>> import numpy as np
    >>> from anyclip._kernels._tforder import tf_order_sums
    >>> tf_order_sums(np, np.full(1000, 1.7), [1000], square=True)
    [2889.9999999999964]
    """
    packet, leaf = eigen_packet(flat.dtype)
    if len(sizes) == 1 and sizes[0] <= SMALL and packet == _PACKET:
        return [small_sum(flat.tolist(), square=square)]
    plan = _plan(np, tuple(sizes), packet, leaf)
    values = np.empty(plan.nodes + 1, dtype=flat.dtype)
    values[: len(plan.starts)] = _leaf_sums(np, np.ascontiguousarray(flat), plan, square=square)
    for lo, left, right in plan.levels:
        np.add(values[left], values[right], out=values[lo : lo + len(left)])
    values[plan.nodes] = 0.0  # the sum of an empty segment
    sums: list[float] = values[plan.roots].tolist()
    return sums


class _Plan(NamedTuple):
    """The shape of TF's trees over segments of ``sizes`` elements (see :func:`_plan`)."""

    #: Each leaf's first element in the flat array.
    starts: Any
    #: ``(rows, phase, leaves, first_rows)``: the leaves of ``rows`` whole rows of 16 whose
    #: first element is ``phase`` (mod 16) in the flat array, and their first rows in the
    #: rows of 16 that start at ``phase``.
    heads: list[tuple[int, int, Any, Any]]
    #: ``(count, leaves, at)``: the leaves with ``count`` (1 to 15) elements after their
    #: rows, and where those start.
    rests: list[tuple[int, Any, Any]]
    #: ``(lo, left, right)`` per level of nodes: ``values[lo:lo + len(left)]`` is
    #: ``values[left] + values[right]`` (the leaves' values come first).
    levels: list[tuple[int, Any, Any]]
    #: Each segment's sum in ``values`` (``nodes`` for an empty segment: its sum is 0).
    roots: Any
    #: The number of leaves and nodes: ``values`` holds them, then a 0.
    nodes: int
    #: Eigen's packet, in elements (:func:`eigen_packet`).
    packet: int = _PACKET


def _levels(
    trees: Sequence[Any], first: int
) -> tuple[list[list[tuple[Any, Any]]], list[Any], list[int]]:
    """The inner nodes of ``trees`` by level (height over the leaves), and where they land.

    ``trees`` are nested lists (one or two children) over leaf positions, or None (an empty
    segment). Returns the ``(left, right)`` children of each level's nodes, each tree's root
    (a leaf position, a ``(level, index)`` pair, or None), and where each level starts in an
    array that holds the ``first`` leaf values, then each level's sums (and, last, its
    length): :func:`_pos` of a child or root is its position there.
    """
    levels: list[list[tuple[Any, Any]]] = []

    def visit(node: Any) -> tuple[Any, int]:
        if isinstance(node, int):
            return node, 0
        if len(node) == 1:
            return visit(node[0])
        (left, hl), (right, hr) = visit(node[0]), visit(node[1])
        height = max(hl, hr) + 1
        while len(levels) < height:
            levels.append([])
        levels[height - 1].append((left, right))
        return (height - 1, len(levels[height - 1]) - 1), height

    refs = [None if tree is None else visit(tree)[0] for tree in trees]
    start = [first]
    for level in levels:
        start.append(start[-1] + len(level))

    return levels, refs, start


def _pos(start: list[int], ref: Any) -> int:
    """The position of a node of :func:`_levels` (a leaf position or ``(level, index)``)."""
    return ref if isinstance(ref, int) else start[ref[0]] + ref[1]


@functools.lru_cache(maxsize=1024)
def _plan(np: Any, sizes: tuple[int, ...], packet: int = _PACKET, leaf: int = _LEAF) -> _Plan:
    """TF's trees over consecutive segments of ``sizes`` elements, as index arrays.

    Kept for the last 1,024 ``sizes`` (a training loop asks for the same ones every step:
    one per array or group of small arrays). A node's level is its height over its leaves:
    the nodes of one level only add values of lower levels, so each level is one addition
    of two gathers.
    """
    leaves: list[tuple[int, int]] = []
    trees: list[Any] = []
    first = 0
    for n in sizes:
        trees.append(_leaves(first, 0, n, leaves, leaf, packet) if n else None)
        first += n
    levels, refs, lo = _levels(trees, len(leaves))
    pos = functools.partial(_pos, lo)

    wide = 4 * packet
    heads: dict[tuple[int, int], list[int]] = {}
    rests: dict[int, list[int]] = {}
    for i, (start, length) in enumerate(leaves):
        if length // wide:
            heads.setdefault((length // wide, start % wide), []).append(i)
        if length % wide:
            rests.setdefault(length % wide, []).append(i)
    starts = np.asarray([s for s, _ in leaves], dtype=np.intp)
    ends = np.asarray([s + n for s, n in leaves], dtype=np.intp)

    def ids(which: list[int]) -> Any:
        return np.asarray(which, dtype=np.intp)

    plan = _Plan(
        starts=starts,
        heads=[
            (rows, phase, ids(w), (starts[ids(w)] - phase) // wide)
            for (rows, phase), w in heads.items()
        ],
        rests=[(count, ids(w), ends[ids(w)] - count) for count, w in rests.items()],
        levels=[
            (
                lo[h],
                np.asarray([pos(a) for a, _ in level], dtype=np.intp),
                np.asarray([pos(b) for _, b in level], dtype=np.intp),
            )
            for h, level in enumerate(levels)
        ],
        roots=np.asarray([lo[-1] if r is None else pos(r) for r in refs], dtype=np.intp),
        nodes=lo[-1],
        packet=packet,
    )
    # shared by every call (and thread) with these sizes: read-only
    arrays = [plan.starts, plan.roots]
    arrays += [a for group in plan.heads for a in group[2:]]
    arrays += [a for group in plan.rests for a in group[1:]]
    arrays += [a for level in plan.levels for a in level[1:]]
    for a in arrays:
        a.flags.writeable = False
    return plan


#: Elements gathered at a time for the leaves' rows: 256 KiB of float64, so that the gathered
#: copy is squared and summed while it is still in the CPU's cache.
_BATCH = 1 << 15


def _leaf_sums(np: Any, flat: Any, plan: _Plan, *, square: bool) -> Any:
    """Eigen's sums of every leaf of ``plan`` (of their squares with ``square``): 1-D.

    The four accumulators of every leaf are its rows of 16 elements added in order. The
    leaves of one number of rows whose first element lies at one place in a row of 16 (the
    ``phase``) are rows of one 2-D view of ``flat``: gathered by ``take`` as
    ``(rows, leaves, 16)`` (a few at a time), squared in place and summed down axis 0
    (NumPy adds the rows of a C-contiguous array in order), so each step adds one row of
    every leaf at once. Then, as arrays, :func:`_finish`: the 16 sums into the first
    packet, the packets after the rows, the lanes, and the last ``< _PACKET`` elements.
    """
    p = plan.packet
    wide = 4 * p
    k = len(plan.starts)
    acc = np.zeros((k, wide), dtype=flat.dtype)
    for rows, phase, leaves, first_rows in plan.heads:
        view = flat[phase : phase + (flat.size - phase) // wide * wide].reshape(-1, wide)
        down = np.arange(rows, dtype=np.intp)[:, None]
        step = max(1, _BATCH // (rows * wide))
        for b in range(0, len(leaves), step):
            g = np.take(view, down + first_rows[b : b + step], axis=0)
            if square:
                np.multiply(g, g, out=g)
            acc[leaves[b : b + step]] = np.add.reduce(g, axis=0)
    lanes = acc[:, :p] + acc[:, p : 2 * p]
    lanes = lanes + acc[:, 2 * p : 3 * p]
    lanes = lanes + acc[:, 3 * p :]
    tails = np.zeros(k, dtype=flat.dtype)
    for count, leaves, at in plan.rests:
        rest = flat[at[:, None] + np.arange(count, dtype=np.intp)]
        if square:
            rest = rest * rest
        packets = count // p * p
        if packets:
            some = lanes[leaves]
            for j in range(0, packets, p):
                some = some + rest[:, j : j + p]
            lanes[leaves] = some
        tail = np.zeros(len(leaves), dtype=flat.dtype)
        for j in range(packets, count):
            tail = tail + rest[:, j]
        tails[leaves] = tail
    while lanes.shape[1] > 1:  # Eigen's predux: by halves ((a0 + a2) + (a1 + a3) for 4)
        lanes = lanes[:, : lanes.shape[1] // 2] + lanes[:, lanes.shape[1] // 2 :]
    return tails + lanes[:, 0]


def small_sum(values: list[float], *, square: bool) -> float:
    """One leaf of :func:`tf_order_sums` (at most ``_LEAF`` values), in Python floats.

    Python's float arithmetic is IEEE double, rounded as Eigen's packet additions are.
    """
    if square:
        values = [v * v for v in values]
    wide = 4 * _PACKET
    full = len(values) // wide * wide
    if not full:
        return _finish(None, values)
    acc = values[:wide]
    for r in range(wide, full, wide):
        acc = [a + b for a, b in zip(acc, values[r : r + wide], strict=True)]
    return _finish(acc, values[full:])


def _finish(acc: list[float] | None, rest: list[float]) -> float:
    """A leaf's sum from its four accumulators ``acc`` (16 sums, or None) and the rest.

    The accumulators are added into the first, the rest's whole packets added to it, its
    lanes reduced as ``(a0 + a2) + (a1 + a3)``; the last ``< _PACKET`` values are summed in
    order from 0 and added last.
    """
    p = _PACKET
    if acc is None:
        lanes = [0.0] * p
    else:
        lanes = [acc[i] + acc[p + i] for i in range(p)]
        lanes = [lanes[i] + acc[2 * p + i] for i in range(p)]
        lanes = [lanes[i] + acc[3 * p + i] for i in range(p)]
    packets = len(rest) // p * p
    for j in range(0, packets, p):
        lanes = [lanes[i] + rest[j + i] for i in range(p)]
    tail = 0.0
    for v in rest[packets:]:
        tail += v
    return tail + ((lanes[0] + lanes[2]) + (lanes[1] + lanes[3]))


def _leaves(
    origin: int,
    first: int,
    n: int,
    out: list[tuple[int, int]],
    leaf: int = _LEAF,
    packet: int = _PACKET,
) -> Any:
    """Eigen's split of ``[first, first + n)``: a leaf index, or a list of one or two nodes.

    ``first`` counts from the reduced array's own first element, at ``origin`` in the flat
    array the leaves ``out`` index (``(start, length)``): Eigen aligns each split on a
    packet of the array it reduces. (Counted from the start of a joined flat array instead,
    an array after one of a length not a multiple of 4 was split elsewhere than TF, up to 2
    ULP off.) With ``leaf`` above ``_LEAF`` the split stops at nodes of at most ``leaf``
    elements: the same splits (Eigen's point does not depend on the leaf's size), fewer.
    ``packet``: the packet the splits are aligned on (:func:`tf_order_vector_sum`).
    """
    if n <= leaf:
        out.append((origin + first, n))
        return len(out) - 1
    split = packet * -(-(first + -(-n // 2)) // packet)
    left = min(split - first, n)
    node = [_leaves(origin, first, left, out, leaf, packet)]
    if left < n:
        node.append(_leaves(origin, split, n - left, out, leaf, packet))
    return node


def tf_order_nodes(n: int, most: int, out: list[tuple[int, int]], packet: int = _PACKET) -> Any:
    """The nodes of TF's tree over ``n`` elements that hold at most ``most`` each, in order.

    Appends each node's ``(start, length)`` to ``out`` and returns the tree above them: a
    node's index in ``out``, or a list of one or two such trees (left, right), for
    :func:`tf_order_walk`. A node is a whole subtree (``most`` is raised to a leaf's
    ``_LEAF`` elements at least), and it starts at a multiple of a packet, where Eigen's
    splits fall as in an array of its own: its sum is :func:`tf_order_sums` of its elements
    alone. The nodes hold more than ``most // 2`` elements each (but the last of a short
    array), so they partition the array into about ``n / most`` to ``2 n / most`` pieces.
    ``packet``: Eigen's packet of the sum's dtype (:func:`eigen_packet`; a leaf is 1024).

    Examples
    --------
    >>> from anyclip._kernels._tforder import tf_order_nodes
    >>> nodes = []
    >>> tf_order_nodes(20_000, 8192, nodes)
    [[0, 1], [2, 3]]
    >>> nodes
    [(0, 5000), (5000, 5000), (10000, 5000), (15000, 5000)]
    """
    return _leaves(0, 0, n, out, max(most, 1024 * packet), packet=packet)


def tf_order_walk(tree: Any, values: Sequence[float]) -> float:
    """The sum of the tree of :func:`tf_order_nodes` from its nodes' sums ``values``, as TF.

    Each inner node adds its right child's sum to its left child's (Python floats: IEEE
    double, rounded as Eigen's additions).
    """
    total: float = _walk(tree, values)
    return total


def _walk(node: Any, values: Sequence[Any]) -> Any:
    """Each inner node's left sum plus its right sum (Python floats or arrays)."""
    if isinstance(node, int):
        return values[node]
    total = _walk(node[0], values)
    return total + _walk(node[1], values) if len(node) > 1 else total


def tf_order_total(
    np: Any, per_array: list[float], *, half: bool, dtype: Any = None, halve: bool = True
) -> float:
    """The total of the arrays' sums of squares ``per_array``, added as TF adds them.

    Without ``half`` (one array: ``tf.norm``), its sum; with ``half``
    (``tf.linalg.global_norm``), each array's ``l2_loss`` (its sum halved: exact in float64
    away from subnormals) summed in TF's order, as ``reduce_sum`` of their stack; with
    ``halve=False`` too, the whole sums in that order (Keras's ``sum(square(v))`` per
    array: no half rounded to a subnormal). ``np`` is NumPy. ``dtype``: the sums' dtype,
    float64 (None) or float32 (the halves then summed in float32, as TF's float32
    ``reduce_sum``).
    """
    if not half:
        return per_array[0] if len(per_array) == 1 else math.fsum(per_array)
    halves = [v * 0.5 for v in per_array] if halve else per_array
    if len(per_array) == 1:
        return halves[0]
    halves = np.asarray(halves, dtype=np.float64 if dtype is None else dtype)
    return tf_order_sums(np, halves, [len(per_array)], square=False)[0]


def numpy_rows_in_order(np: Any, x: Any) -> Any:
    """``x.sum(axis=2)`` of a 4-D C-contiguous NumPy array, adding its slices in order.

    NumPy reduces the first axis of a C-contiguous array as a chain of elementwise additions
    of its slices, one after another (pairwise summation only runs along the innermost
    axis): Eigen's order for the rows of its packet accumulators. Axis 2 is moved first (a
    copy of ``x``: the reduction then runs over long contiguous rows, 1.6 times faster).
    """
    return np.add.reduce(np.ascontiguousarray(np.moveaxis(x, 2, 0)), axis=0)


def numpy_in_turn(xp: Any, z: Any) -> Any:
    """The slices of a NumPy ``z``'s first axis added one after another (``xp`` unused).

    NumPy reduces the first axis of a C-contiguous array of two or more columns as a chain
    of elementwise additions (its pairwise summation runs along the innermost axis only):
    20 times faster than the last of the running sums (``cumsum``), which a single column
    takes (its reduction would be pairwise). Measured against a Python loop of additions:
    2 to 5,000 slices of 2 to 1,000 elements equal, 1 element not. The form of
    :func:`~anyclip._kernels._tfaxes.tf_axes_sum`'s ``in_turn``.
    """
    import numpy as np

    n = int(z.shape[0])
    if n == 1:
        return z[0, ...]
    flat = np.ascontiguousarray(z).reshape(n, -1)
    if flat.shape[1] < 2:
        return np.cumsum(flat, axis=0)[-1].reshape(z.shape[1:])
    return np.add.reduce(flat, axis=0).reshape(z.shape[1:])
