"""Compare anyclip with the TensorFlow reference data, one case on one backend.

:func:`check_case` runs one case of ``data/`` on one backend in one variant (``eager``,
``jit`` under ``jax.jit``, ``grad`` through the backend's autodiff) and raises
:class:`~anyclip_conformance.compare.Mismatch` (an ``AssertionError``) on a difference. The
rules are the same for every backend and variant:

* the result has the structure TF returns (list vs tuple, ``None`` entries), and every array has
  the backend's array type, TF's dtype and shape exactly, and the input's device;
* NaN positions and infinities (with sign) match exactly; -0.0 equals +0.0 (TF's own signed
  zeros depend on SIMD lanes, see docs/tf-reference.md §0.4);
* subnormal values equal zero in float32, float64 and bfloat16 (TF's CPU kernels flush them;
  ``compare.py``);
* finite values agree within the budget of ``budgets.py`` (ulp of the reference's dtype at the
  reference value); ``clip_by_value`` and every integer result must be bit-exact;
* where TF refuses, anyclip raises the recorded class (``TypeError`` or ``ValueError``);
* gradients of ``sum(out * w)`` (``w = 1..n`` per output array) w.r.t. every floating array
  argument follow the same rules, in ulps of the case's gradient scale (:func:`grad_scale`).

Known deviations (``xfails/<backend>.txt``) are not this module's business: the pytest plugin
turns them into strict xfail marks.

The jit variant traces one ``jax.jit`` wrapper per function and argument structure (every
argument but the arrays' values and shapes), so cases that differ only in their data, such as
the random grids, share a compiled program, as a training loop calling the same function again
would. :func:`release_compiled` empties JAX's caches: each compiled program holds about a
megabyte, and the whole catalogue compiles thousands.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import json
import sys
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

import anyclip
from anyclip_conformance import jax_lowering
from anyclip_conformance.backends import Backend, load_backend
from anyclip_conformance.budgets import REAL_GRADIENT_BUDGETS, budget, gpu_budget
from anyclip_conformance.compare import Mismatch, assert_array
from anyclip_conformance.reference import load_arrays, load_index, load_real_gradients
from anyclip_conformance.specs import (
    array_specs,
    build,
    decode_value,
    output_leaves,
    result_leaves,
    selected,
    weights_for,
)

__all__ = [
    "Mismatch",
    "applicable",
    "check_case",
    "check_real_gradients",
    "grad_scale",
    "is_svd",
    "prepare_entry",
    "release_compiled",
]


@dataclasses.dataclass
class _Prepared:
    entry: dict[str, Any]
    arrays: dict[str, np.ndarray]
    specs: dict[str, dict[str, Any]]

    def call(self, fn: Callable[..., Any], leaves: dict[str, Any]) -> Any:
        def arg(spec: Any, path: str) -> Any:
            return build(spec, path, lambda _, p: leaves[p], lambda key: self.arrays[key].copy())

        args = [arg(a, str(i)) for i, a in enumerate(self.entry["args"])]
        kwargs = {k: arg(v, k) for k, v in self.entry["kwargs"].items()}
        return fn(*args, **kwargs)


def _prepare(case_id: str | _Prepared) -> _Prepared:
    if isinstance(case_id, _Prepared):
        return case_id
    entry = load_index()[case_id]
    return prepare_entry(entry, load_arrays(entry["function"]))


def prepare_entry(entry: dict[str, Any], arrays: dict[str, np.ndarray]) -> _Prepared:
    """A case given by its index entry and arrays (``generate.run_case`` output: live mode)."""
    return _Prepared(entry, arrays, array_specs(entry))


@cache
def _numpy_backend() -> Backend:
    """Where results of cases without an array argument land (TF: float32 tensors; us: NumPy)."""
    return load_backend("numpy")


@dataclasses.dataclass
class _Rules:
    """How one case's results are compared: its data, backend, budget and gradient scale."""

    arrays: dict[str, np.ndarray]
    backend: Backend
    function: str
    grad: bool = False
    svd: bool = False
    scale: float | None = None

    def compare(self, actual: Any, expected: Any, what: str) -> float:
        """Compare a result structure with the recorded one; return the largest ulp error."""
        if expected is None:
            if actual is not None:
                raise Mismatch(f"{what}: expected None, got {type(actual).__name__}")
            return 0.0
        for kind, typ in (("list", list), ("tuple", tuple)):
            if kind in expected:
                items = expected[kind]
                if type(actual) is not typ:
                    raise Mismatch(f"{what}: expected a {kind}, got {type(actual).__name__}")
                if len(actual) != len(items):
                    raise Mismatch(f"{what}: expected {len(items)} items, got {len(actual)}")
                pairs = enumerate(zip(actual, items, strict=True))
                return max((self.compare(a, e, f"{what}[{i}]") for i, (a, e) in pairs), default=0.0)
        desired = self.arrays[expected["key"]]
        dtype = expected["dtype"]
        if actual is None and self.grad:  # torch: not connected; TF recorded zeros
            if np.any(desired != 0):
                raise Mismatch(f"{what}: no gradient (None), expected {desired!r}")
            return 0.0
        ulp = budget(self.function, dtype, grad=self.grad, svd=self.svd)
        return assert_array(
            actual, desired, backend=self.backend, dtype=dtype, ulp=ulp, what=what,
            scale=self.scale, flush=True,
        )  # fmt: skip


def applicable(case_id: str | _Prepared, backend: Any, variant: str) -> str | None:
    """Why the case cannot run on ``backend`` in ``variant`` (None when it can)."""
    prep = _prepare(case_id)
    for spec in prep.specs.values():
        if not backend.has_dtype(spec["dtype"]):
            return f"{backend.name} has no {spec['dtype']}"
    entry = prep.entry
    for _, leaf in output_leaves(entry.get("outputs")):
        if not backend.has_dtype(leaf["dtype"]):
            return f"{backend.name} has no {leaf['dtype']}"
    if variant == "jit":
        if backend.library != "jax":
            return "jit is a JAX variant"
        if not prep.specs:
            return "no array argument to trace"
    if variant == "grad":
        if not backend.has_autodiff:
            return f"{backend.name} has no autodiff"
        if "grads" not in entry:
            return "not a gradient case"
    return None


def check_case(
    case_id: str | _Prepared,
    backend: Backend,
    variant: str = "eager",
    impl: Any = anyclip,
    *,
    fn: Callable[..., Any] | None = None,
) -> float:
    """Run one case; raise :class:`Mismatch` (an ``AssertionError``) on a difference.

    ``impl`` is what is checked: any object with the eight TF-named functions as attributes
    (``clip_by_value``, ``clip_by_norm``, ``clip_by_global_norm``, ``global_norm``,
    ``clip_by_average_norm``, ``norm``, ``l2_normalize``, ``normalize``); by default the
    ``anyclip`` module. ``fn`` replaces the function outright (another route to the same
    formula, such as ``anyclip.tree`` or an adapter). Returns the largest ulp error.
    """
    prep = _prepare(case_id)
    entry = prep.entry
    if fn is None:
        fn = getattr(impl, entry["function"])
    leaves = {
        path: backend.asarray(prep.arrays[spec["array"]], spec["dtype"])
        for path, spec in prep.specs.items()
    }
    if variant == "grad":
        return _check_grad(prep, fn, leaves, backend)
    cmp_backend = backend if prep.specs else _numpy_backend()

    if variant == "jit":
        paths = list(leaves)
        runner = _jitted(prep, fn, paths, backend)

        def run() -> Any:
            return runner(*[leaves[p] for p in paths])
    else:

        def run() -> Any:
            return prep.call(fn, leaves)

    expected_error = entry.get("error")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            actual = run()
    except Exception as exc:
        if expected_error is None:
            raise Mismatch(
                f"raised {type(exc).__name__}: {str(exc)[:300]} (TF returned a result)"
            ) from exc
        want = tuple(
            {"TypeError": TypeError, "ValueError": ValueError}[name]
            for name in expected_error.split("|")
        )
        if not isinstance(exc, want):
            raise Mismatch(
                f"raised {type(exc).__name__}: {str(exc)[:200]}; expected {expected_error} "
                f"(TF: {entry.get('tf_error')}: {entry.get('tf_message', '')[:150]})"
            ) from exc
        return 0.0
    if expected_error is not None:
        tf = entry.get("tf_error")
        tf_text = f"TF: {tf}: {entry.get('tf_message', '')[:150]}" if tf else entry["policy"]
        raise Mismatch(f"returned a result, expected {expected_error} ({tf_text})")
    rules = _Rules(prep.arrays, cmp_backend, entry["function"], svd=is_svd(entry))
    return rules.compare(actual, entry["outputs"], "result")


#: The jit variant's wrappers: (function, backend, argument structure) -> ``jax.jit`` wrapper.
_JITTED: dict[tuple[Any, str, str], Callable[..., Any]] = {}


def _structure(spec: Any) -> Any:
    """An encoded argument with each array replaced by its dtype (what a trace depends on,
    besides the shapes, which ``jax.jit`` keys on itself)."""
    if isinstance(spec, list):
        return [_structure(s) for s in spec]
    if isinstance(spec, dict):
        if "array" in spec:
            return {"array": spec["dtype"]}
        return {k: _structure(v) for k, v in spec.items()}
    return spec


def _jitted(prep: _Prepared, fn: Callable[..., Any], paths: list[str], backend: Backend) -> Any:
    """The ``jax.jit`` of ``fn`` on the case's arrays (``paths``), shared by every case that
    passes the same other arguments."""
    entry = prep.entry
    structure = json.dumps([_structure(entry["args"]), _structure(entry["kwargs"]), paths])
    key = (fn, backend.name, structure)
    runner = _JITTED.get(key)
    if runner is None:

        def traced(*xs: Any) -> Any:
            return prep.call(fn, dict(zip(paths, xs, strict=True)))

        runner = _JITTED[key] = backend.jit(traced)
    return runner


def release_compiled() -> None:
    """Drop every compiled JAX program (JAX's caches and the jit variant's wrappers).

    Frees the memory they hold and hands it back to the operating system (glibc's
    ``malloc_trim``; elsewhere the allocator keeps it for reuse). Programs compiled again
    later come from the persistent compilation cache when it is on.
    """
    _JITTED.clear()
    jax = sys.modules.get("jax")
    if jax is None:
        return
    jax.clear_caches()
    jax_lowering.renew()
    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl)
            pass


def is_svd(entry: dict[str, Any]) -> bool:
    """Whether a case computes a matrix 2-norm (an SVD)."""
    kw = entry["kwargs"]
    order = decode_value(kw.get("ord", {}).get("value")) if "value" in kw.get("ord", {}) else None
    axis = kw.get("axis")
    pair = (isinstance(axis, list) and len(axis) == 2) or (
        isinstance(axis, dict) and len(axis.get("tuple", [])) == 2
    )
    return pair and order == 2


def _check_grad(
    prep: _Prepared, fn: Callable[..., Any], leaves: dict[str, Any], backend: Backend
) -> float:
    entry = prep.entry
    grad_paths = list(entry["grads"])
    outputs = entry.get("grad_outputs")
    xp = backend.xp

    def loss(*xs: Any) -> Any:
        local = dict(leaves)
        local.update(zip(grad_paths, xs, strict=True))
        out = prep.call(fn, local)
        total = None
        for path, leaf in result_leaves(out):
            if not selected(path, outputs):
                continue
            if not xp.isdtype(leaf.dtype, "real floating"):
                continue
            wb = backend.asarray(weights_for(tuple(leaf.shape)), backend.dtype_name(leaf))
            term = xp.sum(leaf * wb)
            total = term if total is None else total + term
        return total

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            grads = backend.grad(loss, [leaves[p] for p in grad_paths], 1)
    except Exception as exc:
        raise Mismatch(f"gradient raised {type(exc).__name__}: {str(exc)[:300]}") from exc
    rules = _Rules(prep.arrays, backend, entry["function"], grad=True, svd=is_svd(entry))
    rules.scale = grad_scale(entry, prep.arrays)
    pairs = zip(grad_paths, grads, strict=True)
    return max((rules.compare(g, entry["grads"][p], f"d/d[{p}]") for p, g in pairs), default=0.0)


def grad_scale(entry: dict[str, Any], arrays: dict[str, np.ndarray]) -> float:
    """What gradient errors are measured against: the largest finite recorded gradient entry.

    At least 1 (the smallest weight) and the case's ``grad_scale_floor`` when it sets one.
    """
    scale = float(entry.get("grad_scale_floor", 1.0))
    for leaf in entry["grads"].values():
        g = np.asarray(arrays[leaf["key"]], dtype=np.float64)
        finite = g[np.isfinite(g)]
        if finite.size:
            scale = max(scale, float(np.max(np.abs(finite))))
    return scale


def check_real_gradients(
    case: str, function: str, backend: Backend, variant: str = "eager", impl: Any = anyclip
) -> float:
    """One training step of a real model (``<model>/step<k>``) through ``function``.

    ``function`` is ``global_norm`` or ``clip_by_global_norm`` (with the recorded
    ``clip_norm``); ``variant`` is ``eager`` or ``jit``. The result must be TF's within
    :data:`~anyclip_conformance.budgets.REAL_GRADIENT_BUDGETS`; returns the largest ulp error.
    Raises ``LookupError`` when ``backend`` lacks the model's gradient dtype.
    """
    provenance, arrays = load_real_gradients()
    model, _, step = case.partition("/step")
    dtypes = provenance["models"][model]["dtypes"]
    missing = sorted({d for d in dtypes if not backend.has_dtype(d)})
    if missing:
        raise LookupError(f"{backend.name} has no {', '.join(missing)}")
    grads = [backend.asarray(arrays[f"{model}|{step}|grad|{i}"], d) for i, d in enumerate(dtypes)]
    fn = getattr(impl, function)
    clip_norm = provenance["models"][model].get("clip_norm", provenance["clip_norm"])
    args: tuple[Any, ...] = (clip_norm,) if function == "clip_by_global_norm" else ()
    call = (lambda *g: fn(list(g), *args)) if variant == "jit" else None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = backend.jit(call)(*grads) if call is not None else fn(grads, *args)
    # a GPU's sums in its own order: a declared GPU difference (budgets.GPU_DIFFERENCES)
    ulps = gpu_budget("device-sum-order", backend.name, REAL_GRADIENT_BUDGETS[function])
    norm = out if function == "global_norm" else out[1]
    worst = assert_array(
        norm,
        arrays[f"{model}|{step}|norm"],
        backend=backend,
        dtype=dtypes[0],
        ulp=REAL_GRADIENT_BUDGETS["global_norm"],
        what=f"{case} norm",
        flush=True,
    )
    if function == "clip_by_global_norm":
        for i, (got, dtype) in enumerate(zip(out[0], dtypes, strict=True)):
            want = arrays[f"{model}|{step}|clipped|{i}"]
            worst = max(
                worst,
                assert_array(
                    got,
                    want,
                    backend=backend,
                    dtype=dtype,
                    ulp=ulps,
                    what=f"{case} [{i}]",
                    flush=True,
                ),
            )
    return worst
