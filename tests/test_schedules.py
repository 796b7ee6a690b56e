"""Scheduled thresholds: the optax clippers and ``anyclip.torch.keras_clipping`` with a schedule.

The reference is TF itself at each scheduled value (``tests/data/make_schedules.py``: live in a
subprocess when TensorFlow is installed, and then also checked against the committed file; else
the committed ``tests/data/schedules.npz``), including the value 0, where TF's factor gives zeros
for a non-zero norm and NaN for a zero one. Keras's options follow Keras's rule at each step
(``if clipnorm and clipnorm > 0``: 0 clips nothing). The optax updates run under ``jax.jit``.
"""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from anyclip_conformance.budgets import gpu_budget

from .conftest import run_reference_script

#: One pytest-xdist worker runs this module: TF's script (module-scoped ``tf_ref``) runs once.
pytestmark = pytest.mark.xdist_group("schedules")

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_schedules.py"
ULP = 3
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))
STEPS = len(gen.VALUES)
jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)
torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)


@pytest.fixture(scope="module")
def tf_ref(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """TF's results: live when TensorFlow is installed, else the committed file."""
    committed = dict(np.load(DATA / "schedules.npz"))
    if importlib.util.find_spec("tensorflow") is None:
        return committed
    out = tmp_path_factory.mktemp("schedules") / "live.npz"
    run_reference_script(SCRIPT, out)
    live = dict(np.load(out))
    assert live.keys() == committed.keys()
    for k, v in live.items():  # the committed file is still what TF gives
        if k != "provenance":
            np.testing.assert_array_equal(v, committed[k], err_msg=k)
    return live


def grads(ref: dict[str, np.ndarray], step: int) -> list[np.ndarray]:
    return [ref[f"g/{step}/{i}"] for i in range(len(gen.SHAPES))]


def expected(ref: dict[str, np.ndarray], kind: str, step: int | str) -> list[np.ndarray]:
    return [ref[f"{kind}/{step}/{i}"] for i in range(len(gen.SHAPES))]


def test_reference_clips_at_every_value(tf_ref):
    # every scheduled value is below the norm: each step clips (0 gives zeros, as TF)
    for step, value in enumerate(gen.VALUES):
        assert value < float(tf_ref[f"global_norm/{step}"])
    assert all(not np.any(a) for a in expected(tf_ref, "global", 0))


# ======================================================================= optax
@pytest.fixture
def optax_mod(backend):
    return pytest.importorskip("optax")


def _run_optax(backend, tx, ref, steps=STEPS):
    jax = backend.module
    to = [backend.asarray(g, "float32") for g in grads(ref, 0)]
    state = tx.init(to)
    update = jax.jit(tx.update)  # traced once: the value comes from the count in the state
    outs = []
    for step in range(steps):
        out, state = update([backend.asarray(g, "float32") for g in grads(ref, step)], state)
        outs.append(out)
    return outs, state


@jax_backends
def test_optax_global_norm_schedule_is_tfs_at_each_value(backend, check, optax_mod, tf_ref):
    import anyclip.optax as ao

    tx = ao.clip_by_global_norm(optax_mod.linear_schedule(0.0, 2.0, 4), norm_in_state=True)
    outs, state = _run_optax(backend, tx, tf_ref)
    for step, out in enumerate(outs):
        for o, want in zip(out, expected(tf_ref, "global", step), strict=True):
            check(o, want, "float32", ULP, f"step {step}")
    assert int(state.count) == STEPS
    check(state.global_norm, tf_ref[f"global_norm/{STEPS - 1}"], "float32", ULP)


@jax_backends
def test_optax_global_norm_schedule_at_zero_with_zero_norm_is_nan(
    backend, check, optax_mod, tf_ref
):
    import anyclip.optax as ao

    tx = ao.clip_by_global_norm(lambda count: 0.0 * count)
    zeros = [backend.asarray(np.zeros(s, np.float32), "float32") for s in gen.SHAPES]
    out, _ = tx.update(zeros, tx.init(zeros))
    for o, want in zip(out, expected(tf_ref, "zero", "global"), strict=True):
        check(o, want, "float32", 0)


@jax_backends
def test_optax_clip_by_norm_schedule_is_tfs(backend, check, optax_mod, tf_ref):
    import anyclip.optax as ao

    outs, state = _run_optax(
        backend, ao.clip_by_norm(optax_mod.linear_schedule(0.0, 2.0, 4)), tf_ref
    )
    # XLA:GPU's float32 division is not correctly rounded: a declared GPU difference
    ulp = gpu_budget("xla-gpu-float32", backend.name, 2, "float32")
    for step, out in enumerate(outs):
        for o, want in zip(out, expected(tf_ref, "norm", step), strict=True):
            check(o, want, "float32", ulp, f"step {step}")
    assert int(state.count) == STEPS


@jax_backends
@pytest.mark.parametrize(("option", "kind"), [("global_clipnorm", "global"), ("clipnorm", "norm")])
def test_optax_keras_schedule_follows_keras_rule(backend, check, optax_mod, tf_ref, option, kind):
    import anyclip.optax as ao

    tx = ao.keras_clipping(**{option: optax_mod.linear_schedule(0.0, 2.0, 4)})
    outs, _ = _run_optax(backend, tx, tf_ref)
    for step, out in enumerate(outs):
        # Keras: a value of 0 clips nothing; above it, TF's clipper
        want = grads(tf_ref, step) if step == 0 else expected(tf_ref, kind, step)
        for o, w in zip(out, want, strict=True):
            check(o, w, "float32", ULP, f"step {step}")


@jax_backends
def test_optax_state_without_schedule_is_optaxs(backend, optax_mod):
    import anyclip.optax as ao

    params = [backend.asarray([1.0], "float32")]
    for tx in (ao.clip_by_global_norm(1.0), ao.clip_by_norm(1.0), ao.keras_clipping(clipnorm=1.0)):
        assert tx.init(params) == optax_mod.EmptyState()  # checkpoints of the chain still load
    state = ao.clip_by_global_norm(lambda c: 1.0).init(params)
    assert isinstance(state, ao.ScheduledClipState) and state.global_norm is None


# ======================================================================= torch
def _torch_run(backend, ref, clip, steps=range(STEPS), model=None):
    """SGD(lr=1) from zero weights at each step: the weights become minus the clipped grads."""
    torch = backend.module
    params = model or [
        torch.nn.Parameter(torch.zeros(s, device=backend.device)) for s in gen.SHAPES
    ]
    opt = torch.optim.SGD(params, lr=1.0)
    handle = clip(opt)
    deltas = []
    for step in steps:
        with torch.no_grad():
            for p, g in zip(params, grads(ref, step), strict=True):
                p.zero_()
                p.grad = backend.asarray(g, "float32")
        opt.step()
        deltas.append([-p.detach() for p in params])
    return deltas, opt, handle, params


@torch_backends
@pytest.mark.parametrize(("option", "kind"), [("global_clipnorm", "global"), ("clipnorm", "norm")])
def test_torch_keras_schedule_follows_keras_rule(backend, check, tf_ref, option, kind):
    import anyclip.torch as at

    torch = backend.module

    def schedule(step):  # 0, 0.5, ..., 2.0, on device
        return torch.clamp(step * 0.5, max=2.0)

    deltas, opt, handle, _ = _torch_run(
        backend, tf_ref, lambda o: at.keras_clipping(o, **{option: schedule})
    )
    for step, delta in enumerate(deltas):
        want = grads(tf_ref, step) if step == 0 else expected(tf_ref, kind, step)
        for d, w in zip(delta, want, strict=True):
            check(d, w, "float32", ULP, f"step {step}")
    count = opt.state_dict()["anyclip.keras_clipping.count"]
    assert count.dtype == torch.int64 and int(count) == STEPS
    handle.remove()  # every hook: no clip, no count in the state_dict
    assert "anyclip.keras_clipping.count" not in opt.state_dict()


@torch_backends
def test_torch_schedule_resumes_from_a_checkpoint(backend, check, tf_ref):
    import anyclip.torch as at

    torch = backend.module

    def clip(opt):
        return at.keras_clipping(opt, global_clipnorm=lambda n: torch.clamp(n * 0.5, max=2.0))

    _, opt, _, params = _torch_run(backend, tf_ref, clip, steps=range(3))
    saved = opt.state_dict()
    fresh = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt2 = torch.optim.SGD(fresh, lr=1.0)
    clip(opt2)
    opt2.load_state_dict(saved)
    assert "anyclip.keras_clipping.count" in saved  # the caller's dict is left whole
    for step in range(3, STEPS):
        with torch.no_grad():
            for p, g in zip(fresh, grads(tf_ref, step), strict=True):
                p.zero_()
                p.grad = backend.asarray(g, "float32")
        opt2.step()
        for p, w in zip(fresh, expected(tf_ref, "global", step), strict=True):
            check(-p.detach(), w, "float32", ULP, f"step {step}")


@torch_backends
def test_torch_schedule_refuses_two_options(backend):
    import anyclip.torch as at

    torch = backend.module
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)

    def schedule(n):
        return n * 1.0

    # Keras's message names the options as given (not the number standing in for a schedule)
    shown = f"Received: clipnorm={schedule}, clipvalue=None, global_clipnorm=1.0"
    with pytest.raises(ValueError, match="Only one of") as info:
        at.keras_clipping(opt, clipnorm=schedule, global_clipnorm=1.0)
    assert shown in str(info.value)


@pytest.mark.parametrize("backend", ["torch-cuda"], indirect=True)
def test_torch_schedule_and_groups_make_no_host_sync(backend, tf_ref):
    """Under ``torch.cuda.set_sync_debug_mode("error")`` a host sync raises."""
    import anyclip.torch as at

    torch = backend.module

    def clip(opt):
        return at.keras_clipping(opt, global_clipnorm=lambda n: torch.clamp(n * 0.5, max=2.0))

    _torch_run(backend, tf_ref, clip, steps=range(1))  # warm-up: lazy inits may sync
    params = [torch.nn.Parameter(torch.zeros(s, device=backend.device)) for s in gen.SHAPES]
    opt = torch.optim.SGD(params, lr=1.0)
    clip(opt)
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(torch.ones((), device=backend.device))  # makes the scale (a sync, once)
    for p, g in zip(params, grads(tf_ref, 1), strict=True):
        p.grad = backend.asarray(g, "float32")
    opt.step()  # the count is made here
    with backend.host_syncs_raise():
        opt.step()
        at.clip_grad_norm_(None, {"a": 1.0, "b": None}, groups={"a": params[:2], "b": params[2:]})
        at.clip_grad_norm_(params, 1.0, scaler=scaler, optimizer=opt)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_schedule_and_groups_read_no_tensor_on_the_host(backend, tf_ref, monkeypatch):
    """On CPU, the Python reads of a tensor value (``item``, ``bool``, ``float``...) raise."""
    import anyclip.torch as at

    torch = backend.module
    params = [torch.nn.Parameter(torch.zeros(s)) for s in gen.SHAPES]
    opt = torch.optim.SGD(params, lr=1.0)
    at.keras_clipping(opt, global_clipnorm=lambda n: torch.clamp(n * 0.5, max=2.0))
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.ones(()))  # makes the scale
    for p, g in zip(params, grads(tf_ref, 1), strict=True):
        p.grad = torch.tensor(g)
    opt.step()  # the count is made here

    def refuse(self, *args, **kwargs):
        raise AssertionError("a tensor value was read on the host")

    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    opt.step()
    at.clip_grad_norm_(None, {"a": 1.0, "b": None}, groups={"a": params[:2], "b": params[2:]})
    at.clip_grad_norm_(params, 1.0, scaler=scaler, optimizer=opt)
    monkeypatch.undo()
    monkeypatch.setattr(torch.Tensor, "__bool__", refuse)
    with pytest.raises(AssertionError, match="read on the host"):  # the check can fail
        at.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
