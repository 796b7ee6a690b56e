"""One rank of the torch.distributed checks of ``tests/test_distributed_torch.py``.

Run as ``python tests/_torch_dist_worker.py OUT`` with ``RANK``, ``WORLD_SIZE`` and
``ANYCLIP_DIST_PORT`` (a file, not there yet, where rank 0 writes its store's port) set; gloo on
CPU. Every scenario runs on every
rank; rank 0 writes ``{scenario: "ok" or the failure}`` as JSON to ``OUT``. The expected
values are the exact norms of the full (unsharded) data, computed in float64 by NumPy on
every rank from the same seeded data; never anyclip's own single-process output.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

#: Largest distance, in float32 ULP of the exact norm, of a distributed global norm (the
#: bound stated in docs/distributed.md: float32 partial sums, regrouped by the sharding).
ULP_DIST = 3


def ulp_distance(value: float, exact: float) -> float:
    """|value - exact| in units of the float32 spacing at ``exact``."""
    spacing = float(np.spacing(np.float32(exact)))
    return abs(value - exact) / spacing


def exact_norm(arrays: list[np.ndarray]) -> float:
    return math.sqrt(sum(float(np.sum(np.asarray(a, np.float64) ** 2)) for a in arrays))


def same_on_every_rank(value: float) -> None:
    got = [None] * dist.get_world_size()
    dist.all_gather_object(got, value)
    assert all(v == got[0] for v in got), f"ranks disagree: {got}"


class Counter:
    """Collectives issued inside the block (DTensor's and c10d's), by name."""

    def __enter__(self) -> Counter:
        from torch.distributed.tensor.debug import CommDebugMode

        self.mode = CommDebugMode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)
        self.counts = {str(k): v for k, v in self.mode.get_comm_counts().items()}

    def check(self, max_all_reduce: int) -> None:
        gathers = {k: v for k, v in self.counts.items() if "gather" in k or "scatter" in k}
        assert not gathers, f"gathers issued: {gathers}"
        reduces = sum(v for k, v in self.counts.items() if "reduce" in k)
        assert reduces <= max_all_reduce, f"{reduces} all-reduces: {self.counts}"


def full_grads(shapes: list[tuple[int, ...]], seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen) for s in shapes]


def check_scaled(out: torch.Tensor, full: torch.Tensor, scale64: float) -> None:
    want = full.double().numpy() * scale64
    np.testing.assert_allclose(out.double().numpy(), want, rtol=4 * 2.0**-24, atol=1e-30)


def with_grads(values: list[torch.Tensor]) -> list[torch.nn.Parameter]:
    """Zero parameters shaped (and placed) as ``values``, each with its value's copy as grad."""
    params = [torch.nn.Parameter(torch.zeros_like(v)) for v in values]
    for p, v in zip(params, values, strict=True):
        p.grad = v.clone()
    return params


# ------------------------------------------------------------------ scenarios
def ddp(world: int, rank: int) -> None:
    """Replicated gradients (DDP): no group, the same norm on every rank."""
    import anyclip.torch

    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Linear(6, 3))
    grads = full_grads([tuple(p.shape) for p in model.parameters()], seed=1)
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g.clone()
    exact = exact_norm([g.numpy() for g in grads])
    with Counter() as c:
        norm = anyclip.torch.clip_grad_norm_(model.parameters(), 1.0)
    c.check(0)
    assert ulp_distance(float(norm), exact) <= ULP_DIST, (float(norm), exact)
    same_on_every_rank(float(norm))
    for p, g in zip(model.parameters(), grads, strict=True):
        check_scaled(p.grad, g, 1.0 / exact)


def fsdp2(world: int, rank: int) -> None:
    """FSDP2 ``fully_shard``: even (12 rows) and uneven (7 and 10 rows) Shard(0) gradients."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, distribute_tensor

    import anyclip
    import anyclip.torch
    import anyclip.tree

    model = torch.nn.Sequential(
        torch.nn.Linear(5, 12), torch.nn.Linear(12, 10), torch.nn.Linear(10, 7)
    )
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    params = list(model.parameters())
    assert all(isinstance(p, DTensor) for p in params)
    uneven = [p for p in params if p.shape[0] % world]
    assert uneven, "the model must have an unevenly sharded parameter"
    grads = full_grads([tuple(p.shape) for p in params], seed=2)
    for p, g in zip(params, grads, strict=True):
        p.grad = distribute_tensor(g, p.device_mesh, p.placements)
    exact = exact_norm([g.numpy() for g in grads])

    with Counter() as c:
        norm = anyclip.global_norm([p.grad for p in params])
    c.check(1)
    assert isinstance(norm, DTensor) and all(p.is_replicate() for p in norm.placements)
    assert ulp_distance(float(norm.to_local()), exact) <= ULP_DIST, (float(norm), exact)
    same_on_every_rank(float(norm.to_local()))

    tree = {f"p{i}": p.grad for i, p in enumerate(params)}
    with Counter() as c:
        clipped, tnorm = anyclip.tree.clip_by_global_norm(tree, 2.0)
    c.check(1)
    assert float(tnorm.to_local()) == float(norm.to_local())
    for i, (p, g) in enumerate(zip(params, grads, strict=True)):
        out = clipped[f"p{i}"]
        assert isinstance(out, DTensor) and out.placements == p.grad.placements
        check_scaled(out.full_tensor(), g, 2.0 / exact)

    # every other order: a Replicate DTensor too (torch's own get_total_norm gives a DTensor,
    # Partial(max) / Partial(min) for +-inf), with the exact norm of the full gradients
    flat = np.concatenate([g.double().numpy().ravel() for g in grads])
    per_tensor = [np.abs(g.double().numpy()).ravel() for g in grads]
    exact_orders = {
        1.0: float(np.sum(np.abs(flat))),
        3.0: float(np.sum(np.abs(flat) ** 3) ** (1 / 3)),
        math.inf: float(np.max(np.abs(flat))),
        -math.inf: float(min(np.min(a) for a in per_tensor)),
        0.0: float(sum(np.count_nonzero(a) > 0 for a in per_tensor)),
    }
    for order, want in exact_orders.items():
        got = anyclip.torch.get_total_norm([p.grad for p in params], order)
        assert isinstance(got, DTensor), (order, type(got))
        assert all(p.is_replicate() for p in got.placements), (order, got.placements)
        theirs = torch.nn.utils.get_total_norm([p.grad for p in params], order)
        assert isinstance(theirs, DTensor), (order, type(theirs))
        value = float(got.to_local())
        assert value == float(theirs.full_tensor()), (order, value, theirs)
        np.testing.assert_allclose(value, want, rtol=1e-6, err_msg=f"order {order}")
        same_on_every_rank(value)

    with Counter() as c:
        cnorm = anyclip.torch.clip_grad_norm_(params, 1.0)
    c.check(1)
    assert float(cnorm.to_local()) == float(norm.to_local())
    for p, g in zip(params, grads, strict=True):
        assert isinstance(p.grad, DTensor)
        check_scaled(p.grad.full_tensor(), g, 1.0 / exact)


def tensor_parallel(world: int, rank: int) -> None:
    """Tensor parallel: Shard(1) (uneven on 4 ranks), Shard(0) and a Replicate bias."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import anyclip

    mesh = init_device_mesh("cpu", (world,))
    full = full_grads([(6, 10), (10, 4), (4,)], seed=3)
    placements = [Shard(1), Shard(0), Replicate()]
    dts = [distribute_tensor(f, mesh, [p]) for f, p in zip(full, placements, strict=True)]
    exact = exact_norm([f.numpy() for f in full])
    with Counter() as c:
        clipped, norm = anyclip.clip_by_global_norm(dts, 1.5)
    c.check(1)
    assert ulp_distance(float(norm.to_local()), exact) <= ULP_DIST, (float(norm), exact)
    same_on_every_rank(float(norm.to_local()))
    for out, f, d in zip(clipped, full, dts, strict=True):
        assert out.placements == d.placements
        check_scaled(out.full_tensor(), f, 1.5 / exact)


def pipeline(world: int, rank: int) -> None:
    """Pipeline stages: each rank holds some parameters; ``group=`` gives the global norm."""
    from torch.distributed.device_mesh import init_device_mesh

    import anyclip
    import anyclip.torch
    import anyclip.tree

    shapes = [(7, 3), (5,), (4, 4), (9,), (2, 6), (3,), (8, 2), (1,)]
    full = full_grads(shapes, seed=4)
    mine = [g for i, g in enumerate(full) if i % world == rank]
    exact = exact_norm([g.numpy() for g in full])
    local = exact_norm([g.numpy() for g in mine])

    stage = float(anyclip.global_norm(mine))
    assert ulp_distance(stage, local) <= ULP_DIST, "without group: this stage's norm"
    with Counter() as c:
        norm = anyclip.global_norm(mine, group=dist.group.WORLD)
    c.check(1)
    assert ulp_distance(float(norm), exact) <= ULP_DIST, (float(norm), exact)
    same_on_every_rank(float(norm))

    mesh = init_device_mesh("cpu", (world,))
    params = with_grads(mine)
    with Counter() as c:
        cnorm = anyclip.torch.clip_grad_norm_(params, 1.0, group=mesh)
    c.check(1)
    assert ulp_distance(float(cnorm), exact) <= ULP_DIST
    for p, g in zip(params, mine, strict=True):
        check_scaled(p.grad, g, 1.0 / exact)

    # through autograd: d norm / d x = x / norm on every rank (the backward is not reduced)
    leaves = [g.clone().requires_grad_(True) for g in mine]
    gnorm = anyclip.global_norm(leaves, group=dist.group.WORLD)
    grads = torch.autograd.grad(gnorm, leaves)
    for x, d in zip(leaves, grads, strict=True):
        want = x.detach().double().numpy() / exact
        np.testing.assert_allclose(d.double().numpy(), want, rtol=1e-6)

    # torch's split API: get_total_norm(group=) then clip_grads_with_norm_
    for p, g in zip(params, mine, strict=True):
        p.grad = g.clone()
    with Counter() as c:
        total = anyclip.torch.get_total_norm([p.grad for p in params], group=mesh)
        anyclip.torch.clip_grads_with_norm_(params, 1.0, total)
    c.check(1)
    assert ulp_distance(float(total), exact) <= ULP_DIST
    for p, g in zip(params, mine, strict=True):
        check_scaled(p.grad, g, 1.0 / exact)
    # other orders over the group: 1 and inf, as NumPy's of all the data
    flat = np.concatenate([g.double().numpy().ravel() for g in full])
    for order, want in ((1.0, np.sum(np.abs(flat))), (math.inf, np.max(np.abs(flat)))):
        got = float(anyclip.torch.get_total_norm(mine, norm_type=order, group=dist.group.WORLD))
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=str(order))

    # a stage without gradients still joins the all-reduce (else the others would hang)
    held = [] if rank == 0 else params
    others = exact_norm([g.numpy() for i, g in enumerate(full) if i % world != 0])
    for p, g in zip(params, mine, strict=True):
        p.grad = g.clone()
    onorm = anyclip.torch.clip_grad_norm_(held, 1.0, group=dist.group.WORLD)
    assert ulp_distance(float(onorm), others) <= ULP_DIST, (float(onorm), others)

    if world == 4:  # pipeline x expert: two groups of a 2 x 2 mesh, reduced in turn
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "ep"))
        groups = [mesh2.get_group("pp"), mesh2.get_group("ep")]
        with Counter() as c:
            tnorm = anyclip.tree.global_norm({"w": mine}, group=groups)
        c.check(2)
        assert ulp_distance(float(tnorm), exact) <= ULP_DIST


def groups(world: int, rank: int) -> None:
    """Per-group norms over pipeline stages: ONE all-reduce of the vector of partial sums."""
    import anyclip
    import anyclip.torch
    import anyclip.tree

    shapes = [(7, 3), (5,), (4, 4), (9,), (2, 6), (3,), (8, 2), (1,)]
    full = full_grads(shapes, seed=5)
    names = ["enc", "dec", "head", "enc", "dec", "head", "enc", "dec"]
    mine: dict[Any, Any] = {i: g for i, g in enumerate(full) if i % world == rank}
    labels: dict[Any, str] = {i: names[i] for i in mine}
    for n in ("head", "dec", "enc"):  # every rank names every group (None: nothing here),
        mine[n], labels[n] = None, n  # first met in an order that differs between ranks
    with Counter() as c:
        norms = anyclip.tree.global_norm(mine, groups=labels, group=dist.group.WORLD)
    reduces = sum(v for k, v in c.counts.items() if "reduce" in k)
    assert reduces == 1, f"{reduces} all-reduces for {len(norms)} groups: {c.counts}"
    for name in ("enc", "dec", "head"):  # bit for bit the one-group call's norm
        local = [g for i, g in mine.items() if g is not None and names[i] == name]
        alone = anyclip.global_norm(local, group=dist.group.WORLD)
        assert torch.equal(norms[name], alone), (name, norms[name], alone)
    for name in ("enc", "dec", "head"):
        want = exact_norm([g.numpy() for i, g in enumerate(full) if names[i] == name])
        assert ulp_distance(float(norms[name]), want) <= ULP_DIST, (name, float(norms[name]))
        same_on_every_rank(float(norms[name]))

    # clip_grad_norm_ with a limit per group (None: not clipped), one all-reduce
    params = {i: torch.nn.Parameter(torch.zeros_like(g)) for i, g in mine.items() if g is not None}
    for i, p in params.items():
        p.grad = mine[i].clone()
    groups_ = {n: [p for i, p in params.items() if names[i] == n] for n in ("enc", "dec")}
    with Counter() as c:
        out = anyclip.torch.clip_grad_norm_(
            None, {"enc": 1.0, "dec": None}, groups=groups_, group=dist.group.WORLD
        )
    reduces = sum(v for k, v in c.counts.items() if "reduce" in k)
    assert reduces == 1, f"{reduces} all-reduces: {c.counts}"
    enc = exact_norm([g.numpy() for i, g in enumerate(full) if names[i] == "enc"])
    assert ulp_distance(float(out["enc"]), enc) <= ULP_DIST
    for i, p in params.items():
        if names[i] == "enc":
            check_scaled(p.grad, mine[i], 1.0 / enc)
        elif names[i] == "dec":
            assert torch.equal(p.grad, mine[i])


def norms(world: int, rank: int) -> None:
    """norm (every ord), clip_by_norm and l2_normalize over sharded dims: never Partial."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    import anyclip

    mesh = init_device_mesh("cpu", (world,))
    (full,) = full_grads([(10, 7)], seed=5)
    x = distribute_tensor(full, mesh, [Shard(0)])
    f64 = full.double().numpy()

    def final(r: Any) -> np.ndarray:
        assert isinstance(r, DTensor)
        assert not any(p.is_partial() for p in r.placements), r.placements
        return r.full_tensor().double().numpy()

    cases: list[tuple[Any, Any, Callable[[np.ndarray], Any]]] = [
        (2, None, lambda a: np.sqrt(np.sum(a * a))),
        (1, None, lambda a: np.sum(np.abs(a))),
        (math.inf, None, lambda a: np.max(np.abs(a))),
        (3, 0, lambda a: np.sum(np.abs(a) ** 3, axis=0) ** (1 / 3)),
        (1, 0, lambda a: np.sum(np.abs(a), axis=0)),
        (math.inf, 0, lambda a: np.max(np.abs(a), axis=0)),
        (2, 1, lambda a: np.sqrt(np.sum(a * a, axis=1))),
        ("fro", (0, 1), lambda a: np.sqrt(np.sum(a * a))),
        (1, (0, 1), lambda a: np.max(np.sum(np.abs(a), axis=0))),
        (math.inf, (0, 1), lambda a: np.max(np.sum(np.abs(a), axis=1))),
    ]
    for ord_, axis, want in cases:
        with Counter() as c:
            r = anyclip.norm(x, ord=ord_, axis=axis)
        c.check(1)
        np.testing.assert_allclose(final(r), want(f64), rtol=1e-6, err_msg=f"{ord_} {axis}")
    try:
        anyclip.norm(x, ord=2, axis=(0, 1))
    except NotImplementedError as e:
        assert "full_tensor" in str(e)
    else:
        raise AssertionError("spectral norm of a sharded matrix must raise")

    for axes in (None, 0, 1):
        red = None if axes is None else axes
        n = np.sqrt(np.sum(f64 * f64, axis=red, keepdims=True))
        with Counter() as c:
            out = anyclip.clip_by_norm(x, 1.0, axes=axes)
            l2 = anyclip.l2_normalize(x, axis=axes)
        c.check(2)
        assert out.placements == x.placements and l2.placements == x.placements
        np.testing.assert_allclose(final(out), f64 / np.maximum(n, 1.0), rtol=1e-6)
        np.testing.assert_allclose(final(l2), f64 / n, rtol=1e-6)


def elementwise(world: int, rank: int) -> None:
    """clip_by_value, clip_by_average_norm, normalize and the per-gradient torch adapters."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    import anyclip
    import anyclip.torch

    mesh = init_device_mesh("cpu", (world,))
    (full,) = full_grads([(7, 5)], seed=6)
    f64 = full.double().numpy()
    x = distribute_tensor(full, mesh, [Shard(0)])
    with Counter() as c:
        v = anyclip.clip_by_value(x, -0.5, 0.5)
    c.check(0)
    assert isinstance(v, DTensor) and v.placements == x.placements
    np.testing.assert_array_equal(v.full_tensor().numpy(), np.clip(full.numpy(), -0.5, 0.5))
    with Counter() as c:
        a = anyclip.clip_by_average_norm(x, 0.01)
        n, nn = anyclip.normalize(x)
    c.check(2)
    l2 = np.sqrt(np.sum(f64 * f64))
    want = f64 * 0.01 * min(f64.size / l2, 100.0)
    np.testing.assert_allclose(a.full_tensor().double().numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(n.full_tensor().double().numpy(), f64 / l2, rtol=1e-6)
    assert not any(p.is_partial() for p in nn.placements)

    p = torch.nn.Parameter(distribute_tensor(torch.zeros(7, 5), mesh, [Shard(0)]))
    p.grad = distribute_tensor(full, mesh, [Shard(0)])
    anyclip.torch.clip_grad_by_value_([p], -0.5, 0.5)
    np.testing.assert_array_equal(p.grad.full_tensor().numpy(), np.clip(full.numpy(), -0.5, 0.5))
    p.grad = distribute_tensor(full, mesh, [Shard(0)])
    anyclip.torch.clip_grad_by_norm_([p], 1.0, axes=1)
    rows = np.sqrt(np.sum(f64 * f64, axis=1, keepdims=True))
    want = f64 / np.maximum(rows, 1.0)
    np.testing.assert_allclose(p.grad.full_tensor().double().numpy(), want, rtol=1e-6)


def accumulate(world: int, rank: int) -> None:
    """``accumulate_dtype``: each local shard cast a block at a time, one scalar all-reduce."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    import anyclip
    from anyclip._kernels import _base
    from anyclip._kernels._torch import TorchKernels

    mesh = init_device_mesh("cpu", (world,))
    full = full_grads([(11, 7), (6, 9), (5,)], seed=7)
    full = [full[0].half(), full[1].bfloat16(), full[2]]
    f64 = [f.double().numpy() for f in full]  # the narrow values, exactly
    placements = [Shard(0), Shard(1), Replicate()]  # 11 rows and 9 columns: uneven on 2 and 4
    dts = [distribute_tensor(f, mesh, [p]) for f, p in zip(full, placements, strict=True)]
    exact = exact_norm(f64)
    seen: list[tuple[bool, int]] = []  # (a DTensor?, size) of every array cut into blocks
    blocks = TorchKernels.blocks

    def spy(self: Any, xp: Any, v: Any) -> Any:
        out = blocks(self, xp, v)
        seen.append((isinstance(v, DTensor), max((int(b.numel()) for b in out or []), default=0)))
        return out

    old_block = _base.UPCAST_BLOCK
    _base.UPCAST_BLOCK = 5  # several blocks per local shard
    TorchKernels.blocks = spy  # type: ignore[method-assign]
    try:
        with Counter() as c:
            norm = anyclip.global_norm(dts, accumulate_dtype="float32")
        c.check(1)
        assert isinstance(norm, DTensor) and norm.dtype == torch.float32
        assert ulp_distance(float(norm.to_local()), exact) <= ULP_DIST, (float(norm), exact)
        with Counter() as c:
            clipped, used = anyclip.clip_by_global_norm(dts, 1.0, accumulate_dtype="float32")
        c.check(1)
        assert float(used.to_local()) == float(norm.to_local())
        for out, d, want in zip(clipped, dts, f64, strict=True):
            assert out.placements == d.placements and out.dtype == d.dtype
            got = out.full_tensor().double().numpy()
            np.testing.assert_allclose(got, want / exact, rtol=2.0**-7, atol=1e-30)
        x, x64 = dts[0], f64[0]
        n = math.sqrt(float(np.sum(x64 * x64)))
        with Counter() as c:
            r = anyclip.norm(x, accumulate_dtype="float32")
            out = anyclip.clip_by_norm(x, 1.0, accumulate_dtype="float32")
            l2 = anyclip.l2_normalize(x, accumulate_dtype="float32")
        c.check(3)
        np.testing.assert_allclose(float(r.full_tensor()), n, rtol=2.0**-10)
        for got in (out, l2):
            assert got.placements == x.placements and got.dtype == torch.float16
            np.testing.assert_allclose(got.full_tensor().double().numpy(), x64 / n, rtol=2.0**-10)
        # pipeline stages: float16 arrays split across ranks, group=
        mine = [f for i, f in enumerate(full[:2]) if i % world == rank]
        split = anyclip.global_norm(mine, accumulate_dtype="float32", group=dist.group.WORLD)
        assert ulp_distance(float(split), exact_norm(f64[:2])) <= ULP_DIST
    finally:
        _base.UPCAST_BLOCK = old_block
        TorchKernels.blocks = blocks  # type: ignore[method-assign]
    cut = [size for is_dt, size in seen if not is_dt]
    assert cut and max(cut) <= 5, seen  # local shards, 5 elements at a time, never whole


def all_nan(t: torch.Tensor) -> bool:
    local = t.full_tensor() if hasattr(t, "full_tensor") else t
    return bool(torch.isnan(local).all())


def nonfinite(world: int, rank: int) -> None:
    """A NaN or inf on one rank is the norm of every rank (TF's rule for the whole list).

    The NaN sits on the last rank, whose NaN a backend's ``MAX`` all-reduce drops (gloo keeps
    rank 0's only): every rank must still get NaN from the inf norms (``group=``, a rank
    without gradients, ``Partial("max")`` DTensors) and then NaN gradients everywhere, as TF's
    ``clip_by_global_norm`` gives for a NaN anywhere in its list. The sum (2-norm) must carry
    NaN and inf too (TF: an inf norm gives NaN values). One all-reduce per call, counted.
    """
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    import anyclip
    import anyclip.torch

    last = world - 1
    shapes = [(3, 2), (4,), (2, 2), (5,), (1, 3), (2,), (3,), (2, 1)]
    full = full_grads(shapes, seed=8)
    full[last][0] = math.nan  # array `last` is the last rank's
    mine_idx = [i for i in range(len(full)) if i % world == rank]

    # inf norm over a group, then the in-place clipping: NaN norm, NaN gradients everywhere
    params = with_grads([full[i] for i in mine_idx])
    with Counter() as c:
        norm = anyclip.torch.clip_grad_norm_(params, 1.0, norm_type="inf", group=dist.group.WORLD)
    c.check(1)
    assert math.isnan(float(norm)), f"rank {rank}: inf norm {float(norm)}, want NaN"
    assert all(all_nan(p.grad) for p in params), f"rank {rank}: clipped {params}"
    # -inf: the minimum, NaN too; and 0 (tensors with a non-zero), as torch's on all the data
    with Counter() as c:
        low = anyclip.torch.get_total_norm([full[i] for i in mine_idx], "-inf", group=mesh1(world))
    c.check(1)
    assert math.isnan(float(low)), float(low)
    finite = [g.nan_to_num(0.5) for g in full]
    low = anyclip.torch.get_total_norm(
        [finite[i] for i in mine_idx], "-inf", group=dist.group.WORLD
    )
    want = np.min(np.abs(np.concatenate([g.double().numpy().ravel() for g in finite])))
    np.testing.assert_allclose(float(low), want, rtol=1e-6)
    count = anyclip.torch.get_total_norm([finite[i] for i in mine_idx], 0, group=dist.group.WORLD)
    torch_count = torch.nn.utils.get_total_norm(finite, 0)
    assert float(count) == float(torch_count), (float(count), float(torch_count))

    # a rank without gradients joins: it gets the others' NaN too
    held = [] if rank == 0 else with_grads([full[i] for i in mine_idx])
    with Counter() as c:
        jnorm = anyclip.torch.clip_grad_norm_(held, 1.0, norm_type=math.inf, group=dist.group.WORLD)
    c.check(1)
    assert math.isnan(float(jnorm)), f"rank {rank}: joined inf norm {float(jnorm)}"
    assert all(all_nan(p.grad) for p in held)

    # the sum (2-norm) carries NaN, and inf: TF then scales every value to NaN
    for bad, kind in ((math.nan, "nan"), (math.inf, "inf")):
        values = [g.nan_to_num(bad) if i == last else g for i, g in enumerate(full)]
        mine = [values[i] for i in mine_idx]
        with Counter() as c:
            clipped, gnorm = anyclip.clip_by_global_norm(mine, 1.0, group=dist.group.WORLD)
        c.check(1)
        assert str(float(gnorm)) == kind, f"rank {rank}: 2-norm {float(gnorm)}, want {kind}"
        assert all(all_nan(t) for t in clipped), f"rank {rank}: {kind} norm, clipped {clipped}"

    # DTensor inf norms: Partial("max") made Replicate keeps the last shard's NaN
    mesh = mesh1(world)
    x_full = torch.arange(1.0, 4 * world * 3 + 1).reshape(4 * world, 3)
    x_full[-1, 1] = math.nan  # in the last rank's shard
    x = distribute_tensor(x_full, mesh, [Shard(0)])
    with Counter() as c:
        n_inf = anyclip.norm(x, ord=math.inf)
    c.check(1)
    assert isinstance(n_inf, DTensor) and all(p.is_replicate() for p in n_inf.placements)
    assert math.isnan(float(n_inf.to_local())), float(n_inf.to_local())
    with Counter() as c:
        cols = anyclip.norm(x, ord=math.inf, axis=0)
    c.check(1)
    want_cols = np.max(np.abs(x_full.double().numpy()), axis=0)  # NaN in column 1
    np.testing.assert_array_equal(cols.full_tensor().double().numpy(), want_cols)
    with Counter() as c:
        total = anyclip.torch.get_total_norm([x], norm_type="inf")
    c.check(1)
    assert math.isnan(float(getattr(total, "to_local", lambda: total)())), total
    params = [torch.nn.Parameter(distribute_tensor(torch.zeros_like(x_full), mesh, [Shard(0)]))]
    params[0].grad = distribute_tensor(x_full, mesh, [Shard(0)])
    dnorm = anyclip.torch.clip_grad_norm_(params, 1.0, norm_type=math.inf)
    dnorm = getattr(dnorm, "to_local", lambda: dnorm)()
    assert math.isnan(float(dnorm)) and all_nan(params[0].grad), (dnorm, params[0].grad)
    same_on_every_rank(str(float(dnorm)))


_MESHES: dict[int, Any] = {}


def mesh1(world: int) -> Any:
    """The 1-D ``DeviceMesh`` of the world (made once: every rank makes it together)."""
    from torch.distributed.device_mesh import init_device_mesh

    if world not in _MESHES:
        _MESHES[world] = init_device_mesh("cpu", (world,))
    return _MESHES[world]


#: Largest distance, in float32 ULP, from TF 2.21's recorded global norm (the conformance
#: data), of a global norm split across ranks or sharded (stated in docs/distributed.md).
ULP_TF = 3


def history(world: int, rank: int) -> None:
    """ZClip, global QuantileClip and skip_on_spike with ``group=``: each rank owns some of the
    parameters; every rank holds the same statistics, takes the same decisions, and the clipped
    gradients are the one-process run's on all parameters (computed on every rank)."""
    import anyclip.torch

    shapes = [(5,), (3, 2), (4,), (2, 2)]
    mine = [i for i in range(len(shapes)) if i % world == rank]
    group = dist.group.WORLD

    def run(indices: list[int], grp: Any) -> tuple[list[np.ndarray], list[float]]:
        params = [torch.nn.Parameter(torch.zeros(shapes[i])) for i in indices]
        zc = anyclip.torch.ZClip(max_grad_norm=None, warmup_steps=5, group=grp)
        qc = anyclip.torch.QuantileClip(params, 0.8, 6, global_threshold=True, group=grp)
        opt = anyclip.torch.skip_on_spike(torch.optim.SGD(params, lr=0.1), 24, 3.0, group=grp)
        grads_out, stats = [], []
        for step in range(30):
            full = full_grads(shapes, seed=100 + step)
            scale = 30.0 if step in (12, 22, 27) else 1.0
            for p, i in zip(params, indices, strict=True):
                p.grad = full[i] * scale
            # the spike is decided on the raw norm (after ZClip and QuantileClip it is gone:
            # OLMo-core's one-sided rule then has nothing to skip)
            raw = anyclip.torch.get_total_norm([p.grad for p in params], group=grp)
            zc.step(params)
            qc.step()
            opt.step(grad_norm=raw)
            grads_out.append(np.concatenate([p.grad.numpy().ravel() for p in params]))
            stats += [float(zc.history.mean), float(zc.threshold), int(opt.skipped)]
        return grads_out, stats

    ours, stats = run(mine, group)
    same_on_every_rank(stats)
    alone, alone_stats = run(list(range(len(shapes))), None)
    assert alone_stats[-1] > 0, "no step was skipped: the case would not test the decision"
    np.testing.assert_allclose(stats, alone_stats, rtol=1e-5)
    offsets = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
    for got, want in zip(ours, alone, strict=True):
        part = np.concatenate([want[offsets[i] : offsets[i + 1]] for i in mine])
        np.testing.assert_allclose(got, part, rtol=1e-5, atol=1e-30)


#: Steps of the FSDP2 training runs whose loss is scaled (a spike) or made NaN or inf.
SPIKES = {17: 40.0, 22: 30.0, 27: 50.0}
NONFINITE = {20: math.nan, 25: math.inf}


def _fsdp_model(sharded: bool) -> torch.nn.Module:
    """The same small MLP on every rank (seeded); with ``sharded``, FSDP2 per layer and whole.

    Its 10- and 7-row weights shard unevenly on 4 ranks, its 7-row one on 2.
    """
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 12),
        torch.nn.Tanh(),
        torch.nn.Linear(12, 10),
        torch.nn.Tanh(),
        torch.nn.Linear(10, 7),
    )
    if sharded:
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    return model


def _train(
    rule: str, sharded: bool, steps: int = 30
) -> tuple[list[float], list[Any], list[np.ndarray]]:
    """Train ``steps`` steps of AdamW with ``rule``; the statistics after each step, the
    decisions, and the full parameters at the end (gathered from the shards)."""
    from torch.distributed.tensor import DTensor

    import anyclip.torch

    def full(t: torch.Tensor) -> torch.Tensor:
        return t.full_tensor() if isinstance(t, DTensor) else t

    model = _fsdp_model(sharded)
    params = list(model.parameters())
    if sharded:
        assert all(isinstance(p, DTensor) for p in params)
    opt: Any = torch.optim.AdamW(params, lr=1e-2)
    if rule == "zclip":
        zc = anyclip.torch.ZClip(max_grad_norm=None, warmup_steps=5)
    elif rule == "quantile":
        qc = anyclip.torch.QuantileClip(params, 0.8, 8)
    elif rule == "quantile_global":
        qc = anyclip.torch.QuantileClip(params, 0.8, 8, global_threshold=True)
    else:
        opt = anyclip.torch.skip_on_spike(opt, 24, 3.0, on_loss=rule == "skip_loss")
    stats: list[float] = []
    decisions: list[Any] = []
    for step in range(steps):
        gen = torch.Generator().manual_seed(1000 + step)
        x, y = torch.randn(16, 6, generator=gen), torch.randn(16, 7, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), y)
        scale = SPIKES.get(step, 1.0)
        if rule.startswith("skip"):
            scale = NONFINITE.get(step, scale)
        (loss * scale).backward()
        if rule == "zclip":
            norm = zc.step(model)
            h = zc.history
            stats += [float(full(norm)), float(zc.threshold), float(h.mean), float(h.var)]
            decisions += [int(h.count), bool(full(norm) > zc.threshold)]  # clipped
            opt.step()
        elif rule.startswith("quantile"):
            qc.step()
            for hist in [*qc.histories, qc.global_history]:
                if hist is not None:
                    stats += [float(v) for v in hist.window.flatten()]  # the norms recorded
                    decisions += [int(c) for c in hist.count.flatten()]
            opt.step()
        else:
            opt.step(loss=(loss * scale).detach())
            decisions += [bool(opt.last_step_applied), int(opt.skipped)]
            stats += [float(v) for v in opt.norms.window.flatten()]
        stats += [float(full(p.grad).double().norm()) for p in params]
        opt.zero_grad()
    if rule == "zclip":
        assert sum(decisions[1::2]) >= len(SPIKES), "ZClip must clip the spikes"
    if rule.startswith("skip"):
        assert int(opt.skipped) > len(NONFINITE), "a spike must be skipped too"
    return stats, decisions, [full(p.detach()).numpy() for p in params]


def fsdp2_history(world: int, rank: int) -> None:
    """ZClip, QuantileClip (per parameter, global) and skip_on_spike on an FSDP2 model.

    A small MLP (``fully_shard`` per layer, parameters and gradients ``Shard(0)`` DTensors,
    some uneven) trained 30 steps with AdamW, the loss scaled 30-50x at three steps (spikes)
    and, for skip_on_spike, made NaN and inf at two others. Every rank records the same
    statistics (norms, thresholds, histories) and decisions, equal to one process training
    the unsharded model on the same batches (statistics within float32 rounding of a
    regrouped sum, decisions exactly), and ends with the same parameters.
    """
    for rule in ("zclip", "quantile", "quantile_global", "skip", "skip_loss"):
        stats, decisions, params = _train(rule, sharded=True)
        same_on_every_rank([rule, [v if v == v else "nan" for v in stats], decisions])
        alone_stats, alone_decisions, alone_params = _train(rule, sharded=False)
        assert decisions == alone_decisions, (rule, decisions, alone_decisions)
        np.testing.assert_allclose(stats, alone_stats, rtol=1e-5, err_msg=rule)
        for got, want in zip(params, alone_params, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=rule)


#: AGC's factor ``max_norm / g_norm`` holds two unit sums (of the parameter and of the
#: gradient) that the split regroups, each a few float32 ULP from the one-process order.
ULP_AGC = 8


def _split(a: torch.Tensor, axis: int, world: int, rank: int) -> torch.Tensor:
    """This rank's part of ``a`` along ``axis`` (``np.array_split``'s parts, maybe empty)."""
    bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.arange(a.shape[axis]), world)])
    return a.narrow(axis, int(bounds[rank]), int(bounds[rank + 1] - bounds[rank])).clone()


def _close(
    got: torch.Tensor,
    want: torch.Tensor,
    what: str,
    ulp: int = ULP_DIST,
    scaled: bool = False,
    magnitude: torch.Tensor | None = None,
) -> None:
    """Within ``ulp`` float32 ULP of each value (``scaled``: of the array's largest value, for
    sums over the examples of terms of both signs, whose factors moved by an ULP or two;
    ``magnitude``: of the largest sum of the terms' absolute values, where the terms cancel
    so far that the result's largest value says nothing of their rounding errors)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.shape, want.shape)
    ref = np.abs(want.double().numpy())
    if scaled and ref.size:
        top = ref.max() if magnitude is None else float(magnitude.abs().max())
        ref = np.full_like(ref, top)
    tol = ulp * np.spacing(ref.astype(np.float32))
    err = np.abs(got.double().numpy() - want.double().numpy())
    assert np.all(err <= tol + 1e-30), f"{what}: {float((err / (tol + 1e-30)).max())} x {ulp} ULP"


def rules(world: int, rank: int) -> None:
    """per_example_clip and AGC with ``group=``: each rank holds a part of the gradients (whole
    leaves, and one leaf split along a non-batch / a unit's axis); the norms, and each rank's
    part of the clipped result, are the one-process call's on the whole gradients; one
    all-reduce per call (per leaf for AGC)."""
    import anyclip.torch
    from anyclip import tree

    group = dist.group.WORLD
    batch = 6
    shapes = [(batch, 7, 3), (batch, 5), (batch, 4, 4), (batch, 9), (batch, 2, 6)]
    full = full_grads(shapes, seed=19)
    for t, scale in zip(full, (0.05, 0.3, 1.0, 2.0, 0.5), strict=True):
        t.mul_(torch.linspace(0.0, 2.0, batch).reshape((batch,) + (1,) * (t.ndim - 1)) * scale)
    # leaf 0 split along axis 1 over all ranks; the others whole, on rank i % world
    mine = {0: _split(full[0], 1, world, rank)}
    mine.update({i: full[i] for i in range(1, len(full)) if i % world == rank})
    for style in ("tf", "optax", "opacus"):
        alone, alone_norms = tree.per_example_clip(full, 0.7, style=style)
        with Counter() as c:
            got, norms = tree.per_example_clip(mine, 0.7, style=style, group=group)
        c.check(max_all_reduce=1)
        assert sum(v for k, v in c.counts.items() if "reduce" in k) == 1, c.counts
        _close(norms, alone_norms, f"{style} norms")
        _close(got[0], _split(alone[0], 0, world, rank), f"{style} leaf 0", scaled=True)
        for i in mine:
            if i:
                _close(got[i], alone[i], f"{style} leaf {i}", scaled=True)
        same_on_every_rank(norms.tolist())

    # AGC, torch's OIHW / OI layouts (timm's units: every axis but the first), each parameter
    # and its gradient split along axis 1 (a bias: along its one axis, the unit)
    p_shapes = [(8, 6, 3, 3), (4, 10), (5,), (3, 7)]
    params = [t * 0.05 for t in full_grads(p_shapes, seed=23)]
    grads = [
        t * s for t, s in zip(full_grads(p_shapes, seed=29), (1e-3, 1e-2, 1e-4, 1.0), strict=True)
    ]
    params[1][0].zero_()  # a zero unit: eps sets its threshold
    axes = [1, 1, 0, 1]
    p_mine = [_split(p, a, world, rank) for p, a in zip(params, axes, strict=True)]
    g_mine = [_split(g, a, world, rank) for g, a in zip(grads, axes, strict=True)]
    for norm_type in (2.0, 1.0, math.inf, 3.0):
        alone = tree.adaptive_clip(grads, params, 0.01, layout="timm", norm_type=norm_type)
        with Counter() as c:
            got = tree.adaptive_clip(
                g_mine, p_mine, 0.01, layout="timm", norm_type=norm_type, group=group
            )
        c.check(max_all_reduce=len(p_shapes))
        for i, a in enumerate(axes):
            want = _split(alone[i], a, world, rank)
            _close(got[i], want, f"AGC {norm_type} leaf {i}", ulp=ULP_AGC)
        clipped = [not torch.equal(x, y) for x, y in zip(alone, grads, strict=True)]
        assert any(clipped) and not all(clipped), clipped  # some units clipped, some not
    # timm's signature, in place
    ps = [torch.nn.Parameter(p.clone()) for p in p_mine]
    for p, g in zip(ps, g_mine, strict=True):
        p.grad = g.clone()
    with Counter() as c:
        anyclip.torch.adaptive_clip_grad_(ps, 0.01, group=group)
    c.check(max_all_reduce=len(p_shapes))
    alone = tree.adaptive_clip(grads, params, 0.01, layout="timm")
    for i, (p, a) in enumerate(zip(ps, axes, strict=True)):
        want = _split(alone[i], a, world, rank)
        _close(p.grad, want, f"adaptive_clip_grad_ leaf {i}", ulp=ULP_AGC)


def layer_rules(world: int, rank: int) -> None:
    """per_example_layer_clip with ``group=``: each rank holds a part of every leaf (split along
    a non-batch axis; with 4 ranks some parts are empty); the per-leaf norms, and each rank's
    part of every clipped leaf, are the one-process call's on the whole gradients; one
    all-reduce of a ``(batch,)`` vector per leaf (its documented cost)."""
    from anyclip import tree

    group = dist.group.WORLD
    batch = 6
    shapes = {"conv": (batch, 7, 3), "dense": (batch, 5), "head": (batch, 2, 6), "bias": (batch, 9)}
    axes = {"conv": 1, "dense": 1, "head": 1, "bias": 1}
    full = dict(zip(shapes, full_grads(list(shapes.values()), seed=31), strict=True))
    for t, scale in zip(full.values(), (0.05, 0.3, 1.0, 2.0), strict=True):
        t.mul_(torch.linspace(0.0, 2.0, batch).reshape((batch,) + (1,) * (t.ndim - 1)) * scale)
    mine = {k: _split(t, axes[k], world, rank) for k, t in full.items()}
    for style in ("optax", "tf", "opacus"):
        alone, alone_norms = tree.per_example_layer_clip(full, 0.7, style=style)
        with Counter() as c:
            got, norms = tree.per_example_layer_clip(mine, 0.7, style=style, group=group)
        c.check(max_all_reduce=len(shapes))
        assert sum(v for k, v in c.counts.items() if "reduce" in k) == len(shapes), c.counts
        assert set(got) == set(norms) == set(shapes), (set(got), set(norms))
        for k in shapes:
            _close(norms[k], alone_norms[k], f"{style} norms {k}")
            want = _split(alone[k], axes[k] - 1, world, rank)  # the batch axis is summed away
            # a sum over the examples of factor * gradient: its error is in ULP of the terms'
            # absolute sum (4 ranks on this 2-core machine: 5 ULP of the result's largest
            # value for the "dense" leaf, at the base commit too)
            terms = _split(full[k].abs().sum(0), axes[k] - 1, world, rank)
            _close(got[k], want, f"{style} leaf {k}", scaled=True, magnitude=terms)
            same_on_every_rank(norms[k].tolist())
        clipped = torch.cat([alone_norms[k] > 0.7 / len(shapes) ** 0.5 for k in shapes])
        assert bool(clipped.any()) and not bool(clipped.all()), alone_norms  # some clipped
    try:
        tree.per_example_layer_clip(mine, 0.7, uniform=False, group=group)
    except ValueError as e:
        assert "uniform=True" in str(e), e
    else:
        raise AssertionError("uniform=False with group= must be refused")


#: Seconds a collective of :func:`empty_shards` may wait: a rank that raises before its
#: all-reduce (DTensor's inf norm of an empty shard) leaves the others waiting; this bounds
#: that wait, so the scenario fails instead of holding the world for ``TIMEOUT``.
EMPTY_SHARD_WAIT = 120


def empty_shards(world: int, rank: int) -> None:
    """Inf and -inf norms of DTensors with an empty local shard or a NaN on some ranks.

    One row (and 3 rows on 4 ranks) under ``Shard(0)``: the last ranks hold no row. DTensor's
    own ``amax`` and ``vector_norm(ord=inf)`` raise on those ranks (no identity for an empty
    reduction) while the others wait in the all-reduce. anyclip's ``norm`` (``ord=inf``, and
    ``ord=1`` / ``inf`` over both axes) and ``get_total_norm`` / ``clip_grad_norm_`` with
    ``norm_type=inf`` and ``-inf`` give the values of the full tensors: NumPy's maxima and
    torch's own ``get_total_norm`` of the plain full tensors, exactly; ``adaptive_clip_grad_``
    with ``norm_type=inf`` gives the one-process call's gradients (a NaN on the last rank
    included, which DTensor's own ``MAX`` over gloo dropped), with no gather; ``clip_by_norm``
    and AGC of a ``Shard`` over a dim of size 1 keep it (DTensor's in-place division and copy
    raised: no strategy keeps such a placement). The mesh's
    group waits ``EMPTY_SHARD_WAIT`` seconds at most.
    """
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    import anyclip
    import anyclip.torch

    pg = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=EMPTY_SHARD_WAIT))
    mesh = DeviceMesh.from_group(pg, "cpu")
    full = full_grads([(1, 9), (3, 5), (6,)], seed=37)
    full[2][4] = -9.0  # the largest magnitude, in an array sharded over every rank
    dts = [distribute_tensor(f, mesh, [Shard(0)]) for f in full]
    assert any(d.to_local().numel() == 0 for d in dts[:2]) or rank == 0
    f64 = [f.double().numpy() for f in full]

    def value(r: Any) -> np.ndarray:
        assert isinstance(r, DTensor) and all(p.is_replicate() for p in r.placements), r
        return r.to_local().double().numpy()

    for x, a in zip(dts[:2], f64[:2], strict=True):
        cases: list[tuple[Any, Any, Any]] = [
            (math.inf, None, np.max(np.abs(a))),
            (math.inf, 1, np.max(np.abs(a), axis=1)),
            (math.inf, 0, np.max(np.abs(a), axis=0)),
            (1, (0, 1), np.max(np.sum(np.abs(a), axis=0))),
            (math.inf, (0, 1), np.max(np.sum(np.abs(a), axis=1))),
        ]
        for ord_, axis, want in cases:
            with Counter() as c:
                got = anyclip.norm(x, ord=ord_, axis=axis)
            c.check(2)
            if axis == 1:  # the kept rows stay sharded
                got = got.full_tensor()
                assert isinstance(got, torch.Tensor)
                np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-6)
                continue
            np.testing.assert_allclose(value(got), want, rtol=1e-6, err_msg=f"{ord_} {axis}")

    for order in (math.inf, -math.inf):
        want = torch.nn.utils.get_total_norm(full, order)  # torch's, on the full tensors
        with Counter() as c:
            got = anyclip.torch.get_total_norm(dts, order)
        c.check(2)
        assert float(value(got)) == float(want), (order, value(got), want)
        params = with_grads(dts)
        with Counter() as c:
            norm = anyclip.torch.clip_grad_norm_(params, 0.5, norm_type=order)
        c.check(2)
        assert float(value(norm)) == float(want), (order, value(norm), want)
        for p, f in zip(params, full, strict=True):
            assert p.grad.placements == (Shard(0),)
            check_scaled(p.grad.full_tensor(), f, min(0.5 / float(want), 1.0))  # TF's factor

    # AGC (timm's inf unit norms): a bias whose NaN is on the last rank (gloo's MAX keeps rank
    # 0's NaN only; timm's result is NaN for the whole unit) and a weight whose units are split
    # over the ranks, the last one empty on 4; the one-process call's values, bit for bit
    bias = torch.tensor([0.5, -0.25, 2.0, 1.0, 0.75, -3.0, math.nan])
    weight = full_grads([(3, 5)], seed=41)[0]
    alone = []
    for g, placement in ((bias, Shard(0)), (weight, Shard(1))):
        q = torch.nn.Parameter(g.nan_to_num() * 0.5 + 0.25)
        q.grad = g * 0.1
        p = torch.nn.Parameter(distribute_tensor(q.detach(), mesh, [placement]))
        p.grad = distribute_tensor(q.grad, mesh, [placement])
        anyclip.torch.adaptive_clip_grad_([q], 0.01, norm_type=math.inf)
        with Counter() as c:
            anyclip.torch.adaptive_clip_grad_([p], 0.01, norm_type=math.inf)
        c.check(2)  # the parameter's and the gradient's unit maxima, no gather
        assert p.grad.placements == (placement,), p.grad.placements
        got = p.grad.full_tensor()
        assert torch.equal(got.isnan(), q.grad.isnan()), (got, q.grad)
        assert torch.equal(got.nan_to_num(), q.grad.nan_to_num()), (got, q.grad)
        alone.append(q.grad)
    assert bool(alone[0].isnan().all()), alone[0]  # the NaN is the whole unit's
    assert not bool(torch.equal(alone[1], weight * 0.1)), "some weight units must be clipped"

    # a Shard over a dim of size 1 (the 1-row tensor; a weight of one input column): DTensor
    # has no in-place strategy keeping it, so the division and AGC's copy go shard by shard
    # (l2_normalize's and AGC's products still all-gather such a tensor: DTensor's choice)
    x, a = dts[0], f64[0]
    for axes in (None, 1):
        n = np.sqrt(np.sum(a * a, axis=axes, keepdims=True))
        with Counter() as c:
            out = anyclip.clip_by_norm(x, 1.0, axes=axes)
        c.check(1)
        assert out.placements == (Shard(0),), out.placements
        np.testing.assert_allclose(
            out.full_tensor().double().numpy(), a / np.maximum(n, 1.0), rtol=1e-6
        )
    column = full_grads([(4, 1)], seed=47)[0]
    q = torch.nn.Parameter(column * 0.01)
    q.grad = column.clone()
    p = torch.nn.Parameter(distribute_tensor(q.detach(), mesh, [Shard(1)]))
    p.grad = distribute_tensor(q.grad, mesh, [Shard(1)])
    anyclip.torch.adaptive_clip_grad_([q], 0.01)
    anyclip.torch.adaptive_clip_grad_([p], 0.01)  # (DTensor's products gather this one)
    assert p.grad.placements == (Shard(1),), p.grad.placements
    assert torch.equal(p.grad.full_tensor(), q.grad), (p.grad.full_tensor(), q.grad)
    assert not torch.equal(q.grad, column), "the column's units must be clipped"


def float64_axes(world: int, rank: int) -> None:
    """float64 norms over a sharded axis (the root's TF rounding, then one all-reduce).

    ``norm``, ``clip_by_norm`` and ``l2_normalize`` of a float64 ``Shard(1)`` DTensor over
    axis 1 and over both: the exact values of the full data (NumPy in float64, within 4 ULP:
    the shards' partial sums regroup TF's sum), the placements kept. The float64 root mixed a
    plain mask of positions into the DTensor (``RuntimeError: got mixed torch.Tensor and
    DTensor``).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    import anyclip

    mesh = init_device_mesh("cpu", (world,))
    full = full_grads([(9, 6)], seed=43)[0].double()
    a = full.numpy()
    x = distribute_tensor(full, mesh, [Shard(1)])
    for axis in (1, None):
        n = np.sqrt(np.sum(a * a, axis=axis, keepdims=True))
        with Counter() as c:
            r = anyclip.norm(x, axis=axis, keepdims=True)
            out = anyclip.clip_by_norm(x, 1.0, axes=axis)
            l2 = anyclip.l2_normalize(x, axis=axis)
        c.check(3)
        assert isinstance(r, DTensor) and all(p.is_replicate() for p in r.placements)
        np.testing.assert_allclose(r.full_tensor().numpy(), n, rtol=4 * 2.0**-52)
        for got, want in ((out, a / np.maximum(n, 1.0)), (l2, a / n)):
            assert isinstance(got, DTensor) and got.placements == (Shard(1),), got
            assert got.dtype == torch.float64
            np.testing.assert_allclose(got.full_tensor().numpy(), want, rtol=8 * 2.0**-52)


def _tf_cases() -> list[tuple[str, list[np.ndarray], np.ndarray]]:
    """The float32 global_norm cases of the conformance data whose items are all arrays."""
    # from the installed anyclip-conformance (as the tests read it), not from a checkout's
    # conformance/ folder, which an unpacked sdist does not have
    from anyclip_conformance import reference

    cases = reference.load_index()
    arrays = reference.load_arrays("global_norm")
    out = []
    for cid, entry in cases.items():
        if entry["function"] != "global_norm" or "outputs" not in entry:
            continue
        if entry["outputs"].get("dtype") != "float32" or entry.get("kwargs"):
            continue
        items = entry["args"][0].get("items", [])
        if not items or not all(isinstance(i, dict) and "array" in i for i in items):
            continue
        out.append((cid, [arrays[i["array"]] for i in items], arrays[entry["outputs"]["key"]]))
    return out


def tf_reference(world: int, rank: int) -> None:
    """TF's recorded global norms, the arrays split across ranks (group=) or sharded."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import anyclip

    mesh = init_device_mesh("cpu", (world,))
    cases = _tf_cases()
    assert len(cases) >= 20, len(cases)
    worst = 0.0
    for cid, items, want in cases:
        tensors = [torch.from_numpy(a.copy()) for a in items]
        mine = [t for i, t in enumerate(tensors) if i % world == rank]
        split = float(anyclip.global_norm(mine, group=dist.group.WORLD))
        sharded = [
            distribute_tensor(t, mesh, [Shard(0)] if t.ndim else [Replicate()]) for t in tensors
        ]
        shard = float(anyclip.global_norm(sharded).to_local())
        ref = float(want)
        for got, how in ((split, "split"), (shard, "sharded")):
            if math.isfinite(ref):
                d = ulp_distance(got, ref)
                worst = max(worst, d)
                assert d <= ULP_TF, f"{cid} ({how}): {got} vs TF {ref}, {d} ULP"
            else:
                assert math.isnan(got) == math.isnan(ref) and not math.isfinite(got), (
                    f"{cid} ({how}): {got} vs TF {ref}"
                )
    print(f"tf_reference: {len(cases)} cases, worst {worst} ULP", file=sys.stderr)


SCENARIOS: dict[str, Callable[[int, int], None]] = {
    "ddp": ddp,
    "fsdp2": fsdp2,
    "tensor_parallel": tensor_parallel,
    "pipeline": pipeline,
    "norms": norms,
    "elementwise": elementwise,
    "accumulate": accumulate,
    "tf_reference": tf_reference,
    "nonfinite": nonfinite,
    "groups": groups,
    "history": history,
    "fsdp2_history": fsdp2_history,
    "rules": rules,
    "layer_rules": layer_rules,
    "empty_shards": empty_shards,
    "float64_axes": float64_axes,
}


def _store(rank: int, world: int, timeout: datetime.timedelta) -> Any:
    """The ranks' TCPStore, on a port the OS gives rank 0 (no port picked free beforehand, which
    another test worker's world could take first): rank 0 writes it to ``ANYCLIP_DIST_PORT``
    (a file, renamed into place whole), the others read it there."""
    path = Path(os.environ["ANYCLIP_DIST_PORT"])
    if rank == 0:
        store = dist.TCPStore(
            "127.0.0.1", 0, world, is_master=True, timeout=timeout, wait_for_workers=False
        )
        partial = path.with_name(path.name + ".partial")
        partial.write_text(str(store.port), encoding="ascii")
        partial.replace(path)
        return store
    deadline = time.monotonic() + timeout.total_seconds()
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank 0 wrote no port to {path} in {timeout}")
        time.sleep(0.05)
    port = int(path.read_text(encoding="ascii"))
    return dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timeout)


def main() -> None:
    out_path = sys.argv[1]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    # A collective may wait as long as the whole world may run (the test's TIMEOUT, which then
    # kills the ranks): on a loaded machine 4 ranks share two cores with the rest of the suite
    # (60 s, then 300 s, were too short under a load of 10 on two cores).
    timeout = datetime.timedelta(seconds=int(os.environ.get("ANYCLIP_DIST_TIMEOUT", "600")))
    dist.init_process_group(
        "gloo", store=_store(rank, world, timeout), rank=rank, world_size=world, timeout=timeout
    )
    results: dict[str, str] = {}
    for name, fn in SCENARIOS.items():
        try:
            fn(world, rank)
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - reported per scenario to the test
            results[name] = f"rank {rank}: " + traceback.format_exc()
            # in the log too: a rank that fails between two collectives leaves the others
            # waiting, and the results file is then never written
            print(f"{name}: {results[name]}", file=sys.stderr, flush=True)
        dist.barrier()
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        merged = {
            name: next((r[name] for r in gathered if r[name] != "ok"), "ok") for name in SCENARIOS
        }
        with open(out_path, "w", encoding="utf-8") as fh:
            json.dump(merged, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
