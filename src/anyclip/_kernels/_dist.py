"""Global norms across devices and hosts: the ``group=`` reduction and sharded torch tensors.

Layer: kernels. The design is TF's formula with one collective in the middle: **local sum of
squares -> one all-reduce of that 0-d partial sum over a group -> sqrt -> scale**. Nothing is
home-made: the collective is the library's own (``torch.distributed.all_reduce`` over a
``ProcessGroup`` or ``DeviceMesh``; ``jax.lax.psum`` over axis names inside ``shard_map`` or
``pmap``), and data never moves, only the partial sum.

* :func:`check_group` turns the public ``group=`` argument into a tuple of groups and refuses a
  group of the wrong kind for the arrays' library (``TypeError``).
* :class:`GroupKernels` wraps the kernels :func:`anyclip._kernels.kernels_for` chose and adds
  the all-reduce to :meth:`~anyclip._kernels.Kernels.total_half_squares`, the one step that
  reduces across arrays; every other step is the wrapped kernels'.
* torch ``DTensor`` inputs (FSDP2, tensor parallel, ``distribute_tensor``) need no ``group=``:
  :func:`dtensor_half_squares` sums the squares of each local shard and all-reduces over the
  tensor's own mesh (see :class:`~anyclip._kernels._torch.TorchKernels`).

Partial sums narrower than float32 are all-reduced in float32 and rounded back once, so the
summation across ranks adds no more rounding than one float32 sum of ``world size`` terms.
NaN and infinities cross ranks as they cross arrays in one process: a sum propagates them by
itself, and the maxima and minima of torch's inf norms (``group=``, ``Partial("max")``
DTensors) all-reduce a NaN flag with the value (:func:`all_reduce_torch`), since a backend's
``MAX`` drops a NaN met after a number (gloo does on every rank but 0).
Importing this module imports no framework.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from anyclip._compat import imported, is_dtensor, library
from anyclip._kernels._base import Kernels, Wrapping
from anyclip._typing import Namespace

__all__ = [
    "GroupKernels",
    "all_reduce",
    "all_reduce_torch",
    "any_dtensor",
    "check_group",
    "group_namespace",
    "dtensor_extreme",
    "dtensor_half_squares",
    "is_dtensor",
    "replicate_partials",
    "zero_partial",
]


def any_dtensor(values: Sequence[Any]) -> bool:
    """Whether some of ``values`` (arrays or None) is a ``DTensor``: one check per type."""
    mod = imported("torch.distributed.tensor")
    cls = getattr(mod, "DTensor", None)
    return cls is not None and any(issubclass(tp, cls) for tp in {type(v) for v in values})


def _torch_group_kind(g: Any) -> bool:
    """Whether ``g`` is a torch ``ProcessGroup`` or ``DeviceMesh``."""
    c10d = imported("torch.distributed.distributed_c10d")
    mesh_mod = imported("torch.distributed.device_mesh")
    pg = getattr(c10d, "ProcessGroup", None)
    mesh = getattr(mesh_mod, "DeviceMesh", None)
    return (pg is not None and isinstance(g, pg)) or (mesh is not None and isinstance(g, mesh))


def check_group(xp: Namespace | None, group: Any) -> tuple[Any, ...]:
    """``group`` as a tuple of groups of ``xp``'s library (``()`` for ``None``).

    torch: a ``ProcessGroup``, a ``DeviceMesh`` or a sequence of them (e.g. pipeline and expert
    groups, summed over in turn). JAX: an axis name or a tuple of axis names (one ``psum``).

    Raises
    ------
    TypeError
        When ``group`` is not a group of the arrays' library.
    """
    if group is None:
        return ()
    lib = "numpy" if xp is None else library(xp)
    if lib == "torch":
        items = tuple(group) if isinstance(group, (list, tuple)) else (group,)
        if items and all(_torch_group_kind(g) for g in items):
            return items
        expected = "a torch.distributed ProcessGroup, a DeviceMesh or a sequence of them"
    elif lib == "jax":
        items = group if isinstance(group, tuple) else (group,)
        if items and all(isinstance(g, str) for g in items):
            return (items,)
        expected = "a JAX axis name (str) or a tuple of axis names, inside shard_map or pmap"
    else:
        msg = (
            f"`group` is for torch.distributed or JAX arrays; the arrays are {lib} arrays, "
            f"got group={type(group).__name__}: pass group=None"
        )
        raise TypeError(msg)
    msg = f"`group` must be {expected} for {lib} arrays, got {type(group).__name__}"
    raise TypeError(msg)


def group_namespace(group: Any) -> Namespace | None:
    """The namespace ``group`` implies, for a call without any array (``None``: no group).

    A process that holds no array still joins the all-reduce of its group: its namespace is
    torch's for torch groups and ``jax.numpy`` for axis names.
    """
    if group is None:
        return None
    items = tuple(group) if isinstance(group, (list, tuple)) else (group,)
    if items and all(_torch_group_kind(g) for g in items):
        from anyclip._torch_namespace import NAMESPACE

        return NAMESPACE
    if items and all(isinstance(g, str) for g in items):
        import jax.numpy as jnp

        return jnp
    return None


def _mesh_groups(g: Any) -> list[Any]:
    """The process groups to all-reduce over for one group (a mesh's every dimension)."""
    mesh_mod = imported("torch.distributed.device_mesh")
    mesh_cls = getattr(mesh_mod, "DeviceMesh", None)
    if mesh_cls is None or not isinstance(g, mesh_cls):
        return [g]
    import torch.distributed as dist

    if g.ndim == 1:
        return [g.get_group()]
    if g.size() == dist.get_world_size():  # the whole world: one collective
        return [dist.group.WORLD]
    return list(g.get_all_groups())


def _differentiable_all_reduce() -> Any:
    """An autograd ``Function``: all-reduce forward, identity backward.

    Every rank computes the same global norm and back-propagates it: the gradient of a
    rank's partial sum is the gradient of the norm itself, as in Megatron's "reduce from
    model-parallel region". (``torch.distributed.nn.functional.all_reduce`` all-reduces the
    gradient too, which would scale it by the world size here.) Defined in
    :mod:`anyclip._torch_autograd`, at import (Dynamo cannot trace a class definition).
    """
    from anyclip._torch_autograd import AllReduce

    return AllReduce


def _all_reduce_each(out: Any, pgs: Sequence[Any], reduce_op: Any, fresh: bool) -> Any:
    """``out`` all-reduced over each process group in turn (into a copy unless ``fresh``)."""
    import torch
    import torch.distributed as dist

    recorded = torch.is_grad_enabled() and out.requires_grad
    for group in pgs:
        if recorded:
            out = _differentiable_all_reduce().apply(out, reduce_op, group)
        else:
            out = out if fresh else out.clone()
            fresh = True
            dist.all_reduce(out, op=reduce_op, group=group)
    return out


def _extreme(x: Any, pgs: Sequence[Any], op: str) -> Any:
    """``x`` maximised (``op="max"``) or minimised over ``pgs``, NaN on every rank if on one.

    A backend's ``MAX`` and ``MIN`` keep or drop a NaN by the order they meet it in (gloo keeps
    rank 0's and drops the others'), so each group reduces, in one all-reduce, the pair
    ``[x with NaN replaced by the identity, NaN flag]`` (the flag negated for ``MIN``), and
    NaN is put back where any rank had one.
    """
    import torch
    import torch.distributed as dist

    sign, fill, reduce_op = (
        (1.0, -math.inf, dist.ReduceOp.MAX) if op == "max" else (-1.0, math.inf, dist.ReduceOp.MIN)
    )
    nan = torch.isnan(x)
    pair = torch.stack([torch.where(nan, fill, x), nan.to(x.dtype) * sign])
    pair = _all_reduce_each(pair, pgs, reduce_op, fresh=True)
    return torch.where(pair[1] * sign > 0, math.nan, pair[0])


def all_reduce_torch(total: Any, groups: Sequence[Any], op: str = "sum") -> Any:
    """``total`` summed (``op="max"``/``"min"``: maximised/minimised) over every group.

    In at least float32, into a fresh tensor, one all-reduce per process group. NaN and
    infinities propagate as in one process: a sum does so by itself; the maximum and minimum
    reduce a NaN flag with the values (:func:`_extreme`), so a NaN on any rank is NaN on every
    rank. When a gradient is recorded through ``total``, the backward pass is the identity
    (see :func:`_differentiable_all_reduce`).
    """
    import torch
    import torch.distributed as dist

    dtype = total.dtype
    wide = dtype in (torch.float16, torch.bfloat16)
    out = total.float() if wide else total
    pgs = [pg for g in groups for pg in _mesh_groups(g)]
    if op == "sum":
        out = _all_reduce_each(out, pgs, dist.ReduceOp.SUM, fresh=out is not total)
    else:
        out = _extreme(out, pgs, op)
    return out.to(dtype) if wide else out


def all_reduce(xp: Namespace, x: Any, groups: Sequence[Any], op: str = "sum") -> Any:
    """``x`` (any shape) summed (``op="max"``: maximised) over ``groups`` of ``xp``'s library.

    ``groups`` as :func:`check_group` gives them: torch process groups or meshes
    (:func:`all_reduce_torch`, one all-reduce per process group, NaN kept by the maximum) or
    JAX axis names (``psum`` / ``pmax`` inside ``shard_map``). The per-example and AGC rules'
    cross-process step.
    """
    if library(xp) == "jax":
        import jax

        fn: Callable[..., Any] = jax.lax.psum if op == "sum" else jax.lax.pmax  # untyped
        for names in groups:
            x = fn(x, names)
        return x
    return all_reduce_torch(x, groups, op=op)


def replicate_partials(t: Any) -> Any:
    """The DTensor ``t`` with its ``Partial`` placements made ``Replicate`` (one all-reduce).

    ``Partial("max")`` and ``Partial("min")`` (DTensor's inf norms, ``amax``) are reduced by
    :func:`all_reduce_torch`, which keeps a NaN of any rank; other partial values (sums,
    p-norms) by DTensor's own redistribution.
    """
    from torch.distributed.tensor import DTensor, Replicate

    placements = list(t.placements)
    mesh = t.device_mesh
    if mesh.get_coordinate() is None:  # this rank is not in the mesh: nothing to reduce
        return t.redistribute(mesh, [Replicate() if p.is_partial() else p for p in placements])
    for op in ("max", "min"):
        dims = [
            d
            for d, p in enumerate(placements)
            if p.is_partial() and getattr(p, "reduce_op", "sum") == op
        ]
        if not dims:
            continue
        out = all_reduce_torch(t.to_local(), [mesh.get_group(d) for d in dims], op=op)
        for d in dims:
            placements[d] = Replicate()
        t = DTensor.from_local(
            out, mesh, placements, run_check=False, shape=t.shape, stride=t.stride()
        )
    if any(p.is_partial() for p in placements):
        t = t.redistribute(mesh, [Replicate() if p.is_partial() else p for p in placements])
    return t


def dtensor_extreme(
    x: Any,
    axis: int | tuple[int, ...],
    op: str,
    local_fn: Callable[[Any, tuple[int, ...]], Any],
    dtype: Any = None,
    identity: float | None = None,
) -> Any | None:
    """A maximum (``op="max"``) or minimum of the DTensor ``x`` over ``axis``, shard by shard.

    ``local_fn(shard, axes)`` reduces a non-empty local shard over ``axes`` (kept as size-1
    axes). A shard empty along a reduced axis (an uneven ``Shard``: 1 row on 2 ranks) gives
    the reduction's identity (-inf for the maximum, inf for the minimum) instead: DTensor's
    own ``amax`` and ``vector_norm(ord=inf)`` raise there (``Expected reduction dim to have
    non-zero size``) on that rank only, while the other ranks go on to the all-reduce and wait
    for it. The result is ``Partial(op)`` along the mesh dimensions that shard a reduced axis,
    as DTensor's (made ``Replicate`` by :func:`replicate_partials`). None for a ``Partial``
    input (DTensor's own ops reduce it first). ``dtype``: the dtype ``local_fn`` returns, when
    it is not ``x``'s; ``identity``: the value of an empty shard, where the reduced values are
    known to lie above it (0 for a norm: the -inf would become inf through a later ``abs``).
    """
    import torch
    from torch.distributed.tensor import DTensor, Partial

    if any(p.is_partial() for p in x.placements):
        return None
    ndim = x.ndim
    axes = tuple(sorted({a % ndim for a in ((axis,) if isinstance(axis, int) else axis)}))
    local = x.to_local()
    if any(local.shape[a] == 0 for a in axes):
        if identity is None:
            identity = -math.inf if op == "max" else math.inf
        # a sum over the empty axes (zeros) keeps the result in the autograd graph of `x`
        out = torch.sum(local, dim=axes, keepdim=True) * 0 + identity
        out = out if dtype is None else out.to(dtype)
    else:
        out = local_fn(local, axes)
    placements = [Partial(op) if p.is_shard() and p.dim % ndim in axes else p for p in x.placements]
    shape = torch.Size([1 if d in axes else x.shape[d] for d in range(ndim)])
    stride = torch.empty(shape, device="meta").stride()
    return DTensor.from_local(
        out, x.device_mesh, placements, run_check=False, shape=shape, stride=stride
    )


def zero_partial(xp: Namespace, dtype: Any, groups: Sequence[Any]) -> Any:
    """A 0-d zero for a rank with no array to sum, on the device the groups' backend uses."""
    if library(xp) != "torch":
        return xp.asarray(0.0, dtype=dtype)
    import torch
    import torch.distributed as dist

    pgs = [pg for g in groups for pg in _mesh_groups(g)]
    backend = str(dist.get_backend(pgs[0])) if pgs else "gloo"
    dev = torch.device("cuda", torch.cuda.current_device()) if "nccl" in backend else "cpu"
    return torch.zeros((), dtype=dtype, device=dev)


def dtensor_half_squares(
    local_sum: Callable[[Sequence[Any]], Any],
    xp: Namespace,
    arrays: Sequence[Any],
    dtype: Any = None,
) -> Any:
    """The sum of ``l2_loss`` of ``arrays`` (some of them DTensors), the same on every rank.

    Each DTensor adds the squares of its local shard (``to_local()``: uneven and empty shards
    included; never ``full_tensor()``), counted once along each mesh dimension it is
    replicated over (on the rank of coordinate 0 there); ``Partial`` placements are first
    reduced to ``Replicate`` (:func:`replicate_partials`: an all-reduce of that tensor). Then one
    all-reduce per mesh of the partial sum. Plain tensors in the list are taken as the same
    on every rank and added after that reduction. ``local_sum`` sums a list of plain tensors
    (in ``dtype``: the dtype of the partial sums, ``arrays[0]``'s when None).
    """
    plain: list[Any] = []
    by_mesh: dict[Any, list[Any]] = {}
    for a in arrays:
        if not is_dtensor(a):
            plain.append(a)
            continue
        if any(p.is_partial() for p in a.placements):
            a = replicate_partials(a)
        mesh = a.device_mesh
        coords = mesh.get_coordinate()
        kept = by_mesh.setdefault(mesh, [])
        if coords is None:  # this rank is not in the mesh: nothing to add
            continue
        if all(coords[d] == 0 for d, p in enumerate(a.placements) if p.is_replicate()):
            kept.append(a.to_local())
    dtype = arrays[0].dtype if dtype is None else dtype
    total = None
    for mesh, local in by_mesh.items():
        part = local_sum(local) if local else zero_partial(xp, dtype, [mesh])
        part = all_reduce_torch(part, [mesh])
        total = part if total is None else total + part.to(total.device)
    if plain:
        part = local_sum(plain)
        total = part if total is None else total + part.to(total.device)
    return total


class GroupKernels(Wrapping):
    """Kernels that add one reduction over ``groups`` to the cross-array sum of ``base``.

    Made per call by the public functions given ``group=``; every step but
    :meth:`total_half_squares` is ``base``'s.
    """

    def __init__(self, base: Kernels, lib: str, groups: tuple[Any, ...]) -> None:
        self.base = base
        self.lib = lib
        self.groups = groups
        self.name = f"{base.name}+group"
        self.ftz = base.ftz

    def flush(self, xp: Namespace, x: Any, also: Any = None, *, owned: bool = False) -> Any:
        """As the wrapped kernels'."""
        return self.base.flush(xp, x, also, owned=owned)

    def flush_squares(self, xp: Namespace, x: Any, *, halved: bool = False) -> Any:
        """As the wrapped kernels'."""
        return self.base.flush_squares(xp, x, halved=halved)

    def half_squares(self, xp: Namespace, arrays: Sequence[Any]) -> Any:
        """As the wrapped kernels' (this rank's arrays only)."""
        return self.base.half_squares(xp, arrays)

    def scale(self, xp: Namespace, t_list: Sequence[Any], scale: Any) -> list[Any]:
        """As the wrapped kernels'."""
        return self.base.scale(xp, t_list, scale)

    def reduce(self, xp: Namespace, total: Any) -> Any:
        """``total`` (this rank's 0-d partial sum) summed over the groups."""
        if self.lib == "jax":
            import jax

            psum: Callable[..., Any] = jax.lax.psum  # untyped in jax
            out = total
            for names in self.groups:
                out = psum(out, names)
            return out
        return all_reduce_torch(total, self.groups)

    def total_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any = None) -> Any:
        """The wrapped kernels' sum on this rank, then one all-reduce over the groups."""
        return self.reduce(xp, self.base.total_half_squares(xp, arrays, acc))

    def cast_half_squares(self, xp: Namespace, arrays: Sequence[Any], acc: Any) -> Any:
        """As the wrapped kernels' (this rank's arrays only)."""
        return self.base.cast_half_squares(xp, arrays, acc)
