"""Keras 3's weight constraints: ``anyclip.constraints`` and their torch and optax appliers.

The reference is Keras 3.15 itself (TF backend): ``tests/data/make_constraints.py`` runs each
``keras.constraints`` class on the inputs stored with its results in
``tests/data/constraints.npz`` (``--live-tf`` reruns the script and checks the file), and
trains a two-layer network with ``kernel_constraint``/``bias_constraint`` for five steps of SGD
and Adam. The functions must give Keras's values on every backend (bit for bit, or within the
ULP of a norm); the torch and optax ports of the training must give Keras's weights.
"""

from __future__ import annotations

import functools
import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip import constraints
from anyclip_conformance.budgets import gpu_differs

from .conftest import assert_live_reference

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_constraints.py"
REF = dict(np.load(DATA / "constraints.npz"))

#: The script's tables (``tests/data`` is not a package), as attributes.
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))

#: ULP from Keras's values: a sum of squares, a root and two roundings (float16 and bfloat16
#: sum in a different order from TF's); ``NonNeg`` is exact. float64 norms take TF's order of
#: additions (the kernels' ``norm2``, as ``anyclip.norm``): Keras's bits on the CPU backends
#: (torch's own order was 2 ULP off before); a GPU adds in its own order (:func:`_ulp`).
ULP = {"float16": 4, "bfloat16": 2, "float32": 4, "float64": 0}

#: float64 on a GPU: the device's own order of additions, as far as the CPU libraries' own
#: orders were from Keras (2 ULP measured on torch; 4 allowed before TF's order was taken).
GPU_FLOAT64_ULP = 4


def _ulp(backend: Any, dtype: str) -> int:
    if dtype == "float64" and gpu_differs("device-sum-order", backend.name):
        return GPU_FLOAT64_ULP
    return ULP.get(dtype, 0)


#: Largest difference from Keras's weights after five steps (float32; as test_keras_clipping).
ATOL = {"sgd": 2e-7, "adam": 1e-5}

FUNCTIONS = {
    "MaxNorm": constraints.max_norm,
    "UnitNorm": constraints.unit_norm,
    "MinMaxNorm": constraints.min_max_norm,
    "NonNeg": constraints.non_neg,
    "NonNeg-legacy": functools.partial(constraints.non_neg, legacy=True),
}
CLASSES = {
    "MaxNorm": constraints.MaxNorm,
    "UnitNorm": constraints.UnitNorm,
    "MinMaxNorm": constraints.MinMaxNorm,
    "NonNeg": constraints.NonNeg,
    "NonNeg-legacy": functools.partial(constraints.NonNeg, legacy=True),
}


def _input(make: Any, name: str) -> tuple[Any, str]:
    dtype = str(REF[f"dtype/{name}"])
    return make(REF[f"in/{name}"], dtype), dtype


@pytest.mark.parametrize("case", list(gen.CASES))
def test_function_gives_keras_values(backend, make, check, case):
    cls, kwargs, inp = gen.CASES[case]
    w, dtype = _input(make, inp)
    out = FUNCTIONS[cls](w, **kwargs)
    out_dtype = "float32" if dtype == "int32" and not cls.startswith("NonNeg") else dtype
    ulp = 0 if cls.startswith("NonNeg") else _ulp(backend, out_dtype)
    check(out, REF[f"fn/{case}"], out_dtype, ulp=ulp, what=case)


@pytest.mark.parametrize("case", ["MaxNorm-axis1", "MinMaxNorm-rate-m32", "UnitNorm-axes12"])
def test_class_calls_the_function(backend, make, check, case):
    cls, kwargs, inp = gen.CASES[case]
    w, dtype = _input(make, inp)
    check(CLASSES[cls](**kwargs)(w), REF[f"fn/{case}"], dtype, ulp=_ulp(backend, dtype), what=case)


def test_legacy_non_neg_differs_in_sign_and_at_minus_inf():
    # the reason for ``legacy=``: tf.keras 2 gives -0.0 for negatives and NaN for -inf
    w = np.array([-2.0, -np.inf, 1.0], np.float32)
    new, old = constraints.non_neg(w), constraints.non_neg(w, legacy=True)
    np.testing.assert_array_equal(np.signbit(new), [False, False, False])
    np.testing.assert_array_equal(np.signbit(old[:1]), [True])
    assert new[1] == 0 and np.isnan(old[1])
    ref_new, ref_old = REF["fn/NonNeg-edge"], REF["fn/NonNeg-legacy-edge"]
    assert np.signbit(ref_old[1, 3]) and not np.signbit(ref_new[1, 3])  # Keras agrees


def test_epsilon_is_rounded_to_the_weight_dtype(backend, make, check):
    # Keras adds epsilon as a weak Python scalar, so it is rounded to w's dtype: in float16,
    # 1e-7 becomes 1.19e-7, and w / (epsilon + 0) for a norm that underflows shows it
    for case in ("UnitNorm-tiny16", "UnitNorm-tiny32", "UnitNorm-tinybf16"):
        w, dtype = _input(make, gen.CASES[case][2])
        check(constraints.unit_norm(w), REF[f"fn/{case}"], dtype, what=case)
    assert float(REF["fn/UnitNorm-tiny16"][0, 0]) == 0.5  # Keras's, not 2**-24 / 1e-7
    big = constraints.max_norm(make([[3.0], [4.0]], "float32"), 10.0, epsilon=1.0)
    check(big, np.array([[3.0], [4.0]]) * (np.float32(5) / np.float32(6)), "float32", ulp=1)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda w: constraints.max_norm(w, 1.0, axis=2), ValueError, "`axis` contains 2"),
        (lambda w: constraints.max_norm(w, 1.0, axis=[0, 0]), ValueError, "`axis` must not"),
        (lambda w: constraints.unit_norm(w.astype(bool)), TypeError, "`w` must have a real"),
        (lambda w: constraints.non_neg(w.astype(complex)), TypeError, "`w` must have a real"),
        (
            lambda w: constraints.max_norm(w, np.float64(1.0) * np.ones(1)),
            TypeError,
            "`max_value` must have the dtype float32",
        ),
        (
            lambda w: constraints.min_max_norm(w, np.zeros((3, 1), np.float32)),
            ValueError,
            "min_value",
        ),
    ],
)
def test_bad_arguments_name_the_argument(call, error, match):
    w = np.ones((2, 3), np.float32)
    with pytest.raises(error, match=match):
        call(w)


# ================================================================= training
def _expected(model: str, optimizer: str) -> list[np.ndarray]:
    return [REF[f"train/{model}/{optimizer}/{i}"] for i in range(4)]


def _compare(ours: list[np.ndarray], model: str, optimizer: str) -> None:
    for i, (o, k) in enumerate(zip(ours, _expected(model, optimizer), strict=True)):
        assert o.dtype == np.float32
        np.testing.assert_allclose(o, k, rtol=0, atol=ATOL[optimizer], err_msg=f"{model}/{i}")
    if model != "none":  # the constraints change the training: the comparison can tell
        moved = max(
            float(np.max(np.abs(a - b)))
            for a, b in zip(_expected(model, optimizer), _expected("none", optimizer), strict=True)
        )
        assert moved > 1e-2


def _torch_layout(spec: tuple[str, dict[str, Any]] | None, kernel: bool) -> Any:
    """Keras's constraint for torch's layout: a Linear weight is (out, in), so axis 0 -> 1."""
    if spec is None:
        return None
    name, kwargs = spec
    kwargs = dict(kwargs)
    if kernel and name != "NonNeg":
        kwargs["axis"] = 1
    return CLASSES[name](**kwargs)


MODELS = pytest.mark.parametrize("model", list(gen.MODELS))
OPTIMIZERS = pytest.mark.parametrize("optimizer", list(gen.LR))
torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)


@torch_backends
@MODELS
@OPTIMIZERS
def test_torch_constrain_after_step_gives_keras_weights(backend, model, optimizer):
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    data = gen.inputs()
    l0, l1 = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)
    with torch.no_grad():
        for layer, w, b in ((l0, "w0", "b0"), (l1, "w1", "b1")):
            layer.weight.copy_(torch.from_numpy(data[w].T.copy()))
            layer.bias.copy_(torch.from_numpy(data[b]))
    net = torch.nn.Sequential(l0, torch.nn.Tanh(), l1).to(backend.device)
    lr = gen.LR[optimizer]
    opt = (
        torch.optim.SGD(net.parameters(), lr=lr)
        if optimizer == "sgd"
        else torch.optim.Adam(net.parameters(), lr=lr, eps=gen.ADAM_EPSILON)
    )
    specs = gen.MODELS[model]
    names = ["0.weight", "0.bias", "2.weight", "2.bias"]
    cons = {
        n: _torch_layout(s, kernel=n.endswith("weight"))
        for n, s in zip(names, specs, strict=True)
        if s is not None
    }
    before = opt.state_dict()
    handle = at.constrain_after_step(opt, net, cons)  # the one line the port adds
    assert opt.state_dict() == before  # nothing added to the checkpoint
    x = torch.from_numpy(data["x"]).to(backend.device)
    y = torch.from_numpy(data["y"]).to(backend.device)
    for _ in range(gen.STEPS):
        opt.zero_grad()
        torch.mean(torch.square(net(x) - y)).backward()
        opt.step()
    handle.remove()
    ours = [backend.to_numpy(t.detach()) for t in (l0.weight.T, l0.bias, l1.weight.T, l1.bias)]
    _compare(ours, model, optimizer)


def test_torch_hook_is_removable_and_skips_parameters_without_grad():
    torch = pytest.importorskip("torch")
    at = pytest.importorskip("anyclip.torch")
    fc = torch.nn.Linear(2, 2)
    with torch.no_grad():
        fc.weight.fill_(-1.0)
        fc.bias.fill_(-1.0)
    opt = torch.optim.SGD(fc.parameters(), lr=0.0)
    handle = at.constrain_after_step(
        opt, fc, {"weight": constraints.NonNeg(), fc.bias: constraints.NonNeg()}
    )
    opt.step()  # no gradients yet: Keras constrains only the variables it updated
    assert torch.all(fc.weight == -1) and torch.all(fc.bias == -1)
    fc.weight.grad = torch.zeros_like(fc.weight)
    opt.step()
    assert torch.all(fc.weight == 0) and torch.all(fc.bias == -1)
    handle.remove()
    with torch.no_grad():
        fc.weight.fill_(-1.0)
    opt.step()
    assert torch.all(fc.weight == -1)


@pytest.mark.parametrize(
    ("constraints_arg", "error", "match"),
    [
        ({"nope": constraints.NonNeg()}, KeyError, "'nope'"),
        ({"weight": 3.0}, TypeError, r"`constraints\['weight'\]` must be callable"),
        ([("weight", constraints.NonNeg())], TypeError, "`constraints` must be a mapping"),
    ],
)
def test_torch_constrain_bad_arguments(constraints_arg, error, match):
    torch = pytest.importorskip("torch")
    at = pytest.importorskip("anyclip.torch")
    with pytest.raises(error, match=match):
        at.constrain_(torch.nn.Linear(2, 2), constraints_arg)


def test_torch_constrain_foreign_parameter_is_refused():
    torch = pytest.importorskip("torch")
    at = pytest.importorskip("anyclip.torch")
    other = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="not in `module_or_params`"):
        at.constrain_(torch.nn.Linear(2, 2), {other: constraints.NonNeg()})


jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)


@jax_backends
@MODELS
@OPTIMIZERS
def test_optax_constrain_gives_keras_weights(backend, model, optimizer):
    jax = backend.module
    jnp = jax.numpy
    optax = pytest.importorskip("optax")
    ao = pytest.importorskip("anyclip.optax")
    data = gen.inputs()
    params = {k: backend.asarray(data[k], "float32") for k in ("w0", "b0", "w1", "b1")}
    x, y = backend.asarray(data["x"], "float32"), backend.asarray(data["y"], "float32")
    specs = dict(zip(("w0", "b0", "w1", "b1"), gen.MODELS[model], strict=True))
    cons = {k: None if s is None else CLASSES[s[0]](**s[1]) for k, s in specs.items()}
    lr = gen.LR[optimizer]
    tx = optax.sgd(lr) if optimizer == "sgd" else optax.adam(lr, eps=gen.ADAM_EPSILON)

    # float32 products in full: JAX's default precision on a GPU multiplies float32 in TF32
    # (weights ~1e-5 relative from Keras' on an H200, which TF computes in float32)
    mm = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)

    def loss(p: dict[str, Any]) -> Any:
        h = jnp.tanh(mm(x, p["w0"]) + p["b0"])
        return jnp.mean(jnp.square(mm(h, p["w1"]) + p["b1"] - y))

    @jax.jit
    def step(p: Any, s: Any) -> Any:
        updates, s = tx.update(jax.grad(loss)(p), s, p)
        return ao.constrain(optax.apply_updates(p, updates), cons), s

    state = tx.init(params)
    for _ in range(gen.STEPS):
        params, state = step(params, state)
    _compare([np.asarray(params[k]) for k in ("w0", "b0", "w1", "b1")], model, optimizer)


def test_optax_constrain_prefix_and_bad_leaves():
    jnp = pytest.importorskip("jax.numpy")
    ao = pytest.importorskip("anyclip.optax")
    params = {"a": {"w": jnp.array([-1.0, 2.0]), "b": jnp.array([-3.0])}, "c": jnp.array([-1.0])}
    out = ao.constrain(params, {"a": constraints.NonNeg(), "c": None})
    np.testing.assert_array_equal(np.asarray(out["a"]["w"]), [0.0, 2.0])
    np.testing.assert_array_equal(np.asarray(out["a"]["b"]), [0.0])
    assert out["c"] is params["c"]
    with pytest.raises(TypeError, match="`constraints` leaves must be callables"):
        ao.constrain(params, {"a": 3.0, "c": None})


# ===================================================== jit and torch.compile
@jax_backends
def test_under_jax_jit(backend, check):
    jax = backend.module
    w = backend.asarray(REF["in/m32"], "float32")
    for case in ("MaxNorm-axis1", "MinMaxNorm-rate-m32", "UnitNorm-default-m32", "NonNeg-m32"):
        cls, kwargs, _ = gen.CASES[case]
        out = jax.jit(functools.partial(FUNCTIONS[cls], **kwargs))(w)
        check(out, REF[f"fn/{case}"], "float32", ulp=ULP["float32"], what=case)


@torch_backends
def test_under_torch_compile_fullgraph(backend, check):
    torch = backend.module
    w = backend.asarray(REF["in/m32"], "float32")
    for case in ("MaxNorm-axis1", "MinMaxNorm-rate-m32", "UnitNorm-default-m32", "NonNeg-m32"):
        cls, kwargs, _ = gen.CASES[case]
        fn = torch.compile(functools.partial(FUNCTIONS[cls], **kwargs), fullgraph=True)
        check(fn(w), REF[f"fn/{case}"], "float32", ulp=ULP["float32"], what=case)


# ===================================================================== live
@pytest.mark.live_tf
def test_committed_reference_is_keras(tmp_path):
    # the committed file is still what Keras 3 gives (run with --live-tf)
    assert_live_reference(SCRIPT, REF, tmp_path, skip=("provenance",))


def test_exported():
    assert anyclip.constraints is constraints
    assert "constraints" in anyclip.__all__
