"""Value paths that gave silently wrong results or a backend's error, against TF 2.21's values.

The reference is TF itself: ``tests/data/make_value_paths.py`` runs each case through TF's own
function and writes ``tests/data/value_paths.json`` (TF's version recorded in it); with
``--live-tf`` the script is run again and the committed file must still be what TF gives.

* ``cast``: ``clip_by_global_norm`` of integer arrays whose factor is NaN, infinite or out of
  the integer range: TF's cast of the factor (to int32 or int64, NaN and out-of-range values
  to the lowest value, then the destination's low bits) decides the result; JAX saturated.
* ``unknown``: dask arrays of unknown chunk sizes (``x[x > 0]``), some chunks or all of them
  empty: ``clip_by_average_norm`` was NaN, array bounds and epsilons, empty maxima, the matrix
  2-norm and ``accumulate_dtype`` crashed. Every backend runs the same cases on arrays of
  known shape; on dask the input (and any operand as long as it) loses its chunk sizes.
* ``subnormal``: float32/float64 inputs and intermediate results below the smallest normal
  number, which TF's CPU kernels flush to zero (FTZ/DAZ). JAX on the CPU flushes too, CuPy
  in float32; NumPy, torch (CPU and CUDA), array-api-strict, dask, JAX on a GPU and CuPy in
  float64 keep IEEE subnormals by default (a declared deviation: the cases where that changes
  the result are strict xfails there, :data:`KEEPS_IEEE`) and give TF's values inside
  ``anyclip.flush_subnormals()``, every case run both ways.
"""

from __future__ import annotations

import importlib.util
import json
import math
import runpy
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip_conformance import Backend

from .conftest import ULP_CLIP_NORM, ULP_GLOBAL, ULP_L2, ULP_PNORM, run_reference_script

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_value_paths.py"
COMMITTED = json.loads((DATA / "value_paths.json").read_text())
CASES: dict[str, dict[str, Any]] = COMMITTED["cases"]

#: The script's functions (``tests/data`` is not a package), as attributes.
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))

#: ULP budget of each function's values (docs/tf-reference.md §11); exact for the others.
ULP = {
    "clip_by_norm": ULP_CLIP_NORM,
    "clip_by_global_norm": ULP_GLOBAL,
    "clip_by_average_norm": ULP_CLIP_NORM,
    "global_norm": ULP_GLOBAL,
    "l2_normalize": ULP_L2,
    "normalize": ULP_L2,
    "norm": ULP_PNORM,
}


def _ids(prefix: str) -> list[str]:
    return [k for k in CASES if k.startswith(prefix)]


def _spec_array(make: Any, spec: dict[str, Any], shape: Any = None) -> Any:
    values = np.asarray(spec["values"], dtype=np.float64)
    if shape is not None:
        values = values.reshape(shape)
    if np.dtype("float64" if spec["dtype"] == "bfloat16" else spec["dtype"]).kind in "iu":
        values = np.asarray(spec["values"], dtype=spec["dtype"]).reshape(values.shape)
    return make(values, spec["dtype"])


def _unknown_chunks(x: Any) -> Any:
    """``x`` (dask) with unknown chunk sizes along axis 0: two chunks a row, the last empty."""
    import dask.array as da

    n = x.shape[0]
    padded = da.concatenate([x, da.zeros((3, *x.shape[1:]), dtype=x.dtype)]).rechunk({0: 2})
    keep = da.from_array(np.arange(n + 3) < n, chunks=2)
    out = padded[keep]
    assert math.isnan(out.shape[0])
    return out


def _call(
    case: dict[str, Any],
    make: Any,
    *,
    unknown: bool,
    compile: Callable[[Callable[[Any], Any]], Callable[[Any], Any]] | None = None,
) -> Any:
    """anyclip's result of ``case`` on arrays from ``make`` (``unknown``: dask, chunks unknown).

    ``compile`` (``jax.jit``, ``torch.compile``): the call is compiled with the input ``x`` as
    its traced argument (the other operands are constants of the trace).
    """
    x = _spec_array(make, case["x"], case.get("shape"))
    n = x.shape[0] if x.ndim else 0

    def operand(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        a = _spec_array(make, value)
        if unknown and a.ndim and a.shape[0] == n and n != 1:  # as long as x: aligned with it
            return _unknown_chunks(a)
        return a

    if unknown:
        x = _unknown_chunks(x)
    fn = case["fn"]
    ord_ = case.get("ord", "euclidean")
    ord_ = math.inf if ord_ == "inf" else ord_
    axis = case.get("axis")
    axis = tuple(axis) if isinstance(axis, list) else axis
    operands = {k: operand(v) for k, v in case.items() if k in _OPERANDS}
    use = case.get("use_norm")
    use_norm = None if use is None else _spec_array(make, use)

    def run(x: Any) -> Any:
        return _run(fn, x, case, operands, use_norm, ord_, axis)

    return run(x) if compile is None else compile(run)(x)


#: The case keys that hold a function's operands (arrays or numbers).
_OPERANDS = ("clip_value_min", "clip_value_max", "clip_norm", "epsilon")


def _run(
    fn: str,
    x: Any,
    case: dict[str, Any],
    operands: dict[str, Any],
    use_norm: Any,
    ord_: Any,
    axis: Any,
) -> Any:
    def operand(key: str) -> Any:
        return operands[key]

    if fn == "clip_by_value":
        return anyclip.clip_by_value(x, operand("clip_value_min"), operand("clip_value_max"))
    if fn == "clip_by_norm":
        return anyclip.clip_by_norm(x, operand("clip_norm"), axes=case.get("axes"))
    if fn == "clip_by_average_norm":
        return anyclip.clip_by_average_norm(x, operand("clip_norm"))
    if fn == "clip_by_global_norm":
        return anyclip.clip_by_global_norm([x], case["clip_norm"], use_norm=use_norm)[0][0]
    if fn == "global_norm":
        return anyclip.global_norm([x])
    if fn == "norm":
        return anyclip.norm(x, ord=ord_, axis=axis)
    if fn == "l2_normalize":
        return anyclip.l2_normalize(x, axis=axis, epsilon=operands.get("epsilon", 1e-12))
    if fn == "normalize":
        return anyclip.normalize(x, ord=ord_, axis=axis)[0]
    raise ValueError(fn)


def _known(out: Any) -> Any:
    """A dask result with its chunk sizes computed (so its shape can be checked), else ``out``."""
    if any(isinstance(d, float) and math.isnan(d) for d in getattr(out, "shape", ())):
        return out.compute_chunk_sizes()
    return out


@pytest.mark.parametrize("case_id", _ids("cast/"))
def test_integer_factor_is_cast_as_tf(case_id: str, backend: Backend, make: Any, check: Any):
    case = CASES[case_id]
    want = gen.decode(case["tf"])
    out = _call(case, make, unknown=False)
    check(out, want, case["x"]["dtype"], what=case_id)


@pytest.mark.parametrize("case_id", _ids("cast/"))
def test_integer_factor_is_cast_as_tf_under_jit(case_id: str):
    jax = pytest.importorskip("jax")
    case = CASES[case_id]
    if not jax.config.jax_enable_x64 and any("64" in case[k]["dtype"] for k in ("x", "use_norm")):
        pytest.skip("64-bit dtypes need jax_enable_x64")
    jnp = jax.numpy
    x = jnp.asarray(np.asarray(case["x"]["values"], dtype=case["x"]["dtype"]))
    use = np.asarray(case["use_norm"]["values"], dtype=np.float64)
    use_norm = jnp.asarray(use.astype(np.float32)).astype(case["use_norm"]["dtype"])
    if case["use_norm"]["dtype"] == "float64":
        use_norm = jnp.asarray(use)
    fn = jax.jit(lambda t, n: anyclip.clip_by_global_norm([t], case["clip_norm"], use_norm=n)[0])
    out = np.asarray(fn(x, use_norm)[0])
    want = gen.decode(case["tf"])
    assert out.dtype == want.dtype
    np.testing.assert_array_equal(out, want, err_msg=case_id)


@pytest.mark.parametrize("case_id", _ids("unknown/"))
def test_unknown_chunk_sizes_give_tfs_values(case_id: str, backend: Backend, make: Any, check: Any):
    """On dask the arrays lose their chunk sizes; on every backend the values are TF's."""
    case = CASES[case_id]
    want = gen.decode(case["tf"])
    # dask computes in the check: NumPy's inf/NaN warnings there are documented (tf-behaviour)
    with np.errstate(all="ignore"):
        out = _known(_call(case, make, unknown=backend.library == "dask"))
        check(out, want, case["tf"]["dtype"], ulp=ULP.get(case["fn"], 0), what=case_id)


@pytest.mark.parametrize("case_id", _ids("unknown/"))
def test_unknown_chunk_sizes_on_dask(case_id: str):
    """The dask cases without the opt-in backend fixture: lazy, then TF's values."""
    da = pytest.importorskip("dask.array")
    case = CASES[case_id]

    def make(values: Any, dtype: str) -> Any:
        return da.from_array(np.asarray(values, dtype=dtype), chunks=-1)

    with np.errstate(all="ignore"):  # NumPy's warnings when dask computes (tf-behaviour.md)
        out = _known(_call(case, make, unknown=True))
        got = np.asarray(out.compute())
    want = gen.decode(case["tf"])
    assert got.dtype == want.dtype and got.shape == want.shape, case_id
    ulp = ULP.get(case["fn"], 0)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite, err_msg=case_id)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=case_id)
    spacing = np.spacing(np.abs(want[finite]).astype(got.dtype)) if got.dtype.kind == "f" else 0
    assert np.all(np.abs(got[finite] - want[finite]) <= ulp * spacing), case_id


#: The subnormal cases whose result differs where the backend keeps IEEE subnormals (NumPy,
#: torch, array-api-strict, dask), as anyclip does by default: a declared deviation
#: (docs/tf-behaviour.md, the FTZ row). Flushing as TF does costs a pass over the data per
#: step, so it is opt-in (``anyclip.flush_subnormals()``), which passes them; JAX (XLA:CPU
#: flushes) gives TF's values either way.
KEEPS_SUBNORMALS = frozenset(
    {
        "subnormal/float32/clip_by_average_norm/25",
        "subnormal/float32/clip_by_average_norm/26",
        "subnormal/float32/clip_by_global_norm/10",
        "subnormal/float32/clip_by_global_norm/11",
        "subnormal/float32/clip_by_global_norm/9",
        "subnormal/float32/clip_by_norm/3",
        "subnormal/float32/clip_by_norm/4",
        "subnormal/float32/clip_by_norm/5",
        "subnormal/float32/clip_by_norm/6",
        "subnormal/float32/clip_by_norm/8",
        "subnormal/float32/clip_by_value/0",
        "subnormal/float32/clip_by_value/1",
        "subnormal/float32/clip_by_value/2",
        "subnormal/float32/l2_normalize/20",
        "subnormal/float32/l2_normalize/22",
        "subnormal/float32/norm/18",
        "subnormal/float32/normalize/23",
        "subnormal/float64/clip_by_global_norm/10",
        "subnormal/float64/clip_by_global_norm/11",
        "subnormal/float64/clip_by_global_norm/9",
        "subnormal/float64/clip_by_norm/3",
        "subnormal/float64/clip_by_norm/4",
        "subnormal/float64/clip_by_norm/5",
        "subnormal/float64/clip_by_norm/6",
        "subnormal/float64/clip_by_norm/8",
        "subnormal/float64/clip_by_value/0",
        "subnormal/float64/clip_by_value/1",
        "subnormal/float64/clip_by_value/2",
        "subnormal/float64/l2_normalize/20",
        "subnormal/float64/l2_normalize/22",
        "subnormal/float64/norm/18",
        "subnormal/float64/normalize/23",
    }
)


#: A product in the rounding gap below the smallest normal number: TF's FTZ (x86: tininess
#: after rounding, unbounded exponent) flushes a product whose exact value is in the lower half
#: of the last subnormal step below it; IEEE gradual underflow rounds it up to that number
#: first, and only the exact product (an FMA, or twice the precision) tells them apart. Not
#: emulated, with or without flush_subnormals() (docs/tf-behaviour.md, the FTZ row).
ROUNDING_GAP = frozenset(
    {"subnormal/float32/clip_by_norm/rounding_gap", "subnormal/float64/clip_by_norm/rounding_gap"}
)


#: The dtypes in which a backend's arithmetic keeps IEEE subnormals by default (the others:
#: float32 and float64). XLA:CPU flushes (jax); CuPy compiles its kernels with ``-ftz=true``,
#: which flushes float32 only (NVIDIA GPUs have no flush-to-zero for float64): run 1 on an
#: H200, CuPy 14.2, passed the 17 float32 cases declared here for backends that keep them.
#: torch's CUDA kernels (built without ``-ftz``) keep both, as XLA:GPU does
#: (``--xla_gpu_ftz=false`` by default).
KEEPS_IEEE: dict[str, frozenset[str]] = {
    "jax": frozenset(),
    "cupy": frozenset({"float64"}),
}


def _keeps_ieee(backend: Backend, case_id: str) -> bool:
    dtype = case_id.split("/")[1]
    return dtype in KEEPS_IEEE.get(backend.name, frozenset({"float32", "float64"}))


@pytest.mark.parametrize("flushed", [False, True], ids=["default", "flush_subnormals"])
@pytest.mark.parametrize("case_id", _ids("subnormal/"))
def test_subnormals_flush_as_in_tf(
    case_id: str,
    flushed: bool,
    backend: Backend,
    make: Any,
    check: Any,
    request: pytest.FixtureRequest,
):
    keeps = _keeps_ieee(backend, case_id)
    if case_id in KEEPS_SUBNORMALS and keeps and not flushed:
        reason = f"{backend.name} keeps IEEE subnormals where TF flushes them (declared)"
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    if case_id in ROUNDING_GAP and keeps:
        reason = "the product rounds up to the smallest normal number first (IEEE)"
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    case = CASES[case_id]
    want = gen.decode(case["tf"])
    with anyclip.flush_subnormals(flushed):
        out = _call(case, make, unknown=False)
    check(out, want, case["tf"]["dtype"], ulp=ULP.get(case["fn"], 0), what=case_id)


@pytest.mark.parametrize("backend", ["jax"], indirect=True)
@pytest.mark.parametrize("case_id", sorted(KEEPS_SUBNORMALS))
def test_jax_off_the_cpu_is_flushed_by_anyclip(
    case_id: str, backend: Backend, make: Any, check: Any, monkeypatch: pytest.MonkeyPatch
):
    """XLA:GPU keeps IEEE subnormals: off the CPU ``flush_subnormals`` flushes JAX arrays.

    Here on the CPU with the arrays taken for GPU arrays: the flushing kernels serve the
    call (``FLUSH_JAX``, ``flush`` active) and give TF's values (XLA:CPU flushes as well, so
    this holds the route's code to TF's data; on a GPU the same route does the flushing).
    """
    from anyclip import _kernels, _subnormals

    case = CASES[case_id]
    x = make(np.zeros(2), case["x"]["dtype"])
    with anyclip.flush_subnormals():  # on the CPU: XLA flushes, anyclip does not
        assert _kernels.kernels_for(backend.xp, [x]) is _kernels.JAX
        assert _subnormals._flush_info(backend.xp, x) is None
    monkeypatch.setattr(_kernels, "xla_flushes", lambda a: False)
    monkeypatch.setattr(_subnormals, "xla_flushes", lambda a: False)
    with anyclip.flush_subnormals():  # "on a GPU": anyclip flushes
        assert _kernels.kernels_for(backend.xp, [x]) is _kernels.FLUSH_JAX
        assert _subnormals._flush_info(backend.xp, x) is not None
        out = _call(case, make, unknown=False)
    check(out, gen.decode(case["tf"]), case["tf"]["dtype"], ulp=ULP.get(case["fn"], 0))


#: Under ``jax.jit`` XLA turned ``(t * c) / c`` into ``t * (c / c)`` (it rewrites a division
#: by a broadcast value as a product): the subnormal ``t * c`` that TF flushes was never
#: formed (``clip_by_norm/6``). The divisor's optimization barrier keeps TF's order.
@pytest.mark.parametrize("backend", ["jax"], indirect=True)
@pytest.mark.parametrize("case_id", _ids("subnormal/"))
def test_subnormals_under_jax_jit(case_id: str, backend: Backend, make: Any, check: Any):
    """XLA:CPU flushes by itself: TF's values under ``jax.jit`` with no switch."""
    case = CASES[case_id]
    out = _call(case, make, unknown=False, compile=backend.module.jit)
    check(out, gen.decode(case["tf"]), case["tf"]["dtype"], ulp=ULP.get(case["fn"], 0))


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("case_id", sorted(KEEPS_SUBNORMALS))
def test_subnormals_under_torch_compile(case_id: str, backend: Backend, make: Any, check: Any):
    """TF's values from ``torch.compile(fullgraph=True)`` inside ``flush_subnormals()``."""
    torch = backend.module
    case = CASES[case_id]
    torch._dynamo.reset()  # _call's inner function is one code object for every case
    try:
        with anyclip.flush_subnormals():
            out = _call(
                case,
                make,
                unknown=False,
                compile=lambda f: torch.compile(f, fullgraph=True, backend="aot_eager"),
            )
    finally:
        torch._dynamo.reset()
    check(out, gen.decode(case["tf"]), case["tf"]["dtype"], ulp=ULP.get(case["fn"], 0))


@pytest.mark.live_tf
def test_committed_reference_is_tfs(tmp_path: Path):
    # the committed file is still what TF 2.21 gives (run with --live-tf)
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    out = tmp_path / "live.json"
    run_reference_script(SCRIPT, out)
    live = json.loads(out.read_text())
    assert live["tensorflow"] == COMMITTED["tensorflow"]
    # as text: NaN never equals itself, its JSON spelling does
    assert json.dumps(live["cases"], sort_keys=True) == json.dumps(
        COMMITTED["cases"], sort_keys=True
    )
