"""Keras optimizer clipping ported: ``anyclip.torch.keras_clipping`` and ``anyclip.optax``'s.

The reference is Keras 3 itself (TF 2.21): the same two-layer model, data and optimizer (SGD,
Adam), run by ``tests/data/make_keras_clipping.py``, live in a subprocess when TensorFlow is
installed (and then also checked against the committed file), else from the committed
``tests/data/keras_clipping.npz``. The ported runs must give Keras's weights after five steps
within ``ATOL``; each clipping option must move the weights by far more than that (so the
comparison would catch a missing or wrong clip).

``global_clipnorm`` is also compared bit for bit, per step, with live Keras
(``tests/data/make_keras_global_clipnorm.py``; skipped without TensorFlow): Keras's own
``clip_by_global_norm`` (unhalved float16 squares, ``1.0 / clip_norm`` in Python), whose
unclipped steps are not always the identity.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip_conformance import Backend
from anyclip_conformance.budgets import gpu_budget

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


def _optax_run(
    backend: Backend, data: dict, optimizer: str, options: dict, inject: bool = False
) -> list[np.ndarray]:
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
    clipping = (
        optax.inject_hyperparams(ao.keras_clipping)(**options)  # arrays, traced under jit
        if inject
        else ao.keras_clipping(**options)
    )
    tx = optax.chain(clipping, inner)  # the one line the port changes
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
@OPTIMIZERS
@CASES
def test_optax_keras_clipping_injected_gives_keras_weights(
    backend, keras_reference, optimizer, case
):
    """``optax.inject_hyperparams(keras_clipping)``: the option an array, traced under jit.

    Each step's ``update`` gets the option as a 0-d array, a tracer under ``jax.jit``; it
    is Keras's rule taken on device (it was refused: ``float()`` of a tracer).
    """
    ours = _optax_run(backend, keras_reference, optimizer, gen.CASES[case], inject=True)
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
    # an array option is named as given in the message (a number stands in for it inside)
    limit = make(2.5)
    with pytest.raises(ValueError, match="Only one of") as info:
        ao.keras_clipping(clipnorm=limit, clipvalue=1.0)
    assert f"Received: clipnorm={limit}, clipvalue=1.0, global_clipnorm=None" in str(info.value)


# ============================================= global_clipnorm bit for bit (live Keras)
#: Keras's own ``clip_by_global_norm``, live: ``tests/data/make_keras_global_clipnorm.py``.
BITS_SCRIPT = DATA / "make_keras_global_clipnorm.py"
bits = SimpleNamespace(**runpy.run_path(str(BITS_SCRIPT)))
BIT_CASES = pytest.mark.parametrize("case", list(bits.cases()))
#: The cases of an array's sum of squares from the smallest normal number up to twice it.
HALF_SUBNORMAL = [case for case in bits.cases() if "half-subnormal" in case]


@pytest.fixture(scope="module")
def keras_bits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """Keras's clipped gradients per case, live (no committed copy: skipped without TF)."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow (Keras 3) is not installed: no live global_clipnorm reference")
    out = tmp_path_factory.mktemp("keras-bits") / "live.npz"
    run_reference_script(BITS_SCRIPT, out)
    return dict(np.load(out))


def _bits_case(ref: dict[str, np.ndarray], case: str) -> tuple[float, list, list]:
    n = len({**bits.cases(), **bits.flush_cases()}[case][1])
    c = float(ref[f"{case}/c"])
    return c, [ref[f"{case}/g/{i}"] for i in range(n)], [ref[f"{case}/out/{i}"] for i in range(n)]


def _backend_bits(backend: Backend, keras_bits: dict, case: str) -> tuple[float, list, list, str]:
    c, grads, want = _bits_case(keras_bits, case)
    dtype = str(grads[0].dtype)
    if not backend.has_dtype(dtype):
        pytest.skip(f"{backend.name} has no {dtype}")
    return c, grads, want, dtype


def _bits_budget(backend: Backend, case: str, dtype: str) -> float:
    """0 ULP on the CPU; a GPU's declared sum order and division where the norm matters."""
    if "clipped" not in case or "unclipped" in case:
        return 0  # the factor is float(c) * float(1 / c): no sum, no division by the norm
    return gpu_budget("device-sum-order", backend.name, 0, dtype) + gpu_budget(
        "xla-gpu-float32", backend.name, 0, dtype
    )


def test_keras_bits_cases_tell_keras_from_tf(keras_bits):
    # the cases the fix is for: TF's clip_by_global_norm (the adapters' old formula) differs
    # from Keras's on the unclipped 2.3 and 1.7, on some random c, and on tiny float16
    differ = []
    for case in bits.cases():
        c, g, want = _bits_case(keras_bits, case)
        tf_out, _ = anyclip.clip_by_global_norm(g, c)
        if any(
            not np.array_equal(np.asarray(a), w, equal_nan=True)
            for a, w in zip(tf_out, want, strict=True)
        ):
            differ.append(case)
    for case in (
        "float32-unclipped-2.3",
        "float32-unclipped-1.7",
        "float16-clipped-tiny",
    ):
        assert case in differ
    assert sum(c.startswith("float32-random") for c in differ) >= 4, differ
    assert sum(c.startswith("float16-random") for c in differ) >= 4, differ


def _torch_keras_grads(
    backend: Backend, grads: list, dtype: str, global_clipnorm: Any, *, flush: bool = False
) -> list:
    """The gradients after one SGD step under ``anyclip.torch.keras_clipping``."""
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    params = [torch.nn.Parameter(backend.asarray(np.zeros_like(g), dtype)) for g in grads]
    opt = torch.optim.SGD(params, lr=1.0)
    handle = at.keras_clipping(opt, global_clipnorm=global_clipnorm)
    for p, g in zip(params, grads, strict=True):
        p.grad = backend.asarray(g, dtype)
    with anyclip.flush_subnormals() if flush else contextlib.nullcontext():
        opt.step()
    handle.remove()
    return [p.grad for p in params]


@torch_backends
@BIT_CASES
def test_torch_keras_global_clipnorm_is_keras_bit_for_bit(backend, keras_bits, check, case):
    c, grads, want, dtype = _backend_bits(backend, keras_bits, case)
    got = _torch_keras_grads(backend, grads, dtype, c)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        check(g, w, dtype, _bits_budget(backend, case, dtype), f"{case} grad {i}")


@jax_backends
@BIT_CASES
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_optax_keras_global_clipnorm_is_keras_bit_for_bit(backend, keras_bits, check, case, jit):
    jax = backend.module
    ao = pytest.importorskip("anyclip.optax")
    c, grads, want, dtype = _backend_bits(backend, keras_bits, case)
    tx = ao.keras_clipping(global_clipnorm=c)
    updates = [backend.asarray(g, dtype) for g in grads]
    update = jax.jit(tx.update) if jit else tx.update
    out, _ = update(updates, tx.init(updates))
    for i, (o, w) in enumerate(zip(out, want, strict=True)):
        check(o, w, dtype, _bits_budget(backend, case, dtype), f"{case} update {i}")


# ================================= global_clipnorm inside flush_subnormals() (live Keras)
#: The cases whose squares, or only their ``l2_loss`` halves, TF's CPU kernels flush:
#: Keras's ``sum(square(v))`` leaves out the subnormal squares and keeps the others. Inside
#: ``flush_subnormals()`` anyclip left out the squares whose half TF's ``l2_loss`` flushes
#: (four float32 1.3e-19: Keras's norm 2.6e-19, clipped to 5e-31; anyclip's 0, unclipped).
#: And those whose sums of squares have subnormal halves, which anyclip formed (0 on JAX).
FLUSH_CASES = pytest.mark.parametrize(
    "case", ["float32-clipped-halves-flushed", *HALF_SUBNORMAL, *bits.flush_cases()]
)


@pytest.mark.parametrize("case", ["float32-clipped-halves-flushed", *HALF_SUBNORMAL])
def test_keras_global_clipnorm_keeps_keras_normal_squares(backend, keras_bits, check, case):
    # the adapters' function (anyclip._clip), on every backend, IEEE arithmetic: the squares
    # are normal, their sums too, and Keras sums them whole (anyclip took half of each
    # array's sum, then doubled the total: 2 ULP off where the half was subnormal, and 0 on
    # JAX, whose XLA:CPU flushed it)
    from anyclip import _clip

    c, grads, want, dtype = _backend_bits(backend, keras_bits, case)
    out = _clip.keras_clip_by_global_norm([backend.asarray(g, dtype) for g in grads], c)
    for i, (o, w) in enumerate(zip(out, want, strict=True)):
        check(o, w, dtype, _bits_budget(backend, case, dtype), f"{case} grad {i}")


@FLUSH_CASES
def test_keras_global_clipnorm_flushes_keras_squares(backend, keras_bits, check, case):
    # the adapters' function (anyclip._clip), on every backend: Keras's norm and factor
    from anyclip import _clip

    c, grads, want, dtype = _backend_bits(backend, keras_bits, case)
    with anyclip.flush_subnormals():
        out = _clip.keras_clip_by_global_norm([backend.asarray(g, dtype) for g in grads], c)
    for i, (o, w) in enumerate(zip(out, want, strict=True)):
        check(o, w, dtype, _bits_budget(backend, case, dtype), f"{case} grad {i}")


@torch_backends
@FLUSH_CASES
def test_torch_keras_global_clipnorm_inside_flush_subnormals(backend, keras_bits, check, case):
    c, grads, want, dtype = _backend_bits(backend, keras_bits, case)
    got = _torch_keras_grads(backend, grads, dtype, c, flush=True)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        check(g, w, dtype, _bits_budget(backend, case, dtype), f"{case} grad {i}")


@torch_backends
@BIT_CASES
def test_torch_keras_scheduled_number_is_keras_bit_for_bit(backend, keras_bits, check, case):
    """A schedule that returns a Python number clips as Keras's option at that number.

    Found by fuzzing: the number was made a float32 tensor, so float64 gradients were
    clipped at float32's 0.1 (1e-8 off, relative), ``1 / c`` was divided in the dtype (the
    unclipped 2.3 then gave the factor 1, where Keras's is 0.99999994), and a float16 70000
    (inf) gave NaN where Keras gives inf.
    """
    c, grads, want = _bits_case(keras_bits, case)
    dtype = str(grads[0].dtype)
    got = _torch_keras_grads(backend, grads, dtype, lambda step: c)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        check(g, w, dtype, _bits_budget(backend, case, dtype), f"{case} grad {i}")


@pytest.mark.parametrize("backend", ["jax"], indirect=True)
@FLUSH_CASES
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("route", ["cpu", "off-the-cpu"])
def test_optax_keras_global_clipnorm_inside_flush_subnormals(
    backend, keras_bits, check, case, jit, route, monkeypatch
):
    # "off-the-cpu": the arrays taken for GPU arrays (XLA:GPU keeps IEEE subnormals), so that
    # anyclip's flushing kernels serve the call, as test_value_paths's FLUSH_JAX test
    jax = backend.module
    ao = pytest.importorskip("anyclip.optax")
    from anyclip import _kernels, _subnormals

    c, grads, want, dtype = _backend_bits(backend, keras_bits, case)
    if route == "off-the-cpu":
        monkeypatch.setattr(_kernels, "xla_flushes", lambda a: False)
        monkeypatch.setattr(_subnormals, "xla_flushes", lambda a: False)
    tx = ao.keras_clipping(global_clipnorm=c)
    updates = [backend.asarray(g, dtype) for g in grads]
    update = jax.jit(tx.update) if jit else tx.update
    with anyclip.flush_subnormals():
        out, _ = update(updates, tx.init(updates))
    for i, (o, w) in enumerate(zip(out, want, strict=True)):
        check(o, w, dtype, _bits_budget(backend, case, dtype), f"{case} update {i}")


@torch_backends
def test_torch_keras_scheduled_tensor_below_float16_is_keras(backend, keras_bits, check):
    """A float32 value that float16 rounds to 0 still clips float16 gradients, as Keras.

    Found by fuzzing: Keras's rule (``value > 0``) was tested after the cast to the
    gradients' dtype, so 1e-30 clipped nothing; Keras (``global_clipnorm=1e-30``) gives
    zeros.
    """
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    c, grads, want = _bits_case(keras_bits, "float16-clipped-to-zero-1e-30")
    params = [torch.nn.Parameter(backend.asarray(np.zeros_like(g), "float16")) for g in grads]
    opt = torch.optim.SGD(params, lr=1.0)
    at.keras_clipping(opt, global_clipnorm=lambda step: torch.full((), c, device=step.device))
    for p, g in zip(params, grads, strict=True):
        p.grad = backend.asarray(g, "float16")
    opt.step()
    for i, (p, w) in enumerate(zip(params, want, strict=True)):
        check(p.grad, w, "float16", 0, f"grad {i}")


@jax_backends
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_optax_keras_scheduled_value_below_float16_is_keras(backend, keras_bits, check, jit):
    """:func:`test_torch_keras_scheduled_tensor_below_float16_is_keras` for optax."""
    jax = backend.module
    ao = pytest.importorskip("anyclip.optax")
    c, grads, want = _bits_case(keras_bits, "float16-clipped-to-zero-1e-30")
    tx = ao.keras_clipping(global_clipnorm=lambda count: jax.numpy.float32(c))
    updates = [backend.asarray(g, "float16") for g in grads]
    update = jax.jit(tx.update) if jit else tx.update
    out, _ = update(updates, tx.init(updates))
    for i, (o, w) in enumerate(zip(out, want, strict=True)):
        check(o, w, "float16", 0, f"update {i}")
