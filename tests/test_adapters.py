"""The framework adapters: ``anyclip.torch`` (in place on ``.grad``) and ``anyclip.optax``.

Expected values come from docs/tf-reference.md §4.2-§4.3, from NumPy float64 formulas, or from the
frameworks' own functions (``torch.nn.utils.clip_grad_norm_``, ``optax.clip_by_global_norm``)
where TF and they agree. The adapters must also give exactly what the functional API gives on
the same arrays: that is what makes them drop-ins with TF's numbers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import anyclip
from anyclip import tree
from anyclip_conformance import Backend, assert_array, assert_same_bits

from .conftest import jax_divides_exactly

ULP = 3


def global_norm64(arrays) -> float:
    return float(np.sqrt(sum(np.sum(np.asarray(a, dtype=np.float64) ** 2) for a in arrays)))


# ======================================================================= torch
torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)


@pytest.fixture
def at(backend):
    return pytest.importorskip("anyclip.torch")


def _params(backend: Backend, grads: list, dtypes: list[str] | None = None) -> list:
    """Parameters whose ``.grad`` are ``grads`` (NumPy data; ``None`` for no gradient)."""
    torch = backend.module
    dtypes = dtypes or ["float32"] * len(grads)
    out = []
    for g, dt in zip(grads, dtypes, strict=True):
        shape = () if g is None else np.shape(g)
        p = torch.nn.Parameter(torch.zeros(shape, dtype=backend.dtype(dt), device=backend.device))
        p.grad = None if g is None else backend.asarray(g, dt)
        out.append(p)
    return out


@torch_backends
def test_clip_grad_norm_in_place(backend, at):
    params = _params(backend, [[3.0, 4.0], [[12.0]]])
    before = [p.grad for p in params]
    norm = at.clip_grad_norm_(params, 6.5)
    # the same tensor objects, modified in place (§4.2 values)
    assert all(p.grad is g for p, g in zip(params, before, strict=True))
    assert_array(params[0].grad, [1.5, 2.0], backend=backend, dtype="float32", ulp=ULP)
    assert_array(params[1].grad, [[6.0]], backend=backend, dtype="float32", ulp=ULP)
    # the pre-clip global norm, as a 0-d tensor (no Python float, no .item())
    assert isinstance(norm, backend.module.Tensor)
    assert_array(norm, np.float32(13), backend=backend, dtype="float32", ulp=ULP)


@torch_backends
def test_clip_grad_norm_skips_missing_grads(backend, at):
    params = _params(backend, [[3.0, 4.0], None, [[12.0]]])
    norm = at.clip_grad_norm_(params, 6.5)
    assert params[1].grad is None
    assert_array(params[2].grad, [[6.0]], backend=backend, dtype="float32", ulp=ULP)
    assert_array(norm, np.float32(13), backend=backend, dtype="float32", ulp=ULP)


@torch_backends
def test_clip_grad_norm_no_grads(backend, at):
    # torch returns 0.0 for no gradients (§4.3 "empty"); so does TF's global norm of [] (§3.2)
    norm = at.clip_grad_norm_(_params(backend, [None, None]), 1.0)
    assert float(norm) == 0.0
    assert tuple(norm.shape) == ()
    assert float(at.clip_grad_norm_([], 1.0)) == 0.0


@torch_backends
def test_clip_grad_norm_single_tensor_and_generator(backend, at):
    (p,) = _params(backend, [[3.0, 4.0]])
    at.clip_grad_norm_(p, 1.0)  # a lone parameter, as torch accepts
    assert_array(p.grad, [0.6, 0.8], backend=backend, dtype="float32", ulp=ULP)
    params = _params(backend, [[3.0, 4.0], [[12.0]]])
    at.clip_grad_norm_(iter(params), 6.5)  # a generator, as model.parameters()
    assert_array(params[0].grad, [1.5, 2.0], backend=backend, dtype="float32", ulp=ULP)


@torch_backends
@pytest.mark.parametrize("accumulate_dtype", [None, "widest"])
@pytest.mark.parametrize("clip", [0.3, 41.0, 1e4])
def test_clip_grad_norm_equals_functional(backend, at, accumulate_dtype, clip):
    rng = np.random.default_rng(7)
    grads = [rng.standard_normal(s) for s in [(4, 3), (3,), (2, 2, 2)]]
    params = _params(backend, grads)
    tensors = [p.grad.clone() for p in params]
    norm = at.clip_grad_norm_(params, clip, accumulate_dtype=accumulate_dtype)
    ref, ref_norm = anyclip.clip_by_global_norm(tensors, clip, accumulate_dtype=accumulate_dtype)
    assert_same_bits(backend, norm, ref_norm, "norm")
    for p, r in zip(params, ref, strict=True):
        assert_same_bits(backend, p.grad, r)


@torch_backends
def test_clip_grad_norm_mixed_dtypes_grouped(backend, at):
    grads = [[3.0, 4.0], [[12.0]], [0.0, 0.0, 0.0]]
    params = _params(backend, grads, ["float64", "bfloat16", "float32"])
    norm = at.clip_grad_norm_(params, 6.5)
    # the norm is accumulated in the widest dtype; every grad keeps its own
    assert_array(norm, 13.0, backend=backend, dtype="float64", ulp=ULP)
    assert_array(params[0].grad, [1.5, 2.0], backend=backend, dtype="float64", ulp=ULP)
    assert_array(params[1].grad, [[6.0]], backend=backend, dtype="bfloat16", ulp=1)
    assert_array(params[2].grad, [0.0, 0.0, 0.0], backend=backend, dtype="float32")
    with pytest.raises(TypeError, match="one dtype"):
        at.clip_grad_norm_(params, 6.5, accumulate_dtype=None)


@torch_backends
def test_clip_grad_norm_float16_accumulates_wider(backend, at):
    # float16 grads with float32 ones: the norm is float32 and does not overflow (§3.2)
    params = _params(backend, [[300.0, 0.0], [0.0]], ["float16", "float32"])
    norm = at.clip_grad_norm_(params, 150.0)
    assert_array(norm, 300.0, backend=backend, dtype="float32")
    assert_array(params[0].grad, [150.0, 0.0], backend=backend, dtype="float16")


@torch_backends
@pytest.mark.parametrize(("norm_type", "error"), [("two", ValueError), (None, TypeError)])
def test_clip_grad_norm_norm_type(backend, at, norm_type, error):
    # every order torch accepts is accepted (NaN too: tests/test_adapter_fidelity.py); what
    # is no number is not, with the class torch's float(norm_type) raises
    params = _params(backend, [[3.0, 4.0]])
    with pytest.raises(error, match="norm_type"):
        at.clip_grad_norm_(params, 1.0, norm_type=norm_type)
    assert_array(params[0].grad, [3.0, 4.0], backend=backend, dtype="float32")  # untouched


@torch_backends
def test_clip_grad_norm_accepts_torch_arguments(backend, at):
    params = _params(backend, [[3.0, 4.0]])
    at.clip_grad_norm_(params, 1.0, norm_type=2.0, error_if_nonfinite=False, foreach=True)
    assert_array(params[0].grad, [0.6, 0.8], backend=backend, dtype="float32", ulp=ULP)


@torch_backends
def test_clip_grad_norm_error_if_nonfinite(backend, at):
    params = _params(backend, [[math.inf, 1.0]])
    with pytest.raises(FloatingPointError, match="not finite"):
        at.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    with pytest.raises(FloatingPointError, match="not finite"):
        at.clip_grad_norm_(params, 1.0, nonfinite="raise")
    with pytest.raises(ValueError, match="nonfinite"):
        at.clip_grad_norm_(params, 1.0, nonfinite="bogus")


@torch_backends
@pytest.mark.parametrize("grads", [[[math.inf, 1.0], [[12.0]]], [[math.nan, 1.0], [[12.0]]]])
def test_clip_grad_norm_nonfinite_policies(backend, at, grads):
    torch = backend.module
    # "tf" (default): every gradient NaN (§4.2)
    params = _params(backend, grads)
    at.clip_grad_norm_(params, 1.0)
    assert all(bool(torch.isnan(p.grad).all()) for p in params)
    # "torch": exactly torch's own clip_grad_norm_
    ours, theirs = _params(backend, grads), _params(backend, grads)
    n_ours = at.clip_grad_norm_(ours, 1.0, nonfinite="torch")
    n_theirs = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    for o, t in zip(ours, theirs, strict=True):
        assert_array(o.grad, backend.to_numpy(t.grad), backend=backend, dtype="float32")
    assert_array(n_ours, backend.to_numpy(n_theirs), backend=backend, dtype="float32")
    # "skip": untouched
    params = _params(backend, grads)
    at.clip_grad_norm_(params, 1.0, nonfinite="skip")
    for p, g in zip(params, grads, strict=True):
        assert_array(p.grad, g, backend=backend, dtype="float32")


@torch_backends
def test_clip_grad_norm_agrees_with_torch_when_not_clipping(backend, at):
    # below the threshold torch's factor is exactly 1; TF's is c * (1/c) (§4.2, §12 trap 6)
    torch = backend.module
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal((3, 3)), rng.standard_normal(3)]
    ours, theirs = _params(backend, grads), _params(backend, grads)
    n_ours = at.clip_grad_norm_(ours, 100.0)
    n_theirs = torch.nn.utils.clip_grad_norm_(theirs, 100.0)
    assert_array(n_ours, backend.to_numpy(n_theirs), backend=backend, dtype="float32", ulp=ULP)
    for o, t in zip(ours, theirs, strict=True):
        assert_array(o.grad, backend.to_numpy(t.grad), backend=backend, dtype="float32", ulp=1)


@torch_backends
def test_clip_grad_norm_differs_from_torch_at_the_tie(backend, at):
    # §4.3: at norm == clip TF leaves [3, 4], [[12]] unchanged; torch's +1e-6 scales them
    torch = backend.module
    grads = [[3.0, 4.0], [[12.0]]]
    ours, theirs = _params(backend, grads), _params(backend, grads)
    at.clip_grad_norm_(ours, 13.0)
    torch.nn.utils.clip_grad_norm_(theirs, 13.0)
    assert_array(ours[0].grad, [3.0, 4.0], backend=backend, dtype="float32")
    assert_array(ours[1].grad, [[12.0]], backend=backend, dtype="float32")
    expected = np.array([2.9999998, 3.9999998], dtype=np.float32)
    assert_array(theirs[0].grad, expected, backend=backend, dtype="float32")
    assert_array(theirs[1].grad, np.float32([[11.999999]]), backend=backend, dtype="float32", ulp=1)


def _train(backend: Backend, clip_step, steps: int = 5) -> tuple[list, list]:
    """A few SGD steps of a tiny linear model; ``clip_step(model)`` clips the grads."""
    torch = backend.module
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to(backend.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(16, 4, generator=gen).to(backend.device)
    y = torch.randn(16, 2, generator=gen).to(backend.device) * 10
    norms = []
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        norms.append(clip_step(model))
        opt.step()
    return [p.detach().clone() for p in model.parameters()], norms


@torch_backends
def test_drop_in_training_loop(backend, at):
    def with_adapter(model):
        return at.clip_grad_norm_(model.parameters(), 0.5)

    def functional(model):
        params = [p for p in model.parameters() if p.grad is not None]
        clipped, norm = anyclip.clip_by_global_norm([p.grad for p in params], 0.5)
        for p, g in zip(params, clipped, strict=True):
            p.grad = g
        return norm

    params_a, norms_a = _train(backend, with_adapter)
    params_b, norms_b = _train(backend, functional)
    assert all(float(n) > 0.5 for n in norms_a)  # every step clips
    for a, b in zip(params_a, params_b, strict=True):
        assert_same_bits(backend, a, b)
    for a, b in zip(norms_a, norms_b, strict=True):
        assert_same_bits(backend, a, b)


@torch_backends
def test_drop_in_for_torch_clip_grad_norm(backend, at):
    # replacing torch's function in the same loop gives the same training within float32
    # rounding: torch's factor c/(n + 1e-6) and TF's c * (1/n) differ by ~1e-6 relative
    torch = backend.module
    _, norms_torch = _train(backend, lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5))
    _, norms_ours = _train(backend, lambda m: at.clip_grad_norm_(m.parameters(), 0.5))
    np.testing.assert_allclose(
        [float(n) for n in norms_ours], [float(n) for n in norms_torch], rtol=1e-5
    )


@torch_backends
def test_clip_grad_by_value_equals_functional(backend, at):
    rng = np.random.default_rng(2)
    grads = [rng.standard_normal((3, 4)) * 2, rng.standard_normal(5) * 2, None]
    params = _params(backend, grads)
    before = [p.grad for p in params]
    tensors = [None if p.grad is None else p.grad.clone() for p in params]
    assert at.clip_grad_by_value_(params, -0.5, 1.0) is None
    assert all(p.grad is g for p, g in zip(params, before, strict=True))  # in place
    assert params[2].grad is None
    for p, t in zip(params[:2], tensors[:2], strict=True):
        assert_same_bits(backend, p.grad, anyclip.clip_by_value(t, -0.5, 1.0))
        expected = np.minimum(np.maximum(backend.to_numpy(t), -0.5), 1.0)
        assert_array(p.grad, expected, backend=backend, dtype="float32")


@torch_backends
def test_clip_grad_by_value_min_gt_max(backend, at):
    # §1.5: TF returns min when min > max (torch.clamp would give max)
    params = _params(backend, [[0.0, 5.0, 10.0]])
    at.clip_grad_by_value_(params, 6.0, 4.0)
    assert_array(params[0].grad, [6.0, 6.0, 6.0], backend=backend, dtype="float32")


@torch_backends
@pytest.mark.parametrize("axes", [None, 0, [1]])
def test_clip_grad_by_norm_equals_functional(backend, at, axes):
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal((3, 4)) * 3, rng.standard_normal((2, 5)), None]
    params = _params(backend, grads)
    before = [p.grad for p in params]
    tensors = [None if p.grad is None else p.grad.clone() for p in params]
    assert at.clip_grad_by_norm_(params, 1.0, axes) is None
    assert all(p.grad is g for p, g in zip(params, before, strict=True))
    assert params[2].grad is None
    for p, t in zip(params[:2], tensors[:2], strict=True):
        assert_same_bits(backend, p.grad, anyclip.clip_by_norm(t, 1.0, axes))
        h = np.asarray(backend.to_numpy(t), dtype=np.float64)
        ax = None if axes is None else tuple(np.atleast_1d(axes))
        n = np.sqrt(np.sum(h * h, axis=ax, keepdims=True))
        assert_array(p.grad, h / np.maximum(n, 1.0), backend=backend, dtype="float32", ulp=3)


@torch_backends
def test_clip_grad_by_norm_accumulate_dtype(backend, at):
    params = _params(backend, [[300.0, 0.0]], ["float16"])
    at.clip_grad_by_norm_(params, 1.0)
    assert_array(params[0].grad, [0.0, 0.0], backend=backend, dtype="float16")  # TF (§2.3)
    params = _params(backend, [[300.0, 0.0]], ["float16"])
    at.clip_grad_by_norm_(params, 1.0, accumulate_dtype="float32")
    assert_array(params[0].grad, [1.0, 0.0], backend=backend, dtype="float16")


# ======================================================================= optax
jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)


@pytest.fixture
def ao(backend):
    pytest.importorskip("optax")
    return pytest.importorskip("anyclip.optax")


def _update(tx, updates):
    """One ``update`` of ``tx`` from its initial state."""
    return tx.update(updates, tx.init(updates))


@pytest.fixture
def grads(make):
    return {"a": make([3.0, 4.0]), "b": [make([[12.0]]), None]}


@jax_backends
def test_optax_init_and_update(backend, ao, grads, check):
    tx = ao.clip_by_global_norm(6.5, norm_in_state=True)
    state = tx.init(grads)
    assert isinstance(state, ao.ClipByGlobalNormState)
    check(state.global_norm, np.float32(0), "float32")
    updates, state = tx.update(grads, state)
    check(updates["a"], [1.5, 2.0], "float32", ULP)  # §4.2
    check(updates["b"][0], [[6.0]], "float32", ULP)
    assert updates["b"][1] is None
    check(state.global_norm, np.float32(13), "float32", ULP)  # the pre-clip norm, for logging


@jax_backends
def test_optax_state_dtype_follows_accumulation(backend, ao, make, check):
    params = {"h": make([300.0, 0.0], "bfloat16"), "f": make([0.0], "float32")}
    tx = ao.clip_by_global_norm(150.0, norm_in_state=True)
    state = tx.init(params)
    check(state.global_norm, np.float32(0), "float32")
    updates, state = tx.update(params, state)
    check(updates["h"], [150.0, 0.0], "bfloat16")
    check(state.global_norm, np.float32(300), "float32")


@jax_backends
@pytest.mark.parametrize("clip", [0.3, 6.5, 13.0, 41.0, 1e3])
def test_optax_equals_tree(backend, ao, clip):
    jax = backend.module
    rng = np.random.default_rng(5)
    updates = {
        "w": backend.asarray(rng.standard_normal((4, 3)), "float32"),
        "b": backend.asarray(rng.standard_normal(3), "float32"),
    }
    tx = ao.clip_by_global_norm(clip, norm_in_state=True)
    out, state = jax.jit(tx.update)(updates, tx.init(updates))
    ref, ref_norm = tree.clip_by_global_norm(updates, clip)
    for k in updates:
        assert_same_bits(backend, out[k], ref[k], k)
    assert_same_bits(backend, state.global_norm, ref_norm, "norm")


@jax_backends
def test_optax_chain_under_jit(backend, ao, check):
    jax = backend.module
    optax = pytest.importorskip("optax")
    params = {"w": backend.asarray([[1.0, -2.0], [0.5, 3.0]], "float32"), "b": None}
    x = backend.asarray([[1.0, 2.0], [3.0, 4.0], [-1.0, 0.5]], "float32")
    tx = optax.chain(
        ao.clip_by_value(-5.0, 5.0), ao.clip_by_global_norm(1.0, norm_in_state=True), optax.sgd(0.1)
    )
    state = tx.init(params)

    def loss(p):
        return (x @ p["w"]).sum() ** 2

    @jax.jit
    def step(p, s):
        g = jax.grad(loss)(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s, g

    w64 = np.array([[1.0, -2.0], [0.5, 3.0]])
    x64 = np.array([[1.0, 2.0], [3.0, 4.0], [-1.0, 0.5]])
    for _ in range(3):
        params, state, g = step(params, state)
        # the state of the global-norm clipper holds the norm of the value-clipped grads
        g64 = np.clip(np.asarray(g["w"], dtype=np.float64), -5, 5)
        check(state[1].global_norm, np.float32(np.sqrt(np.sum(g64 * g64))), "float32", ULP)
        # the independent float64 version of the same step
        full = 2 * (x64 @ w64).sum() * x64.sum(axis=0)[:, None] * np.ones((2, 2))
        full = np.clip(full, -5, 5)
        w64 = w64 - 0.1 * full * min(1.0, 1.0 / np.sqrt(np.sum(full * full)))
        check(params["w"], w64, "float32", 16)
        assert params["b"] is None


@jax_backends
def test_optax_agrees_with_optax_well_above_clip(backend, ao):
    optax = pytest.importorskip("optax")
    rng = np.random.default_rng(6)
    updates = [backend.asarray(rng.standard_normal(s) * 10, "float32") for s in [(5, 4), (7,)]]
    ours, s_ours = _update(ao.clip_by_global_norm(1.0, norm_in_state=True), updates)
    theirs, _ = optax.clip_by_global_norm(1.0).update(updates, optax.EmptyState())
    for o, t in zip(ours, theirs, strict=True):
        assert_array(o, np.asarray(t), backend=backend, dtype="float32", ulp=4)
    host = [np.asarray(u, dtype=np.float64) for u in updates]
    assert float(s_ours.global_norm) == pytest.approx(global_norm64(host), rel=1e-6)


@jax_backends
def test_optax_differs_from_optax(backend, ao, make, check):
    optax = pytest.importorskip("optax")
    a, b = make([3.0, 4.0]), make([[12.0]])
    # §4.3 at 6.5: TF [1.5, 2], optax [1.5000001, 2]
    # (optax's values where JAX's float32 3 / 13 is one ulp off; where it is exact, as in
    # JAX 0.5.3, optax's rounding gives TF's values in both cases: jax_divides_exactly)
    exact = jax_divides_exactly()
    ours, _ = _update(ao.clip_by_global_norm(6.5), [a, b])
    theirs, _ = optax.clip_by_global_norm(6.5).update([a, b], optax.EmptyState())
    check(ours[0], [1.5, 2.0], "float32")
    check(theirs[0], [1.5, 2.0] if exact else [1.5000001, 2.0], "float32")
    # §4.3 at the tie 13: TF leaves the updates unchanged, optax scales [3.0000002, 4]
    ours, _ = _update(ao.clip_by_global_norm(13.0), [a, b])
    theirs, _ = optax.clip_by_global_norm(13.0).update([a, b], optax.EmptyState())
    check(ours[0], [3.0, 4.0], "float32")
    check(ours[1], [[12.0]], "float32")
    check(theirs[0], [3.0, 4.0] if exact else [3.0000002, 4.0], "float32")
    # §4.3 inf entry: TF all NaN; optax [nan, 0], [[0]] (which is nonfinite="torch")
    c = make([math.inf, 4.0])
    ours, _ = _update(ao.clip_by_global_norm(1.0), [c, b])
    check(ours[0], [math.nan, math.nan], "float32")
    tx = ao.clip_by_global_norm(1.0, nonfinite="torch")
    ours, _ = _update(tx, [c, b])
    check(ours[0], [math.nan, 0.0], "float32")
    check(ours[1], [[0.0]], "float32")


@jax_backends
def test_optax_nonfinite_skip_under_jit(backend, ao, make, check):
    jax = backend.module
    tx = ao.clip_by_global_norm(1.0, nonfinite="skip", norm_in_state=True)
    g = [make([math.inf, 4.0]), make([[2.0]])]
    out, state = jax.jit(tx.update)(g, tx.init(g))
    check(out[0], [math.inf, 4.0], "float32")
    check(out[1], [[2.0]], "float32")
    check(state.global_norm, np.float32(math.inf), "float32")


@jax_backends
def test_optax_invalid_policy(backend, ao, grads):
    # refused when the transformation is built, not at its first update
    with pytest.raises(ValueError, match="nonfinite"):
        ao.clip_by_global_norm(1.0, nonfinite="bogus")


@jax_backends
@pytest.mark.parametrize("axes", [None, 1])
def test_optax_clip_by_norm(backend, ao, make, check, axes):
    jax = backend.module
    tx = ao.clip_by_norm(1.0, axes)
    u = {"m": make([[3.0, 4.0], [0.3, 0.4]]), "n": None}
    state = tx.init(u)
    out, state2 = jax.jit(tx.update)(u, state)
    assert state2 == state  # stateless
    h = np.array([[3.0, 4.0], [0.3, 0.4]])
    n = np.sqrt(np.sum(h * h, axis=axes, keepdims=True))
    check(out["m"], h / np.maximum(n, 1.0), "float32", 2)
    assert out["n"] is None
    assert_same_bits(backend, out["m"], anyclip.clip_by_norm(u["m"], 1.0, axes))


@jax_backends
def test_optax_clip_by_value(backend, ao, make, check):
    jax = backend.module
    tx = ao.clip_by_value(6.0, 4.0)  # min > max: TF gives min (§1.5); optax.clip gives max
    u = [make([0.0, 5.0, 10.0])]
    out, _ = jax.jit(tx.update)(u, tx.init(u))
    check(out[0], [6.0, 6.0, 6.0], "float32")
