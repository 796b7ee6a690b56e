"""Sparse arrays in the functional API and ``anyclip.tree``, as TF takes ``IndexedSlices``.

The reference is TF 2.21 itself: ``tests/data/make_sparse.py`` runs every function on
``tf.IndexedSlices`` whose values and indices are those of the torch layouts built here, and
``tests/data/sparse.npz`` holds what TF returned (``--live-tf`` reruns the script and checks the
file). docs/tf-reference.md §14 is the spec: ``clip_by_value``, ``clip_by_norm``,
``global_norm`` and ``clip_by_global_norm`` work on the stored values (repeated indices counted
once each) and keep the layout and indices; ``clip_by_average_norm``, ``norm``,
``l2_normalize`` and ``normalize`` make the input dense first (repeated indices summed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip import tree
from anyclip_conformance import Backend, assert_array
from anyclip_conformance.budgets import gpu_budget

from .conftest import ULP_CLIP_NORM, ULP_GLOBAL, ULP_L2, ULP_VALUE, assert_live_reference

# torch warns once per process, naming the first compressed layout made (CSR, CSC, BSR or BSC):
# which one depends on the order the tests reach the process (xdist workers differ)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Sparse [A-Z]+ tensor support is in beta:UserWarning",
    "ignore:Sparse invariant checks are implicitly disabled:UserWarning",
)

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_sparse.py"
REF = dict(np.load(DATA / "sparse.npz"))

torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)

#: Layout under test: (the reference input it stores, torch layout name).
LAYOUTS = {
    "coo-hybrid": ("rows", "sparse_coo"),  # uncoalesced, row 0 twice (nn.Embedding's)
    "coo-hybrid-coalesced": ("rows_unique", "sparse_coo"),
    "coo": ("flat", "sparse_coo"),  # uncoalesced, position 1 twice
    "csr": ("csr", "sparse_csr"),
    "csc": ("csc", "sparse_csc"),
    "bsr": ("bsr", "sparse_bsr"),
    "bsc": ("bsc", "sparse_bsc"),
}
#: Layouts whose values torch's autograd follows (not an uncoalesced COO tensor's).
DIFFERENTIABLE = ["coo-hybrid-coalesced", "csr", "csc", "bsr", "bsc"]


def _counts(positions: np.ndarray, n: int) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.bincount(positions, minlength=n))])


def build(backend: Backend, layout: str, values: Any) -> Any:
    """The torch sparse tensor of ``layout`` holding ``values`` at the reference's indices."""
    torch = backend.module
    name, _ = LAYOUTS[layout]
    idx = REF[f"{name}/indices"]
    dev = backend.device

    def ints(a: Any) -> Any:
        return torch.tensor(np.asarray(a), dtype=torch.int64, device=dev)

    if name in ("rows", "rows_unique"):
        unique = bool(np.all(np.diff(idx) > 0))
        return torch.sparse_coo_tensor(
            ints(idx[None]), values, (4, 2), is_coalesced=unique, check_invariants=True
        )
    if name == "flat":
        return torch.sparse_coo_tensor(
            ints(np.stack(np.divmod(idx, 3))), values, (2, 3), check_invariants=True
        )
    rows, cols = np.divmod(idx, 2 if name in ("bsr", "bsc") else 3)
    shape = (4, 4) if name in ("bsr", "bsc") else (2, 3)
    if name in ("csr", "bsr"):
        compressed, plain = _counts(rows, 2), cols
    else:
        compressed, plain = _counts(cols, shape[1] // (2 if name == "bsc" else 1)), rows
    return torch.sparse_compressed_tensor(
        ints(compressed),
        ints(plain),
        values,
        shape,
        layout=getattr(torch, LAYOUTS[layout][1]),
        check_invariants=True,
    )


def arrange(layout: str, dense: np.ndarray) -> np.ndarray:
    """A dense TF result (in the IndexedSlices' dense_shape) in the torch tensor's shape."""
    name, _ = LAYOUTS[layout]
    if name in ("rows", "rows_unique") or dense.ndim == 0:
        return dense
    if name in ("bsr", "bsc"):
        if dense.shape == (1, 1, 1):  # normalize's norm, keepdims
            return dense.reshape(1, 1)
        return dense.reshape(2, 2, 2, 2).transpose(0, 2, 1, 3).reshape(4, 4)
    return dense.reshape(1, 1) if dense.shape == (1,) else dense.reshape(2, 3)


def tensor(backend: Backend, a: np.ndarray, grad: bool = False) -> Any:
    torch = backend.module
    return torch.tensor(a, device=backend.device, requires_grad=grad)


def values_of(backend: Backend, t: Any) -> Any:
    torch = backend.module
    return t._values() if t.layout == torch.sparse_coo else t.values()


def indices_of(backend: Backend, t: Any) -> list[Any]:
    torch = backend.module
    if t.layout == torch.sparse_coo:
        return [t._indices()]
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return [t.crow_indices(), t.col_indices()]
    return [t.ccol_indices(), t.row_indices()]


def assert_sparse_like(backend: Backend, out: Any, t: Any) -> None:
    """``out`` has ``t``'s layout, shape, dtype, device, coalesced flag and very indices."""
    torch = backend.module
    assert isinstance(out, torch.Tensor)
    assert out.layout == t.layout
    assert out.shape == t.shape
    assert out.dtype == t.dtype
    assert out.device == t.device
    if t.layout == torch.sparse_coo:
        assert out.is_coalesced() == t.is_coalesced()
    for a, b in zip(indices_of(backend, out), indices_of(backend, t), strict=True):
        assert a.dtype == b.dtype
        assert torch.equal(a, b)


#: Functions whose TF result is an IndexedSlices: name -> (call, ULP budget).
VALUES_FUNCS = {
    "clip_by_value": (lambda t: anyclip.clip_by_value(t, -0.5, 2.5), ULP_VALUE),
    "clip_by_norm": (lambda t: anyclip.clip_by_norm(t, 2.0), ULP_CLIP_NORM),
    "clip_by_norm_axes0": (lambda t: anyclip.clip_by_norm(t, 2.0, axes=0), ULP_CLIP_NORM),
    "clip_by_norm_axes_last": (lambda t: anyclip.clip_by_norm(t, 2.0, axes=-1), ULP_CLIP_NORM),
}

#: Functions whose TF result is dense: name -> (call, ULP budget).
DENSE_FUNCS = {
    "clip_by_average_norm": (lambda t: anyclip.clip_by_average_norm(t, 1.0), ULP_L2),
    "norm": (lambda t: anyclip.norm(t), ULP_L2),
    "l2_normalize": (lambda t: anyclip.l2_normalize(t), ULP_L2),
    "normalize": (lambda t: anyclip.normalize(t)[0], ULP_L2),
    "normalize_norm": (lambda t: anyclip.normalize(t)[1], ULP_L2),
    "norm_ord1_axis1": (lambda t: anyclip.norm(t, ord=1, axis=1), ULP_L2),
    "l2_normalize_axis1": (lambda t: anyclip.l2_normalize(t, axis=1), ULP_L2),
}


def _case(layout: str, function: str) -> str:
    return f"{LAYOUTS[layout][0]}/{function}"


def cases(functions: Any, layouts: Any = tuple(LAYOUTS)) -> Any:
    """``(layout, function)`` parameters with a TF reference (axis variants fit some shapes)."""
    return pytest.mark.parametrize(
        ("layout", "function"),
        [(lay, f) for lay in layouts for f in functions if _case(lay, f) in REF],
    )


@torch_backends
@cases(VALUES_FUNCS)
def test_values_functions_keep_layout_and_indices(backend, layout, function):
    key = _case(layout, function)
    t = build(backend, layout, tensor(backend, REF[f"{LAYOUTS[layout][0]}/values"]))
    call, ulp = VALUES_FUNCS[function]
    out = call(t)
    assert_sparse_like(backend, out, t)
    assert_array(values_of(backend, out), REF[key], backend=backend, dtype="float32", ulp=ulp)


@torch_backends
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_global_norm_counts_every_stored_value(backend, layout):
    name, _ = LAYOUTS[layout]
    t = build(backend, layout, tensor(backend, REF[f"{name}/values"]))
    other = tensor(backend, REF["other"])
    norm = anyclip.global_norm([t, None, other])
    assert_array(norm, REF[f"{name}/global_norm"], backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    clipped, used = anyclip.clip_by_global_norm((t, None, other), 2.0)
    assert isinstance(clipped, list) and clipped[1] is None
    assert_sparse_like(backend, clipped[0], t)
    expected = REF[f"{name}/clip_by_global_norm"]
    got = values_of(backend, clipped[0])
    assert_array(got, expected, backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    expected_other = REF[f"{name}/clip_by_global_norm_other"]
    assert_array(clipped[2], expected_other, backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    expected_norm = REF[f"{name}/clip_by_global_norm_norm"]
    assert_array(used, expected_norm, backend=backend, dtype="float32", ulp=ULP_GLOBAL)


@torch_backends
@cases(DENSE_FUNCS)
def test_densifying_functions_sum_repeated_indices(backend, layout, function):
    key = _case(layout, function)
    t = build(backend, layout, tensor(backend, REF[f"{LAYOUTS[layout][0]}/values"]))
    call, ulp = DENSE_FUNCS[function]
    out = call(t)
    assert out.layout == backend.module.strided
    expected = arrange(layout, REF[key])
    assert_array(out, expected, backend=backend, dtype="float32", ulp=ulp)


def assert_grad(backend: Backend, grad: Any, expected: np.ndarray, what: str) -> None:
    """Gradients within 8 ulps of their largest entry or 1 (an exact 0 may come out as 2e-7)."""
    scale = max(float(np.max(np.abs(expected))), 1.0)
    assert_array(grad, expected, backend=backend, dtype="float32", ulp=8, scale=scale, what=what)


def _loss_weights(backend: Backend, layout: str, function: str, out: Any) -> Any:
    ref = REF[_case(layout, function)]
    w = np.arange(1, ref.size + 1, dtype=np.float32).reshape(ref.shape)  # TF's loss weights
    if function in DENSE_FUNCS:
        w = arrange(layout, w)
    assert tuple(out.shape) == w.shape
    return tensor(backend, w)


@torch_backends
@cases([*VALUES_FUNCS, "clip_by_global_norm", "global_norm"], DIFFERENTIABLE)
def test_gradient_through_values_is_tfs(backend, layout, function):
    # TF's gradient with respect to the IndexedSlices' values; torch's autograd follows the
    # values of a compressed or coalesced tensor
    name, _ = LAYOUTS[layout]
    key = _case(layout, function)
    v = tensor(backend, REF[f"{name}/values"], grad=True)
    t = build(backend, layout, v)
    other = tensor(backend, REF["other"])
    if function == "global_norm":
        out = anyclip.global_norm([t, None, other])
    elif function == "clip_by_global_norm":
        out = anyclip.clip_by_global_norm([t, None, other], 2.0)[0][0].values()
    else:
        out = VALUES_FUNCS[function][0](t)
        assert_sparse_like(backend, out, t)
        out = out.values()  # differentiable where the input's values are
    (out * _loss_weights(backend, layout, function, out)).sum().backward()
    assert_grad(backend, v.grad, REF[f"{name}/grad_{function}"], key)


# torch's own backward of to_dense() for a BSR/BSC input masks the dense gradient by
# converting it to the block layout, which CUDA builds do on the CPU (torch 2.11, an H200:
# "sparse_compressed_to_sparse_bsr executing on the CPU device"); a plain
# `t.to_dense().sum().backward()` takes the same steps, and anyclip's forward stays on the device.
@pytest.mark.filterwarnings(
    "ignore:sparse_compressed_to_sparse_bs[rc] executing on the CPU device:UserWarning"
)
@torch_backends
@cases(["norm", "l2_normalize", "clip_by_average_norm"])
def test_gradient_through_densification_is_tfs(backend, layout, function):
    # to_dense sums repeated indices, as TF's conversion; its gradient reaches each value
    name, _ = LAYOUTS[layout]
    v = tensor(backend, REF[f"{name}/values"], grad=True)
    out = DENSE_FUNCS[function][0](build(backend, layout, v))
    (out * _loss_weights(backend, layout, function, out)).sum().backward()
    assert_grad(backend, v.grad, REF[f"{name}/grad_{function}"], function)


@torch_backends
@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda t: anyclip.clip_by_norm(t, 1.0), "t"),
        (lambda t: anyclip.clip_by_value(t, 0.0, 1.0), "t"),
        (lambda t: anyclip.global_norm([None, t]), r"t_list\[1\]"),
        (lambda t: anyclip.clip_by_global_norm([t], 1.0), r"t_list\[0\]"),
    ],
)
def test_uncoalesced_values_with_grad_are_refused(backend, call, name):
    # torch's autograd does not follow `_values()`: a silent detach would lose the gradient
    v = tensor(backend, REF["rows/values"], grad=True)
    t = build(backend, "coo-hybrid", v)
    with pytest.raises(TypeError, match=rf"`{name}` is an uncoalesced sparse COO.*detach"):
        call(t)
    torch = backend.module
    with torch.no_grad():  # nothing recorded: the values are used as they are
        call(t)


@torch_backends
def test_clip_by_global_norm_with_use_norm(backend):
    # TF (§14): use_norm=4 scales the values by 2 / 4, exactly
    t = build(backend, "coo-hybrid", tensor(backend, REF["rows/values"]))
    clipped, used = anyclip.clip_by_global_norm([t, None], 2.0, use_norm=tensor(backend, 4.0))
    assert clipped[1] is None
    assert_sparse_like(backend, clipped[0], t)
    expected = [[1.5, 2.0], [0.5, 1.0], [0.25, -0.5]]
    assert_array(values_of(backend, clipped[0]), expected, backend=backend, dtype="float32")
    assert_array(used, 4.0, backend=backend, dtype="float32")


@torch_backends
def test_shapes_refer_to_the_stored_values(backend):
    # TF broadcasts bounds against the values ((3, 2) here), not dense_shape ((4, 2))
    t = build(backend, "coo-hybrid", tensor(backend, REF["rows/values"]))
    torch = backend.module
    per_slice = torch.tensor([[0.0], [1.5], [0.0]], device=backend.device)
    out = anyclip.clip_by_value(t, per_slice, 2.5)
    assert_array(
        values_of(backend, out),
        [[2.5, 2.5], [1.5, 2.0], [0.5, 0.0]],  # max(min(v, 2.5), lo) by hand
        backend=backend,
        dtype="float32",
    )
    dense_bound = torch.zeros(4, 2, device=backend.device)
    with pytest.raises(ValueError, match=r"`clip_value_min`.*stored values, of shape \(3, 2\)"):
        anyclip.clip_by_value(t, dense_bound, 2.5)
    with pytest.raises(ValueError, match=r"`axes`.*stored values"):
        anyclip.clip_by_norm(t, 1.0, axes=2)


@torch_backends
@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_dtype_is_kept(backend, dtype):
    # the values' dtype is the result's, as for a dense input (TF computes in the values' dtype)
    torch = backend.module
    v = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=getattr(torch, dtype), device=backend.device)
    t = torch.sparse_coo_tensor(torch.tensor([[0, 2]], device=backend.device), v, (3, 2))
    out = anyclip.clip_by_norm(t, 1.0)
    assert_sparse_like(backend, out, t)
    assert_array(values_of(backend, out), [[0.6, 0.8], [0, 0]], backend=backend, dtype=dtype, ulp=1)


@torch_backends
def test_integer_values_follow_the_dense_rules(backend):
    # TF: clip_by_value takes integer IndexedSlices, clip_by_norm refuses them
    torch = backend.module
    v = torch.tensor([[3, -4]], dtype=torch.int32, device=backend.device)
    t = torch.sparse_coo_tensor(torch.tensor([[1]], device=backend.device), v, (2, 2))
    out = anyclip.clip_by_value(t, 0, 3)
    assert_sparse_like(backend, out, t)
    assert torch.equal(values_of(backend, out), torch.tensor([[3, 0]], dtype=torch.int32).to(v))
    with pytest.raises(TypeError, match="`t` must have a floating dtype"):
        anyclip.clip_by_norm(t, 1.0)


@torch_backends
def test_input_is_not_modified(backend):
    t = build(backend, "coo-hybrid", tensor(backend, REF["rows/values"]))
    before = values_of(backend, t).clone()
    anyclip.clip_by_norm(t, 1.0)
    anyclip.clip_by_global_norm([t], 1.0)
    assert backend.module.equal(values_of(backend, t), before)


@torch_backends
def test_tree_functions(backend):
    t = build(backend, "coo-hybrid", tensor(backend, REF["rows/values"]))
    other = tensor(backend, REF["other"])
    grads = {"emb": t, "head": {"w": other, "b": None}}
    norm = tree.global_norm(grads, accumulate_dtype=None)
    assert_array(norm, REF["rows/global_norm"], backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    clipped, _ = tree.clip_by_global_norm(grads, 2.0, accumulate_dtype=None)
    assert clipped["head"]["b"] is None
    assert_sparse_like(backend, clipped["emb"], t)
    expected = REF["rows/clip_by_global_norm"]
    got = values_of(backend, clipped["emb"])
    assert_array(got, expected, backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    by_norm = tree.clip_by_norm(grads, 2.0)
    assert_sparse_like(backend, by_norm["emb"], t)
    expected = REF["rows/clip_by_norm"]
    got = values_of(backend, by_norm["emb"])
    assert_array(got, expected, backend=backend, dtype="float32", ulp=ULP_CLIP_NORM)
    avg = tree.clip_by_average_norm(grads, 1.0)
    assert_array(avg["emb"], REF["rows/clip_by_average_norm"], backend=backend, dtype="float32")


@pytest.mark.parametrize("backend", ["jax"], indirect=True)
def test_jax_bcoo(backend):
    sparse = pytest.importorskip("jax.experimental.sparse")
    jnp = backend.xp
    values = jnp.asarray(REF["rows/values"])
    indices = jnp.asarray(REF["rows/indices"][:, None].astype(np.int32))
    t = sparse.BCOO((values, indices), shape=(4, 2))
    out = anyclip.clip_by_norm(t, 2.0)
    assert isinstance(out, sparse.BCOO)
    assert out.shape == t.shape and out.indices is t.indices
    assert_array(out.data, REF["rows/clip_by_norm"], backend=backend, dtype="float32", ulp=2)
    clipped, norm = anyclip.clip_by_global_norm([t, None, jnp.asarray(REF["other"])], 2.0)
    assert isinstance(clipped[0], sparse.BCOO)
    expected = REF["rows/clip_by_global_norm"]
    assert_array(clipped[0].data, expected, backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    assert_array(norm, REF["rows/global_norm"], backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    dense = anyclip.l2_normalize(t)
    assert_array(dense, REF["rows/l2_normalize"], backend=backend, dtype="float32", ulp=ULP_L2)
    jitted = backend.module.jit(lambda t: anyclip.clip_by_norm(t, 2.0))(t)
    assert isinstance(jitted, sparse.BCOO)
    assert_array(jitted.data, REF["rows/clip_by_norm"], backend=backend, dtype="float32", ulp=2)
    grads = {"emb": t, "b": None, "w": jnp.asarray(REF["other"])}
    clipped_tree, _ = tree.clip_by_global_norm(grads, 2.0, accumulate_dtype=None)
    assert isinstance(clipped_tree["emb"], sparse.BCOO) and clipped_tree["b"] is None
    got = clipped_tree["emb"].data
    assert_array(got, expected, backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    bcsr = sparse.BCSR.fromdense(jnp.eye(2, dtype=jnp.float32))  # not BCOO: refused, with the fix
    with pytest.raises(TypeError, match=r"`t_list\[0\]` must be an array or a BCOO.*to_bcoo"):
        anyclip.global_norm([bcsr])


@pytest.mark.parametrize("backend", ["jax"], indirect=True)
def test_optax_transformation_takes_bcoo(backend):
    # anyclip.optax goes through anyclip.tree: a BCOO update is one leaf, clipped as TF's slices
    sparse = pytest.importorskip("jax.experimental.sparse")
    anyclip_optax = pytest.importorskip("anyclip.optax")
    jnp = backend.xp
    indices = jnp.asarray(REF["rows/indices"][:, None].astype(np.int32))
    t = sparse.BCOO((jnp.asarray(REF["rows/values"]), indices), shape=(4, 2))
    updates = {"emb": t, "w": jnp.asarray(REF["other"])}
    tx = anyclip_optax.clip_by_global_norm(2.0)
    out, _ = tx.update(updates, tx.init(updates))
    assert isinstance(out["emb"], sparse.BCOO) and out["emb"].indices is indices
    expected = REF["rows/clip_by_global_norm"]
    assert_array(out["emb"].data, expected, backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    expected = REF["rows/clip_by_global_norm_other"]
    assert_array(out["w"], expected, backend=backend, dtype="float32", ulp=ULP_GLOBAL)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda m: anyclip.clip_by_norm(m, 1.0), "t"),
        (lambda m: anyclip.clip_by_value(m, 0.0, 1.0), "t"),
        (lambda m: anyclip.global_norm([None, m]), r"t_list\[1\]"),
        (lambda m: anyclip.clip_by_global_norm([m], 1.0), r"t_list\[0\]"),
        (lambda m: anyclip.norm(m), "tensor"),
        (lambda m: anyclip.l2_normalize(m), "x"),
    ],
)
def test_scipy_sparse_is_refused(call, name):
    scipy_sparse = pytest.importorskip("scipy.sparse")
    m = scipy_sparse.coo_matrix(np.array([[3.0, 4.0]], dtype=np.float32))
    with pytest.raises(TypeError, match=rf"`{name}` must be an array.*SciPy sparse.*toarray"):
        call(m)


@pytest.mark.live_tf
def test_committed_reference_is_tfs(tmp_path):
    # the committed file is still what TF 2.21 gives (run with --live-tf)
    assert_live_reference(SCRIPT, REF, tmp_path)


def _ptb_steps() -> list[int]:
    from anyclip_conformance.reference import load_real_gradients

    provenance, _ = load_real_gradients()
    steps: list[int] = provenance["models"]["ptb_lstm"]["steps"]
    return steps


def _ptb_step(step: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    from anyclip_conformance.reference import load_real_gradients

    provenance, arrays = load_real_gradients()
    return provenance["models"]["ptb_lstm"], {
        k.split("|", 2)[2]: v for k, v in arrays.items() if k.startswith(f"ptb_lstm|{step}|")
    }


def _sparse_embedding(backend: Backend, values: np.ndarray, ids: np.ndarray, rows: int) -> Any:
    """The embedding's ``IndexedSlices`` as the backend's sparse layout, repeated ids kept."""
    if backend.library == "torch":
        torch = backend.module
        index = torch.as_tensor(ids.astype(np.int64), device=backend.device)[None]
        shape = (rows, values.shape[1])
        return torch.sparse_coo_tensor(index, backend.asarray(values), shape)  # uncoalesced
    sparse = pytest.importorskip("jax.experimental.sparse")
    jnp = backend.xp
    index = jnp.asarray(ids.astype(np.int32)[:, None])
    return sparse.BCOO((jnp.asarray(values), index), shape=(rows, values.shape[1]))


@pytest.mark.parametrize("backend", ["torch", "torch-cuda", "jax"], indirect=True)
@pytest.mark.parametrize("step", _ptb_steps())
def test_ptb_embedding_gradient_with_repeated_ids(backend, step):
    """tensorflow/models' PTB LSTM: its ``IndexedSlices`` embedding gradient (80 rows, about
    40 distinct ids) as a sparse array, with the dense gradients, through
    ``clip_by_global_norm``: TF's norm within 1 ulp, its clipped values within 3
    (``anyclip_conformance.real_programs``, run on TF 2.21)."""
    meta, arrays = _ptb_step(step)
    ids = arrays["indices|0"]
    assert len(np.unique(ids)) < len(ids)  # repeated ids: TF squares each occurrence
    emb = _sparse_embedding(backend, arrays["grad|0"], ids, int(arrays["dense_shape|0"][0]))
    dense = [backend.asarray(arrays[f"grad|{i}"]) for i in range(1, len(meta["kinds"]))]
    clipped, norm = anyclip.clip_by_global_norm([emb, *dense], meta["clip_norm"])
    assert_array(norm, arrays["norm"], backend=backend, dtype="float32", ulp=1)
    got = clipped[0]._values() if backend.library == "torch" else clipped[0].data
    ulp = gpu_budget("device-sum-order", backend.name, 3)  # a GPU's sum order: declared
    assert_array(got, arrays["clipped|0"], backend=backend, dtype="float32", ulp=ulp)
    for i, out in enumerate(clipped[1:], start=1):
        assert_array(out, arrays[f"clipped|{i}"], backend=backend, dtype="float32", ulp=ulp)
