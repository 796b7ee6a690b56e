"""Compare anyclip with the TensorFlow reference data in ``data/``, one case on one backend.

Used by ``test_conformance.py`` (one pytest item per case, backend and variant) and, without
pytest, by the report command (:func:`run_all`, :func:`summarise`, :func:`render_markdown`).

Rules (the same for every backend and variant):

* the result has the structure TF returns (list vs tuple, ``None`` entries), and every array has
  the backend's array type, TF's dtype and shape exactly, and the input's device;
* NaN positions and infinities (with sign) match exactly; -0.0 equals +0.0 (TF's own signed
  zeros depend on SIMD lanes, see tf-semantics section 0.4);
* subnormal values equal zero in float32, float64 and bfloat16: TF's CPU kernels run with
  flush-to-zero / denormals-are-zero set, so a result that is subnormal in exact arithmetic is 0
  in TF, and every array library computes it (as IEEE prescribes) as the subnormal;
* finite values agree within the budget of :data:`BUDGETS` (ulp of the reference's dtype at the
  reference value); ``clip_by_value`` and every integer result must be bit-exact;
* where TF refuses, anyclip raises the recorded class (``TypeError`` or ``ValueError``);
* gradients of ``sum(out * w)`` (``w = 1..n`` per output array) w.r.t. every floating array
  argument follow the same rules with :data:`GRAD_BUDGETS`.

Known, explained deviations are listed in ``xfails/<backend>.txt`` (one case id a line, an
optional ``[eager]``/``[jit]``/``[grad]`` tag, then ``# reason``); they are strict.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
import warnings
import zipfile
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from conformance.cases import decode_value, make_seq

__all__ = [
    "BUDGETS",
    "GRAD_BUDGETS",
    "VARIANTS",
    "Result",
    "budget",
    "case_ids",
    "load_index",
    "load_xfails",
    "render_markdown",
    "run_all",
    "run_case",
    "summarise",
]

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
XFAILS = HERE / "xfails"
VARIANTS = ("eager", "jit", "grad")

# ------------------------------------------------------------------------------------ budgets
#: Output budgets in ulp of the reference dtype, by (function, dtype); ``None`` as the dtype
#: is the default for that function. Why these numbers (tf-semantics section 11 measured a
#: faithful float32 port at 2 / 3 / 3 / 5 ulp):
#:
#: * ``clip_by_value`` is min/max only: bit-exact everywhere.
#: * Integer results (norm ord 1 / inf of ints, clip_by_value) are exact.
#: * ``clip_by_norm``: one reduction, a sqrt and a division; summation order differs between
#:   TF (Eigen tree reductions) and each backend by ~1 ulp of the norm, which reaches the
#:   output through ``t * c / max(n, c)``: 2 ulp measured, 4 allowed.
#: * ``l2_normalize``: TF's vectorised ``rsqrt`` is itself up to 3 ulp from the correctly
#:   rounded value (section 0.5), plus the sum: 4 allowed.
#: * ``global_norm`` / ``clip_by_global_norm`` / ``clip_by_average_norm``: a sum over all
#:   tensors, sqrt, and (for the clipped list) a scale ``c * min(1/n, 1/c)``: 3 ulp measured,
#:   4 allowed.
#: * ``norm`` / ``normalize``: p-norms go through ``pow`` twice (TF's pow differs from
#:   NumPy/torch/JAX by up to 2 ulp, section 0.5) and the matrix 2-norm through an SVD: 6.
#: * float16: TF accumulates half-precision sums partly in float16 while the backends
#:   accumulate in float32 (or pairwise), so the sum of n squares can be off by up to ~n/2
#:   half-ulps for the sizes in the catalogue; the rounding of the final result then dominates.
#:   16 ulp bounds what we observed with a margin.
#: * bfloat16: TF's ``reduce_sum`` sums in float32 and rounds once, its ``l2_loss`` stays within
#:   2 ulp of that (docs/index.md), and anyclip sums bfloat16 in float32 on every backend: 2 ulp
#:   measured over the whole catalogue (torch, JAX eager and jit), 3 allowed. (It was 8 while
#:   JAX summed in bfloat16, which hid errors of 4 ulp on 1,001 elements.)
#: * float64: the same op counts as float32; differences are the same few ulps.
BUDGETS: dict[tuple[str, str | None], float] = {
    ("clip_by_value", None): 0,
    ("clip_by_norm", None): 4,
    ("clip_by_norm", "float16"): 16,
    ("clip_by_norm", "bfloat16"): 3,
    ("global_norm", None): 4,
    ("global_norm", "float16"): 16,
    ("global_norm", "bfloat16"): 3,
    ("clip_by_global_norm", None): 4,
    ("clip_by_global_norm", "float16"): 16,
    ("clip_by_global_norm", "bfloat16"): 3,
    ("clip_by_average_norm", None): 4,
    ("norm", None): 6,
    ("norm", "float16"): 16,
    ("norm", "bfloat16"): 3,
    ("l2_normalize", None): 4,
    ("l2_normalize", "float16"): 16,
    ("l2_normalize", "bfloat16"): 3,
    ("normalize", None): 6,
    ("normalize", "float16"): 16,
    ("normalize", "bfloat16"): 3,
}

#: Gradient budgets. Gradients are sums of products whose terms cancel (for example
#: ``(c/n)(w - x (x.w)/n^2)`` for clip_by_norm), so a 1-ulp difference in a norm becomes many
#: ulps of a small result; the budget is therefore counted in ulps of the largest magnitude
#: in the reference gradient (see :func:`_grad_error`) and is a little larger than for
#: outputs. clip_by_value gradients are 0 or w exactly.
GRAD_BUDGETS: dict[tuple[str, str | None], float] = {
    ("clip_by_value", None): 0,
    ("clip_by_norm", None): 8,
    ("clip_by_norm", "float16"): 32,
    ("clip_by_norm", "bfloat16"): 16,
    ("global_norm", None): 8,
    ("global_norm", "float16"): 32,
    ("global_norm", "bfloat16"): 16,
    ("clip_by_global_norm", None): 8,
    ("clip_by_global_norm", "float16"): 32,
    ("clip_by_global_norm", "bfloat16"): 16,
    ("clip_by_average_norm", None): 8,
    ("norm", None): 8,
    ("norm", "float16"): 32,
    ("norm", "bfloat16"): 16,
    ("l2_normalize", None): 8,
    ("l2_normalize", "float16"): 32,
    ("l2_normalize", "bfloat16"): 16,
    ("normalize", None): 8,
    ("normalize", "float16"): 32,
    ("normalize", "bfloat16"): 16,
}


#: The matrix 2-norm (``norm``/``normalize`` with ``ord=2`` and a pair of axes) is the
#: largest singular value; TF's SVD (Eigen) and LAPACK/torch/JAX's differ in the last bits:
#: singular values are accurate to a few ulp times the matrix size, 7 ulp observed in float64.
SVD_BUDGET = 16


def budget(function: str, dtype: str, *, grad: bool = False, svd: bool = False) -> float:
    """The ulp budget for ``function`` results (or gradients) of ``dtype``."""
    if dtype.startswith(("int", "uint", "bool")):
        return 0
    if svd:
        return max(SVD_BUDGET, budget(function, dtype, grad=grad))
    table = GRAD_BUDGETS if grad else BUDGETS
    base = dtype.replace("complex64", "float32").replace("complex128", "float64")
    return table.get((function, base), table[(function, None)])


# ----------------------------------------------------------------------------------- data
@cache
def load_index() -> dict[str, Any]:
    """``index.json``: case id -> entry (function, args, outputs / grads / error)."""
    with open(DATA / "index.json", encoding="utf-8") as fh:
        return json.load(fh)["cases"]


@cache
def _arrays(function: str) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(DATA / f"{function}.npz") as zf:
        for name in zf.namelist():
            out[name.removesuffix(".npy")] = np.lib.format.read_array(
                io.BytesIO(zf.read(name)), allow_pickle=False
            )
    return out


#: The jit variant runs every case except the random grids ("bulk" cases), of which it runs
#: one in JIT_BULK_STRIDE (chosen by a hash of the id, so every grid is sampled). Tracing
#: compiles one XLA program per case (~30-60 ms on CPU); the grids repeat the same code
#: paths over more shapes, which the eager variant already runs in full.
JIT_BULK_STRIDE = 4


def in_jit_sample(case_id: str) -> bool:
    """Whether the jit variant runs ``case_id``."""
    import zlib

    entry = load_index()[case_id]
    return not entry.get("bulk") or zlib.crc32(case_id.encode()) % JIT_BULK_STRIDE == 0


def case_ids(function: str | None = None, *, kind: str = "all") -> list[str]:
    """Case ids in catalogue order; ``kind`` is ``all``, ``grad``, ``error`` or ``jit``."""
    out = []
    for cid, entry in load_index().items():
        if function is not None and entry["function"] != function:
            continue
        if kind == "jit" and not in_jit_sample(cid):
            continue
        if kind == "grad" and "grads" not in entry:
            continue
        if kind == "error" and "error" not in entry:
            continue
        out.append(cid)
    return out


def functions() -> list[str]:
    """The functions in the data, in catalogue order."""
    return list(dict.fromkeys(e["function"] for e in load_index().values()))


@cache
def load_xfails(backend: str) -> dict[tuple[str, str | None], str]:
    """``(case id, variant or None) -> reason`` from ``xfails/<backend>.txt``."""
    path = XFAILS / f"{backend}.txt"
    out: dict[tuple[str, str | None], str] = {}
    if not path.is_file():
        return out
    for raw in path.read_text(encoding="utf-8").splitlines():
        text, _, reason = raw.partition("#")
        parts = text.split()
        if not parts:
            continue
        variant = None
        if len(parts) > 1:
            variant = parts[1].strip("[]")
            if variant not in VARIANTS:
                raise ValueError(f"{path}: bad variant tag in {raw!r}")
        if parts[0] not in load_index():
            raise ValueError(f"{path}: unknown case id {parts[0]!r}")
        out[(parts[0], variant)] = reason.strip() or "(no reason given)"
    return out


def xfail_reason(case_id: str, backend: str, variant: str) -> str | None:
    """The reason ``case_id`` is a known deviation on ``backend`` in ``variant`` (or None)."""
    table = load_xfails(backend)
    return table.get((case_id, variant), table.get((case_id, None)))


# ------------------------------------------------------------------------------- building


def _array_specs(spec: Any, path: str, out: dict[str, dict[str, Any]]) -> None:
    """Collect ``path -> spec`` of every backend array in a spec."""
    if isinstance(spec, dict):
        if "array" in spec:
            out[path] = spec
        elif "seq" in spec:
            for i, e in enumerate(spec["items"]):
                _array_specs(e, f"{path}.{i}", out)
        elif "tuple" in spec and not isinstance(spec["tuple"], dict):
            for i, e in enumerate(spec["tuple"]):
                _array_specs(e, f"{path}.{i}", out)
    elif isinstance(spec, list):
        for i, e in enumerate(spec):
            _array_specs(e, f"{path}.{i}", out)


def _build(spec: Any, path: str, arrays: dict[str, np.ndarray], leaves: dict[str, Any]) -> Any:
    """The argument a spec stands for; backend arrays are taken from ``leaves`` by path."""
    if isinstance(spec, dict):
        if "array" in spec:
            return leaves[path]
        if "ndarray" in spec:
            return arrays[spec["ndarray"]].copy()
        if "npscalar" in spec:
            return np.dtype(spec["npscalar"]).type(decode_value(spec["value"]))
        if "py" in spec:
            return decode_value(spec["py"])
        if "seq" in spec:
            items = [_build(e, f"{path}.{i}", arrays, leaves) for i, e in enumerate(spec["items"])]
            return make_seq(spec["seq"], items)
        if "tuple" in spec:
            return tuple(
                _build(e, f"{path}.{i}", arrays, leaves) for i, e in enumerate(spec["tuple"])
            )
        if "value" in spec:
            return decode_value(spec["value"])
    if isinstance(spec, list):
        return [_build(e, f"{path}.{i}", arrays, leaves) for i, e in enumerate(spec)]
    raise TypeError(f"bad spec {spec!r}")


@dataclasses.dataclass
class _Prepared:
    entry: dict[str, Any]
    arrays: dict[str, np.ndarray]
    specs: dict[str, dict[str, Any]]

    def call(self, fn: Callable[..., Any], leaves: dict[str, Any]) -> Any:
        args = [_build(a, str(i), self.arrays, leaves) for i, a in enumerate(self.entry["args"])]
        kwargs = {k: _build(v, k, self.arrays, leaves) for k, v in self.entry["kwargs"].items()}
        return fn(*args, **kwargs)


def _prepare(case_id: str | _Prepared) -> _Prepared:
    if isinstance(case_id, _Prepared):
        return case_id
    return prepare_entry(load_index()[case_id], _arrays(load_index()[case_id]["function"]))


def prepare_entry(entry: dict[str, Any], arrays: dict[str, np.ndarray]) -> _Prepared:
    """A case given by its index entry and arrays (``generate.run_case`` output: live mode)."""
    specs: dict[str, dict[str, Any]] = {}
    for i, a in enumerate(entry["args"]):
        _array_specs(a, str(i), specs)
    for k, v in entry["kwargs"].items():
        _array_specs(v, k, specs)
    return _Prepared(entry, arrays, specs)


def supports(backend: Any, dtype: str) -> bool:
    """Whether ``backend`` has ``dtype`` (bfloat16 needs torch or JAX; float64 needs x64)."""
    if dtype == "bfloat16":
        return backend.library in ("torch", "jax")
    if dtype == "float64" and backend.library == "jax":
        import jax

        return bool(jax.config.jax_enable_x64)
    return getattr(backend.xp, dtype, None) is not None


# ---------------------------------------------------------------------------- comparison
class Mismatch(AssertionError):
    """anyclip's result differs from TensorFlow's."""


def _numpy_backend() -> Any:
    from anyclip._testing import load_backend

    return _cached_numpy_backend(load_backend)


@cache
def _cached_numpy_backend(loader: Callable[[str], Any]) -> Any:
    return loader("numpy")


def _compare(
    actual: Any,
    expected: Any,
    arrays: dict[str, np.ndarray],
    backend: Any,
    function: str,
    what: str,
    *,
    grad: bool = False,
    svd: bool = False,
    scale: float | None = None,
) -> float:
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
            return max(
                [
                    _compare(
                        a,
                        e,
                        arrays,
                        backend,
                        function,
                        f"{what}[{i}]",
                        grad=grad,
                        svd=svd,
                        scale=scale,
                    )
                    for i, (a, e) in enumerate(zip(actual, items, strict=True))
                ],
                default=0.0,
            )
    desired = arrays[expected["key"]]
    dtype = expected["dtype"]
    ulp = budget(function, dtype, grad=grad, svd=svd)
    if actual is None and grad:  # torch: not connected; TF recorded zeros
        if np.any(desired != 0):
            raise Mismatch(f"{what}: no gradient (None), expected {desired!r}")
        return 0.0
    return check_leaf(actual, desired, backend, dtype, ulp, what, scale=scale)


#: Smallest normal number per dtype: below it TF flushes to zero (FTZ/DAZ on CPU).
_SMALLEST_NORMAL = {
    "bfloat16": 2.0**-126,
    "float32": 2.0**-126,
    "float64": 2.0**-1022,
    "complex64": 2.0**-126,
    "complex128": 2.0**-1022,
}
_MANTISSA = {
    "float16": 10,
    "bfloat16": 7,
    "float32": 23,
    "float64": 52,
    "complex64": 23,
    "complex128": 52,
}


def _flush(a: np.ndarray, dtype: str) -> np.ndarray:
    tiny = _SMALLEST_NORMAL.get(dtype)
    if tiny is None:
        return a
    return np.where(np.abs(a) < tiny, 0.0, a)


def ulp_distance(
    actual: np.ndarray, desired: np.ndarray, dtype: str, *, scale: float | None = None
) -> float:
    """Largest error of finite entries in ulps of ``dtype``.

    The ulp is taken at each reference value (at ``scale`` when given), never below the
    dtype's smallest subnormal step; subnormals count as zero where TF flushes them (float32,
    float64, bfloat16).
    """
    from anyclip._testing import ulp_error

    if dtype.startswith(("int", "uint", "bool")):
        diff = np.asarray(actual, dtype=np.float64) - np.asarray(desired, dtype=np.float64)
        return float(np.max(np.abs(diff), initial=0.0))
    if np.iscomplexobj(desired) or np.iscomplexobj(actual):
        # a complex value's error is measured against its modulus: |a - d| in ulps of |d|
        # (a 1e-9 imaginary part next to a real part of 2 is a rounding error, not a miss)
        a = np.asarray(actual, dtype=np.complex128)
        d = np.asarray(desired, dtype=np.complex128)
        finite = np.isfinite(a) & np.isfinite(d)
        if not finite.any():
            return 0.0
        a, d = a[finite], d[finite]
        mod = _flush(np.abs(d), dtype)
        exp = np.floor(np.log2(np.where(mod > 0, mod, 1.0)))
        unit = np.where(
            mod > 0,
            2.0 ** (exp - _MANTISSA[dtype]),
            2.0 ** (-149 if dtype == "complex64" else -1074),
        )
        err = _flush(np.abs(a - d), dtype) / unit
        return float(np.max(err))
    a = _flush(np.asarray(actual, dtype=np.float64), dtype)
    d = _flush(np.asarray(desired, dtype=np.float64), dtype)
    finite = np.isfinite(a) & np.isfinite(d)
    if not finite.any():
        return 0.0
    a, d = a[finite], d[finite]
    if scale is None or scale == 0.0:
        with np.errstate(over="ignore"):
            return ulp_error(a, d, dtype)
    unit = 2.0 ** (np.floor(np.log2(scale)) - _MANTISSA[dtype])
    return float(np.max(np.abs(a - d))) / unit


def check_leaf(
    actual: Any,
    desired: np.ndarray,
    backend: Any,
    dtype: str,
    ulp: float,
    what: str,
    *,
    scale: float | None = None,
) -> float:
    """Check one result array; raise :class:`Mismatch`; return its ulp error."""
    from anyclip._testing import assert_array

    try:
        # namespace, dtype, shape, device, NaN and inf positions (values: below)
        with np.errstate(all="ignore"):
            assert_array(actual, desired, backend=backend, dtype=dtype, ulp=np.inf, what=what)
    except AssertionError as exc:
        raise Mismatch(str(exc)) from None
    got = backend.to_numpy(actual)
    err = ulp_distance(got, desired, dtype, scale=scale)
    if err > ulp:
        unit = f" (of the gradient scale {scale:g})" if scale else ""
        raise Mismatch(
            f"values ({what}): {err:.3g} ulp{unit} > budget {ulp:g}\n"
            f" actual={got!r}\n desired={np.asarray(desired)!r}"
        )
    return err


# ------------------------------------------------------------------------------------ runs
@dataclasses.dataclass
class Result:
    """The outcome of one case on one backend in one variant."""

    case_id: str
    function: str
    backend: str
    variant: str
    status: str  # passed, failed, xfailed, xpassed, skipped
    max_ulp: float = 0.0
    message: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Passed, xfailed or skipped (what a green run allows)."""
        return self.status in ("passed", "xfailed", "skipped")


def applicable(case_id: str | _Prepared, backend: Any, variant: str) -> str | None:
    """Why the case cannot run on ``backend`` in ``variant`` (None when it can)."""
    prep = _prepare(case_id)
    for spec in prep.specs.values():
        if not supports(backend, spec["dtype"]):
            return f"{backend.name} has no {spec['dtype']}"
    entry = prep.entry
    for leaf in _leaves(entry.get("outputs")):
        if not supports(backend, leaf["dtype"]):
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


def _output_paths(out: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(path, array)`` for every array of an actual result (paths as in the data)."""
    if out is None:
        return []
    if isinstance(out, (list, tuple)):
        res: list[tuple[str, Any]] = []
        for i, o in enumerate(out):
            res += _output_paths(o, f"{path}.{i}".lstrip("."))
        return res
    return [(path or "r", out)]


def _leaves(struct: Any) -> list[dict[str, Any]]:
    if struct is None:
        return []
    if "key" in struct:
        return [struct]
    return [leaf for s in struct.get("list", struct.get("tuple", [])) for leaf in _leaves(s)]


def check_case(
    case_id: str | _Prepared,
    backend: Any,
    variant: str = "eager",
    fn: Callable[..., Any] | None = None,
) -> float:
    """Run one case; raise :class:`Mismatch` (an AssertionError) on a difference.

    ``fn`` replaces the top-level anyclip function (to run the case through another route to
    the same formula, such as ``anyclip.tree`` or an adapter). Returns the largest ulp error.
    """
    import anyclip

    prep = _prepare(case_id)
    entry = prep.entry
    if fn is None:
        fn = getattr(anyclip, entry["function"])
    leaves = {
        path: backend.asarray(prep.arrays[spec["array"]], spec["dtype"])
        for path, spec in prep.specs.items()
    }
    cmp_backend = backend if prep.specs else _numpy_backend()

    if variant == "grad":
        return _check_grad(case_id, prep, fn, leaves, backend)

    if variant == "jit":
        paths = list(leaves)

        def traced(*xs: Any) -> Any:
            return prep.call(fn, dict(zip(paths, xs, strict=True)))

        runner = backend.jit(traced)

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
    return _compare(
        actual,
        entry["outputs"],
        prep.arrays,
        cmp_backend,
        entry["function"],
        "result",
        svd=is_svd(entry),
    )


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
    case_id: str | _Prepared,
    prep: _Prepared,
    fn: Callable[..., Any],
    leaves: dict[str, Any],
    backend: Any,
) -> float:
    entry = prep.entry
    grad_paths = list(entry["grads"])
    selected = entry.get("grad_outputs")
    xp = backend.xp

    def loss(*xs: Any) -> Any:
        local = dict(leaves)
        local.update(zip(grad_paths, xs, strict=True))
        out = prep.call(fn, local)
        total = None
        for path, leaf in _output_paths(out):
            if selected is not None and not any(
                path == g or path.startswith(g + ".") for g in selected
            ):
                continue
            if not xp.isdtype(leaf.dtype, "real floating"):
                continue
            n = int(np.prod(tuple(leaf.shape), dtype=np.int64))
            w = np.arange(1, n + 1, dtype=np.float64).reshape(tuple(leaf.shape))
            wb = backend.asarray(w, backend.dtype_name(leaf))
            term = xp.sum(leaf * wb)
            total = term if total is None else total + term
        return total

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            grads = backend.grad(loss, [leaves[p] for p in grad_paths], 1)
    except Exception as exc:
        raise Mismatch(f"gradient raised {type(exc).__name__}: {str(exc)[:300]}") from exc
    scale = grad_scale(entry, prep.arrays)
    worst = 0.0
    for path, g in zip(grad_paths, grads, strict=True):
        worst = max(
            worst,
            _compare(
                g,
                entry["grads"][path],
                prep.arrays,
                backend,
                entry["function"],
                f"d/d[{path}]",
                grad=True,
                svd=is_svd(entry),
                scale=scale,
            ),
        )
    return worst


def grad_scale(entry: dict[str, Any], arrays: dict[str, np.ndarray]) -> float:
    """The magnitude gradient errors are measured against: the largest finite entry of any
    recorded gradient of the case (at least 1, the smallest weight, and at least the case's
    ``grad_scale_floor`` when it sets one)."""
    scale = float(entry.get("grad_scale_floor", 1.0))
    for leaf in entry["grads"].values():
        g = np.asarray(arrays[leaf["key"]], dtype=np.float64)
        finite = g[np.isfinite(g)]
        if finite.size:
            scale = max(scale, float(np.max(np.abs(finite))))
    return scale


def run_case(case_id: str, backend: Any, variant: str = "eager") -> Result:
    """Run one case and classify it (xfail lists applied); never raises for a mismatch."""
    entry = load_index()[case_id]
    start = time.perf_counter()
    why = applicable(case_id, backend, variant)
    if why is not None:
        return Result(case_id, entry["function"], backend.name, variant, "skipped", 0.0, why)
    reason = xfail_reason(case_id, backend.name, variant)
    try:
        err = check_case(case_id, backend, variant)
    except Exception as exc:  # noqa: BLE001 - reported
        status = "xfailed" if reason else "failed"
        msg = f"{type(exc).__name__}: {exc}" if not isinstance(exc, Mismatch) else str(exc)
        return Result(
            case_id,
            entry["function"],
            backend.name,
            variant,
            status,
            0.0,
            msg if not reason else f"{reason} | {msg}",
            time.perf_counter() - start,
        )
    status = "xpassed" if reason else "passed"
    return Result(
        case_id,
        entry["function"],
        backend.name,
        variant,
        status,
        float(err),
        f"listed as xfail ({reason}) but passed" if reason else "",
        time.perf_counter() - start,
    )


def run_all(
    backends: Sequence[Any],
    progress: Callable[[int, int, Result], None] | None = None,
    *,
    variants: Iterable[str] = VARIANTS,
    functions_: Iterable[str] | None = None,
) -> list[Result]:
    """Every case on every backend (and every applicable variant).

    ``backends`` are :class:`anyclip._testing.Backend` objects (``load_backend(name)``).
    ``progress(done, total, result)`` is called after each case.
    """
    wanted = set(functions_) if functions_ is not None else None
    ids = [c for c in load_index() if wanted is None or load_index()[c]["function"] in wanted]
    jobs = [
        (b, v, c)
        for b in backends
        for v in variants
        for c in ids
        if v == "eager"
        or (v == "jit" and b.library == "jax" and in_jit_sample(c))
        or (v == "grad" and b.has_autodiff and "grads" in load_index()[c])
    ]
    results = []
    for i, (b, v, c) in enumerate(jobs):
        r = run_case(c, b, v)
        results.append(r)
        if progress is not None:
            progress(i + 1, len(jobs), r)
    return results


def summarise(results: Iterable[Result]) -> list[dict[str, Any]]:
    """Rows ``function x backend(+variant)``: cases, passed, xfailed, failed, skipped, max ulp."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        label = r.backend if r.variant == "eager" else f"{r.backend} ({r.variant})"
        row = rows.setdefault(
            (r.function, label),
            {
                "function": r.function,
                "backend": label,
                "cases": 0,
                "passed": 0,
                "xfailed": 0,
                "failed": 0,
                "skipped": 0,
                "max_ulp": 0.0,
            },
        )
        row["cases"] += 1
        if r.status == "passed":
            row["passed"] += 1
        elif r.status == "xfailed":
            row["xfailed"] += 1
        elif r.status == "skipped":
            row["skipped"] += 1
        else:  # failed or xpassed (strict)
            row["failed"] += 1
        row["max_ulp"] = max(row["max_ulp"], r.max_ulp)
    return list(rows.values())


def render_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`summarise` rows."""
    head = (
        "| function | backend | cases | passed | xfailed | failed | skipped | max ulp |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    )
    body = "".join(
        f"| `{r['function']}` | {r['backend']} | {r['cases']} | {r['passed']} | {r['xfailed']} "
        f"| {r['failed']} | {r['skipped']} | {r['max_ulp']:.3g} |\n"
        for r in rows
    )
    return head + body


def budget_table_markdown() -> str:
    """The output and gradient budgets as a Markdown table."""
    funcs = list(dict.fromkeys(f for f, _ in BUDGETS))
    lines = [
        "| function | dtype | outputs (ulp) | gradients (ulp of max) |",
        "| --- | --- | ---: | ---: |",
    ]
    for f in funcs:
        for dt in ("float16", "bfloat16", "float32", "float64"):
            lines.append(f"| `{f}` | {dt} | {budget(f, dt):g} | {budget(f, dt, grad=True):g} |")
    return "\n".join(lines) + "\n"
