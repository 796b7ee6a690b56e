"""Per-example (DP-SGD) clipping against TF Privacy's rule, optax's and Opacus's.

* optax 0.2.8, live: ``optax.per_example_global_norm_clip`` and
  ``optax.per_example_layer_norm_clip`` run with JAX on the same NumPy data.
* TF 2.21 (``tf.clip_by_global_norm`` per example, then ``reduce_sum``: TF Privacy's rule) and
  Opacus 1.6.0 (``DPOptimizer.clip_and_accumulate``): ``tests/data/per_example.npz``, written by
  ``tests/data/make_per_example.py``; ``--live-tf`` reruns the TF part.

Every backend; ``jax.jit``, ``jax.vmap``, ``torch.func.vmap`` and
``torch.compile(fullgraph=True)``; gradients against optax's.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from anyclip import tree
from anyclip._per_example import _core_tf_sum
from anyclip_conformance import Backend, assert_array
from anyclip_conformance.budgets import gpu_budget

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_per_example.py"
REF = dict(np.load(DATA / "per_example.npz"))
LEAVES = ("w", "b", "s")
CLIPS = (0.0, 0.5, 2.0, 1000.0, math.inf)
#: a sum over 6 examples of nonnegative terms (einsum, tensordot): optax's and Opacus's sums;
#: TF's (norms, factors and sum) are in TF's order: 0, bit for bit
ULP = 4
#: TF's summation-order cases (``sum/<case>/...``), per-example size 1 included (a full
#: reduction of a vector in TF)
SUM_CASES = sorted({k.split("/")[1] for k in REF if k.startswith("sum/")})
SUM_DTYPES = ("float16", "bfloat16", "float32", "float64")
torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)


@pytest.fixture
def optax_ref() -> Any:
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return pytest.importorskip("optax")


def _inputs(dtype: str) -> dict[str, np.ndarray]:
    return {n: REF[f"in/{dtype}/{n}"] for n in LEAVES}


def _on(backend: Backend, data: dict[str, Any], dtype: str) -> dict[str, Any]:
    backend.dtype(dtype)
    return {k: backend.asarray(v, dtype) for k, v in data.items()}


def _ref(fn: Any, *trees: Any) -> Any:
    import jax
    import jax.numpy as jnp

    out = fn(*[jax.tree.map(jnp.asarray, t) for t in trees])
    return jax.tree.map(np.asarray, out)


# ------------------------------------------------------------------- TF, Opacus
@pytest.mark.parametrize("style", ["tf", "opacus"])
@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_per_example_clip_matches_tf_and_opacus(backend, style, clip, dtype):
    grads: dict[str, Any] = _on(backend, _inputs(dtype), dtype)
    grads["frozen"] = None  # kept as None, as in every anyclip.tree function
    got, norms = tree.per_example_clip(grads, clip, style=style)
    assert got["frozen"] is None
    # XLA:GPU's float32 division: a declared GPU difference (anyclip_conformance.budgets)
    ulp = gpu_budget("xla-gpu-float32-products", backend.name, 0 if style == "tf" else ULP, dtype)
    for n in LEAVES:
        want = REF[f"{style}/{dtype}/{clip!r}/{n}"]
        assert_array(got[n], want, backend=backend, dtype=dtype, ulp=ulp, what=n)
    assert_array(norms, REF[f"tf/{dtype}/norms"], backend=backend, dtype=dtype, ulp=ulp)


def _sum_case(backend: Backend, case: str, dtype: str) -> tuple[Any, Any, np.ndarray]:
    key = f"sum/{case}/{dtype}"
    backend.dtype(dtype)
    scale = backend.asarray(REF[f"{key}/scale"], dtype)
    return scale, backend.asarray(REF[f"{key}/in"], dtype), REF[f"{key}/tf"]


@pytest.mark.parametrize("dtype", SUM_DTYPES)
@pytest.mark.parametrize("case", SUM_CASES)
def test_tf_style_sum_is_tfs_reduce_sum_bit_for_bit(backend, case, dtype):
    # with TF's own per-example factors, the sum over the examples is TF's reduce_sum over
    # axis 0 bit for bit: batches below and above 16, B % 4 != 0, N % 8 and N % 4 != 0,
    # more than 1024 columns (summed in chunks), float16 in float16, bfloat16 in float32;
    # one element per example (shapes (1,), (1, 1), (): TF's full reduction of a vector,
    # past its tree splits at 9000 examples); one example (a copy: its -0.0 stays -0.0)
    scale, g, want = _sum_case(backend, case, dtype)
    got = _core_tf_sum(backend.xp, scale, g)
    assert_array(got, want, backend=backend, dtype=dtype, ulp=0, what=case)
    signs = np.signbit(backend.to_numpy(got).astype(np.float64))
    np.testing.assert_array_equal(signs, np.signbit(want), err_msg=f"signs of zeros ({case})")


@pytest.mark.parametrize("dtype", SUM_DTYPES)
@pytest.mark.parametrize("case", ["37x13", "37x1x1", "3x4"])
@jax_backends
def test_tf_style_sum_under_jit_and_vmap(backend, case, dtype):
    # no fused multiply-add under jit (XLA contracts a product feeding an add otherwise)
    import jax

    scale, g, want = _sum_case(backend, case, dtype)
    got = jax.jit(lambda s, x: _core_tf_sum(backend.xp, s, x))(scale, g)
    assert_array(got, want, backend=backend, dtype=dtype, ulp=0)
    batched = jax.jit(jax.vmap(lambda s, x: _core_tf_sum(backend.xp, s, x)))(scale[None], g[None])
    assert_array(batched[0], want, backend=backend, dtype=dtype, ulp=0)


#: the many-leaf cases (``many/<case>/...``): 12 float32 or 7 float64 leaves per example
MANY_CASES = sorted({k.split("/")[1] for k in REF if k.startswith("many/")})


def _many_case(backend: Backend, case: str) -> tuple[str, list[Any], list[np.ndarray]]:
    count = len({k for k in REF if k.startswith(f"many/{case}/in/")})
    ins = [REF[f"many/{case}/in/{i}"] for i in range(count)]
    dtype = str(ins[0].dtype)
    backend.dtype(dtype)
    wants = [REF[f"many/{case}/tf/{i}"] for i in range(count)]
    return dtype, [backend.asarray(g, dtype) for g in ins], wants


#: jax-gpu's 20 float32 leaves: a factor 1 ULP off (xla-gpu-float32) times values whose sum over
#: the examples cancels: the clipped sums came out up to 512 ULP of their own size from TF's
#: (run 4, an H200, JAX 0.11.2; eager and jit), the norms within 1 ULP.
_CANCELLING = (
    "XLA:GPU's float32 division and sqrt give factors 1 ULP off, and the sums over the "
    "examples cancel: up to 512 ULP of a small clipped sum (run 4, H200, JAX 0.11.2)"
)


@pytest.mark.xfail_backend(
    "jax-gpu", params={"case": "20xf32"}, raises=AssertionError, reason=_CANCELLING
)
@pytest.mark.parametrize("case", MANY_CASES)
def test_tf_style_norms_of_many_leaves_are_tfs_bit_for_bit(backend, case):
    # each example's global norm is tf.linalg.global_norm's: every leaf's l2_loss in the order
    # of TF's full reduction, their stack reduced the same way (from 9 float32 or 5 float64
    # leaves a sequential sum differs); so the factors, and the clipped sums, are TF's bits
    dtype, leaves, wants = _many_case(backend, case)
    ulp = gpu_budget("xla-gpu-float32", backend.name, 0, dtype)  # XLA:GPU's sqrt and division
    got, norms = tree.per_example_clip(leaves, 1.0, style="tf")
    norms, *got = backend.computed([norms, *got])  # Dask: the norms' graph once, not per leaf
    assert_array(norms, REF[f"many/{case}/norms"], backend=backend, dtype=dtype, ulp=ulp)
    for i, (g, want) in enumerate(zip(got, wants, strict=True)):
        assert_array(g, want, backend=backend, dtype=dtype, ulp=ulp, what=f"{case} leaf {i}")


@pytest.mark.xfail_backend(
    "jax-gpu", params={"case": "20xf32"}, raises=AssertionError, reason=_CANCELLING
)
@pytest.mark.parametrize("case", ["20xf32", "17xf64"])
@jax_backends
def test_tf_style_norms_of_many_leaves_under_jit_and_vmap(backend, case):
    # no fused multiply-add of a square into the sums under jit
    import jax

    dtype, leaves, wants = _many_case(backend, case)

    def clip(g: list[Any]) -> Any:
        return tree.per_example_clip(g, 1.0, style="tf")

    ulp = gpu_budget("xla-gpu-float32", backend.name, 0, dtype)  # XLA:GPU's sqrt and division
    got, norms = jax.jit(clip)(leaves)
    assert_array(norms, REF[f"many/{case}/norms"], backend=backend, dtype=dtype, ulp=ulp)
    for i, (g, want) in enumerate(zip(got, wants, strict=True)):
        assert_array(g, want, backend=backend, dtype=dtype, ulp=ulp, what=f"{case} leaf {i}")
    _, batched = jax.jit(jax.vmap(clip))([g[None] for g in leaves])
    assert_array(batched[0], REF[f"many/{case}/norms"], backend=backend, dtype=dtype, ulp=ulp)


#: the float16 and bfloat16 cases (``half/<case>/...``): norms near 1 to 10, entries whose
#: squares or their ``l2_loss`` halves are subnormal, norms near the dtype's largest value,
#: squares that overflow, a mix, and leaves past the tree splits of TF's ``l2_loss``
HALF_CASES = sorted({k.split("/")[1] for k in REF if k.startswith("half/")})
#: torch keeps IEEE subnormals (docs/tf-behaviour.md): the bfloat16 ``l2_loss`` halves that
#: TF (and XLA on the CPU) flush to 0 stay in its sums, so those examples' norms are larger
_TORCH_SUBNORMAL_HALVES = (
    "torch keeps the subnormal bfloat16 l2_loss halves that TF flushes to 0 (IEEE "
    "subnormals, declared in docs/tf-behaviour.md): those examples' norms are larger"
)


def _half_case(backend: Backend, case: str) -> tuple[str, list[Any]]:
    count = len({k for k in REF if k.startswith(f"half/{case}/in/")})
    dtype = "bfloat16" if "bf16" in case else "float16"
    backend.dtype(dtype)
    return dtype, [backend.asarray(REF[f"half/{case}/in/{i}"], dtype) for i in range(count)]


def _assert_half_case(backend: Backend, case: str, dtype: str, got: list[Any], norms: Any) -> None:
    assert_array(norms, REF[f"half/{case}/norms"], backend=backend, dtype=dtype, what=case)
    for i, g in enumerate(got):
        want = REF[f"half/{case}/tf/{i}"]
        assert_array(g, want, backend=backend, dtype=dtype, what=f"{case} leaf {i}")


@pytest.mark.xfail_backend(
    "torch",
    "torch-cuda",
    params={"case": "16xbf16tiny"},
    raises=AssertionError,
    reason=_TORCH_SUBNORMAL_HALVES,
)
@pytest.mark.xfail_backend(
    "torch",
    "torch-cuda",
    params={"case": "20xbf16small"},
    raises=AssertionError,
    reason=_TORCH_SUBNORMAL_HALVES,
)
@pytest.mark.xfail_backend(
    "torch",
    "torch-cuda",
    params={"case": "33xbf16mixed"},
    raises=AssertionError,
    reason=_TORCH_SUBNORMAL_HALVES,
)
@pytest.mark.parametrize("case", HALF_CASES)
def test_tf_style_half_precision_is_tfs_bit_for_bit(backend, case):
    # float16 and bfloat16: each example's norm is tf.linalg.global_norm's (every square
    # halved and rounded before it is added: summing the squares and halving the sum kept
    # float16 squares whose halves TF rounds to 0, up to 13 % off), in TF's order; so the
    # factors and the clipped sums are TF's bits; infinite norms give NaN sums, as TF's
    dtype, leaves = _half_case(backend, case)
    got, norms = tree.per_example_clip(leaves, 1.0, style="tf")
    norms, *got = backend.computed([norms, *got])  # Dask: the norms' graph once
    _assert_half_case(backend, case, dtype, got, norms)


OPACUS_HALF = dict(np.load(DATA / "opacus_half.npz"))
OPACUS_HALF_CASES = sorted({k.split("/")[0] for k in OPACUS_HALF if "/" in k})


def test_opacus_half_reference_provenance():
    prov = json.loads(str(OPACUS_HALF["provenance"]))
    assert prov["opacus"] and prov["torch"] and prov["seed"]


@pytest.mark.parametrize("case", OPACUS_HALF_CASES)
def test_opacus_style_half_precision_is_opacus_bit_for_bit(backend, case):
    # Opacus's norms are torch.linalg.vector_norm's: float16 and bfloat16 squares summed in
    # float32, the norm rounded once (norms of about 3e4 stay finite; summed in float16 they
    # were inf, and the clipped sums 0); its factor max_grad_norm / (norms + 1e-6) is
    # torch's (norms + 1e-6).reciprocal() * max_grad_norm, each step in float32 rounded to
    # the dtype (Opacus's own output, tests/data/make_opacus_half.py)
    dtype = "bfloat16" if case.startswith("bf16") else "float16"
    backend.dtype(dtype)
    count = len({k for k in OPACUS_HALF if k.startswith(f"{case}/in/")})
    leaves = [backend.asarray(OPACUS_HALF[f"{case}/in/{i}"], dtype) for i in range(count)]
    clip = float(OPACUS_HALF[f"{case}/clip"])
    got, norms = tree.per_example_clip(leaves, clip, style="opacus")
    norms, *got = backend.computed([norms, *got])
    assert_array(norms, OPACUS_HALF[f"{case}/norms"], backend=backend, dtype=dtype, what=case)
    for i, g in enumerate(got):
        want = OPACUS_HALF[f"{case}/opacus/{i}"]
        assert_array(g, want, backend=backend, dtype=dtype, what=f"{case} leaf {i}")


@pytest.mark.parametrize("case", OPACUS_HALF_CASES)
@jax_backends
def test_opacus_style_half_precision_under_jit(backend, case):
    # XLA computes half precision in float32: each of torch's roundings is kept under jit
    import jax

    dtype = "bfloat16" if case.startswith("bf16") else "float16"
    count = len({k for k in OPACUS_HALF if k.startswith(f"{case}/in/")})
    leaves = [backend.asarray(OPACUS_HALF[f"{case}/in/{i}"], dtype) for i in range(count)]
    clip = float(OPACUS_HALF[f"{case}/clip"])
    got, norms = jax.jit(lambda g: tree.per_example_clip(g, clip, style="opacus"))(leaves)
    assert_array(norms, OPACUS_HALF[f"{case}/norms"], backend=backend, dtype=dtype, what=case)
    for i, g in enumerate(got):
        want = OPACUS_HALF[f"{case}/opacus/{i}"]
        assert_array(g, want, backend=backend, dtype=dtype, what=f"{case} leaf {i}")


@pytest.mark.parametrize("case", ["40xf16", "16xf16tiny", "33xbf16mixed", "6xbf16long"])
@jax_backends
def test_tf_style_half_precision_under_jit_and_vmap(backend, case):
    # XLA computes half-precision arithmetic in float32 and drops a rounding to bfloat16
    # that a cast to float32 follows: the accumulators are rounded apart first
    import jax

    dtype, leaves = _half_case(backend, case)

    def clip(g: list[Any]) -> Any:
        return tree.per_example_clip(g, 1.0, style="tf")

    got, norms = jax.jit(clip)(leaves)
    _assert_half_case(backend, case, dtype, got, norms)
    got, norms = jax.jit(jax.vmap(clip))([g[None] for g in leaves])
    _assert_half_case(backend, case, dtype, [g[0] for g in got], norms[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tf_style_overflowing_squares_give_tfs_nan_without_a_warning(backend, dtype):
    # squares past the dtype's range: TF's global norm is inf and clip_by_global_norm then
    # gives NaN everywhere (TF warns about nothing); torch summed them on a NumPy view of
    # its memory, whose overflow warning was an error under -W error
    big = 3e37 if dtype == "float32" else 3e307
    data = [np.full((5, 40), big), np.full((5, 3), big)]
    leaves = [backend.asarray(v, dtype) for v in data]
    got, norms = tree.per_example_clip(leaves, 1.0, style="tf")
    assert_array(norms, np.full(5, np.inf), backend=backend, dtype=dtype)
    for g, v in zip(got, data, strict=True):
        assert_array(g, np.full(v.shape[1:], np.nan), backend=backend, dtype=dtype)


#: float32 sums of one element per example on JAX without x64 (its default): an int64 index
#: there is truncated with a UserWarning, an error under ``-W error``
_NO_X64 = """
import sys
import jax, jax.numpy as jnp, numpy as np
from anyclip._per_example import _core_tf_sum
assert not jax.config.jax_enable_x64
ref = np.load(sys.argv[1])
for case in ("33x1", "9000x"):
    key = f"sum/{case}/float32"
    scale, g = jnp.asarray(ref[key + "/scale"]), jnp.asarray(ref[key + "/in"])
    for name, run in (("eager", _core_tf_sum), ("jit", jax.jit(_core_tf_sum, static_argnums=0))):
        got = run(jnp, scale, g)
        assert got.dtype == jnp.float32 and got.shape == ref[key + "/tf"].shape, (case, name)
        assert np.asarray(got).tobytes() == ref[key + "/tf"].tobytes(), (case, name)
print("ok")
"""


def test_tf_style_sum_of_one_element_per_example_on_jax_without_x64():
    # JAX's default (no float64): TF's bits, eagerly and under jit, and no warning
    pytest.importorskip("jax")
    env = {**os.environ, "JAX_ENABLE_X64": "0", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", _NO_X64, str(DATA / "per_example.npz")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_reference_provenance():
    prov = json.loads(str(REF["provenance"]))
    assert prov["tensorflow"].startswith("2.21")
    assert prov["opacus"] and prov["seed"]


@pytest.mark.live_tf
def test_committed_tf_reference_is_tfs():
    # the committed TF part is still what TF 2.21 gives (run with --live-tf)
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    spec = importlib.util.spec_from_file_location("make_per_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for dtype in script.DTYPES:
        for clip in script.CLIPS:
            sums, norms = script.run_tf(script.inputs(dtype), clip)
            for n, s in sums.items():
                np.testing.assert_array_equal(s, REF[f"tf/{dtype}/{clip!r}/{n}"])
            np.testing.assert_array_equal(norms, REF[f"tf/{dtype}/norms"])
    for case in script.SUM_CASES:
        for dtype in script.SUM_DTYPES:
            scale, total = script.run_tf_sum(script.sum_inputs(case, dtype), dtype)
            np.testing.assert_array_equal(scale, REF[f"sum/{case}/{dtype}/scale"])
            np.testing.assert_array_equal(total, REF[f"sum/{case}/{dtype}/tf"])
    for case in script.MANY_CASES:
        sums, norms = script.run_tf_many(script.many_inputs(case))
        for i, s in enumerate(sums):
            np.testing.assert_array_equal(s, REF[f"many/{case}/tf/{i}"])
        np.testing.assert_array_equal(norms, REF[f"many/{case}/norms"])
    for case in script.HALF_CASES:
        sums, norms = script.run_tf_half(script.half_inputs(case))
        for i, s in enumerate(sums):
            np.testing.assert_array_equal(s, REF[f"half/{case}/tf/{i}"])
        np.testing.assert_array_equal(norms, REF[f"half/{case}/norms"])


# ------------------------------------------------------------------------ optax
def _optax_data(dtype: str) -> dict[str, np.ndarray]:
    """Mixed signs and a zero example (optax's NaN -> 1 at c = 0)."""
    rng = np.random.default_rng(23)
    data = {
        "w": rng.standard_normal((5, 3, 2)),
        "b": rng.standard_normal((5, 4)) * 3,
    }
    for v in data.values():
        v[0] = 0.0
    return {k: v.astype(dtype) for k, v in data.items()}


def _sum_scale(data: dict[str, np.ndarray], k: str) -> float:
    """The size of the largest term of the sum over the examples (cancellation-free ulps)."""
    return float(np.max(np.sum(np.abs(data[k]), axis=0)))


@pytest.mark.parametrize("clip", [0.0, 0.5, 3.0, math.inf])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_per_example_clip_matches_optax(backend, optax_ref, clip, dtype):
    data = _optax_data(dtype)
    want, n_clipped = _ref(lambda g: optax_ref.per_example_global_norm_clip(g, clip), data)
    got, norms = tree.per_example_clip(_on(backend, data, dtype), clip, style="optax")
    for k in data:
        assert_array(
            got[k],
            want[k],
            backend=backend,
            dtype=dtype,
            ulp=ULP,
            scale=_sum_scale(data, k),
            what=k,
        )
    assert int(np.sum(backend.to_numpy(norms) > clip)) == int(n_clipped)


@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("clip", [0.5, 3.0])
def test_per_example_layer_clip_matches_optax(backend, optax_ref, uniform, clip):
    data = _optax_data("float32")
    want, n_clipped = _ref(
        lambda g: optax_ref.per_example_layer_norm_clip(g, clip, uniform=uniform), data
    )
    got, norms = tree.per_example_layer_clip(_on(backend, data, "float32"), clip, uniform=uniform)
    total = sum(v[0].size for v in data.values())
    share = {k: 0.5**0.5 if uniform else (v[0].size / total) ** 0.5 for k, v in data.items()}
    for k in data:
        assert_array(
            got[k],
            want[k],
            backend=backend,
            dtype="float32",
            ulp=ULP,
            scale=_sum_scale(data, k),
            what=k,
        )
        assert np.sum(backend.to_numpy(norms[k]) > np.float32(clip * share[k])) == n_clipped[k]


def test_per_example_nonfinite_rules(optax_ref):
    # an inf example: optax scales it by 0 (c / inf), TF's factor is NaN, Opacus's 0
    g = [np.array([[3.0, 4.0], [np.inf, 0.0], [0.0, 0.0]], np.float32)]
    want, _ = _ref(lambda t: optax_ref.per_example_global_norm_clip(t, 1.0), g)
    got, norms = tree.per_example_clip(g, 1.0, style="optax")
    np.testing.assert_array_equal(got[0], want[0])  # inf * 0 = NaN in both sums
    assert np.isposinf(norms[1])
    tf_sum, _ = tree.per_example_clip(g, 1.0, style="tf")
    assert np.isnan(tf_sum[0]).all()


ONE_EXAMPLE = {
    "per_example_clip": lambda g, c: tree.per_example_clip(g, c, style="optax")[0],
    "per_example_layer_clip": lambda g, c: tree.per_example_layer_clip(g, c)[0],
}
OPTAX_ONE_EXAMPLE = {
    "per_example_clip": lambda o, g, c: o.per_example_global_norm_clip(g, c)[0],
    "per_example_layer_clip": lambda o, g, c: o.per_example_layer_norm_clip(g, c)[0],
}


@pytest.mark.parametrize("name", ONE_EXAMPLE)
def test_one_example_scaled_by_zero_keeps_its_nan(backend, optax_ref, name):
    """One example holding inf: its norm's factor ``c / inf`` is 0, and ``inf * 0`` NaN.

    NumPy's ``tensordot`` of one example skipped the zero factor ([0, 0, 0] for optax's
    [0, -0, NaN]), on NumPy and on dask arrays of one chunk.
    """
    data = {"w": np.array([[3.0, -4.0, np.inf]], np.float32)}
    want = _ref(lambda g: OPTAX_ONE_EXAMPLE[name](optax_ref, g, 1.0), data)
    got = ONE_EXAMPLE[name](_on(backend, data, "float32"), 1.0)
    assert np.isnan(want["w"][2])
    assert_array(got["w"], want["w"], backend=backend, dtype="float32", what="w")


@pytest.mark.parametrize("name", ONE_EXAMPLE)
def test_no_examples_sum_to_zeros_as_optax(backend, optax_ref, name):
    """A batch of no examples: optax's sums are zeros of one example's shape.

    Reshaping to ``(0, -1)`` raised ``cannot reshape`` (NumPy) or ``ZeroDivisionError``
    (JAX, dask) before.
    """
    data = {"w": np.zeros((0, 3, 2), np.float32), "b": np.zeros((0,), np.float32)}
    want = _ref(lambda g: OPTAX_ONE_EXAMPLE[name](optax_ref, g, 1.0), data)
    got = ONE_EXAMPLE[name](_on(backend, data, "float32"), 1.0)
    for k in data:
        assert_array(got[k], want[k], backend=backend, dtype="float32", what=k)


def test_unknown_number_of_examples_is_refused_with_the_fix():
    """``x[mask]`` of dask has no number of examples before it is computed.

    The check compared ``nan != nan`` and said leaf 0 disagreed with itself.
    """
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.ones((4, 3), np.float32), chunks=2)
    g = x[da.from_array(np.array([True, False, True, True]), chunks=2)]
    with pytest.raises(ValueError, match=r"known number of examples.*compute_chunk_sizes\(\)"):
        tree.per_example_clip({"w": g}, 1.0)
    g.compute_chunk_sizes()
    want = tree.per_example_clip({"w": np.ones((3, 3), np.float32)}, 1.0)[0]["w"]
    np.testing.assert_array_equal(tree.per_example_clip({"w": g}, 1.0)[0]["w"].compute(), want)


# --------------------------------------------------------- vmap, jit, compile
@jax_backends
def test_per_example_clip_under_jit_and_vmap(backend, optax_ref):
    import jax

    data = _optax_data("float32")
    # vmap over groups of examples: each group clipped and summed on its own
    grouped = {k: np.stack([v[:2], v[2:4]]) for k, v in data.items()}
    want = _ref(jax.vmap(lambda g: optax_ref.per_example_global_norm_clip(g, 0.5)[0]), grouped)
    got = jax.jit(jax.vmap(lambda g: tree.per_example_clip(g, 0.5, style="optax")[0]))(
        _on(backend, grouped, "float32")
    )
    for k in data:
        assert_array(
            got[k],
            want[k],
            backend=backend,
            dtype="float32",
            ulp=ULP,
            scale=_sum_scale(data, k),
            what=k,
        )


@torch_backends
def test_per_example_clip_under_torch_func_vmap_and_grad(backend, optax_ref):
    import jax

    torch = backend.module
    data = _optax_data("float32")
    grouped = {k: np.stack([v[:2], v[2:4]]) for k, v in data.items()}
    want = _ref(jax.vmap(lambda g: optax_ref.per_example_global_norm_clip(g, 0.5)[0]), grouped)
    got = torch.func.vmap(lambda g: tree.per_example_clip(g, 0.5, style="optax")[0])(
        _on(backend, grouped, "float32")
    )
    for k in data:
        assert_array(
            got[k],
            want[k],
            backend=backend,
            dtype="float32",
            ulp=ULP,
            scale=_sum_scale(data, k),
            what=k,
        )


@torch_backends
def test_per_example_clip_under_torch_compile_fullgraph(backend):
    torch = backend.module
    grads = _on(backend, _inputs("float32"), "float32")
    torch._dynamo.reset()
    try:
        fn = torch.compile(lambda g: tree.per_example_clip(g, 0.5, style="tf"), fullgraph=True)
        got, norms = fn(grads)
    finally:
        torch._dynamo.reset()
    ulp = gpu_budget("inductor-cuda-float32", backend.name, 0, "float32")  # Triton's float32
    for n in LEAVES:
        want = REF[f"tf/float32/0.5/{n}"]
        assert_array(got[n], want, backend=backend, dtype="float32", ulp=ulp, what=n)
    assert_array(norms, REF["tf/float32/norms"], backend=backend, dtype="float32", ulp=ulp)


def test_per_example_clip_gradient_matches_optax(grad_backend, optax_ref):
    import jax
    import jax.numpy as jnp

    backend = grad_backend
    data = {k: v[1:] for k, v in _optax_data("float64").items()}  # no zero example
    weights = np.random.default_rng(8).standard_normal((3, 2))

    def ref_loss(w: Any, b: Any) -> Any:
        out = optax_ref.per_example_global_norm_clip({"w": w, "b": b}, 2.0)[0]
        return jnp.sum((out["w"] + jnp.sum(out["b"])) * weights)

    want = jax.grad(ref_loss, argnums=(0, 1))(jnp.asarray(data["w"]), jnp.asarray(data["b"]))

    def ours(w: Any, b: Any) -> Any:
        out = tree.per_example_clip({"w": w, "b": b}, 2.0, style="optax")[0]
        return out["w"] + backend.xp.sum(out["b"])

    got = backend.grad(
        ours,
        [backend.asarray(data["w"], "float64"), backend.asarray(data["b"], "float64")],
        backend.asarray(weights, "float64"),
    )
    for name, w, a in zip(("w", "b"), want, got, strict=True):
        w = np.asarray(w)
        scale = float(np.max(np.abs(w)))
        assert_array(a, w, backend=backend, dtype="float64", ulp=ULP, scale=scale, what=name)


# ----------------------------------------------------------------------- errors
def test_per_example_clip_errors_name_the_argument():
    ok = np.ones((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"`grads` leaves must all have the batch.*leaf 1 has 3"):
        tree.per_example_clip([ok, np.ones((3, 3), np.float32)], 1.0)
    with pytest.raises(ValueError, match=r"`grads` leaves .* leaf 1 has a 0-d array"):
        tree.per_example_clip([ok, np.ones((), np.float32)], 1.0)
    with pytest.raises(ValueError, match=r"`grads` must hold at least one array"):
        tree.per_example_clip({"a": None}, 1.0)
    with pytest.raises(ValueError, match=r"`style` must be one of \('tf', 'optax', 'opacus'\)"):
        tree.per_example_clip([ok], 1.0, style="jax")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`l2_norm_clip` must be >= 0, got -1"):
        tree.per_example_clip([ok], -1.0)
    with pytest.raises(TypeError, match=r"`grads` leaves must have a real floating dtype"):
        tree.per_example_clip([np.ones((4, 3), np.int64)], 1.0)
    with pytest.raises(ValueError, match=r"`l2_norm_clip` must be a number or a 0-d array"):
        tree.per_example_clip([ok], np.ones(2, np.float32))


def test_per_example_clip_optax_takes_integer_leaves_as_optax(backend, check):
    # issue 28 item 4: optax's own test passes int32 gradients to
    # per_example_global_norm_clip; they count as the default floating dtype's values
    optax = pytest.importorskip("optax")
    import jax
    import jax.numpy as jnp

    ints = [np.arange(12).reshape(4, 3), np.arange(8).reshape(4, 2)]  # no cancellation
    jax.config.update("jax_enable_x64", True)  # a float64 reference, rounded below
    want, want_clipped = optax.per_example_global_norm_clip(
        [jnp.asarray(g, jnp.float64) for g in ints], 5.0
    )
    g = [backend.asarray(x, "int32") for x in ints]
    (a, b), _ = tree.per_example_clip(g, 5.0, style="optax")
    default = str(a.dtype).rsplit(".", 1)[-1]
    assert default in ("float32", "float64")  # the namespace's default floating dtype
    assert int(want_clipped) == 3  # three of four examples clipped
    check(a, np.asarray(want[0]), default, ULP, "leaf 0")
    check(b, np.asarray(want[1]), default, ULP, "leaf 1")
    with pytest.raises(TypeError, match=r"`grads` leaves must have a real floating dtype"):
        tree.per_example_clip(g, 5.0, style="tf")  # tf.clip_by_global_norm refuses them


@pytest.mark.parametrize("style", ["tf", "optax", "opacus"])
def test_per_example_clip_refuses_a_negative_host_array_clip(style):
    # fuzzing round 4 (issue 28): -1.0 was refused, np.array(-1.0) accepted (no clipping
    # under "tf", flipped gradients under "optax" and "opacus")
    ok = np.ones((4, 3), np.float32)
    for bad in (np.array(-1.0), np.array(-1.0, np.float32), np.array(np.nan)):
        with pytest.raises(ValueError, match=r"`l2_norm_clip` must be >= 0"):
            tree.per_example_clip([ok], bad, style=style)
        with pytest.raises(ValueError, match=r"`l2_norm_clip` must be >= 0"):
            tree.per_example_layer_clip([ok], bad, style=style)


@pytest.mark.parametrize("style", ["tf", "optax", "opacus"])
def test_per_example_clip_negative_device_clip_counts_as_zero(backend, style):
    # a device value is not read (a host sync): negative counts as 0, as tf.clip_by_norm's
    # maximum(clip_norm, 0); every example is then clipped to norm 0, never flipped
    if backend.library == "numpy":
        pytest.skip("a NumPy clip norm is checked on the host (test above)")
    g = backend.asarray(np.ones((4, 3)), "float32")
    clip = backend.asarray(np.array(-1.0), "float32")
    (summed,), _ = tree.per_example_clip([g], clip, style=style)
    (want,), _ = tree.per_example_clip([g], 0.0, style=style)
    assert_array(summed, backend.to_numpy(want), backend=backend, dtype="float32", ulp=0)
    assert not np.any(backend.to_numpy(summed) < 0)  # not flipped


# ----------------------------------------------------------------------- memory
@pytest.mark.parametrize("style", ["tf", "optax", "opacus"])
def test_per_example_clip_makes_no_copy_of_the_gradients_numpy(style):
    # tracemalloc sees NumPy's buffers: the call may allocate the output and per-example
    # vectors, never a square or a clipped copy of the per-example gradients (1x the input)
    import tracemalloc

    rng = np.random.default_rng(1)
    grads = {
        "w": rng.standard_normal((32, 200, 50)).astype(np.float32),
        "b": rng.standard_normal((32, 50)).astype(np.float32),
    }
    tree.per_example_clip(grads, 1.0, style=style)  # warm-up (caches, constants)
    size = sum(v.nbytes for v in grads.values())
    tracemalloc.start()
    try:
        out, _ = tree.per_example_clip(grads, 1.0, style=style)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    output = sum(v.nbytes for v in out.values())
    assert peak < output + 0.1 * size, (peak, output, size)
