"""Norm-history rules against their references: ZClip, AutoClip, skip on spike / non-finite.

References: ``zclip`` 1.0 (``tests/data/make_zclip.py``) and ``autoclip`` 0.2
(``tests/data/make_autoclip.py``), run live in a subprocess when installed (and then checked
against the committed file) or read from the committed ``.npz``; OLMo-core's
``SkipStepOptimizer`` rule with ``optax.apply_if_finite``'s (``tests/data/make_skip_step.py``,
restated there, run live: it needs torch only); ``optax.apply_if_finite`` itself and torch's
and optax's optimizers live. Each rule runs on the same gradient sequences (spikes, a dip, inf
and NaN) through ``anyclip.torch`` (eager and ``torch.compile(fullgraph=True)``: a graph break
or a host read would fail) and ``anyclip.optax`` (eager and under ``jax.jit``), and a state
saved mid-run gives the same next step.
"""

from __future__ import annotations

import importlib.util
import io
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from anyclip_conformance import Backend

#: One pytest-xdist worker runs this module: the reference scripts (module-scoped ``*_ref``)
#: run once.
pytestmark = pytest.mark.xdist_group("history")

DATA = Path(__file__).with_name("data")
zgen = SimpleNamespace(**runpy.run_path(str(DATA / "make_zclip.py")))
agen = SimpleNamespace(**runpy.run_path(str(DATA / "make_autoclip.py")))
sgen = SimpleNamespace(**runpy.run_path(str(DATA / "make_skip_step.py")))

torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)
compiled_or_not = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])

#: Relative tolerance per dtype: the reference keeps its statistics in Python floats
#: (float64) and anyclip in the norm's dtype; float32 differs by a few ULP per step.
RTOL = {"float32": 2e-5, "float64": 1e-12}


def _reference(script: str, module: str, name: str, tmp: pytest.TempPathFactory) -> dict:
    committed = dict(np.load(DATA / f"{name}.npz"))
    if module and importlib.util.find_spec(module) is None:
        return committed
    out = tmp.mktemp(name) / "live.npz"
    subprocess.run([sys.executable, str(DATA / script), str(out)], check=True, capture_output=True)
    live = dict(np.load(out))
    assert live.keys() == committed.keys()
    for k, v in live.items():  # the committed file is still what the reference gives
        if k != "provenance":
            np.testing.assert_array_equal(v, committed[k], err_msg=k)
    return live


@pytest.fixture(scope="module")
def zclip_ref(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _reference("make_zclip.py", "zclip", "zclip", tmp_path_factory)


@pytest.fixture(scope="module")
def autoclip_ref(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _reference("make_autoclip.py", "autoclip", "autoclip", tmp_path_factory)


@pytest.fixture(scope="module")
def skip_ref(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _reference("make_skip_step.py", "torch", "skip_step", tmp_path_factory)


def _split(row: np.ndarray, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    out, i = [], 0
    for s in shapes:
        n = int(np.prod(s))
        out.append(row[i : i + n].reshape(s))
        i += n
    return out


def _close(ours: np.ndarray, ref: np.ndarray, dtype: str, what: str) -> None:
    assert ours.dtype == np.dtype(dtype), what
    np.testing.assert_allclose(ours, ref, rtol=RTOL[dtype], atol=0, equal_nan=True, err_msg=what)


def _torch_compile(backend: Backend, fn: Any, compiled: bool) -> Any:
    if not compiled:
        return fn
    torch = backend.module
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend="inductor")


# ======================================================================= ZClip
def _zclip_checks(ref: dict, case: str, norms: list, grads: list, means: list, vars_: list):
    seq, dtype, kwargs = zgen.CASES[case]
    raw = ref[f"input-{seq}/grads"].astype(dtype)
    assert np.any(ref[f"{case}/grads"] != raw)  # the case clips: a missing clip would show
    _close(np.asarray(norms), ref[f"{case}/norm"].astype(dtype), dtype, f"{case}: norm")
    _close(np.asarray(grads), ref[f"{case}/grads"].astype(dtype), dtype, f"{case}: grads")
    warm = max(int(kwargs.get("warmup_steps", 25)), 1)
    after = slice(warm - 1, None)  # zclip's mean/var are None before
    for ours, name in ((means, "mean"), (vars_, "var")):
        _close(np.asarray(ours)[after], ref[f"{case}/{name}"][after].astype(dtype), dtype, name)


@torch_backends
@compiled_or_not
@pytest.mark.parametrize("case", list(zgen.CASES))
def test_torch_zclip_matches_zclip(backend, zclip_ref, case, compiled):
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    seq, dtype, kwargs = zgen.CASES[case]
    dt = getattr(torch, dtype)
    params = [
        torch.nn.Parameter(torch.zeros(s, dtype=dt, device=backend.device)) for s in zgen.SHAPES
    ]
    zc = at.ZClip(**kwargs)
    step = _torch_compile(backend, lambda ps: zc.step(ps), compiled)
    out: dict[str, list] = {"norm": [], "grads": [], "mean": [], "var": []}
    for row in zclip_ref[f"input-{seq}/grads"].astype(dtype):
        for p, g in zip(params, _split(row, zgen.SHAPES), strict=True):
            p.grad = torch.tensor(g, device=backend.device)
        norm = step(params)
        assert norm.device == params[0].device and norm.shape == ()
        out["norm"].append(backend.to_numpy(norm))
        out["grads"].append(np.concatenate([backend.to_numpy(p.grad).ravel() for p in params]))
        out["mean"].append(backend.to_numpy(zc.history.mean).copy())
        out["var"].append(backend.to_numpy(zc.history.var).copy())
    _zclip_checks(zclip_ref, case, out["norm"], out["grads"], out["mean"], out["var"])


@jax_backends
@compiled_or_not
@pytest.mark.parametrize("case", list(zgen.CASES))
def test_optax_zclip_matches_zclip(backend, zclip_ref, case, compiled):
    jax = backend.module
    ao = pytest.importorskip("anyclip.optax")
    seq, dtype, kwargs = zgen.CASES[case]
    if not backend.has_dtype(dtype):
        pytest.skip(f"{dtype} needs jax_enable_x64")
    tx = ao.zclip(**kwargs)
    state = tx.init([backend.asarray(np.zeros(s), dtype) for s in zgen.SHAPES])
    update = jax.jit(tx.update) if compiled else tx.update
    norms, grads, means, vars_ = [], [], [], []
    for row in zclip_ref[f"input-{seq}/grads"].astype(dtype):
        g = [backend.asarray(a, dtype) for a in _split(row, zgen.SHAPES)]
        norms.append(np.asarray(_global_norm(g)))  # the norm zclip returns
        u, state = update(g, state)
        grads.append(np.concatenate([np.asarray(a).ravel() for a in u]))
        means.append(np.asarray(state.history.mean))
        vars_.append(np.asarray(state.history.var))
    _zclip_checks(zclip_ref, case, norms, grads, means, vars_)


def _global_norm(leaves: list) -> Any:
    from anyclip import tree

    return tree.global_norm(leaves)


@torch_backends
def test_torch_zclip_formula_tf_and_group(backend, zclip_ref):
    # formula="tf": TF's factor limit * min(1 / norm, 1 / limit) on zclip's limit, in float32
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    p = torch.nn.Parameter(torch.zeros(7, device=backend.device))
    zc = at.ZClip(max_grad_norm=None, warmup_steps=5, formula="tf")
    for row in zclip_ref["input-spikes/grads"].astype("float32")[:45]:
        raw = torch.tensor(row, device=backend.device)
        p.grad = raw.clone()
        norm = zc.step([p])
        limit = zc.threshold
        assert limit is not None
        n, c = backend.to_numpy(norm), backend.to_numpy(limit)
        one = np.float32(1)
        factor = np.float32(c * np.minimum(one / n, one / c)) if np.isfinite(c) else one
        np.testing.assert_allclose(backend.to_numpy(p.grad), row * factor, rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "median"}, "`mode`"),
        ({"clip_option": "max"}, "`clip_option`"),
        ({"formula": "keras"}, "`formula`"),
    ],
)
def test_zclip_refuses_bad_choices(kwargs, match):
    at = pytest.importorskip("anyclip.torch")
    ao = pytest.importorskip("anyclip.optax")
    with pytest.raises(ValueError, match=match):
        at.ZClip(**kwargs)
    with pytest.raises(ValueError, match=match):
        ao.zclip(**kwargs)


# ======================================================================= AutoClip
@torch_backends
@compiled_or_not
@pytest.mark.parametrize("case", list(agen.CASES))
def test_torch_quantile_clip_matches_autoclip(backend, autoclip_ref, case, compiled):
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    seq, kwargs, missing = agen.CASES[case]
    params = [torch.nn.Parameter(torch.zeros(s, device=backend.device)) for s in agen.SHAPES]
    clipper = at.QuantileClip(params, **kwargs)
    step = _torch_compile(backend, lambda: clipper.step(), compiled)
    out = []
    for i, row in enumerate(autoclip_ref[f"{seq}/grads"]):
        for p, g in zip(params, _split(row, agen.SHAPES), strict=True):
            p.grad = torch.tensor(g, device=backend.device)
        if missing and i == agen.MISSING_STEP:
            params[1].grad = None
        step()
        out.append(
            np.concatenate(
                [
                    np.full(p.numel(), np.nan, np.float32)
                    if p.grad is None
                    else backend.to_numpy(p.grad).ravel()
                    for p in params
                ]
            )
        )
    ref = autoclip_ref[f"{case}/grads"]
    assert np.any((ref != autoclip_ref[f"{seq}/grads"]) & ~np.isnan(ref))  # it clips
    _close(np.asarray(out), ref, "float32", case)


@jax_backends
@compiled_or_not
@pytest.mark.parametrize("case", [c for c, v in agen.CASES.items() if not v[2]])
def test_optax_quantile_clip_matches_autoclip(backend, autoclip_ref, case, compiled):
    jax = backend.module
    ao = pytest.importorskip("anyclip.optax")
    seq, kwargs, _ = agen.CASES[case]
    tx = ao.quantile_clip(**kwargs)
    state = tx.init([backend.asarray(np.zeros(s), "float32") for s in agen.SHAPES])
    update = jax.jit(tx.update) if compiled else tx.update
    out = []
    for row in autoclip_ref[f"{seq}/grads"]:
        u, state = update([backend.asarray(a, "float32") for a in _split(row, agen.SHAPES)], state)
        out.append(np.concatenate([np.asarray(a).ravel() for a in u]))
    _close(np.asarray(out), autoclip_ref[f"{case}/grads"], "float32", case)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"quantile": 1.5}, ValueError, "`quantile`"),
        ({"history_length": 0}, ValueError, "`history_length`"),
        ({"history_length": 2.0}, TypeError, "`history_length`"),
        ({"quantile": 1}, TypeError, "`quantile`"),
    ],
)
def test_quantile_clip_refuses_bad_arguments(kwargs, exc, match):
    torch = pytest.importorskip("torch")
    at = pytest.importorskip("anyclip.torch")
    with pytest.raises(exc, match=match):
        at.QuantileClip([torch.nn.Parameter(torch.zeros(1))], **kwargs)


# ======================================================================= skip on spike
def _norms_and_losses(ref: dict, seq: str) -> tuple[np.ndarray, np.ndarray]:
    return ref[f"{seq}/grads"], ref[f"{seq}/loss"]


def _torch_optimizer(torch: Any, name: str, params: list) -> Any:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=0.05)
    return torch.optim.AdamW(params, lr=0.05, weight_decay=0.1)


@torch_backends
@compiled_or_not
@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("case", list(sgen.CASES))
def test_torch_skip_on_spike_matches_reference(backend, skip_ref, case, optimizer, compiled):
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    seq, length, sigma, on_loss, errors = sgen.CASES[case]
    grads, losses = _norms_and_losses(skip_ref, seq)
    dev = backend.device

    def params() -> list:
        return [torch.nn.Parameter(torch.ones(s, device=dev)) for s in sgen.SHAPES]

    ours, theirs = params(), params()
    opt = at.skip_on_spike(
        _torch_optimizer(torch, optimizer, ours),
        length,
        sigma,
        on_loss=on_loss,
        max_consecutive_errors=errors,
    )
    plain = _torch_optimizer(torch, optimizer, theirs)  # the reference: step only when taken
    before = _torch_compile(backend, lambda loss: opt.before_step(loss=loss), compiled)
    after = _torch_compile(backend, lambda saved: opt.after_step(saved), compiled)
    applied = []
    for i, row in enumerate(grads):
        for ps in (ours, theirs):
            for p, g in zip(ps, _split(row, sgen.SHAPES), strict=True):
                p.grad = torch.tensor(g, device=dev)
        loss = torch.tensor(losses[i], device=dev)
        if compiled:  # the two halves compiled, torch's own step between them
            saved = before(loss if on_loss else None)
            opt.optimizer.step()
            after(saved)
        else:
            opt.step(loss=loss if on_loss else None)
        applied.append(int(backend.to_numpy(opt.last_step_applied)))
        if skip_ref[f"{case}/apply"][i]:
            plain.step()
        for p, q in zip(ours, theirs, strict=True):  # bit for bit, every step
            np.testing.assert_array_equal(
                backend.to_numpy(p.detach()), backend.to_numpy(q.detach())
            )
    np.testing.assert_array_equal(applied, skip_ref[f"{case}/apply"])
    assert int(backend.to_numpy(opt.skipped)) == skip_ref[f"{case}/skipped"][-1]
    for p, q in zip(ours, theirs, strict=True):
        for k, v in plain.state[q].items():
            np.testing.assert_array_equal(
                backend.to_numpy(opt.optimizer.state[p][k]), backend.to_numpy(v), err_msg=k
            )


@jax_backends
@compiled_or_not
@pytest.mark.parametrize("case", list(sgen.CASES))
def test_optax_skip_on_spike_matches_reference(backend, skip_ref, case, compiled):
    jax = backend.module
    optax = pytest.importorskip("optax")
    ao = pytest.importorskip("anyclip.optax")
    seq, length, sigma, on_loss, errors = sgen.CASES[case]
    grads, losses = _norms_and_losses(skip_ref, seq)
    params = [backend.asarray(np.ones(s), "float32") for s in sgen.SHAPES]
    ref_params = list(params)
    tx = ao.skip_on_spike(
        optax.adam(0.05), length, sigma, on_loss=on_loss, max_consecutive_errors=errors
    )
    plain = optax.adam(0.05)
    state, ref_state = tx.init(params), plain.init(params)

    def step(p: Any, s: Any, g: Any, loss: Any) -> Any:
        u, s = tx.update(g, s, p, loss=loss) if on_loss else tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    run = jax.jit(step) if compiled else step
    skipped = []
    for i, row in enumerate(grads):
        g = [backend.asarray(a, "float32") for a in _split(row, sgen.SHAPES)]
        params, state = run(params, state, g, backend.asarray(losses[i], "float32"))
        skipped.append(int(state.skipped))
        if skip_ref[f"{case}/apply"][i]:
            u, ref_state = plain.update(g, ref_state, ref_params)
            ref_params = optax.apply_updates(ref_params, u)
        for a, b in zip(params, ref_params, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, equal_nan=True)
    np.testing.assert_array_equal(skipped, skip_ref[f"{case}/skipped"])


@jax_backends
@pytest.mark.parametrize("max_consecutive_errors", [0, 1, 1000])
def test_optax_skip_on_spike_is_apply_if_finite_on_nonfinite(
    backend, skip_ref, max_consecutive_errors
):
    # with an unreachable sigma, only the non-finite rule is left: optax.apply_if_finite's
    jax = backend.module
    optax = pytest.importorskip("optax")
    ao = pytest.importorskip("anyclip.optax")
    grads = skip_ref["nonfinite/grads"]
    params = [backend.asarray(np.ones(s), "float32") for s in sgen.SHAPES]
    ours = ao.skip_on_spike(optax.sgd(0.1), 32, 1e30, max_consecutive_errors=max_consecutive_errors)
    theirs = optax.apply_if_finite(optax.sgd(0.1), max_consecutive_errors)
    s1, s2 = ours.init(params), theirs.init(params)
    for row in grads:
        g = [backend.asarray(a, "float32") for a in _split(row, sgen.SHAPES)]
        u1, s1 = jax.jit(ours.update)(g, s1)
        u2, s2 = jax.jit(theirs.update)(g, s2)
        for a, b in zip(u1, u2, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        for f in ("notfinite_count", "last_finite", "total_notfinite"):
            assert np.asarray(getattr(s1, f)) == np.asarray(getattr(s2, f)), f


# ======================================================================= checkpoints
def _torch_save_load(torch: Any, state: Any) -> Any:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf)


@torch_backends
def test_torch_checkpoint_round_trip_gives_the_same_next_step(backend, zclip_ref, skip_ref):
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    dev = backend.device
    rows = zclip_ref["input-spikes/grads"].astype("float32")

    def run(obj: Any, ps: list, row: np.ndarray) -> np.ndarray:
        for p, g in zip(ps, _split(row, zgen.SHAPES), strict=True):
            p.grad = torch.tensor(g, device=dev)
        if isinstance(obj, at.SkipOnSpike):
            obj.step()
            return np.concatenate([backend.to_numpy(p.detach()).ravel() for p in ps])
        obj.step(ps) if isinstance(obj, at.ZClip) else obj.step()
        return np.concatenate([backend.to_numpy(p.grad).ravel() for p in ps])

    def make(kind: str, ps: list) -> Any:
        if kind == "zclip":
            return at.ZClip(max_grad_norm=None, warmup_steps=10)
        if kind == "quantile":
            return at.QuantileClip(ps, quantile=0.7, history_length=8)
        return at.skip_on_spike(torch.optim.Adam(ps, lr=0.05), 16, 2.0)

    for kind in ("zclip", "quantile", "skip"):
        ps = [torch.nn.Parameter(torch.ones(s, device=dev)) for s in zgen.SHAPES]
        obj = make(kind, ps)
        for row in rows[:41]:
            run(obj, ps, row)
        ps2 = [torch.nn.Parameter(p.detach().clone()) for p in ps]
        obj2 = make(kind, ps2)
        obj2.load_state_dict(_torch_save_load(torch, obj.state_dict()))
        for row in rows[41:44]:  # a spike comes next: the statistics decide it
            np.testing.assert_array_equal(run(obj, ps, row), run(obj2, ps2, row), err_msg=kind)


@jax_backends
def test_optax_checkpoint_round_trip_gives_the_same_next_step(backend, zclip_ref):
    jax = backend.module
    optax = pytest.importorskip("optax")
    ao = pytest.importorskip("anyclip.optax")
    rows = zclip_ref["input-spikes/grads"].astype("float32")
    for tx in (
        ao.zclip(max_grad_norm=None, warmup_steps=10),
        ao.quantile_clip(0.7, 8),
        ao.skip_on_spike(optax.adam(0.05), 16, 2.0),
    ):
        params = [backend.asarray(np.ones(s), "float32") for s in zgen.SHAPES]
        state = tx.init(params)
        update = jax.jit(tx.update)
        for row in rows[:41]:
            _, state = update(
                [backend.asarray(a, "float32") for a in _split(row, zgen.SHAPES)], state, params
            )
        saved = jax.tree.map(np.asarray, state)  # to the host and back, as a checkpoint
        restored = jax.tree.map(jax.numpy.asarray, saved)
        assert jax.tree.structure(restored) == jax.tree.structure(state)
        s1, s2 = state, restored
        for row in rows[41:44]:
            g = [backend.asarray(a, "float32") for a in _split(row, zgen.SHAPES)]
            u1, s1 = update(g, s1, params)
            u2, s2 = update(g, s2, params)
            for a, b in zip(u1, u2, strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ======================================================================= the core, every backend
def _fresh(backend: Backend, h: Any) -> Any:
    """``h`` as new arrays (a lazy Dask graph would otherwise grow with every step)."""
    from anyclip._history import History

    return History(
        *(backend.asarray(backend.to_numpy(t), str(backend.to_numpy(t).dtype)) for t in h)
    )


def test_core_zclip_and_spike_rules_on_every_backend(backend, zclip_ref, skip_ref):
    # The one core function per rule, fed the references' own norms, on each array library
    # (NumPy, array-api-strict, Dask, torch, JAX): zclip's EMA and OLMo-core's decisions.
    from anyclip import _history

    xp = backend.xp
    kwargs = dict(
        alpha=0.97,
        z_thresh=2.5,
        max_grad_norm=None,
        eps=1e-6,
        warmup_steps=25,
        mode="zscore",
        clip_option="adaptive_scaling",
        clip_factor=1.0,
        skip_update_on_spike=False,
    )
    h = _history.init_history(xp, 25, xp.float32, backend.device)
    means = []
    for n in zclip_ref["no-cap/norm"]:
        h = _fresh(
            backend, _history.zclip_step(xp, h, backend.asarray(n, "float32"), **kwargs).history
        )
        means.append(backend.to_numpy(h.mean))
    _close(
        np.asarray(means)[24:], zclip_ref["no-cap/mean"][24:].astype("float32"), "float32", "mean"
    )

    seq, length, sigma, _, errors = sgen.CASES["nonfinite-give-up"]
    g = skip_ref[f"{seq}/grads"].astype(np.float64)
    norms = np.sqrt(np.sum(g * g, axis=1)).astype(np.float32)
    hist = _history.init_history(xp, length, xp.float32, backend.device)
    zero = backend.asarray(0, "int32")
    counters = (zero, zero, zero)
    applied = []
    for n in norms:
        d = _history.spike_step(
            xp,
            hist,
            backend.asarray(n, "float32"),
            *counters,
            sigma_factor=sigma,
            max_consecutive_errors=errors,
        )
        hist = _fresh(backend, d.norms)
        counters = tuple(
            backend.asarray(backend.to_numpy(c), "int32")
            for c in (d.notfinite_count, d.total_notfinite, d.skipped)
        )
        applied.append(int(backend.to_numpy(d.apply)))
    np.testing.assert_array_equal(applied, skip_ref["nonfinite-give-up/apply"])
    assert int(backend.to_numpy(counters[2])) == skip_ref["nonfinite-give-up/skipped"][-1]
