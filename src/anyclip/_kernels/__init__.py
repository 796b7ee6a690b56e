"""The one seam for backend fast paths: :class:`Kernels` and :func:`kernels_for`.

Layer: kernels, between the public layer and the core. Each public function resolves its
namespace, checks its arguments, then calls :func:`kernels_for` once and hands the result to
:mod:`anyclip._core`, whose formulas are pure array-API code in TF's order and delegate their
heavy steps (norms, sums of squares across arrays and devices, in-place division, scaling a
list) to it. Which kernels serve a call depends on the library and the dtype only:

* NumPy float32/float64: :class:`~anyclip._kernels._numpy.NumpyKernels`;
* torch, every dtype: :class:`~anyclip._kernels._torch.TorchKernels` (it also groups a list
  spread over several devices);
* JAX float32/float64: :class:`~anyclip._kernels._jax.JaxKernels`;
* dask, every dtype: :class:`~anyclip._kernels._dask.DaskKernels` (the generic steps, with
  float64 sums of squares in TF's order, one task per node of TF's tree, and dask's own SVD
  for the matrix 2-norm);
* everything else: :data:`GENERIC`, the array-API implementation of every step.

Inside :class:`anyclip.flush_subnormals`, each of these comes wrapped in
:class:`~anyclip._kernels._flush.FlushKernels`, which flush subnormals to zero as TF's CPU
kernels do; JAX's only off the CPU (XLA:CPU flushes by itself, XLA:GPU keeps IEEE subnormals).

Tests run the generic code on every backend by binding :data:`GENERIC` explicitly
(``anyclip._api.bind(GENERIC)``); there is no global switch. The plain-call fast paths
(:func:`plain_clip_by_value`, :func:`plain_clip_by_norm`, :func:`plain_norm`) live here too.
Importing this package imports no framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyclip._compat import library, torch_compiling_off_the_cpu, xla_flushes
from anyclip._kernels._base import Kernels
from anyclip._kernels._dask import DaskKernels
from anyclip._kernels._flush import FlushKernels
from anyclip._kernels._jax import (
    JaxKernels,
    jax_tf_row_sums,
    jax_tf_rows_sum,
    jax_tf_vector_sum,
)
from anyclip._kernels._numpy import NumpyKernels
from anyclip._kernels._plain import plain_clip_by_norm, plain_clip_by_value, plain_norm
from anyclip._kernels._tforder_xp import (
    numpy_tf_row_sums,
    rounded_apart,
    tf_order_row_sums,
    tf_order_vector_sum,
)
from anyclip._kernels._torch import TorchKernels
from anyclip._kernels._torch_sums import torch_tf_row_sums
from anyclip._memo import Memo, memo_by_dtype
from anyclip._subnormals import OPEN, flushing
from anyclip._typing import Namespace

__all__ = [
    "DASK",
    "FLUSH_GENERIC",
    "FLUSH_JAX",
    "GENERIC",
    "JAX",
    "NUMPY",
    "TORCH",
    "Kernels",
    "kernels_for",
    "plain_clip_by_norm",
    "plain_clip_by_value",
    "plain_norm",
    "rounded_apart",
    "tf_row_sums",
    "tf_rows_sum",
    "tf_vector_sum",
]

#: The array-API implementation of every step, for any namespace.
GENERIC = Kernels()
NUMPY = NumpyKernels()
TORCH = TorchKernels()
JAX = JaxKernels()
DASK = DaskKernels()

#: The generic kernels, flushing subnormals (:class:`anyclip.flush_subnormals`).
FLUSH_GENERIC = FlushKernels(GENERIC)

#: The flushing twin of each kernels above, by name (JAX's: XLA:CPU flushes by itself).
_FLUSHING = {
    k.name: FlushKernels(k) if k is not GENERIC else FLUSH_GENERIC
    for k in (GENERIC, NUMPY, TORCH, DASK)
}

#: JAX's kernels flushing, for arrays off the CPU (XLA:GPU keeps IEEE subnormals).
FLUSH_JAX = FlushKernels(JAX)

#: The kernels of each (namespace, dtype) met so far, in memos that torch.compile reads without
#: compiling again (:mod:`anyclip._memo`); inside ``flush_subnormals``, from the other one.
_CHOSEN: Memo[Kernels] = Memo("anyclip._kernels.chosen")
_CHOSEN_FLUSHING: Memo[Kernels] = Memo("anyclip._kernels.chosen_flushing")

#: Libraries whose kernels are for float32 and float64 only.
_FLOAT_ONLY = {"numpy": NUMPY, "jax": JAX}


def kernels_for(xp: Namespace, arrays: Sequence[Any], dtype: Any = None) -> Kernels:
    """The kernels for one call on ``arrays`` (at least one array of namespace ``xp``).

    Chosen from the library and the first array's dtype (the arrays a core step reduces share
    one dtype), or ``dtype`` when given (the accumulation dtype the arrays are cast to); the
    answer is cached. Inside :class:`anyclip.flush_subnormals`, kernels that flush subnormals
    to zero (:class:`~anyclip._kernels._flush.FlushKernels`).

    Examples
    --------
    >>> import numpy as np
    >>> import array_api_compat.numpy as xp
    >>> from anyclip._kernels import kernels_for
    >>> kernels_for(xp, [np.zeros(2, dtype=np.float32)])
    <anyclip kernels: numpy>
    >>> kernels_for(xp, [np.zeros(2, dtype=np.float16)])
    <anyclip kernels: generic>
    """
    if dtype is None:
        dtype = arrays[0].dtype
    if OPEN and flushing():
        k = memo_by_dtype(_CHOSEN_FLUSHING, xp, dtype, _choose_flushing)
        if k is JAX and not xla_flushes(arrays[0]):  # XLA:GPU keeps IEEE subnormals
            return FLUSH_JAX
        return k
    k = memo_by_dtype(_CHOSEN, xp, dtype, _choose)
    if k is TORCH and torch_compiling_off_the_cpu(arrays[0].device):
        # the generic kernels' plain ops, which Inductor fuses by itself. The multi-tensor
        # route gave wrong results there (GPU runs 3 and 4, torch 2.11 on an H200:
        # clip_by_global_norm of [3, 4] and [12] at 6.5 came back unclipped, an inf entry
        # finite); run 5, with this choice, gave the eager values
        return GENERIC
    return k


def _choose_flushing(xp: Namespace, dtype: Any) -> Kernels:
    k = _choose(xp, dtype)
    return _FLUSHING.get(k.name, k)  # JAX's own on the CPU: XLA:CPU flushes


def tf_rows_sum(xp: Namespace, f: Any, flat: Any, acc: Any, cut: int) -> Any | None:
    """The rows of ``f * flat`` added in TF 2.21's ``reduce_sum`` order, as one loop; or None.

    ``flat`` is ``(B, N)``, ``f`` the ``(B, 1)`` factors in its dtype, ``acc`` the dtype the
    products are added in, ``cut`` the columns summed by four accumulators (0 below 16
    rows). JAX (eager or traced): :func:`~anyclip._kernels._jax.jax_tf_rows_sum`, one
    compiled loop over the groups of four rows, where a Python loop would unroll under
    ``jax.jit``. Other libraries: None, and :func:`anyclip._per_example._core_tf_sum` runs
    its Python loop (each group one vectorised add; nothing is traced).
    """
    if library(xp) != "jax":
        return None
    return jax_tf_rows_sum(xp, f, flat, acc, cut)


def tf_vector_sum(xp: Namespace, values: Any, *, packet: int, leaf: int, lanes: Any) -> Any:
    """The 1-D ``values`` summed in the order of TF 2.21's full ``reduce_sum``: 0-d.

    :func:`~anyclip._kernels._tforder_xp.tf_order_vector_sum` (array-API operations); on JAX
    (eager or traced) as one compiled program,
    :func:`~anyclip._kernels._jax.jax_tf_vector_sum`.
    """
    if library(xp) == "jax":
        return jax_tf_vector_sum(xp, values, packet, leaf, lanes)
    return tf_order_vector_sum(xp, values, packet=packet, leaf=leaf, lanes=lanes)


def tf_row_sums(
    xp: Namespace,
    rows: Any,
    *,
    packet: int,
    leaf: int,
    square: float | None = None,
    phase: int = 0,
    lanes: Any = None,
) -> Any:
    """Each row of the 2-D ``rows`` summed in the order of TF 2.21's full ``reduce_sum``.

    :func:`~anyclip._kernels._tforder_xp.tf_order_row_sums` (array-API operations); on JAX
    (eager or traced) as one compiled program, :func:`~anyclip._kernels._jax.jax_tf_row_sums`.
    ``square``: each element ``x`` taken as ``(x * x) * square`` (``l2_loss``: 0.5). NumPy,
    and torch on the CPU without a recorded gradient or a transform, add the rows of
    Eigen's packet accumulators with NumPy's in-order reduction
    (:func:`~anyclip._kernels._tforder.numpy_rows_in_order`); torch runs this NumPy code
    on a NumPy view of the tensor (:func:`~anyclip._kernels._torch_sums.torch_numpy_rows`).
    ``phase``: where each row starts in Eigen's packets (see ``tf_order_row_sums``).
    ``lanes`` (float16 and bfloat16 rows: the namespace's float32): the dtype a packet's
    lanes are added in; then every addition is an elementwise operation of the namespace,
    each rounded to the rows' dtype (NumPy's reduction of a float16 axis would add in
    float32).
    """
    lib = library(xp)
    if lib == "jax":
        return jax_tf_row_sums(xp, rows, packet, leaf, square, phase, lanes)
    if lanes is not None:
        return tf_order_row_sums(xp, rows, packet=packet, leaf=leaf, square=square, lanes=lanes)
    if lib == "torch":
        return torch_tf_row_sums(xp, rows, packet=packet, leaf=leaf, square=square, phase=phase)
    sums = numpy_tf_row_sums if lib == "numpy" else tf_order_row_sums
    return sums(xp, rows, packet=packet, leaf=leaf, square=square, phase=phase)


def _choose(xp: Namespace, dtype: Any) -> Kernels:
    lib = library(xp)
    if lib == "torch":
        return TORCH
    if lib == "dask":
        return DASK
    fast = _FLOAT_ONLY.get(lib)
    if fast is not None and dtype in (xp.float32, xp.float64):
        return fast
    return GENERIC
