"""Keras's ``LossScaleOptimizer`` order (unscale, skip non-finite, clip) ported to torch and optax.

The reference is Keras 3 itself under the ``mixed_float16`` policy:
``tests/data/make_loss_scale.py`` trains a small network with ``LossScaleOptimizer(SGD(
global_clipnorm=...))``, whose first step overflows in float16 and is skipped, and records the
weights and the loss scale after every step (``tests/data/loss_scale.npz``; ``--live-tf``
reruns it and checks the file). The ports compute in float16 as Keras does and must give the
same loss scales (the same steps skipped) and the same weights; clipping the *scaled*
gradients, the mistake the porting guide warns about, must not.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from .conftest import assert_live_reference

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_loss_scale.py"
REF = dict(np.load(DATA / "loss_scale.npz"))
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))

#: Largest difference from Keras's weights: the forward pass is float16 (its matmuls accumulate
#: differently in TF, torch and XLA), so the gradients agree to about 1e-3 relative. Measured
#: over the eight steps: torch 2.4e-5, JAX 4.6e-5; the wrong order is 0.15 away.
ATOL = 1e-4

#: Smallest difference the wrong order (clipping before unscaling) makes.
WRONG = 1e-2

NAMES = ("w0", "b0", "w1", "b1")


def _check(weights: list[np.ndarray], scales: list[float], k: int) -> None:
    assert scales[k] == float(REF[f"scale{k}"]), f"step {k}: loss scale"
    for i, w in enumerate(weights):
        assert w.dtype == np.float32
        np.testing.assert_allclose(w, REF[f"step{k}/{i}"], rtol=0, atol=ATOL, err_msg=f"{k}/{i}")


def _far(weights: list[np.ndarray]) -> bool:
    last = gen.STEPS - 1
    return (
        max(float(np.max(np.abs(w - REF[f"step{last}/{i}"]))) for i, w in enumerate(weights))
        > WRONG
    )


torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)


def _torch_train(backend: Any, right_order: bool) -> tuple[list[list[np.ndarray]], list[float]]:
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    data, dev = gen.inputs(), backend.device
    params = [torch.nn.Parameter(torch.tensor(data[n], device=dev)) for n in NAMES]
    x, y = torch.tensor(data["x"], device=dev), torch.tensor(data["y"], device=dev)
    opt = torch.optim.SGD(params, lr=gen.LR)
    scaler = torch.amp.GradScaler(
        dev.type, init_scale=gen.INITIAL_SCALE, growth_interval=gen.GROWTH
    )
    if right_order:  # the port: Keras's clipping as a step pre-hook, after scaler.unscale_
        handle = at.keras_clipping(opt, global_clipnorm=gen.CLIP)
    weights, scales = [], []
    for _ in range(gen.STEPS):
        opt.zero_grad()
        w0, b0, w1, b1 = (p.half() for p in params)  # mixed_float16: float16 compute
        pred = torch.tanh(x.half() @ w0 + b0) @ w1 + b1
        loss = torch.mean(torch.square(pred.float() - y))
        scaler.scale(loss).backward()
        if not right_order:  # the mistake: clip the scaled gradients
            at.clip_grad_norm_(params, gen.CLIP)
        scaler.step(opt)  # unscale_, skip a non-finite step, else opt.step() (clip, update)
        scaler.update()
        weights.append([backend.to_numpy(p.detach().clone()) for p in params])
        scales.append(float(scaler.get_scale()))
    if right_order:
        handle.remove()
    return weights, scales


@torch_backends
def test_torch_grad_scaler_with_keras_clipping_gives_keras_weights(backend):
    weights, scales = _torch_train(backend, right_order=True)
    for k in range(gen.STEPS):
        _check(weights[k], scales, k)
    assert float(REF["scale0"]) == gen.INITIAL_SCALE / 2  # the first step was skipped


@torch_backends
def test_torch_clipping_scaled_gradients_is_wrong(backend):
    weights, _ = _torch_train(backend, right_order=False)
    assert _far(weights[-1])


jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)


def _jax_train(backend: Any, right_order: bool) -> tuple[list[list[np.ndarray]], list[float]]:
    jax = backend.module
    jnp = jax.numpy
    optax = pytest.importorskip("optax")
    ao = pytest.importorskip("anyclip.optax")
    data = gen.inputs()
    params = {n: jnp.asarray(data[n]) for n in NAMES}
    x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"])
    tx = optax.chain(ao.keras_clipping(global_clipnorm=gen.CLIP), optax.sgd(gen.LR))

    def loss(p: dict[str, Any]) -> Any:
        h = {n: v.astype(jnp.float16) for n, v in p.items()}  # mixed_float16
        pred = jnp.tanh(x.astype(jnp.float16) @ h["w0"] + h["b0"]) @ h["w1"] + h["b1"]
        return jnp.mean(jnp.square(pred.astype(jnp.float32) - y))

    @jax.jit
    def step(p: Any, s: Any, scale: Any, good: Any) -> Any:
        grads = jax.grad(lambda q: loss(q) * scale)(p)
        if not right_order:  # the mistake: clip the scaled gradients
            grads, _ = anyclip_tree_clip(grads)
        grads = jax.tree.map(lambda g: g / scale, grads)  # 1. unscale
        finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
        updates, new_s = tx.update(grads, s, p)  # 3. clip (inside tx) and update
        new_p = optax.apply_updates(p, updates)
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)  # noqa: E731
        p, s = keep(new_p, p), keep(new_s, s)  # 2. skip a non-finite step
        grow = finite & (good == gen.GROWTH - 1)
        scale = jnp.where(finite, jnp.where(grow, scale * 2, scale), scale / 2)
        good = jnp.where(finite & ~grow, good + 1, 0)
        return p, s, scale, good

    def anyclip_tree_clip(grads: Any) -> Any:
        from anyclip import tree

        return tree.clip_by_global_norm(grads, gen.CLIP)

    state = tx.init(params)
    scale, good = jnp.float32(gen.INITIAL_SCALE), jnp.int32(0)
    weights, scales = [], []
    for _ in range(gen.STEPS):
        params, state, scale, good = step(params, state, scale, good)
        weights.append([np.asarray(params[n]) for n in NAMES])
        scales.append(float(scale))
    return weights, scales


@jax_backends
def test_optax_loss_scaling_with_keras_clipping_gives_keras_weights(backend):
    weights, scales = _jax_train(backend, right_order=True)
    for k in range(gen.STEPS):
        _check(weights[k], scales, k)


@jax_backends
def test_optax_clipping_scaled_gradients_is_wrong(backend):
    weights, _ = _jax_train(backend, right_order=False)
    assert _far(weights[-1])


@pytest.mark.live_tf
def test_committed_reference_is_keras(tmp_path):
    # the committed file is still what Keras 3 gives (run with --live-tf)
    assert_live_reference(SCRIPT, REF, tmp_path, skip=("provenance",))
