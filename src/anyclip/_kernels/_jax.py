"""JAX kernels: many small arrays summed in one reduction.

Layer: kernels. Chosen by :func:`anyclip._kernels.kernels_for` for float32 and float64 JAX
arrays. XLA runs one loop per reduction; for thousands of small arrays those loops, not the
arithmetic, take the time (benchmark W3), and one ``concatenate`` (fused into the reduction
under ``jit``) replaces them. Sums and gradients are TF's formula, grouped differently.

Sharded arrays are never reshaped: a large array is summed in its own shape (XLA sums each
shard and all-reduces a scalar), and only arrays that cannot be sharded are joined (a reshape
of an array sharded over ``Explicit`` mesh axes is a ``ShardingTypeError``; over ``Auto`` axes
it makes XLA gather it). See :func:`anyclip._compat.may_be_sharded`.

Casts to an accumulation dtype (``accumulate_dtype``) of a large array: XLA runs each eager
operation alone, and XLA:CPU does not fuse a convert into a reduction even under ``jit``
(``memory_analysis`` of the whole formula: a float32 temporary of the whole input, 2 to 3
times the input and output), so :meth:`JaxKernels.cast_half_squares`,
:meth:`JaxKernels.cast_reduce` and :meth:`JaxKernels.cast_map` run their step as one compiled
loop over blocks of ``UPCAST_BLOCK`` elements (``lax.fori_loop`` over ``dynamic_slice``; the
elementwise step writes each block into the output with ``dynamic_update_slice``), compiled
once per step, accumulation dtype and shape. Only one block exists in the accumulation dtype
at a time. The loop runs inside the caller's ``jit``, ``grad`` or ``vmap`` too (its trip
count is static, so ``fori_loop`` is a ``scan``, which reverse-mode differentiates): under
``jit`` the plan's temporaries are a few blocks, not a cast of the input. Arrays that may be
sharded (:func:`~anyclip._compat.may_be_sharded`: a flat view of them would gather them)
take the step as it is, for XLA to compile with the rest.

Sums of squares in TF's order (float64 norms, float32 global norms:
:meth:`JaxKernels.tf_order_squares`) read each array in place as views of its leaves, no
concat of the arrays and no gather of their elements (both slow on XLA:CPU): one
``lax.fori_loop`` per multi-leaf array over its leaves' rows, a few rows a step, and one
zero-padded copy of the short arrays (:func:`_squares_by_array`).

TF's ``l2_loss`` halves each square, and its CPU kernels flush the subnormal halves; these
kernels halve the sum of the squares, so on the CPU (where XLA flushes as TF) their sums of
``l2_loss`` leave out the squares whose half TF flushes (:func:`_halves_kept`), with TF's
gradient ``t * g`` kept there. :meth:`JaxKernels.unhalved` gives kernels that halve
nothing, for the sums TF does not halve (XLA:CPU would flush a subnormal half of them).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from anyclip._compat import dtype_name, may_be_sharded, xla_flushes
from anyclip._kernels import _base
from anyclip._kernels._base import Kernels, groups
from anyclip._kernels._tfaxes import named_axes, tf_sum_or_none
from anyclip._kernels._tforder import _leaves, eigen_packet, tf_order_dtype
from anyclip._kernels._tforder_xp import (
    _add_nodes,
    _segment_sums,
    _tree_ids,
    rounded_apart,
    rounded_cast,
    tf_order_row_sums,
    tf_order_vector_sum,
)
from anyclip._numerics import constant, reduce_sum
from anyclip._subnormals import flush_limits
from anyclip._typing import Namespace

__all__ = ["JaxKernels", "jax_tf_row_sums", "jax_tf_rows_sum", "jax_tf_vector_sum"]

#: The compiled block loops, by (step, function, namespace, accumulation dtype, block size).
_LOOPS: dict[tuple[str, Any, str, str, int], Callable[..., Any]] = {}


def _loop_ok(arrays: Sequence[Any]) -> bool:
    """Whether a cast step on ``arrays`` runs as a compiled block loop.

    On one device (a flat view of a sharded array would gather it; a replicated one is whole
    on every device; a traced array is asked :func:`~anyclip._compat.may_be_sharded`), and
    more than one block (:data:`~anyclip._kernels._base.UPCAST_BLOCK`) in some array: a
    smaller cast costs less than a compilation.
    """
    import jax

    for a in arrays:
        if isinstance(a, jax.core.Tracer):
            if may_be_sharded(a):
                return False
            continue
        sharding = getattr(a, "sharding", None)
        if sharding is not None and len(sharding.device_set) > 1:  # sharded or replicated
            return False
    return any(int(a.size) > _base.UPCAST_BLOCK for a in arrays)


#: The compiled sums in TF's order (squares, sums, vector, row and rows sums), by
#: (kind, half, namespace).
_TF_ORDER: dict[tuple[str, bool, str], Callable[..., Any]] = {}


def _tf_jit(key: tuple[str, bool, str], fn: Callable[..., Any], **kwargs: Any) -> Any:
    """The ``jax.jit`` of ``fn``, made once per ``key``."""
    found = _TF_ORDER.get(key)
    if found is None:
        import jax

        found = _TF_ORDER[key] = jax.jit(fn, **kwargs)
    return found


#: The most elements an array summed in TF's order may hold: the leaves' starts are int32
#: indices (a larger array keeps XLA's own sum, as TF's threads split such sums anyway).
_TF_ORDER_MOST = 2**31 - 1


def _tf_order_ok(arrays: Sequence[Any]) -> bool:
    """Whether float64 ``arrays`` are summed in TF's order: on the CPU, not sharded, not huge.

    A traced array's platform is JAX's default backend's.
    """
    import jax

    if any(may_be_sharded(a) or a.size > _TF_ORDER_MOST for a in arrays):
        return False
    for a in arrays:
        if isinstance(a, jax.core.Tracer):
            if jax.default_backend() != "cpu":
                return False
        elif any(d.platform != "cpu" for d in a.devices()):
            return False
    return True


def _compiled(
    step: str, fn: Any, xp: Namespace, acc: Any, build: Callable[[int], Callable[..., Any]]
) -> Any:
    """The ``jax.jit`` of ``build(block)``, made once per step, ``fn``, ``xp``, ``acc``, block."""
    block = _base.UPCAST_BLOCK
    key = (step, fn, xp.__name__, dtype_name(acc), block)
    try:
        return _LOOPS[key]
    except KeyError:
        import jax

        jitted: Callable[..., Any] = jax.jit(build(block))
        _LOOPS[key] = jitted
        return jitted


def _loop_reduce(
    xp: Namespace, flat: Any, block: int, part: Callable[[Any], Any], combine: str
) -> Any:
    """``part`` of every block of the 1-D ``flat`` (traced), combined by sum or maximum."""
    from jax import lax

    n = int(flat.shape[0])
    m = n // block

    def join(a: Any, b: Any) -> Any:
        return xp.maximum(a, b) if combine == "max" else a + b

    total = part(lax.dynamic_slice(flat, (0,), (block,)))
    total = lax.fori_loop(
        1,
        m,
        lambda i, acc_: join(acc_, part(lax.dynamic_slice(flat, (i * block,), (block,)))),
        total,
    )
    if n > m * block:
        total = join(total, part(flat[m * block :]))
    return total


def _rows_sum(xp: Namespace, f: Any, flat: Any, acc: Any, cut: int) -> Any:
    """:func:`jax_tf_rows_sum`'s body (traced): a ``fori_loop`` over the groups of four rows."""
    from jax import lax

    b, n = (int(d) for d in flat.shape)
    whole = b - b % 4

    def products(lo: Any, size: int) -> Any:
        x = lax.dynamic_slice_in_dim(flat, lo, size, axis=0)  # no copy of the gradients
        s = lax.dynamic_slice_in_dim(f, lo, size, axis=0)
        p = s * x  # TF's v * cast(scale)
        # rounded before the add: where(isnan(p), nan, p) stops XLA's fused multiply-add
        # (anyclip._kernels.rounded_apart; checked bit for bit inside this loop by tests)
        p = xp.where(xp.isnan(p), xp.asarray(math.nan, dtype=p.dtype), p)
        return p if p.dtype == acc else xp.astype(p, acc)

    def in_turn(total: Any, p: Any) -> Any:
        for k in range(int(p.shape[0])):
            total = total + p[k, :]
        return total

    def body(i: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
        acc4, tail = carry
        p = products(i * 4, 4)
        return acc4 + p[:, :cut], in_turn(tail, p[:, cut:])

    def zeros(shape: tuple[int, ...]) -> Any:
        # full_like of both operands: inside shard_map the carry then varies over the
        # manual axes that f or flat vary over, as the carry the body returns
        return lax.full_like(f, 0, acc, shape) + lax.full_like(flat, 0, acc, shape)

    acc4, tail = (zeros((4, cut)), zeros((n - cut,)))
    if whole:  # a loop of no trips is still traced: its body's slice of four rows needs four
        acc4, tail = lax.fori_loop(0, whole // 4, body, (acc4, tail))
    total = ((acc4[0, :] + acc4[1, :]) + acc4[2, :]) + acc4[3, :]
    if whole < b:  # the last b % 4 rows, in turn
        p = products(whole, b - whole)
        total = in_turn(total, p[:, :cut])
        tail = in_turn(tail, p[:, cut:])
    return xp.concat([total, tail])


#: The name scope of the loops over leaves' rows (:func:`_leaf_rows`,
#: :func:`_scattered_square_sums`): ``op_name`` metadata in the compiled program names them.
LEAF_LOOPS = "anyclip_tf_order_leaves"

#: :func:`_leaf_rows` adds this many rows of its leaves per step of its loop (one chain of
#: additions, so one fused operation per step).
_ROW_STEP = 4

#: :func:`_scattered_square_sums` reads this many leaves per step of its loop.
_LEAF_STEP = 4


def _square(xp: Namespace, x: Any, flush_halves: bool = False) -> Any:
    """``x * x``, rounded before the addition it feeds (no fused multiply-add).

    ``flush_halves`` (a sum of ``l2_loss``): 0 where TF's ``l2_loss`` flushes the square's
    half (:func:`_halves_kept`, whose select keeps the square apart from the addition as
    :func:`~anyclip._kernels._tforder_xp.rounded_apart`'s does: one select, not two).
    """
    if flush_halves:
        return _halves_kept(xp, x * x)
    return rounded_apart(xp, x * x)


def _halves_kept(xp: Namespace, squares: Any) -> Any:
    """``squares`` (float32 or float64, ``>= 0`` or NaN) with 0 where TF flushes the half.

    TF 2.21's ``l2_loss`` is ``sum(square(t) * 0.5)``, and its CPU kernels flush subnormal
    results to zero: a square from the smallest normal number up to twice it (``[2**-126,
    2**-125)`` in float32, ``[2**-1022, 2**-1021)`` in float64) is normal, its half is not,
    and TF drops it from the sum (``tf.linalg.global_norm`` of four float32 ``1.3e-19`` is
    0; smaller squares are 0 already, in TF and on XLA:CPU alike). The JAX kernels halve
    the sum of the squares instead, so they leave those squares out here. The value is a
    select (a NaN stays NaN), which also stops XLA from contracting a product it is given
    into the addition it feeds; its derivative is 1 (a ``custom_jvp``, as
    :func:`~anyclip._kernels._tforder_xp.rounded_apart`'s): TF's gradient of ``l2_loss`` is
    ``t * g`` at every element, those whose half it flushes included.
    """
    return _jax_halves_kept()(squares)


@functools.cache
def _jax_halves_kept() -> Any:
    """:func:`_halves_kept`'s select, its tangent the input's (made once)."""
    import jax
    import jax.numpy as jnp

    @jax.custom_jvp
    def kept(s: Any) -> Any:
        low = jnp.asarray(2 * flush_limits(dtype_name(s.dtype))[0], dtype=s.dtype)
        return jnp.where(s < low, jnp.zeros_like(s), s)

    @kept.defjvp
    def kept_jvp(primals: Any, tangents: Any) -> Any:
        (s,), (t,) = primals, tangents
        return kept(s), t

    return kept


def _leaf_rows(xp: Namespace, view: Any, rows: int, wide: int, flush_halves: bool) -> Any:
    """The first ``rows`` rows of ``wide`` squares of each leaf ``view[l]``, added in order.

    ``(count, wide)``: row ``r`` of leaf ``l`` is ``view[l, r * wide:(r + 1) * wide]``. A
    ``lax.fori_loop`` adds ``_ROW_STEP`` rows a step (one chain of additions: one fused
    operation; fewer where that many do not divide ``rows``, else the rows left over one a
    step in a second loop). ``flush_halves``: as :func:`_square`'s.
    """
    import jax
    from jax import lax

    def row(r: Any) -> Any:
        values = lax.dynamic_slice_in_dim(view, r * wide, wide, axis=1)
        return _square(xp, values, flush_halves)

    # the sums start at the first row (+0 plus a square is that square, bit for bit), so the
    # loops' carry has the data's type: under shard_map, its varying manual axes too (a carry
    # of fresh zeros did not, and JAX refused the loop)
    with jax.named_scope(LEAF_LOOPS):
        acc = row(0)
        left = rows - 1
        if not left:
            return acc
        step = min(_ROW_STEP, left)
        exact = max(k for k in range(1, step + 1) if left % k == 0)
        if 2 * exact >= step:  # no rows left over
            step = exact

        def add_rows(i: Any, acc: Any) -> Any:
            for k in range(step):
                acc = acc + row(1 + i * step + k)
            return acc

        acc = lax.fori_loop(0, left // step, add_rows, acc)
        rest = left % step
        if rest:
            acc = lax.fori_loop(rows - rest, rows, lambda r, acc: acc + row(r), acc)
    return acc


def _zero_padded(xp: Namespace, parts: list[Any | None], counts: list[int], like: Any) -> Any:
    """``parts`` joined along axis 0, each None as that many rows of exact zeros."""
    filled = [
        xp.zeros((c, *like.shape[1:]), dtype=like.dtype) if part is None else part
        for part, c in zip(parts, counts, strict=True)
    ]
    return filled[0] if len(filled) == 1 else xp.concat(filled)


def _group_square_sums(xp: Namespace, views: list[Any], packet: int, flush_halves: bool) -> Any:
    """Eigen's sums of the squares of the leaves ``views[b][l, :]``, every view's in turn: 1-D.

    Each view is ``(count, n)``, a leaf a row; every view's leaves have the same number of
    rows of ``4 P`` elements (their lengths may differ past the rows). Each view's rows are
    added one after another into ``4 P`` accumulators per leaf (:func:`_leaf_rows`: a loop
    over the view as it is, no copy, no gather); then, for all the views' leaves at once,
    the accumulators are combined, the leftover packets added, the lanes reduced by halves
    and the last ``< P`` squares' sum added, a view's missing packets and last elements
    taken as exact zeros (a square is ``>= +0``: adding ``+0`` changes no bit). Each square
    is rounded apart from the addition it feeds (:func:`_square`; ``flush_halves``: as its).
    """
    p = packet
    wide = 4 * p
    counts = [int(v.shape[0]) for v in views]
    lengths = [int(v.shape[1]) for v in views]
    rows = lengths[0] // wide
    full = rows * wide
    like = views[0]

    if rows:
        done = [_leaf_rows(xp, v, rows, wide, flush_halves) for v in views]
        acc = done[0] if len(done) == 1 else xp.concat(done)
        lanes = acc[:, :p] + acc[:, p : 2 * p]
        lanes = lanes + acc[:, 2 * p : 3 * p]
        lanes = lanes + acc[:, 3 * p :]
    else:
        lanes = xp.zeros((sum(counts), p), dtype=like.dtype)
    packs = [n % wide // p for n in lengths]
    for j in range(max(packs)):
        at = full + j * p
        got = [
            _square(xp, v[:, at : at + p], flush_halves) if j < k else None
            for v, k in zip(views, packs, strict=True)
        ]
        lanes = lanes + _zero_padded(xp, got, counts, like[:, :p])
    while lanes.shape[-1] > 1:
        half = int(lanes.shape[-1]) // 2
        lanes = lanes[:, :half] + lanes[:, half:]
    reduced = lanes[:, 0]
    lasts = [n % p for n in lengths]
    if not max(lasts):
        return reduced
    total = None
    for j in range(max(lasts)):
        got = [
            _square(xp, v[:, n - m + j], flush_halves) if j < m else None
            for v, n, m in zip(views, lengths, lasts, strict=True)
        ]
        term = _zero_padded(xp, got, counts, like[:, 0])
        total = term if total is None else total + term
    return total + reduced


def _scattered_square_sums(
    xp: Namespace, flat: Any, starts: list[int], n: int, packet: int, flush_halves: bool
) -> Any:
    """Eigen's sums of the squares of the leaves ``flat[s:s + n]`` for ``s`` in ``starts``.

    For an array whose leaves of one length do not follow each other (TF's split of GPT-2's
    embedding alternates leaves of 4,712 and 4,704 elements: 832 runs): a ``lax.fori_loop``
    over the leaves, ``_LEAF_STEP`` at a time, each a ``dynamic_slice`` of ``flat`` at its
    start from a table (an XLA:CPU gather of the same elements took 4 to 7 times as long),
    each step's block summed by :func:`_group_square_sums` (its rows by a loop: a chain of
    every row unrolled in the step made ``jax.grad``'s program take 19 s to compile for 3
    million float32 elements).
    """
    import jax
    from jax import lax

    k = len(starts)
    steps = -(-k // _LEAF_STEP)
    padded = starts + [starts[-1]] * (steps * _LEAF_STEP - k)
    table = xp.reshape(xp.asarray(padded, dtype=xp.int32), (steps, _LEAF_STEP))

    def step(at: Any) -> Any:
        block = xp.stack([lax.dynamic_slice_in_dim(flat, at[j], n) for j in range(_LEAF_STEP)])
        return _group_square_sums(xp, [block], packet, flush_halves)

    # ``lax.map``: a loop without a carry (a carry of fresh zeros lacks a shard_map's varying
    # manual axes, which JAX refuses), each step's sums stacked
    with jax.named_scope(LEAF_LOOPS):
        out = lax.map(step, table)
    return xp.reshape(out, (-1,))[:k]


def _padded_leaves(xp: Namespace, block: Any, rows: int, packet: int) -> Any:
    """The leaves ``block[l, :]`` laid out as ``rows`` rows, 3 packets, ``P - 1`` elements.

    Each leaf's own rows, packets and last elements, each followed by exact zeros to fill
    the layout (:func:`~anyclip._kernels._tforder_xp._padded_leaf_sums`'): the layout's sum
    of squares is the leaf's, bit for bit (adding ``+0`` to a sum of squares changes no
    bit). ``(leaves, rows * 4 P + 4 P - 1)``.
    """
    p = packet
    wide = 4 * p
    count, n = (int(d) for d in block.shape)
    full = n // wide * wide
    packs = n % wide // p * p
    pieces = []
    spans = ((0, full, rows * wide), (full, full + packs, 3 * p), (full + packs, n, p - 1))
    for lo, hi, room in spans:
        if hi > lo:
            pieces.append(block[:, lo:hi])
        if room > hi - lo:
            pieces.append(xp.zeros((count, room - (hi - lo)), dtype=block.dtype))
    return pieces[0] if len(pieces) == 1 else xp.concat(pieces, axis=1)


def _squares_by_array(
    xp: Namespace,
    arrays: Sequence[Any],
    *,
    half: bool,
    flush_halves: bool = False,
    halve: bool = True,
) -> Any:
    """:func:`~anyclip._kernels._tforder_xp.tf_order_squares` read from each array in place.

    The same sums in the same order (bit for bit) without joining the arrays into one flat
    array nor gathering their leaves (on XLA:CPU that concat and gather took about 90% of a
    float32 global norm of ResNet-50's parameters). Each array is split into leaves as TF
    splits it (:func:`~anyclip._kernels._tforder._leaves`), and its leaves summed by one of:

    * one leaf (an array of at most 8,192 float32): joined with the other such arrays of
      its size, then laid out with those of the same rows rounded up to a power of two in
      :func:`_padded_leaves`' zero-padded layout (one copy of these short arrays, one
      ``(arrays, m)`` view);
    * leaves of one length (TF's split of every multi-leaf array of ResNet-50 and of GPT-2
      small but its embedding): the array reshaped ``(leaves, length)``, a view;
    * leaves of a few lengths, not in runs (GPT-2's embedding: 4,712 and 4,704 elements
      alternating in 832 runs): :func:`_scattered_square_sums`, a loop per length over
      ``dynamic_slice`` s of the array at the leaves' starts.

    The views of one number of rows are summed together (:func:`_group_square_sums`, one
    loop per view over its rows). The leaves' sums are then added up their trees one level
    at a time (:func:`~anyclip._kernels._tforder_xp._add_nodes`), and with ``half`` every
    array's sum is halved and the halves summed in TF's order, as
    :func:`~anyclip._kernels._tforder_xp.tf_order_sum_of`; with ``flush_halves`` too (TF's
    ``l2_loss``, where XLA flushes as TF), the squares whose half TF flushes count as 0
    (:func:`_halves_kept`), so each half is TF's; with ``halve=False`` the arrays' whole sums
    are added in that order (:meth:`JaxKernels.unhalved`). The squares and halves are
    rounded apart from the additions they feed, so the bits do not depend on what XLA
    fuses: the same eagerly and under the caller's ``jit``. The program has one loop per
    multi-leaf array, each adding ``_ROW_STEP`` rows a step (more rows a step ran little
    faster and compiled longer: 16 took 3.5 s for ResNet-50's multi-leaf arrays, 4 took
    1.6 s), and one per leaf length of a scattered array. On a loaded 2-core CPU, ``jit`` of
    ``clip_by_global_norm``: ResNet-50's float32 parameters 39 ms (optax 23 ms; the joined
    and gathered program 147 ms), compiled in 3.2 s (1.9 s); GPT-2 small 198 ms (optax
    112 ms, before 721 ms), compiled in 3.4 s (1.9 s; 112 s with one loop per run of
    leaves of one length).
    """
    dtype = arrays[0].dtype
    packet, leaf = eigen_packet(dtype)
    wide = 4 * packet
    leaves: list[tuple[int, int]] = []
    trees: list[Any] = []
    by_rows: dict[int, list[tuple[Any, list[int]]]] = {}
    small: dict[int, list[tuple[Any, list[int]]]] = {}
    parts = [xp.zeros((1,), dtype=dtype)]  # position 0: an empty array's sum
    order: list[int] = []  # the leaves, in the order of their sums in ``parts``
    for a in arrays:
        n = int(a.size)
        if n == 0:
            trees.append(None)
            continue
        flat = xp.reshape(a, (n,))
        first = len(leaves)
        trees.append(_leaves(0, 0, n, leaves, leaf, packet))  # starts within ``a``
        mine = list(range(first, len(leaves)))
        lengths = {leaves[i][1] for i in mine}
        if len(mine) == 1:  # one leaf: laid out with the other short arrays' (a copy)
            small.setdefault(n, []).append((flat, mine))
            continue
        if len(lengths) == 1:  # the array is its leaves, one after another: a 2-D view
            view = xp.reshape(flat, (len(mine), n // len(mine)))
            by_rows.setdefault(n // len(mine) // wide, []).append((view, mine))
            continue
        for length in sorted(lengths):
            which = [i for i in mine if leaves[i][1] == length]
            starts = [leaves[i][0] for i in which]
            parts.append(_scattered_square_sums(xp, flat, starts, length, packet, flush_halves))
            order += which
    padded: dict[int, list[tuple[Any, list[int]]]] = {}
    for n, group in small.items():  # the short arrays of one size: one (arrays, n) block
        flats = [f for f, _ in group]
        block = flats[0][None, :] if len(flats) == 1 else xp.reshape(xp.concat(flats), (-1, n))
        rows = n // wide
        rows = 1 << (rows - 1).bit_length() if rows else 0  # at most twice its rows
        which = [i for _, mine in group for i in mine]
        padded.setdefault(rows, []).append((_padded_leaves(xp, block, rows, packet), which))
    for rows, group in padded.items():
        blocks = [b for b, _ in group]
        view = blocks[0] if len(blocks) == 1 else xp.concat(blocks)
        by_rows.setdefault(rows, []).append((view, [i for _, which in group for i in which]))
    for _, group in sorted(by_rows.items()):
        parts.append(_group_square_sums(xp, [v for v, _ in group], packet, flush_halves))
        order += [i for _, which in group for i in which]
    at = [0] * len(leaves)
    for pos, i in enumerate(order):
        at[i] = pos + 1
    values, roots = _add_nodes(xp, xp.concat(parts), [_tree_ids(t, at) for t in trees])
    sums = xp.take(values, xp.asarray(roots), axis=0)
    if not half:
        return sums[0]
    if halve:
        halves = rounded_apart(xp, sums * constant(xp, 0.5, sums.dtype, sums))
    else:
        halves = sums
    if len(arrays) == 1:
        return halves[0]
    return _segment_sums(xp, halves, [len(arrays)], packet, leaf)[0]


def _fori_in_turn(xp: Namespace, z: Any) -> Any:
    """The slices of ``z``'s first axis added one after another (traced): a ``fori_loop``."""
    from jax import lax

    def add(i: Any, total: Any) -> Any:
        return total + lax.dynamic_index_in_dim(z, i, axis=0, keepdims=False)

    return lax.fori_loop(1, int(z.shape[0]), add, z[0, ...])


def _row_sums_form(xp: Namespace, _: Any, rows: Any, **kwargs: Any) -> Any:
    """:func:`jax_tf_row_sums` in the form :func:`~anyclip._kernels._tfaxes.tf_axes_sum` calls."""
    return jax_tf_row_sums(xp, rows, kwargs["packet"], kwargs["leaf"], None, kwargs.get("phase", 0))


def _vector_sum_form(xp: Namespace, _: Any, values: Any, **kwargs: Any) -> Any:
    """:func:`jax_tf_vector_sum` in the form :func:`~anyclip._kernels._tfaxes.tf_axes_sum` calls."""
    return jax_tf_vector_sum(xp, values, kwargs["packet"], kwargs["leaf"], kwargs["lanes"])


def jax_tf_rows_sum(xp: Namespace, f: Any, flat: Any, acc: Any, cut: int) -> Any:
    """The rows of ``f * flat`` added in TF 2.21's ``reduce_sum`` order, in ``acc``.

    As :func:`anyclip._per_example._core_tf_sum`'s Python loops (``cut``: the first columns,
    summed by four accumulators taking rows ``j % 4``, combined, then the last ``B % 4`` rows
    in turn; the other columns add every row in turn), as one ``lax.fori_loop`` over the
    ``B // 4`` groups of four rows: its carry is the ``(4, cut)`` accumulators and the
    running total of the other columns, each group's products made inside the loop from a
    ``dynamic_slice`` of ``flat`` (no copy), rounded before they are added. One compiled
    loop, whatever the batch (a Python loop unrolls under ``jax.jit``); a ``jax.jit`` made
    once per namespace (dtype and ``cut`` static), so eager calls compile once per shape.
    """

    def run(f: Any, flat: Any, acc: Any, cut: int) -> Any:
        return _rows_sum(xp, f, flat, acc, cut)

    found = _tf_jit(("rows-sum", False, xp.__name__), run, static_argnums=(2, 3))
    return found(f, flat, acc, cut)


def jax_tf_vector_sum(xp: Namespace, values: Any, packet: int, leaf: int, lanes: Any) -> Any:
    """:func:`~anyclip._kernels._tforder_xp.tf_order_vector_sum` as one compiled program.

    A ``jax.jit`` made once per namespace (``packet``, ``leaf`` and ``lanes`` static): an
    eager call runs its gathers and additions in one program, compiled once per shape, not
    one dispatch each (measured once on a loaded 2-core CPU, the whole per-example sum of
    256 to 9,000 float32 products: 0.35 to 0.56 ms, against 6 to 28 ms op by op; the
    ``lax.fori_loop`` over rows it replaces for this case took 0.1 ms, but not in TF's
    order); under the caller's ``jit`` it is inlined. Additions only (the products it sums
    are rounded by the caller), so XLA has nothing to contract.
    """

    def run(v: Any, packet: int, leaf: int, lanes: Any) -> Any:
        return tf_order_vector_sum(xp, v, packet=packet, leaf=leaf, lanes=lanes)

    found = _tf_jit(("vector", False, xp.__name__), run, static_argnums=(1, 2, 3))
    return found(values, packet, leaf, lanes)


def jax_tf_row_sums(
    xp: Namespace,
    rows: Any,
    packet: int,
    leaf: int,
    square: float | None = None,
    phase: int = 0,
    lanes: Any = None,
) -> Any:
    """:func:`~anyclip._kernels._tforder_xp.tf_order_row_sums` as one compiled program.

    As :func:`jax_tf_vector_sum`: a ``jax.jit`` made once per namespace (``packet``,
    ``leaf``, ``square``, ``phase`` and ``lanes`` static), so an eager call is one dispatch,
    not one per addition; under the caller's ``jit`` it is inlined. The squares
    (``square``) are rounded apart from the additions they feed
    (:func:`anyclip._kernels.rounded_apart`).
    """

    def run(r: Any, packet: int, leaf: int, square: float | None, phase: int, lanes: Any) -> Any:
        return tf_order_row_sums(
            xp, r, packet=packet, leaf=leaf, square=square, phase=phase, lanes=lanes
        )

    found = _tf_jit(("rows", False, xp.__name__), run, static_argnums=(1, 2, 3, 4, 5))
    return found(rows, packet, leaf, square, phase, lanes)


class JaxKernels(Kernels):
    """:class:`Kernels` for float32 and float64 JAX arrays.

    Parameters
    ----------
    halving : bool, optional
        Whether the sums of :meth:`half_squares` are TF's ``l2_loss``, halved (``True``, the
        default): they then leave out the squares whose half TF's ``l2_loss`` flushes to
        zero, where XLA flushes as TF (on the CPU). ``False``: the kernels of
        :meth:`~Kernels.unhalved`, whose sums are whole (no half to flush).
    """

    name = "jax"

    def __init__(self, *, halving: bool = True) -> None:
        self._halves = halving
        if not halving:
            self.name = "jax-unhalved"
        self._unhalved = JaxKernels(halving=False) if halving else self

    def unhalved(self) -> Kernels:
        """As :meth:`Kernels.unhalved`: these kernels with ``halving=False``."""
        return self._unhalved

    def tf_order_squares(self, xp: Namespace, arrays: Sequence[Any], *, half: bool) -> Any:
        """As :meth:`Kernels.tf_order_squares`, for float64 arrays on the CPU, not sharded.

        float32 arrays too with ``half`` (``tf.linalg.global_norm``).

        One compiled program per shapes (:func:`_squares_by_array`: the short arrays joined
        in one zero-padded copy, every longer array read in place, as ``(leaves, length)``
        views by a ``lax.fori_loop`` over their rows, or by ``dynamic_slice`` s at its
        leaves' starts where its leaves of one length do not follow each other; no gather of
        the elements; the squares rounded before they are added): bit-equal to TF eagerly,
        under the caller's ``jit`` (where it is inlined) and under an eager ``jax.grad`` or
        ``vmap`` (JAX differentiates and batches a ``jit`` as a whole: one program, where the
        order's operations one at a time took 12 s for the first gradient of a float64 norm
        of 10,000 elements). Sharded arrays keep XLA's own reduction (a gather of their
        leaves would gather them), and so do arrays on another platform (TF's order is its
        CPU kernels'). With ``half`` and :attr:`~Kernels.halving`, the squares whose half
        TF's ``l2_loss`` flushes count as 0 (:func:`_halves_kept`); with ``half`` but not
        :attr:`~Kernels.halving`, the arrays' whole sums are added, nothing halved.
        """
        if not tf_order_dtype(arrays[0].dtype, half=half) or not _tf_order_ok(arrays):
            return None
        halve = self.halving
        flush = half and halve  # on the CPU: XLA flushes as TF
        unhalved = half and not halve
        kind = "by-array-flushed" if flush else "by-array-unhalved" if unhalved else "by-array"
        total = _tf_jit(
            (kind, half, xp.__name__),
            lambda *a: _squares_by_array(xp, a, half=half, flush_halves=flush, halve=halve),
        )
        return total(*arrays)

    def tf_sum(self, xp: Namespace, y: Any, axes: tuple[int, ...] | int | None) -> Any | None:
        """As :meth:`Kernels.tf_sum`, for float64 arrays on the CPU, not sharded: one program.

        Compiled once per shape and axes (inlined under the caller's ``jit``); its slices
        added in turn by a ``lax.fori_loop``, TF's row and vector sums as
        :func:`jax_tf_row_sums` and :func:`jax_tf_vector_sum`; the addends rounded first
        (:func:`~anyclip._kernels.rounded_apart`: no fused multiply-add with the square).
        """
        if dtype_name(y.dtype) != "float64" or not _tf_order_ok([y]) or y.size == 0:
            return None
        named = named_axes(axes, y.ndim)  # one program for -1 and the last axis

        def run(v: Any, named: tuple[int, ...]) -> Any:
            return tf_sum_or_none(
                xp,
                rounded_apart(xp, v),
                named,
                in_turn=_fori_in_turn,
                row_sums=functools.partial(_row_sums_form, xp),
                vector_sum=functools.partial(_vector_sum_form, xp),
            )

        return _tf_jit(("axes", False, xp.__name__), run, static_argnums=(1,))(y, named)

    def half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """As :meth:`Kernels.half_squares`, one reduction per group of arrays under 65,536.

        With :attr:`~Kernels.halving` on the CPU (sharded arrays, or arrays too large for
        :meth:`tf_order_squares`), the squares whose half TF's ``l2_loss`` flushes count
        as 0 (:func:`_halves_kept`), as in TF's order; without, the sums are whole.
        """
        total = self.tf_order_squares(xp, arrays, half=True)
        if total is not None:
            return total
        halve = self.halving
        flush = halve and xla_flushes(arrays[0])  # XLA:GPU keeps subnormals

        def squares(a: Any) -> Any:
            return _halves_kept(xp, a * a) if flush else a * a

        joinable = [a for a in arrays if not may_be_sharded(a)]
        grouped = groups(joinable, lambda a: int(a.size))
        half = constant(xp, 0.5, arrays[0].dtype, arrays[0])

        def halved(s: Any) -> Any:
            return s * half if halve else s

        if len(grouped) == len(joinable):  # nothing to join: the generic sums, in list order
            if not flush:
                return super().half_squares(xp, arrays)
            sums = [halved(reduce_sum(xp, squares(v), None, keepdims=False)) for v in arrays]
            return reduce_sum(xp, xp.stack(sums), None, keepdims=False)
        sums = [halved(xp.sum(squares(a))) for a in arrays if may_be_sharded(a)]
        for group in grouped:
            if len(group) == 1:  # summed in its own shape: no reshape
                sums.append(halved(xp.sum(squares(group[0]))))
                continue
            flat = xp.concat([xp.reshape(a, (-1,)) for a in group])
            sums.append(halved(xp.sum(squares(flat))))
        return xp.sum(xp.stack(sums))

    def cast_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any) -> Any:
        """As :meth:`Kernels.cast_half_squares`; a large eager array by a compiled block loop."""
        if acc is None or all(a.dtype == acc for a in arrays) or not _loop_ok(arrays):
            return super().cast_half_squares(xp, arrays, acc)
        same = [a for a in arrays if a.dtype == acc]
        parts = [self.half_squares(xp, same)] if same else []
        for v in arrays:
            if v.dtype == acc:
                continue
            if int(v.size) <= _base.UPCAST_BLOCK:
                parts.append(self.half_squares(xp, [rounded_cast(xp, v, acc)]))
                continue

            def build(block: int) -> Callable[..., Any]:
                def run(u: Any) -> Any:
                    flat = xp.reshape(u, (-1,))  # not sharded: a bitcast under jit
                    return _loop_reduce(
                        xp,
                        flat,
                        block,
                        lambda b: self.half_squares(xp, [rounded_cast(xp, b, acc)]),
                        "sum",
                    )

                return run

            step = "half_squares" if self.halving else "half_squares-unhalved"
            parts.append(_compiled(step, None, xp, acc, build)(v))
        return xp.sum(xp.stack(parts))

    def cast_reduce(
        self,
        xp: Namespace,
        x: Any,
        acc: Any,
        fn: Callable[..., Any],
        operands: Sequence[Any],
        combine: str,
    ) -> Any | None:
        """As :meth:`Kernels.cast_reduce`; a large eager array by a compiled block loop."""
        if not _loop_ok([x]):
            return None  # small, traced or sharded: the formula on the whole array

        def build(block: int) -> Callable[..., Any]:
            def run(u: Any, *ops: Any) -> Any:
                def part(b: Any) -> Any:
                    return fn(xp, rounded_cast(xp, b, acc), *ops)

                return _loop_reduce(xp, xp.reshape(u, (-1,)), block, part, combine)

            return run

        return _compiled(f"reduce-{combine}", fn, xp, acc, build)(x, *operands)

    def cast_map(
        self, xp: Namespace, t: Any, acc: Any, fn: Callable[..., Any], operands: Sequence[Any]
    ) -> Any:
        """As :meth:`Kernels.cast_map`; a large eager array by a compiled block loop.

        Each block's result is written into the output (``dynamic_update_slice``, in place in
        the loop), so the output and one block are all that is made.
        """
        if not _loop_ok([t]):
            return super().cast_map(xp, t, acc, fn, operands)

        def build(block: int) -> Callable[..., Any]:
            from jax import lax

            def run(u: Any, *ops: Any) -> Any:
                flat = xp.reshape(u, (-1,))
                n = int(flat.shape[0])
                m = n // block

                def one(b: Any) -> Any:
                    return rounded_cast(xp, fn(xp, rounded_cast(xp, b, acc), *ops), u.dtype)

                def body(i: Any, out: Any) -> Any:
                    b = lax.dynamic_slice(flat, (i * block,), (block,))
                    return lax.dynamic_update_slice(out, one(b), (i * block,))

                out = lax.fori_loop(0, m, body, xp.zeros((n,), dtype=u.dtype))
                if n > m * block:
                    out = lax.dynamic_update_slice(out, one(flat[m * block :]), (m * block,))
                return xp.reshape(out, u.shape)

            return run

        return _compiled("map", fn, xp, acc, build)(t, *operands)
