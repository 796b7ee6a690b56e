"""Keras optimizer clipping ported: ``anyclip.torch.keras_clipping`` and ``anyclip.optax``'s.

The reference is Keras 3 itself (TF 2.21): the same two-layer model, data and optimizer (SGD,
Adam), run by ``tests/data/make_keras_clipping.py``, live in a subprocess when TensorFlow is
installed (and then also checked against the committed file), else from the committed
``tests/data/keras_clipping.npz``. The ported runs must give Keras's weights after five steps
within ``ATOL``; each clipping option must move the weights by far more than that (so the
comparison would catch a missing or wrong clip).
"""

from __future__ import annotations

import functools
import importlib.util
import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from anyclip_conformance import Backend

from .conftest import run_reference_script

#: One pytest-xdist worker runs this module: Keras's script (module-scoped
#: ``keras_reference``) runs once.
pytestmark = pytest.mark.xdist_group("keras-clipping")

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_keras_clipping.py"

#: Largest difference from Keras's weights (float32, five steps, weights of magnitude < 1).
#: Measured: SGD within 6e-8 (a few ULP: the gradients come from another framework), Adam
#: within 5.4e-6 (its update divides by ``sqrt(v)``, which magnifies those ULP).
ATOL = {"sgd": 2e-7, "adam": 1e-5}

#: Smallest difference each option must make to the unclipped run (so every case clips).
MOVED = 1e-3


#: The script's functions (``tests/data`` is not a package), as attributes.
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))


@pytest.fixture(scope="module")
def keras_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """Keras's weights: live when TensorFlow is installed, else the committed file."""
    committed = dict(np.load(DATA / "keras_clipping.npz"))
    if importlib.util.find_spec("tensorflow") is None:
        return committed
    out = tmp_path_factory.mktemp("keras") / "live.npz"
    run_reference_script(SCRIPT, out)
    live = dict(np.load(out))
    assert live.keys() == committed.keys()
    for k, v in live.items():  # the committed file is still what Keras gives
        np.testing.assert_allclose(v, committed[k], rtol=0, atol=1e-5, err_msg=k)
    return live


def _expected(ref: dict[str, np.ndarray], optimizer: str, case: str) -> list[np.ndarray]:
    return [ref[f"{optimizer}-{case}/{i}"] for i in range(4)]


def _compare(ours: list[np.ndarray], ref: dict[str, np.ndarray], optimizer: str, case: str):
    for i, (o, k) in enumerate(zip(ours, _expected(ref, optimizer, case), strict=True)):
        assert o.dtype == np.float32
        np.testing.assert_allclose(
            o, k, rtol=0, atol=ATOL[optimizer], err_msg=f"{optimizer}-{case}/{i}"
        )
    if case != "none":  # the option changes the training: the comparison can tell
        moved = max(
            float(np.max(np.abs(a - b)))
            for a, b in zip(
                _expected(ref, optimizer, case), _expected(ref, optimizer, "none"), strict=True
            )
        )
        assert moved > MOVED


OPTIMIZERS = pytest.mark.parametrize("optimizer", list(gen.LR))
CASES = pytest.mark.parametrize("case", list(gen.CASES))


# ======================================================================= torch
torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)


def _torch_run(backend: Backend, data: dict, optimizer: str, options: dict) -> list[np.ndarray]:
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    dev = backend.device
    l0, l1 = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)
    with torch.no_grad():
        for layer, w, b in ((l0, "w0", "b0"), (l1, "w1", "b1")):
            layer.weight.copy_(torch.from_numpy(data[w].T.copy()))
            layer.bias.copy_(torch.from_numpy(data[b]))
    model = torch.nn.Sequential(l0, torch.nn.Tanh(), l1).to(dev)
    lr = gen.LR[optimizer]
    opt = (
        torch.optim.SGD(model.parameters(), lr=lr)
        if optimizer == "sgd"
        else torch.optim.Adam(model.parameters(), lr=lr, eps=gen.ADAM_EPSILON)
    )
    handle = at.keras_clipping(opt, **options)  # the one line the port adds
    x = torch.from_numpy(data["x"]).to(dev)
    y = torch.from_numpy(data["y"]).to(dev)
    for _ in range(gen.STEPS):
        opt.zero_grad()
        torch.mean(torch.square(model(x) - y)).backward()
        opt.step()
    handle.remove()
    return [
        backend.to_numpy(t.detach())
        for t in (l0.weight.T, l0.bias, l1.weight.T, l1.bias)  # Keras's layout
    ]


@torch_backends
@OPTIMIZERS
@CASES
def test_torch_keras_clipping_gives_keras_weights(backend, keras_reference, optimizer, case):
    ours = _torch_run(backend, keras_reference, optimizer, gen.CASES[case])
    _compare(ours, keras_reference, optimizer, case)


@torch_backends
def test_torch_keras_clipping_handle_and_state_dict(backend):
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    w = torch.nn.Parameter(torch.zeros(2, device=backend.device))
    opt = torch.optim.Adam([w], lr=0.1)
    handle = at.keras_clipping(opt, clipnorm=1.0)
    w.grad = torch.tensor([3.0, 4.0], device=backend.device)
    opt.step()
    # Adam's first step moves each weight by lr * sign(g): clipped or not; the grad shows it
    assert backend.to_numpy(w.grad).tolist() == pytest.approx([0.6, 0.8], rel=1e-6)
    state = opt.state_dict()
    fresh = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2, device=backend.device))], lr=0.1)
    fresh.load_state_dict(state)  # the hook adds nothing to the state
    for k in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(fresh.state_dict()["state"][0][k], state["state"][0][k])
    assert fresh.state_dict()["param_groups"] == state["param_groups"]
    handle.remove()
    w.grad = torch.tensor([3.0, 4.0], device=backend.device)
    opt.step()
    assert backend.to_numpy(w.grad).tolist() == [3.0, 4.0]  # removed: no clipping


@torch_backends
@pytest.mark.parametrize("options", [{"clipnorm": 0.0}, {"clipvalue": -1.0}, {}])
def test_torch_keras_clipping_nonpositive_is_off(backend, options):
    # Keras applies an option only when it is > 0 (``if self.clipnorm and self.clipnorm > 0``)
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    w = torch.nn.Parameter(torch.zeros(2, device=backend.device))
    opt = torch.optim.SGD([w], lr=1.0)
    at.keras_clipping(opt, **options)
    w.grad = torch.tensor([3.0, 4.0], device=backend.device)
    opt.step()
    assert backend.to_numpy(w.detach()).tolist() == [-3.0, -4.0]


@torch_backends
def test_torch_keras_clipping_refuses_two_options(backend):
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    # Keras's own message (base_optimizer.py), for a ported assertRaisesRegex
    with pytest.raises(
        ValueError, match="Only one of `clipnorm`, `clipvalue` and `global_clipnorm`"
    ):
        at.keras_clipping(opt, clipnorm=1.0, global_clipnorm=1.0)
    with pytest.raises(TypeError, match="optimizer"):
        at.keras_clipping([], clipnorm=1.0)
    with pytest.raises(TypeError, match="clipvalue"):
        at.keras_clipping(opt, clipvalue="big")


# ======================================================================= optax
jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)


def _optax_run(backend: Backend, data: dict, optimizer: str, options: dict) -> list[np.ndarray]:
    jax = backend.module
    optax = pytest.importorskip("optax")
    ao = pytest.importorskip("anyclip.optax")
    jnp = jax.numpy
    params = [backend.asarray(data[k], "float32") for k in ("w0", "b0", "w1", "b1")]
    x, y = backend.asarray(data["x"], "float32"), backend.asarray(data["y"], "float32")

    # float32 products in full: JAX's default precision on a GPU multiplies float32 in TF32
    # (weights ~3e-5 relative from Keras' on an H200, which TF computes in float32)
    mm = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)

    def loss(p):
        h = jnp.tanh(mm(x, p[0]) + p[1])
        return jnp.mean(jnp.square(mm(h, p[2]) + p[3] - y))

    lr = gen.LR[optimizer]
    inner = optax.sgd(lr) if optimizer == "sgd" else optax.adam(lr, eps=gen.ADAM_EPSILON)
    tx = optax.chain(ao.keras_clipping(**options), inner)  # the one line the port changes
    state = tx.init(params)

    @jax.jit
    def step(p, s):
        u, s = tx.update(jax.grad(loss)(p), s, p)
        return optax.apply_updates(p, u), s

    for _ in range(gen.STEPS):
        params, state = step(params, state)
    return [np.asarray(p) for p in params]


@jax_backends
@OPTIMIZERS
@CASES
def test_optax_keras_clipping_gives_keras_weights(backend, keras_reference, optimizer, case):
    ours = _optax_run(backend, keras_reference, optimizer, gen.CASES[case])
    _compare(ours, keras_reference, optimizer, case)


@jax_backends
def test_optax_keras_clipping_options(backend, make, check):
    ao = pytest.importorskip("anyclip.optax")
    u = [make([3.0, 4.0]), make([[12.0]])]

    def run(**options):
        tx = ao.keras_clipping(**options)
        return tx.update(u, tx.init(u))[0]

    out = run(clipnorm=1.0)  # each leaf on its own: tf.clip_by_norm
    check(out[0], [0.6, 0.8], "float32", 2)
    check(out[1], [[1.0]], "float32", 2)
    out = run(global_clipnorm=6.5)  # all together (docs/tf-reference.md §4.2 values)
    check(out[0], [1.5, 2.0], "float32", 3)
    check(out[1], [[6.0]], "float32", 3)
    out = run(clipvalue=3.5)
    check(out[0], [3.0, 3.5], "float32")
    check(out[1], [[3.5]], "float32")
    out = run(clipnorm=-1.0)  # not > 0: off, as Keras
    check(out[0], [3.0, 4.0], "float32")
    with pytest.raises(
        ValueError, match="Only one of `clipnorm`, `clipvalue` and `global_clipnorm`"
    ):
        ao.keras_clipping(clipnorm=1.0, clipvalue=1.0)
