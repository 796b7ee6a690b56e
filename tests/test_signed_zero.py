"""Negative zero keeps its sign: in anyclip's constants, in the suite's own arrays, and
where TF's ``maximum`` and ``minimum`` meet a tie.

On CuPy (GPU run 5: CuPy 14.2, an H200) a 0-d ``-0.0`` put on the device came back ``+0.0``.
The suite's ``use_norm = -0.0`` cases then checked anyclip with another input than TF's (TF's
factor is ``-inf``, cast to an integer type as ``-2**31``; with ``+0.0`` it is 1), and a
``-0.0`` that a user passes as a Python number (a bound, a threshold) would lose its sign in
anyclip's constants. Both are checked bit for bit on every backend.

A ``clip_norm`` of ``-0.0``: TF clamps an array ``clip_norm`` with ``maximum(clip_norm, 0)``,
whose scalar loop returns its first operand on a tie, so ``-0.0`` stays and every zero of
``t * clip_norm / norm`` takes the sign of ``t * -0.0``. NumPy's ``maximum`` returns the second
operand there and XLA's gives ``+0.0``: every zero had the other sign on NumPy,
array-api-strict, Dask and JAX. (TF's ``maximum`` and ``minimum`` of longer float32 and float64
arrays return the second operand on a tie in their vector loop and the first in its remainder:
docs/tf-behaviour.md.)
"""

from __future__ import annotations

import numpy as np
import pytest

import anyclip
from anyclip._numerics import constant

#: Values whose bits must survive: signed zeros, a subnormal, the extremes, inf and NaN.
VALUES = [-0.0, 0.0, 1.5, -2.0, float("inf"), float("-inf"), float("nan")]
#: NumPy dtypes checked (the suite makes bfloat16 from float32 on the backend itself).
DTYPES = ["float16", "float32", "float64", "complex64", "int8", "uint16"]


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.reshape(-1).view(np.uint8)


@pytest.mark.parametrize("shape", [(), (1,), (2, 3), (0, 2)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_suite_arrays_keep_every_bit(backend, dtype, shape):
    backend.dtype(dtype)  # skips where the backend lacks it
    info = np.finfo(dtype) if np.dtype(dtype).kind in "fc" else None
    pool = VALUES + ([float(info.smallest_subnormal), float(info.max)] if info else [])
    rng = np.random.default_rng(0)
    with np.errstate(invalid="ignore", over="ignore"):
        flat = np.asarray(rng.choice(pool, size=int(np.prod(shape))), dtype=np.float64)
        host = flat.astype(dtype) if info else np.nan_to_num(flat).astype(dtype)
    host = host.reshape(shape)
    if shape == ():
        host = np.asarray(-0.0 if info else 7, dtype=dtype)
    made = backend.asarray(host, dtype)
    assert backend.same_device(made)
    got = backend.to_numpy(made)
    assert got.dtype == host.dtype and got.shape == host.shape
    np.testing.assert_array_equal(_bits(got), _bits(host))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_constants_keep_the_sign_of_zero(backend, make, dtype):
    like = make([1.0], dtype)
    xp = backend.xp
    for _ in range(2):  # made, then (where constants are cached) from the cache
        negative = constant(xp, -0.0, like.dtype, like)
        positive = constant(xp, 0.0, like.dtype, like)
        assert np.signbit(backend.to_numpy(negative)), backend.to_numpy(negative)
        assert not np.signbit(backend.to_numpy(positive))
        assert negative.dtype == like.dtype and positive.dtype == like.dtype
        assert negative.shape == () and positive.shape == ()
        assert backend.same_device(negative) and backend.same_device(positive)


#: ``tf.clip_by_norm(T, -0.0)``: ``maximum(-0.0, 0)`` keeps ``-0.0`` (an array ``clip_norm``;
#: a number passes TF's ``clip_norm < 0`` test unchanged), so each output is ``t * -0.0 / n``.
T = [[-6.9, 119.2, -22.2, 0.0, -0.0]]
CLIP_BY_NORM_NEGATIVE_ZERO = [[0.0, -0.0, 0.0, -0.0, 0.0]]
FLOATS = ["float16", "bfloat16", "float32", "float64"]


def _bound(backend, value, dtype, kind):
    return backend.asarray(np.float32(value), dtype) if kind == "array" else value


def _assert_signed(backend, check, got, want, dtype):
    check(got, want, dtype, 0)  # namespace, dtype, shape, device, then the values
    host = np.asarray(backend.to_numpy(got), dtype=np.float32)
    assert np.signbit(host).tolist() == np.signbit(np.asarray(want)).tolist(), host


@pytest.mark.parametrize("kind", ["array", "python"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_clip_by_norm_keeps_a_negative_zero_clip_norm(backend, make, check, dtype, kind):
    out = anyclip.clip_by_norm(make(T, dtype), _bound(backend, -0.0, dtype, kind))
    _assert_signed(backend, check, out, CLIP_BY_NORM_NEGATIVE_ZERO, dtype)


@pytest.mark.live_tf
def test_negative_zero_clip_norm_table_is_tfs():
    # NumPy inputs: TF's cache of converted Python floats takes -0.0 and 0.0 for one value
    # (which of them depends on what the process converted first)
    tf = pytest.importorskip("tensorflow")
    import ml_dtypes

    for dtype in FLOATS:
        np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
        t = np.array(T, np.float32).astype(np_dtype)
        c = np.array(-0.0, np.float32).astype(np_dtype)
        got = tf.cast(tf.clip_by_norm(t, c), tf.float32).numpy()
        assert got.tolist() == CLIP_BY_NORM_NEGATIVE_ZERO
        assert np.signbit(got).tolist() == np.signbit(CLIP_BY_NORM_NEGATIVE_ZERO).tolist(), dtype
