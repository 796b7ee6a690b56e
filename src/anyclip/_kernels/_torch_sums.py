"""torch's fast sums of squares: when they apply, and TF's rounding kept on each path.

Layer: kernels (below :mod:`anyclip._kernels._torch`, whose :class:`TorchKernels` calls them).
:func:`_fast_ok` says when a fast path may run (float32 or float64, or the half-precision
dtypes, no gradient recorded, no DTensor, no ``torch.func`` transform); float32 and float64 sums
of squares from row norms of at most ``ROW`` elements (:func:`_partial_norms`); bfloat16 and
float16 sums of ``l2_loss`` in multi-tensor ops (:func:`_half_precision_half_squares`); and
float64 CPU sums in TF's order on a NumPy view of the tensors' memory (:func:`_tf_order`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from anyclip._compat import HALF_PRECISION
from anyclip._kernels._base import ROW, SQUARE_ROW, bfloat16_square_sum, groups
from anyclip._kernels._dist import (
    any_dtensor,
)
from anyclip._kernels._tfaxes import cumulative_in_turn
from anyclip._kernels._tforder import (
    numpy_in_turn,
    tf_order_sums,
    tf_order_total,
)
from anyclip._kernels._tforder_xp import numpy_tf_row_sums, tf_order_row_sums, tf_order_squares
from anyclip._kernels._torch_multi import cpu_half_square_sums
from anyclip._numerics import reduce_sum, torch_faking
from anyclip._typing import Namespace

__all__ = [
    "HALF_JOIN",
    "SERIAL",
    "torch_in_turn",
    "torch_numpy_rows",
    "torch_tf_row_sums",
]


#: The dtypes of the float32/float64 fast paths (sums by row norms, ``_foreach_mul``).
_FAST = ("float32", "float64")


def _fast_ok(
    arrays: Sequence[Any], *, one_dtype: bool = False, dtypes: tuple[str, ...] = _FAST
) -> bool:
    """float32 or float64, one dtype, no gradient recorded through ``arrays``, no DTensor.

    ``one_dtype``: the caller has seen that ``arrays`` share ``arrays[0]``'s dtype (one pass
    fewer over a list of thousands). ``dtypes``: the dtypes (names) a fast path takes
    (:data:`~anyclip._compat.HALF_PRECISION` for the half-precision sums and scaling).

    A ``DTensor`` takes the generic code (DTensor's own ops: a reduction over a sharded
    dimension is a local reduction plus one all-reduce); the fast paths would flatten it,
    which DTensor answers with an all-gather. Global norms of DTensors never get here: they
    sum each local shard (:func:`anyclip._kernels._dist.dtensor_half_squares`).
    """
    import torch

    dtype = arrays[0].dtype
    if any_dtensor(arrays):
        return False
    if dtype not in [getattr(torch, name) for name in dtypes]:
        return False
    # one pass per check, no function call per tensor (torch.compile traces these reads)
    if torch.is_grad_enabled() and any([a.requires_grad for a in arrays]):
        return False
    # torch.func.vmap has no batching rule for _foreach_norm. Tensors are looked at only
    # inside a transform: outside one, a wrapped tensor is one that escaped it, which every
    # operation refuses (the generic path and this one alike).
    functorch = torch._C._functorch
    if (
        not torch.compiler.is_compiling()
        and functorch.maybe_current_level() is not None
        and any(map(functorch.is_functorch_wrapped_tensor, arrays))
    ):
        return False
    return one_dtype or {a.dtype for a in arrays} == {dtype}


def _reduced_count(shape: Sequence[int], axes: tuple[int, ...] | None) -> int:
    """The number of elements in each norm over ``axes`` of ``shape``.

    When it is 1, ``vector_norm`` returns ``abs(x)`` where TF squares (so ``x * x`` can
    overflow to inf or underflow to 0 first): the fast paths step aside.
    """
    count = 1
    for a in range(len(shape)) if axes is None else axes:
        count *= shape[a]
    return count


#: The largest group of small CPU tensors joined by :func:`_partial_norms` holds fewer than
#: ``2 * SERIAL`` elements: below ATen's ``GRAIN_SIZE`` (32,768), under which ``cat`` takes its
#: serial copy loop and a reduction runs on the calling thread.
SERIAL = 1 << 14


def _partial_norms(torch: Any, arrays: Sequence[Any]) -> Any:
    """A 1-D tensor of norms whose squares sum to the sum of squares of every element.

    ``torch._foreach_norm`` and ``torch.linalg.vector_norm`` accumulate float32 sequentially on
    CPU: over a million elements they are hundreds of ULP off (measured; TF is within a few).
    So each norm here covers at most ``ROW`` elements: every group of :func:`groups` (small
    arrays joined by one ``cat``, or ``_flatten_dense_tensors`` where ``cat`` refuses their
    shapes; on the CPU, fewer than ``2 * SERIAL`` elements per group) is cut into rows of
    ``ROW``, one
    ``vector_norm(dim=1)`` gives the row norms, the leftover tails go to one
    ``_foreach_norm``, and ``torch.sum`` (pairwise) adds the squares.
    """
    from torch._utils import _flatten_dense_tensors

    flatten: Callable[[Sequence[Any]], Any] = _flatten_dense_tensors  # untyped in torch
    tails: list[Any] = []
    parts: list[Any] = []

    def rows(flat: Any) -> None:
        m = flat.numel() // ROW
        if flat.numel() > m * ROW:
            tails.append(flat[m * ROW :])
        if m:
            parts.append(torch.linalg.vector_norm(flat[: m * ROW].view(m, ROW), dim=1))

    # On the CPU, groups of fewer than GRAIN_SIZE elements: torch's cat and reduction then run
    # on the calling thread (a larger one starts its thread pool, which waits for a free core
    # on a busy machine, and cats 2,000 inputs one copy each instead of one serial loop).
    cap = {"block": SERIAL, "join": SERIAL} if arrays[0].is_cpu else {}
    # `cat` along axis 0 lays the elements out in flatten's order, without the view of each
    # tensor that `_flatten_dense_tensors` makes (a third of a join's time for 256-element
    # tensors); where it refuses the shapes (mixed ndim, 0-d), flatten joins this group and
    # the rest of the call.
    cat_ok = not torch.compiler.is_compiling()
    for group in groups(arrays, torch.Tensor.numel, **cap):
        if len(group) == 1:
            flat = group[0].reshape(-1)
        elif cat_ok:
            try:
                flat = torch.cat(group).reshape(-1)
            except RuntimeError:
                cat_ok = False
                flat = flatten(group)
        else:
            flat = flatten(group)
        rows(flat)
    if tails:
        parts.append(torch.stack(torch._foreach_norm(tails, 2)))
    if not parts:  # only empty arrays
        return torch.zeros(1, dtype=arrays[0].dtype, device=arrays[0].device)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


#: Most bfloat16 elements squared and summed at a time by :func:`_cpu_half_losses` (whole
#: rows of :data:`~anyclip._kernels._base.SQUARE_ROW`): its two buffers, 1.5 MiB in all,
#: stay in a CPU's cache between the square, the copy to float32 and the sum, and are no
#: larger for a larger array.
BFLOAT16_BLOCK = 1 << 18

#: Most elements squared at a time by :func:`_half_precision_half_squares` (a larger array
#: alone): its temporary squares are at most 32 MiB of bfloat16 or float16 beyond the largest
#: array.
HALF_JOIN = 1 << 24


def _half_precision_half_squares(xp: Namespace, torch: Any, arrays: Sequence[Any]) -> Any | None:
    """TF's ``sum(l2_loss(t) for t in arrays)`` of bfloat16 or float16 ``arrays``; or None.

    The generic formula (:func:`anyclip._kernels._base._half_square_sum`, then the sum of the
    stack), step for step: each array squared in its dtype (TF's ``Square``: rounded to
    bfloat16 or float16, inf past the dtype's range); float16 squares halved in place in
    float16 (TF's ``L2Loss``: halves below twice the smallest subnormal round) and summed
    by torch's float16 sum; bfloat16 squares summed in float32, each array's sum rounded once
    to bfloat16 and halved there (TF's ``reduce_sum``; the halves of the whole list at once);
    and these ``l2_loss`` added as the generic code adds them (:func:`reduce_sum` of their
    stack). No cast copy of an array.

    On CUDA, in multi-tensor ops on consecutive groups of at most :data:`HALF_JOIN`
    elements: ``torch._foreach_mul(group, group)``, for float16 ``torch._foreach_mul_(squares,
    0.5)``, and one ``torch._foreach_norm(squares, 1, dtype=torch.float32)`` (the squares are
    not negative; CUDA's multi-tensor kernel reads them once and accumulates in float32); the
    temporaries are one group's squares. Elsewhere (the CPU, where torch's foreach ops loop
    over the arrays), one array at a time (:func:`_cpu_half_losses`; runs of small arrays
    of one size as the rows of one matrix, same bits:
    :func:`~anyclip._kernels._torch_multi.cpu_half_square_sums`), with the generic
    :func:`reduce_sum` (torch's cascade sum: ``_foreach_norm(halves, 1)`` adds float32 in
    sequence there and was 1 ulp off in 5 of 400 bfloat16 arrays of 10**3 to 10**6.5
    elements). None where :func:`_fast_ok` refuses ``arrays`` for
    :data:`~anyclip._compat.HALF_PRECISION` (a recorded gradient, a ``torch.func``
    transform, a DTensor, another dtype), and while
    ``torch.compile`` traces: the generic steps then round each square and sum to the dtype
    as here (Inductor would keep them in float32 and skip the rounding of ``.to(dtype)``).
    """
    if not _fast_ok(arrays, one_dtype=True, dtypes=HALF_PRECISION) or torch.compiler.is_compiling():
        return None
    if not arrays[0].is_cuda:  # CPU foreach ops loop over the arrays: runs of small ones joined
        parts = cpu_half_square_sums(torch, arrays, _cpu_half_losses(xp, torch, arrays))
        sums = parts[0] if len(parts) == 1 else torch.cat(parts)
        return reduce_sum(xp, _losses(torch, sums, arrays[0].dtype), None, keepdims=False)
    return _multi_tensor_half_squares(xp, torch, arrays)


def _losses(torch: Any, sums: Any, dtype: Any) -> Any:
    """Each array's ``l2_loss`` in ``dtype`` from ``sums`` (1-D).

    float16 ``sums`` are the ``l2_loss`` already; bfloat16 sums of squares (float32) are
    rounded to bfloat16 and halved there, as
    :func:`~anyclip._kernels._base._half_square_sum` does for each array.
    """
    if dtype != torch.bfloat16:
        return sums
    return sums.to(dtype).mul_(0.5)


def _multi_tensor_half_squares(xp: Namespace, torch: Any, arrays: Sequence[Any]) -> Any:
    """:func:`_half_precision_half_squares` by multi-tensor ops (CUDA's path), on any device."""
    dtype = arrays[0].dtype
    parts: list[Any] = []  # each group's l2_loss, 1-D, in the dtype
    for group in _half_groups(arrays):
        squares = torch._foreach_mul(group, group)
        if dtype != torch.bfloat16:
            torch._foreach_mul_(squares, 0.5)
        sums = torch.stack(torch._foreach_norm(squares, 1, dtype=torch.float32))
        parts.append(sums if dtype == torch.bfloat16 else sums.to(dtype))
        del squares
    sums = parts[0] if len(parts) == 1 else torch.cat(parts)
    return reduce_sum(xp, _losses(torch, sums, dtype), None, keepdims=False)


def _cpu_half_square_sum(xp: Namespace, torch: Any, v: Any) -> Any:
    """One array's sum for :func:`_losses` (off CUDA, 0-d).

    float16: its ``l2_loss``; bfloat16: its sum of squares in float32.
    The generic :func:`~anyclip._kernels._base._half_square_sum` with one temporary instead
    of two where float16 squares are halved (in place), and bfloat16's rounding and halving
    left to :func:`_losses`.
    """
    squares = torch.mul(v, v)
    if v.dtype == torch.bfloat16:
        return bfloat16_square_sum(xp, squares)
    squares.mul_(0.5)
    return reduce_sum(xp, squares, None, keepdims=False)


def _cpu_half_losses(xp: Namespace, torch: Any, arrays: Sequence[Any]) -> Callable[[Any], Any]:
    """One array of ``arrays`` at a time, its sum for :func:`_losses` (0-d; CPU).

    :func:`_cpu_half_square_sum`'s values, bit for bit, in buffers made once per call
    instead of temporaries per array, whose fresh memory the CPU faults in page by page: the
    squares go into the first (``out=``). float16 squares (a buffer for the largest array)
    are halved there in place and summed. bfloat16 squares are copied into the second, of
    float32, and summed there (what ``torch.sum(squares, dtype=float32)`` does after its
    own cast copy: the same float32 values in the same kernel); an array of more than
    :data:`~anyclip._kernels._base.SQUARE_ROW` elements goes through both buffers in blocks
    of :data:`BFLOAT16_BLOCK` elements (whole rows: each block's row sums are
    :func:`~anyclip._kernels._base.bfloat16_square_sum`'s), so that the buffers stay in the
    CPU's cache and hold 1.5 MiB whatever the arrays (the buffers for GPT-2's embedding,
    231 MB, took longer to fault in than the sums took). bfloat16 squares by
    ``torch.square`` (faster than ``mul``, and the same bits for all 65,536 bfloat16
    values, tested); float16 by ``mul``. A non-contiguous array (whose squares torch sums in
    its memory order) and every array while ``torch.compile`` traces take
    :func:`_cpu_half_square_sum`.

    What it still costs over torch's own bfloat16 norm (about 1.5 to 2.5 times its time on
    ResNet-50 and GPT-2 shapes on a 2-core CPU): three passes per array (square, copy to
    float32, sum) where ``vector_norm`` reads each array once, squaring in float32
    unrounded and adding in one sequential float32 accumulator, neither of which is TF's
    arithmetic; and each pass over a large array waits for torch's threads, slow on a busy
    machine (``vector_norm``'s single-output kernel runs on the calling thread). Halving
    bfloat16 after the sum instead of each square saves a pass (the halving was the
    slowest of four: 0.73 ms of 2.17 for 2.4 million elements on one thread). Joining a
    group's arrays into one buffer before the passes was slower (cache locality lost).
    """
    dtype = arrays[0].dtype
    buffers: list[Any] = []

    def buffer(i: int, n: int) -> Any:
        if not buffers:
            most = max(map(torch.Tensor.numel, arrays))
            if dtype == torch.bfloat16:  # whole rows, in blocks
                most = min(most, BFLOAT16_BLOCK)
            device = arrays[0].device
            buffers.append(torch.empty(most, dtype=dtype, device=device))
            if dtype == torch.bfloat16:
                buffers.append(torch.empty(most, dtype=torch.float32, device=device))
        return buffers[i][:n]

    def bfloat16_sum(flat: Any, out: Any = None) -> Any:  # up to one block, whole rows
        n = flat.numel()
        squares = buffer(0, n)
        torch.square(flat, out=squares)
        wide = buffer(1, n)
        wide.copy_(squares)
        if out is None:
            return torch.sum(wide)
        return torch.sum(wide.view(-1, SQUARE_ROW), dim=1, out=out)

    def loss(v: Any) -> Any:
        if not v.is_contiguous() or torch.compiler.is_compiling():
            return _cpu_half_square_sum(xp, torch, v)
        n, flat = v.numel(), v.reshape(-1)
        if dtype != torch.bfloat16:
            squares = buffer(0, n)
            torch.mul(flat, flat, out=squares)
            squares.mul_(0.5)
            return reduce_sum(xp, squares, None, keepdims=False)
        if n <= SQUARE_ROW:
            return bfloat16_sum(flat)
        m = n // SQUARE_ROW
        sums = torch.empty(m + 1, dtype=torch.float32, device=v.device)
        step = BFLOAT16_BLOCK // SQUARE_ROW
        for i in range(0, m, step):
            k = min(step, m - i)
            bfloat16_sum(flat[i * SQUARE_ROW : (i + k) * SQUARE_ROW], sums[i : i + k])
        sums[m] = bfloat16_sum(flat[m * SQUARE_ROW :])
        return torch.sum(sums)

    return loss


def _half_groups(arrays: Sequence[Any]) -> list[list[Any]]:
    """``arrays`` in consecutive groups of at most :data:`HALF_JOIN` elements (or one array)."""
    import torch

    if sum(map(torch.Tensor.numel, arrays)) <= HALF_JOIN:  # the common case: one group
        return [list(arrays)]
    out: list[list[Any]] = []
    group: list[Any] = []
    size = 0
    for a in arrays:
        n = a.numel()
        if group and size + n > HALF_JOIN:
            out.append(group)
            group, size = [], 0
        group.append(a)
        size += n
    if group:
        out.append(group)
    return out


def _tf_order(
    xp: Namespace, torch: Any, arrays: Sequence[Any], *, half: bool, halve: bool = True
) -> Any | None:
    """The sum of squares of float64 CPU ``arrays`` in TF's order, as a 0-d tensor, or None.

    float32 ``arrays`` too with ``half`` (``tf.linalg.global_norm``: each ``l2_loss`` and
    their sum in float32, in TF's float32 order; the row sums were up to 2 ulp from TF's
    global norm on real gradients).

    As the NumPy kernels (:mod:`anyclip._kernels._tforder`), on a NumPy view of each
    (joined) tensor's memory (``Tensor.numpy(force=True)``: no copy for a CPU tensor): each
    array's sum of squares in TF 2.21's order, then (``half``) their halves summed as
    ``tf.linalg.global_norm`` does. Without NumPy, the same order in torch operations
    (:func:`~anyclip._kernels._tforder_xp.tf_order_squares`, slower). None for other dtypes,
    other devices (the sums are read on the host), and while ``torch.compile`` traces.
    ``halve=False`` (with ``half``): the arrays' whole sums, in that order.
    """
    if torch.compiler.is_compiling():
        return None
    half32 = half and arrays[0].dtype == torch.float32
    if arrays[0].dtype != torch.float64 and not half32:
        return None
    if not all([a.is_cpu for a in arrays]):
        return None
    np = _numpy()
    if np is None or _fake(torch, arrays):
        return tf_order_squares(xp, arrays, half=half, halve=halve)
    from torch._utils import _flatten_dense_tensors

    flatten: Callable[[Sequence[Any]], Any] = _flatten_dense_tensors  # untyped in torch
    per_array: list[float] = []
    # small tensors joined fewer than 2 * SERIAL elements at a time: torch's `cat` then
    # copies on the calling thread (a larger one waited 50 ms for its threads on a busy
    # machine, for ResNet-50's 119 small tensors)
    with np.errstate(all="ignore"):  # TF's arithmetic: inf and NaN without warnings
        for group in groups(arrays, torch.Tensor.numel, block=SERIAL, join=SERIAL):
            flat = group[0].reshape(-1) if len(group) == 1 else flatten(group)
            sizes = [int(a.numel()) for a in group]
            per_array += tf_order_sums(np, flat.numpy(force=True), sizes, square=True)
        dtype = arrays[0].dtype
        wide = np.float32 if half32 else None
        total = tf_order_total(np, per_array, half=half, dtype=wide, halve=halve)
    return torch.tensor(total, dtype=dtype)


def torch_numpy_rows(rows: Any) -> Any | None:
    """A NumPy view of the CPU tensor ``rows``'s memory, for TF-order row sums; or None.

    :func:`~anyclip._kernels.tf_row_sums` then runs on NumPy (its in-order reduction,
    :func:`~anyclip._kernels._tforder.numpy_rows_in_order`; torch's own ``sum`` adds in its
    cascade order, not TF's, and its elementwise steps on small blocks measured 25 times
    NumPy's on a loaded 2-core CPU). None (the generic torch code) on other devices, while
    a gradient is recorded, under a ``torch.func`` transform, while ``torch.compile``
    traces, or without NumPy.
    """
    import torch

    if not rows.is_cpu or torch.compiler.is_compiling() or not _fast_ok([rows], one_dtype=True):
        return None
    if _numpy() is None or _fake(torch, [rows]):
        return None
    return rows.numpy(force=True)


def _fake(torch: Any, arrays: Sequence[Any]) -> bool:
    """Whether ``arrays`` have no memory to view: a ``FakeTensorMode`` is active or one is fake.

    ``torch.export`` and shape propagation run a computation on fake CPU tensors, which
    ``Tensor.numpy`` refuses ("not supported for tensor subclasses"): the same order in
    torch operations then (:mod:`anyclip._kernels._tforder_xp`), as where NumPy is missing.
    """
    from torch._subclasses.fake_tensor import FakeTensor

    return torch_faking() or any([isinstance(a, FakeTensor) for a in arrays])


def torch_tf_row_sums(xp: Namespace, rows: Any, **kwargs: Any) -> Any:
    """:func:`~anyclip._kernels._tforder_xp.tf_order_row_sums` of a torch ``rows``.

    On a NumPy view of the tensor's memory where :func:`torch_numpy_rows` gives one (NumPy's
    in-order reduction of the packet accumulators' rows), else in torch operations.
    ``kwargs``: ``packet``, ``leaf`` and optionally ``square`` and ``phase``. NumPy's
    overflow warnings are silenced there, as torch's arithmetic gives inf without one.
    """
    view = torch_numpy_rows(rows)
    if view is None:
        return tf_order_row_sums(xp, rows, **kwargs)
    import array_api_compat.numpy as np_xp
    import numpy as np
    import torch

    with np.errstate(all="ignore"):  # TF's (and torch's) arithmetic: inf without a warning
        return torch.from_numpy(numpy_tf_row_sums(np_xp, view, **kwargs))


def torch_in_turn(xp: Namespace, z: Any) -> Any:
    """The slices of a torch ``z``'s first axis added one after another.

    On a NumPy view of the tensor's memory where :func:`torch_numpy_rows` gives one
    (:func:`~anyclip._kernels._tforder.numpy_in_turn`, NumPy's in-order reduction), else
    torch's running sum (``cumsum`` adds in order on the CPU; its backward is the gradient of
    a sum, whatever its order).
    """
    view = torch_numpy_rows(z)
    if view is None:
        return cumulative_in_turn(xp, z)
    import numpy as np
    import torch

    with np.errstate(all="ignore"):  # as torch_tf_row_sums
        return torch.from_numpy(numpy_in_turn(xp, view))


def _numpy() -> Any | None:
    """NumPy, or None where it is not installed (torch does not need it)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy
