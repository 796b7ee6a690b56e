"""Dask: every function lazy, the matrix 2-norm through dask's SVD, and out of core.

The generic ``dask`` backend of the shared fixtures is opt-in (see ``conftest.py``); these
tests run whenever dask is installed (it is in the ``test`` extra). Expected values are
NumPy float64 formulas of the same data, exact closed forms, or TF 2.21's committed values
(``tests/data/long_sums.npz``) for the float64 sums in TF's order,
(``tests/data/dask_unknown.npz``) for arrays of unknown chunk sizes and
(``tests/data/dask_layouts.npz``) for the float64 sums of every element and chunks of no
elements.
"""

from __future__ import annotations

import math
import runpy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import anyclip

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
from dask.callbacks import Callback  # noqa: E402 - after the importorskip

from .conftest import assert_live_reference  # noqa: E402 - after the importorskip

ULP_DIST = 3


class Computes(Callback):
    """Counts the graphs dask computes inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def _start(self, dsk):
        self.count += 1


def _data() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((12, 9)).astype(np.float32)


CALLS = {
    "clip_by_value": lambda x: anyclip.clip_by_value(x, -0.5, 0.5),
    "clip_by_norm": lambda x: anyclip.clip_by_norm(x, 1.0),
    "clip_by_norm_axes": lambda x: anyclip.clip_by_norm(x, 1.0, axes=[1]),
    "global_norm": lambda x: anyclip.global_norm([x, x * 2]),
    "clip_by_global_norm": lambda x: anyclip.clip_by_global_norm([x, x], 1.0)[0][1],
    "clip_by_average_norm": lambda x: anyclip.clip_by_average_norm(x, 0.01),
    "norm": lambda x: anyclip.norm(x),
    "norm_1": lambda x: anyclip.norm(x, ord=1, axis=(0, 1)),
    "norm_inf": lambda x: anyclip.norm(x, ord=math.inf, axis=0),
    "norm_2_matrix": lambda x: anyclip.norm(x, ord=2, axis=(0, 1)),
    "l2_normalize": lambda x: anyclip.l2_normalize(x, axis=0),
    "normalize": lambda x: anyclip.normalize(x)[0],
    "tree_clip_by_global_norm": lambda x: anyclip.tree.clip_by_global_norm({"a": x}, 1.0)[0]["a"],
}

WANT = {
    "clip_by_value": lambda a: np.maximum(np.minimum(a, 0.5), -0.5),
    "clip_by_norm": lambda a: a / max(np.linalg.norm(a), 1.0),
    "clip_by_norm_axes": lambda a: a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1.0),
    "global_norm": lambda a: math.sqrt(5.0) * np.linalg.norm(a),
    "clip_by_global_norm": lambda a: a / (math.sqrt(2.0) * np.linalg.norm(a)),
    "clip_by_average_norm": lambda a: a * 0.01 * min(a.size / np.linalg.norm(a), 100.0),
    "norm": lambda a: np.linalg.norm(a),
    "norm_1": lambda a: np.max(np.sum(np.abs(a), axis=0)),
    "norm_inf": lambda a: np.max(np.abs(a), axis=0),
    "norm_2_matrix": lambda a: np.linalg.norm(a, 2),
    "l2_normalize": lambda a: a / np.linalg.norm(a, axis=0, keepdims=True),
    "normalize": lambda a: a / np.linalg.norm(a),
    "tree_clip_by_global_norm": lambda a: a / np.linalg.norm(a),
}


@pytest.mark.parametrize("name", CALLS)
def test_lazy_and_correct(name):
    host = _data()
    x = da.from_array(host, chunks=(4, 5))
    with Computes() as c:
        out = CALLS[name](x)
    assert c.count == 0, f"{name} computed while building its graph"
    assert isinstance(out, da.Array)
    assert out.dtype == np.float32
    want = WANT[name](host.astype(np.float64))
    np.testing.assert_allclose(out.compute(), want, rtol=1e-6)


def test_matrix_2_norm_of_a_stack_is_numpys():
    """A stack of matrices, chunked across matrices: lazy, and NumPy's largest singular values."""
    rng = np.random.default_rng(3)
    host = rng.standard_normal((4, 3, 5)).astype(np.float32)
    x = da.from_array(host, chunks=(1, 2, 5))
    with Computes() as c:
        out = anyclip.norm(x, ord=2, axis=(1, 2))
    assert c.count == 0, "norm computed while building its graph"
    assert isinstance(out, da.Array)
    assert out.dtype == np.float32
    assert out.shape == (4,)
    want = np.linalg.svd(host.astype(np.float64), compute_uv=False)[:, 0]
    np.testing.assert_allclose(out.compute(), want, rtol=1e-6)


def _layer_sizes(out, prefix: str) -> list[int]:
    """The number of tasks of each layer of ``out``'s graph whose name starts with ``prefix``."""
    layers = out.__dask_graph__().layers
    return [len(layer) for name, layer in layers.items() if name.startswith(prefix)]


#: TF 2.21's float64 norm and global_norm of 100,000 values +-1.7 (``tests/data/long_sums.npz``).
_LONG_SUMS = np.load(Path(__file__).with_name("data") / "long_sums.npz")
LONG = _LONG_SUMS["1.7/100000/norm"]
LONG_GLOBAL = _LONG_SUMS["1.7/100000/global_norm"]


def _long() -> np.ndarray:
    """The 100,000 values +-1.7 of ``tests/data/make_long_sums.py`` (seed 22)."""
    return np.random.default_rng(22).choice([-1.0, 1.0], 100_000) * 1.7


def test_float64_sums_in_tfs_order_stay_lazy_and_chunked():
    """float64 norms: one task per node of TF's tree (about a chunk each), built lazily."""
    x = da.from_array(_long(), chunks=10_000)
    with Computes() as c:
        out = anyclip.norm(x)
    assert c.count == 0, "norm computed while building its graph"
    assert isinstance(out, da.Array)
    assert out.dtype == np.float64
    assert out.shape == ()
    # nodes of 6,250 elements (TF's tree halves 100,000 four times): no task holds the array
    assert _layer_sizes(out, "anyclip-tf-order-node") == [16]
    assert _layer_sizes(out, "anyclip-tf-order-total") == [1]  # one float per node in
    assert out.compute() == LONG  # TF's value, bit for bit


def test_float32_sums_keep_dasks_reduction():
    x = da.from_array(_long().astype(np.float32), chunks=10_000)
    assert _layer_sizes(anyclip.norm(x), "anyclip-tf-order") == []


@pytest.mark.parametrize("chunks", [1000, 30_000])
def test_float64_unknown_chunk_sizes_keep_dasks_order(chunks):
    """``x[x != 0]`` has no tree before it is computed: dask's order, within 20 ULP of TF's."""
    x = da.from_array(_long(), chunks=chunks)
    x = x[x != 0]
    assert math.isnan(x.shape[0])
    with Computes() as c:
        out = anyclip.norm(x)
    assert c.count == 0, "norm computed while building its graph"
    assert isinstance(out, da.Array)
    assert out.dtype == np.float64
    assert out.shape == ()
    got = out.compute()
    assert abs(int(got.view(np.int64)) - int(LONG.view(np.int64))) <= 20


def test_float64_known_arrays_keep_tfs_order_next_to_unknown_ones():
    """In a list, only the arrays of unknown chunk sizes take dask's order."""
    x = da.from_array(_long(), chunks=10_000)
    empty = x[x > 2]  # unknown size, 0 elements: TF's sum of [l2_loss(x), 0] is l2_loss(x)
    with Computes() as c:
        out = anyclip.global_norm([x, empty])
    assert c.count == 0, "global_norm computed while building its graph"
    assert isinstance(out, da.Array)
    assert out.dtype == np.float64
    assert out.shape == ()
    assert _layer_sizes(out, "anyclip-tf-order-node") == [16]
    assert out.compute() == LONG_GLOBAL  # TF's global_norm([x]), bit for bit


def test_float64_unknown_chunk_sizes_may_be_empty():
    x = da.from_array(np.linspace(-1.0, 1.0, 10), chunks=3)
    none = x[x > 2]
    assert anyclip.norm(none).compute() == 0.0
    assert anyclip.global_norm([none, none]).compute() == 0.0
    assert anyclip.clip_by_norm(none, 1.0).compute().shape == (0,)


# ------------------------------------------ unknown chunk sizes against TF's values
#: TF 2.21 on the selections below (``tests/data/make_dask_unknown.py``).
UNKNOWN_SCRIPT = Path(__file__).with_name("data") / "make_dask_unknown.py"
UNKNOWN = dict(np.load(UNKNOWN_SCRIPT.with_name("dask_unknown.npz")))
_GEN = runpy.run_path(str(UNKNOWN_SCRIPT))


def _selection(dtype: str, chunks: int = 2):
    """``x[x > 0]`` of the script's data: 4 values, chunk sizes unknown until computed."""
    x = da.from_array(np.asarray(_GEN["X"], dtype=dtype), chunks=chunks)
    s = x[x > 0]
    assert math.isnan(s.shape[0])
    return s


def _lazy(fn):
    """``fn()``, which must build a dask graph without computing anything."""
    with Computes() as c:
        out = fn()
    assert c.count == 0, "computed while building the graph"
    assert isinstance(out, da.Array)
    return out


def _bit_equal(out, want: np.ndarray) -> None:
    got = out.compute()
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


UNKNOWN_DTYPES = pytest.mark.parametrize("dtype", _GEN["DTYPES"])


@UNKNOWN_DTYPES
@pytest.mark.parametrize("chunks", [1, 2, 7])
def test_unknown_sizes_clip_by_value_with_array_bounds_is_tfs(dtype, chunks):
    """Array bounds against ``x[x > 0]``: dask cannot broadcast ``(nan,)`` with ``(4,)``.

    The call joins the selection into one task and clips it there, lazily (dask's own
    broadcasting refuses the shapes before computing).
    """
    lo = da.from_array(np.asarray(_GEN["LO"], dtype=dtype), chunks=3)
    hi = np.asarray(_GEN["HI"], dtype=dtype).tolist()  # a list bound too
    out = _lazy(lambda: anyclip.clip_by_value(_selection(dtype, chunks), lo, hi))
    assert out.dtype == np.dtype(dtype)
    _bit_equal(out, UNKNOWN[f"{dtype}/clip"])


def test_unknown_sizes_clip_by_value_of_two_selections_is_not_paired_chunk_by_chunk():
    """Two selections of unknown sizes whose chunks differ: joined, not silently broadcast.

    ``[1 | 3, 4 | 2.5]`` against bounds selected ``[2, 0 | 3.5 | 0]`` (chunks of 1, 2 and
    1 values against 2, 1 and 1): dask would pair them chunk by chunk.
    """
    x = da.from_array(np.asarray([1.0, -1.0, 3.0, 4.0, 2.5, -1.0], np.float32), chunks=2)
    s = x[x > 0]
    b = da.from_array(np.asarray([2.0, 0.0, 3.5, -9.0, 0.0, -9.0], np.float32), chunks=2)
    lo = b[b > -1]
    out = _lazy(lambda: anyclip.clip_by_value(s, lo, np.float32(3.0).item()))
    _bit_equal(out, np.asarray([2.0, 3.0, 3.5, 2.5], np.float32))


@UNKNOWN_DTYPES
def test_unknown_sizes_l2_normalize_with_an_array_epsilon_is_tfs(dtype):
    eps = da.from_array(np.asarray(_GEN["EPSILON"], dtype=dtype), chunks=2)
    out = _lazy(lambda: anyclip.l2_normalize(_selection(dtype), epsilon=eps))
    _bit_equal(out, UNKNOWN[f"{dtype}/l2"])


@UNKNOWN_DTYPES
def test_unknown_sizes_l2_normalize_may_grow_as_tfs(dtype):
    """One selected value against a 3-element ``epsilon``: TF's result has 3 values."""
    x = da.from_array(np.asarray([2.0, -1.0], dtype=dtype), chunks=1)
    eps = da.from_array(np.asarray(_GEN["EPSILON"][:3], dtype=dtype), chunks=3)
    out = _lazy(lambda: anyclip.l2_normalize(x[x > 0], epsilon=eps))
    assert out.shape == (3,)
    _bit_equal(out, UNKNOWN[f"{dtype}/l2_grow"])


@UNKNOWN_DTYPES
def test_unknown_sizes_inf_norm_of_an_empty_selection_is_tfs(dtype):
    """TF's inf-norm of nothing is -inf (``reduce_max`` of no values)."""
    x = da.from_array(np.asarray(_GEN["X"], dtype=dtype), chunks=2)
    out = _lazy(lambda: anyclip.norm(x[x > 10], ord=math.inf))
    _bit_equal(out, UNKNOWN[f"{dtype}/inf_empty"][()])
    m = da.from_array(np.ones((4, 3), dtype=dtype), chunks=2)
    rows = _lazy(lambda: anyclip.norm(m[m[:, 0] > 10], ord=math.inf, axis=0))
    _bit_equal(rows, UNKNOWN[f"{dtype}/inf_empty_rows"])


@pytest.mark.parametrize(("key", "keep"), [("clip_grow", 1), ("clip_mismatch", 4)])
def test_unknown_sizes_wrong_bound_length_fails_when_computed(key, keep):
    """A bound of the wrong length: the call is lazy, computing raises TF's shape error."""
    x = da.from_array(np.asarray([1.0, 2.0, 3.0, 4.0, -1.0], np.float32), chunks=2)
    s = x[x > 4 - keep]
    lo = da.from_array(np.asarray(_GEN["LO"][:3], np.float32), chunks=3)
    out = _lazy(lambda: anyclip.clip_by_value(s, lo, 5.0))
    with pytest.raises(ValueError, match="`clip_value_min` of shape") as info:
        out.compute()
    msg = str(info.value)
    assert str(UNKNOWN[f"errors/{key}"]) in msg
    assert "checked when the dask graph was computed" in msg


def test_unknown_sizes_wrong_bound_dtype_fails_at_call_time():
    """Only the shapes wait for the compute: a bound's dtype is refused when called."""
    lo = da.from_array(np.zeros(4, np.float64), chunks=2)
    with pytest.raises(TypeError, match="`clip_value_min` must have the dtype float32"):
        anyclip.clip_by_value(_selection("float32"), lo, 1.0)
    eps = da.from_array(np.full(4, 1e-12, np.float32), chunks=2)
    with pytest.raises(TypeError, match="`epsilon` must have the dtype float64"):
        anyclip.l2_normalize(_selection("float32"), epsilon=eps, accumulate_dtype="float64")


@pytest.mark.live_tf
def test_unknown_sizes_committed_reference_is_tfs(tmp_path):
    # the committed file is still what TF 2.21 gives (run with --live-tf)
    assert_live_reference(UNKNOWN_SCRIPT, UNKNOWN, tmp_path, skip=("versions",))


def test_out_of_core_two_passes_on_a_local_cluster():
    """global_norm, then clip_by_global_norm(use_norm=): workers hold less than the array.

    768 MiB of float32 (made lazily, chunk by chunk) on two worker processes of 256 MiB each
    (an idle worker uses about 85 MiB): both passes are tree reductions, the clipped array
    is never whole anywhere, and no worker is paused, killed or replaced.
    """
    distributed = pytest.importorskip("distributed")
    n = 192 * 2**20
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            memory_limit="256MiB",
            # the scheduler's HTTP server on any free port: its default 8787 may be held by
            # another test's cluster (an xdist worker beside this one), and the warning that
            # it moved elsewhere is an error under the test settings
            dashboard_address="127.0.0.1:0",
            worker_dashboard_address=None,
            silence_logs=50,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        workers = set(client.scheduler_info()["workers"])
        x = da.full((n,), 3.0, dtype=np.float32, chunks=2**20)  # 4 MiB chunks
        assert x.nbytes > 2 * 256 * 2**20
        # pass 1: one partial sum per chunk travels
        norm = client.compute(anyclip.global_norm([x])).result(timeout=120)
        exact = 3.0 * math.sqrt(n)
        assert abs(float(norm) - exact) <= ULP_DIST * float(np.spacing(np.float32(exact)))
        clipped, _ = anyclip.clip_by_global_norm([x], 1.0, use_norm=da.from_array(norm))
        # pass 2: the clipped array, reduced on the workers
        lo, hi = (
            f.result(timeout=120) for f in client.compute([clipped[0].min(), clipped[0].max()])
        )
        want = np.float32(3.0) * (np.float32(1.0) / norm)  # TF's factor c * (1 / norm), c = 1
        assert lo == hi == want
        assert set(client.scheduler_info()["workers"]) == workers, "a worker was replaced"


# ------------------------------------------ float64 sums of every element; empty chunks
#: TF 2.21 on the data below (``tests/data/make_dask_layouts.py``).
LAYOUTS_SCRIPT = Path(__file__).with_name("data") / "make_dask_layouts.py"
LAYOUTS = dict(np.load(LAYOUTS_SCRIPT.with_name("dask_layouts.npz")))
_LAYOUT_DATA = runpy.run_path(str(LAYOUTS_SCRIPT))["inputs"]()

#: Chunks of ``X`` (64 x 70): one, several, and uneven with chunks of no elements.
X_CHUNKS = {
    "one": ((64,), (70,)),
    "several": (7, 13),
    "empty": ((7, 0, 50, 7, 0), (64, 6, 0)),
}

EVERY_ELEMENT = {
    "l2_normalize": lambda x: anyclip.l2_normalize(x),
    "norm_1": lambda x: anyclip.norm(x, ord=1),
    "normalize_1": lambda x: anyclip.normalize(x, ord=1)[0],
    "normalize_1/norm": lambda x: anyclip.normalize(x, ord=1)[1],
}


@pytest.mark.parametrize("chunks", X_CHUNKS)
@pytest.mark.parametrize("key", EVERY_ELEMENT)
def test_float64_sums_of_every_element_are_tfs(key, chunks):
    """A float64 sum over every element that is not of squares takes TF's order too.

    ``l2_normalize`` over every axis and the 1-norms sum through ``nonnegative_sum``, which
    took dask's own order there (1 ULP from TF on this data, in every layout) while the sums
    of squares of ``norm`` took TF's.
    """
    x = da.from_array(_LAYOUT_DATA["X"], chunks=X_CHUNKS[chunks])
    out = _lazy(lambda: EVERY_ELEMENT[key](x))
    assert _layer_sizes(out, "anyclip-tf-order-node"), "not summed in TF's order"
    _bit_equal(out, LAYOUTS[key])


def _one_row(dtype: str):
    """``ROW`` selected from among other rows, chunk sizes computed: chunks ``(1, 0, 0)``."""
    rows = np.vstack([_LAYOUT_DATA["ROW"], _LAYOUT_DATA["X"][:5, :6]])
    m = da.from_array(rows.astype(dtype), chunks=(2, 6))
    keep = da.from_array(np.arange(6) == 0, chunks=2)
    row = m[keep]
    row.compute_chunk_sizes()
    assert row.chunks == ((1, 0, 0), (6,))
    return row


ROW_CALLS = {
    "clip_by_value": lambda r: anyclip.clip_by_value(r, -0.5, 0.5),
    "clip_by_norm": lambda r: anyclip.clip_by_norm(r, 1.0),
    "l2_normalize": lambda r: anyclip.l2_normalize(r, axis=1),
    "global_norm": lambda r: anyclip.global_norm([r, _corner(r.dtype)]),
}


def _corner(dtype: Any):
    """``X[:5, :6]`` in chunks of no elements that dask's ``reshape(-1)`` fails to compute."""
    corner = _LAYOUT_DATA["X"][:5, :6].astype(dtype)
    return da.from_array(corner, chunks=((1, 2, 0, 2, 0), (6, 0, 0)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ROW_CALLS)
def test_chunks_of_no_elements_keep_tfs_shape_and_values(name, dtype):
    """Chunks of no elements, as ``compute_chunk_sizes()`` leaves after a selection.

    Dask computes ``r + 1`` of such a row (chunks ``(1, 0, 0)``) to 3 rows, silently (with
    chunks ``(0, 1, 0)`` it fails with ``Missing dependency``), and fails to compute
    ``reshape(-1)`` of
    :func:`_corner`, which the float64 sums in TF's order read (float32 ``global_norm``'s
    too); anyclip drops the empty chunks first (lazily): TF's shape and values.
    """
    row = _one_row(dtype)
    out = _lazy(lambda: ROW_CALLS[name](row))
    assert out.dtype == np.dtype(dtype)
    _bit_equal(out, LAYOUTS[f"{dtype}/row/{name}"])


@pytest.mark.live_tf
def test_layouts_committed_reference_is_tfs(tmp_path):
    # the committed file is still what TF 2.21 gives (run with --live-tf)
    assert_live_reference(LAYOUTS_SCRIPT, LAYOUTS, tmp_path, skip=("versions",))
