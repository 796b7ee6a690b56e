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
"""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import anyclip
from anyclip_conformance import assert_array, load_backend

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
        check(anyclip.norm(make(x, "float64")), REF[f"{key}/norm"], "float64", ULP, what=key)


def test_global_norm(backend, make, check):
    for key, x in gen.inputs().items():
        t = make(x, "float64")
        check(anyclip.global_norm([t]), REF[f"{key}/global_norm"], "float64", ULP, what=key)
        two = [t, make(x[: x.size // 3], "float64")]
        check(anyclip.global_norm(two), REF[f"{key}/global_norm2"], "float64", ULP, what=key)


def test_clip_by_norm(backend, make, check):
    for key, x in gen.inputs().items():
        if x.size <= gen.CLIP_MAX:
            out = anyclip.clip_by_norm(make(x, "float64"), gen.CLIP_NORM)
            check(out, REF[f"{key}/clip_by_norm"], "float64", ULP, what=key)


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
        check(norm(t), REF[f"{key}/norm"], "float64", ULP_JIT, what=key)
        two = pair(t, make(x[: x.size // 3], "float64"))
        check(two, REF[f"{key}/global_norm2"], "float64", ULP_JIT, what=key)
