"""``anyclip.embedding_lookup``: TF 2.21's ``tf.nn.embedding_lookup`` with ``max_norm``.

The reference is TF itself: ``tests/data/make_embedding.py`` runs ``tf.nn.embedding_lookup`` on
the inputs stored with its results in ``tests/data/embedding.npz`` (``--live-tf`` reruns the
script and checks the file): values, dtypes and shapes for scalar, matrix and empty ids, with
and without ``max_norm``; sharded tables (a list) and a tuple (one table, its items stacked);
TF's ``IndexedSlices`` gradient (values per id, and its dense form);
its out-of-range messages; and a small model's gradient norm, which ``tf.linalg.global_norm``
takes over the ``IndexedSlices`` values (a repeated id once per occurrence). The porting
guide's recipes for that norm (torch ``nn.Embedding(sparse=True)``; JAX, the gradient with
respect to the looked-up rows) are tested here against it.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip_conformance import Backend, assert_array

from .conftest import ULP_CLIP_NORM, ULP_GLOBAL, assert_live_reference

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_embedding.py"
REF = dict(np.load(DATA / "embedding.npz"))

gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))

torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)


def _args(backend: Backend, make: Any, case: str) -> tuple[Any, Any, Any, str]:
    name, _, max_norm = gen.CASES[case]
    params = REF[f"params/{name}"]
    ids = REF[f"ids/{case}"]
    dtype = params.dtype.name
    backend.dtype(ids.dtype.name)  # skips a backend without it (JAX without x64: int64)
    return make(params, dtype), backend.asarray(ids, ids.dtype.name), max_norm, dtype


@pytest.mark.parametrize("case", list(gen.CASES))
def test_lookup_gives_tf_values(backend, make, check, case):
    params, ids, max_norm, dtype = _args(backend, make, case)
    out = anyclip.embedding_lookup(params, ids, max_norm=max_norm)
    ulp = 0 if max_norm is None else ULP_CLIP_NORM
    check(out, REF[f"lookup/{case}"], dtype, ulp=ulp, what=case)


@pytest.mark.parametrize("case", [c for c in gen.CASES if gen.CASES[c][0] != "p16"])
def test_dense_gradient_is_tfs_densified(grad_backend, case):
    backend = grad_backend
    name, _, max_norm = gen.CASES[case]
    params = backend.asarray(REF[f"params/{name}"], REF[f"params/{name}"].dtype.name)
    ids = REF[f"ids/{case}"]
    if ids.dtype == np.int64 and not backend.has_dtype("int64"):
        ids = ids.astype(np.int32)
    ids_b = backend.asarray(ids, ids.dtype.name)
    expected = REF[f"lookup/{case}"]
    w = backend.asarray(
        np.arange(1, expected.size + 1, dtype=np.float64).reshape(expected.shape),
        expected.dtype.name,
    )
    (grad,) = backend.grad(lambda p: anyclip.embedding_lookup(p, ids_b, max_norm), [params], w)
    got = backend.to_numpy(grad)
    assert got.dtype == expected.dtype and got.shape == REF[f"params/{name}"].shape
    np.testing.assert_allclose(got, REF[f"grad/{case}/dense"], rtol=2e-6, atol=1e-6, err_msg=case)


@torch_backends
@pytest.mark.parametrize("case", ["matrix", "matrix-clip", "int64-clip", "scalar-clip"])
def test_torch_sparse_gradient_is_tfs_indexed_slices(backend, case):
    torch = backend.module
    name, _, max_norm = gen.CASES[case]
    params = torch.tensor(REF[f"params/{name}"], device=backend.device, requires_grad=True)
    ids = torch.tensor(REF[f"ids/{case}"].astype(np.int64), device=backend.device)
    out = anyclip.embedding_lookup(params, ids, max_norm, sparse=True)
    w = torch.arange(1, out.numel() + 1, dtype=out.dtype, device=out.device).reshape(out.shape)
    (out * w).sum().backward()
    g = params.grad
    assert g.layout == torch.sparse_coo  # one row per id (uncoalesced), as TF's values
    assert g._nnz() == ids.numel()
    np.testing.assert_array_equal(g._indices()[0].cpu().numpy(), REF[f"grad/{case}/indices"])
    np.testing.assert_allclose(
        g._values().cpu().numpy(), REF[f"grad/{case}/values"], rtol=2e-6, atol=1e-6
    )


# ============================================================ sharded tables
def _shards(backend: Backend, make: Any, case: str) -> tuple[list[Any], Any, Any, str]:
    name, sizes, _, max_norm = gen.SHARD_CASES[case]
    ids = REF[f"shard/{case}/ids"]
    backend.dtype(ids.dtype.name)
    dtype = REF[f"params/{name}"].dtype.name
    parts = [make(t, dtype) for t in gen.shards(name, sizes)]
    return parts, backend.asarray(ids, ids.dtype.name), max_norm, dtype


@pytest.mark.parametrize("case", list(gen.SHARD_CASES))
def test_sharded_lookup_gives_tf_values(backend, make, check, case):
    # params a list: TF's "div" partition, even where the shard sizes are not its own
    parts, ids, max_norm, dtype = _shards(backend, make, case)
    out = anyclip.embedding_lookup(parts, ids, max_norm=max_norm)
    ulp = 0 if max_norm is None else ULP_CLIP_NORM
    check(out, REF[f"shard/{case}/lookup"], dtype, ulp=ulp, what=case)


@pytest.mark.parametrize("case", ["div2", "div3-clip", "3d-div2-clip", "3-4-3", "1d-div3"])
def test_sharded_dense_gradients_are_tfs_densified(grad_backend, case):
    backend = grad_backend
    name, sizes, _, max_norm = gen.SHARD_CASES[case]
    dtype = REF[f"params/{name}"].dtype.name
    parts = [backend.asarray(t, dtype) for t in gen.shards(name, sizes)]
    ids = REF[f"shard/{case}/ids"]
    if ids.dtype == np.int64 and not backend.has_dtype("int64"):
        ids = ids.astype(np.int32)
    ids_b = backend.asarray(ids, ids.dtype.name)
    expected = REF[f"shard/{case}/lookup"]
    w = backend.asarray(
        np.arange(1, expected.size + 1, dtype=np.float64).reshape(expected.shape), dtype
    )
    grads = backend.grad(lambda *p: anyclip.embedding_lookup(list(p), ids_b, max_norm), parts, w)
    for i, g in enumerate(grads):
        got = backend.to_numpy(g)
        want = REF[f"shard/{case}/grad/{i}"]
        assert got.dtype == want.dtype and got.shape == want.shape, (case, i)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, err_msg=f"{case} shard {i}")


@pytest.mark.parametrize("case", list(gen.SHARD_ERRORS))
@pytest.mark.parametrize("backend", ["numpy", "array_api_strict"], indirect=True)
def test_sharded_out_of_range_ids_raise_with_tfs_words(backend, case):
    sizes, ids = gen.SHARD_ERRORS[case]
    parts = [backend.asarray(t, "float32") for t in gen.shards("p10", sizes)]
    words = str(REF[f"shard-error/{case}"])
    with pytest.raises(IndexError, match=r"`(ids` must be in \[0, 10\)|params` shards must)"):
        try:
            anyclip.embedding_lookup(parts, backend.asarray(ids, "int32"))
        except IndexError as e:
            assert f"(TF: {words})" in str(e)
            raise


@pytest.mark.parametrize("backend", ["jax", "jax-gpu", "torch", "torch-cuda"], indirect=True)
@pytest.mark.parametrize("case", list(gen.SHARD_ERRORS))
def test_sharded_out_of_range_ids_give_nan_rows_on_jax_and_torch(backend, case):
    # no raise (jit, torch.compile, no device sync): a NaN row where TF raises, never another
    sizes, ids = gen.SHARD_ERRORS[case]
    parts = [backend.asarray(t, "float32") for t in gen.shards("p10", sizes)]
    got = anyclip.embedding_lookup(parts, backend.asarray(ids, "int32"))
    out = backend.to_numpy(got).reshape(-1, 2)
    # in every case the last id is the one TF refuses; the others read their own row
    assert np.all(np.isnan(out[-1]))
    np.testing.assert_array_equal(out[:-1], REF["params/p10"][ids.ravel()[:-1]])


@pytest.mark.parametrize(
    ("parts", "error", "match"),
    [
        ([], ValueError, r"non-empty list of arrays.*\(TF: Length of params is currently 0"),
        (
            [np.ones((3, 2), np.float32), np.ones((2, 3), np.float32)],
            ValueError,
            r"`params` shards must share their row shape.*\(3, 2\) for params\[0\] and "
            r"\(2, 3\) for params\[1\].*\(TF: Need data\[0\]\.shape\[1:\]",
        ),
        (
            [np.ones((3, 2), np.float32), np.ones((2, 2), np.float64)],
            TypeError,
            r"`params` shards must share one dtype, got float32 for params\[0\] and float64 "
            r"for params\[1\].*\(TF: expected to be a float tensor but is a double tensor\)",
        ),
        (
            [np.ones((1, 2), np.float32)] * 2 + [np.ones((0, 2), np.float32)],
            ValueError,
            r"at least as many rows in all as shards, got 2 rows in 3 shards.*"
            r"\(TF: Integer division by zero\)",
        ),
        (
            [np.ones((3, 2), np.int32)] * 2,
            TypeError,
            r"`params`",
        ),
    ],
)
def test_sharded_bad_params(parts, error, match):
    max_norm = 1.0 if parts and parts[0].dtype == np.int32 else None
    with pytest.raises(error, match=match):
        anyclip.embedding_lookup(parts, np.array([0, 1], np.int32), max_norm=max_norm)


@torch_backends
@pytest.mark.parametrize("case", ["div2", "div3-clip", "div4-clip", "f64-div2-clip", "3-4-3"])
def test_sharded_sparse_gradients_give_tfs_norm(backend, case):
    # each shard's gradient is sparse, a row per id (zero where the id is another shard's):
    # its dense form is TF's, and the global norm over the shards is TF's over its
    # IndexedSlices (a repeated id once per occurrence), not the dense gradients' norm
    torch = backend.module
    name, sizes, _, max_norm = gen.SHARD_CASES[case]
    dtype = REF[f"params/{name}"].dtype.name
    parts = [backend.asarray(t, dtype, requires_grad=True) for t in gen.shards(name, sizes)]
    ids = torch.tensor(REF[f"shard/{case}/ids"].astype(np.int64), device=backend.device)
    out = anyclip.embedding_lookup(parts, ids, max_norm, sparse=True)
    w = torch.arange(1, out.numel() + 1, dtype=out.dtype, device=out.device).reshape(out.shape)
    (out * w).sum().backward()
    grads = [p.grad for p in parts]
    for i, g in enumerate(grads):
        assert g.layout == torch.sparse_coo and g._nnz() == ids.numel(), (case, i)
        np.testing.assert_allclose(
            g.to_dense().cpu().numpy(), REF[f"shard/{case}/grad/{i}"], rtol=2e-6, atol=1e-6
        )
    want = REF[f"shard/{case}/global_norm"]
    assert_array(anyclip.global_norm(grads), want, backend=backend, dtype=dtype, ulp=ULP_GLOBAL)


@jax_backends
def test_sharded_under_jax_jit(backend, check):
    jax = backend.module
    name, sizes, ids, max_norm = gen.SHARD_CASES["div4-clip"]
    parts = [backend.asarray(t, "float32") for t in gen.shards(name, sizes)]
    fn = jax.jit(lambda p, i: anyclip.embedding_lookup(p, i, max_norm))
    out = fn(parts, backend.asarray(ids, "int32"))
    check(out, REF["shard/div4-clip/lookup"], "float32", ulp=ULP_CLIP_NORM)


@torch_backends
def test_sharded_under_torch_compile_fullgraph(backend, check):
    torch = backend.module
    name, sizes, ids, max_norm = gen.SHARD_CASES["div4-clip"]
    parts = [backend.asarray(t, "float32") for t in gen.shards(name, sizes)]
    fn = torch.compile(lambda p, i: anyclip.embedding_lookup(p, i, max_norm), fullgraph=True)
    out = fn(parts, backend.asarray(ids, "int64"))
    check(out, REF["shard/div4-clip/lookup"], "float32", ulp=ULP_CLIP_NORM)


# ============================================ a tuple: one table, as TF converts it
def _tuple_args(backend: Backend, case: str) -> tuple[tuple[Any, ...], Any, Any, str]:
    name, ids, max_norm = gen.TUPLE_CASES[case]
    dtype = gen.PARAMS[name].dtype.name
    if ids.dtype == np.int64 and not backend.has_dtype("int64"):
        ids = ids.astype(np.int32)
    items = tuple(backend.asarray(t, dtype) for t in gen.tuple_items(name))
    return items, backend.asarray(ids, ids.dtype.name), max_norm, dtype


@pytest.mark.parametrize("case", list(gen.TUPLE_CASES))
def test_tuple_is_one_stacked_table(backend, check, case):
    items, ids, max_norm, dtype = _tuple_args(backend, case)
    out = anyclip.embedding_lookup(items, ids, max_norm)
    ulp = 0 if max_norm is None else ULP_CLIP_NORM
    check(out, REF[f"tuple/{case}/lookup"], dtype, ulp=ulp, what=case)


@pytest.mark.parametrize("case", list(gen.TUPLE_CASES))
def test_tuple_gradients_are_tfs(grad_backend, case):
    backend = grad_backend
    items, ids, max_norm, dtype = _tuple_args(backend, case)
    expected = REF[f"tuple/{case}/lookup"]
    w = backend.asarray(
        np.arange(1, expected.size + 1, dtype=np.float64).reshape(expected.shape), dtype
    )
    grads = backend.grad(lambda *ps: anyclip.embedding_lookup(ps, ids, max_norm), items, w)
    for i, g in enumerate(grads):
        got = backend.to_numpy(g)
        want = REF[f"tuple/{case}/grad/{i}"]
        assert got.dtype == want.dtype and got.shape == want.shape, (case, i)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, err_msg=f"{case} {i}")


@jax_backends
def test_tuple_under_jax_jit(backend, check):
    items, ids, max_norm, dtype = _tuple_args(backend, "matrices-clip")
    out = backend.jit(lambda p, i: anyclip.embedding_lookup(p, i, max_norm))(items, ids)
    check(out, REF["tuple/matrices-clip/lookup"], dtype, ulp=ULP_CLIP_NORM)


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        (
            (np.ones((3, 2), np.float32), np.ones((2, 2), np.float32)),
            ValueError,
            r"must share one shape, got \(3, 2\) for params\[0\] and \(2, 2\) for params\[1\].*"
            r"\(TF: Shapes of all inputs must match: values\[0\]\.shape = \[3,2\] != "
            r"values\[1\]\.shape = \[2,2\]\)",
        ),
        (
            (np.ones(2, np.float32), np.ones(2, np.float64)),
            TypeError,
            r"must share one dtype, got float32 for params\[0\] and float64 for params\[1\].*"
            r"\(TF: expected to be a float tensor but is a double tensor\)",
        ),
        ((), ValueError, r"got an empty tuple \(TF: Length of params is currently 0"),
    ],
)
def test_bad_tuple_params(params, error, match):
    # TF 2.21 (tensors): InvalidArgumentError from its Pack for the first two, then ValueError
    with pytest.raises(error, match=match):
        anyclip.embedding_lookup(params, np.array([0], np.int32))


# ===================================================================== errors
@pytest.mark.parametrize("case", list(gen.BAD_IDS))
@pytest.mark.parametrize("backend", ["numpy", "array_api_strict"], indirect=True)
def test_out_of_range_ids_raise_with_tfs_words(backend, case):
    params = backend.asarray(REF["params/p32"], "float32")
    ids = backend.asarray(gen.BAD_IDS[case], "int32")
    words = str(REF[f"error/{case}"])
    with pytest.raises(IndexError, match=r"`ids` must be in \[0, 5\)") as info:
        anyclip.embedding_lookup(params, ids)
    assert f"(TF: {words})" in str(info.value)


@torch_backends
@pytest.mark.parametrize("case", list(gen.BAD_IDS))
def test_out_of_range_ids_raise_on_torch(backend, case):
    if backend.device.type == "cuda":
        pytest.skip("CUDA reports an out-of-range id by a device-side assert")
    torch = backend.module
    params = torch.tensor(REF["params/p32"])
    with pytest.raises(IndexError, match="index out of range"):
        anyclip.embedding_lookup(params, torch.tensor(gen.BAD_IDS[case]))


@jax_backends
@pytest.mark.parametrize("case", list(gen.BAD_IDS))
def test_out_of_range_ids_give_nan_rows_on_jax(backend, case):
    # JAX cannot raise under jit; a NaN row, never another (negative ids do not wrap around)
    jnp = backend.module.numpy
    ids = gen.BAD_IDS[case]
    out = np.asarray(anyclip.embedding_lookup(jnp.asarray(REF["params/p32"]), jnp.asarray(ids)))
    bad = (ids < 0) | (ids >= 5)
    assert np.all(np.isnan(out[bad])) and not np.any(np.isnan(out[~bad]))


@pytest.mark.parametrize("backend", ["dask"], indirect=True)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("case", list(gen.BAD_IDS))
def test_out_of_range_ids_give_nan_rows_on_dask(backend, case, dtype):
    # Dask cannot raise without computing: a NaN row (the lowest value for integers), as on
    # JAX; its take read row 3 for id -1 and row 0 for ids past the end (fuzzing round h4)
    params = REF["params/p32"].astype(dtype)
    ids = gen.BAD_IDS[case]
    out = backend.to_numpy(
        anyclip.embedding_lookup(backend.asarray(params, dtype), backend.asarray(ids, "int32"))
    )
    bad = (ids < 0) | (ids >= 5)
    fill = np.nan if dtype == "float32" else np.iinfo(np.int32).min
    np.testing.assert_array_equal(out[bad], np.full(out[bad].shape, fill, dtype))
    np.testing.assert_array_equal(out[~bad], params[ids[~bad]])


@pytest.mark.parametrize("backend", ["torch", "jax", "array_api_strict", "dask"], indirect=True)
@pytest.mark.parametrize("sharded", [False, True])
def test_max_norm_of_another_library_is_refused(backend, sharded):
    # a NumPy max_norm beside torch params raised AttributeError from inside the clip, and
    # beside JAX params was taken (fuzzing round h4): one library per call, as clip_by_norm
    params = backend.asarray(REF["params/p32"], "float32")
    ids = backend.asarray(np.array([0, 1], np.int32), "int32")
    table = [params[:3, ...], params[3:, ...]] if sharded else params
    with pytest.raises(TypeError, match="`max_norm` must come from the same array library"):
        anyclip.embedding_lookup(table, ids, max_norm=np.asarray(1.0, np.float32))


@pytest.mark.parametrize(
    ("ids", "max_norm", "error", "match"),
    [
        (np.array([1], np.uint8), None, TypeError, r"`ids` must have an integer dtype.*uint8"),
        (np.array([1.0], np.float32), None, TypeError, r"`ids` must have an integer dtype"),
        # fuzzing round 4 (issue 28): the message named `clip_norm`
        (np.array([1]), "big", TypeError, "`max_norm` must be a number or an array, got str"),
        (np.array([1]), np.array([True]), TypeError, "`max_norm` must have a real dtype"),
    ],
)
def test_bad_arguments(ids, max_norm, error, match):
    with pytest.raises(error, match=match):
        anyclip.embedding_lookup(REF["params/p32"], ids, max_norm)


def test_max_norm_needs_floating_params_and_params_needs_an_axis():
    with pytest.raises(TypeError, match="`params` must have a floating dtype"):
        anyclip.embedding_lookup(np.arange(6, dtype=np.int32).reshape(3, 2), [1], max_norm=1.0)
    np.testing.assert_array_equal(  # without max_norm any dtype, as TF
        anyclip.embedding_lookup(np.arange(6, dtype=np.int32).reshape(3, 2), [2]), [[4, 5]]
    )
    with pytest.raises(ValueError, match="`params` must have at least one axis"):
        anyclip.embedding_lookup(np.float32(1.0), [0])


def test_sparse_is_torch_only():
    with pytest.raises(TypeError, match="`sparse=True` needs a torch"):
        anyclip.embedding_lookup(REF["params/p32"], [1], sparse=True)


# =========================================== the gradient-norm recipes (docs)
def _model() -> dict[str, np.ndarray]:
    return {k: REF[k] for k in gen.model_inputs()}


@torch_backends
@pytest.mark.parametrize("sparse", [True, False])
def test_torch_recipe_gives_tfs_gradient_norm(backend, sparse):
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    d, dev = _model(), backend.device
    emb = torch.nn.Embedding(7, 4, sparse=sparse).to(dev)
    kernel = torch.nn.Parameter(torch.tensor(d["model/kernel"], device=dev))
    with torch.no_grad():
        emb.weight.copy_(torch.tensor(d["model/table"]))
    ids = torch.tensor(d["model/ids"].astype(np.int64), device=dev)
    y = torch.tensor(d["model/y"], device=dev)
    torch.mean(torch.square(emb(ids) @ kernel - y)).backward()
    norm = at.clip_grad_norm_([emb.weight, kernel], gen.CLIP)
    want = "model/global_norm" if sparse else "model/dense_norm"
    got = backend.to_numpy(norm)
    np.testing.assert_allclose(got, REF[want], rtol=ULP_GLOBAL * 2**-23)
    if sparse:  # TF's number, and TF's clipped gradients
        assert abs(float(got) - float(REF["model/dense_norm"])) > 1e-2
        for i, p in enumerate((emb.weight, kernel)):
            g = p.grad.to_dense() if p.grad.is_sparse else p.grad
            np.testing.assert_allclose(
                backend.to_numpy(g), REF[f"model/clipped/{i}"], rtol=1e-5, atol=1e-7
            )


@jax_backends
def test_jax_recipe_gives_tfs_gradient_norm(backend):
    jax = backend.module
    jnp = jax.numpy
    d = _model()
    table, kernel = jnp.asarray(d["model/table"]), jnp.asarray(d["model/kernel"])
    ids, y = jnp.asarray(d["model/ids"]), jnp.asarray(d["model/y"])

    def loss_of_rows(rows: Any, kernel: Any) -> Any:  # the recipe: differentiate the rows
        return jnp.mean(jnp.square(rows @ kernel - y))

    @jax.jit
    def norms(table: Any, kernel: Any) -> Any:
        rows = anyclip.embedding_lookup(table, ids)
        g_rows, g_kernel = jax.grad(loss_of_rows, argnums=(0, 1))(rows, kernel)
        dense = jnp.zeros_like(table).at[ids].add(g_rows)  # what jax.grad(table) gives
        return anyclip.global_norm([g_rows, g_kernel]), anyclip.global_norm([dense, g_kernel])

    tf_like, dense_norm = norms(table, kernel)
    np.testing.assert_allclose(np.asarray(tf_like), REF["model/global_norm"], rtol=3 * 2**-23)
    np.testing.assert_allclose(np.asarray(dense_norm), REF["model/dense_norm"], rtol=3 * 2**-23)


# ===================================================== jit and torch.compile
@jax_backends
def test_under_jax_jit(backend, check):
    jax = backend.module
    for case in ("matrix-clip", "3d-clip", "scalar"):
        name, ids, max_norm = gen.CASES[case]
        fn = jax.jit(lambda p, i, m=max_norm: anyclip.embedding_lookup(p, i, m))
        out = fn(backend.asarray(REF[f"params/{name}"], "float32"), backend.asarray(ids, "int32"))
        check(out, REF[f"lookup/{case}"], "float32", ulp=ULP_CLIP_NORM, what=case)


@torch_backends
def test_under_torch_compile_fullgraph(backend, check):
    torch = backend.module
    for case in ("matrix-clip", "3d-clip", "scalar"):
        name, ids, max_norm = gen.CASES[case]
        fn = torch.compile(
            lambda p, i, m=max_norm: anyclip.embedding_lookup(p, i, m), fullgraph=True
        )
        out = fn(backend.asarray(REF[f"params/{name}"], "float32"), backend.asarray(ids, "int64"))
        check(out, REF[f"lookup/{case}"], "float32", ulp=ULP_CLIP_NORM, what=case)


# ======================================================================= live
@pytest.mark.live_tf
def test_committed_reference_is_tfs(tmp_path):
    # the committed file is still what TF 2.21 gives (run with --live-tf)
    assert_live_reference(SCRIPT, REF, tmp_path, skip=("provenance",))
