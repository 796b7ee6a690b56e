"""Test support shared by ``tests/`` and ``conformance/`` (not public API).

It knows how to load each backend, move NumPy reference data onto it, take gradients with the
backend's own autodiff, and compare a result with a reference: namespace, dtype, shape and device
first, then values (NaN and inf positions exactly, -0.0 == +0.0, finite values within a budget
counted in units in the last place of the reference dtype).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "BACKEND_IDS",
    "Backend",
    "assert_array",
    "assert_same_bits",
    "load_backend",
    "ulp_error",
]

#: Every backend id the fixtures know, in the order tests are run.
BACKEND_IDS: tuple[str, ...] = (
    "numpy",
    "array_api_strict",
    "torch",
    "jax",
    "torch-cuda",
    "jax-gpu",
    "cupy",
    "dask",
)


@dataclasses.dataclass
class Backend:
    """One backend on one device, as the tests see it."""

    name: str
    library: str
    xp: Any
    device: Any
    module: Any

    AUTODIFF = ("torch", "jax", "torch-cuda", "jax-gpu")

    @property
    def has_autodiff(self) -> bool:
        """Whether gradients can be taken on this backend."""
        return self.name in self.AUTODIFF

    # ----------------------------------------------------------------- dtypes
    def dtype(self, name: str) -> Any:
        """The backend dtype called ``name`` (``"bfloat16"`` included); skip when absent."""
        import pytest

        if name == "bfloat16":
            if self.library == "torch":
                return self.module.bfloat16
            if self.library == "jax":
                return self.module.numpy.bfloat16
            pytest.skip(f"{self.name} has no bfloat16 dtype")
        if name == "float64" and self.library == "jax":
            import jax

            if not jax.config.jax_enable_x64:
                pytest.skip("jax_enable_x64 is off")
        dt = getattr(self.xp, name, None)
        if dt is None:
            pytest.skip(f"{self.name} has no dtype {name}")
        return dt

    # ------------------------------------------------------------- conversion
    def asarray(self, value: Any, dtype: str | None = None, *, requires_grad: bool = False) -> Any:
        """Put NumPy data (or a nested list) on this backend, with dtype ``dtype``."""
        import numpy as np

        host = np.asarray(value)
        if dtype is None:
            dtype = str(host.dtype)
        if dtype == "bfloat16":
            # NumPy has no bfloat16: build from float32, round on the backend.
            host32 = np.asarray(host, dtype=np.float32)
            if self.library == "torch":
                out = self.module.asarray(host32, device=self.device).to(self.module.bfloat16)
            elif self.library == "jax":
                out = self.module.device_put(
                    self.module.numpy.asarray(host32, dtype=self.module.numpy.bfloat16),
                    self.device,
                )
            else:
                self.dtype("bfloat16")  # skips
                raise AssertionError("unreachable")
        else:
            host = np.asarray(host, dtype=dtype)
            if self.library == "torch":
                out = self.module.asarray(host.copy(), device=self.device)
            elif self.library == "jax":
                out = self.module.device_put(self.module.numpy.asarray(host), self.device)
            elif self.library == "dask":
                out = self.module.array.from_array(host, chunks=-1)
            else:
                out = self.xp.asarray(host, device=self.device)
        if requires_grad:
            out = out.detach().requires_grad_(True)
        return out

    def to_numpy(self, x: Any) -> Any:
        """Copy ``x`` to a NumPy array (float32 for bfloat16); for assertions only."""
        import numpy as np

        if self.library == "torch":
            x = x.detach()
            if x.dtype == self.module.bfloat16:
                x = x.float()
            return x.cpu().numpy()
        if self.library == "jax":
            if x.dtype == self.module.numpy.bfloat16:
                x = x.astype(self.module.numpy.float32)
            return np.asarray(x)
        if self.library == "cupy":
            return x.get()
        if self.library == "dask":
            return np.asarray(x.compute())
        if self.library == "array_api_strict":
            return np.asarray(self.xp.asarray(x, device=self.xp.Device("CPU_DEVICE")))
        return np.asarray(x)

    def dtype_name(self, x: Any) -> str:
        """The dtype of ``x`` as a string such as ``"float32"`` or ``"bfloat16"``."""
        dt = x.dtype
        if self.library == "torch":
            return str(dt).removeprefix("torch.")
        name = getattr(dt, "name", None)
        if isinstance(name, str):
            return name
        # array-api-strict dtypes have no ``name``; str() gives "array_api_strict.float32"
        return str(dt).rsplit(".", 1)[-1]

    # ---------------------------------------------------------------- autodiff
    def grad(self, fn: Callable[..., Any], args: Sequence[Any], weights: Any) -> list[Any]:
        """Gradients of ``sum(fn(*args) * weights)`` with respect to every array in ``args``."""
        if self.library == "torch":
            torch = self.module
            leaves = [a.detach().requires_grad_(True) for a in args]
            out = fn(*leaves)
            loss = (out * weights).sum()
            return list(torch.autograd.grad(loss, leaves, allow_unused=True))
        if self.library == "jax":
            jax = self.module

            def loss(*xs: Any) -> Any:
                return (fn(*xs) * weights).sum()

            return list(jax.grad(loss, argnums=tuple(range(len(args))))(*args))
        raise TypeError(f"{self.name} has no autodiff")

    def jit(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        """``fn`` under ``jax.jit`` (JAX backends only)."""
        if self.library != "jax":
            raise TypeError(f"{self.name} has no jit")
        return self.module.jit(fn, **kwargs)

    def same_device(self, x: Any) -> bool:
        """Whether ``x`` lives on this backend's device."""
        from array_api_compat import device

        if self.library == "dask":
            return True
        return device(x) == self.device


def load_backend(name: str) -> Backend:
    """Import backend ``name`` and pick its device; raises when unavailable."""
    import array_api_compat

    if name == "numpy":
        np = importlib.import_module("numpy")
        xp = array_api_compat.array_namespace(np.empty(0))
        return Backend(name, "numpy", xp, "cpu", np)
    if name == "array_api_strict":
        strict = importlib.import_module("array_api_strict")
        return Backend(name, "array_api_strict", strict, strict.Device("CPU_DEVICE"), strict)
    if name in ("torch", "torch-cuda"):
        torch = importlib.import_module("torch")
        if name == "torch-cuda" and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        dev = torch.device("cuda" if name == "torch-cuda" else "cpu")
        xp = array_api_compat.array_namespace(torch.empty(0))
        return Backend(name, "torch", xp, dev, torch)
    if name in ("jax", "jax-gpu"):
        jax = importlib.import_module("jax")
        jax.config.update("jax_enable_x64", True)
        platform = "gpu" if name == "jax-gpu" else "cpu"
        devices = jax.devices(platform)
        return Backend(name, "jax", jax.numpy, devices[0], jax)
    if name == "cupy":
        cp = importlib.import_module("cupy")
        xp = array_api_compat.array_namespace(cp.empty(0))
        return Backend(name, "cupy", xp, cp.cuda.Device(0), cp)
    if name == "dask":
        da = importlib.import_module("dask.array")
        dask = importlib.import_module("dask")
        xp = array_api_compat.array_namespace(da.empty(0))
        return Backend(name, "dask", xp, "cpu", dask)
    raise ValueError(f"unknown backend {name!r}")


# ------------------------------------------------------------------ comparison
def ulp_error(actual: Any, desired: Any, dtype: str) -> float:
    """Largest error of finite ``actual`` vs ``desired`` in ULPs of ``dtype`` at ``desired``.

    Both are NumPy arrays of the same shape (bfloat16 already widened to float32). Positions
    where ``desired`` is not finite are ignored (they are checked separately).
    """
    import numpy as np

    if np.iscomplexobj(desired) or np.iscomplexobj(actual):
        return max(
            ulp_error(np.real(actual), np.real(desired), dtype),
            ulp_error(np.imag(actual), np.imag(desired), dtype),
        )
    a = np.asarray(actual, dtype=np.float64)
    d = np.asarray(desired, dtype=np.float64)
    finite = np.isfinite(d) & np.isfinite(a)
    if not finite.any():
        return 0.0
    a, d = a[finite], d[finite]
    if dtype.startswith(("int", "uint", "bool")):
        return float(np.max(np.abs(a - d)))
    # spacing of the reference value in its own dtype; the smallest subnormal step below that
    info = {
        "float16": (10, -24),
        "bfloat16": (7, -133),
        "float32": (23, -149),
        "float64": (52, -1074),
        "complex64": (23, -149),
        "complex128": (52, -1074),
    }[dtype]
    mant, min_exp = info
    with np.errstate(divide="ignore"):
        exp = np.floor(np.log2(np.abs(d)))
    exp = np.where(np.abs(d) > 0, exp, -np.inf)
    step = np.maximum(np.exp2(exp - mant), np.exp2(float(min_exp)))
    return float(np.max(np.abs(a - d) / step))


def assert_array(
    actual: Any,
    desired: Any,
    *,
    backend: Backend,
    dtype: str,
    ulp: float = 0,
    what: str = "",
) -> float:
    """Assert that ``actual`` is ``backend``'s array of ``dtype`` equal to NumPy ``desired``.

    Checks, in this order: array namespace, dtype, shape, device, NaN positions, infinities
    (with sign), then finite values within ``ulp`` units in the last place (``0``: exact,
    except that -0.0 equals +0.0). Returns the largest ULP error seen.
    """
    import array_api_compat
    import numpy as np

    where = f" ({what})" if what else ""
    if backend.library == "array_api_strict":
        assert type(actual).__module__.startswith("array_api_strict"), (
            f"expected an array_api_strict array{where}, got {type(actual)}"
        )
    elif backend.library == "jax":
        assert isinstance(actual, backend.module.Array), (
            f"expected a jax.Array{where}, got {type(actual)}"
        )
    else:
        assert array_api_compat.array_namespace(actual) is backend.xp, (
            f"expected a {backend.name} array{where}, got {type(actual)}"
        )
    got_dtype = backend.dtype_name(actual)
    assert got_dtype == dtype, f"dtype{where}: expected {dtype}, got {got_dtype}"
    desired = np.asarray(desired)
    assert tuple(actual.shape) == desired.shape, (
        f"shape{where}: expected {desired.shape}, got {tuple(actual.shape)}"
    )
    assert backend.same_device(actual), (
        f"device{where}: expected {backend.device}, got {array_api_compat.device(actual)}"
    )
    got = backend.to_numpy(actual)
    if dtype.startswith(("int", "uint", "bool")):
        np.testing.assert_array_equal(got, desired, err_msg=f"values{where}")
        return 0.0
    parts = [(np.real(got), np.real(desired))]
    if np.iscomplexobj(desired) or np.iscomplexobj(got):
        parts.append((np.imag(got), np.imag(desired)))
    for g, d in parts:
        g64 = np.asarray(g, dtype=np.float64)
        d64 = np.asarray(d, dtype=np.float64)
        nan_g, nan_d = np.isnan(g64), np.isnan(d64)
        assert np.array_equal(nan_g, nan_d), (
            f"NaN positions{where}: expected {np.flatnonzero(nan_d)}, got {np.flatnonzero(nan_g)}"
            f"\n actual={g64!r}\n desired={d64!r}"
        )
        inf_g = np.where(np.isinf(g64), np.sign(g64), 0)
        inf_d = np.where(np.isinf(d64), np.sign(d64), 0)
        assert np.array_equal(inf_g, inf_d), (
            f"inf positions{where}:\n actual={g64!r}\n desired={d64!r}"
        )
    err = ulp_error(got, desired, dtype)
    assert err <= ulp, (
        f"values{where}: {err:.3g} ULP > budget {ulp}\n actual={got!r}\n desired={desired!r}"
    )
    return err


def assert_same_bits(backend: Backend, actual: Any, desired: Any, what: str = "") -> None:
    """``actual`` and ``desired`` are arrays of ``backend`` with equal dtype, shape and bits.

    :func:`assert_array` first (namespace, dtype, shape, device, values), then the bit
    patterns (so -0.0 and +0.0, or two NaN payloads, count as different).
    """
    import numpy as np

    ref = backend.to_numpy(desired)
    assert_array(actual, ref, backend=backend, dtype=backend.dtype_name(desired), what=what)
    got = backend.to_numpy(actual)
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    np.testing.assert_array_equal(got.view(width), ref.view(width), err_msg=f"bits ({what})")
