"""The porting kit: drop-in torch and optax adapters, and every input a training loop hands us.

torch's adapters are checked against ``torch.nn.utils`` itself on the same inputs: the same
signatures, the same arguments accepted, the same errors where torch raises, norms equal to
torch's (which, for the 2-norm, is the value TF computes) within the ULP budgets, and the
gradients scaled by TF's factor ``c * min(1 / n, 1 / c)`` computed here in float64. Errors
that TF raises must contain TF's own text (a ported ``assertRaisesRegex`` passes).
"""

from __future__ import annotations

import inspect
import math
import pickle
import subprocess
import sys
import textwrap
from unittest import mock

import numpy as np
import pytest

import anyclip
from anyclip_conformance import Backend, assert_array

ULP = 3

torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)


@pytest.fixture
def at(backend):
    return pytest.importorskip("anyclip.torch")


def _params(backend: Backend, grads: list, dtype: str = "float32") -> list:
    torch = backend.module
    out = []
    for g in grads:
        shape = () if g is None else np.shape(g)
        p = torch.nn.Parameter(
            torch.zeros(shape, dtype=backend.dtype(dtype), device=backend.device)
        )
        p.grad = None if g is None else backend.asarray(g, dtype)
        out.append(p)
    return out


GRADS = [[[3.0, -4.0, 0.5], [1.0, 2.0, -2.0]], [12.0, -0.25], [[[0.75]]]]


# ================================================================ signatures
@torch_backends
@pytest.mark.parametrize(
    "name", ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_"]
)
def test_torch_signatures_are_torchs(backend, at, name):
    theirs = inspect.signature(getattr(backend.module.nn.utils, name)).parameters
    ours = inspect.signature(getattr(at, name)).parameters
    # torch's parameters, in torch's order, with torch's kinds and defaults; ours may add
    # keyword-only ones after them
    head = list(ours.values())[: len(theirs)]
    assert [p.name for p in head] == list(theirs)
    for p in head:
        assert p.kind == theirs[p.name].kind, p.name
        assert p.default == theirs[p.name].default, p.name
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(ours.values())[len(theirs) :])


@jax_backends
def test_optax_signature_is_optaxs(backend):
    optax = pytest.importorskip("optax")
    ao = pytest.importorskip("anyclip.optax")
    theirs = list(inspect.signature(optax.clip_by_global_norm).parameters)
    ours = list(inspect.signature(ao.clip_by_global_norm).parameters)
    assert ours[: len(theirs)] == theirs == ["max_norm"]
    assert list(inspect.signature(ao.clip).parameters) == list(
        inspect.signature(optax.clip).parameters
    )


# ==================================================== torch: the same calls
@torch_backends
@pytest.mark.parametrize("norm_type", [2.0, 2, 1, 3.0, 0.5, math.inf, "inf"])
@pytest.mark.parametrize("foreach", [None, False, True])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_against_torch(backend, at, norm_type, foreach, max_norm):
    torch = backend.module
    ours, theirs = _params(backend, GRADS), _params(backend, GRADS)
    before = [p.grad for p in ours]
    n_ours = at.clip_grad_norm_(ours, max_norm=max_norm, norm_type=norm_type, foreach=foreach)
    n_theirs = torch.nn.utils.clip_grad_norm_(
        theirs, max_norm=max_norm, norm_type=norm_type, foreach=foreach
    )
    assert all(p.grad is g for p, g in zip(ours, before, strict=True))  # in place
    assert_array(n_ours, backend.to_numpy(n_theirs), backend=backend, dtype="float32", ulp=ULP)
    # TF's factor, in float64 from the norm both agree on
    n = float(backend.to_numpy(n_theirs))
    factor = max_norm * min(1.0 / n, 1.0 / max_norm)
    for p, g in zip(ours, GRADS, strict=True):
        expected = np.asarray(g, dtype=np.float64) * factor
        assert_array(p.grad, expected, backend=backend, dtype="float32", ulp=ULP)


@torch_backends
def test_clip_grad_norm_p_norm_values(backend, at):
    # hand-derived: |3| + |-4| + |12| = 19 for p=1; max = 12 for inf
    for norm_type, expected in [(1, 19.0), ("inf", 12.0), (math.inf, 12.0)]:
        params = _params(backend, [[3.0, -4.0], [12.0]])
        norm = at.clip_grad_norm_(params, 100.0, norm_type=norm_type)
        assert_array(norm, np.float32(expected), backend=backend, dtype="float32")


@torch_backends
def test_get_total_norm_and_clip_grads_with_norm_against_torch(backend, at):
    torch = backend.module
    ours, theirs = _params(backend, GRADS), _params(backend, GRADS)
    t_ours = at.get_total_norm([p.grad for p in ours])
    t_theirs = torch.nn.utils.get_total_norm([p.grad for p in theirs])
    assert_array(t_ours, backend.to_numpy(t_theirs), backend=backend, dtype="float32", ulp=ULP)
    assert at.clip_grads_with_norm_(ours, 1.0, t_ours) is None
    n = float(backend.to_numpy(t_theirs))
    for p, g in zip(ours, GRADS, strict=True):
        expected = np.asarray(g, dtype=np.float64) * min(1.0 / n, 1.0)
        assert_array(p.grad, expected, backend=backend, dtype="float32", ulp=ULP)
    # no tensors: torch's tensor(0.)
    assert float(at.get_total_norm([])) == float(torch.nn.utils.get_total_norm([])) == 0.0
    with pytest.raises(TypeError, match=r"total_norm.*torch.tensor"):
        at.clip_grads_with_norm_(ours, 1.0, 5.0)


@torch_backends
def test_clip_grad_value_against_torch(backend, at):
    torch = backend.module
    rng = np.random.default_rng(4)
    grads = [rng.standard_normal((3, 4)) * 2, rng.standard_normal(5), None]
    for foreach in (None, False, True):
        ours, theirs = _params(backend, grads), _params(backend, grads)
        assert at.clip_grad_value_(ours, 0.5, foreach=foreach) is None
        torch.nn.utils.clip_grad_value_(theirs, 0.5, foreach=foreach)
        for o, t in zip(ours, theirs, strict=True):
            if o.grad is None:
                assert t.grad is None
                continue
            assert_array(o.grad, backend.to_numpy(t.grad), backend=backend, dtype="float32")
    # a lone parameter, positional clip_value as torch
    (p,) = _params(backend, [[-2.0, 0.25, 3.0]])
    at.clip_grad_value_(p, 1)
    assert_array(p.grad, [-1.0, 0.25, 1.0], backend=backend, dtype="float32")


@torch_backends
def test_clip_grad_value_negative_is_tfs(backend, at):
    # TF: maximum(minimum(g, v), -v) with v = -1 gives 1 everywhere; torch's clamp gives -1
    (p,) = _params(backend, [[-2.0, 0.0, 3.0]])
    at.clip_grad_value_([p], -1.0)
    assert_array(p.grad, [1.0, 1.0, 1.0], backend=backend, dtype="float32")


@torch_backends
def test_clip_grad_value_refuses_a_second_bound(backend, at):
    params = _params(backend, [[1.0]])
    with pytest.raises(TypeError, match=r"foreach.*clip_grad_by_value_"):
        at.clip_grad_value_(params, -0.5, 1.0)


@torch_backends
@pytest.mark.parametrize("foreach", [False, True])
def test_foreach_is_honoured(backend, at, foreach):
    torch = backend.module
    params = _params(backend, GRADS)
    with mock.patch.object(torch, "_foreach_mul_", wraps=torch._foreach_mul_) as spy:
        at.clip_grad_norm_(params, 0.5, foreach=foreach)
    assert spy.called is foreach
    with mock.patch.object(torch, "_foreach_clamp_max_", wraps=torch._foreach_clamp_max_) as spy:
        at.clip_grad_value_(params, 0.1, foreach=foreach)
    assert spy.called is foreach


@torch_backends
def test_foreach_true_without_support_is_torchs_error(backend, at):
    torch = backend.module
    p = torch.nn.Parameter(torch.zeros(2, device="meta"))
    p.grad = torch.ones(2, device="meta")
    with pytest.raises(RuntimeError) as theirs:
        torch.nn.utils.clip_grad_norm_([p], 1.0, foreach=True)
    with pytest.raises(RuntimeError) as ours:
        at.clip_grad_norm_([p], 1.0, foreach=True)
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(RuntimeError, match="foreach=True was passed"):
        at.clip_grad_value_([p], 1.0, foreach=True)


@torch_backends
@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_error_if_nonfinite_is_torchs(backend, at, value):
    torch = backend.module
    grads = [[value, 1.0], [2.0]]
    with pytest.raises(RuntimeError) as theirs:
        torch.nn.utils.clip_grad_norm_(_params(backend, grads), 1.0, error_if_nonfinite=True)
    params = _params(backend, grads)
    with pytest.raises(at.NonfiniteNormError) as ours:
        at.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert isinstance(ours.value, RuntimeError)
    assert isinstance(ours.value, FloatingPointError)
    assert str(ours.value).startswith(str(theirs.value))  # torch's message, then the value
    assert_array(params[1].grad, [2.0], backend=backend, dtype="float32")  # untouched
    with pytest.raises(at.NonfiniteNormError):
        at.get_total_norm([p.grad for p in params], error_if_nonfinite=True)


@torch_backends
@pytest.mark.parametrize("nonfinite", ["skip", "torch"])
def test_error_if_nonfinite_conflicts_with_policy(backend, at, nonfinite):
    params = _params(backend, [[1.0]])
    with pytest.raises(ValueError, match=r"error_if_nonfinite=True.*nonfinite.*one of them"):
        at.clip_grad_norm_(params, 1.0, error_if_nonfinite=True, nonfinite=nonfinite)


@torch_backends
def test_parameters_inputs(backend, at):
    torch = backend.module
    model = torch.nn.Linear(2, 1).to(backend.device)
    with pytest.warns(UserWarning, match="empty generator"):  # torch warns too
        at.clip_grad_norm_((p for p in []), 1.0)
    with pytest.raises(TypeError, match=r"dict.*model.parameters\(\)"):
        at.clip_grad_norm_(dict(model.named_parameters()), 1.0)
    with pytest.raises(TypeError, match=r"parameters\[0\].*must be a tensor"):
        at.clip_grad_norm_([np.zeros(2)], 1.0)
    with pytest.raises(TypeError, match="iterable of tensors"):
        at.clip_grad_norm_(3.0, 1.0)
    with pytest.raises(ValueError, match="norm_type"):
        at.clip_grad_norm_(model.parameters(), 1.0, norm_type="two")


# ============================================================ torch: sparse
@torch_backends
@pytest.mark.parametrize("which", ["norm", "value", "by_norm"])
def test_sparse_embedding_gradient(backend, at, which):
    # nn.Embedding(sparse=True) gives an uncoalesced COO gradient (index 1 twice): TF clips
    # the IndexedSlices through its values, each stored row counted, the indices untouched
    torch = backend.module
    torch.manual_seed(0)
    emb = torch.nn.Embedding(5, 3, sparse=True).to(backend.device)
    dense = torch.nn.Linear(3, 1).to(backend.device)
    ids = torch.tensor([1, 1, 3], device=backend.device)
    (dense(emb(ids)) * 10).sum().backward()
    g = emb.weight.grad
    assert g.layout == torch.sparse_coo and not g.is_coalesced()
    indices = g._indices().clone()
    values = np.asarray(backend.to_numpy(g._values()), dtype=np.float64)
    other = np.asarray(backend.to_numpy(dense.weight.grad), dtype=np.float64)
    params = [emb.weight, dense.weight]
    if which == "norm":
        norm = at.clip_grad_norm_(params, 1.0)
        n = math.sqrt(np.sum(values**2) + np.sum(other**2))
        assert_array(norm, np.float32(n), backend=backend, dtype="float32", ulp=ULP)
        expected = values * min(1.0 / n, 1.0)
    elif which == "value":
        at.clip_grad_value_(params, 0.5)
        expected = np.clip(values, -0.5, 0.5)
    else:
        at.clip_grad_by_norm_(params, 1.0)
        expected = values / max(math.sqrt(np.sum(values**2)), 1.0)
    assert emb.weight.grad is g and g.layout == torch.sparse_coo
    assert torch.equal(g._indices(), indices)
    assert_array(g._values(), expected, backend=backend, dtype="float32", ulp=ULP)


@torch_backends
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
def test_sparse_csr_gradient(backend, at):
    torch = backend.module
    p = torch.nn.Parameter(torch.zeros(2, 3, device=backend.device).to_sparse_csr())
    dense = torch.tensor([[0.0, 3.0, 0.0], [4.0, 0.0, 12.0]], device=backend.device)
    p.grad = dense.to_sparse_csr()
    norm = at.clip_grad_norm_([p], 6.5)
    assert_array(norm, np.float32(13), backend=backend, dtype="float32", ulp=ULP)
    assert p.grad.layout == torch.sparse_csr
    assert_array(p.grad.values(), [1.5, 2.0, 6.0], backend=backend, dtype="float32", ulp=ULP)


# ================================================================ devices
@torch_backends
def test_meta_mixed_with_another_device(backend, at):
    torch = backend.module
    params = _params(backend, [[3.0, 4.0]])
    meta = torch.nn.Parameter(torch.zeros(2, device="meta"))
    meta.grad = torch.ones(2, device="meta")
    here = str(params[0].device)
    with pytest.raises(ValueError, match=rf"mixes devices {here} and meta"):
        at.clip_grad_norm_([*params, meta], 1.0)
    with pytest.raises(ValueError, match=rf"mixes devices meta and {here}"):
        anyclip.global_norm([params[0].grad, meta.grad])
    with pytest.raises(ValueError, match="mixes devices"):
        anyclip.clip_by_global_norm([meta.grad, params[0].grad], 1.0)


# ===================================================================== optax
@pytest.fixture
def ao(backend):
    pytest.importorskip("optax")
    return pytest.importorskip("anyclip.optax")


@jax_backends
def test_optax_max_norm_names(backend, ao, make, check):
    u = [make([3.0, 4.0]), make([[12.0]])]
    for tx in (
        ao.clip_by_global_norm(6.5),
        ao.clip_by_global_norm(max_norm=6.5),
        ao.clip_by_global_norm(clip_norm=6.5),
    ):
        out, _ = tx.update(u, tx.init(u))
        check(out[0], [1.5, 2.0], "float32", ULP)  # docs/tf-reference.md §4.2
        check(out[1], [[6.0]], "float32", ULP)
    with pytest.raises(TypeError, match=r"max_norm.*clip_norm.*pass one"):
        ao.clip_by_global_norm(1.0, clip_norm=1.0)
    with pytest.raises(TypeError, match="max_norm"):
        ao.clip_by_global_norm()


@jax_backends
def test_optax_state_is_optaxs(backend, ao):
    jax = backend.module
    optax = pytest.importorskip("optax")
    params = {"w": backend.asarray([[1.0, 2.0]], "float32"), "b": backend.asarray([0.5], "float32")}
    theirs = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2))
    ours = optax.chain(ao.clip_by_global_norm(1.0), optax.adam(1e-2))
    s_theirs, s_ours = theirs.init(params), ours.init(params)
    assert s_ours[0] == optax.EmptyState() == s_theirs[0]
    assert jax.tree_util.tree_structure(s_ours) == jax.tree_util.tree_structure(s_theirs)


@jax_backends
def test_optax_checkpoint_round_trip(backend, ao, tmp_path):
    # a chain checkpointed with optax's clipper loads into the swapped chain and runs on
    jax = backend.module
    optax = pytest.importorskip("optax")
    params = {"w": backend.asarray([[1.0, -2.0]], "float32")}
    grads = {"w": backend.asarray([[30.0, 40.0]], "float32")}
    theirs = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.1))
    state = theirs.init(params)
    _, state = theirs.update(grads, state, params)
    path = tmp_path / "state.pkl"
    path.write_bytes(pickle.dumps(jax.device_get(state)))
    restored = pickle.loads(path.read_bytes())
    ours = optax.chain(ao.clip_by_global_norm(1.0), optax.adam(0.1))
    template = ours.init(params)
    leaves = jax.tree_util.tree_leaves(restored)
    state_ours = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(template), leaves)
    out_ours, _ = ours.update(grads, state_ours, params)
    out_theirs, _ = theirs.update(grads, restored, params)
    # Adam's second step from the same moments: grads clipped to norm 1 by both (up to the
    # 1-ULP difference of the two formulas), so the updates agree closely
    np.testing.assert_allclose(np.asarray(out_ours["w"]), np.asarray(out_theirs["w"]), rtol=1e-5)
    # the opt-in variant has its own structure, which round-trips too
    tx = ao.clip_by_global_norm(1.0, norm_in_state=True)
    _, s = tx.update(grads, tx.init(params))
    back = pickle.loads(pickle.dumps(jax.device_get(s)))
    assert isinstance(back, ao.ClipByGlobalNormState)
    assert float(back.global_norm) == pytest.approx(50.0, rel=1e-6)


@jax_backends
def test_optax_clip_is_optaxs(backend, ao, make, check):
    optax = pytest.importorskip("optax")
    u = [make([-2.0, 0.25, 3.0])]
    ours, _ = ao.clip(0.5).update(u, optax.EmptyState())
    theirs, _ = optax.clip(0.5).update(u, optax.EmptyState())
    check(ours[0], np.asarray(theirs[0]), "float32")


# ====================================================== inputs from NumPy
@pytest.mark.filterwarnings(
    "ignore:the matrix subclass is not the recommended:PendingDeprecationWarning"
)
def test_numpy_matrix_is_accepted():
    # TF converts np.matrix to a plain 2-D tensor; so does anyclip (values hand-derived)
    m = np.matrix([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    out = anyclip.clip_by_norm(m, 1.0)
    assert type(out) is np.ndarray and out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)
    clipped, norm = anyclip.clip_by_global_norm([m, np.float32([12.0])], 6.5)
    assert type(clipped[0]) is np.ndarray
    np.testing.assert_allclose(clipped[0], [[1.5, 2.0], [0.0, 0.0]], rtol=1e-6)
    assert float(norm) == 13.0
    assert float(anyclip.norm(m)) == 5.0
    np.testing.assert_array_equal(anyclip.clip_by_value(m, 0.0, 3.5), [[3.0, 3.5], [0.0, 0.0]])


@pytest.mark.parametrize(
    "call",
    [
        lambda x: anyclip.clip_by_norm(x, 1.0),
        lambda x: anyclip.clip_by_value(x, 0.0, 1.0),
        lambda x: anyclip.global_norm([x]),
        lambda x: anyclip.clip_by_global_norm([x], 1.0),
        lambda x: anyclip.norm(x),
    ],
)
def test_masked_array_is_refused(call):
    x = np.ma.array(np.float32([3.0, 4.0]), mask=[False, True])
    with pytest.raises(TypeError, match=r"masked array.*filled\(0\)"):
        call(x)


# ================================================================ errors
@pytest.mark.parametrize(
    ("t_list", "fix"),
    [
        ({"a": np.float32([1.0])}, "anyclip.tree"),
        ((x for x in [np.float32([1.0])]), r"list\(\.\.\.\)"),
        (np.float32([1.0, 2.0]), r"\[t\]"),
    ],
    ids=["dict", "generator", "array"],
)
def test_t_list_errors_say_the_fix(t_list, fix):
    # TF's own text first (clip_ops.py), as a ported assertRaisesRegex checks it
    with pytest.raises(TypeError, match="`t_list` should be a sequence of tensors") as exc:
        anyclip.clip_by_global_norm(t_list, 1.0)
    assert exc.match(fix)


@pytest.mark.parametrize(
    ("kwargs", "tf_regex"),
    [
        ({"ord": 0}, "'ord' must be a supported vector norm"),
        ({"ord": -1}, "'ord' must be a supported vector norm, got -1"),
        ({"ord": "fro"}, "'ord' must be a supported vector norm, got fro"),
        (
            {"ord": 3, "axis": (0, 1)},
            r"'ord' must be a supported matrix norm in \['euclidean', 'fro', 1, 2, inf\], got 3",
        ),
        ({"axis": [0]}, "'axis' must be None, an integer, or a tuple of 2 unique integers"),
    ],
)
def test_norm_errors_contain_tfs_text(kwargs, tf_regex):
    # the texts of tf.norm (linalg_ops.py in TF 2.21)
    with pytest.raises(ValueError, match=tf_regex):
        anyclip.norm(np.ones((2, 2), dtype=np.float32), **kwargs)


# ========================================================== without NumPy
_NO_NUMPY = textwrap.dedent(
    """
    import sys
    sys.modules["numpy"] = None  # every `import numpy` now raises ImportError
    import torch
    import anyclip, anyclip.torch

    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, 4.0])
    q = torch.nn.Parameter(torch.zeros(1))  # no gradient
    assert float(anyclip.torch.clip_grad_norm_([p, q], 1.0)) == 5.0
    assert p.grad.tolist() == [0.6000000238418579, 0.800000011920929]
    anyclip.torch.clip_grad_value_([p], 0.7)
    assert float(anyclip.torch.get_total_norm([p.grad])) > 0
    # no array at all: the documented default without NumPy is torch, already imported
    n = anyclip.global_norm([None, None])
    assert isinstance(n, torch.Tensor) and n.dtype == torch.float32 and float(n) == 0.0
    out, n = anyclip.clip_by_global_norm([None], 1.0)
    assert out == [None] and isinstance(n, torch.Tensor)
    c = anyclip.clip_by_norm(torch.tensor([3.0, 4.0]), 1.0)
    assert isinstance(c, torch.Tensor)
    assert "numpy" not in {m.split(".")[0] for m, v in sys.modules.items() if v is not None}
    print("ok")
    """
)


def test_torch_without_numpy(tmp_path):
    """A torch-only install: simulated by blocking ``import numpy`` in a fresh interpreter."""
    pytest.importorskip("torch")
    script = tmp_path / "no_numpy.py"
    script.write_text(_NO_NUMPY)
    result = subprocess.run(
        [sys.executable, "-W", "ignore", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


@torch_backends
@pytest.mark.parametrize(
    ("functional", "in_place"),
    [
        (lambda g: anyclip.clip_by_norm(g, 1.0), lambda at, p: at.clip_grad_by_norm_(p, 1.0)),
        (
            lambda g: anyclip.clip_by_value(g, 0.0, 3.5),
            lambda at, p: at.clip_grad_by_value_(p, 0.0, 3.5),
        ),
        (
            lambda g: anyclip.clip_by_global_norm([g], 1.0)[0][0],
            lambda at, p: at.clip_grad_norm_(p, 1.0),
        ),
    ],
)
def test_sparse_functional_api_matches_the_adapters(backend, at, functional, in_place):
    # one rule (TF's IndexedSlices: the stored values, indices untouched) in both APIs; the
    # functions return a new sparse tensor, the adapters write into p.grad
    torch = backend.module
    indices = torch.tensor([[0, 2, 0]], device=backend.device)
    values = torch.tensor([3.0, 4.0, 1.0], device=backend.device)
    g = torch.sparse_coo_tensor(indices, values, (3,), check_invariants=True)
    out = functional(g)
    assert out.layout == torch.sparse_coo and not out.is_coalesced()
    assert torch.equal(out._indices(), indices)
    p = torch.nn.Parameter(torch.zeros(3, device=backend.device))
    p.grad = g.clone()
    in_place(at, [p])
    assert torch.equal(p.grad._indices(), indices)
    assert torch.equal(out._values(), p.grad._values())
    assert not torch.equal(out._values(), values)  # each call clips


@torch_backends
def test_p_norm_mixed_dtypes(backend, at):
    # |3| + |-4| + |12| = 19 accumulated in float64 (the widest); each grad keeps its dtype
    torch = backend.module
    params = _params(backend, [[3.0, -4.0]], "float32") + _params(backend, [[12.0]], "float64")
    norm = at.clip_grad_norm_(params, 9.5, norm_type=1)
    assert norm.dtype == torch.float64
    assert float(norm) == 19.0
    assert_array(params[0].grad, [1.5, -2.0], backend=backend, dtype="float32", ulp=1)
    assert_array(params[1].grad, [6.0], backend=backend, dtype="float64", ulp=1)
    with pytest.raises(TypeError, match=r"one dtype.*accumulate_dtype='widest'"):
        at.clip_grad_norm_(params, 1.0, norm_type=1, accumulate_dtype=None)
