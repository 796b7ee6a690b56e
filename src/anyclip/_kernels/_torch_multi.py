"""torch kernels: sums of squares of many arrays in a few operations (CUDA, and small CPU arrays).

Layer: kernels. Called by :class:`~anyclip._kernels._torch.TorchKernels` for CUDA tensors
(``Tensor.is_cuda``: NVIDIA and ROCm builds) when its float32/float64 fast path applies
(:func:`~anyclip._kernels._torch._fast_ok`: no gradient recorded, no ``torch.func``
transform, no DTensor).

Why CUDA has its own route: on the CPU, ``torch._foreach_norm`` and ``vector_norm`` add float32
in sequence (hundreds of ULP off over a million elements), so the CPU route cuts every array
into rows of ``ROW`` elements and takes one ``vector_norm(dim=1)`` per large array
(:func:`~anyclip._kernels._torch._partial_norms`): a kernel launch per large array, plus a view
and a slice of each on the host (the likely cause of anyclip's global norm taking twice torch's
own on an H200 for ResNet-50 and GPT-2 shapes; not re-measured yet). Here every array of the
call goes to one ``torch._foreach_norm(arrays, 2, dtype=float64)``: torch's multi-tensor kernel
accumulates in the output dtype's arithmetic, so each float32 square (exact in float64) is
added in float64 (CUDA adds each chunk of an array in a tree, then the chunks); the float64
norms are squared, halved and added in float64, and the total rounded once to the arrays'
dtype. That is the correctly rounded sum of squares but for float64's own rounding (2**-52
relative, far below a float32 ULP), at least as close to TF's as the rows were. float64 inputs
are summed in float64 as before (CUDA's tree order, not TF's CPU order: TF's order is the CPU's
float64 route).

One difference this route has from TF's float32 arithmetic: squares below float32's smallest
subnormal (elements under about 3.7e-23 in magnitude) are 0 in TF and kept here, so a list
made only of such elements has a tiny non-zero norm where TF's is 0 (a clipped result is the
same: the clip factor is 1 either way). Not yet measured against TF on a GPU.

No host sync: no value is read, nothing is copied from the host, no shape depends on values.

On the CPU, bfloat16 and float16 lists of many small arrays: :func:`cpu_half_square_sums`
joins each run of arrays of one size and takes their ``l2_loss`` as the rows of one matrix,
with the same bits as one array at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyclip._kernels._base import ATEN_GRAIN

__all__ = ["cpu_half_square_sums", "cuda_half_squares", "cuda_norm"]

#: Runs joined by :func:`cpu_half_square_sums` hold fewer elements than ATen's grain (their
#: operations then never wait for torch's thread pool, slow on a busy machine: runs of
#: 512,000 elements made 2,000 arrays of 256 slower than one array at a time), so each array
#: of a run has fewer too, and its sum is never split between threads (whose partial sums a
#: row of a matrix would not share).
GRAIN = ATEN_GRAIN


def cuda_half_squares(torch: Any, arrays: Sequence[Any], *, halve: bool = True) -> Any:
    """``sum(l2_loss(t) for t in arrays)`` of float32 or float64 ``arrays`` (one device), 0-d.

    ``torch._foreach_norm(arrays, 2, dtype=float64)`` (squares accumulated in float64), the
    norms squared, halved and added in float64, rounded once to the arrays' dtype: six
    operations whatever the number and sizes of the arrays (``_foreach_norm`` launches once
    per chunk list and once per few hundred arrays for the chunks' sums). Runs on any device
    (the tests run it on the CPU, where torch adds each array in float64 in sequence).
    ``halve=False``: the squares' sum, not halved (:meth:`~anyclip._kernels.Kernels.unhalved`).
    """
    dtype = arrays[0].dtype
    norms = torch.stack(torch._foreach_norm(arrays, 2, dtype=torch.float64))
    squares = norms * norms
    return torch.sum(squares * 0.5 if halve else squares).to(dtype)


def cuda_norm(torch: Any, x: Any, axes: tuple[int, ...] | None) -> Any:
    """The Euclidean norm of ``x`` over ``axes`` (every axis for None), axes kept: one launch.

    ``vector_norm`` itself: CUDA's reduction tree is accurate over any length (the CPU cuts
    long sums into rows instead). The caller keeps the one-element norms, where
    ``vector_norm`` gives ``abs(x)`` and TF squares, on the generic code.
    """
    return torch.linalg.vector_norm(x, dim=axes, keepdim=True)


def cpu_half_square_sums(torch: Any, arrays: Sequence[Any], one: Any) -> list[Any]:
    """Each array's ``one`` (bfloat16 or float16, on the CPU), in order, as 1-D parts.

    ``one(v)`` is one array's sum as a 0-d tensor (the caller's route: float16 squares,
    halved in place, summed by torch's float16 sum, which is ``l2_loss``; bfloat16 squares
    summed in float32, which the caller rounds and halves). Each run of consecutive arrays of
    one size, fewer than :data:`GRAIN` elements a run, is joined by one ``cat`` and taken as
    the rows of one matrix: squared (float16: halved in place) and summed along the rows in
    the same way. A row of a contiguous matrix is summed by the CPU's sum kernel exactly as the same
    elements alone (one thread, the same vector loop), and the squares and halves are
    elementwise: the bits of ``one`` (tested against it), with each step once per run
    instead of once per array (2,000 arrays of 256 elements: 8,000 operations became 80).
    """
    parts: list[Any] = []
    i, n = 0, len(arrays)
    while i < n:
        size = arrays[i].numel()
        j = i + 1
        if 0 < size < GRAIN // 2:
            most = (GRAIN - 1) // size
            while j < n and j - i < most and arrays[j].numel() == size:
                j += 1
        if j - i == 1:
            parts.append(torch.reshape(one(arrays[i]), (1,)))
        else:
            rows = torch.cat([a.reshape(-1) for a in arrays[i:j]]).view(j - i, size)
            squares = torch.mul(rows, rows)
            # as `one`: bfloat16 squares summed in float32, float16 halves by torch's float16 sum
            if rows.dtype == torch.bfloat16:
                parts.append(torch.sum(squares, dim=1, dtype=torch.float32))
            else:
                parts.append(torch.sum(squares.mul_(0.5), dim=1))
        i = j
    return parts
