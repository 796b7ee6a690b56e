"""Long float64 sums of values of equal magnitude: within 2 ULP of TF 2.21 at every length.

When every square is the same number, the sum's error comes from the order of additions
alone: TF's own norm is 10 to 20 ULP from the exact one from a few thousand elements on, and
any other order (a more accurate one included) is as far from TF. The NumPy, torch (CPU),
JAX (CPU, not sharded), array-api-strict and dask kernels add float64 squares in TF's order
(``anyclip._kernels._tforder``), JAX under ``jit`` too, dask in chunks cut at nodes of TF's
tree (:func:`test_dask_chunks`: chunked otherwise, and in two dimensions); the reference is
``tests/data/make_long_sums.py`` (TF 2.21, one intra-op thread), committed as
``tests/data/long_sums.npz`` and re-run with ``--live-tf``.

The budget, 2 ULP, covers TF's own spread: from about 100,000 elements TF's multi-threaded
sum moves by up to 2 ULP with the machine's thread count.

On a GPU (torch-cuda, jax-gpu, CuPy) float64 sums are the device's own reductions (torch's
``vector_norm`` rows, XLA:GPU's tree, CuPy's), not TF's CPU order, which the CPU kernels
reproduce on the host: TF's own GPU kernels do not give TF-CPU's bits either. Those trees
land near the exact sum, so the budget there is TF's own distance from the exact norm, plus
the 2 ULP, plus :func:`_device_slack` for the route's own roundings (:func:`budget`), the
GPU difference ``float64-long-sums`` declared in ``anyclip_conformance.budgets``. On an H200
(torch 2.11): torch-cuda was 4 ULP from TF at ``1.7/1000``, exactly TF's distance from the
exact norm there; CuPy 14.2 5 ULP (norm, global norm) and 3 (clip_by_norm) there.
"""

from __future__ import annotations

import functools
import math
import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import anyclip
from anyclip._kernels import _tforder, _tforder_xp
from anyclip_conformance import assert_array, load_backend
from anyclip_conformance.budgets import GPU_DIFFERENCES, gpu_budget

from .conftest import assert_live_reference

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_long_sums.py"
REF = dict(np.load(DATA / "long_sums.npz"))

#: The script's constants and input generator (``tests/data`` is not a package).
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))

#: Largest distance from TF's value.
ULP = 2

#: The dask chunkings of :func:`test_dask_chunks`: ``(rows, chunks)`` of the input reshaped to
#: ``(rows, -1)``. Chunks shorter than a leaf of TF's tree (4,096), of an odd length, of
#: several leaves, and a 2-D array chunked along both axes (flattened by dask's reshape).
DASK_CHUNKS = {
    "1000": (1, (1, 1000)),
    "3001": (1, (1, 3001)),
    "100000": (1, (1, 100_000)),
    "2-D": (4, (1, 1250)),
}

#: Backends whose float64 sums are the device's own reduction, not TF's (CPU) order: the
#: GPU difference ``float64-long-sums`` of ``anyclip_conformance.budgets.GPU_DIFFERENCES``.
DEVICE_ORDER = frozenset(GPU_DIFFERENCES["float64-long-sums"].ulps)


def _device_slack(name: str) -> float:
    """The device route's own roundings beyond the exact value (``float64-long-sums``).

    torch's sums of rows of ``ROW`` elements take each row's ``vector_norm``, square it and
    sum again (each norm rounded twice). Measured with that route forced on the CPU (torch
    2.13, ``_tf_order`` off): at most 3 ULP beyond TF's distance from the exact norm on these
    inputs.
    """
    return gpu_budget("float64-long-sums", name, 0)


@functools.cache
def _exact(key: str) -> dict[str, np.ndarray]:
    """The exactly rounded values of ``key``'s reference quantities (``math.fsum`` of squares)."""
    x = gen.inputs()[key]
    norm = math.sqrt(math.fsum(v * v for v in x.tolist()))
    third = x[: x.size // 3].tolist()
    out = {
        "norm": np.float64(norm),
        "global_norm": np.float64(norm),
        "global_norm2": np.float64(math.sqrt(math.fsum(v * v for v in x.tolist() + third))),
    }
    if x.size <= gen.CLIP_MAX:
        out["clip_by_norm"] = x * gen.CLIP_NORM / norm if norm > gen.CLIP_NORM else x
    return out


def _ulps(a: np.ndarray, b: np.ndarray) -> int:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return int(np.max(np.abs(a.view(np.int64) - b.view(np.int64))))


def budget(name: str, key: str, quantity: str, ulp: int = ULP) -> int:
    """``ulp``; on :data:`DEVICE_ORDER` backends plus TF's distance from the exact value.

    On those the sum is not in TF's order: it may be as far from TF as the exact value is
    (10 to 20 ULP for the longest inputs), and :func:`_device_slack` beyond that.
    """
    if name not in DEVICE_ORDER:
        return ulp
    return ulp + _device_slack(name) + _ulps(REF[f"{key}/{quantity}"], _exact(key)[quantity])


#: Under ``jax.jit`` XLA:CPU contracts some squares with their additions into fused
#: multiply-adds (one rounding where TF has two): 1 ULP from TF at most on these inputs.
ULP_JIT = 2


def test_reference_shows_the_problem():
    # the inputs exercise it: TF is far from the exact norm for some long input
    far = 0
    for key, x in gen.inputs().items():
        exact = np.sqrt(np.float64(x[0]) ** 2 * x.size)  # one rounding of an exact product
        far = max(far, abs(int(REF[f"{key}/norm"].view(np.int64) - exact.view(np.int64))))
    assert far >= 10


def test_norm(backend, make, check):
    for key, x in gen.inputs().items():
        ulp = budget(backend.name, key, "norm")
        check(anyclip.norm(make(x, "float64")), REF[f"{key}/norm"], "float64", ulp, what=key)


def test_global_norm(backend, make, check):
    for key, x in gen.inputs().items():
        t = make(x, "float64")
        ulp = budget(backend.name, key, "global_norm")
        check(anyclip.global_norm([t]), REF[f"{key}/global_norm"], "float64", ulp, what=key)
        two = [t, make(x[: x.size // 3], "float64")]
        ulp = budget(backend.name, key, "global_norm2")
        check(anyclip.global_norm(two), REF[f"{key}/global_norm2"], "float64", ulp, what=key)


def test_clip_by_norm(backend, make, check):
    for key, x in gen.inputs().items():
        if x.size <= gen.CLIP_MAX:
            out = anyclip.clip_by_norm(make(x, "float64"), gen.CLIP_NORM)
            ulp = budget(backend.name, key, "clip_by_norm")
            check(out, REF[f"{key}/clip_by_norm"], "float64", ulp, what=key)


@pytest.mark.parametrize("axes", [(0,), (-1,)])
def test_clip_by_norm_over_every_axis_named(backend, make, check, axes):
    # TF's reduce_sum over every axis named is its full reduction: the same bits as
    # axes=None (measured, TF 2.21: 30 of 30 random float64 arrays each, shapes (3000,),
    # (9000,), (27, 10, 4) and (50, 300) with every axis named). anyclip summed such axes in
    # the library's own order (NumPy 2 ULP, JAX 3 ULP from TF on (3000,) float64)
    for key, x in gen.inputs().items():
        if x.size <= gen.CLIP_MAX:
            out = anyclip.clip_by_norm(make(x, "float64"), gen.CLIP_NORM, axes=axes)
            ulp = budget(backend.name, key, "clip_by_norm")
            check(out, REF[f"{key}/clip_by_norm"], "float64", ulp, what=key)


def test_device_budget_is_tfs_distance_from_the_exact_norm():
    # on the CPU backends the budget is 2 ULP; on a GPU it grows by TF's own error, which
    # these inputs make large (the point of the data): up to 19 ULP, never the other way
    assert budget("torch", "3.1/100000", "norm") == ULP
    gaps = [budget("torch-cuda", key, "norm") - ULP for key in gen.inputs()]
    assert max(gaps) >= 10
    assert budget("torch-cuda", "1.7/1000", "norm") == ULP + _device_slack("torch-cuda") + 4


@pytest.mark.parametrize("layout", DASK_CHUNKS)
def test_dask_chunks(layout):
    # rechunked at nodes of TF's tree whatever the input's chunks: TF's value
    da = pytest.importorskip("dask.array")
    backend = load_backend("dask")
    rows, chunks = DASK_CHUNKS[layout]

    def check(out, want, what):
        assert_array(out, want, backend=backend, dtype="float64", ulp=ULP, what=what)

    for key, x in gen.inputs().items():
        if x.size % rows:
            continue
        t = da.from_array(x.reshape(rows, -1), chunks=chunks)
        check(anyclip.norm(t), REF[f"{key}/norm"], key)
        third = da.from_array(x[: x.size // 3], chunks=chunks[-1])  # 1-D
        check(anyclip.global_norm([t, third]), REF[f"{key}/global_norm2"], key)
        if x.size <= gen.CLIP_MAX:
            want = REF[f"{key}/clip_by_norm"].reshape(t.shape)
            check(anyclip.clip_by_norm(t, gen.CLIP_NORM), want, key)


@pytest.mark.live_tf
def test_committed_reference_is_tfs(tmp_path):
    # the committed file is still what TF 2.21 gives (run with --live-tf)
    assert_live_reference(SCRIPT, REF, tmp_path)


@pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)
def test_under_jit(backend, make, check):
    # the same order traced: reshapes, gathers and additions that XLA does not reassociate
    norm = backend.jit(anyclip.norm)
    pair = backend.jit(lambda a, b: anyclip.global_norm([a, b]))
    for key, x in gen.inputs().items():
        t = make(x, "float64")
        ulp = budget(backend.name, key, "norm", ULP_JIT)
        check(norm(t), REF[f"{key}/norm"], "float64", ulp, what=key)
        two = pair(t, make(x[: x.size // 3], "float64"))
        ulp = budget(backend.name, key, "global_norm2", ULP_JIT)
        check(two, REF[f"{key}/global_norm2"], "float64", ulp, what=key)


def test_global_norm_with_empty_arrays(backend, make, check):
    # empty arrays in a float64 list: each an empty segment of TF's order (sum 0). TF 2.21
    # (live): 0.0 for [zeros(0), zeros((0, 3))], 8.366600265340756 with ones(70) after them
    empty = [make(np.zeros(0), "float64"), make(np.zeros((0, 3)), "float64")]
    check(anyclip.global_norm(empty), np.float64(0.0), "float64")
    ones = make(np.ones(70), "float64")
    check(anyclip.global_norm([*empty, ones]), np.float64(8.366600265340756), "float64")


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_without_numpy(backend, make, check, monkeypatch):
    # torch does not need NumPy: without it, float64 CPU sums keep TF's order in torch
    # operations (`tf_order_squares`) instead of a NumPy view of the tensor's memory
    from anyclip._kernels import _torch_sums

    calls = []

    def spy(xp, arrays, *, half, halve=True):
        calls.append(half)
        return _tforder_xp.tf_order_squares(xp, arrays, half=half, halve=halve)

    monkeypatch.setattr(_torch_sums, "_numpy", lambda: None)
    monkeypatch.setattr(_torch_sums, "tf_order_squares", spy)
    for key, x in gen.inputs().items():
        t = make(x, "float64")
        check(anyclip.norm(t), REF[f"{key}/norm"], "float64", ULP, what=key)
        two = [t, make(x[: x.size // 3], "float64")]
        check(anyclip.global_norm(two), REF[f"{key}/global_norm2"], "float64", ULP, what=key)
    assert set(calls) == {False, True}  # norms and global norms took it (short norms: not)


@pytest.mark.parametrize(
    "sizes",
    [
        [1_000_000],
        [1_234_567],
        [100_000, 3, 4097, 0, 65_537],
        [257, 1000, 255, 7] * 30,
        [12_345, 5, 8193],
    ],
)
def test_both_forms_of_tfs_order_are_bit_equal(sizes):
    # The NumPy form (batches of leaves, levels of nodes, on NumPy and torch CPU) and the
    # array-API form (padded gathers, on JAX and array-api-strict) of TF's order give the
    # same bits on random values: the TF data above (equal magnitudes) allows 2 ULP, so a
    # 1 ULP slip in either form's order would pass there; here it cannot. Arrays of lengths
    # not a multiple of 16 shift every later leaf's place in a row of 16.
    xps = pytest.importorskip("array_api_strict")
    rng = np.random.default_rng(len(sizes))
    arrays = [rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3]) for n in sizes]
    flat = np.concatenate(arrays)
    per_array = _tforder.tf_order_sums(np, flat, sizes, square=True)
    strict = [xps.asarray(a) for a in arrays]
    for a, s, got in zip(strict, sizes, per_array, strict=True):
        if s:
            want = float(_tforder_xp.tf_order_squares(xps, [a], half=False))
            assert got.hex() == want.hex(), (s, got, want)
    total = _tforder.tf_order_total(np, per_array, half=True)
    want = float(_tforder_xp.tf_order_squares(xps, strict, half=True))
    assert total.hex() == want.hex()


@pytest.mark.parametrize("backend", ["jax"], indirect=True)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_arrays_past_int32_indices_keep_xlas_sum(backend, dtype):
    # TF's order indexes each array's leaves with int32 starts: an array of 2**31 elements or
    # more (here 2,161,453,056 float32 elements, GPT-2's embedding 56 times, whose leaves of
    # one length do not follow each other) failed to trace ("Python integer 2147489680 out of
    # bounds for int32") and now keeps XLA's sum. Traced by shape only: nothing is allocated.
    jax = backend.module
    n = 50257 * 768 * 56
    big = jax.ShapeDtypeStruct((n,), getattr(jax.numpy, dtype))
    small = jax.ShapeDtypeStruct((7,), getattr(jax.numpy, dtype))
    for fn in (lambda a, b: anyclip.global_norm([a, b]), lambda a, b: anyclip.norm(a)):
        out = jax.eval_shape(fn, big, small)
        assert (out.shape, str(out.dtype)) == ((), dtype)
