"""The kernels seam: which kernels a call gets, and that a subclass changes only its step.

``kernels_for`` picks the kernels from the library and dtype; ``bind(kernels)`` runs the public
code with fixed kernels. A subclass that overrides ``total_half_squares`` (the step a
distributed reduction will override) must change the global norm, and the clipping factor
built from it, exactly as the formula says; and torch lists spread over several devices (CPU
and a GPU) must give the single-device result.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip._api import bind
from anyclip._kernels import DASK, GENERIC, JAX, NUMPY, TORCH, Kernels, kernels_for
from anyclip_conformance import assert_array

from .conftest import ULP_GLOBAL

#: The kernels each library gets, by dtype (None: every dtype).
EXPECTED = {
    ("numpy", "float32"): NUMPY,
    ("numpy", "float64"): NUMPY,
    ("numpy", "float16"): GENERIC,
    ("torch", None): TORCH,
    ("jax", "float32"): JAX,
    ("jax", "float64"): JAX,
    ("jax", "float16"): GENERIC,
    ("jax", "bfloat16"): GENERIC,
    ("array_api_strict", None): GENERIC,
    ("dask", None): DASK,
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32"])
def test_kernels_for_library_and_dtype(backend, make, dtype):
    x = make([1, 2], dtype)
    want = EXPECTED.get((backend.library, dtype), EXPECTED.get((backend.library, None), GENERIC))
    assert kernels_for(backend.xp, [x]) is want
    assert kernels_for(backend.xp, [x]) is want  # the cached answer is the same


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_compile_off_the_cpu_takes_the_generic_kernels(backend, monkeypatch):
    """While ``torch.compile`` traces, tensors off the CPU get the generic kernels (plain ops
    Inductor fuses; the multi-tensor route gave wrong results compiled on CUDA, GPU runs 3
    and 4; run 5 gave the eager values), CPU tensors keep torch's; outside a trace both get
    torch's. ``meta`` tensors stand for a device here."""
    import anyclip._compat as compat

    torch = backend.module
    cpu, meta = torch.ones(2), torch.ones(2, device="meta")
    assert kernels_for(backend.xp, [meta]) is TORCH
    monkeypatch.setattr(compat, "torch_compiling", lambda: True)
    assert kernels_for(backend.xp, [meta]) is GENERIC
    assert kernels_for(backend.xp, [cpu]) is TORCH


class Replicated(Kernels):
    """Two identical replicas: the reduction across the group doubles the sum of squares."""

    name = "replicated"

    def total_half_squares(self, xp, arrays):
        total = super().total_half_squares(xp, arrays)
        return total + total


def test_total_half_squares_is_the_reduction_seam(backend, make):
    a = np.array([3.0, -4.0, 1.5], dtype=np.float32)
    b = np.array([[12.0], [0.25]], dtype=np.float32)
    xs = [make(a, "float32"), None, make(b, "float32")]
    api = bind(Replicated())
    # the norm over both replicas: sqrt(2 * sum of squares), in float64 by hand
    want = math.sqrt(2 * (np.sum(a.astype(np.float64) ** 2) + np.sum(b.astype(np.float64) ** 2)))
    norm = api.global_norm(xs)
    assert_array(norm, np.float32(want), backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    clipped, used = api.clip_by_global_norm(xs, 6.5)
    assert_array(used, np.float32(want), backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    assert clipped[1] is None
    for got, x in zip((clipped[0], clipped[2]), (a, b), strict=True):
        # TF's factor clip * minimum(1 / norm, 1 / clip), in float64 by hand
        factor = 6.5 * min(1 / want, 1 / 6.5)
        assert_array(got, x * factor, backend=backend, dtype="float32", ulp=ULP_GLOBAL + 2)


@pytest.mark.parametrize("backend", ["torch-cuda"], indirect=True)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_torch_list_over_two_devices(backend, requires_grad):
    """A list on the GPU and the CPU: per-device partial sums, the result on the first device."""
    torch = backend.module
    rng = np.random.default_rng(3)
    host = [rng.standard_normal(n).astype(np.float32) for n in (70_000, 5, 300, 1)]
    on_gpu = [backend.asarray(h, "float32") for h in host[:2]]
    on_cpu = [torch.asarray(h.copy()) for h in host[2:]]
    mixed = [on_gpu[0], on_cpu[0], on_gpu[1], on_cpu[1]]
    mixed_host = [host[0], host[2], host[1], host[3]]  # the values of `mixed`, in its order
    if requires_grad:
        mixed = [t.detach().requires_grad_(True) for t in mixed]
    total = sum(np.sum(h.astype(np.float64) ** 2) for h in host)
    norm = anyclip.global_norm(mixed)
    assert norm.device == mixed[0].device
    assert_array(norm, np.float32(math.sqrt(total)), backend=backend, dtype="float32", ulp=4)
    clipped, used = anyclip.clip_by_global_norm(mixed, 1.0)
    assert_array(used, np.float32(math.sqrt(total)), backend=backend, dtype="float32", ulp=4)
    factor = min(1 / math.sqrt(total), 1.0)
    for got, src, h in zip(clipped, mixed, mixed_host, strict=True):
        assert got.device == src.device
        np.testing.assert_allclose(got.detach().cpu().numpy(), h * factor, rtol=1e-5)
    if requires_grad:
        torch.sum(torch.stack([c.sum().to(mixed[0].device) for c in clipped])).backward()
        assert all(t.grad is not None and t.grad.device == t.device for t in mixed)


#: One sample's functions under ``torch.func.vmap`` (per-sample norms, as DP-SGD computes them).
PER_SAMPLE = {
    "norm": lambda r: anyclip.norm(r),
    "norm_ord1": lambda r: anyclip.norm(r, ord=1),
    "norm_inf": lambda r: anyclip.norm(r, ord=math.inf),
    "clip_by_norm": lambda r: anyclip.clip_by_norm(r, 1.0),
    "l2_normalize": lambda r: anyclip.l2_normalize(r),
    "global_norm": lambda r: anyclip.global_norm([r, r[:10]]),
    "clip_by_global_norm": lambda r: anyclip.clip_by_global_norm([r], 1.0)[0][0],
    "l2_normalize_acc": lambda r: anyclip.l2_normalize(r.half(), accumulate_dtype="float32"),
}


@pytest.mark.parametrize("size", [1000, (1 << 20) + 5], ids=["small", "over_one_block"])
@pytest.mark.parametrize("name", list(PER_SAMPLE))
@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_func_vmap_gives_each_sample_its_own_result(backend, name, size):
    # the fast paths (_foreach_norm has no batching rule) and the block-wise steps (in-place
    # writes into a plain array) step aside for torch.func's wrapped tensors
    import torch

    if size > 1000 and name not in ("norm_ord1", "norm_inf", "l2_normalize_acc"):
        pytest.skip("only the block-wise steps depend on the size")
    fn = PER_SAMPLE[name]
    x = torch.randn(3, size, generator=torch.Generator().manual_seed(0))
    out = torch.func.vmap(fn)(x)
    loop = torch.stack([fn(row) for row in x])  # the fast paths, summed in another order
    dtype = str(loop.dtype).removeprefix("torch.")
    assert_array(out, loop.numpy().astype(np.float64), backend=backend, dtype=dtype, ulp=4)


@pytest.mark.parametrize("name", list(PER_SAMPLE))
@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_func_vmap_of_grad_gives_each_sample_its_gradient(backend, name):
    # per-sample gradients as DP-SGD takes them, vmap(grad(loss)), through TF's gradient
    # rules (autograd Functions: they need a vmap rule, "You tried to vmap over
    # _SelectWithJvp" before); each row's gradient is the one eager autograd gives that row
    import torch

    fn = PER_SAMPLE[name]
    x = torch.randn(3, 1000, generator=torch.Generator().manual_seed(1))

    def loss(row):
        out = fn(row)
        weights = torch.linspace(0.5, 2.0, out.numel(), dtype=out.dtype).reshape(out.shape)
        return (out * weights).sum()

    out = torch.func.vmap(torch.func.grad(loss))(x)
    rows = []
    for row in x:
        row = row.clone().requires_grad_(True)
        loss(row).backward()
        rows.append(row.grad)
    loop = torch.stack(rows).numpy()
    assert_array(out, loop.astype(np.float64), backend=backend, dtype="float32", ulp=math.inf)
    scale = float(np.max(np.abs(loop)))
    np.testing.assert_allclose(out.numpy(), loop, rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_copies_to_the_cpu_wait_for_their_data(backend):
    """A copy from an accelerator to the CPU is never ``non_blocking``: it returns before its
    data arrive (GPU run 6: the CPU half of a list on CUDA and the CPU was scaled by what the
    factor's memory held before, 17,870 times off). Copies to an accelerator stay queued.
    Checked on the copies anyclip asks for (no device needed: the calls are recorded, not
    made), and in the source: every ``non_blocking`` copy goes through ``torch_to``."""
    import ast
    from pathlib import Path

    from torch.overrides import TorchFunctionMode

    from anyclip._compat import torch_to

    torch = backend.module
    calls: list[dict[str, Any]] = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "to":
                calls.append(dict(kwargs or {}))
                return args[0]
            return func(*args, **(kwargs or {}))

    t = torch.ones(2)
    with Record():
        torch_to(t, torch.device("cpu"))
        torch_to(t, torch.device("cuda", 0), torch.float16)
        torch_to(t, torch.device("meta"))
    assert [c["non_blocking"] for c in calls] == [False, True, True]
    assert calls[1]["dtype"] == torch.float16 and calls[1]["device"] == torch.device("cuda", 0)

    src = Path(anyclip.__file__).parent
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "non_blocking":
                where = f"{path.relative_to(src)}:{node.lineno}"
                assert path.name == "_compat.py", f"a non_blocking copy outside torch_to: {where}"


@pytest.mark.parametrize("seed", range(6))
def test_groups_of_small_arrays_are_cut_at_the_cap(seed):
    # groups() of arrays all smaller than a block: in order, each group closes with the
    # first array that takes it to `join` elements or more (the last may hold fewer); the
    # cut is made from the running total with a search written in Python (the C builtin
    # `bisect` broke torch.compile: tests/test_compile.py)
    from anyclip._kernels._base import groups

    rng = np.random.default_rng(seed)
    sizes = [int(n) for n in rng.integers(0, 40, size=int(rng.integers(1, 300)))]
    join = int(rng.integers(1, 120))
    got = groups(list(range(len(sizes))), lambda i: sizes[i], block=10**6, join=join)
    assert [i for g in got for i in g] == list(range(len(sizes)))
    for n, g in enumerate(got):
        held = [sum(sizes[i] for i in g[:k]) for k in range(1, len(g) + 1)]
        assert all(h < join for h in held[:-1]), (n, held)  # not closed before its last
        assert held[-1] >= join or n == len(got) - 1, (n, held)
