"""float64 norms over some of the axes: TF 2.21's bits where the kernels add in TF's order.

TF's ``reduce_sum`` over some of the axes adds in an order set by the shape it merges the
axes into (rows as full reductions, columns by Eigen's packet accumulators, the middle of
three axes likewise, axes 0 and 2 of three one after another, more axes after a transpose):
``anyclip._kernels._tfaxes``. The library's own order was up to 8 ULP from TF in
``clip_by_norm``, 9 in ``l2_normalize`` and 13 in a 1-norm (NumPy, a ``(300, 40)`` array
over axis 0; torch and JAX 3 to 4), past the reductions' budget. The reference is
``tests/data/make_axes_sums.py`` (TF 2.21), committed as ``tests/data/axes_sums.npz`` and
re-run with ``--live-tf``; its cases cover each of TF's routes and their edges.

NumPy, array-api-strict, torch (CPU), JAX (CPU, not sharded, eager and under ``jit``) and dask
(:func:`test_dask_chunks`: each chunk holds the reduced axes whole and is placed in the whole
array, whose packets and row splits TF's order follows) give TF's bits; dask's own chunked sums
were 6 ULP from TF (a 1-norm). On a GPU the device's own reductions keep
:data:`OWN_ORDER_ULP` (not measured on one yet).
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
SCRIPT = DATA / "make_axes_sums.py"
REF = dict(np.load(DATA / "axes_sums.npz"))

#: The script's cases and input generator (``tests/data`` is not a package).
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))

#: The backends whose float64 sums over some axes are TF's: bit for bit.
TF_ORDER = frozenset({"numpy", "array_api_strict", "torch", "jax", "dask"})

#: The others' budget: a GPU's own reductions (the reductions' few ULP).
OWN_ORDER_ULP = 4

CASES = [pytest.param(i, id=f"{shape}-{axes}") for i, (shape, axes) in enumerate(gen.CASES)]


def inputs() -> dict[str, np.ndarray]:
    """The script's inputs (new arrays each call), checked to be those TF's results were
    made from."""
    xs = gen.inputs()
    got, want = gen.inputs_digest(xs), str(REF["inputs_sha256"])
    if got != want:
        raise AssertionError(
            f"NumPy {np.__version__} generates other inputs than those of "
            f"tests/data/axes_sums.npz (made with NumPy {REF['versions'][1]}): SHA-256 "
            f"{got} instead of {want}. Compare with TF on these inputs: rerun "
            "tests/data/make_axes_sums.py with TensorFlow 2.21, or run with that NumPy."
        )
    return xs


def budget(name: str) -> int:
    return 0 if name in TF_ORDER else OWN_ORDER_ULP


def test_inputs_are_the_files():
    # one input per case, of the case's shape, the inputs TF's results were made from (the
    # file holds their digest and TF's outputs)
    xs = inputs()
    assert [xs[str(i)].shape for i in range(len(gen.CASES))] == [s for s, _ in gen.CASES]
    assert all(REF[f"{i}/clip_by_norm"].shape == s for i, (s, _) in enumerate(gen.CASES))


@pytest.mark.parametrize("case", CASES)
def test_clip_by_norm(backend, make, check, case):
    x, axes = inputs()[str(case)], gen.CASES[case][1]
    out = anyclip.clip_by_norm(make(x, "float64"), gen.CLIP_NORM, axes=axes)
    check(out, REF[f"{case}/clip_by_norm"], "float64", budget(backend.name))


@pytest.mark.parametrize("case", CASES)
def test_l2_normalize(backend, make, check, case):
    x, axes = inputs()[str(case)], gen.CASES[case][1]
    if x.size > gen.SMALL:
        pytest.skip("not stored: the file keeps l2_normalize for the small inputs only")
    out = anyclip.l2_normalize(make(x, "float64"), axis=list(axes))
    check(out, REF[f"{case}/l2_normalize"], "float64", budget(backend.name))


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_norm(backend, make, check, case, order):
    x, axes = inputs()[str(case)], gen.CASES[case][1]
    if len(axes) != 1:
        pytest.skip("tf.norm takes one axis (two are a matrix norm)")
    out = anyclip.norm(make(x, "float64"), ord=order, axis=axes[0], keepdims=True)
    check(out, REF[f"{case}/norm{order}"], "float64", budget(backend.name))


@pytest.mark.parametrize("backend", ["jax"], indirect=True)
@pytest.mark.parametrize("case", CASES)
def test_under_jit(backend, make, check, case):
    # the same order traced and inlined into the caller's program: the squares are rounded
    # before they are added (no fused multiply-add), the slices added by a fori_loop
    x, axes = inputs()[str(case)], gen.CASES[case][1]
    clip = backend.jit(lambda t: anyclip.clip_by_norm(t, gen.CLIP_NORM, axes=axes))
    check(clip(make(x, "float64")), REF[f"{case}/clip_by_norm"], "float64")


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("case", CASES)
def test_torch_with_a_gradient_recorded(backend, make, check, case):
    # while autograd records, the sums run in torch operations (cumsum, no NumPy view):
    # the same bits, and a gradient
    x, axes = inputs()[str(case)], gen.CASES[case][1]
    t = make(x, "float64").requires_grad_()
    out = anyclip.clip_by_norm(t, gen.CLIP_NORM, axes=axes)
    check(out.detach(), REF[f"{case}/clip_by_norm"], "float64")
    out.sum().backward()
    assert t.grad is not None
    assert bool(t.grad.isfinite().all())


@pytest.mark.parametrize("backend", ["torch", "jax"], indirect=True)
@pytest.mark.parametrize("case", CASES)
def test_norm_gradient(backend, make, check, case):
    # the gradient of the sum of the norms (TF's GradientTape): bit for bit through the
    # TF-order sums (torch's cumsum, JAX's fori_loop) and the corrected root, whose gradient
    # is TF's rule on the corrected value (torch's own rule on its uncorrected root was 2 to
    # 3 ULP off here)
    x, axes = inputs()[str(case)], gen.CASES[case][1]
    if len(axes) != 1:
        pytest.skip("tf.norm takes one axis (two are a matrix norm)")
    (got,) = backend.grad(lambda t: anyclip.norm(t, axis=axes[0]), [make(x, "float64")], 1.0)
    check(got, REF[f"{case}/norm2_grad"], "float64")


@pytest.mark.parametrize("chunking", ["halves", "ones"])
@pytest.mark.parametrize("case", CASES)
def test_dask_chunks(case, chunking):
    # chunked along the kept axes (halves, or one element: every output in a chunk of its
    # own), and along the reduced ones, which the kernel joins: TF's bits, each chunk's
    # outputs placed by their index in the whole output
    da = pytest.importorskip("dask.array")
    backend = load_backend("dask")
    x, axes = inputs()[str(case)], gen.CASES[case][1]
    if chunking == "halves":
        chunks = tuple(max(1, n // 2) for n in x.shape)
    else:
        chunks = tuple(max(1, n // 3) if i in axes else 1 for i, n in enumerate(x.shape))
        if x.size > 3000:
            pytest.skip("one chunk per output: a task each, kept for the small inputs")
    out = anyclip.clip_by_norm(da.from_array(x, chunks=chunks), gen.CLIP_NORM, axes=axes)
    assert_array(out, REF[f"{case}/clip_by_norm"], backend=backend, dtype="float64")


@pytest.mark.live_tf
def test_committed_reference_is_tfs(tmp_path):
    # the committed file is still what TF 2.21 gives (run with --live-tf)
    assert_live_reference(SCRIPT, REF, tmp_path)
