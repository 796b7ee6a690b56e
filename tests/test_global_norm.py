"""``anyclip.global_norm`` and ``anyclip.clip_by_global_norm`` against docs/tf-reference.md §3-§4.

Error paths are in test_errors.py. Budget: 3 ULP in float32 (§11).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import anyclip

ULP = 3
NAN = math.nan


@pytest.fixture
def ab(make):
    """a = [3,4], b = [[12]]: global norm 13 (§3.2, §4.2)."""
    return make([3, 4]), make([[12]])


def gn_formula(arrays) -> float:
    return float(np.sqrt(sum(np.sum(np.asarray(a, dtype=np.float64) ** 2) for a in arrays)))


# ------------------------------------------------------------------ global_norm (§3)
def test_list(backend, ab, check):
    check(anyclip.global_norm(list(ab)), np.float32(13), "float32", ULP)


def test_tuple(backend, ab, check):
    check(anyclip.global_norm(tuple(ab)), np.float32(13), "float32", ULP)


def test_none_entries_ignored(backend, ab, check):
    a, b = ab
    check(anyclip.global_norm([a, None, b]), np.float32(13), "float32", ULP)


@pytest.mark.parametrize("t_list", [[], [None]], ids=["empty", "None"])
def test_empty_list_is_float32_zero(t_list):
    # §3.2: `[]`, `[None]` give 0.0 float32 (there is no array to take a namespace from)
    out = anyclip.global_norm(t_list)
    assert "float32" in str(out.dtype)
    assert tuple(out.shape) == ()
    assert float(out) == 0.0


@pytest.mark.parametrize(
    ("dtype", "ulp"), [("float16", 1), ("bfloat16", 1), ("float32", ULP), ("float64", ULP)]
)
def test_dtypes(backend, make, check, dtype, ulp):
    # §3.2: f16 / bf16 / f32 / f64 [3,4] give 5.0 in the same dtype
    check(anyclip.global_norm([make([3, 4], dtype)]), np.float32(5), dtype, ulp)


def test_zero_d(backend, make, check):
    check(anyclip.global_norm([make(-2.0)]), np.float32(2), "float32")


def test_empty_array(backend, make, check):
    check(anyclip.global_norm([make(np.zeros(0))]), np.float32(0), "float32")


@pytest.mark.parametrize(("t", "expected"), [([math.inf, 1], math.inf), ([NAN, 1], NAN)])
def test_non_finite(backend, make, check, t, expected):
    check(anyclip.global_norm([make(t)]), np.float32(expected), "float32")


# §3.2: float32 squares overflow (no scaling); 1.5e19 still fits.
@pytest.mark.parametrize(("v", "expected"), [(1e20, math.inf), (2e19, math.inf), (1.5e19, 1.5e19)])
def test_float32_overflow(backend, make, check, v, expected):
    check(anyclip.global_norm([make([v])]), np.float32(expected), "float32", ULP)


# §3.2 / B7: float16 squares overflow.
@pytest.mark.parametrize(("v", "expected"), [(300, math.inf), (200, 200), (250, 250)])
def test_float16_overflow(backend, make, check, v, expected):
    check(anyclip.global_norm([make([v], "float16")]), np.float16(expected), "float16", 1)


#: bfloat16 lists whose float32 sum of squares lies at the top of the range, with TF 2.21's
#: ``tf.linalg.global_norm`` (measured; re-checked live with ``--live-tf``). TF halves each
#: square before the sum; anyclip halves the sum: the same norm, also where the sum of the
#: squares overflows float32 (1.4556e19 and 1.2538e19: 3.69e38) or rounds to bfloat16's inf
#: ("above": 3.3962e38) and the sum of the halves does not (TF's ``* 2`` overflows then),
#: and just under that ("below": 3.3895e38, TF's largest finite norm).
BFLOAT16_TOP = {
    "past-float32": ([[1.4555633995661443e19], [1.253802136259946e19]], math.inf),
    "above": ([[1.3835058055282164e19, 1.2177733392409821e19]], math.inf),
    "above-split": ([[1.3835058055282164e19], [1.2177733392409821e19]], math.inf),
    "below": ([[1.3690942867206308e19, 1.2321848580485677e19]], 1.8374686479671624e19),
    "below-split": ([[1.3690942867206308e19], [1.2321848580485677e19]], 1.8374686479671624e19),
}


@pytest.mark.parametrize("case", list(BFLOAT16_TOP))
def test_bfloat16_sums_at_the_top_of_the_range(backend, make, check, case):
    if not backend.has_dtype("bfloat16"):
        pytest.skip(f"{backend.name} has no bfloat16")
    parts, tf = BFLOAT16_TOP[case]
    check(anyclip.global_norm([make(p, "bfloat16") for p in parts]), tf, "bfloat16")


@pytest.mark.live_tf
def test_bfloat16_top_table_is_tfs():
    tf = pytest.importorskip("tensorflow")
    import ml_dtypes

    for parts, want in BFLOAT16_TOP.values():
        tensors = [tf.constant(np.array(p, np.float32).astype(ml_dtypes.bfloat16)) for p in parts]
        got = float(tf.cast(tf.linalg.global_norm(tensors), tf.float64).numpy())
        assert got == want, (parts, got, want)


def test_many_arrays_match_formula(backend, make, check):
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(5,), (3, 7), (), (2, 2, 2)]]
    out = anyclip.global_norm([make(a) for a in arrays])
    check(out, np.float64(gn_formula(arrays)), "float32", ULP)


def test_float64_matches_formula(backend, make, check):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s) for s in [(11,), (4, 3)]]
    out = anyclip.global_norm([make(a, "float64") for a in arrays])
    check(out, np.float64(gn_formula(arrays)), "float64", ULP)


# ------------------------------------------------------------ clip_by_global_norm (§4)
def check_list(check, out, expected, dtype, ulp):
    assert isinstance(out, list), f"expected a list, got {type(out)}"
    assert len(out) == len(expected)
    for i, (o, e) in enumerate(zip(out, expected, strict=True)):
        if e is None:
            assert o is None, f"entry {i}: expected None"
        else:
            check(o, e, dtype, ulp, what=f"entry {i}")


@pytest.mark.parametrize("container", [list, tuple])
def test_clip_returns_list(backend, ab, check, container):
    # §4.2: tuple input becomes a list
    out, norm = anyclip.clip_by_global_norm(container(ab), 6.5)
    check_list(check, out, [[1.5, 2], [[6]]], "float32", ULP)
    check(norm, np.float32(13), "float32", ULP)


def test_clip_returns_tuple_pair(backend, ab):
    result = anyclip.clip_by_global_norm(list(ab), 6.5)
    assert isinstance(result, tuple)
    assert len(result) == 2


def test_clip_keeps_none(backend, ab, check):
    a, b = ab
    out, norm = anyclip.clip_by_global_norm([a, None, b], 6.5)
    check_list(check, out, [[1.5, 2], None, [[6]]], "float32", ULP)
    check(norm, np.float32(13), "float32", ULP)


@pytest.mark.parametrize("t_list", [[], [None]], ids=["empty", "None"])
def test_clip_empty(t_list):
    out, norm = anyclip.clip_by_global_norm(t_list, 1)
    assert out == t_list
    assert isinstance(out, list)
    assert "float32" in str(norm.dtype)
    assert float(norm) == 0.0


@pytest.mark.parametrize("clip", [100.0, 13.0])
def test_clip_inactive_or_tie_unchanged(backend, ab, check, clip):
    # §4.2: norm < clip and norm == clip give the input unchanged (13*(1/13) == 1 in f32)
    out, norm = anyclip.clip_by_global_norm(list(ab), clip)
    check_list(check, out, [[3, 4], [[12]]], "float32", 0)
    check(norm, np.float32(13), "float32", ULP)


# §4.2 / B6: the scale c*(1/c) is not 1 for c = 41 in float32; no shortcut below the threshold.
def test_clip_41_is_not_identity(backend, make, check):
    out, _ = anyclip.clip_by_global_norm([make([1, 2])], 41)
    scale = np.float32(41) * (np.float32(1) / np.float32(41))
    assert scale != 1  # 0x3f7fffff
    check_list(check, out, [np.array([1, 2], dtype=np.float32) * scale], "float32", 0)


def test_clip_zero(backend, ab, check):
    out, norm = anyclip.clip_by_global_norm(list(ab), 0)
    check_list(check, out, [[0, 0], [[0]]], "float32", 0)
    check(norm, np.float32(13), "float32", ULP)


def test_clip_zero_on_zeros_is_nan(backend, make, check):
    out, norm = anyclip.clip_by_global_norm([make([0, 0])], 0)
    check_list(check, out, [[NAN, NAN]], "float32", 0)
    check(norm, np.float32(0), "float32")


def test_all_zero_clip_1(backend, make, check):
    out, norm = anyclip.clip_by_global_norm([make([0, 0]), make([0])], 1)
    check_list(check, out, [[0, 0], [0]], "float32", 0)
    check(norm, np.float32(0), "float32")


# §4.2 / B8: a negative clip_norm is the identity (scale c*(1/c)).
@pytest.mark.parametrize("clip", [-1.0, -6.5])
def test_clip_negative_is_identity(backend, ab, check, clip):
    out, _ = anyclip.clip_by_global_norm(list(ab), clip)
    check_list(check, out, [[3, 4], [[12]]], "float32", 0)


@pytest.mark.parametrize("clip", [NAN, math.inf])
def test_clip_non_finite_is_nan(backend, ab, check, clip):
    out, norm = anyclip.clip_by_global_norm(list(ab), clip)
    check_list(check, out, [[NAN, NAN], [[NAN]]], "float32", 0)
    check(norm, np.float32(13), "float32", ULP)


@pytest.mark.parametrize(
    "clip",
    [1, True, np.float64(1), np.float32(1)],
    ids=["int", "True", "np.float64", "np.float32"],
)
def test_clip_scalar_kinds(backend, ab, check, clip):
    out, _ = anyclip.clip_by_global_norm(list(ab), clip)
    check_list(check, out, [[0.23076925, 0.30769232], [[0.923077]]], "float32", ULP)


def test_clip_array_same_dtype(backend, ab, make, check):
    out, _ = anyclip.clip_by_global_norm(list(ab), make(6.5))
    check_list(check, out, [[1.5, 2], [[6]]], "float32", ULP)


# §4.2 / B8: a clip_norm of shape [2] silently changes the output shapes (followed, as TF).
def test_clip_non_scalar_changes_shapes(backend, ab, make, check):
    out, norm = anyclip.clip_by_global_norm(list(ab), make([6.5, 1.0]))
    check_list(check, out, [[1.5, 0.30769232], [[6.0, 0.923077]]], "float32", ULP)
    check(norm, np.float32(13), "float32", ULP)


# §4.2: use_norm is used as given and returned as given (its dtype included).
def test_use_norm(backend, ab, make, check):
    out, norm = anyclip.clip_by_global_norm(list(ab), 6.5, use_norm=make(26.0))
    check_list(check, out, [[0.75, 1], [[3]]], "float32", ULP)
    check(norm, np.float32(26), "float32")


def test_use_norm_float64_with_float32_list(backend, ab, make, check):
    out, norm = anyclip.clip_by_global_norm(list(ab), 6.5, use_norm=make(26.0, "float64"))
    check_list(check, out, [[0.75, 1], [[3]]], "float32", ULP)
    check(norm, np.float64(26), "float64")


def test_use_norm_zero_is_identity(backend, ab, make, check):
    out, norm = anyclip.clip_by_global_norm(list(ab), 6.5, use_norm=make(0.0))
    check_list(check, out, [[3, 4], [[12]]], "float32", 0)
    check(norm, np.float32(0), "float32")


def test_use_norm_negative_flips_sign(backend, ab, make, check):
    out, norm = anyclip.clip_by_global_norm(list(ab), 6.5, use_norm=make(-13.0))
    check_list(check, out, [[-1.5, -2], [[-6]]], "float32", ULP)
    check(norm, np.float32(-13), "float32")


@pytest.mark.parametrize("use", [math.inf, NAN])
def test_use_norm_non_finite(backend, ab, make, check, use):
    out, norm = anyclip.clip_by_global_norm(list(ab), 6.5, use_norm=make(use))
    check_list(check, out, [[NAN, NAN], [[NAN]]], "float32", 0)
    check(norm, np.float32(use), "float32")


# §4.2 / B10: a non-finite global norm makes every output NaN, finite entries included.
@pytest.mark.parametrize(("bad", "norm_value"), [(math.inf, math.inf), (NAN, NAN)])
def test_non_finite_input_all_nan(backend, make, check, bad, norm_value):
    out, norm = anyclip.clip_by_global_norm([make([bad, 1.0]), make([[12]])], 6.5)
    check_list(check, out, [[NAN, NAN], [[NAN]]], "float32", 0)
    check(norm, np.float32(norm_value), "float32")


def test_overflowing_norm_all_nan(backend, make, check):
    out, norm = anyclip.clip_by_global_norm([make([1e20, 1])], 1)
    check_list(check, out, [[NAN, NAN]], "float32", 0)
    check(norm, np.float32(math.inf), "float32")


# §4.1 / §4.2: the scale is computed in use_norm's dtype, then cast to each tensor's dtype.
def test_float16_list(backend, make, check):
    out, norm = anyclip.clip_by_global_norm([make([3, 4], "float16")], 1)
    check_list(check, out, [[0.5996, 0.8]], "float16", 1)
    check(norm, np.float16(5), "float16", 1)


def test_float64_list(backend, make, check):
    out, norm = anyclip.clip_by_global_norm([make([3, 4], "float64")], 1)
    check_list(check, out, [[0.6, 0.8]], "float64", ULP)
    check(norm, np.float64(5), "float64", ULP)


def test_float64_list_float32_use_norm(backend, make, check):
    out, norm = anyclip.clip_by_global_norm(
        [make([3, 4], "float64")], 1, use_norm=make(5.0, "float32")
    )
    one, five = np.float32(1), np.float32(5)
    scale = np.float64(one * np.minimum(one / five, one / one))  # computed in float32
    check_list(check, out, [np.array([3.0, 4.0]) * scale], "float64", 0)
    check(norm, np.float32(5), "float32")


def test_float16_list_float32_use_norm(backend, make, check):
    out, norm = anyclip.clip_by_global_norm(
        [make([3, 4], "float16")], 1, use_norm=make(5.0, "float32")
    )
    check_list(check, out, [[0.5996, 0.8]], "float16", 1)
    check(norm, np.float32(5), "float32")


# §4.2 / B8: an int list with a given use_norm is scaled by cast(scale, int) = 0.
def test_int_list_with_use_norm(backend, make, check):
    out, norm = anyclip.clip_by_global_norm([make([3, 4], "int32")], 1, use_norm=make(5.0))
    check_list(check, out, [[0, 0]], "int32", 0)
    check(norm, np.float32(5), "float32")


def test_bfloat16_list(backend, make, check):
    out, norm = anyclip.clip_by_global_norm([make([3, 4], "bfloat16")], 1)
    check_list(check, out, [[0.6, 0.8]], "bfloat16", 1)
    check(norm, np.float32(5), "bfloat16")


def test_zero_d_and_empty_entries(backend, make, check):
    out, norm = anyclip.clip_by_global_norm([make(-3.0), make(np.zeros((0, 2))), make([4])], 1)
    check_list(check, out, [np.float32(-0.6), np.zeros((0, 2)), [0.8]], "float32", ULP)
    check(norm, np.float32(5), "float32")


def test_random_matches_formula(backend, make, check):
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(10,), (4, 5)]]
    out, norm = anyclip.clip_by_global_norm([make(a) for a in arrays], 2.0)
    g = gn_formula(arrays)
    expected = [a.astype(np.float64) * (2.0 * min(1 / g, 1 / 2.0)) for a in arrays]
    check_list(check, out, expected, "float32", ULP)
    check(norm, np.float64(g), "float32", ULP)
