"""optax's tree norm, block RMS and AGC, and timm's AGC, against the references themselves.

* optax 0.2.8, live: ``optax.tree.norm``, ``optax.tree.clip``, ``optax.clip_by_block_rms``
  and ``optax.adaptive_grad_clip``, run with JAX on the same NumPy data; anyclip runs on every
  backend and is compared (namespace, dtype, shape, device, then values).
* timm's ``adaptive_clip_grad``: ``tests/data/timm_agc.npz``, written by
  ``tests/data/make_timm_agc.py`` from timm's own function (timm needs a torchvision built for
  the pinned torch, so it is not a test dependency), in float32, float64, float16 and
  bfloat16 (the half dtypes' inputs scaled so that unit norms exceed 256, float16's overflow
  of a sum of squares in the dtype).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip import tree
from anyclip_conformance import Backend, assert_array
from anyclip_conformance.backends import load_backend
from anyclip_conformance.budgets import gpu_budget

DATA = Path(__file__).with_name("data")
TIMM = dict(np.load(DATA / "timm_agc.npz"))
TIMM_CASES = sorted({k.rsplit("/", 1)[0] for k in TIMM if k != "provenance"})
TIMM_EPS = 1e-3
TIMM_HALF = ("float16", "bfloat16")

#: the norms are reductions (optax: one XLA reduce; anyclip: the backend's sum)
ULP = 4
torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)


@pytest.fixture
def optax_ref() -> Any:
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)  # float64 references (the jax backend sets it too)
    return pytest.importorskip("optax")


def _ref(fn: Any, *trees: Any) -> Any:
    """``fn`` (optax's) on JAX copies of the NumPy ``trees``, returned as NumPy."""
    import jax
    import jax.numpy as jnp

    out = fn(*[jax.tree.map(jnp.asarray, t) for t in trees])
    return jax.tree.map(np.asarray, out)


def _on(backend: Backend, data: dict[str, Any], dtype: str) -> dict[str, Any]:
    backend.dtype(dtype)  # skips a dtype the backend lacks
    return {k: None if v is None else backend.asarray(v, dtype) for k, v in data.items()}


def _tree_data(dtype: str) -> dict[str, Any]:
    rng = np.random.default_rng(5)
    return {
        "w": rng.standard_normal((3, 4)).astype(dtype),
        "b": (rng.standard_normal(5) * 3).astype(dtype),
        "none": None,
        "k": rng.standard_normal((2, 2, 2)).astype(dtype),
    }


# ------------------------------------------------------------------ tree.norm
@pytest.mark.parametrize("ord", [2, None, 1, math.inf, "inf"])
@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tree_norm_matches_optax(backend, optax_ref, ord, squared, dtype):
    data = _tree_data(dtype)
    want = _ref(lambda t: optax_ref.tree.norm(t, ord=ord, squared=squared), data)
    got = tree.norm(_on(backend, data, dtype), ord=ord, squared=squared)
    assert_array(got, want, backend=backend, dtype=dtype, ulp=ULP)


@pytest.mark.parametrize("ord", [2, 1, math.inf])
def test_tree_norm_python_float_leaves_as_optax(backend, optax_ref, ord):
    # issue 28 item 4: optax's own test tree, Python floats as leaves, which anyclip refused
    floats = (1.0, {"k1": 1.0, "k2": (1.0, 1.0)}, 1.0)
    import jax

    jax.config.update("jax_enable_x64", False)  # optax's weak floats: float32 without x64
    # optax on the CPU, as anyclip's NumPy result below: on a machine with a GPU (JAX's
    # default device there) optax's float32 sqrt(5) was 2.2360678 (an H200), 1 ULP below the
    # correctly rounded 2.236068 that anyclip, NumPy and optax on the CPU give
    try:
        with jax.default_device(jax.devices("cpu")[0]):
            want = np.asarray(optax_ref.tree.norm(floats, ord=ord))
        x = np.array([3.0, -4.0], np.float32)
        mixed_want = np.asarray(optax_ref.tree.norm((2.0, [x, 0.5]), ord=ord))
    finally:
        jax.config.update("jax_enable_x64", True)
    got = tree.norm(floats, ord=ord)
    assert_array(got, want, backend=load_backend("numpy"), dtype="float32", ulp=0)
    if backend.library == "jax":  # optax's, in the same x64 setting (on: float64 floats)
        mixed_want = np.asarray(optax_ref.tree.norm((2.0, [jax.numpy.asarray(x), 0.5]), ord))
    mixed = tree.norm((2.0, [backend.asarray(x, "float32"), 0.5]), ord=ord)
    assert_array(mixed, mixed_want, backend=backend, dtype=str(mixed_want.dtype), ulp=ULP)


@pytest.mark.parametrize("ord", [2, 1, math.inf])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
def test_tree_norm_python_float_beside_narrow_leaves_as_optax(optax_ref, ord, dtype, x64):
    """A Python float leaf is of JAX's default float dtype in optax, whatever the arrays'.

    optax sums each leaf on its own (``jnp.sum`` of a Python float: a strongly typed
    float32, float64 with x64), then adds the sums with promotion: beside a float16 leaf
    the norm is float32 (float64), and the float counts unrounded. anyclip took the float
    in the arrays' dtype: a float16 norm, ``302`` for optax's ``302.08252`` (ord 1).
    """
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", x64)
    try:
        t = (2.0825158101210244, [jnp.asarray([300.0, -4.0], dtype), 0.5])
        want = optax_ref.tree.norm(t, ord=ord)
        got = tree.norm(t, ord=ord)
    finally:
        jax.config.update("jax_enable_x64", True)
    assert isinstance(got, jax.Array)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("ord", [2, 1, math.inf])
def test_tree_norm_complex_matches_optax(backend, optax_ref, ord):
    rng = np.random.default_rng(6)
    z = (rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))).astype(np.complex64)
    data = {"z": z, "r": rng.standard_normal(4).astype(np.float32)}
    want = _ref(lambda t: optax_ref.tree.norm(t, ord=ord), data)
    backend.dtype("complex64")
    got = tree.norm({"z": backend.asarray(z, "complex64"), "r": backend.asarray(data["r"])}, ord)
    assert_array(got, want, backend=backend, dtype="float32", ulp=ULP)


@pytest.mark.parametrize("ord", [2, 1, math.inf])
@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize(
    "dtypes", [("float16", "float32", "float64"), ("float64", "float16"), ("float32", "float16")]
)
def test_tree_norm_mixed_dtypes_matches_optax(backend, optax_ref, ord, squared, dtypes):
    # optax 0.2.8 reduces each leaf in its own dtype (jnp.sum: a float16 leaf summed in
    # float32, rounded to float16), then adds the sums left to right with promotion
    rng = np.random.default_rng(7)
    data = {
        f"{i}_{dt}": (rng.standard_normal(37) * (3.0 + i)).astype(dt) for i, dt in enumerate(dtypes)
    }
    for dt in dtypes:
        backend.dtype(dt)
    want = _ref(lambda t: optax_ref.tree.norm(t, ord=ord, squared=squared), data)
    got = tree.norm({k: backend.asarray(v, str(v.dtype)) for k, v in data.items()}, ord, squared)
    wide = "float64" if "float64" in dtypes else "float32"
    assert str(want.dtype) == wide
    # a float32 leaf's sum (another backend's order: a float32 ULP or two) enters a float64
    # total: ULP counts in float32 units there (2 ** 29 float64 ULP each)
    ulp = ULP * 2**29 if wide == "float64" and "float32" in dtypes else ULP
    assert_array(got, want, backend=backend, dtype=wide, ulp=ulp)


def test_tree_norm_inf_skips_empty_leaves(backend, optax_ref):
    data = {"e": np.zeros((0, 3), np.float32), "v": np.array([-2.0, 1.5], np.float32)}
    want = _ref(lambda t: optax_ref.tree.norm(t, ord=math.inf), data)
    got = tree.norm(_on(backend, data, "float32"), ord=math.inf)
    assert_array(got, want, backend=backend, dtype="float32")


def test_global_norm_refuses_complex_and_points_at_tree_norm(backend):
    backend.dtype("complex64")
    z = backend.asarray(np.array([3 + 4j], np.complex64), "complex64")
    with pytest.raises(TypeError, match=r"`tree` leaves must be real.*anyclip\.tree\.norm"):
        tree.global_norm({"z": z})


def test_tree_norm_bad_ord():
    with pytest.raises(ValueError, match=r"`ord` must be 1, 2.*got 3"):
        tree.norm([np.ones(2)], ord=3)


# ------------------------------------------------------------ tree.clip_by_value
@pytest.mark.parametrize(("lo", "hi"), [(None, 0.5), (-0.5, None), (None, None)])
def test_tree_clip_by_value_none_bound_matches_optax_tree_clip(backend, optax_ref, lo, hi):
    data = {"w": np.array([-2.0, -0.25, 0.0, 0.75, np.inf, -np.inf], np.float32), "n": None}
    want = _ref(lambda t: optax_ref.tree.clip(t, lo, hi), {"w": data["w"]})
    got = tree.clip_by_value(_on(backend, data, "float32"), lo, hi)
    assert got["n"] is None
    assert_array(got["w"], want["w"], backend=backend, dtype="float32")


def test_tree_clip_by_value_none_bound_integers(backend, make):
    got = tree.clip_by_value([make([-5, 0, 7], "int32")], None, 3)
    # jnp.clip(x, None, 3) of int32 is minimum(x, 3)
    assert_array(got[0], np.array([-5, 0, 3], np.int32), backend=backend, dtype="int32")


def test_top_level_clip_by_value_keeps_tfs_refusal_of_none(make):
    with pytest.raises(
        ValueError, match=r"`clip_value_min` must be a number or an array, got None"
    ):
        anyclip.clip_by_value(make([1.0, 2.0]), None, 1.0)


# ------------------------------------------------------------------- block RMS
@pytest.mark.parametrize("threshold", [0.05, 1.0, 100.0])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clip_by_block_rms_matches_optax(backend, optax_ref, threshold, dtype):
    data = _tree_data(dtype)
    tx = optax_ref.clip_by_block_rms(threshold)
    want = _ref(
        lambda u: tx.update(u, tx.init(u))[0], {k: v for k, v in data.items() if v is not None}
    )
    got = tree.clip_by_block_rms(_on(backend, data, dtype), threshold)
    assert got["none"] is None
    for k, v in want.items():
        assert_array(got[k], v, backend=backend, dtype=dtype, ulp=ULP, what=k)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_clip_by_block_rms_half_types_are_optaxs_bits(backend, optax_ref, dtype):
    # fuzzing round 4 (issue 28): one half ulp off optax on ~10 % of leaves, the mean's sum
    # rounded to the half type before the division (jnp.mean divides in float32, then rounds)
    backend.dtype(dtype)  # skips a backend without it
    import jax.numpy as jnp
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    rng = np.random.default_rng(28)
    data = {}
    for i in range(200):
        shape = tuple(rng.integers(1, 9, size=int(rng.integers(1, 3))))
        data[f"l{i}"] = (rng.standard_normal(shape) * 10 ** rng.uniform(-0.5, 1.5)).astype(np_dtype)
    if dtype == "bfloat16" or backend.library == "jax":  # optax itself, bit for bit
        tx = optax_ref.clip_by_block_rms(0.5)
        want = _ref(lambda u: tx.update(u, tx.init(u))[0], data)
    else:
        # XLA rewrites float16 u / d as u * (1 / d) (1 ulp from the division, as for
        # normalize; anyclip on JAX does too): optax's mean (jnp.mean), then its formula
        # rounded op by op
        want = {}
        for k, u in data.items():
            mean = np.asarray(jnp.mean(jnp.asarray(u) * jnp.asarray(u)))
            want[k] = u / np.maximum(np_dtype(1), np.sqrt(mean) / np_dtype(0.5))
    clipped = sum(not np.array_equal(want[k], data[k]) for k in data)
    assert clipped > 150  # most leaves are clipped: the mean decides their values
    got = tree.clip_by_block_rms(_on(backend, data, dtype), 0.5)
    for k, v in want.items():
        assert_array(got[k], v, backend=backend, dtype=dtype, ulp=0, what=k)


@jax_backends
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clip_by_block_rms_eager_jax_is_optaxs_bits(backend, optax_ref, dtype):
    # fuzzing round (2026-11-29): eagerly 1 ULP off optax on 28 of 300 float32 leaves (23 of
    # 300 float64): optax's jnp.mean divides inside one compiled reduction, which XLA rounds
    # otherwise than a separate eager division (under jit both were equal)
    # 120 leaves of six sizes (one eager compile per size): the old division differed on 13
    # (float32) and 7 (float64) of them
    rng = np.random.default_rng(1129)
    sizes = (3, 5, 7, 12, 17, 31)
    data = {}
    for i in range(120):
        data[f"l{i}"] = rng.standard_normal(sizes[int(rng.integers(0, len(sizes)))]).astype(dtype)
    tx = optax_ref.clip_by_block_rms(1.8108222e-4)
    want = _ref(lambda u: tx.update(u, tx.init(u))[0], data)
    got = tree.clip_by_block_rms(_on(backend, data, dtype), 1.8108222e-4)
    for k, v in want.items():
        assert_array(got[k], v, backend=backend, dtype=dtype, ulp=0, what=k)


@jax_backends
def test_optax_clip_by_block_rms_transformation(backend, optax_ref):
    import anyclip.optax as ao

    data = {k: v for k, v in _tree_data("float32").items() if v is not None}
    ref_tx, tx = optax_ref.clip_by_block_rms(0.3), ao.clip_by_block_rms(0.3)
    want = _ref(lambda u: ref_tx.update(u, ref_tx.init(u))[0], data)
    upd = _on(backend, data, "float32")
    state = tx.init(upd)
    assert state == optax_ref.EmptyState()
    got, _ = backend.module.jit(tx.update)(upd, state)
    for k, v in want.items():
        assert_array(got[k], v, backend=backend, dtype="float32", ulp=ULP, what=k)


# ------------------------------------------------------------------ AGC: optax
#: JAX's layouts (output channel last), one of each rank optax infers, plus a squeezable one
AGC_SHAPES = [(7,), (1, 6), (5, 4), (2, 5, 4), (3, 3, 4, 5), (2, 2, 2, 3, 4)]


def _agc_data(shape: tuple[int, ...], dtype: str) -> tuple[dict[str, Any], dict[str, Any]]:
    rng = np.random.default_rng([7, *shape])
    p = rng.standard_normal(shape) * 0.5
    # gradient units from far below to far above the threshold: some clipped, some not
    scales = np.geomspace(1e-4, 1.0, shape[-1])
    g = rng.standard_normal(shape) * scales
    p[..., 0] = 0.0  # a zero unit: eps sets its threshold
    return {"p": p.astype(dtype)}, {"p": g.astype(dtype)}


@pytest.mark.parametrize("shape", AGC_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adaptive_clip_matches_optax(backend, optax_ref, shape, dtype):
    params, grads = _agc_data(shape, dtype)
    tx = optax_ref.adaptive_grad_clip(0.02)
    want = _ref(lambda u, p: tx.update(u, tx.init(p), p)[0], grads, params)
    g, p = _on(backend, grads, dtype), _on(backend, params, dtype)
    g["frozen"], p["frozen"] = None, backend.asarray(np.ones(3), dtype)  # a None gradient
    got = tree.adaptive_clip(g, p, 0.02)
    assert got["frozen"] is None
    assert not np.array_equal(want["p"], grads["p"])  # the case clips something
    assert_array(got["p"], want["p"], backend=backend, dtype=dtype, ulp=ULP)


def test_adaptive_clip_pairs_dict_leaves_by_key_as_optax(backend, optax_ref):
    # JAX gives the gradients of a dict as a dict with sorted keys; parameters built in
    # another order were paired by position (silently wrong where the shapes agree). optax
    # pairs by key: so does anyclip, eagerly as under jax.jit.
    rng = np.random.default_rng(7)
    params = {
        "w": rng.standard_normal((3, 4)).astype("float32"),
        "v": (rng.standard_normal((3, 4)) * 100).astype("float32"),
    }
    grads = {k: np.ones((3, 4), "float32") for k in sorted(params)}  # keys v, w
    tx = optax_ref.adaptive_grad_clip(0.01)
    want = _ref(lambda u, p: tx.update(u, tx.init(p), p)[0], grads, params)
    got = tree.adaptive_clip(_on(backend, grads, "float32"), _on(backend, params, "float32"), 0.01)
    assert list(got) == ["v", "w"]
    assert not np.array_equal(want["v"], want["w"])  # a pairing by position gives other values
    for k in ("v", "w"):
        assert_array(got[k], want[k], backend=backend, dtype="float32", ulp=ULP, what=k)


#: (grads, params, where the error points) as functions of a leaf: optax refuses every pair
STRUCTURE_MISMATCHES = {
    "other keys": (lambda x: {"a": x, "b": x}, lambda x: {"b": x, "c": x}, "the root"),
    "one more key": (lambda x: {"a": x, "b": x}, lambda x: {"a": x, "b": x, "c": x}, "the root"),
    "dict and list": (lambda x: {"a": x}, lambda x: [x], "the root"),
    "inner length": (lambda x: {"a": (x, x)}, lambda x: {"a": (x,)}, r"grads\['a'\]"),
    "list and leaf": (lambda x: {"a": [x]}, lambda x: {"a": x}, r"grads\['a'\]"),
}
#: jax.tree.map's error, which optax raises: JAX 0.10.2 speaks of the trees' structure; JAX
#: 0.5.3 (the floor) names the mismatch ("Dict key mismatch; expected keys: ['a', 'b']; ...")
OPTAX_STRUCTURE_ERROR = (
    r"structure|^Dict key mismatch; |^Tuple arity mismatch: |^Expected (dict|list), got "
)


@pytest.mark.parametrize("case", sorted(STRUCTURE_MISMATCHES))
def test_adaptive_clip_refuses_another_structure_as_optax(backend, optax_ref, case):
    # fuzzing round 4: grads {a, b} with params {b, c} (equal shapes) clipped g["a"] with
    # p["b"]'s norm; optax's jax.tree.map raises a structure error. So does anyclip.
    make_grads, make_params, where = STRUCTURE_MISMATCHES[case]
    ones = np.ones((2, 3), "float32")
    tx = optax_ref.adaptive_grad_clip(0.01)
    with pytest.raises(ValueError, match=OPTAX_STRUCTURE_ERROR):  # optax's own error
        _ref(lambda u, p: tx.update(u, tx.init(p), p)[0], make_grads(ones), make_params(ones))
    g = backend.asarray(ones, "float32")
    with pytest.raises(
        ValueError, match=rf"`params` must have the structure of `grads`: at {where}, `grads` has"
    ):
        tree.adaptive_clip(make_grads(g), make_params(g * 2), 0.01)


def test_adaptive_clip_pairs_a_tuple_with_a_list(backend, optax_ref):
    # documented leniency: torch.autograd.grad gives a tuple for a list of parameters
    params, grads = (d["p"] for d in _agc_data((3, 4), "float32"))
    tx = optax_ref.adaptive_grad_clip(0.02)
    want = _ref(lambda u, p: tx.update(u, tx.init(p), p)[0], [grads], [params])[0]
    g, p = backend.asarray(grads, "float32"), backend.asarray(params, "float32")
    (got,) = tree.adaptive_clip((g,), [p], 0.02)
    assert not np.array_equal(want, grads)  # the case clips something
    assert_array(got, want, backend=backend, dtype="float32", ulp=ULP)


@jax_backends
@pytest.mark.parametrize("case", sorted(STRUCTURE_MISMATCHES))
def test_optax_adaptive_grad_clip_refuses_another_structure(backend, optax_ref, case):
    from anyclip.optax import adaptive_grad_clip

    make_grads, make_params, _ = STRUCTURE_MISMATCHES[case]
    g = backend.asarray(np.ones((2, 3)), "float32")
    tx = adaptive_grad_clip(0.01)
    with pytest.raises(ValueError, match=r"`params` must have the structure of `grads`"):
        tx.update(make_grads(g), tx.init(make_params(g)), make_params(g))


@pytest.mark.parametrize("axis", [1, (0, 2), -1])
def test_adaptive_clip_axis_matches_optax(backend, optax_ref, axis):
    params, grads = _agc_data((3, 4, 5), "float32")
    tx = optax_ref.adaptive_grad_clip(0.02, axis=axis)
    want = _ref(lambda u, p: tx.update(u, tx.init(p), p)[0], grads, params)
    got = tree.adaptive_clip(
        _on(backend, grads, "float32"), _on(backend, params, "float32"), 0.02, axis=axis
    )
    assert_array(got["p"], want["p"], backend=backend, dtype="float32", ulp=ULP)


@jax_backends
def test_optax_adaptive_grad_clip_trains_as_optax_under_jit(backend, optax_ref):
    import jax

    import anyclip.optax as ao

    params, grads = _agc_data((3, 3, 4, 5), "float32")
    params["b"], grads["b"] = params["p"][0, 0, 0], grads["p"][0, 0, 0] * 10

    def run(clip: Any) -> Any:
        tx = optax_ref.chain(clip, optax_ref.sgd(0.5))
        p = jax.tree.map(backend.asarray, params)
        g = jax.tree.map(backend.asarray, grads)
        state = tx.init(p)

        @jax.jit
        def step(p: Any, state: Any) -> Any:
            updates, state = tx.update(jax.tree.map(lambda a, b: a + 0.1 * b, g, p), state, p)
            return optax_ref.apply_updates(p, updates), state

        for _ in range(3):
            p, state = step(p, state)
        return p

    want = jax.tree.map(np.asarray, run(optax_ref.adaptive_grad_clip(0.02)))
    got = run(ao.adaptive_grad_clip(0.02))
    for k, v in want.items():
        assert_array(got[k], v, backend=backend, dtype="float32", ulp=ULP, what=k)


@jax_backends
def test_optax_adaptive_grad_clip_needs_params(backend, optax_ref):
    import anyclip.optax as ao

    tx = ao.adaptive_grad_clip(0.01)
    with pytest.raises(ValueError, match="`params` must be passed"):
        tx.update({"w": backend.asarray([1.0])}, tx.init(None))


# ------------------------------------------------------------------- AGC: timm
def _timm_case(case: str) -> tuple[str, float, float]:
    dtype, _, norm_type, clip = case.split("/")
    return dtype, float(norm_type), float(clip)


def _timm_ulp(backend: Backend, dtype: str) -> float:
    """The budget against timm's data: none in float16 and bfloat16 (a GPU's sum order aside).

    A half-precision unit norm is a float32 sum rounded once to the dtype, where a float32
    norm's last bits follow the backend's sum order (:data:`ULP`).
    """
    return gpu_budget("device-sum-order", backend.name, 0 if dtype in TIMM_HALF else ULP)


def test_timm_data_provenance():
    prov = json.loads(str(TIMM["provenance"]))
    assert prov["timm_commit"] and prov["torch"] and "adaptive_clip_grad" in prov["call"]
    assert len(TIMM_CASES) == 128
    assert {c.split("/", 1)[0] for c in TIMM_CASES} == {"float32", "float64", *TIMM_HALF}
    assert prov["half_scale"] == 1000.0


@pytest.mark.parametrize("case", TIMM_CASES)
def test_adaptive_clip_timm_layout_matches_timm(backend, case):
    dtype, norm_type, clip = _timm_case(case)
    p = backend.asarray(TIMM[f"{case}/p"], dtype) if backend.has_dtype(dtype) else None
    if p is None:
        pytest.skip(f"{backend.name} has no {dtype}")
    g = backend.asarray(TIMM[f"{case}/g"], dtype)
    got = tree.adaptive_clip([g], [p], clip, TIMM_EPS, layout="timm", norm_type=norm_type)
    ulp = _timm_ulp(backend, dtype)  # a GPU's sum order: declared
    assert_array(got[0], TIMM[f"{case}/out"], backend=backend, dtype=dtype, ulp=ulp)


@jax_backends
@pytest.mark.parametrize("case", [c for c in TIMM_CASES if c.startswith(TIMM_HALF)])
def test_adaptive_clip_timm_layout_half_under_jax_jit_matches_timm(backend, case):
    """The half dtypes under ``jax.jit``: XLA's float16 and bfloat16 arithmetic on the CPU."""
    jax = backend.module
    dtype, norm_type, clip = _timm_case(case)
    p = backend.asarray(TIMM[f"{case}/p"], dtype)
    g = backend.asarray(TIMM[f"{case}/g"], dtype)
    fn = jax.jit(
        lambda g, p: tree.adaptive_clip(
            [g], [p], clip, TIMM_EPS, layout="timm", norm_type=norm_type
        )
    )
    ulp = _timm_ulp(backend, dtype)
    assert_array(fn(g, p)[0], TIMM[f"{case}/out"], backend=backend, dtype=dtype, ulp=ulp)


def _timm_arithmetic(torch: Any, p: Any, g: Any, clip: float, norm_type: float = 2.0) -> Any:
    """timm's ``adaptive_clip_grad`` body on one tensor of rank 2 or more, op for op.

    A test-only transcription of ``timm/utils/agc.py`` (huggingface/pytorch-image-models at
    commit ``15d1dbc896dde826b89d1aab479f9bd4ffda085a``, the file ``make_timm_agc.py`` ran for
    ``timm_agc.npz``): its ``unitwise_norm`` is torch's ``Tensor.norm`` over every axis but
    the first; ``clip`` and the floors are Python numbers, as there. It gives the committed
    file's bits on every case of rank 2 or more (``test_timm_arithmetic_is_timms_data``).
    """
    dim = tuple(range(1, p.ndim))
    max_norm = p.norm(norm_type, dim=dim, keepdim=True).clamp_(min=TIMM_EPS).mul_(clip)
    grad_norm = g.norm(norm_type, dim=dim, keepdim=True)
    clipped = g * (max_norm / grad_norm.clamp(min=1e-6))
    return torch.where(grad_norm < max_norm, g, clipped)


@pytest.mark.parametrize("case", [c for c in TIMM_CASES if "x" in c.split("/")[1]])
def test_timm_arithmetic_is_timms_data(case):
    """The transcription gives what timm's own file gave (``timm_agc.npz``), bit for bit."""
    torch = pytest.importorskip("torch")
    dtype, norm_type, clip = _timm_case(case)
    tdt = getattr(torch, dtype)
    p = torch.from_numpy(TIMM[f"{case}/p"]).to(tdt)
    g = torch.from_numpy(TIMM[f"{case}/g"]).to(tdt)
    got = _timm_arithmetic(torch, p, g, clip, norm_type)
    want = torch.from_numpy(TIMM[f"{case}/out"]).to(tdt)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=case)


@pytest.mark.parametrize("dtype", TIMM_HALF)
@pytest.mark.parametrize("clip", [0.01, 0.02, 0.05, 0.1, 0.3])
def test_adaptive_clip_timm_layout_half_is_timms_bits(backend, dtype, clip):
    """float16 and bfloat16: timm's bits, its product with ``clip_factor`` in float32 included.

    Found by fuzzing: up to 2 ULP from timm where ``maximum(p_norm, eps)`` was multiplied by
    ``clip_factor`` rounded to the dtype; timm's ``.mul_(clip_factor)`` (torch's opmath for a
    Python number) multiplies in float32 by the factor rounded to float32 and rounds once.
    400 units of 9 (norms from 1e-3 to 1e3, half of them clipped), against
    :func:`_timm_arithmetic` run on torch.
    """
    torch = pytest.importorskip("torch")
    backend.dtype(dtype)  # skips a dtype the backend lacks
    rng = np.random.default_rng([7, int(clip * 100), len(dtype)])
    scale = np.geomspace(1e-3, 1e3, 400)[:, None]
    p = rng.standard_normal((400, 9)) * scale
    g = p * clip * rng.uniform(0.5, 2.0, (400, 1)) * rng.standard_normal((400, 9))
    tdt = getattr(torch, dtype)
    pt, gt = torch.from_numpy(p).to(tdt), torch.from_numpy(g).to(tdt)
    want = _timm_arithmetic(torch, pt, gt, clip)
    assert not torch.equal(want, gt) and torch.isfinite(want).all()  # some units clipped
    pa, ga = backend.asarray(pt.float().numpy(), dtype), backend.asarray(gt.float().numpy(), dtype)
    got = tree.adaptive_clip([ga], [pa], clip, TIMM_EPS, layout="timm")
    ulp = gpu_budget("device-sum-order", backend.name, 0)  # a GPU's float32 sum order
    assert_array(got[0], want.float().numpy(), backend=backend, dtype=dtype, ulp=ulp)


@pytest.mark.parametrize("dtype", TIMM_HALF)
@pytest.mark.parametrize(
    ("p", "g", "want16"),
    [
        ([[300.0, 0.0]], [[10.0, 0.0]], [[3.0, 0.0]]),  # p's unit norm 300: not inf
        ([[1000.0, 0.0]], [[300.0, 0.0]], [[10.0, 0.0]]),  # g's too: not inf / inf = NaN
    ],
)
def test_adaptive_clip_timm_layout_half_norms_above_256(backend, dtype, p, g, want16):
    """Unit norms from 256 up: timm's are accumulated in float32, not inf in float16.

    Found by fuzzing: float16 squares in the dtype made the first example unclipped and the
    second NaN. Against timm's own arithmetic (torch's ``Tensor.norm``; ``want16``: its
    float16 values), bit for bit.
    """
    torch = pytest.importorskip("torch")
    backend.dtype(dtype)  # skips a dtype the backend lacks
    tdt = getattr(torch, dtype)
    ref = _timm_arithmetic(torch, torch.tensor(p, dtype=tdt), torch.tensor(g, dtype=tdt), 0.01)
    want = ref.float().numpy()
    assert np.isfinite(want).all()
    if dtype == "float16":
        np.testing.assert_array_equal(want, np.asarray(want16, np.float32))
    ga = backend.asarray(np.asarray(g, np.float32), dtype)
    pa = backend.asarray(np.asarray(p, np.float32), dtype)
    got = tree.adaptive_clip([ga], [pa], 0.01, TIMM_EPS, layout="timm")
    assert_array(got[0], want, backend=backend, dtype=dtype)
    if backend.library == "torch":
        from anyclip.torch import adaptive_clip_grad_

        param = backend.module.nn.Parameter(pa)
        param.grad = ga
        adaptive_clip_grad_([param], 0.01, TIMM_EPS)
        assert_array(param.grad, want, backend=backend, dtype=dtype)


def test_adaptive_clip_optax_layout_half_norms_stay_in_the_dtype(optax_ref):
    """``layout="optax"`` keeps optax's float16 unit norm (in the dtype: inf from 256, NaN)."""
    import jax.numpy as jnp

    p, g = np.array([[1000.0], [0.0]], np.float16), np.array([[300.0], [0.0]], np.float16)
    tx = optax_ref.adaptive_grad_clip(0.01)
    want = np.asarray(tx.update([jnp.asarray(g)], tx.init(None), [jnp.asarray(p)])[0][0])
    assert np.isnan(want).all()  # optax's own overflow
    got = tree.adaptive_clip([g], [p], 0.01)[0]
    np.testing.assert_array_equal(got, want)


@jax_backends
@pytest.mark.parametrize("norm_type", [2.0, math.inf, 3.0])
@pytest.mark.parametrize("dtype", TIMM_HALF)
def test_adaptive_clip_timm_layout_half_with_group_matches_timm(backend, dtype, norm_type):
    """``group=``: float32 partial sums, all-reduced in float32 (an axis name under ``vmap``).

    Each unit of a timm case split in two along its input axis, one half per member of the
    mapped axis: every member's half of the clipped gradient is timm's.
    """
    jax = backend.module
    case = f"{dtype}/6x4/{norm_type!r}/0.01"
    p = backend.asarray(TIMM[f"{case}/p"], dtype)
    g = backend.asarray(TIMM[f"{case}/g"], dtype)
    halves = lambda a: jax.numpy.stack([a[:, :2], a[:, 2:]])  # noqa: E731
    fn = jax.vmap(
        lambda g, p: tree.adaptive_clip(
            [g], [p], 0.01, TIMM_EPS, layout="timm", norm_type=norm_type, group="x"
        )[0],
        axis_name="x",
    )
    for run in (fn, jax.jit(fn)):
        out = run(halves(g), halves(p))
        got = jax.numpy.concatenate([out[0], out[1]], axis=1)
        ulp = _timm_ulp(backend, dtype)
        assert_array(got, TIMM[f"{case}/out"], backend=backend, dtype=dtype, ulp=ulp)


@torch_backends
@pytest.mark.parametrize("case", [c for c in TIMM_CASES if c.startswith(("float32", *TIMM_HALF))])
def test_torch_adaptive_clip_grad_matches_timm(backend, case):
    from anyclip.torch import adaptive_clip_grad_

    torch = backend.module
    dtype, norm_type, clip = _timm_case(case)
    p = torch.nn.Parameter(backend.asarray(TIMM[f"{case}/p"], dtype))
    p.grad = backend.asarray(TIMM[f"{case}/g"], dtype)
    grad_before = p.grad
    frozen = torch.nn.Parameter(backend.asarray(TIMM[f"{case}/p"], dtype))  # no gradient
    assert adaptive_clip_grad_([frozen, p], clip, TIMM_EPS, norm_type) is None
    assert p.grad is grad_before  # in place, as timm's copy_
    assert frozen.grad is None
    ulp = _timm_ulp(backend, dtype) if dtype in TIMM_HALF else ULP
    assert_array(p.grad, TIMM[f"{case}/out"], backend=backend, dtype=dtype, ulp=ulp)
    assert_array(p.detach(), TIMM[f"{case}/p"], backend=backend, dtype=dtype)


def test_torch_adaptive_clip_grad_has_timms_signature():
    import inspect

    at = pytest.importorskip("anyclip.torch")
    params = inspect.signature(at.adaptive_clip_grad_).parameters
    # timm's parameters, in timm's order; anyclip's additions are keyword-only after them
    assert [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY] == ["group"]
    assert [(n, p.default) for n, p in params.items() if p.kind is not p.KEYWORD_ONLY] == [
        ("parameters", inspect.Parameter.empty),
        ("clip_factor", 0.01),
        ("eps", 1e-3),
        ("norm_type", 2.0),
    ]


# ------------------------------------------------------------- AGC: gradients
def test_adaptive_clip_gradients_match_optax(grad_backend, optax_ref):
    import jax
    import jax.numpy as jnp

    backend = grad_backend
    params, grads = _agc_data((5, 4), "float64")
    weights = np.random.default_rng(3).standard_normal((5, 4))
    tx = optax_ref.adaptive_grad_clip(0.02)

    def ref_loss(g: Any, p: Any) -> Any:
        out = tx.update({"p": g}, tx.init({"p": p}), {"p": p})[0]["p"]
        return jnp.sum(out * weights)

    want = jax.grad(ref_loss, argnums=(0, 1))(jnp.asarray(grads["p"]), jnp.asarray(params["p"]))
    got = backend.grad(
        lambda g, p: tree.adaptive_clip([g], [p], 0.02)[0],
        [backend.asarray(grads["p"], "float64"), backend.asarray(params["p"], "float64")],
        backend.asarray(weights, "float64"),
    )
    for name, w, a in zip(("grads", "params"), want, got, strict=True):
        # sums of products of opposite signs: ulps of the gradient's scale, not of each entry
        w = np.asarray(w)
        scale = float(np.nanmax(np.abs(w)))  # NaN where p_norm = 0, as sqrt at 0 gives
        assert_array(a, w, backend=backend, dtype="float64", ulp=ULP, scale=scale, what=name)


def test_tree_norm_gradient_matches_optax(grad_backend, optax_ref):
    import jax
    import jax.numpy as jnp

    backend = grad_backend
    x = np.random.default_rng(4).standard_normal((3, 4))
    for ord in (1, 2, math.inf):
        want = jax.grad(lambda a, o=ord: optax_ref.tree.norm([a], ord=o))(jnp.asarray(x))
        (got,) = backend.grad(
            lambda a, o=ord: tree.norm([a], ord=o),
            [backend.asarray(x, "float64")],
            backend.asarray(1.0, "float64"),
        )
        assert_array(
            got, np.asarray(want), backend=backend, dtype="float64", ulp=ULP, what=str(ord)
        )


# ------------------------------------------------------------------- compiled
@jax_backends
def test_adaptive_clip_and_norm_under_jax_jit(backend, optax_ref):
    import jax

    params, grads = _agc_data((3, 3, 4, 5), "float32")
    tx = optax_ref.adaptive_grad_clip(0.02)
    want = _ref(lambda u, p: tx.update(u, tx.init(p), p)[0], grads, params)
    g, p = _on(backend, grads, "float32"), _on(backend, params, "float32")
    got = jax.jit(lambda g, p, c: tree.adaptive_clip(g, p, c))(g, p, backend.asarray(0.02))
    assert_array(got["p"], want["p"], backend=backend, dtype="float32", ulp=ULP)
    want_n = _ref(lambda t: optax_ref.tree.norm(t, ord=1), grads)
    got_n = jax.jit(lambda t: tree.norm(t, ord=1))(g)
    assert_array(got_n, want_n, backend=backend, dtype="float32", ulp=ULP)


@torch_backends
def test_adaptive_clip_grad_under_torch_compile_fullgraph(backend):
    from anyclip.torch import adaptive_clip_grad_

    torch = backend.module
    case = "float32/4x3x3x3/2.0/0.01"
    p = torch.nn.Parameter(backend.asarray(TIMM[f"{case}/p"]))
    p.grad = backend.asarray(TIMM[f"{case}/g"])
    torch._dynamo.reset()
    try:
        torch.compile(lambda ps: adaptive_clip_grad_(ps, 0.01), fullgraph=True)([p])
    finally:
        torch._dynamo.reset()
    assert_array(p.grad, TIMM[f"{case}/out"], backend=backend, dtype="float32", ulp=ULP)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"clip_factor": 0.0}, "clip_factor"),
        ({"clip_factor": -0.1}, "clip_factor"),
        ({"clip_factor": math.nan}, "clip_factor"),
        ({"eps": -1.0}, "eps"),
        ({"norm_type": 0.0}, "norm_type"),
        ({"norm_type": -1.0}, "norm_type"),
        ({"norm_type": -math.inf}, "norm_type"),
    ],
)
def test_adaptive_clip_grad_refuses_what_timm_runs(backend, kwargs, name):
    """The refusals docs/porting.md lists: timm's arithmetic runs them, anyclip names them."""
    torch = backend.module
    from anyclip.torch import adaptive_clip_grad_

    args = {"clip_factor": 0.01, "eps": TIMM_EPS, "norm_type": 2.0, **kwargs}
    p = torch.nn.Parameter(torch.tensor([[3.0, 4.0], [0.0, 1.0]]))
    g = torch.tensor([[0.3, 0.4], [0.0, 0.5]])
    dim = (1,)  # timm's unitwise_norm of a rank-2 tensor, its eps floor as given
    max_norm = p.detach().norm(args["norm_type"], dim=dim, keepdim=True)
    max_norm = max_norm.clamp_(min=args["eps"]).mul_(args["clip_factor"])
    grad_norm = g.norm(args["norm_type"], dim=dim, keepdim=True)
    want = torch.where(grad_norm < max_norm, g, g * (max_norm / grad_norm.clamp(min=1e-6)))
    assert want.shape == g.shape  # timm runs
    p.grad = g.clone()
    with pytest.raises(ValueError, match=rf"`{name}` must be"):
        adaptive_clip_grad_([p], **args)
    assert torch.equal(p.grad, g)  # refused before any gradient changed


# ---------------------------------------------------------------------- errors
def test_adaptive_clip_errors_name_the_argument():
    p, g = [np.ones((2, 3))], [np.ones((2, 3))]
    with pytest.raises(ValueError, match=r"`clipping` must be > 0, got 0"):
        tree.adaptive_clip(g, p, 0.0)
    with pytest.raises(ValueError, match=r"`clipping` must be > 0, got -0.1"):
        tree.adaptive_clip(g, p, -0.1)
    with pytest.raises(
        ValueError, match=r"`layout` must be one of \('optax', 'timm'\), got 'oihw'"
    ):
        tree.adaptive_clip(g, p, layout="oihw")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`layout='optax'` infers .* ranks 1 to 5.*pass `axis=`"):
        tree.adaptive_clip([np.ones((2,) * 6)], [np.ones((2,) * 6)])
    with pytest.raises(ValueError, match=r"`axis` must hold integers in \[-2, 2\)"):
        tree.adaptive_clip(g, p, axis=2)
    with pytest.raises(
        ValueError, match=r"`params` leaf 0 must have its gradient's shape \(2, 3\)"
    ):
        tree.adaptive_clip(g, [np.ones((3, 2))])
    with pytest.raises(ValueError, match=r"`params` must have the structure of `grads`"):
        tree.adaptive_clip(g, [np.ones((2, 3)), np.ones(2)])
    with pytest.raises(ValueError, match=r"`norm_type` must be a number > 0"):
        tree.adaptive_clip(g, p, norm_type=0)
    with pytest.raises(TypeError, match=r"`grads` leaves must have a real floating dtype, got int"):
        tree.adaptive_clip([np.ones((2, 3), np.int32)], p)


@torch_backends
def test_torch_adaptive_clip_grad_errors(backend):
    from anyclip.torch import adaptive_clip_grad_

    torch = backend.module
    p = torch.nn.Parameter(torch.ones(2, 3, device=backend.device))
    p.grad = torch.ones(2, 3, device=backend.device)
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match=r"`clip_factor` must be > 0"):
            adaptive_clip_grad_([p], clip_factor=bad)
    with pytest.raises(ValueError, match=r"`norm_type` must be a number > 0"):
        adaptive_clip_grad_([p], norm_type=-2.0)
    with pytest.raises(TypeError, match=r"`parameters` must be a tensor or an iterable"):
        adaptive_clip_grad_({"w": p})  # type: ignore[arg-type]
    assert_array(p.grad, np.ones((2, 3), np.float32), backend=backend, dtype="float32")


def test_optax_adapters_have_optaxs_signatures(optax_ref):
    import inspect

    import anyclip.optax as ao

    for name in ("adaptive_grad_clip", "clip_by_block_rms"):
        ours = inspect.signature(getattr(ao, name)).parameters
        theirs = inspect.signature(getattr(optax_ref, name)).parameters
        positional = [(n, p.default) for n, p in ours.items() if p.kind is not p.KEYWORD_ONLY]
        assert positional == [(n, p.default) for n, p in theirs.items()], name


@jax_backends
@pytest.mark.parametrize("name", ["clip", "clip_by_global_norm"])
def test_optax_thresholds_take_a_numpy_array_as_optax(backend, optax_ref, name):
    # fuzzing round (2026-11-29): optax takes np.asarray(0.5, np.float32); anyclip's
    # transformations refused it at the first update (an array of another library)
    import anyclip.optax as ao

    data = {"w": np.array([-2.0, 0.25, 3.0], np.float32)}
    threshold = np.asarray(0.5, np.float32)
    ref_tx, tx = getattr(optax_ref, name)(threshold), getattr(ao, name)(threshold)
    want = _ref(lambda u: ref_tx.update(u, ref_tx.init(u))[0], data)
    upd = _on(backend, data, "float32")
    got, _ = tx.update(upd, tx.init(upd))
    assert_array(got["w"], want["w"], backend=backend, dtype="float32", ulp=0)


# ------------------------------------- dask: unknown chunk sizes, chunks of no elements
def _dask_backend() -> Backend:
    pytest.importorskip("dask.array")
    return load_backend("dask")


def _selected(v: np.ndarray, keep: bool = True) -> Any:
    """``v`` selected by a dask mask along axis 0 (every row, or none): unknown chunk sizes."""
    import dask.array as da

    x = da.from_array(v, chunks=2)
    s = x[da.from_array(np.full(v.shape[0], keep), chunks=2)]
    assert math.isnan(s.shape[0])
    return s


def _lazily(fn: Any) -> Any:
    """``fn()``, which must build a dask graph without computing anything."""
    from dask.callbacks import Callback

    computes = []
    with Callback(start=lambda dsk: computes.append(1)):
        out = fn()
    assert not computes, "computed while building the graph"
    return out


UNKNOWN_SIZE_CALLS = {
    "block_rms": (
        lambda t: tree.clip_by_block_rms(t, 0.5),
        lambda o, t: o.clip_by_block_rms(0.5).update(t, None)[0],
    ),
    "norm_inf": (lambda t: tree.norm(t, ord=math.inf), lambda o, t: o.tree.norm(t, ord=math.inf)),
    "norm_2": (lambda t: tree.norm(t), lambda o, t: o.tree.norm(t)),
}


@pytest.mark.parametrize("name", UNKNOWN_SIZE_CALLS)
def test_unknown_chunk_sizes_match_optax(optax_ref, name):
    """Leaves of unknown chunk sizes (``x[mask]``), one of them empty when computed.

    The block RMS divided by the NaN size (every value NaN), and the inf-norm's maximum of
    the empty leaf failed to compute (``zero-size array to reduction operation maximum``);
    optax skips an empty leaf there.
    """
    dask_backend = _dask_backend()
    data = _tree_data("float32")
    data["e"] = np.arange(4, dtype=np.float32)
    lazy = {k: None if v is None else _selected(v, keep=k != "e") for k, v in data.items()}
    data["e"] = data["e"][:0]
    ours, theirs = UNKNOWN_SIZE_CALLS[name]
    got = _lazily(lambda: ours(lazy))
    want = _ref(lambda t: theirs(optax_ref, t), data)
    for k, g, w in _leaves_by_key(got, want):
        assert isinstance(g, type(lazy["w"])), k
        with np.errstate(all="ignore"):  # the empty leaf's mean is 0 / 0, as in optax
            computed = g.compute()  # an unknown shape: compared once computed
        assert computed.shape == np.shape(w), k
        assert_array(computed, w, backend=load_backend("numpy"), dtype="float32", ulp=ULP)
    assert dask_backend.library == "dask"


def _leaves_by_key(got: Any, want: Any) -> list[tuple[Any, Any, Any]]:
    """``(key, got[key], want[key])`` of dict results, ``(None, got, want)`` of a norm."""
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        return [(k, got[k], want[k]) for k in want if want[k] is not None]
    return [(None, got, want)]


def test_agc_optax_layout_refuses_an_unknown_length_that_decides_its_axes():
    """optax's unit axes of a ``(n, 4)`` leaf are every axis for ``n == 1``, axis 0 otherwise.

    Of ``x[mask]`` (``n`` unknown until computed) anyclip took axis 0 whatever ``n``; it now
    says to compute the chunk sizes (or pass ``axis=``). A 1-D leaf has one rule for every
    length and is taken.
    """
    _dask_backend()
    w = _selected(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"compute_chunk_sizes\(\)"):
        tree.adaptive_clip({"w": w}, {"w": w}, 0.01)
    b = _selected(np.ones(5, np.float32))
    out = _lazily(lambda: tree.adaptive_clip({"b": b}, {"b": b}, 0.01))
    assert out["b"].compute().shape == (5,)
    assert tree.adaptive_clip({"w": w}, {"w": w}, 0.01, axis=0)["w"].compute().shape == (3, 4)


EMPTY_CHUNK_CALLS = {
    "block_rms": UNKNOWN_SIZE_CALLS["block_rms"],
    "norm_inf": UNKNOWN_SIZE_CALLS["norm_inf"],
    "norm_1": (lambda t: tree.norm(t, ord=1), lambda o, t: o.tree.norm(t, ord=1)),
    "adaptive_clip": (
        lambda t: tree.adaptive_clip(t, t, 0.01),
        lambda o, t: o.adaptive_grad_clip(0.01).update(t, None, t)[0],
    ),
}


@pytest.mark.parametrize("name", EMPTY_CHUNK_CALLS)
def test_chunks_of_no_elements_match_optax(optax_ref, name):
    """A leaf of one row in chunks ``(1, 0, 0)``, as ``compute_chunk_sizes()`` leaves it.

    Dask computes such an array to the wrong shape (3 rows) or fails to; the tree functions
    drop the empty chunks first, as the eight functions do.
    """
    import dask.array as da

    dask_backend = _dask_backend()
    data = _tree_data("float32")
    data["r"] = data["w"][:1]
    lazy = {
        k: None if v is None else da.from_array(v, chunks=((1, 0, 0), (4,)) if k == "r" else 2)
        for k, v in data.items()
    }
    assert lazy["r"].chunks == ((1, 0, 0), (4,))
    ours, theirs = EMPTY_CHUNK_CALLS[name]
    got = _lazily(lambda: ours(lazy))
    want = _ref(lambda t: theirs(optax_ref, t), data)
    for k, g, w in _leaves_by_key(got, want):
        assert_array(g, w, backend=dask_backend, dtype="float32", ulp=ULP, what=str(k))
