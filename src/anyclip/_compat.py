"""The one place that talks to array-api-compat: namespaces, devices and libraries.

Layer: helpers below the public layer. Everything else in anyclip asks this module for an array
namespace, a device, a library name or a dtype fact; arithmetic lives in
:mod:`anyclip._numerics`. It never imports torch, jax or tensorflow: array-api-compat recognises
their arrays through ``sys.modules``, so importing anyclip stays cheap and framework-free.
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import array_api_compat

from anyclip._memo import Memo, remember, remembered
from anyclip._typing import Namespace

__all__ = [
    "HALF_PRECISION",
    "all_arrays",
    "data_device",
    "default_namespace",
    "device",
    "dtype_name",
    "imported",
    "is_array",
    "is_dtensor",
    "is_functorch_wrapped",
    "is_numpy_scalar",
    "is_weak_scalar",
    "library",
    "may_be_sharded",
    "namespace",
    "to_device",
    "xla_flushes",
]


class _Modules:
    """One attribute per module :func:`_is_imported` found: its name, ``__`` for each dot."""


#: Where :func:`_is_imported` leaves the module it found, for :func:`imported` to take.
_MODULES = _Modules()


def _is_imported(name: str) -> bool:
    """Whether the module ``name`` is imported (an entry of None in ``sys.modules`` is not).

    The module found is left in :data:`_MODULES` (as ``_MODULES.torch__distributed``).
    """
    module = sys.modules.get(name)
    if module is None:
        return False
    setattr(_MODULES, name.replace(".", "__"), module)
    return True


# What ``torch.compiler.assume_constant_result`` sets (anyclip cannot import torch to call it;
# tests/test_compile.py checks that torch still sets this): Dynamo runs the function itself
# while it traces and takes its answer as a constant, instead of tracing ``sys.modules``.
_is_imported._dynamo_marked_constant = True  # type: ignore[attr-defined]


def imported(name: str) -> ModuleType | None:
    """The module ``name`` if it is imported, else None: ``sys.modules.get(name)``.

    Never imports anything: anyclip recognises a framework's objects only once the user has
    imported it. Under ``torch.compile`` it reads no ``sys.modules``: Dynamo wrapped that whole
    dict (some 2,500 entries with torch and JAX imported) at its first read in each trace,
    about half the trace of a small ``clip_by_norm``, guarded on it, and could fail with
    "dictionary changed size during iteration" while another thread imported. Instead, Dynamo
    runs :func:`_is_imported` (its answer a constant) and takes the module from an attribute,
    guarding on that module alone. A module absent while a call is traced stays absent from its
    graph, whose inputs then hold none of its objects (a later input that does fails Dynamo's
    guards on the inputs' types and is traced anew). For the objects of that module only, then:
    where a module's presence changes how anyclip treats other objects (JAX's pytree registry,
    which user classes join), the code reads ``sys.modules`` itself, and Dynamo traces anew
    once the module is imported.
    """
    if _is_imported(name):
        # an attribute, not a dict entry: Dynamo reads it after running _is_imported, and
        # an attribute name holds no dot
        module: ModuleType = getattr(_MODULES, name.replace(".", "__"))
        return module
    return None


def is_numpy_scalar(value: object) -> bool:
    """Whether ``value`` is a NumPy scalar (``np.float32(1)``), which TF treats as a value."""
    np = imported("numpy")
    return np is not None and isinstance(value, np.generic)


#: Namespace of each array type met so far; ``None`` for types that are not arrays. A lookup
#: per argument keeps dispatch cheap and lets torch.compile trace it without graph breaks (a
#: :class:`~anyclip._memo.Memo`: filled outside the trace where the type alone decides).
_NAMESPACE_OF_TYPE: Memo[Namespace | None] = Memo("anyclip._compat.namespace_of_type")

#: Types that are no arrays, known before a first call traced by torch.compile (which cannot
#: read a builtin type's ``__module__``): the builtin scalars and the containers a tree holds.
_NOT_ARRAYS = (bool, int, float, complex, str, type(None), bytes, dict, list, tuple, set, frozenset)


def _known_type(tp: type) -> str:
    """Where :data:`_NAMESPACE_OF_TYPE` keeps ``tp``'s namespace, added if the type decides it.

    The name of the memo's attribute, or ``""`` when a value must decide. A torch tensor type
    (``torch.nn.Parameter``, ``FakeTensor`` and other subclasses too) and the builtin scalars
    and containers (namedtuples, ``OrderedDict``, ... included) are decided by their type;
    other types by a value (:func:`_namespace_of`). Dynamo runs this function rather than
    tracing it (the mark below): see :mod:`anyclip._memo`.
    """
    name: str | None = _NAMESPACE_OF_TYPE.index.get(tp)
    if name is not None:
        return name
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(tp, torch.Tensor):
        # directly, without array-api-compat's cached helpers, which torch.compile warns
        # about: array-api-compat's torch namespace with its same-dtype calls made direct
        from anyclip._torch_namespace import NAMESPACE

        return remember(_NAMESPACE_OF_TYPE.name, tp, _same, NAMESPACE)
    if issubclass(tp, _NOT_ARRAYS):
        return remember(_NAMESPACE_OF_TYPE.name, tp, _same, None)
    return ""


_known_type._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _same(value: Any) -> Any:
    return value


def _namespace_of(value: object) -> Namespace | None:
    tp = type(value)
    name = _known_type(tp)
    if name:
        xp: Namespace | None = getattr(_NAMESPACE_OF_TYPE, name)
        return xp
    if (
        is_numpy_scalar(value)
        or tp.__module__.startswith("numpy.ma")  # a masked array: refused by the policy
        # an np.matrix: converted by the policy, as TF does (array-api-compat 1.12 takes it
        # for an array, where `*` is a matrix product; 1.16 no longer does)
        or (tp.__module__ == "numpy" and tp.__name__ == "matrix")
        or not array_api_compat.is_array_api_obj(value)
    ):
        xp = None
    else:
        xp = array_api_compat.array_namespace(value)
    return remembered(_NAMESPACE_OF_TYPE, tp, _same, xp)


def is_array(value: object) -> bool:
    """Whether ``value`` is an array of a supported namespace (NumPy scalars are not)."""
    return _namespace_of(value) is not None


def all_arrays(values: Sequence[Any]) -> bool:
    """Whether every one of ``values`` is an array of a supported namespace.

    Checked once per distinct type (a list of 2,000 gradients usually holds one), as
    :func:`is_array` would answer for each value: its answer depends on the type only.
    """
    return all(_namespace_of(v) is not None for v in {type(v): v for v in values}.values())


def namespace(*arrays: Any, names: Sequence[str] = ()) -> Namespace:
    """The array namespace shared by ``arrays`` (non-arrays are ignored).

    ``names`` are the arguments' names, for the error message. The namespace of each distinct
    type is looked up once; only a mix of libraries walks the arguments one by one, to name
    the first two that differ.

    Raises
    ------
    TypeError
        When the arrays come from different libraries.
    """
    # Namespaces are compared by identity, never hashed: torch.compile before 2.13 cannot
    # hash a module (Dynamo's "cannot determine whether the underlying object is hashable").
    found = None
    for a in {type(a): a for a in arrays}.values():
        xp = _namespace_of(a)
        if xp is None:
            continue
        if found is None:
            found = xp
        elif xp is not found:
            break  # a mix of libraries: walk the arguments below to name two of them
    else:
        return default_namespace() if found is None else found
    found = None
    first = 0
    for i, a in enumerate(arrays):
        xp = _namespace_of(a)
        if xp is None:
            continue
        if found is None:
            found, first = xp, i
        elif xp is not found:
            name = names[i] if i < len(names) else f"argument {i}"
            other = names[first] if first < len(names) else f"argument {first}"
            msg = (
                f"`{name}` must come from the same array library as `{other}`: got "
                f"{_type_name(a)} and {_type_name(arrays[first])}"
            )
            raise TypeError(msg)
    return default_namespace() if found is None else found


def _type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def default_namespace() -> Namespace:
    """The namespace of a call without any array argument to take one from.

    NumPy's when NumPy is installed; otherwise the first of torch, JAX and array-api-strict
    that is already imported (a torch-only or JAX-only install needs no NumPy).

    Raises
    ------
    TypeError
        When none of them is available.
    """
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        return array_api_compat.array_namespace(np.empty(0))
    if imported("torch") is not None:
        from anyclip._torch_namespace import NAMESPACE

        return NAMESPACE
    for module, compat in (("jax", "jax.numpy"), ("array_api_strict", "array_api_strict")):
        if imported(module) is not None:
            return importlib.import_module(compat)
    msg = (
        "a call without any array argument builds its result with NumPy, or without NumPy "
        "with torch, JAX or array-api-strict if one is imported; none is: install NumPy or "
        "pass an array"
    )
    raise TypeError(msg)


def device(x: Any) -> Any:
    """The device ``x`` lives on."""
    xp = _namespace_of(x)
    if xp is not None:
        lib = library(xp)
        if lib == "torch":
            return x.device  # direct attribute: no helper call for torch.compile to trace
        if lib == "numpy":
            return "cpu"
    return array_api_compat.device(x)


def data_device(*values: Any) -> Any:
    """The device that host data (Python numbers and lists) given beside ``values`` goes to.

    The first array's device on torch, CuPy and array-api-strict, whose operations refuse
    arrays on two devices (a list ``t`` made on the CPU beside a bound on ``cuda:0``); None
    (the namespace's default) when none of ``values`` is an array, on NumPy and Dask (one
    device) and on JAX (uncommitted arrays follow the computation, under ``jit`` too), and
    beside a torch ``meta`` tensor: it has no values, so data stays where it is and is refused
    beside it (:func:`anyclip._policy.check_meta`). Read once per call, from the arguments.
    """
    for v in values:
        xp = _namespace_of(v)
        if xp is None:
            continue
        if library(xp) not in ("torch", "cupy", "array_api_strict"):
            return None
        dev = device(v)
        return None if getattr(dev, "type", None) == "meta" else dev
    return None


#: Library name of each namespace met so far, by the namespace's ``__name__``.
_LIBRARY_OF_NAMESPACE: dict[str, str] = {"anyclip._torch_namespace.NAMESPACE": "torch"}


def library(xp: Namespace) -> str:
    """``"numpy"``, ``"torch"``, ``"jax"``, ``"cupy"``, ``"dask"`` or the namespace's name."""
    key = xp.__name__
    try:
        return _LIBRARY_OF_NAMESPACE[key]
    except KeyError:
        pass
    # From the module name alone (array-api-compat's own checks are cached in a way that
    # torch.compile warns about): "array_api_compat.torch", "jax.numpy", "dask.array", ...
    parts = key.removeprefix("array_api_compat.").split(".")
    name = parts[0] if parts[0] in ("numpy", "torch", "jax", "cupy", "dask") else key
    _LIBRARY_OF_NAMESPACE[key] = name
    return name


def is_weak_scalar(value: Any) -> bool:
    """Whether ``value`` is a JAX weakly typed 0-d array: a Python scalar passed through jit."""
    jax = imported("jax")
    if jax is None or not isinstance(value, jax.Array) or value.ndim != 0:
        return False
    aval = getattr(value, "aval", None)  # concrete arrays and tracers both have one
    return bool(getattr(aval, "weak_type", False))


#: The half-precision floating dtypes by :func:`dtype_name`: squared and summed as TF does
#: in them (rounded to the dtype at each step, sums with float32 lanes or accumulators).
HALF_PRECISION = ("float16", "bfloat16")


def dtype_name(dtype: Any) -> str:
    """A short, backend-neutral name for ``dtype`` (``"float32"``, ``"bfloat16"``...)."""
    name = getattr(dtype, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(dtype, type):  # NumPy's scalar types, which its namespace calls dtypes
        return dtype.__name__
    return str(dtype).rsplit(".", 1)[-1]


def to_device(x: Any, dev: Any) -> Any:
    """``x`` moved to device ``dev`` (itself when it is already there)."""
    return array_api_compat.to_device(x, dev)


def torch_compiling() -> bool:
    """Whether ``torch.compile`` is tracing the caller (False when torch is not imported)."""
    torch = imported("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


def torch_to(t: Any, device: Any, dtype: Any = None) -> Any:
    """The torch tensor ``t`` on ``device`` (a ``torch.device``), cast to ``dtype`` if given.

    Queued (``non_blocking``) unless the copy lands on the CPU: a copy from an accelerator to
    the CPU with ``non_blocking=True`` returns before its data arrive, and the CPU then reads
    what the memory held before (GPU run 6: a list on CUDA and the CPU was scaled by such a
    factor). That copy waits for the device, a host sync that a list spanning the CPU needs
    anyway.
    """
    return t.to(device=device, dtype=dtype, non_blocking=device.type != "cpu")


#: The torch device types on which compiled calls keep torch's multi-tensor kernels.
TORCH_HOST_DEVICES = frozenset({"cpu"})


def torch_compiling_off_the_cpu(device: Any) -> bool:
    """Whether ``torch.compile`` is tracing a call on the torch ``device``, not the CPU.

    There anyclip takes per-tensor ops, which Inductor fuses by itself, instead of torch's
    multi-tensor ones (``_foreach_norm``, ``_foreach_mul``): on CUDA (torch 2.11, an H200)
    Inductor's kernels for those gave results that eager torch does not, the inputs back
    unscaled (GPU runs 3 to 5: docs/conformance-gpu.md).
    """
    return device.type not in TORCH_HOST_DEVICES and torch_compiling()


def is_functorch_wrapped(a: Any) -> bool:
    """Whether ``a`` is a torch tensor wrapped by a ``torch.func`` transform (``vmap``, ``grad``).

    Such tensors refuse in-place writes into plain tensors and have no batching rule for
    ``torch._foreach_norm``, so the kernels take their generic steps for them. False while
    ``torch.compile`` traces (Dynamo handles the transforms itself and cannot trace the test).
    """
    torch = imported("torch")
    if torch is None or not isinstance(a, torch.Tensor) or torch.compiler.is_compiling():
        return False
    wrapped: bool = torch._C._functorch.is_functorch_wrapped_tensor(a)
    return wrapped


def _auto_devices(mesh: Any) -> int:
    """The number of devices along the ``Auto`` axes of a JAX (abstract) mesh (1: none)."""
    if _no_mesh(mesh):
        return 1
    from jax.sharding import AxisType

    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    types = dict(zip(mesh.axis_names, mesh.axis_types, strict=True))
    return math.prod(n for name, n in sizes.items() if types[name] == AxisType.Auto)


def _no_mesh(mesh: Any) -> bool:
    """Whether a JAX (abstract) mesh is absent or empty."""
    return mesh is None or mesh.empty


def is_dtensor(x: Any) -> bool:
    """Whether ``x`` is a torch ``DTensor`` (without importing torch.distributed)."""
    mod = imported("torch.distributed.tensor")
    cls = getattr(mod, "DTensor", None)
    return cls is not None and isinstance(x, cls)


def may_be_sharded(a: Any) -> bool:
    """Whether the JAX array ``a`` may be sharded, so that a reshape of it could gather it.

    True for an array whose sharding is not fully replicated, and for a traced array that is
    sharded over ``Explicit`` mesh axes or that lies on a mesh with ``Auto`` axes of several
    devices: its own mesh (arrays put on the mesh, passed to ``jit`` without
    ``jax.set_mesh``) or the one set by ``jax.set_mesh``. Under ``Auto`` axes the tracer does
    not say how it is sharded. ``Manual`` axes (inside ``shard_map``) hold local blocks: a
    reshape of them moves nothing.

    A tracer that names no mesh, with none set either, says nothing of its sharding: it may
    be sharded whenever the program sees several devices. Host arrays traced by
    ``jax.jit(f, in_shardings=...)`` are such tracers, sharded as ``in_shardings`` say (a
    reshape of them made XLA gather them). On one device nothing can be sharded.
    """
    import jax

    if isinstance(a, jax.core.Tracer):
        try:
            sharding = jax.typeof(a).sharding
            spec, mesh = sharding.spec, sharding.mesh
        except AttributeError:  # older JAX: no sharding in types
            return jax.device_count() > 1
        if any(s is not None for s in spec):
            return True
        context = jax.sharding.get_abstract_mesh()
        if _no_mesh(mesh) and _no_mesh(context):
            return jax.device_count() > 1
        return _auto_devices(mesh) > 1 or _auto_devices(context) > 1
    sharding = getattr(a, "sharding", None)
    return sharding is not None and not sharding.is_fully_replicated


def xla_flushes(a: Any) -> bool:
    """Whether XLA flushes subnormals in arithmetic on the JAX array ``a``: on the CPU only.

    XLA:CPU runs with flush-to-zero and denormals-are-zero (as TF's CPU kernels); XLA:GPU
    generates code without them (``--xla_gpu_ftz=false`` by default) and keeps IEEE
    subnormals. A traced array runs on JAX's default backend.
    """
    import jax

    if isinstance(a, jax.core.Tracer):
        return bool(jax.default_backend() == "cpu")
    devices = getattr(a, "devices", None)
    if devices is None:
        return bool(jax.default_backend() == "cpu")
    return all(d.platform == "cpu" for d in devices())
