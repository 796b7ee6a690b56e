"""Dask kernels: the matrix 2-norm through dask's own SVD.

Layer: kernels. Chosen by :func:`anyclip._kernels.kernels_for` for dask arrays. Every step
but one is the generic array-API code, which dask evaluates lazily, chunk by chunk (a global
norm is a tree reduction of per-chunk sums of squares: out of core on a cluster). The one
exception: dask's array-API ``svdvals`` asks for ``full_matrices=True``, which dask refuses,
so :meth:`DaskKernels.svdvals` calls ``dask.array.linalg.svd`` (tall-and-skinny QR) after
putting the shorter dimension in one chunk; a stack of matrices goes matrix by matrix, one chunk
holding whole matrices, through NumPy's ``svd`` in ``map_blocks``.

float64 sums of squares over every element (the norms, ``global_norm``, ``clip_by_norm``,
``l2_normalize`` over all axes), and the 1-norms' sums over every element, add in TF 2.21's
order, as the NumPy kernels' do:
:meth:`DaskKernels.tf_order_squares` rechunks each flattened array at nodes of TF's tree
(:func:`~anyclip._kernels._tforder.tf_order_nodes`, of about the array's own chunk size),
sums each chunk in TF's order with NumPy (one task per node: the node's subtree), and adds
the nodes' sums as TF's tree does in one last task, which reads one float per node. The
graph is built from the shapes alone (lazy), and no task holds more than a chunk. An array
of unknown chunk sizes (``x[x > 0]``) has no tree until it is computed: its sums keep
dask's own order (each chunk's sum, then dask's tree of partial sums), within about 20 ULP
of TF's in float64, as float32 sums on every backend; the other arrays of a list keep TF's.

An array of unknown chunk sizes cannot be broadcast by dask against an array argument whose
length is not 1 (``clip_by_value(x[x > 0], lo, hi)``): :func:`joined_call` then runs the
NumPy function in one task on the joined arrays, lazily.

Dask computes some arrays with chunks of no elements wrongly; the argument checks drop such
chunks first (:func:`nonempty_chunks`).

With ``accumulate_dtype``, dask casts chunk by chunk already; :meth:`DaskKernels.cast_map`
makes the cast, the elementwise step and the cast back one task per chunk (``map_blocks``), so
that the cast chunks the sum of squares reads are not kept for the scaling (a shared
``astype`` held every cast chunk until the norm was known).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from anyclip._compat import dtype_name
from anyclip._kernels._base import Kernels
from anyclip._kernels._tfaxes import named_axes, tf_axes_sum, tf_layout
from anyclip._kernels._tforder import (
    eigen_packet,
    numpy_in_turn,
    tf_order_dtype,
    tf_order_nodes,
    tf_order_sums,
    tf_order_total,
    tf_order_walk,
)
from anyclip._kernels._tforder_xp import numpy_tf_row_sums
from anyclip._numerics import reduce_sum
from anyclip._subnormals import OPEN, flush_subnormals, flushing
from anyclip._typing import Namespace

__all__ = ["DaskKernels", "joined_call", "nonempty_chunks", "unknown_broadcast"]


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

    def tf_order_squares(self, xp: Namespace, arrays: Sequence[Any], *, half: bool) -> Any:
        """As :meth:`Kernels.tf_order_squares`, for float64 dask arrays, lazily.

        Each array of known shape is flattened and rechunked at nodes of TF's tree of at most
        its largest chunk's elements (a leaf's 4,096 at least); one task per node sums its
        squares in TF's order (:func:`~anyclip._kernels._tforder.tf_order_sums`, NumPy).
        An array of unknown chunk sizes has no tree before it is computed: its sum is
        dask's own (each chunk's, then dask's tree of partial sums). One last task adds
        the nodes' sums as TF's tree does, then the arrays' sums (halved, with ``half``) as
        ``tf.linalg.global_norm`` does (:func:`~anyclip._kernels._tforder.tf_order_total`):
        bit-equal to the NumPy kernels where every shape is known. float32 arrays too with
        ``half`` (``tf.linalg.global_norm``), in float32. None for other dtypes. Where
        :attr:`~Kernels.halving` is False, the arrays' whole sums (nothing halved).
        """
        if not tf_order_dtype(arrays[0].dtype, half=half):
            return None
        return _tf_order_squares(xp, arrays, half=half, halve=self.halving)

    def tf_sum(self, xp: Namespace, y: Any, axes: tuple[int, ...] | int | None) -> Any | None:
        """As :meth:`Kernels.tf_sum`, lazily: the reduced axes in one chunk, a task per chunk.

        ``y`` is rechunked so that each chunk holds the reduced axes whole (the kept axes keep
        their chunks), and each chunk is summed by the NumPy form
        (:func:`~anyclip._kernels._tfaxes.tf_axes_sum`) on TF's route for the whole array,
        its outputs placed by their index in the whole output (``block_info``): Eigen's
        packets and row splits fall by it. A sum of every element (the axes of more than one
        element all reduced: ``l2_normalize`` over every axis, a 1-norm) is TF's full
        reduction, one task per node of TF's tree as in :meth:`tf_order_squares` (one chunk
        would hold the whole array). None (dask's own sums) for unknown chunk sizes.
        """
        if dtype_name(y.dtype) != "float64" or not _known_shape(y) or y.size == 0:
            return None
        shape = tuple(int(d) for d in y.shape)
        named = named_axes(axes, len(shape))
        dims, first = tf_layout(shape, named)
        if len(dims) == 1 and first:  # every element in one sum: TF's tree, node by node
            total = _tf_order_squares(xp, [y], half=False, square=False)
            return xp.reshape(total, (1,) * y.ndim)
        if len(dims) <= 1 or all(shape[i] == 1 for i in named):
            return None
        whole = y.rechunk(_whole_axes(y, named))
        chunks = tuple((1,) if i in named else c for i, c in enumerate(whole.chunks))
        step = functools.partial(_tf_sum_chunk, axes=named, whole=shape)
        map_blocks: Callable[..., Any] = whole.map_blocks  # untyped in dask
        return map_blocks(step, chunks=chunks, dtype=whole.dtype)

    def clip_norm2(
        self, xp: Namespace, t: Any, axes: tuple[int, ...] | None, other: Any = None
    ) -> Any:
        """As :meth:`Kernels.clip_norm2`, without TF's double ``where``: dask records no gradient.

        The ``where``s only keep a gradient finite at 0; their values are the plain norm's.
        Without them the graph has four layers fewer (``gt``, ``ones_like`` and two ``where``).
        """
        return self.norm2(xp, t, axes)

    def reduce_max(self, xp: Namespace, x: Any, axis: int | tuple[int, ...]) -> Any:
        """As :meth:`Kernels.reduce_max`: each chunk's maximum starts from the lowest value.

        ``numpy.max(..., initial=lowest)`` per chunk and per combination, so empty chunks and
        an empty array give TF's ``reduce_max`` of nothing (-inf, or the integer minimum)
        where dask's own ``max`` raises when the graph is computed.
        """
        import dask.array as da
        import numpy as np

        dtype = np.dtype(x.dtype)
        lowest = np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf
        step = functools.partial(_max_from, initial=lowest)
        reduction: Callable[..., Any] = da.reduction  # untyped in dask
        return reduction(x, step, step, axis=axis, keepdims=True, dtype=dtype)

    def svdvals(self, xp: Namespace, m: Any) -> Any:
        """Singular values of a matrix, or of each matrix of a stack, lazily.

        One matrix (``m.ndim == 2``) goes through ``dask.array.linalg.svd`` (tall-and-skinny
        QR: the longer dimension may stay chunked, out of core). A stack (``m.ndim > 2``) is
        rechunked so that every chunk holds whole matrices, and each chunk's singular values
        come from NumPy's ``svd`` (``map_blocks``): each matrix must fit in memory.
        """
        import dask.array as da

        if any(d != d for d in m.shape):  # unknown chunk sizes: cannot be rechunked
            return _whole_svdvals(m)
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


def nonempty_chunks(a: Any) -> Any:
    """The dask array ``a`` without chunks of no elements, lazily (``a`` itself if it has none).

    Dask computes some arrays with such chunks wrongly: an axis of one element in chunks
    ``(1, 0, 0)`` (``m[m[:, 0] > 4]`` keeping one row, after ``compute_chunk_sizes()``) is
    broadcast block by block, so ``a + 1`` computes to 3 rows where its shape says 1; an empty
    axis in chunks ``(0, 0)`` loses blocks of the graph (``Missing dependency``); and
    ``reshape(-1)`` of ``(1, 2), (6, 0)`` fails to compute. Each axis of known length keeps
    its non-empty chunks (one chunk for a length of 0 or 1); an axis of unknown chunk sizes
    (NaN) stays as it is.
    """
    chunks = tuple(
        c if any(n != n for n in c) else tuple(n for n in c if n) or (int(sum(c)),)
        for c in a.chunks
    )
    return a if chunks == a.chunks else a.rechunk(chunks)


def _shape(value: Any) -> tuple[float, ...]:
    """The shape of an array, of a nested list of numbers (NumPy's), or ``()`` of a number."""
    import numpy as np

    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else tuple(np.shape(value))


def unknown_broadcast(operands: Sequence[Any]) -> bool:
    """Whether ``operands`` meet an unknown dimension (``x[x > 0]``) against one that is not 1.

    Dask broadcasts chunk by chunk from the shapes alone: it refuses an unknown length against
    a known one above 1 (``shapes (nan,) (3,)``), and pairs two unknown lengths chunk by
    chunk, though their chunks need not line up (a chunk of one element would silently
    broadcast against one of two). Such calls go through :func:`joined_call` instead.
    """
    shapes = [_shape(o) for o in operands]
    for i, a in enumerate(shapes):
        for b in shapes[i + 1 :]:
            for m, n in zip(reversed(a), reversed(b), strict=False):
                if (m != m and n != 1) or (n != n and m != 1):
                    return True
    return False


def _joined_shape(shapes: Sequence[tuple[float, ...]]) -> tuple[float, ...]:
    """The broadcast shape, NaN where unknown: a known length above 1 decides an unknown one."""
    out: list[float] = []
    for dims in itertools.zip_longest(*(reversed(s) for s in shapes), fillvalue=1):
        known = [d for d in dims if d == d and d != 1]
        out.append(known[0] if known else (math.nan if any(d != d for d in dims) else 1))
    return tuple(reversed(out))


def joined_call(fn: Callable[..., Any], operands: Sequence[Any], *, dtype: Any) -> Any:
    """``fn(*operands)`` on NumPy arrays in one task, each dask operand joined into one block.

    For a call whose shapes dask cannot broadcast before computing (:func:`unknown_broadcast`),
    lazily, as :func:`_whole_svdvals` joins a matrix: ``fn`` is anyclip's own function, which
    then sees the real shapes, so it gives NumPy's values (TF's) or raises its own shape error
    (naming the argument) when the graph is computed. The whole array must fit in one task.
    Inside :class:`~anyclip.flush_subnormals` at call time, the task flushes too.
    """
    import dask.array as da
    from dask.delayed import delayed as delayed_

    delayed: Callable[..., Any] = delayed_  # untyped in dask
    dask_args = [isinstance(o, da.Array) for o in operands]
    parts = [o.to_delayed().tolist() if d else o for o, d in zip(operands, dask_args, strict=True)]
    flush = bool(OPEN and flushing())
    value = delayed(_joined_call, pure=True)(fn, flush, dask_args, *parts)
    from_delayed: Callable[..., Any] = da.from_delayed  # untyped in dask
    shape = _joined_shape([_shape(o) for o in operands])
    return from_delayed(value, shape=shape, dtype=dtype)


def _joined_call(fn: Callable[..., Any], flush: bool, dask_args: list[bool], *parts: Any) -> Any:
    """:func:`joined_call`'s task: join the blocks, call ``fn``, say when a shape error came."""
    import numpy as np

    args = [np.block(p) if d else p for p, d in zip(parts, dask_args, strict=True)]
    try:
        with flush_subnormals(flush):
            return fn(*args)
    except ValueError as exc:
        msg = (
            f"{exc} [checked when the dask graph was computed: a dask array of unknown chunk "
            "sizes (such as `x[x > 0]`) has no shape before]"
        )
        raise ValueError(msg) from exc


def _known_shape(a: Any) -> bool:
    """Whether every dimension of the dask array ``a`` is known (not NaN)."""
    return all(d == d for d in a.shape)


def _tf_order_squares(
    xp: Namespace, arrays: Sequence[Any], *, half: bool, halve: bool = True, square: bool = True
) -> Any:
    """:meth:`DaskKernels.tf_order_squares` of float64 dask arrays: a 0-d dask array, lazy.

    Without ``square``, the sum of the elements themselves (:meth:`DaskKernels.tf_sum` of
    every element, one array of known shape).
    """
    import dask.array as da
    import numpy as np

    dtype = np.dtype(arrays[0].dtype)
    packet, _ = eigen_packet(dtype)

    blockwise: Callable[..., Any] = da.blockwise  # untyped in dask
    nodes: list[tuple[int, int]] = []  # the known arrays' nodes, in order: one sum each
    # per array: ("tree", its tree over its nodes' positions), ("own", the position of its
    # sum in ``owns``) for an unknown shape, or ("empty", None)
    trees: list[tuple[str, Any]] = []
    parts: list[Any] = []
    owns: list[Any] = []
    for a in arrays:
        if not _known_shape(a):
            trees.append(("own", len(owns)))
            owns.append(reduce_sum(xp, a * a if square else a, None, keepdims=False))
            continue
        n = math.prod(int(d) for d in a.shape)
        if not n:
            trees.append(("empty", None))
            continue
        flat = a.reshape(-1)  # dask's reshape (row-major), lazy
        first = len(nodes)
        trees.append(("tree", tf_order_nodes(n, max(flat.chunks[0]), nodes, packet)))
        cut = tuple(length for _, length in nodes[first:])
        # one sum per node, through blockwise: its `token=` names the layer in every dask
        # accepted (map_blocks's `token=` warns in dask 2024.1, and its `name=`, a prefix
        # there, is the whole key name in later releases)
        parts.append(
            blockwise(
                functools.partial(_node_sum, square=square),
                "i",
                flat.rechunk((cut,)),
                "i",
                adjust_chunks={"i": 1},
                dtype=dtype,
                meta=np.empty((0,), dtype=dtype),
                token="anyclip-tf-order-node",
            )
        )
    concatenate: Callable[..., Any] = da.concatenate  # untyped in dask
    stack: Callable[..., Any] = da.stack  # untyped in dask
    inputs: list[Any] = []
    if parts:
        inputs += [parts[0] if len(parts) == 1 else concatenate(parts), "i"]
    if owns:
        inputs += [stack(owns), "j"]
    if not inputs:  # only empty arrays
        return da.zeros((), dtype=dtype)
    total = functools.partial(
        _tf_order_total, trees=trees, half=half, halve=halve, nodes=bool(parts)
    )
    return blockwise(
        total,
        "",
        *inputs,
        concatenate=True,
        dtype=dtype,
        meta=np.empty((), dtype=dtype),
        token="anyclip-tf-order-total",
    )


def _whole_axes(y: Any, named: tuple[int, ...]) -> dict[int, Any]:
    """The rechunking that puts the ``named`` axes of ``y`` in one chunk each.

    The other axes keep their chunks while a chunk stays within dask's ``array.chunk-size``;
    past it they take dask's ``"auto"`` sizes, so that joining a long reduced axis does not
    make chunks that many times larger.
    """
    import dask

    limit = dask.utils.parse_bytes(dask.config.get("array.chunk-size"))
    joined = math.prod(int(y.shape[i]) for i in named)
    widest = math.prod(max(c) for i, c in enumerate(y.chunks) if i not in named)
    kept: Any = "auto" if joined * widest * y.dtype.itemsize > limit else None
    return {i: -1 if i in named else kept for i in range(y.ndim) if i in named or kept}


def _tf_sum_chunk(
    block: Any, axes: tuple[int, ...], whole: tuple[int, ...], block_info: Any = None
) -> Any:
    """One chunk's TF-order sum over ``axes`` (held whole), placed in the ``whole`` array."""
    import array_api_compat.numpy as np_xp
    import numpy as np

    where = block_info[0]["array-location"]
    kept = [i for i in range(len(whole)) if i not in axes]
    grids = np.meshgrid(*(np.arange(*where[i]) for i in kept), indexing="ij")
    place = np.ravel_multi_index(grids, [whole[i] for i in kept]) if kept else np.zeros(())
    out = tuple(1 if i in axes else int(n) for i, n in enumerate(block.shape))
    packet, leaf = eigen_packet(block.dtype)
    with np.errstate(all="ignore"):
        total = tf_axes_sum(
            np_xp,
            block,
            axes,
            packet=packet,
            leaf=leaf,
            row_sums=numpy_tf_row_sums,
            in_turn=numpy_in_turn,
            whole=whole,
            place=np.reshape(place, out),
        )
    return np.asarray(total)


def _node_sum(block: Any, square: bool = True) -> Any:
    """The sum of (with ``square``) squares of one node of TF's tree (a NumPy chunk), as (1,).

    In TF's order (:func:`~anyclip._kernels._tforder.tf_order_sums`).
    """
    import numpy as np

    with np.errstate(all="ignore"):  # TF's arithmetic: inf and NaN without warnings
        sums = tf_order_sums(np, block, [int(block.size)], square=square)
    return np.asarray(sums, dtype=block.dtype)


def _tf_order_total(
    *sums: Any, trees: list[tuple[str, Any]], half: bool, halve: bool, nodes: bool
) -> Any:
    """The arrays' total from their nodes' sums and their own sums (NumPy, in order).

    ``sums``: the nodes' sums (where ``nodes``), then the sums of the arrays of unknown
    shape (where any); ``trees`` as in :func:`_tf_order_squares`.
    """
    import numpy as np

    dtype = sums[0].dtype
    # NumPy scalars: float32 nodes are added in float32 (Python floats would add in float64)
    values = list(sums[0]) if nodes else []
    owns = list(sums[-1]) if len(sums) > int(nodes) else []
    per_array = [
        tf_order_walk(at, values) if kind == "tree" else owns[at] if kind == "own" else 0.0
        for kind, at in trees
    ]
    total = tf_order_total(np, per_array, half=half, dtype=dtype, halve=halve)
    return np.asarray(total, dtype=dtype)


def _cast_map_chunk(block: Any, *operands: Any, fn: Any, acc: Any) -> Any:
    """``astype(fn(np, astype(block, acc), *operands), block.dtype)`` for one NumPy chunk."""
    import array_api_compat.numpy as npx
    import numpy as np

    with np.errstate(all="ignore"):  # TF's arithmetic: inf and NaN without warnings
        return fn(npx, block.astype(acc), *operands).astype(block.dtype)


def _max_from(block: Any, axis: Any, keepdims: bool, initial: Any) -> Any:
    """``numpy.max`` of one chunk (or of joined partial maxima), starting from ``initial``."""
    import numpy as np

    return np.max(block, axis=axis, keepdims=keepdims, initial=initial)


def _whole_svdvals(m: Any) -> Any:
    """Singular values of ``m``, of unknown chunk sizes, joined into one task, lazily.

    Their number (``min(rows, cols)``) may be unknown too: the result's last axis is. Every
    matrix must fit in memory, as for a stack in :meth:`DaskKernels.svdvals`.
    """
    import dask.array as da
    import numpy as np
    from dask.delayed import delayed as delayed_

    rows, cols = m.shape[-2:]
    k = min(rows, cols) if rows == rows and cols == cols else np.nan
    delayed: Callable[..., Any] = delayed_  # untyped in dask
    value = delayed(_joined_svdvals)(m.to_delayed().tolist())
    from_delayed: Callable[..., Any] = da.from_delayed  # untyped in dask
    return from_delayed(value, shape=(*m.shape[:-2], k), dtype=m.dtype)


def _joined_svdvals(blocks: Any) -> Any:
    """Singular values of the matrices that the nested list of NumPy ``blocks`` tiles."""
    import numpy as np

    m = np.block(blocks)
    if 0 in m.shape[-2:]:
        return np.zeros((*m.shape[:-2], 0), dtype=m.dtype)
    return np.linalg.svd(m, compute_uv=False)


def _stacked_svdvals(block: Any) -> Any:
    """Singular values of every matrix in a NumPy block (the last two axes)."""
    import numpy as np

    return np.linalg.svd(block, compute_uv=False)
