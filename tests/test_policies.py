"""The two knobs anyclip adds to TF: ``nonfinite=`` and ``accumulate_dtype=``.

``nonfinite`` (``clip_by_global_norm`` only) says what an inf or NaN global norm does:

* ``"tf"``: every output is NaN, finite entries included (docs/tf-reference.md §4.2, §12 trap 4);
* ``"torch"``: what ``torch.nn.utils.clip_grad_norm_`` gives, whose factor is
  ``clamp(max_norm / (norm + 1e-6), max=1)`` (§4.3): 0 for an inf norm (finite entries become
  0, infinite ones NaN), NaN for a NaN norm;
* ``"skip"``: the inputs come back unchanged, bit for bit, and the returned norm reports it;
* ``"raise"``: ``FloatingPointError``.

``accumulate_dtype`` reduces float16 in float32: TF overflows at 256 (§2.3, §3.2, §6.7, §12 trap
10), float32 does not, and the result keeps the input dtype.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import anyclip
from anyclip import tree
from anyclip_conformance import assert_array, assert_same_bits

ULP = 3
INF = math.inf
NAN = math.nan
POLICIES = ("tf", "torch", "skip", "raise")

# name: (a, b, clip, norm) with b = [[12]] except where the case needs otherwise
NONFINITE = {
    "inf-entry": ([INF, 1.0, -2.0], [[12.0]], 1.0, INF),  # §4.2 "input contains inf"
    "neg-inf-entry": ([-INF, 1.0, -2.0], [[12.0]], 1.0, INF),
    "nan-entry": ([NAN, 1.0, -2.0], [[12.0]], 1.0, NAN),  # §4.2 "input contains nan"
    "overflow": ([1e20, 1.0], [[0.0]], 1.0, INF),  # §4.2: f32 [1e20, 1] has an inf norm
    "inf-and-nan": ([INF, NAN], [[3.0]], 1.0, NAN),  # inf*inf + nan is nan
}


def torch_formula(t: np.ndarray, norm: float, clip: float) -> np.ndarray:
    """torch's clip_grad_norm_ factor (§4.3), in float64: ``t * clamp(c / (n + 1e-6), max=1)``."""
    with np.errstate(invalid="ignore"):
        coef = np.minimum(clip / (norm + 1e-6), 1.0) if not math.isnan(norm) else NAN
        return np.asarray(t, dtype=np.float64) * coef


@pytest.fixture(params=list(NONFINITE))
def nonfinite_case(request, make):
    a, b, clip, norm = NONFINITE[request.param]
    return make(a), make(b), clip, norm


# ------------------------------------------------------------------ "tf"
def test_tf_all_nan(backend, nonfinite_case, check):
    a, b, clip, norm = nonfinite_case
    (ca, cb), n = anyclip.clip_by_global_norm([a, b], clip, nonfinite="tf")
    check(ca, [NAN] * a.shape[0], "float32", what="a")
    check(cb, [[NAN]], "float32", what="b")
    check(n, np.float32(norm), "float32", what="norm")


def test_tf_is_the_default(backend, nonfinite_case):
    a, b, clip, _ = nonfinite_case
    default, n0 = anyclip.clip_by_global_norm([a, b], clip)
    tf, n1 = anyclip.clip_by_global_norm([a, b], clip, nonfinite="tf")
    for d, t in zip(default, tf, strict=True):
        assert_same_bits(backend, d, t)
    assert_same_bits(backend, n0, n1, "norm")


# --------------------------------------------------------------- "torch"
def test_torch_formula(backend, nonfinite_case, check):
    a, b, clip, norm = nonfinite_case
    (ca, cb), n = anyclip.clip_by_global_norm([a, b], clip, nonfinite="torch")
    check(ca, torch_formula(backend.to_numpy(a), norm, clip), "float32", what="a")
    check(cb, torch_formula(backend.to_numpy(b), norm, clip), "float32", what="b")
    check(n, np.float32(norm), "float32", what="norm")


def test_torch_inf_norm_pattern(backend, make, check):
    # the pattern spelled out (§4.3): finite entries 0, inf entries NaN
    (ca, cb), _ = anyclip.clip_by_global_norm(
        [make([INF, 0.5, -2.0]), make([[12.0]])], 1.0, nonfinite="torch"
    )
    check(ca, [NAN, 0.0, 0.0], "float32")
    check(cb, [[0.0]], "float32")


@pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
def test_torch_matches_real_clip_grad_norm(backend, nonfinite_case):
    torch = backend.module
    a, b, clip, _ = nonfinite_case
    params = [torch.nn.Parameter(torch.zeros_like(t)) for t in (a, b)]
    for p, t in zip(params, (a, b), strict=True):
        p.grad = t.clone()
    torch_norm = torch.nn.utils.clip_grad_norm_(params, clip)
    (ca, cb), n = anyclip.clip_by_global_norm([a, b], clip, nonfinite="torch")
    assert_array(ca, backend.to_numpy(params[0].grad), backend=backend, dtype="float32", what="a")
    assert_array(cb, backend.to_numpy(params[1].grad), backend=backend, dtype="float32", what="b")
    assert_array(n, backend.to_numpy(torch_norm), backend=backend, dtype="float32", what="norm")


# ---------------------------------------------------------------- "skip"
#: "skip" multiplies by exactly 1, which keeps every value's bits on the CPU; CUDA's float
#: arithmetic returns its canonical NaN instead of the input's (measured on an H200: the
#: float32 NaN 0x7fc00000 came back as 0x7fffffff on torch 2.11, JAX 0.11.2 and CuPy 14.2).
_CUDA_NAN = "CUDA's arithmetic returns the canonical NaN 0x7fffffff: NaN * 1 changes its bits"


def _cuda_nan_xfails(test):
    for name in ("torch-cuda", "jax-gpu", "cupy"):
        for case in ("nan-entry", "inf-and-nan"):
            test = pytest.mark.xfail_backend(
                name, params={"nonfinite_case": case}, raises=AssertionError, reason=_CUDA_NAN
            )(test)
    return test


@_cuda_nan_xfails
def test_skip_returns_inputs_unchanged(backend, nonfinite_case):
    a, b, clip, norm = nonfinite_case
    (ca, cb), n = anyclip.clip_by_global_norm([a, b], clip, nonfinite="skip")
    assert_same_bits(backend, ca, a, "a")
    assert_same_bits(backend, cb, b, "b")
    # the report: the returned norm is not finite (no host sync needed to produce it)
    host = float(backend.to_numpy(n))
    assert not math.isfinite(host)
    assert math.isnan(host) == math.isnan(norm)


def test_skip_with_use_norm(backend, make):
    a = make([3.0, 4.0])
    (ca,), n = anyclip.clip_by_global_norm([a], 1.0, use_norm=make(INF), nonfinite="skip")
    assert_same_bits(backend, ca, a)
    assert math.isinf(float(backend.to_numpy(n)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_skip_other_dtypes(backend, make, dtype):
    t = make([INF, 1.5, -3.0], dtype)
    (ct,), _ = anyclip.clip_by_global_norm([t], 1.0, nonfinite="skip")
    assert_same_bits(backend, ct, t, dtype)


# --------------------------------------------------------------- "raise"
def test_raise(backend, nonfinite_case):
    a, b, clip, _ = nonfinite_case
    with pytest.raises(FloatingPointError, match="not finite"):
        anyclip.clip_by_global_norm([a, b], clip, nonfinite="raise")
    with pytest.raises(FloatingPointError, match="not finite"):
        tree.clip_by_global_norm({"a": a, "b": b}, clip, nonfinite="raise")


def test_raise_on_use_norm(backend, make):
    with pytest.raises(FloatingPointError):
        anyclip.clip_by_global_norm([make([1.0])], 1.0, use_norm=make(NAN), nonfinite="raise")


# ------------------------------------------------------ all policies, finite norm
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("clip", [6.5, 13.0, 100.0, 41.0])
def test_finite_norm_every_policy_is_tf(backend, make, check, policy, clip):
    a, b = make([3.0, 4.0]), make([[12.0]])
    (ca, cb), n = anyclip.clip_by_global_norm([a, b], clip, nonfinite=policy)
    (ta, tb), tn = anyclip.clip_by_global_norm([a, b], clip, nonfinite="tf")
    assert_same_bits(backend, ca, ta, "a")
    assert_same_bits(backend, cb, tb, "b")
    assert_same_bits(backend, n, tn, "norm")
    # and "tf" is TF's formula c * min(1/n, 1/c) (§4.1); clip 13 is the tie, unchanged (§4.2)
    scale = clip * min(1 / 13, 1 / clip)
    check(ta, np.array([3.0, 4.0]) * scale, "float32", ULP)
    check(tb, np.array([[12.0]]) * scale, "float32", ULP)


def test_finite_norm_every_policy_on_a_tree(backend, make):
    rng = np.random.default_rng(0)
    tr = {"w": make(rng.standard_normal((4, 3))), "b": [make(rng.standard_normal(3)), None]}
    ref, ref_norm = tree.clip_by_global_norm(tr, 0.7, nonfinite="tf")
    for policy in POLICIES:
        out, n = tree.clip_by_global_norm(tr, 0.7, nonfinite=policy)
        assert_same_bits(backend, out["w"], ref["w"], f"{policy} w")
        assert_same_bits(backend, out["b"][0], ref["b"][0], f"{policy} b")
        assert out["b"][1] is None
        assert_same_bits(backend, n, ref_norm, f"{policy} norm")


@pytest.mark.parametrize("policy", ["TF", "nan", "ignore", None, ""])
def test_invalid_policy(backend, make, policy):
    with pytest.raises(ValueError, match="nonfinite"):
        anyclip.clip_by_global_norm([make([1.0])], 1.0, nonfinite=policy)
    with pytest.raises(ValueError, match="nonfinite"):
        tree.clip_by_global_norm({"a": make([1.0])}, 1.0, nonfinite=policy)


def test_policies_on_tree_nonfinite(backend, make, check):
    tr = {"a": make([INF, 1.0]), "b": (make([[2.0]]),)}
    out, _ = tree.clip_by_global_norm(tr, 1.0, nonfinite="tf")
    check(out["a"], [NAN, NAN], "float32")
    out, _ = tree.clip_by_global_norm(tr, 1.0, nonfinite="torch")
    check(out["a"], [NAN, 0.0], "float32")
    check(out["b"][0], [[0.0]], "float32")
    out, _ = tree.clip_by_global_norm(tr, 1.0, nonfinite="skip")
    assert_same_bits(backend, out["a"], tr["a"])
    assert_same_bits(backend, out["b"][0], tr["b"][0])


# ----------------------------------------------------------- accumulate_dtype
F16_BIG = [300.0, 0.0]  # 300² overflows float16 (max 65504): TF's norm is inf (§3.2)


def test_global_norm_float16(backend, make, check):
    x = make(F16_BIG, "float16")
    check(anyclip.global_norm([x]), np.float16(INF), "float16")  # TF (§3.2)
    check(anyclip.global_norm([x], accumulate_dtype="float32"), np.float32(300), "float32")
    check(anyclip.global_norm([x], accumulate_dtype=backend.xp.float32), np.float32(300), "float32")


def test_norm_float16(backend, make, check):
    x = make(F16_BIG, "float16")
    check(anyclip.norm(x), np.float16(INF), "float16")  # TF (§6.7, §12 trap 10)
    check(anyclip.norm(x, accumulate_dtype="float32"), np.float16(300), "float16")
    m = make([[300.0, 0.0], [0.0, 400.0]], "float16")
    check(anyclip.norm(m, axis=1), [INF, INF], "float16")
    check(anyclip.norm(m, axis=1, accumulate_dtype="float32"), [300.0, 400.0], "float16")
    check(anyclip.norm(m, ord="fro", axis=(0, 1), accumulate_dtype="float32"), 500.0, "float16")


def test_clip_by_norm_float16(backend, make, check):
    x = make(F16_BIG, "float16")
    check(anyclip.clip_by_norm(x, 1.0), [0.0, 0.0], "float16")  # TF gives zeros (§2.3, B7)
    check(anyclip.clip_by_norm(x, 1.0, accumulate_dtype="float32"), [1.0, 0.0], "float16")
    out = tree.clip_by_norm({"x": x}, 1.0, accumulate_dtype="float32")
    check(out["x"], [1.0, 0.0], "float16")


def test_l2_normalize_float16(backend, make, check):
    x = make(F16_BIG, "float16")
    check(anyclip.l2_normalize(x), [0.0, 0.0], "float16")  # TF (§12 trap 10)
    check(anyclip.l2_normalize(x, accumulate_dtype="float32"), [1.0, 0.0], "float16")
    # B15: epsilon 1e-12 rounds to 0 in float16, so a zero vector gives NaN; not in float32
    z = make([0.0, 0.0], "float16")
    check(anyclip.l2_normalize(z), [NAN, NAN], "float16")
    check(anyclip.l2_normalize(z, accumulate_dtype="float32"), [0.0, 0.0], "float16")


def test_clip_by_global_norm_float16(backend, make, check):
    x = make(F16_BIG, "float16")
    (cx,), n = anyclip.clip_by_global_norm([x], 1.0)
    check(cx, [NAN, NAN], "float16")  # TF: inf norm, every output NaN (§4.2)
    check(n, np.float16(INF), "float16")
    (cx,), n = anyclip.clip_by_global_norm([x], 1.0, accumulate_dtype="float32")
    check(cx, [1.0, 0.0], "float16")
    check(n, np.float32(300), "float32")


def test_accumulate_dtype_float64_for_float32(backend, make, check):
    backend.dtype("float64")
    # 1e20² overflows float32 (§3.2); in float64 it does not, and float32 comes back
    x = make([1e20, 0.0], "float32")
    big = float(np.float32(1e20))  # the float32 value actually stored
    check(anyclip.norm(x), np.float32(INF), "float32")
    check(anyclip.norm(x, accumulate_dtype="float64"), big, "float32", 1)
    check(anyclip.global_norm([x], accumulate_dtype="float64"), big, "float64", 1)
    check(anyclip.clip_by_norm(x, 1.0, accumulate_dtype="float64"), [1.0, 0.0], "float32", 1)
    (cx,), n = anyclip.clip_by_global_norm([x], 1e10, accumulate_dtype="float64")
    check(cx, [1e10, 0.0], "float32", 1)
    check(n, big, "float64", 1)


@pytest.mark.parametrize("accumulate_dtype", [None, "float32"])
def test_accumulate_dtype_same_as_input_is_tf(backend, make, accumulate_dtype):
    # naming the input's own dtype changes nothing
    rng = np.random.default_rng(3)
    x = make(rng.standard_normal((3, 5)) * 4, "float32")
    assert_same_bits(backend, anyclip.norm(x, accumulate_dtype=accumulate_dtype), anyclip.norm(x))
    assert_same_bits(
        backend,
        anyclip.clip_by_norm(x, 2.0, axes=1, accumulate_dtype=accumulate_dtype),
        anyclip.clip_by_norm(x, 2.0, axes=1),
    )
    assert_same_bits(
        backend,
        anyclip.l2_normalize(x, axis=0, accumulate_dtype=accumulate_dtype),
        anyclip.l2_normalize(x, axis=0),
    )
    assert_same_bits(
        backend,
        anyclip.global_norm([x, x], accumulate_dtype=accumulate_dtype),
        anyclip.global_norm([x, x]),
    )
    (cx,), n = anyclip.clip_by_global_norm([x], 2.0, accumulate_dtype=accumulate_dtype)
    (rx,), rn = anyclip.clip_by_global_norm([x], 2.0)
    assert_same_bits(backend, cx, rx)
    assert_same_bits(backend, n, rn)


BAD_ACC = ["int32", "complex64", "banana", 42, "float8"]


@pytest.mark.parametrize("bad", BAD_ACC, ids=[str(b) for b in BAD_ACC])
def test_bad_accumulate_dtype(backend, make, bad):
    x = make([3.0, 4.0])
    with pytest.raises(TypeError, match="accumulate_dtype"):
        anyclip.norm(x, accumulate_dtype=bad)
    with pytest.raises(TypeError, match="accumulate_dtype"):
        anyclip.global_norm([x], accumulate_dtype=bad)
    with pytest.raises(TypeError, match="accumulate_dtype"):
        anyclip.clip_by_norm(x, 1.0, accumulate_dtype=bad)
    with pytest.raises(TypeError, match="accumulate_dtype"):
        anyclip.clip_by_global_norm([x], 1.0, accumulate_dtype=bad)
    with pytest.raises(TypeError, match="accumulate_dtype"):
        anyclip.l2_normalize(x, accumulate_dtype=bad)
    with pytest.raises(TypeError, match="accumulate_dtype"):
        tree.global_norm({"x": x}, accumulate_dtype=bad)


@pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
def test_accumulate_dtype_of_another_library(backend, make):
    # a NumPy dtype object is not a torch dtype
    with pytest.raises(TypeError, match="accumulate_dtype"):
        anyclip.global_norm([make([1.0])], accumulate_dtype=np.float32)
