"""One comparison for every test: the array's kind first, then its values in ulps.

:func:`assert_array` checks the array namespace, dtype, shape and device, the NaN positions, the
infinities (with sign), then the finite values within a budget counted by :func:`ulp_distance`
in units in the last place (ulp) of the reference dtype (-0.0 equals +0.0). Two rules are ours:
``flush=True`` counts subnormals as zero in float32, float64 and bfloat16 (TF's CPU kernels run
with flush-to-zero / denormals-are-zero, where array libraries keep IEEE subnormals), and
``scale=s`` counts errors in ulps of ``s`` (gradients whose terms cancel).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anyclip_conformance.backends import Backend

__all__ = ["Mismatch", "assert_array", "assert_same_bits", "ulp", "ulp_distance"]


class Mismatch(AssertionError):
    """A result differs from its reference."""


def _finfo(dtype: str) -> Any:
    """``finfo`` of a floating or complex dtype name (bfloat16 through ``ml_dtypes``)."""
    import ml_dtypes

    real = {"complex64": "float32", "complex128": "float64"}.get(dtype, dtype)
    return ml_dtypes.finfo(ml_dtypes.bfloat16 if real == "bfloat16" else np.dtype(real))


def ulp(reference: Any, dtype: str) -> np.ndarray:
    """The unit in the last place of ``dtype`` at each magnitude in ``reference`` (float64).

    Below the smallest normal number (and at zero) it is the smallest subnormal step.

    >>> ulp([1.0, 3.0, 0.0], "float32").tolist() == [2.0**-23, 2.0**-22, 2.0**-149]
    True
    """
    info = _finfo(dtype)
    mag = np.abs(np.asarray(reference, dtype=np.float64))
    _, exp = np.frexp(mag)  # mag = m * 2**exp with 0.5 <= m < 1
    step = np.ldexp(1.0, exp - 1 - info.nmant)
    tiny = float(info.smallest_subnormal)
    return np.where(mag > 0, np.maximum(step, tiny), tiny)


def _flushed(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` with subnormal values (real and imaginary parts apart) set to zero."""
    tiny = float(_finfo(dtype).smallest_normal)
    if np.iscomplexobj(a):
        return _flushed(a.real, dtype) + 1j * _flushed(a.imag, dtype)
    return np.where(np.abs(a) < tiny, 0.0, a)


def ulp_distance(
    actual: Any, desired: Any, dtype: str, *, scale: float | None = None, flush: bool = False
) -> float:
    """Largest error of the finite entries of ``actual`` against ``desired``, in ulps of ``dtype``.

    The ulp is taken at each reference value (at ``scale`` when given); a complex entry's error
    is ``|a - d|`` in ulps of ``|d|``. Integer and boolean results count plain differences.
    Entries where either side is not finite are skipped (:func:`assert_array` checks them).

    >>> ulp_distance(np.float32(1.0) + np.float32(2.0**-22), 1.0, "float32")
    2.0
    """
    a, d = np.asarray(actual), np.asarray(desired)
    if dtype.startswith(("int", "uint", "bool")):
        diff = a.astype(np.float64) - d.astype(np.float64)
        return float(np.max(np.abs(diff), initial=0.0))
    wide = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(d) else np.float64
    a, d = a.astype(wide, copy=False), d.astype(wide, copy=False)
    finite = np.isfinite(a) & np.isfinite(d)
    if not finite.any():
        return 0.0
    if not finite.all():  # (all finite: the maximum over the whole arrays, no copies)
        a, d = a[finite], d[finite]
    if flush:
        a, d = _flushed(a, dtype), _flushed(d, dtype)
    with np.errstate(all="ignore"):
        unit = ulp(np.abs(d) if not scale else scale, dtype)
        return float(np.max(np.abs(a - d) / unit))


def assert_array(
    actual: Any,
    desired: Any,
    *,
    backend: Backend,
    dtype: str,
    ulp: float = 0,
    what: str = "",
    scale: float | None = None,
    flush: bool = False,
) -> float:
    """Assert that ``actual`` is ``backend``'s array of ``dtype`` equal to NumPy ``desired``.

    Checks, in this order: array namespace, dtype, shape, device, NaN positions, infinities
    (with sign), then finite values within ``ulp`` units in the last place (``0``: exact,
    except that -0.0 equals +0.0), measured by :func:`ulp_distance` with ``scale`` and
    ``flush``. Raises :class:`Mismatch` (an ``AssertionError``); returns the largest error.
    """
    import array_api_compat

    where = f" ({what})" if what else ""
    desired = np.asarray(desired)
    if backend.library == "array_api_strict":
        ok = type(actual).__module__.startswith("array_api_strict")
    elif backend.library == "jax":
        ok = isinstance(actual, backend.module.Array)
    else:
        ok = array_api_compat.array_namespace(actual) is backend.xp
    if not ok:
        raise Mismatch(f"expected a {backend.name} array{where}, got {type(actual)}")
    got_dtype = backend.dtype_name(actual)
    if got_dtype != dtype:
        raise Mismatch(f"dtype{where}: expected {dtype}, got {got_dtype}")
    if tuple(actual.shape) != desired.shape:
        raise Mismatch(f"shape{where}: expected {desired.shape}, got {tuple(actual.shape)}")
    if not backend.same_device(actual):
        got = array_api_compat.device(actual)
        raise Mismatch(f"device{where}: expected {backend.device}, got {got}")
    got = backend.to_numpy(actual)
    if dtype.startswith(("int", "uint", "bool")):
        if not np.array_equal(got, desired):
            raise Mismatch(f"values{where}:\n actual={got!r}\n desired={desired!r}")
        return 0.0
    for part in (
        (np.real, np.imag) if np.iscomplexobj(desired) or np.iscomplexobj(got) else (np.real,)
    ):
        g, d = part(got).astype(np.float64), part(desired).astype(np.float64)
        if np.isfinite(g).all() and np.isfinite(d).all():
            continue  # no NaN and no infinity on either side: their positions agree
        if not np.array_equal(np.isnan(g), np.isnan(d)):
            raise Mismatch(
                f"NaN positions{where}: expected {np.flatnonzero(np.isnan(d))}, got "
                f"{np.flatnonzero(np.isnan(g))}\n actual={g!r}\n desired={d!r}"
            )
        if not np.array_equal(
            np.where(np.isinf(g), np.sign(g), 0), np.where(np.isinf(d), np.sign(d), 0)
        ):
            raise Mismatch(f"inf positions{where}:\n actual={g!r}\n desired={d!r}")
    err = ulp_distance(got, desired, dtype, scale=scale, flush=flush)
    if err > ulp:
        unit = f" (of the gradient scale {scale:g})" if scale else ""
        raise Mismatch(
            f"values{where}: {err:.3g} ulp{unit} > budget {ulp:g}\n"
            f" actual={got!r}\n desired={desired!r}"
        )
    return err


def assert_same_bits(backend: Backend, actual: Any, desired: Any, what: str = "") -> None:
    """``actual`` and ``desired`` are arrays of ``backend`` with equal dtype, shape and bits.

    :func:`assert_array` first (namespace, dtype, shape, device, values), then the bit
    patterns (so -0.0 and +0.0, or two NaN payloads, count as different).
    """
    ref = backend.to_numpy(desired)
    assert_array(actual, ref, backend=backend, dtype=backend.dtype_name(desired), what=what)
    got = backend.to_numpy(actual)
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    np.testing.assert_array_equal(got.view(width), ref.view(width), err_msg=f"bits ({what})")
