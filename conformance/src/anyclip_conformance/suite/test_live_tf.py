"""anyclip vs a live TensorFlow on hypothesis-generated inputs (``pytest conformance --live-tf``).

Every function gets random dtypes, shapes, values (with zeros, signed zeros, infinities, NaN and
values whose squares overflow float16), axes, ords and clip values; TensorFlow runs them (through
the generator's own runner) and anyclip must match on the numpy, torch and jax backends with the
catalogue's rules and budgets (``budgets.py``). Where TF refuses a drawn input anyclip must raise
``TypeError`` or ``ValueError``. ``--live-tf-examples N`` sets the examples per function and
backend. Without TensorFlow installed the tests skip.

Besides small arrays the generators draw what differential fuzzing found the catalogue missing
(issue 14): long and several-axis reductions of same-sign values (half-precision and nested-loop
sums), complex inputs, arguments whose shapes do not fit the input (``clip_norm``,
``use_norm``, ``epsilon``, bounds), and byte-swapped NumPy arrays. TF's eager scalar cache
(``0.0`` and ``-0.0`` share an entry) is cleared before every TF call by
``generate.run_case``; :func:`test_scalar_cache_is_cleared` checks that.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import numpy as np
import pytest

pytest.importorskip("hypothesis", reason="the live comparison needs anyclip-conformance[live]")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from anyclip_conformance import harness
from anyclip_conformance.backends import Backend
from anyclip_conformance.cases import A, Case, Seq
from anyclip_conformance.reference import functions

#: Under pytest-xdist one worker runs the module: TensorFlow is imported once (module-scoped
#: ``tf_runner``), not in every worker.
pytestmark = [pytest.mark.live_tf, pytest.mark.xdist_group("live-tf")]

LIVE_BACKENDS = ["numpy", "torch", "jax"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 300.0, 1e-3, 65504.0]
COMPLEX = ["complex64", "complex128"]
#: Shapes of long and several-axis reductions (bfloat16 sums of 1,001 squares, XLA's nested
#: loops over 5 axes).
LONG_SHAPES = [(1001,), (3, 1001), (7, 2, 2, 5, 3), (2, 3, 4, 5, 6)]


@pytest.fixture(scope="module")
def tf_runner():
    """TensorFlow and the generator's function table (skips without TensorFlow)."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    pytest.importorskip("tensorflow")
    from anyclip_conformance import generate

    tf = generate._tf()
    return tf, generate.tf_functions(tf), generate


# ---------------------------------------------------------------------------------- strategies
def _dtypes(backend: Any) -> list[str]:
    return [d for d in FLOATS if backend.has_dtype(d)]


def _not_tiny(floats: Any) -> Any:
    """0 or magnitudes of at least 1e-3: squares and products of tinier values can be
    subnormal, and TF's CPU kernels flush subnormals to zero (a declared deviation, listed in
    xfails/*.txt); this mode looks for what the catalogue has not explained."""
    return floats.filter(lambda v: v == 0 or abs(v) >= 1e-3)


@st.composite
def float_arrays(draw: Any, dtype: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    if shape is None:
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
    scale = draw(st.sampled_from([1e-3, 1.0, 10.0, 1e3]))
    # float16: squares of magnitudes below 1e-2 are subnormal in float16 (see _not_tiny)
    tiny = 1e-2 if dtype == "float16" else 0.0
    finite = (
        _not_tiny(st.floats(-4.0, 4.0, allow_subnormal=False))
        .map(lambda v: v * scale)
        .filter(lambda v: v == 0 or abs(v) >= tiny)
    )
    special = draw(st.booleans())
    specials = [v for v in SPECIALS if not (dtype == "float16" and 0 < abs(v) < tiny)]
    elements = st.one_of(finite, st.sampled_from(specials)) if special else finite
    return draw(hnp.arrays(np.float64, shape, elements=elements))


@st.composite
def long_arrays(draw: Any, dtype: str) -> np.ndarray:
    """A long or many-axis array of same-sign values, or ``big`` then ones (seeded NumPy)."""
    shape = draw(st.sampled_from(LONG_SHAPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["uniform", "normal", "big_and_ones"]))
    if kind == "uniform":
        return rng.uniform(0.5, 1.5, shape)
    if kind == "normal":
        return rng.standard_normal(shape) * 3.0
    x = np.ones(shape)
    x.reshape(-1)[0] = draw(st.sampled_from([16.0, 128.0, 256.0] if dtype != "float16" else [16.0]))
    return x


@st.composite
def inputs(draw: Any, dtype: str) -> np.ndarray:
    """The main input: mostly :func:`float_arrays`, sometimes :func:`long_arrays`."""
    if draw(st.integers(0, 4)) == 0:
        return draw(long_arrays(dtype))
    return draw(float_arrays(dtype))


@st.composite
def complex_arrays(draw: Any, dtype: str) -> np.ndarray:
    real = "float32" if dtype == "complex64" else "float64"
    re = draw(float_arrays(real))
    im = draw(float_arrays(real, re.shape))
    out = np.empty(re.shape, np.complex128)
    out.real, out.imag = re, im  # re + 1j * im would turn an infinite part into NaN + inf j
    return out


def _odd_shape(draw: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape for an argument of an input of ``shape``: often fitting, sometimes not."""
    nd = len(shape)
    kind = draw(st.sampled_from(["suffix", "ones", "mismatch", "longer"]))
    if kind == "suffix":
        return shape[nd - draw(st.integers(0, nd)) :]
    if kind == "ones":
        return (1,) * draw(st.integers(1, max(nd, 1)))
    if kind == "mismatch":
        return (draw(st.integers(2, 6)),)
    return (2, *shape)


def _axes(draw: Any, ndim: int, *, allow_list: bool = True) -> Any:
    kind = draw(st.sampled_from(["none", "int", "seq"] if allow_list else ["none", "int"]))
    if kind == "none" or ndim == 0:
        return None
    if kind == "int":
        a = draw(st.integers(0, ndim - 1))
        return a - ndim if draw(st.booleans()) else a
    picked = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
    picked = [a - ndim if draw(st.booleans()) else a for a in picked]
    return tuple(picked) if draw(st.booleans()) else picked


def _clip_value(draw: Any, dtype: str, shape: tuple[int, ...] | None = None) -> Any:
    value = draw(
        st.one_of(
            _not_tiny(st.floats(0.0, 100.0, allow_subnormal=False)),
            st.sampled_from([0.0, -1.0, 1.0, 5.0, math.inf, math.nan, 1e-3]),
        )
    )
    if shape is not None and draw(st.integers(0, 5)) == 0:  # an array of a drawn shape
        return A(np.full(_odd_shape(draw, shape), abs(value) if value == value else 1.0), dtype)
    return A(value, dtype) if draw(st.booleans()) else value


@st.composite
def calls(draw: Any, function: str, backend: Any) -> Case:
    """One random call of ``function``."""
    if function == "clip_by_average_norm":
        dtype = "float32"
    elif function == "clip_by_value":
        dtype = draw(st.sampled_from(_dtypes(backend) + INTS))
    elif function in ("norm", "normalize", "l2_normalize") and draw(st.integers(0, 4)) == 0:
        dtype = draw(st.sampled_from(COMPLEX))
    else:
        dtype = draw(st.sampled_from(_dtypes(backend)))
    if dtype in COMPLEX:
        # Dividing by the norm inf + nan j of an infinite part gives 0 or NaN per entry
        # depending on TF's kernel (a declared difference): no infinities for normalize
        finite = function == "normalize"
        return _complex_call(draw, function, dtype, finite=finite)
    if function == "clip_by_value" and dtype in INTS:
        info = np.iinfo(dtype)
        lo_, hi_ = max(int(info.min), -1000), min(int(info.max), 1000)
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
        x = draw(hnp.arrays(np.int64, shape, elements=st.integers(lo_, hi_)))
        lo = draw(st.integers(lo_, hi_))
        hi = draw(st.integers(lo_, hi_))
        bounds = [A(b, dtype) if draw(st.booleans()) else b for b in (lo, hi)]
        return Case("live", function, (A(x, dtype), *bounds))
    x = draw(inputs(dtype)) if function != "clip_by_value" else draw(float_arrays(dtype))
    nd = x.ndim
    # Gradients in float32/float64 only: where an exact gradient cancels to 0, TF's float16 and
    # bfloat16 results are rounding residues of the cancelling terms (l2_normalize of bfloat16
    # 1.6465e-4: TF 32, one bfloat16 ULP of rsqrt(x**2) ~ 6000; exact 0, torch 0), which differ
    # with every op decomposition. The catalogue keeps fixed half-precision gradient cases.
    grad = backend.has_autodiff and dtype in ("float32", "float64") and draw(st.booleans())
    # A gradient w.r.t. a scalar (clip_norm) of a long array sums as many cancelling terms;
    # the gradient budgets are set for the short arrays: long ones check values only.
    grad = grad and x.size <= 256
    if function == "clip_by_value":
        bounds = []
        for _ in range(2):
            if draw(st.booleans()):
                bshape = _odd_shape(draw, x.shape) if draw(st.integers(0, 5)) == 0 else None
                if bshape is None:
                    bshape = x.shape[nd - draw(st.integers(0, nd)) :] if nd else ()
                bounds.append(A(draw(float_arrays(dtype, bshape)), dtype))
            else:
                bounds.append(draw(st.one_of(st.floats(-10, 10), st.sampled_from(SPECIALS))))
        return Case("live", function, (A(x, dtype), *bounds), grad=grad)
    if function == "clip_by_norm":
        kw = {}
        axes = _axes(draw, nd)
        if axes is not None:
            kw["axes"] = axes
        clip = _clip_value(draw, dtype, x.shape)
        return Case("live", function, (A(x, dtype), clip), tuple(kw.items()), grad=grad)
    if function in ("global_norm", "clip_by_global_norm"):
        n = draw(st.integers(0, 4))
        items: list[Any] = [A(x, dtype)] + [A(draw(float_arrays(dtype)), dtype) for _ in range(n)]
        if draw(st.booleans()):
            items.insert(draw(st.integers(0, len(items))), None)
        seq = Seq(tuple(items), draw(st.sampled_from(["list", "tuple"])))
        if function == "global_norm":
            return Case("live", function, (seq,), grad=grad)
        kw = {}
        if draw(st.integers(0, 4)) == 0:
            use = draw(_not_tiny(st.floats(0.0, 100.0)))
            ushape = _odd_shape(draw, x.shape) if draw(st.integers(0, 3)) == 0 else ()
            kw["use_norm"] = A(np.full(ushape, use), dtype)
        return Case(
            "live",
            function,
            (seq, _clip_value(draw, dtype, x.shape)),
            tuple(kw.items()),
            grad=grad,
            grad_outputs=("0",),
        )
    if function == "clip_by_average_norm":
        return Case("live", function, (A(x, dtype), _clip_value(draw, dtype)), grad=grad)
    if function in ("norm", "normalize"):
        kw = {}
        matrix = nd >= 2 and draw(st.booleans())
        if matrix:
            pair = draw(st.lists(st.integers(0, nd - 1), min_size=2, max_size=2, unique=True))
            kw["axis"] = tuple(pair)
            # the SVD budget is set for the catalogue's small matrices, not the long inputs'
            orders = ["euclidean", "fro", 1, math.inf] + ([2] if x.size <= 256 else [])
            order = draw(st.sampled_from(orders))
        else:
            axis = _axes(draw, nd, allow_list=False)
            if axis is not None:
                kw["axis"] = axis
            order = draw(st.sampled_from(["euclidean", 1, 2, math.inf, 0.5, 3, 2.5, 1.5]))
        if order != "euclidean":
            kw["ord"] = order
        if function == "norm" and draw(st.booleans()):
            kw["keepdims"] = True
        outs = ("0",) if function == "normalize" else None
        return Case(
            "live", function, (A(x, dtype),), tuple(kw.items()), grad=grad, grad_outputs=outs
        )
    if function == "l2_normalize":
        kw = {}
        axes = _axes(draw, nd)
        if axes is not None:
            kw["axis"] = axes
        if draw(st.integers(0, 3)) == 0:
            eps = draw(st.sampled_from([0.0, 1e-6, 1.0, 100.0]))
            kw["epsilon"] = eps
            if draw(st.integers(0, 2)) == 0:  # an array, of a shape that may not fit
                kw["epsilon"] = A(np.full(_odd_shape(draw, x.shape), eps), dtype)
        return Case("live", function, (A(x, dtype),), tuple(kw.items()), grad=grad)
    raise ValueError(function)


def _complex_call(draw: Any, function: str, dtype: str, *, finite: bool = False) -> Case:
    """``norm``, ``normalize`` or ``l2_normalize`` of a complex array (no gradients)."""
    x = draw(complex_arrays(dtype).filter(lambda a: not finite or bool(np.isfinite(a).all())))
    nd = x.ndim
    kw: dict[str, Any] = {}
    if function == "l2_normalize":
        axes = _axes(draw, nd)
        if axes is not None:
            kw["axis"] = axes
        return Case("live", function, (A(x, dtype),), tuple(kw.items()))
    if nd >= 2 and draw(st.booleans()):
        kw["axis"] = tuple(
            draw(st.lists(st.integers(0, nd - 1), min_size=2, max_size=2, unique=True))
        )
        order = draw(st.sampled_from(["euclidean", "fro", 1, 2, math.inf]))
    else:
        axis = _axes(draw, nd, allow_list=False)
        if axis is not None:
            kw["axis"] = axis
        order = draw(st.sampled_from(["euclidean", 1, 2, math.inf, 3]))
    if order != "euclidean":
        kw["ord"] = order
    if order == 2 and "axis" in kw and isinstance(kw["axis"], tuple) and not np.isfinite(x).all():
        # TF's complex SVD fails on inf or NaN and returns 0 (a declared difference: anyclip
        # gives NaN, as TF does for real matrices)
        x = np.where(np.isfinite(x), x, 0)
    return Case("live", function, (A(x, dtype),), tuple(kw.items()))


# --------------------------------------------------------------------------------------- tests
def _cancelling_terms(entry: dict[str, Any], arrays: dict[str, np.ndarray]) -> float:
    """The size of the terms that cancel in these gradients: largest weight x |out| / |x|.

    Random inputs land on points where an exact gradient is 0 or tiny although its terms are
    not (l2_normalize: ``r - x**2 r**3`` with ``r = 1/|x|``); there TF's result is a rounding
    residue of the terms, so errors are measured in ULPs of the terms, not of the residue.
    """
    outs = [np.abs(np.asarray(v, np.float64)) for k, v in arrays.items() if "|out|" in k]
    ins = [np.abs(np.asarray(v, np.float64)) for k, v in arrays.items() if "|in|" in k]
    weight = max((o.size for o in outs), default=1)
    top = max((float(o[np.isfinite(o)].max()) for o in outs if np.isfinite(o).any()), default=0)
    nonzero = [i[(i > 0) & np.isfinite(i)] for i in ins]
    low = min((float(n.min()) for n in nonzero if n.size), default=1.0)
    return weight * max(1.0, top / low)


@pytest.mark.parametrize("backend", LIVE_BACKENDS, indirect=True)
@pytest.mark.parametrize("function", functions())
def test_live(function: str, backend: Any, tf_runner: Any, request: pytest.FixtureRequest):
    tf, fns, generate = tf_runner
    examples = request.config.getoption("--live-tf-examples")

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=bool(os.environ.get("CI")),  # CI: the same examples on every run
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=calls(function, backend), swap=st.booleans())
    def check(case: Case, swap: bool) -> None:
        entry, arrays = generate.run_case(tf, fns, case, live=True)
        prep = harness.prepare_entry(entry, arrays)
        # NumPy: half the calls get byte-swapped ('>f4') arrays, which TF converts
        swapped = swap and backend.library == "numpy"
        harness.check_case(prep, _byte_swapped(backend) if swapped else backend, "eager")
        if "grads" in entry and harness.applicable(prep, backend, "grad") is None:
            entry["grad_scale_floor"] = _cancelling_terms(entry, arrays)
            harness.check_case(prep, backend, "grad")

    check()


class _ByteSwapped(Backend):
    """The NumPy backend, building its floating arrays in non-native byte order."""

    def asarray(self, value: Any, dtype: str | None = None, *, requires_grad: bool = False) -> Any:
        out = super().asarray(value, dtype, requires_grad=requires_grad)
        if out.dtype.kind in "fc" and out.dtype.itemsize > 1:
            return out.astype(out.dtype.newbyteorder())
        return out


def _byte_swapped(backend: Any) -> Any:
    fields = {f.name: getattr(backend, f.name) for f in dataclasses.fields(backend)}
    return _ByteSwapped(**fields)


def test_scalar_cache_is_cleared(tf_runner: Any) -> None:
    """TF's eager scalar cache keys 0.0 and -0.0 as one: a -0.0 converted first would make a
    later ``clip_by_average_norm(x, 0.0)`` NaN. ``run_case`` clears it before each TF call."""
    tf, fns, generate = tf_runner
    x = A([3.0, 4.0], "float32")
    generate.run_case(tf, fns, Case("live", "clip_by_average_norm", (x, -0.0)), live=True)
    _, arrays = generate.run_case(
        tf, fns, Case("live", "clip_by_average_norm", (x, 0.0)), live=True
    )
    out = [v for k, v in arrays.items() if "|out|" in k]
    assert len(out) == 1
    np.testing.assert_array_equal(out[0], np.zeros(2, np.float32))  # TF with a fresh cache
