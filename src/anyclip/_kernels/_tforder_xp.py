"""TF's order of additions for float64 sums in array-API operations only (traces under jit).

Layer: kernels. The order of :mod:`anyclip._kernels._tforder` (TF 2.21's CPU ``reduce_sum``,
Eigen's tree reduction, bit for bit) without a host round trip: gathers, ``where``, slices and
elementwise additions, for JAX on the CPU, array-api-strict, and torch without NumPy; the
many-row form (:func:`tf_order_row_sums`, one sum per row) of the per-example rules; and
:func:`rounded_apart`, which keeps XLA from fusing a product into the addition it feeds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from anyclip._compat import HALF_PRECISION, device, dtype_name, library
from anyclip._kernels._tforder import (
    _LEAF,
    _PACKET,
    _leaves,
    _levels,
    _pos,
    _walk,
    eigen_packet,
    numpy_rows_in_order,
)
from anyclip._numerics import constant, torch_rounded

__all__ = [
    "numpy_tf_row_sums",
    "rounded_apart",
    "rounded_cast",
    "square_list",
    "tf_order_row_sums",
    "tf_order_squares",
    "tf_order_sum_of",
    "tf_order_vector_sum",
]


def tf_order_squares(xp: Any, arrays: Sequence[Any], *, half: bool, halve: bool = True) -> Any:
    """The float64 sum of squares of ``arrays`` in TF's order, in array-API operations only.

    The order of :func:`tf_order_sums` and :func:`tf_order_total` (bit for bit) without a
    host round trip, written with ``take``, ``where``, slices and elementwise additions, so
    that it runs on any namespace and traces under ``jax.jit``: XLA keeps the order of
    elementwise additions (it reassociates a ``sum``, never a chain of ``+``). Without
    ``half`` (one array: ``tf.norm``) the sum of squares; with ``half``, the sum of every
    array's ``l2_loss`` (``tf.linalg.global_norm``); with ``half`` and ``halve=False``, the
    arrays' whole sums of squares added in that order (``sum(square(v))`` per array, as
    Keras's global norm: twice the sum of the halves, bit for bit, where the halves are
    normal numbers). A 0-d array.

    Every leaf of TF's tree is gathered into a fixed layout, padded with exact zeros where
    it is shorter (adding 0 changes no sum): its rows of 16 elements, then its at most 3
    whole packets, then its at most 3 last elements. The rows are added one after another
    (a chain of additions, one per row, for all the leaves at once); leaves are grouped by
    their number of rows, rounded up to a power of two, so that at most 9 groups are
    gathered. The tree's additions follow, one level of nodes at a time.

    Examples
    --------
    >>> import array_api_strict as xp
    >>> from anyclip._kernels._tforder_xp import tf_order_squares
    >>> float(tf_order_squares(xp, [xp.full(1000, 1.7, dtype=xp.float64)], half=False))
    2889.9999999999964
    """
    sizes = [_size(a) for a in arrays]
    return tf_order_sum_of(xp, square_list(xp, arrays), sizes, half=half, halve=halve)


def _size(a: Any) -> int:
    return math.prod(int(d) for d in a.shape)


def square_list(xp: Any, arrays: Sequence[Any]) -> Any:
    """The squares of every element of ``arrays``, as one 1-D array (the arrays in order)."""
    flats = [xp.reshape(a, (-1,)) for a in arrays]
    flat = flats[0] if len(flats) == 1 else xp.concat(flats)
    return flat * flat


def tf_order_sum_of(
    xp: Any, squares: Any, sizes: Sequence[int], *, half: bool, halve: bool = True
) -> Any:
    """:func:`tf_order_squares` of the arrays whose :func:`square_list` is ``squares``.

    Apart so that the JAX kernels can compute the squares in a compiled program of their
    own: in one program XLA:CPU contracts a square and the addition it feeds into one fused
    multiply-add (it always allows that), which rounds once where TF rounds twice.
    """
    packet, leaf = eigen_packet(squares.dtype)
    sums = _segment_sums(xp, squares, sizes, packet, leaf)
    if not half:
        return sums[0]
    halves = sums * constant(xp, 0.5, sums.dtype, sums) if halve else sums
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
    >>> from anyclip._kernels._tforder_xp import tf_order_vector_sum
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
    if lanes_dtype is not None:  # the accumulators rounded first (XLA would drop it)
        lanes = xp.astype(rounded_apart(xp, lanes), lanes_dtype)
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
    phase: int = 0,
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

    ``phase``: where each row starts in Eigen's packets of the array it belongs to (TF's
    ``reduce_sum`` over the last axis of a matrix whose rows are not a whole number of
    packets: :func:`~anyclip._kernels._tfaxes.tf_axes_sum`); the tree's splits of a row
    longer than a leaf fall on those packets. 0 for a row reduced as an array of its own.

    Examples
    --------
    >>> import array_api_strict as xp
    >>> from anyclip._kernels._tforder_xp import tf_order_row_sums
    >>> r = xp.asarray([[0.1] * 33, [0.2] * 33], dtype=xp.float32)
    >>> [float(v) for v in tf_order_row_sums(xp, r, packet=8, leaf=8192)]
    [3.299999952316284, 6.599999904632568]
    """
    b, n = int(rows.shape[0]), int(rows.shape[1])
    if n == 0:
        return xp.zeros((b,), dtype=rows.dtype, device=device(rows))
    spans: list[tuple[int, int]] = []
    tree = _leaves(-phase, phase, n, spans, leaf, packet)
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


def numpy_tf_row_sums(xp: Any, rows: Any, **kwargs: Any) -> Any:
    """:func:`tf_order_row_sums` of a NumPy ``rows``, the accumulators' rows added by NumPy.

    ``in_order`` is :func:`~anyclip._kernels._tforder.numpy_rows_in_order`; ``kwargs``:
    ``packet``, ``leaf`` and optionally ``square`` and ``phase``.
    """
    import numpy as np

    in_order = functools.partial(numpy_rows_in_order, np)
    return tf_order_row_sums(xp, rows, in_order=in_order, **kwargs)


def rounded_cast(xp: Any, x: Any, dtype: Any) -> Any:
    """``astype(x, dtype)`` with a float16 or bfloat16 side rounded (:func:`rounded_apart`).

    A cast to a half type is a rounding that eager torch, TF and NumPy make; compiled, it is
    dropped where the half-precision value feeds float32 arithmetic (Inductor and XLA compute
    half types in float32, and remove a cast down then up): ``clip_by_norm(x,
    accumulate_dtype=bfloat16)`` of float32 ``x`` came back as ``x`` itself under
    ``torch.compile``. So the cast's result is rounded apart, and so is a half-precision
    ``x`` before it is cast up.
    """
    if dtype_name(x.dtype) in HALF_PRECISION:
        x = rounded_apart(xp, x)
    y = x if x.dtype == dtype else xp.astype(x, dtype)
    return rounded_apart(xp, y) if dtype_name(y.dtype) in HALF_PRECISION else y


def rounded_apart(xp: Any, x: Any) -> Any:
    """``x``, rounded on its own before the additions it feeds (the identity, bar compiled).

    XLA contracts a product that feeds an addition into one fused multiply-add under
    ``jax.jit`` (one rounding instead of two), which TF's kernels do not do. A select
    between them stops the contraction: ``where(isnan(x), nan, x)`` is ``x`` (a NaN stays
    NaN) and passes ``jax.grad`` and ``jax.vmap`` through (measured on XLA's CPU backend;
    ``optimization_barrier`` is dropped before fusion there and does not). The same select
    keeps the rounding of a bfloat16 or float16 result that is then cast to float32, which
    XLA drops otherwise (it computes half-precision arithmetic in float32 and removes a
    cast down followed by a cast up). Its derivative is 1, at a NaN too (a ``custom_jvp``):
    the select's own would give a NaN's cotangent 0 and lose the NaN that TF's gradient
    carries. Under ``torch.compile`` a float16 or bfloat16 ``x`` is rounded to its dtype
    (:func:`~anyclip._numerics.torch_rounded`: Inductor keeps fused half-precision values in
    float32). Other libraries, and eager torch, round each operation already: ``x`` itself.
    """
    lib = library(xp)
    if lib == "torch":
        return torch_rounded(x)
    if lib != "jax":
        return x
    return _jax_rounded_apart()(x)


@functools.cache
def _jax_rounded_apart() -> Any:
    """:func:`rounded_apart` for JAX: the select, its tangent the input's (made once)."""
    import jax
    import jax.numpy as jnp

    @jax.custom_jvp
    def apart(x: Any) -> Any:
        return jnp.where(jnp.isnan(x), jnp.asarray(math.nan, dtype=x.dtype), x)

    @apart.defjvp
    def _apart_jvp(primals: Any, tangents: Any) -> Any:
        return apart(primals[0]), tangents[0]

    return apart


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
    if lanes_dtype is not None:  # the accumulators rounded first (XLA would drop it)
        lanes = xp.astype(rounded_apart(xp, lanes), lanes_dtype)
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
