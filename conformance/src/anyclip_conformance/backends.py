"""The backends the suite runs on: one id per backend and device, and one loader.

:class:`BackendId` names every backend (and device) the fixtures know; :func:`load_backend`
imports one and picks its device; :class:`Backend` is what a test holds: the array namespace,
the device, and how to move NumPy data on and off it, take gradients and trace with ``jax.jit``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from anyclip_conformance import jax_lowering

__all__ = [
    "BACKEND_IDS",
    "Backend",
    "BackendId",
    "load_backend",
    "parse_backends",
]


class BackendId(str, enum.Enum):
    """Every backend (and device) the suite knows, in the order tests run."""

    NUMPY = "numpy"
    ARRAY_API_STRICT = "array_api_strict"
    TORCH = "torch"
    JAX = "jax"
    TORCH_CUDA = "torch-cuda"
    JAX_GPU = "jax-gpu"
    CUPY = "cupy"
    DASK = "dask"

    @property
    def library(self) -> str:
        """The array library behind this backend (``"torch"`` for ``torch-cuda``, ...)."""
        return self.value.split("-", 1)[0]

    @property
    def has_autodiff(self) -> bool:
        """Whether gradients can be taken on this backend."""
        return self.library in ("torch", "jax")


#: Every backend id, as strings, in the order tests run.
BACKEND_IDS: tuple[str, ...] = tuple(b.value for b in BackendId)


def parse_backends(names: str | Iterable[str]) -> list[BackendId]:
    """Backend ids from ``"numpy,torch"`` (or a list of names); refuse unknown names.

    >>> [b.value for b in parse_backends("numpy, torch")]
    ['numpy', 'torch']
    """
    if isinstance(names, str):
        names = names.split(",")
    out = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        try:
            out.append(BackendId(name))
        except ValueError:
            valid = ", ".join(BACKEND_IDS)
            raise ValueError(
                f"unknown backend {name!r}: expected a comma-separated list of {valid}"
            ) from None
    return out


@dataclasses.dataclass
class Backend:
    """One backend on one device, as the tests see it."""

    name: str
    library: str
    xp: Any
    device: Any
    module: Any

    @property
    def has_autodiff(self) -> bool:
        """Whether gradients can be taken on this backend."""
        return BackendId(self.name).has_autodiff

    # ----------------------------------------------------------------- dtypes
    def has_dtype(self, name: str) -> bool:
        """Whether this backend has dtype ``name`` (bfloat16: torch, JAX; float64 on JAX: x64)."""
        if name == "bfloat16":
            return self.library in ("torch", "jax")
        if name == "float64" and self.library == "jax":
            return bool(self.module.config.jax_enable_x64)
        return getattr(self.xp, name, None) is not None

    def dtype(self, name: str) -> Any:
        """The backend dtype called ``name`` (``"bfloat16"`` included); skip when absent."""
        import pytest

        if not self.has_dtype(name):
            pytest.skip(f"{self.name} has no dtype {name}")
        if name == "bfloat16":
            return self.module.bfloat16 if self.library == "torch" else self.module.numpy.bfloat16
        return getattr(self.xp, name)

    # ------------------------------------------------------------- conversion
    def asarray(self, value: Any, dtype: str | None = None, *, requires_grad: bool = False) -> Any:
        """Put NumPy data (or a nested list) on this backend, with dtype ``dtype``."""
        import numpy as np

        host = np.asarray(value)
        if dtype is None:
            dtype = str(host.dtype)
        if dtype == "bfloat16":  # NumPy has no bfloat16: from float32, rounded on the backend
            host32, bf16 = np.asarray(host, dtype=np.float32), self.dtype("bfloat16")  # or skip
            if self.library == "torch":
                out = self.module.asarray(host32, device=self.device).to(bf16)
            else:
                out = self.module.device_put(
                    self.module.numpy.asarray(host32, dtype=bf16), self.device
                )
        else:
            host = np.asarray(host, dtype=dtype)
            if self.library == "torch":
                out = self.module.asarray(host.copy(), device=self.device)
            elif self.library == "jax":
                # straight to the device: jnp.asarray ran a program (compiled, or read from the
                # persistent cache) for each new shape and dtype, 2 ms an array; the copy keeps
                # the array from sharing the caller's NumPy memory
                out = self.module.device_put(host.copy(), self.device)
            elif self.library == "dask":
                out = self.module.array.from_array(host, chunks=-1)
            elif self.library == "cupy":
                # as bytes, viewed back: CuPy made a 0-d -0.0 +0.0 (GPU run 5, CuPy 14.2)
                data = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
                out = self.xp.asarray(data, device=self.device).view(host.dtype)
                out = out.reshape(host.shape)
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
            # dask runs NumPy when the graph is computed, after anyclip returned: TF's silent
            # inf/NaN cannot be kept there (a declared difference), so the check silences it,
            # in this thread (dask's threads see this errstate only from dask 2026.3, NumPy 2)
            with np.errstate(all="ignore"):
                return np.asarray(x.compute(scheduler="synchronous"))
        if self.library == "array_api_strict":
            return np.asarray(self.xp.asarray(x, device=self.xp.Device("CPU_DEVICE")))
        return np.asarray(x)

    def to_numpy_all(self, xs: Sequence[Any]) -> list[Any]:
        """:meth:`to_numpy` of each of ``xs``; for assertions only.

        Dask computes them in one call, so the graph they share runs once (one compute each ran
        it once per array).
        """
        if self.library != "dask":
            return [self.to_numpy(x) for x in xs]
        import numpy as np

        with np.errstate(all="ignore"):  # as to_numpy
            return [np.asarray(v) for v in self.module.compute(*xs, scheduler="synchronous")]

    def computed(self, xs: Sequence[Any]) -> list[Any]:
        """``xs`` with their Dask graphs run once, together; other backends' arrays as they are.

        Still Dask arrays (``dask.persist``: same dtype, shape and chunks), whose chunks are
        held in memory, so :meth:`to_numpy` of each reads them instead of running the graph
        they share again. For assertions only.
        """
        if self.library != "dask":
            return list(xs)
        import numpy as np

        with np.errstate(all="ignore"):  # as to_numpy
            return list(self.module.persist(*xs, scheduler="synchronous"))

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

    @contextlib.contextmanager
    def host_syncs_raise(self) -> Iterator[None]:
        """Inside the block, a CUDA operation that synchronises with the host raises.

        ``torch.cuda.set_sync_debug_mode("error")`` for torch on CUDA (a no-op elsewhere), set
        and reset here so that it never outlives the block: its "prototype feature" warning,
        an error under the suite's ``filterwarnings``, once escaped between the setting and the
        ``try`` that reset it, and every later test in that process failed on its own setup.
        """
        if self.library != "torch" or self._torch_key(self.device)[0] != "cuda":
            yield
            return
        torch = self.module
        torch.cuda.synchronize()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Synchronization debug mode is a prototype")
            torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")

    def _torch_key(self, dev: Any) -> tuple[str, int | None]:
        return _torch_device_key(self.module, dev)

    def same_device(self, x: Any) -> bool:
        """Whether ``x`` lives on this backend's device.

        Devices are compared with their index filled in: a tensor on ``cuda:0`` is on the
        backend's ``cuda`` when device 0 is the current CUDA device.
        """
        from array_api_compat import device

        if self.library == "dask":
            return True
        got = device(x)
        if self.library == "torch":
            return self._torch_key(got) == self._torch_key(self.device)
        return bool(got == self.device)


def _torch_device_key(torch: Any, dev: Any) -> tuple[str, int | None]:
    """``(type, index)`` of a torch device, the index of an unindexed accelerator filled in.

    ``torch.device("cuda")`` means the current CUDA device; tensors always report an index
    (``cuda:0``), so the two compare equal only once the index is filled in. Without a CUDA
    runtime (fake tensors on ``cuda`` in CPU-only tests) the current device is 0, as torch's.
    """
    dev = torch.device(dev)
    if dev.type == "cpu" or dev.index is not None:
        return dev.type, dev.index
    if dev.type == "cuda" and torch.cuda.is_available():
        return dev.type, torch.cuda.current_device()
    return dev.type, 0


def load_backend(name: str | BackendId) -> Backend:
    """Import backend ``name`` and pick its device; raises when unavailable."""
    import array_api_compat

    name = BackendId(name).value

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
        dev = torch.device("cuda" if name == "torch-cuda" else "cpu")  # compared by index
        xp = array_api_compat.array_namespace(torch.empty(0))
        return Backend(name, "torch", xp, dev, torch)
    if name in ("jax", "jax-gpu"):
        jax = importlib.import_module("jax")
        jax.config.update("jax_enable_x64", True)
        jax_lowering.share()  # one MLIR context per thread: half the time of the JAX checks
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
    raise AssertionError(f"no loader for {name!r}")  # every BackendId has one above
