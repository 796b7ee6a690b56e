"""Reproductions of the defects differential fuzzing against live TF 2.21 found (issue 14).

Expected values are TF 2.21's own outputs (measured eagerly on CPU, quoted in each test) or
hand-derived; the conformance catalogue (``conformance/cases.py``, ``acc/``, ``imag/`` and
``py/complex`` cases) holds their neighbourhoods with TF's data.
"""

from __future__ import annotations

import numpy as np
import pytest

import anyclip

__all__: list[str] = []

jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)


def _big_and_ones(n: int, big: float) -> np.ndarray:
    x = np.ones(n)
    x[0] = big
    return x


# ------------------------------------------------------------ 1. bfloat16 sums (float32 in TF)
# ones(1001) with x[0] = 256 in bfloat16: the exact norm is 257.95. TF 2.21 gives 258 for
# ``norm``, ``global_norm`` and the norm of ``clip_by_global_norm``, and 0.992188 (254/256) for
# element 0 of ``l2_normalize`` and ``clip_by_norm(x, 1)``; a bfloat16 running sum gives 256 and 1.
def test_bfloat16_norm_sums_in_float32(backend, make, check):
    x = make(_big_and_ones(1001, 256.0), "bfloat16")
    check(anyclip.norm(x), np.float32(258), "bfloat16")
    check(anyclip.global_norm([x]), np.float32(258), "bfloat16")
    check(anyclip.clip_by_global_norm([x], 1.0)[1], np.float32(258), "bfloat16")
    check(anyclip.normalize(x)[1], [258.0], "bfloat16")


def test_bfloat16_l2_normalize_sums_in_float32(backend, make, check):
    x = make(_big_and_ones(1001, 256.0), "bfloat16")
    out = backend.to_numpy(anyclip.l2_normalize(x))
    assert out[0] == np.float32(0.9921875), out[0]
    out = backend.to_numpy(anyclip.clip_by_norm(x, 1.0))
    assert out[0] == np.float32(0.9921875), out[0]


def test_bfloat16_norm_over_an_axis_sums_in_float32(backend, make, check):
    x = make(np.stack([_big_and_ones(1001, 256.0)] * 2), "bfloat16")
    check(anyclip.norm(x, axis=1), [258.0, 258.0], "bfloat16")  # TF 2.21


@jax_backends
def test_bfloat16_norm_under_jit(backend, make, check):
    x = make(_big_and_ones(3000, 256.0), "bfloat16")
    check(backend.jit(anyclip.norm)(x), np.float32(262), "bfloat16")  # TF 2.21: 262


# -------------------------------------------------------- 2. Python complex is complex128 in TF
def test_python_complex_input_is_complex128():
    z = 2.76e-31 - 7.68e-31j  # TF: ((0.3382-0.9411j), 8.16e-31+0j), complex128
    normalized, n = anyclip.normalize(z)
    assert n.dtype == np.complex128
    exact = abs(z)
    np.testing.assert_allclose(np.asarray(n), exact, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(normalized), z / exact, rtol=1e-15)
    assert anyclip.norm([1 + 2j, 3]).dtype == np.complex128


# ---------------------------------------------- 3. the complex Euclidean norm is exactly real
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_norm_has_no_imaginary_part(backend, make, dtype):
    z = np.array([-0.8019 - 1.3244j, 0.3 + 2.1j, -1.7 + 0.45j])
    x = make(z, dtype)
    for result in (
        anyclip.norm(x[0]),
        anyclip.norm(x),
        anyclip.norm(x, axis=0),
        anyclip.normalize(x)[1],
        anyclip.norm(make(z.reshape(1, 3) * np.ones((2, 1)), dtype), ord="fro", axis=(0, 1)),
    ):
        got = backend.to_numpy(result)
        assert got.dtype == np.dtype(dtype)
        assert np.all(got.imag == 0), got
        np.testing.assert_allclose(got.real, np.abs(got), rtol=0)
    exact = np.sqrt(np.sum(np.abs(z.astype(dtype)).astype(np.float64) ** 2))
    rtol = 2e-7 if dtype == "complex64" else 1e-15
    np.testing.assert_allclose(backend.to_numpy(anyclip.norm(x)).real, exact, rtol=rtol)


# ----------------------------------------------- 4. the optax state keeps a norm it can hold
@jax_backends
def test_optax_state_holds_a_wider_update_norm(backend, make):
    pytest.importorskip("optax")
    import anyclip.optax as ao

    tx = ao.clip_by_global_norm(1.0)
    state = tx.init({"w": make([0.0, 0.0], "float16")})
    updates = {"w": make([6e5, 8e5], "float32")}  # norm 1e6: inf in float16
    _, state = tx.update(updates, state)
    norm = backend.to_numpy(state.global_norm)
    assert norm.dtype == np.float32
    assert norm == np.float32(1e6)
