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
and reads the sums back as Python floats. :func:`tf_order_squares` (JAX on the CPU,
array-api-strict, and torch without NumPy) is array-API operations only (gathers, ``where``,
slices, additions): no host round trip, so it traces under ``jax.jit``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from anyclip._compat import device, dtype_name, library
from anyclip._numerics import constant

__all__ = [
    "SMALL",
    "eigen_packet",
    "tf_order_dtype",
    "numpy_rows_in_order",
    "small_sum",
    "square_list",
    "tf_order_nodes",
    "tf_order_row_sums",
    "tf_order_squares",
    "tf_order_sum_of",
    "tf_order_sums",
    "tf_order_total",
    "tf_order_vector_sum",
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


def tf_order_total(np: Any, per_array: list[float], *, half: bool, dtype: Any = None) -> float:
    """The total of the arrays' sums of squares ``per_array``, added as TF adds them.

    Without ``half`` (one array: ``tf.norm``), its sum; with ``half``
    (``tf.linalg.global_norm``), each array's ``l2_loss`` (its sum halved: exact in float64
    away from subnormals) summed in TF's order, as ``reduce_sum`` of their stack. ``np`` is
    NumPy. ``dtype``: the sums' dtype, float64 (None) or float32 (the halves then summed in
    float32, as TF's float32 ``reduce_sum``).
    """
    if not half:
        return per_array[0] if len(per_array) == 1 else math.fsum(per_array)
    if len(per_array) == 1:
        return per_array[0] * 0.5
    halves = np.asarray([v * 0.5 for v in per_array], dtype=np.float64 if dtype is None else dtype)
    return tf_order_sums(np, halves, [len(per_array)], square=False)[0]


def tf_order_squares(xp: Any, arrays: Sequence[Any], *, half: bool) -> Any:
    """The float64 sum of squares of ``arrays`` in TF's order, in array-API operations only.

    The order of :func:`tf_order_sums` and :func:`tf_order_total` (bit for bit) without a
    host round trip, written with ``take``, ``where``, slices and elementwise additions, so
    that it runs on any namespace and traces under ``jax.jit``: XLA keeps the order of
    elementwise additions (it reassociates a ``sum``, never a chain of ``+``). Without
    ``half`` (one array: ``tf.norm``) the sum of squares; with ``half``, the sum of every
    array's ``l2_loss`` (``tf.linalg.global_norm``). A 0-d array.

    Every leaf of TF's tree is gathered into a fixed layout, padded with exact zeros where
    it is shorter (adding 0 changes no sum): its rows of 16 elements, then its at most 3
    whole packets, then its at most 3 last elements. The rows are added one after another
    (a chain of additions, one per row, for all the leaves at once); leaves are grouped by
    their number of rows, rounded up to a power of two, so that at most 9 groups are
    gathered. The tree's additions follow, one level of nodes at a time.

    Examples
    --------
    >>> import array_api_strict as xp
    >>> from anyclip._kernels._tforder import tf_order_squares
    >>> float(tf_order_squares(xp, [xp.full(1000, 1.7, dtype=xp.float64)], half=False))
    2889.9999999999964
    """
    return tf_order_sum_of(xp, square_list(xp, arrays), [_size(a) for a in arrays], half=half)


def _size(a: Any) -> int:
    return math.prod(int(d) for d in a.shape)


def square_list(xp: Any, arrays: Sequence[Any]) -> Any:
    """The squares of every element of ``arrays``, as one 1-D array (the arrays in order)."""
    flats = [xp.reshape(a, (-1,)) for a in arrays]
    flat = flats[0] if len(flats) == 1 else xp.concat(flats)
    return flat * flat


def tf_order_sum_of(xp: Any, squares: Any, sizes: Sequence[int], *, half: bool) -> Any:
    """:func:`tf_order_squares` of the arrays whose :func:`square_list` is ``squares``.

    Apart so that the JAX kernels can compute the squares in a compiled program of their
    own: in one program XLA:CPU contracts a square and the addition it feeds into one fused
    multiply-add (it always allows that), which rounds once where TF rounds twice.
    """
    packet, leaf = eigen_packet(squares.dtype)
    sums = _segment_sums(xp, squares, sizes, packet, leaf)
    if not half:
        return sums[0]
    halves = sums * xp.asarray(0.5, dtype=sums.dtype)
    if len(sizes) == 1:
        return halves[0]
    return _segment_sums(xp, halves, [len(sizes)], packet, leaf)[0]


def _segment_sums(
    xp: Any,
    flat: Any,
    sizes: Sequence[int],
    packet: int = _PACKET,
    leaf: int = _LEAF,
    lanes: Any = None,
) -> Any:
    """:func:`tf_order_sums` as a 1-D array: the sum of each segment of the 1-D ``flat``.

    ``packet``, ``leaf`` (elements) and ``lanes`` (the dtype a packet's lanes are added in,
    None: ``flat``'s): Eigen's for ``flat``'s dtype (:func:`tf_order_vector_sum`).
    """
    leaves: list[tuple[int, int]] = []
    trees: list[Any] = []
    first = 0
    for n in sizes:
        trees.append(_leaves(first, 0, n, leaves, leaf, packet) if n else None)
        first += n
    dev = device(flat)
    zero = xp.zeros((1,), dtype=flat.dtype, device=dev)
    by_rows: dict[int, list[int]] = {}
    for i, (_, length) in enumerate(leaves):
        rows = length // (4 * packet)
        by_rows.setdefault(1 << (rows - 1).bit_length() if rows else 0, []).append(i)
    parts = [zero]
    order: list[int] = []
    for rows, which in sorted(by_rows.items()):
        chosen = [leaves[i] for i in which]
        parts.append(_padded_leaf_sums(xp, flat, chosen, rows, packet, lanes))
        order += which
    # the values: 0 first (empty arrays), then the leaves in ``leaves``' order
    values = xp.concat(parts)
    at = [0] * len(leaves)
    for pos, i in enumerate(order):
        at[i] = pos + 1
    values, roots = _add_nodes(xp, values, [_tree_ids(tree, at) for tree in trees])
    return xp.take(values, xp.asarray(roots, device=dev), axis=0)


def tf_order_vector_sum(xp: Any, values: Any, *, packet: int, leaf: int, lanes: Any = None) -> Any:
    """The sum of the 1-D ``values`` in TF 2.21's order for a full ``reduce_sum``: 0-d.

    TF reduces an array whose reduced axes leave no other axis of more than one element (a
    ``(B,)`` or ``(B, 1)`` array over axis 0) as one vector, with Eigen's
    ``InnerMostDimReducer`` (:func:`tf_order_sums`) in ``values``' dtype: ``packet`` lanes
    of the x86-64 AVX wheels (8 for float32 and float16, 4 for float64), a tree split at
    ``leaf`` elements (1024 packets; 200 for float16), the lanes reduced in ``lanes``
    (float32 for float16: its packet's ``predux`` adds in float32 and rounds once; None:
    ``values``' dtype). Array-API operations only (as :func:`tf_order_squares`), so it
    traces under ``jax.jit``. Measured bit for bit against live TF 2.21 on one thread
    (``tf.config.threading.set_intra_op_parallelism_threads(1)``) for float32 and float64,
    20,001 to 1,000,003 elements, and on TF's default threads for float16, float32
    (bfloat16's accumulator) and float64, 1 to 40,000 elements; from about 60,000 float64
    or 150,000 float32 elements TF's default threads split the sum (Eigen's cost model), and
    its bits then follow the thread count (measured on 2 threads: 1 to 96 ulp of the
    result, on random-sign values whose sum cancels).

    Examples
    --------
    >>> import array_api_strict as xp
    >>> from anyclip._kernels._tforder import tf_order_vector_sum
    >>> v = xp.asarray([0.1] * 33, dtype=xp.float32)
    >>> float(tf_order_vector_sum(xp, v, packet=8, leaf=8192))  # TF 2.21: the same bits
    3.299999952316284
    """
    return _segment_sums(xp, values, [int(values.shape[0])], packet, leaf, lanes)[0]


def _tree_ids(tree: Any, at: list[int]) -> Any:
    """``tree`` (of :func:`_leaves`) with each leaf replaced by its value's position."""
    if tree is None:
        return 0
    if isinstance(tree, int):
        return at[tree]
    kids = [_tree_ids(t, at) for t in tree]
    return kids[0] if len(kids) == 1 else kids


def _add_nodes(xp: Any, values: Any, trees: list[Any]) -> tuple[Any, list[int]]:
    """Every node's sum (left + right), a level at a time; and each tree's root position.

    ``trees`` are nested pairs of positions in ``values``. A node's level is its height over
    its leaves: the nodes of one level only add values of lower levels, so each level is
    one pair of ``take`` and one addition, its sums appended to ``values``.
    """
    levels, refs, start = _levels(trees, int(values.shape[0]))
    pos = functools.partial(_pos, start)

    dev = device(values)
    for level in levels:
        left = xp.asarray([pos(a) for a, _ in level], device=dev)
        right = xp.asarray([pos(b) for _, b in level], device=dev)
        added = xp.take(values, left, axis=0) + xp.take(values, right, axis=0)
        values = xp.concat([values, added])
    return values, [pos(r) for r in refs]


def _padded_leaf_sums(
    xp: Any,
    flat: Any,
    leaves: list[tuple[int, int]],
    rows: int,
    packet: int = _PACKET,
    lanes_dtype: Any = None,
) -> Any:
    """The sums of ``leaves`` (``(start, length)`` of ``flat``) of at most ``rows`` rows.

    Each leaf is laid out as ``rows`` rows of 16 (its own rows, then rows of zeros), 3
    packets (its whole packets after its rows, then zeros) and 3 last elements (likewise),
    and summed as :func:`_finish`: the rows added in order into 16 accumulators, these
    added into the first packet, the packets added to it, its lanes reduced as
    ``(a0 + a2) + (a1 + a3)``, and the last elements' sum added to that. With another
    ``packet`` ``P`` (:func:`tf_order_vector_sum`) the rows hold ``4 P`` elements, the leaf
    ``P - 1`` packets and ``P - 1`` last elements, and the lanes are reduced by halves
    (Eigen's ``predux``: lane ``i`` plus lane ``i + P / 2``, until one is left), in
    ``lanes_dtype`` if given (rounded back to ``flat``'s dtype once).
    """
    p = packet
    wide = 4 * p
    dev = device(flat)
    k = len(leaves)
    # the namespace's default integer dtype (int32 in JAX without x64: int64 would warn)
    start = xp.asarray([s for s, _ in leaves], device=dev)
    itype = start.dtype
    full = xp.asarray([n // wide * wide for _, n in leaves], dtype=itype, device=dev)
    packs = xp.asarray([n % wide // p * p for _, n in leaves], dtype=itype, device=dev)
    last = xp.asarray([n % p for _, n in leaves], dtype=itype, device=dev)

    def gather(offset: Any, count: Any, width: int) -> Any:
        j = xp.arange(width, dtype=itype, device=dev)[None, :]
        inside = j < count[:, None]
        index = xp.where(inside, (start + offset)[:, None] + j, xp.zeros_like(j))
        got = xp.reshape(xp.take(flat, xp.reshape(index, (-1,)), axis=0), (k, width))
        return xp.where(inside, got, xp.zeros_like(got))

    if rows:
        heads = xp.reshape(gather(xp.zeros_like(start), full, rows * wide), (k, rows, wide))
        acc = heads[:, 0, :]
        for r in range(1, rows):
            acc = acc + heads[:, r, :]
        lanes = acc[:, :p] + acc[:, p : 2 * p]
        lanes = lanes + acc[:, 2 * p : 3 * p]
        lanes = lanes + acc[:, 3 * p :]
    else:
        lanes = xp.zeros((k, p), dtype=flat.dtype, device=dev)
    rest = gather(full, packs, 3 * p)
    for j in range(3):
        lanes = lanes + rest[:, j * p : (j + 1) * p]
    tail = gather(full + packs, last, p - 1)
    tails = tail[:, 0]
    for j in range(1, p - 1):
        tails = tails + tail[:, j]
    if lanes_dtype is not None:
        lanes = xp.astype(lanes, lanes_dtype)
    while lanes.shape[1] > 1:
        half = int(lanes.shape[1]) // 2
        lanes = lanes[:, :half] + lanes[:, half:]
    reduced = lanes[:, 0]
    if reduced.dtype != flat.dtype:
        reduced = xp.astype(reduced, flat.dtype)
    return tails + reduced


def tf_order_row_sums(
    xp: Any,
    rows: Any,
    *,
    packet: int,
    leaf: int,
    lanes: Any = None,
    square: float | None = None,
    in_order: Any = None,
) -> Any:
    """Each row of the 2-D ``rows`` summed in TF 2.21's order for a full ``reduce_sum``.

    Shape ``(B,)``: row ``b`` is summed as :func:`tf_order_vector_sum` sums ``rows[b]`` (TF
    reducing that row as an array of its own: the ``reduce_sum`` of one example's stacked
    ``l2_loss``), every row at once. With ``square``, each element ``x`` is replaced by
    ``(x * x) * square``, each product rounded on its own, as TF's ``l2_loss`` (``square``
    0.5) sums ``square(x) * 0.5``; the products are made a slice at a time, so no squared
    copy of ``rows`` is made. All rows share one tree (Eigen's splits depend on the length
    only), so each leaf of the tree is a column slice, and a run of consecutive leaves of
    one length is one reshaped view ``(B, leaves, length)``, summed together: their rows of
    ``4 P`` elements added one after another into the four packet accumulators, these
    combined, the leftover packets added, the lanes reduced by halves (in ``lanes`` if
    given), the last ``< P`` elements' sum added; then the tree's nodes, left + right.
    Slices, ``reshape`` and elementwise operations only: no gather, no host round trip (it
    traces under ``jax.jit`` and ``jax.vmap``). The Python loop runs ``leaf / (4 P)`` steps
    (at most 256) per run of leaves, each step vectorised over the rows and leaves.

    ``in_order`` (NumPy and CPU torch: :func:`numpy_rows_in_order`): a function that sums a
    4-D array over axis 2 adding its slices in order; then the rows of ``4 P`` elements are
    squared and added a thirty-second of the examples at a time (:data:`_IN_ORDER_PARTS`), a few
    operations per run of leaves instead of one per row.

    Examples
    --------
    >>> import array_api_strict as xp
    >>> from anyclip._kernels._tforder import tf_order_row_sums
    >>> r = xp.asarray([[0.1] * 33, [0.2] * 33], dtype=xp.float32)
    >>> [float(v) for v in tf_order_row_sums(xp, r, packet=8, leaf=8192)]
    [3.299999952316284, 6.599999904632568]
    """
    b, n = int(rows.shape[0]), int(rows.shape[1])
    if n == 0:
        return xp.zeros((b,), dtype=rows.dtype, device=device(rows))
    spans: list[tuple[int, int]] = []
    tree = _leaves(0, 0, n, spans, leaf, packet)
    prep = None if square is None else _squarer(xp, rows, square)
    sums: list[Any] = []
    first = 0
    while first < len(spans):
        start, length = spans[first]
        count = 1
        while first + count < len(spans) and spans[first + count][1] == length:
            count += 1
        block = xp.reshape(rows[:, start : start + count * length], (b, count, length))
        got = _equal_leaf_sums(xp, block, packet, lanes, prep, in_order)
        sums += [got[:, k] for k in range(count)]
        first += count
    return _walk(tree, sums)


def rounded_apart(xp: Any, x: Any) -> Any:
    """``x``, rounded on its own before the additions it feeds (the identity, bar under JAX).

    XLA contracts a product that feeds an addition into one fused multiply-add under
    ``jax.jit`` (one rounding instead of two), which TF's kernels do not do. A select
    between them stops the contraction: ``where(isnan(x), nan, x)`` is ``x`` (a NaN stays
    NaN) and passes ``jax.grad`` and ``jax.vmap`` through (measured on XLA's CPU backend;
    ``optimization_barrier`` is dropped before fusion there and does not). Other libraries
    round each operation already.
    """
    if library(xp) != "jax":
        return x
    nan = xp.asarray(math.nan, dtype=x.dtype)
    return xp.where(xp.isnan(x), nan, x)


def _squarer(xp: Any, like: Any, factor: float) -> Any:
    """``x -> (x * x) * factor``, each product rounded apart (no fused multiply-add).

    ``factor`` is rounded to ``like``'s dtype as TF's ``l2_loss`` rounds its 0.5, into a 0-d
    array from the constant cache: on torch filled on the device, not copied from the host
    (a host sync at every call on a GPU).
    """
    k = constant(xp, factor, like.dtype, like)

    def prep(x: Any) -> Any:
        return rounded_apart(xp, rounded_apart(xp, x * x) * k)

    return prep


#: :func:`tf_order_row_sums` with ``in_order`` squares the examples in this many parts, so
#: that its squared copies are at most about a thirty-second of the rows.
_IN_ORDER_PARTS = 32


def numpy_rows_in_order(np: Any, x: Any) -> Any:
    """``x.sum(axis=2)`` of a 4-D C-contiguous NumPy array, adding its slices in order.

    NumPy reduces the first axis of a C-contiguous array as a chain of elementwise additions
    of its slices, one after another (pairwise summation only runs along the innermost
    axis): Eigen's order for the rows of its packet accumulators. Axis 2 is moved first (a
    copy of ``x``: the reduction then runs over long contiguous rows, 1.6 times faster).
    """
    return np.add.reduce(np.ascontiguousarray(np.moveaxis(x, 2, 0)), axis=0)


def _equal_leaf_sums(
    xp: Any, block: Any, packet: int, lanes_dtype: Any, prep: Any, in_order: Any = None
) -> Any:
    """Eigen's sums of the leaves ``block[b, l, :]`` (all of one length): ``(B, L)``.

    :func:`_padded_leaf_sums`'s layout without padding: the ``rows`` rows of ``4 P``
    elements, then the whole packets, then the last ``< P`` elements. ``prep`` (or None)
    maps each slice before it is added (:func:`_squarer`).
    """

    def part(x: Any) -> Any:
        return x if prep is None else prep(x)

    p = packet
    wide = 4 * p
    n = int(block.shape[2])
    rows, packs, last = n // wide, n % wide // p, n % p
    full = rows * wide
    lead = (int(block.shape[0]), int(block.shape[1]))
    if rows and in_order is not None and rows > 1:
        step = -(-lead[0] // _IN_ORDER_PARTS)
        parts = []
        for lo in range(0, lead[0], step):
            heads = part(block[lo : lo + step, :, :full])
            parts.append(in_order(xp.reshape(heads, (int(heads.shape[0]), lead[1], rows, wide))))
        acc = parts[0] if len(parts) == 1 else xp.concat(parts)
    elif rows:
        acc = part(block[:, :, :wide])
        for r in range(1, rows):
            acc = acc + part(block[:, :, r * wide : (r + 1) * wide])
    if rows:
        lanes = acc[..., :p] + acc[..., p : 2 * p]
        lanes = lanes + acc[..., 2 * p : 3 * p]
        lanes = lanes + acc[..., 3 * p :]
    else:
        lanes = xp.zeros((*lead, p), dtype=block.dtype, device=device(block))
    if packs:
        rest = part(block[:, :, full : full + packs * p])
        for j in range(packs):
            lanes = lanes + rest[..., j * p : (j + 1) * p]
    if lanes_dtype is not None:
        lanes = xp.astype(lanes, lanes_dtype)
    while lanes.shape[-1] > 1:
        half = int(lanes.shape[-1]) // 2
        lanes = lanes[..., :half] + lanes[..., half:]
    reduced = lanes[..., 0]
    if reduced.dtype != block.dtype:
        reduced = xp.astype(reduced, block.dtype)
    if not last:
        return reduced
    at = full + packs * p
    tail = part(block[:, :, at : at + last])
    total = tail[..., 0]
    for j in range(1, last):
        total = total + tail[..., j]
    return total + reduced
