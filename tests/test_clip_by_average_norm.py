"""``anyclip.clip_by_average_norm`` against docs/tf-reference.md §5 (errors: test_errors.py).

§5.1: TF's scalar rsqrt equals 1/sqrt, and the NumPy formula ``(t*c)*min((1/sqrt(s))*n, 1/c)``
matched TF on 1000 / 1000 elements, so the budget is small (2 ULP).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import anyclip
from anyclip_conformance.budgets import gpu_budget

ULP = 2
NAN = math.nan


def tf_formula32(t: np.ndarray, c: float) -> np.ndarray:
    """§5.1 in float32 NumPy: (t*c) * min((1/sqrt(sum(t*t))) * n, 1/c)."""
    t = np.asarray(t, dtype=np.float32)
    c = np.float32(c)
    n = np.float32(t.size)
    with np.errstate(divide="ignore"):
        inv = np.float32(1) / np.sqrt(np.sum(t * t, dtype=np.float32))
    return (t * c) * np.minimum(inv * n, np.float32(1) / c)


def test_clipped(backend, make, check):
    check(anyclip.clip_by_average_norm(make([3, 4]), 1), [1.2, 1.6], "float32", ULP)


@pytest.mark.parametrize("clip", [3.0, 2.5])
def test_unchanged_and_tie(backend, make, check, clip):
    check(anyclip.clip_by_average_norm(make([3, 4]), clip), [3, 4], "float32", ULP)


def test_2d(backend, make, check):
    expected = [[0.31448543, 0.62897086, 0.9434563], [1.2579417, 1.5724272, 1.8869126]]
    out = anyclip.clip_by_average_norm(make([[1, 2, 3], [4, 5, 6]]), 0.5)
    # XLA:GPU's float32 division and sqrt: a declared GPU difference (3 ULP measured)
    check(out, expected, "float32", gpu_budget("xla-gpu-float32", backend.name, ULP, "float32"))


def test_zero_d(backend, make, check):
    check(anyclip.clip_by_average_norm(make(-4.0), 2), np.float32(-2), "float32", ULP)


def test_empty(backend, make, check):
    check(anyclip.clip_by_average_norm(make(np.zeros(0)), 1), np.zeros(0), "float32")


def test_all_zero(backend, make, check):
    check(anyclip.clip_by_average_norm(make([0, 0, 0]), 1), [0, 0, 0], "float32")


def test_clip_zero(backend, make, check):
    check(anyclip.clip_by_average_norm(make([3, 4]), 0), [0, 0], "float32")


def test_clip_zero_on_zeros_is_nan(backend, make, check):
    check(anyclip.clip_by_average_norm(make([0, 0]), 0), [NAN, NAN], "float32")


# §5.2 / B17: a negative clip_norm is the identity.
@pytest.mark.parametrize("clip", [-1, -10])
def test_clip_negative_is_identity(backend, make, check, clip):
    check(anyclip.clip_by_average_norm(make([3, 4]), clip), [3, 4], "float32", ULP)


@pytest.mark.parametrize("clip", [math.inf, NAN])
def test_clip_non_finite(backend, make, check, clip):
    check(anyclip.clip_by_average_norm(make([3, 4]), clip), [NAN, NAN], "float32")


@pytest.mark.parametrize(
    "clip", [1, 1.0, np.float32(1), np.float64(1)], ids=["int", "float", "np.f32", "np.f64"]
)
def test_clip_scalar_kinds(backend, make, check, clip):
    check(anyclip.clip_by_average_norm(make([3, 4]), clip), [1.2, 1.6], "float32", ULP)


def test_clip_float32_array(backend, make, check):
    check(anyclip.clip_by_average_norm(make([3, 4]), make(1.0)), [1.2, 1.6], "float32", ULP)


def test_clip_per_element(backend, make, check):
    out = anyclip.clip_by_average_norm(make([3, 4]), make([1.0, 10.0]))
    check(out, [1.2, 4], "float32", ULP)


@pytest.mark.parametrize(("t", "expected"), [([math.inf, 1], [NAN, 0]), ([NAN, 1], [NAN, NAN])])
def test_non_finite_input(backend, make, check, t, expected):
    check(anyclip.clip_by_average_norm(make(t), 1), expected, "float32")


def test_overflow(backend, make, check):
    check(anyclip.clip_by_average_norm(make([1e20, 1e20]), 1), [0, 0], "float32")


def test_random_matches_formula(backend, make, check):
    rng = np.random.default_rng(7)
    t = rng.standard_normal((10, 10)).astype(np.float32)
    out = anyclip.clip_by_average_norm(make(t), 0.01)
    check(out, tf_formula32(t, 0.01), "float32", ULP)
