"""Per-example (DP-SGD) clipping: TF Privacy's, optax's and Opacus's rules, batched.

Layer: public (argument checks, namespace resolution, docstrings; :mod:`anyclip.tree`
re-exports the functions) over this module's own array-API core (the ``_core_`` functions).

Every leaf of ``grads`` holds one gradient per example along its first axis. The three
libraries differ only in the factor each example's gradient is multiplied by before the sum:

* TF Privacy (``style="tf"``): ``tf.clip_by_global_norm(grads, l2_norm_clip)`` on each
  example, i.e. ``c * minimum(1 / norm, 1 / c)``, NaN for a non-finite norm (TF's factor,
  :func:`anyclip._core.global_scale`), with TF's global norm ``sqrt(sum(l2_loss) * 2)``;
* optax (``style="optax"``, ``optax.per_example_global_norm_clip``):
  ``nan_to_num(minimum(c / norm, 1), nan=1)``;
* Opacus (``style="opacus"``, ``DPOptimizer.clip_and_accumulate``):
  ``minimum(c / (norm + 1e-6), 1)``, rounded as torch computes it
  (:func:`_core_opacus_factors`, :func:`_core_vector_norms`).

The per-example sums of squares are one reduction per leaf over its flattened example axes
(:meth:`anyclip._kernels.Kernels.row_squares`: ``einsum`` on NumPy, ``vecdot`` on torch, a sum
that XLA fuses with the square under ``jax.jit``); under TF's rule they are TF's ``l2_loss``
per leaf and their sum, in Eigen's order (:func:`_core_tf_half_squares`; float16 and
bfloat16 squares halved and rounded before they are added, as TF's ``L2Loss``).
The weighted sum over the batch is one ``tensordot`` per leaf for optax's and Opacus's rules
(as their ``einsum``); for TF's it is TF 2.21's ``reduce_sum`` over the stacked clipped
examples, in Eigen's order (:func:`_core_tf_sum`: a Python loop over groups of four
examples, each a vectorised add; on JAX one compiled ``lax.fori_loop`` over them,
:func:`anyclip._kernels.tf_rows_sum`).
No clipped copy of the per-example gradients is made, so the memory is the per-example
gradients plus the output. (The generic code, and torch while it records a gradient or runs under
``torch.func``, square one leaf at a time.) Everything is array-API
code: it runs on every backend, under ``jax.jit``/``jax.vmap``, ``torch.compile`` and
``torch.func.vmap``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, cast

from anyclip._compat import HALF_PRECISION, dtype_name, namespace
from anyclip._core import global_scale
from anyclip._kernels import (
    Kernels,
    kernels_for,
    rounded_apart,
    tf_row_sums,
    tf_rows_sum,
    tf_vector_sum,
)
from anyclip._kernels._dist import all_reduce, check_group
from anyclip._kernels._tforder_xp import rounded_cast
from anyclip._keywords import hints_keywords
from anyclip._numerics import as_array, constant, quiet, sqrt
from anyclip._policy import native_order, scalar_operand
from anyclip._policy_dtypes import default_float, dtype_kind, resolve_accumulate_dtype
from anyclip._pytree import flatten
from anyclip._typing import DTypeLike, Namespace

__all__ = ["STYLES", "per_example_clip", "per_example_layer_clip"]

TreeT = TypeVar("TreeT")
Style = Literal["tf", "optax", "opacus"]
STYLES: tuple[str, ...] = ("tf", "optax", "opacus")

#: Opacus adds this to the per-sample norm before dividing (``max_grad_norm / (norm + 1e-6)``).
_OPACUS_EPS = 1e-6


# ------------------------------------------------------------------------- core
def _rows(xp: Namespace, a: Any) -> Any:
    """``a`` as one row per example, ``(batch, elements)``.

    The row length is given, not ``-1``, which a batch of no examples leaves undetermined
    (NumPy raised ``cannot reshape``, JAX ``ZeroDivisionError``, where optax sums nothing to
    zeros).
    """
    n = math.prod(a.shape[1:])  # symbolic under torch.compile: no int()
    return xp.reshape(a, (a.shape[0], n if n == n else -1))  # NaN: dask, unknown sizes


def _core_sq_norms(
    xp: Namespace, kernels: Kernels, arrays: Sequence[Any], acc: Any, half: bool
) -> Any:
    """The per-example sum of squares of every leaf together, shape ``(batch,)``, in ``acc``.

    ``half`` (TF's rule): the sum of each leaf's ``l2_loss = sum(t * t) / 2``, as
    ``tf.linalg.global_norm`` adds them (times 2 later).
    """
    total = None
    for a in arrays:
        flat = _rows(xp, a)
        if flat.dtype != acc:
            flat = xp.astype(flat, acc)
        s = kernels.row_squares(xp, flat)  # NumPy and torch: no squared copy of the leaf
        if half:
            s = s / constant(xp, 2.0, acc, s)
        total = s if total is None else total + s
    return total


#: The accumulation dtypes whose per-example norms follow TF 2.21's order (measured).
_TF_NORM_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: TF 2.21's ``L2Loss`` of float16 and bfloat16 (x86-64 wheels), measured bit for bit on 1 to
#: 40,000 elements: each square rounded to the dtype, halved and rounded (a subnormal half
#: of a float16 square rounds, to 0 below twice the smallest subnormal), then summed in the
#: dtype by Eigen's full reduction with packets of 8, its lanes added in float32, and a tree
#: split at 200 packets (float16) or 128 (bfloat16): (packet, leaf elements).
_TF_HALF_L2LOSS = {"float16": (8, 200 * 8), "bfloat16": (8, 128 * 8)}


def _core_tf_half_squares(xp: Namespace, arrays: Sequence[Any], acc: Any) -> Any:
    """Each example's ``sum(l2_loss)`` as ``tf.linalg.global_norm`` adds it, shape ``(batch,)``.

    TF Privacy clips each example with ``tf.clip_by_global_norm``, whose norm is
    ``sqrt(reduce_sum(stack([l2_loss(v) for v])) * 2)``: each leaf's ``l2_loss`` is
    ``sum(square(v) * 0.5)`` over that example's leaf in the order of Eigen's full
    reduction, and the leaves' values, stacked, are reduced the same way (packets of 8
    float32 or 4 float64, Eigen's tree). Both are
    :func:`anyclip._kernels._tforder_xp.tf_order_row_sums` over one row per example (measured
    bit for bit against TF 2.21's ``global_norm``). The squares are rounded apart from the
    sums (:func:`anyclip._kernels.rounded_apart`: no fused multiply-add under ``jax.jit``),
    a slice at a time: no squared copy of a leaf.

    float16 and bfloat16 (:data:`_TF_HALF_L2LOSS`): each half of a square is rounded to the
    dtype before it is added (summing the squares and halving the sum kept float16 squares
    whose halves TF rounds to 0: a norm 13 % above TF's for entries of 1e-4), the sums
    are in the dtype with float32 lanes; the stacked ``l2_loss`` values are then summed as
    TF's ``reduce_sum`` sums a vector: float16 as the leaves, bfloat16 in float32 (TF's
    accumulator for it, :data:`_TF_PACKET`), rounded once.
    """
    name = dtype_name(acc)
    packet, leaf = _TF_PACKET[name], _TF_LEAF[name]
    lanes = xp.float32 if name in _TF_HALF_L2LOSS else None
    loss_packet, loss_leaf = _TF_HALF_L2LOSS.get(name, (packet, leaf))
    halves = []
    for a in arrays:
        flat = _rows(xp, a)
        if flat.dtype != acc:
            flat = xp.astype(flat, acc)
        halves.append(
            tf_row_sums(xp, flat, packet=loss_packet, leaf=loss_leaf, square=0.5, lanes=lanes)
        )
    if len(halves) == 1:
        return halves[0]
    stacked = xp.stack(halves, axis=1)
    if name == "bfloat16":  # rounded to bfloat16 first (XLA would drop it before the cast)
        wide = xp.astype(rounded_apart(xp, stacked), xp.float32)
        total = tf_row_sums(xp, wide, packet=packet, leaf=leaf)
        return xp.astype(total, acc)
    return tf_row_sums(xp, stacked, packet=packet, leaf=leaf, lanes=lanes)


def _core_norms(
    xp: Namespace,
    kernels: Kernels,
    arrays: Sequence[Any],
    acc: Any,
    style: str,
    reduce: Callable[[Any], Any] | None = None,
) -> Any:
    """The per-example global norms, shape ``(batch,)``.

    ``"opacus"``: Opacus's order, the norm of the per-leaf norms (``torch.stack(per_param_norms,
    dim=1).norm(2, dim=1)``); the others: the square root of the summed squares.
    ``reduce`` (``group=``) sums this process's per-example sums of squares (Opacus: its
    norms squared) over the processes: one all-reduce of a ``(batch,)`` vector.
    """
    if style == "opacus":
        per_leaf = []
        for a in arrays:
            flat = _rows(xp, a)
            per_leaf.append(
                _core_vector_norms(xp, kernels, flat if flat.dtype == acc else xp.astype(flat, acc))
            )
        local = _core_vector_norms(xp, kernels, xp.stack(per_leaf, axis=1))
        return local if reduce is None else sqrt(xp, reduce(local * local))
    if style == "tf" and dtype_name(acc) in _TF_NORM_DTYPES:
        total = _core_tf_half_squares(xp, arrays, acc)
    else:
        total = _core_sq_norms(xp, kernels, arrays, acc, half=style == "tf")
    if reduce is not None:
        total = reduce(total)
    if style == "tf":
        return sqrt(xp, total * constant(xp, 2.0, acc, total))
    return sqrt(xp, total)


def _opmath(xp: Namespace, dtype: Any) -> Any:
    """The dtype torch computes an operation on ``dtype`` in: float32 for half precision."""
    return xp.float32 if dtype_name(dtype) in HALF_PRECISION else dtype


def _core_vector_norms(xp: Namespace, kernels: Kernels, rows: Any) -> Any:
    """``torch.linalg.vector_norm(rows, dim=-1)``, Opacus's per-sample norms, on any backend.

    torch sums the squares of a float16 or bfloat16 tensor in float32 and rounds the norm to
    the dtype once, so a norm above the dtype's square root of its maximum (256 in float16)
    stays finite; summing in the dtype made it inf, and the example's factor 0.
    """
    wide = _opmath(xp, rows.dtype)
    if wide == rows.dtype:
        return kernels.row_norms(xp, rows)
    return rounded_cast(xp, kernels.row_norms(xp, xp.astype(rows, wide)), rows.dtype)


def _core_opacus_factors(xp: Namespace, norms: Any, c: Any) -> Any:
    """Opacus's ``(max_grad_norm / (norms + 1e-6)).clamp(max=1.0)``, as torch computes it.

    torch's ``number / tensor`` is ``tensor.reciprocal() * number`` (``Tensor.__rtruediv__``):
    two roundings, not the one of a division (1 ULP apart in float32 for about one norm in
    six). Each of the three operations is computed in torch's float32 for float16 and
    bfloat16 norms (the Python numbers ``1e-6`` and ``c`` as float32, not rounded to the
    dtype) and rounded to the norms' dtype.
    """
    acc = norms.dtype
    wide = _opmath(xp, acc)

    def op(x: Any) -> Any:  # one torch operation's result, in the norms' dtype
        return x if wide == acc else rounded_cast(xp, x, acc)

    def up(x: Any) -> Any:
        return x if x.dtype == wide else xp.astype(x, wide)

    shifted = op(up(norms) + constant(xp, _OPACUS_EPS, wide, norms))
    inverse = op(constant(xp, 1.0, wide, norms) / up(shifted))
    factors = op(up(inverse) * up(c))
    return xp.minimum(factors, constant(xp, 1.0, acc, norms))


def _core_factors(xp: Namespace, norms: Any, c: Any, style: str) -> Any:
    """The factor each example's gradient is multiplied by, shape ``(batch,)``."""
    one = constant(xp, 1.0, norms.dtype, norms)
    if style == "tf":
        return global_scale(xp, c, norms, "tf")
    if style == "opacus":
        return _core_opacus_factors(xp, norms, c)
    m = xp.minimum(c / norms, one)
    # jnp.nan_to_num(m, nan=1.0): NaN -> 1, -inf -> the lowest finite value (c < 0 over 0)
    m = xp.where(xp.isnan(m), one, m)
    lowest = constant(xp, float(xp.finfo(norms.dtype).min), norms.dtype, norms)
    return xp.where(m == constant(xp, -math.inf, norms.dtype, norms), lowest, m)


def _core_weighted_sum(xp: Namespace, factors: Any, a: Any) -> Any:
    """``sum_b factors[b] * a[b]`` as one ``tensordot``, in ``a``'s dtype.

    One example is its product ``factors[0] * a[0]``, as XLA's ``tensordot`` gives it:
    NumPy's (BLAS) skips a zero factor there, so an inf or NaN entry of an example scaled by
    0 (an inf norm's ``c / inf``) came back 0 where optax's is NaN.
    """
    f = factors if factors.dtype == a.dtype else xp.astype(factors, a.dtype)
    if a.shape[0] == 1:
        return as_array(f[0] * a[0, ...])
    return as_array(xp.tensordot(f, a, axes=1))


#: Eigen's packet size (elements) in TF 2.21's x86-64 wheels: ``reduce_sum`` over axis 0
#: vectorises the first ``N - N % P`` columns; bfloat16 is summed as float32 (see below).
_TF_PACKET = {"float16": 8, "bfloat16": 8, "float32": 8, "float64": 4}
#: Elements of one leaf of Eigen's tree in a full reduction (1024 packets; 200 for float16).
_TF_LEAF = {"float16": 200 * 8, "bfloat16": 1024 * 8, "float32": 1024 * 8, "float64": 1024 * 4}
#: Below this many rows, TF's ``reduce_sum`` over axis 0 adds the rows one after another.
_TF_ROWS_INNER = 16
#: Columns summed at once: the products and accumulators held at a time are at most
#: ``8 * _TF_COLUMNS`` elements (or a sixteenth of the leaf's row, if larger).
_TF_COLUMNS = 1024


def _core_tf_sum(xp: Namespace, factors: Any, a: Any) -> Any:
    """``tf.reduce_sum(stack([a[b] * factors[b] for b]), axis=0)`` in TF 2.21's order.

    Each product ``a[b] * factors[b]`` is TF's ``v * cast(scale, v.dtype)`` (in ``a``'s
    dtype), and the products are added in the order TF 2.21's CPU kernel (Eigen) adds the
    rows of a ``(B, N)`` array reduced over axis 0, measured bit for bit against live TF:

    * ``B == 1``: the one product (TF copies an axis of one element: a ``-0.0`` stays);
    * ``B < 16``: the rows one after another, from ``+0.0``;
    * ``B >= 16``: four accumulators (from ``+0.0``) take rows ``j % 4`` of the first
      ``4 * (B // 4)`` rows, are combined as ``((a0 + a1) + a2) + a3``, then the last
      ``B % 4`` rows are added in turn; this holds for the first ``N - N % P`` columns
      (``P``: :data:`_TF_PACKET`), and the last ``N % P`` columns add the rows one after
      another;
    * ``N == 1`` (one element per example: TF drops the axes of one element and reduces the
      ``B`` products as one vector): Eigen's full reduction,
      :func:`anyclip._kernels.tf_vector_sum` (packets of ``P``, four
      accumulators, a tree split above :data:`_TF_LEAF` elements; float16's lanes reduced
      in float32). TF sums on one thread up to at least 20,000 float64 or 100,000 float32
      examples (measured); from about 60,000 float64 or 150,000 float32 its default threads
      split the sum, and its bits follow their number (single-threaded TF matched to
      1,000,003).

    float16 is added in float16; bfloat16 as float32 (TF's accumulator for it), rounded
    once at the end. The products are made a few rows and at most ``max(1024, N / 16)``
    columns at a time, so the memory is the output plus a fraction of one leaf; each is
    rounded before it is added (:func:`anyclip._kernels.rounded_apart`: no fused
    multiply-add under ``jax.jit``). The Python loops run over groups of four examples and
    column chunks: ``B / 4`` additions of ``(4, columns)`` blocks per chunk. On JAX (eager or
    traced) the same order runs as one ``lax.fori_loop`` over the groups of four
    (:func:`anyclip._kernels.tf_rows_sum`; no column chunks: the carry is ``(4, N)``), which
    a Python loop would unroll under ``jax.jit``.
    """
    b = int(a.shape[0])
    flat = _rows(xp, a)
    n = int(flat.shape[1])
    name = dtype_name(a.dtype)
    f = factors if factors.dtype == a.dtype else xp.astype(factors, a.dtype)
    f = xp.reshape(f, (b, 1))
    acc = xp.float32 if name == "bfloat16" else a.dtype
    zero = constant(xp, 0.0, acc, a)

    def products(lo: int, hi: int, c0: int, c1: int) -> Any:
        p = rounded_apart(xp, f[lo:hi, :] * flat[lo:hi, c0:c1])  # TF's v * cast(scale)
        return p if p.dtype == acc else xp.astype(p, acc)

    def in_turn(c0: int, c1: int, start: int, total: Any) -> Any:
        for lo in range(start, b, 4):
            p = products(lo, min(lo + 4, b), c0, c1)
            for k in range(int(p.shape[0])):
                total = total + p[k, :]
        return total

    def four_accumulators(c0: int, c1: int) -> Any:
        whole = b - b % 4
        acc4 = zero
        for lo in range(0, whole, 4):
            acc4 = acc4 + products(lo, lo + 4, c0, c1)
        total = ((acc4[0, :] + acc4[1, :]) + acc4[2, :]) + acc4[3, :]
        return in_turn(c0, c1, whole, total)

    cut = n - n % _TF_PACKET.get(name, 1) if b >= _TF_ROWS_INNER else 0
    if b == 0 or n == 0:  # zeros of shape (n,)
        total = xp.sum(flat * f, axis=0, dtype=acc)
    elif b == 1:
        total = products(0, 1, 0, n)[0, :]
    elif n == 1 and name in _TF_PACKET:
        p = products(0, b, 0, 1)[:, 0]
        lanes = xp.float32 if name == "float16" else None
        packet, leaf = _TF_PACKET[name], _TF_LEAF[name]
        total = xp.reshape(tf_vector_sum(xp, p, packet=packet, leaf=leaf, lanes=lanes), (1,))
    elif (total := tf_rows_sum(xp, f, flat, acc, cut)) is None:
        width = max(_TF_COLUMNS, -(-n // 16))
        parts = [four_accumulators(c0, min(c0 + width, cut)) for c0 in range(0, cut, width)]
        parts += [in_turn(c0, min(c0 + width, n), 0, zero) for c0 in range(cut, n, width)]
        total = parts[0] if len(parts) == 1 else xp.concat(parts)
    if total.dtype != a.dtype:
        total = xp.astype(total, a.dtype)
    return xp.reshape(total, tuple(a.shape[1:]))


# -------------------------------------------------------------------- arguments
def _check_style(style: Any) -> str:
    if style not in STYLES:
        msg = (
            f"`style` must be one of {STYLES} (TF Privacy's, optax's or Opacus's rule), "
            f"got {style!r}"
        )
        raise ValueError(msg)
    return cast(str, style)


def _batched(leaves: list[Any], ints: bool = False) -> tuple[Namespace, list[Any]]:
    """The namespace and the array leaves; refuse leaves without one shared batch axis.

    ``ints``: integer leaves are taken, cast to the namespace's default floating dtype, as
    ``optax.per_example_global_norm_clip`` takes them (its own test passes int32 gradients:
    JAX's promotion gives float32 results).
    """
    arrays = [a for a in leaves if a is not None]
    if not arrays:
        msg = (
            "`grads` must hold at least one array (with the examples along axis 0), got a tree "
            "without arrays"
        )
        raise ValueError(msg)
    xp = namespace(*arrays, names=[f"grads leaf {i}" for i in range(len(arrays))])
    if ints:
        arrays = [
            xp.astype(a, default_float(xp, a)) if dtype_kind(xp, a.dtype) == "int" else a
            for a in arrays
        ]
    for i, a in enumerate(arrays):
        if dtype_kind(xp, a.dtype) != "real":
            msg = (
                f"`grads` leaves must have a real floating dtype, got {dtype_name(a.dtype)} "
                f"at leaf {i}; cast it with astype (for example to float32)"
            )
            raise TypeError(msg)
    arrays = [native_order(a) for a in arrays]  # dask: without chunks of no elements
    first = tuple(arrays[0].shape)
    for i, a in enumerate(arrays):
        shape = tuple(a.shape)
        if shape and shape[0] != shape[0]:  # NaN: a dask array of unknown chunk sizes
            msg = (
                f"`grads` leaves must have a known number of examples (axis 0), got an unknown "
                f"one at leaf {i} (shape {shape}: a dask array of unknown chunk sizes, such as "
                "`x[x > 0]`); call `x.compute_chunk_sizes()` on it first"
            )
            raise ValueError(msg)
        if len(shape) == 0 or shape[0] != first[0]:
            got = "a 0-d array" if not shape else f"{shape[0]} examples (shape {shape})"
            msg = (
                f"`grads` leaves must all have the batch (examples) axis first, of one length: "
                f"leaf 0 has {first[0] if first else 0} examples (shape {first}), leaf {i} has "
                f"{got}; stack per-example gradients along axis 0 (jax.vmap, torch.func.vmap)"
            )
            raise ValueError(msg)
    return xp, arrays


def _reducer(xp: Namespace, group: Any) -> Callable[[Any], Any] | None:
    """The sum over ``group``'s processes (None without a group); refuses a foreign group."""
    groups = check_group(xp, group)
    if not groups:
        return None
    return lambda x: all_reduce(xp, x, groups)


def _clip_and_sum(
    xp: Namespace,
    arrays: Sequence[Any],
    c: Any,
    acc: Any,
    style: str,
    reduce: Callable[[Any], Any] | None = None,
) -> tuple[list[Any], Any]:
    with quiet(xp):
        norms = _core_norms(xp, kernels_for(xp, arrays, acc), arrays, acc, style, reduce)
        factors = _core_factors(xp, norms, c, style)
        add = _core_tf_sum if style == "tf" else _core_weighted_sum
        return [add(xp, factors, a) for a in arrays], norms


@hints_keywords
def per_example_clip(
    grads: TreeT,
    l2_norm_clip: Any,
    *,
    style: Style = "tf",
    accumulate_dtype: DTypeLike = "widest",
    group: Any = None,
) -> tuple[TreeT, Any]:
    """Clip each example's gradient to a global L2 norm, then sum over the examples (DP-SGD).

    Every leaf holds the per-example gradients along its first axis (``jax.vmap`` of
    ``jax.grad``, ``torch.func.vmap`` of ``torch.func.grad``, Opacus's ``grad_sample``). Each
    example's gradients (all leaves together) are scaled by a factor of its global norm, and
    the scaled gradients summed over the examples. ``style`` picks whose factor:

    * ``"tf"`` (default): TF Privacy's ``tf.clip_by_global_norm(grads, l2_norm_clip)`` per
      example (microbatch), ``c * minimum(1 / norm, 1 / c)``; a non-finite norm makes that
      example's factor NaN (and so the sum), as TF;
    * ``"optax"``: ``optax.per_example_global_norm_clip``, ``minimum(c / norm, 1)`` with
      NaN read as 1 (so a zero gradient with ``c = 0`` is kept, and an infinite norm
      scales by 0);
    * ``"opacus"``: Opacus's ``min(c / (norm + 1e-6), 1)`` (clips slightly even at
      ``norm == c``; NaN propagates), with torch's roundings: ``c / x`` is
      ``x.reciprocal() * c`` there, and float16 and bfloat16 norms are summed in float32
      (``torch.linalg.vector_norm``), each step rounded to the dtype, so a half-precision
      norm past the dtype's range of squares stays finite, as in Opacus.

    Parameters
    ----------
    grads : nested structure of arrays
        Leaves of real floating dtypes, each with the examples along axis 0 (one batch size
        for all leaves); ``None`` leaves are kept. With ``style="optax"`` integer leaves
        too, as optax takes them: cast to the namespace's default floating dtype (float32
        on JAX without x64, float64 on NumPy), which the results then have.
    l2_norm_clip : number or 0-d array
        The largest global norm of one example's gradients (``>= 0`` for a number or a
        NumPy array; a negative device array is not read, and counts as 0).
    style : {"tf", "optax", "opacus"}, optional
        Whose clipping factor (see above).
    accumulate_dtype : dtype, str or "widest", optional
        The dtype the norms are computed in (default: the widest leaf dtype).
    group : torch ProcessGroup, DeviceMesh, JAX axis name, or a sequence of them, optional
        The processes that hold the rest of each example's gradients (some of the leaves,
        or a part of each leaf, split along any axis but the batch axis): the per-example
        sums of squares are summed over them (one all-reduce of a ``(batch,)`` vector), so
        every process gets the norms of the whole gradients and clips its part with them.
        Each process returns the clipped sum of its own part.

    Returns
    -------
    clipped_sum : same structure as ``grads``
        Each leaf summed over the examples after clipping: its shape without the first
        axis, its dtype (the factors are cast to it, as TF casts its scale) and device.
    norms : array
        The per-example global norms before clipping, shape ``(batch,)``, in
        ``accumulate_dtype``. optax returns the number of clipped examples instead; it is
        ``sum(norms > l2_norm_clip)`` (``sum(factors < 1)`` under ``"optax"``), one
        reduction of this array, and the norms also feed adaptive clipping (quantile) rules.

    Raises
    ------
    ValueError
        If a leaf is 0-d or the leaves' first axes differ (naming both leaves) or are of
        unknown length (a dask ``x[x > 0]``: call ``compute_chunk_sizes()``), ``grads`` has
        no array, ``style`` is unknown, or a number ``l2_norm_clip`` is negative or NaN.
    TypeError
        If a leaf is not of a real floating dtype, or ``group`` is not a group of the
        leaves' library.

    See Also
    --------
    optax.per_example_global_norm_clip : optax's rule (``style="optax"``).
    tf.clip_by_global_norm : TF Privacy's per-microbatch clipping (``style="tf"``).
    per_example_layer_clip : The per-layer variant.

    Notes
    -----
    Under ``"optax"`` and ``"opacus"`` the sum over the examples is one ``tensordot`` of
    the factors with each leaf (their ``einsum``). Under ``"tf"`` each example is multiplied
    by its factor (TF's ``v * cast(scale, v.dtype)``) and the products added in the order of
    TF 2.21's CPU ``reduce_sum(stacked, axis=0)`` (x86-64 wheels; rows in turn below 16
    examples, four interleaved accumulators from 16; float16 added in float16, bfloat16 in
    float32; a leaf of one element per example in the order of TF's full reduction of a
    vector): bit for bit TF's sum for the same factors, eagerly and under ``jax.jit`` (for a
    one-element leaf up to at least 20,000 float64 or 100,000 float32 examples; from about
    60,000 or 150,000 TF splits that sum across its threads and its bits follow their
    number). The factors are TF's as well: each example's norm is
    ``tf.linalg.global_norm``'s, each leaf's ``l2_loss`` (``sum(square(v) * 0.5)``) and
    then their stack summed in the order of Eigen's full reduction (``group=``'s
    all-reduce adds in its own order), so the output is TF Privacy's bit for bit (measured
    on 3 to 12 leaves of 1 to 10,000 elements per example; float16 and bfloat16 on 1 to 40
    examples with subnormal and overflowing squares, each square halved and rounded before
    it is added as TF's ``l2_loss`` does; torch keeps the subnormal bfloat16 halves that TF
    flushes). Those norms cost more than one
    ``einsum`` per leaf (the same 784-128-10 MLP, ``B = 256``, float32, loaded 2-core CPU:
    NumPy 2.1 to 2.8 times the previous whole call, ``jax.jit`` 1.45 times and 1.2 to 1.7 s
    to compile against 0.35 s; torch on the CPU, whose norms run NumPy's code on a view,
    0.3 to 0.5 times).
    That sum adds groups of four examples one after another (vectorised over the rest): on
    JAX as one compiled ``lax.fori_loop``, elsewhere as a Python loop (measured once, a
    784-128-10 MLP under ``jax.jit`` on a loaded 2-core CPU: ``B = 256`` 26 ms against
    20 ms for ``"optax"``'s ``tensordot``, 0.8 s to compile against 0.35 s; ``B = 1024``
    65 ms against 52 ms; NumPy 1.1 times ``"optax"``, torch 1.4 times). Pick ``"optax"``
    where TF's last bits do not matter.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> g = [np.array([[0, 0, 0], [0, 3, 4], [4, 0, 3], [3, 4, 0]], np.float32)]
    >>> clipped, norms = tree.per_example_clip(g, 1.25, style="optax")
    >>> clipped, norms
    ([array([1.75, 1.75, 1.75], dtype=float32)], array([0., 5., 5., 5.], dtype=float32))
    >>> int((norms > 1.25).sum())  # optax's second result: the number clipped
    3
    """
    s = _check_style(style)
    leaves, unflatten = flatten(grads)
    xp, arrays = _batched(leaves, ints=s == "optax")
    acc = resolve_accumulate_dtype(xp, accumulate_dtype, [a.dtype for a in arrays])
    # Opacus's max_grad_norm is a Python float, which torch's half-precision arithmetic
    # takes as float32
    c_dtype = _opmath(xp, acc) if s == "opacus" else acc
    c = scalar_operand(xp, l2_norm_clip, c_dtype, arrays[0], "l2_norm_clip", nonnegative=True)
    sums, norms = _clip_and_sum(xp, arrays, c, acc, s, _reducer(xp, group))
    it = iter(sums)
    return cast(TreeT, unflatten([None if a is None else next(it) for a in leaves])), norms


@hints_keywords
def per_example_layer_clip(
    grads: TreeT,
    l2_norm_clip: Any,
    *,
    uniform: bool = True,
    style: Style = "optax",
    accumulate_dtype: DTypeLike = "widest",
    group: Any = None,
) -> tuple[TreeT, TreeT]:
    """Per-example clipping with a norm and a clip norm per leaf (layer), then the sum.

    ``optax.per_example_layer_norm_clip``: with ``K`` array leaves and ``C = l2_norm_clip``,
    leaf ``i`` is clipped on its own (:func:`per_example_clip` of that leaf alone, with the
    factor of ``style``) to ``C / sqrt(K)`` (``uniform=True``) or ``C * sqrt(D_i / D)``
    (``D_i`` elements per example in leaf ``i``, ``D`` in all leaves). The squares of the
    per-leaf clip norms add up to ``C ** 2``, so the sum of one example's clipped gradients
    has a global norm of at most ``C``.

    Parameters
    ----------
    grads : nested structure of arrays
        As in :func:`per_example_clip`.
    l2_norm_clip : number or 0-d array
        The overall clip norm ``C``.
    uniform : bool, optional
        Split ``C`` evenly over the leaves (default) or in proportion to their sizes.
    style : {"optax", "tf", "opacus"}, optional
        Whose clipping factor (default optax's, whose function this mirrors).
    accumulate_dtype : dtype, str or "widest", optional
        As in :func:`per_example_clip`.
    group : torch ProcessGroup, DeviceMesh, JAX axis name, or a sequence of them, optional
        The processes that hold the rest of every leaf, each process a part of every leaf
        (the same leaves in the same order), split along any axis but the batch axis: each
        leaf's per-example sums of squares are summed over them (one all-reduce of a
        ``(batch,)`` vector per leaf). Only with ``uniform=True``: the sizes ``D_i`` would
        be this process's parts'.

    Returns
    -------
    clipped_sum : same structure as ``grads``
        Each leaf clipped per example and summed over the examples.
    norms : same structure as ``grads``
        Each leaf's per-example norms, shape ``(batch,)`` (optax returns the per-leaf number
        of clipped examples: ``sum(norms_i > C_i)``).

    Raises
    ------
    ValueError, TypeError
        As :func:`per_example_clip`; ``ValueError`` also for ``group`` with ``uniform=False``.

    See Also
    --------
    optax.per_example_layer_norm_clip : The optax function this mirrors.

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> g = {"a": np.array([[3.0, 4.0], [0.3, 0.4]], np.float32),
    ...      "b": np.array([[0.0], [2.0]], np.float32)}
    >>> clipped, norms = tree.per_example_layer_clip(g, 2 ** 0.5)  # each leaf clipped to 1
    >>> clipped["a"], clipped["b"], norms["a"]
    (array([0.90000004, 1.2       ], dtype=float32), array([1.], dtype=float32), array([5. , 0.5], dtype=float32))
    """  # noqa: E501
    s = _check_style(style)
    leaves, unflatten = flatten(grads)
    xp, arrays = _batched(leaves)
    reduce = _reducer(xp, group)
    if reduce is not None and not uniform:
        msg = (
            "`uniform=False` splits the clip norm by the leaves' sizes, which `group=` leaves "
            "unknown (each process holds a part of each leaf), got group with uniform=False; "
            "pass uniform=True, or call without group on the whole gradients"
        )
        raise ValueError(msg)
    acc = resolve_accumulate_dtype(xp, accumulate_dtype, [a.dtype for a in arrays])
    c = scalar_operand(xp, l2_norm_clip, acc, arrays[0], "l2_norm_clip", nonnegative=True)
    sizes = [math.prod(a.shape[1:]) for a in arrays]
    total = sum(sizes)
    sums: list[Any] = []
    norms: list[Any] = []
    for a, d in zip(arrays, sizes, strict=True):
        # optax: global_l2_norm_clip * (1.0 / num_layers) ** 0.5, or * (D_i / D) ** 0.5
        share = (1.0 / len(arrays)) ** 0.5 if uniform else (d / total) ** 0.5 if total else 0.0
        if isinstance(l2_norm_clip, (int, float)):
            c_i = constant(xp, float(l2_norm_clip) * share, acc, a)  # in Python, as optax's
        else:
            c_i = c * constant(xp, share, acc, a)
        (summed,), n = _clip_and_sum(xp, [a], c_i, acc, s, reduce)
        sums.append(summed)
        norms.append(n)
    it_s, it_n = iter(sums), iter(norms)
    clipped = unflatten([None if a is None else next(it_s) for a in leaves])
    per_leaf = unflatten([None if a is None else next(it_n) for a in leaves])
    return cast(TreeT, clipped), cast(TreeT, per_leaf)
