"""The conformance catalogue: every case anyclip is compared with TensorFlow on.

A :class:`Case` names a function, its arguments and what to record. Arguments are plain Python
values (passed as they are: scalars, ``None``, strings), or one of the specs below:

* :class:`A` - an array, created on the backend under test with a given dtype. Its value is a
  literal (nested list) or a seeded generator :class:`Gen`. ``tf="numpy"`` hands TensorFlow a NumPy
  array instead of a tensor (TF casts NumPy values silently; anyclip sees a backend array of that
  dtype and refuses it: a documented policy deviation).
* :class:`NpArr` - a NumPy ndarray on every backend (used for ``axes`` given as an ndarray).
* :class:`NpScalar` - a NumPy scalar such as ``np.float32(3.7)``.
* :class:`Py` - Python data (a nested list) given where TF expects a tensor.
* :class:`Seq` - a container of specs (``t_list``): list, tuple, generator or dict.

``generate.py`` runs TensorFlow over :data:`CASES` and writes the inputs, outputs, gradients and
errors to ``data/``; the tests read only ``data/`` and never this module's generators.

Case ids are ``function/dtype/family/detail``. Families loop over dtypes, shapes and values; the
seed of every generated array is derived from its case id (``zlib.crc32``), so adding a case never
changes another case's data.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "CASES",
    "FUNCTIONS",
    "A",
    "Case",
    "Gen",
    "NpArr",
    "NpScalar",
    "Py",
    "Seq",
    "materialize",
]

FUNCTIONS = (
    "clip_by_value",
    "clip_by_norm",
    "clip_by_global_norm",
    "global_norm",
    "clip_by_average_norm",
    "norm",
    "l2_normalize",
    "normalize",
)

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
COMPLEX = ("complex64", "complex128")
SHORT = {
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "complex64": "c64",
    "complex128": "c128",
    "bool": "bool",
}
INF = math.inf
NAN = math.nan
#: dtypes whose conversion of a Python bool TF refuses (TypeError "Cannot convert True to
#: EagerTensor of dtype ..."); float16/32/64, int32, int64 and uint64 accept it.
BOOL_REFUSED = ("bfloat16", "int8", "int16", "uint8", "uint16", "uint32")
#: TF refuses the matrix 2-norm (SVD) in these dtypes.
NO_SVD = ("float16", "bfloat16")


# ------------------------------------------------------------------------------- argument specs
@dataclasses.dataclass(frozen=True)
class Gen:
    """A seeded random array: ``dist`` is normal (``scale``), uniform (``lo``..``hi``), int
    (integers in ``[lo, hi]``), lognormal (magnitudes ``10**U(lo, hi)`` with random signs) or
    complex (normal real and imaginary parts)."""

    seed: int
    shape: tuple[int, ...]
    dist: str = "normal"
    scale: float = 1.0
    lo: float = -1.0
    hi: float = 1.0

    def sample(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        if self.dist == "normal":
            return rng.standard_normal(self.shape) * self.scale
        if self.dist == "uniform":
            return rng.uniform(self.lo, self.hi, self.shape)
        if self.dist == "int":
            return rng.integers(int(self.lo), int(self.hi), self.shape, endpoint=True)
        if self.dist == "lognormal":
            mag = 10.0 ** rng.uniform(self.lo, self.hi, self.shape)
            return mag * rng.choice([-1.0, 1.0], self.shape)
        if self.dist == "complex":
            re = rng.standard_normal(self.shape)
            im = rng.standard_normal(self.shape)
            return (re + 1j * im) * self.scale
        raise ValueError(self.dist)


@dataclasses.dataclass(frozen=True)
class A:
    """An array of the backend under test."""

    value: Any
    dtype: str
    tf: str = "tensor"


@dataclasses.dataclass(frozen=True)
class NpArr:
    """A NumPy ndarray, whatever the backend."""

    value: Any
    dtype: str


@dataclasses.dataclass(frozen=True)
class NpScalar:
    """A NumPy scalar."""

    value: Any
    dtype: str


@dataclasses.dataclass(frozen=True)
class Py:
    """Python data (nested lists of numbers) where TF expects a tensor."""

    value: Any


@dataclasses.dataclass(frozen=True)
class Seq:
    """A container of argument specs: list, tuple, generator or dict."""

    items: tuple[Any, ...]
    kind: str = "list"


@dataclasses.dataclass(frozen=True)
class Case:
    """One call of one function, with what to record.

    ``error`` is the exception class anyclip must raise (``None``: outputs are recorded).
    ``policy`` explains a case where anyclip deliberately refuses what TF accepts. ``grad``
    records the gradient of ``sum(out * w)`` (``w = 1..n`` per output array, in the output's
    dtype) w.r.t. every floating array argument; ``grad_outputs`` picks the outputs that enter
    the loss by their path (``"0"``, ``"1"``; ``None`` = every output). ``bulk`` marks the
    cases of the random dtype x shape x axes grids (the jit variant samples them).
    """

    id: str
    function: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()
    error: str | None = None
    policy: str | None = None
    grad: bool = False
    grad_outputs: tuple[str, ...] | None = None
    bulk: bool = False


def materialize(value: Any, dtype: str) -> np.ndarray:
    """The NumPy array an :class:`A`/:class:`NpArr` value stands for.

    bfloat16 values are rounded to bfloat16 and returned as float32 (exactly representable).
    """
    raw = value.sample() if isinstance(value, Gen) else value
    if dtype == "bfloat16":
        import ml_dtypes

        return np.asarray(raw, dtype=np.float64).astype(ml_dtypes.bfloat16).astype(np.float32)
    if dtype.startswith(("int", "uint")):
        arr = np.asarray(raw)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.int64)
        return arr.astype(dtype)
    if dtype == "bool":
        return np.asarray(raw, dtype=bool)
    if dtype.startswith("float"):
        return np.asarray(raw, dtype=np.float64).astype(dtype)
    return np.asarray(raw).astype(dtype)


# ---------------------------------------------------------------------------------- helpers
def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


def gen(case_id: str, shape: tuple[int, ...], dist: str = "normal", **kw: Any) -> Gen:
    """A generator seeded by ``case_id`` (plus a salt in ``kw['salt']``)."""
    salt = kw.pop("salt", "")
    return Gen(_seed(case_id + "#" + salt), tuple(shape), dist, **kw)


def nudge(x: float, dtype: str, steps: int) -> float:
    """``x`` moved by ``steps`` representable values of ``dtype`` (saturating at +-inf)."""
    width = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}[dtype]
    value = materialize([x], dtype)  # bfloat16 comes back as float32
    if dtype == "bfloat16":
        bits = int(value.view(np.uint32)[0]) >> 16
    else:
        bits = int(value.view(f"uint{width}")[0])
    sign = 1 << (width - 1)
    key = -(bits & (sign - 1)) if bits & sign else bits
    inf_key = {"float16": 0x7C00, "bfloat16": 0x7F80, "float32": 0x7F800000}.get(
        dtype, 0x7FF0000000000000
    )
    key = max(-inf_key, min(inf_key, key + steps))
    bits = (sign | -key) if key < 0 else key
    if dtype == "bfloat16":
        return float(np.asarray([bits << 16], dtype=np.uint32).view(np.float32)[0])
    return float(np.asarray([bits], dtype=f"uint{width}").view(dtype)[0])


def rounded(x: float, dtype: str) -> float:
    """``x`` rounded to ``dtype`` and back to a Python float."""
    return float(materialize([x], dtype)[0])


def eps(dtype: str) -> float:
    return {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}[
        dtype
    ]


def fmax(dtype: str) -> float:
    if dtype == "bfloat16":
        return float.fromhex("0x1.fep127")
    return float(np.finfo(dtype).max)


def tiny(dtype: str) -> float:
    if dtype == "bfloat16":
        return 2.0**-126
    return float(np.finfo(dtype).tiny)


def _axes_valid(axes: Any, ndim: int) -> bool:
    if axes is None:
        return True
    flat = [axes] if isinstance(axes, int) else list(axes)
    if any(not -max(ndim, 1) <= a < max(ndim, 1) for a in flat) or (ndim == 0 and flat):
        return False
    norm = [a % ndim for a in flat]
    return len(set(norm)) == len(norm)


def _axes_label(axes: Any) -> str:
    if axes is None:
        return "None"
    if isinstance(axes, tuple):
        return "(" + ",".join(map(str, axes)) + ")"
    if isinstance(axes, list):
        return "[" + ",".join(map(str, axes)) + "]"
    return str(axes)


def _shape_label(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "0d"


# Exactly representable vectors with exactly representable norms (Pythagorean families).
EXACT = (
    ([3.0, 4.0], 5.0),
    ([5.0, -12.0], 13.0),
    ([-1.0, 2.0, 2.0], 3.0),
    ([2.0, 3.0, -6.0], 7.0),
    ([1.0, 1.0, 1.0, 1.0], 2.0),
    ([0.75, 1.0], 1.25),
    ([-8.0, 15.0], 17.0),
)

SHAPES = ((), (0,), (1,), (7,), (3, 4), (2, 0), (2, 3, 4), (2, 1, 3, 2), (3, 1, 1, 5))


# ----------------------------------------------------------------------------- clip_by_value
def _clip_by_value() -> Iterator[Case]:
    f = "clip_by_value"
    # 1. every dtype x shape x kind of bounds
    for dt in FLOATS + INTS:
        s = SHORT[dt]
        is_int = dt in INTS
        unsigned = dt.startswith("uint")
        shapes = SHAPES if not is_int else ((), (0,), (7,), (3, 4), (2, 3, 4))
        for shape in shapes:
            sl = _shape_label(shape)
            for kind in ("py", "0d", "bcast", "full", "mixed"):
                if is_int and kind == "mixed":
                    continue
                cid = f"{f}/{s}/{kind}/{sl}"
                if is_int:
                    lo_v, hi_v = (3, 90) if unsigned else (-20, 25)
                    x = A(gen(cid, shape, "int", lo=0 if unsigned else -100, hi=100), dt)
                else:
                    lo_v, hi_v = -0.75, 1.5
                    x = A(gen(cid, shape, scale=2.0), dt)
                if kind == "py":
                    lo, hi = lo_v, hi_v
                elif kind == "0d":
                    lo, hi = A(lo_v, dt), A(hi_v, dt)
                elif kind == "mixed":
                    lo, hi = lo_v, A(hi_v, dt)
                elif kind == "bcast":
                    if not shape:
                        continue
                    bshape = shape[-1:]
                    hshape = (1,) * (len(shape) - 1) + shape[-1:] if len(shape) > 1 else shape
                    if is_int:
                        lo = A(gen(cid, bshape, "int", lo=lo_v - 5, hi=lo_v + 5, salt="lo"), dt)
                        hi = A(gen(cid, hshape, "int", lo=hi_v - 5, hi=hi_v + 5, salt="hi"), dt)
                    else:
                        lo = A(gen(cid, bshape, "uniform", lo=-1.0, hi=-0.25, salt="lo"), dt)
                        hi = A(gen(cid, hshape, "uniform", lo=0.25, hi=2.0, salt="hi"), dt)
                else:  # full shape bounds, sometimes lo > hi (min wins)
                    if not shape:
                        continue
                    if is_int:
                        lo = A(gen(cid, shape, "int", lo=lo_v - 30, hi=lo_v + 30, salt="lo"), dt)
                        hi = A(gen(cid, shape, "int", lo=hi_v - 30, hi=hi_v + 30, salt="hi"), dt)
                    else:
                        lo = A(gen(cid, shape, "uniform", lo=-2.0, hi=0.5, salt="lo"), dt)
                        hi = A(gen(cid, shape, "uniform", lo=-0.5, hi=2.0, salt="hi"), dt)
                yield Case(cid, f, (x, lo, hi), bulk=True)

    # 2. boundary neighbourhoods: values at, just inside and just outside each bound
    for dt in FLOATS:
        s = SHORT[dt]
        pairs = [
            (-1.0, 1.0),
            (rounded(0.1, dt), rounded(0.3, dt)),
            (-fmax(dt), fmax(dt)),
            (tiny(dt), 1.0),
            (-tiny(dt) / 4 if dt != "bfloat16" else -(2.0**-130), 2.0**-20),
            (2.0, 2.0),
            (-3.5, -0.0),
        ]
        for i, (lo, hi) in enumerate(pairs):
            xs = []
            for b in (lo, hi):
                xs += [nudge(b, dt, -2), nudge(b, dt, -1), b, nudge(b, dt, 1), nudge(b, dt, 2)]
            for kind in ("py", "arr"):
                cid = f"{f}/{s}/edge/{kind}/{i}"
                if kind == "py":
                    yield Case(cid, f, (A(xs, dt), lo, hi))
                else:
                    yield Case(cid, f, (A(xs, dt), A(lo, dt), A(hi, dt)))
    for dt in INTS:
        s = SHORT[dt]
        info = np.iinfo(dt)
        pairs = [(0, 5), (int(info.min), int(info.min) + 1), (int(info.max) - 2, int(info.max))]
        if not dt.startswith("uint"):
            pairs.append((-7, -7))
        for i, (lo, hi) in enumerate(pairs):
            xs = sorted(
                {
                    min(max(v, int(info.min)), int(info.max))
                    for b in (lo, hi)
                    for v in (b - 1, b, b + 1)
                }
            )
            xs += [int(info.min), int(info.max)]
            yield Case(f"{f}/{s}/edge/py/{i}", f, (A(xs, dt), lo, hi))
            yield Case(f"{f}/{s}/edge/arr/{i}", f, (A(xs, dt), A(lo, dt), A(hi, dt)))

    # 3. special values
    specials = [NAN, -INF, INF, 0.5, -0.0, 0.0, -2.0, 2.0]
    for dt in FLOATS:
        s = SHORT[dt]
        cases = {
            "specials": (specials, 0.0, 1.0),
            "min_gt_max": ([0.0, 5.0, 10.0, -1.0], 6.0, 4.0),
            "min_eq_max": ([-1.0, 0.0, 1.0, NAN], 0.0, 0.0),
            "min_nan": ([1.0, 2.0, 3.0], NAN, 5.0),
            "max_nan": ([1.0, 2.0, 3.0], 0.0, NAN),
            "both_nan": ([1.0, -INF], NAN, NAN),
            "infinite_bounds": (specials, -INF, INF),
            "lo_inf": ([1.0, INF, -INF], INF, INF),
            "hi_neg_inf": ([1.0, INF, -INF], -INF, -INF),
            "neg_zero_bounds": ([-1.0, -0.0, 0.0, 1.0], -0.0, 0.0),
            "huge_bounds": ([1e4, -1e4, 0.0], -1e6, 1e6),
            "huge_min": ([1.0, -1.0], 1e6, 1e7),
            "tiny_bounds": ([1e-30, -1e-30, 0.0, 1.0], -1e-40, 1e-40),
            "neg_range": ([-5.0, -2.0, 0.0], -3.0, -1.0),
        }
        for name, (xs, lo, hi) in cases.items():
            yield Case(f"{f}/{s}/special/{name}/py", f, (A(xs, dt), lo, hi))
            yield Case(f"{f}/{s}/special/{name}/arr", f, (A(xs, dt), A(lo, dt), A(hi, dt)))
        yield Case(f"{f}/{s}/special/int_bounds", f, (A([-3.0, 0.5, 9.0], dt), -1, 2))
        yield Case(
            f"{f}/{s}/special/bool_bounds",
            f,
            (A([-3.0, 0.5, 9.0], dt), False, True),
            error="TypeError" if dt in BOOL_REFUSED else None,
        )
        yield Case(
            f"{f}/{s}/special/npscalar_f64",
            f,
            (A([-3.0, 0.5, 9.0], dt), NpScalar(-1.5, "float64"), NpScalar(0.1, "float64")),
        )
        yield Case(
            f"{f}/{s}/special/list_bounds",
            f,
            (A([[-3.0, 0.5], [9.0, 1.0]], dt), [-1.0, 0.75], [[2.0], [0.8]]),
        )

    # 4. integer conversions of Python/NumPy scalars (wrapping, truncation)
    for dt in INTS:
        s = SHORT[dt]
        info = np.iinfo(dt)
        xs = A([1, 2, 3, 100], dt)
        yield Case(f"{f}/{s}/convert/py_float", f, (xs, 1.0, 3.0), error="TypeError")
        yield Case(f"{f}/{s}/convert/py_float_max", f, (xs, 1, 3.1), error="TypeError")
        # TF wraps out-of-range Python ints, except for 64-bit dtypes where it refuses them
        # (ValueError for int64, OverflowError for uint64: anyclip raises ValueError for both)
        wide = dt in ("int64", "uint64")
        yield Case(
            f"{f}/{s}/convert/wrap_hi",
            f,
            (xs, 0, int(info.max) + 1000),
            error="ValueError" if wide else None,
        )
        yield Case(
            f"{f}/{s}/convert/wrap_lo",
            f,
            (xs, int(info.min) - 1, 50),
            error="ValueError" if wide else None,
        )
        yield Case(
            f"{f}/{s}/convert/np_float32",
            f,
            (xs, NpScalar(1.0, "float32"), NpScalar(3.7, "float32")),
        )
        yield Case(
            f"{f}/{s}/convert/np_float64",
            f,
            (xs, NpScalar(2.5, "float64"), NpScalar(99.9, "float64")),
        )
        yield Case(
            f"{f}/{s}/convert/np_int64", f, (xs, NpScalar(2, "int64"), NpScalar(50, "int64"))
        )
        yield Case(
            f"{f}/{s}/convert/bool",
            f,
            (xs, True, 90),
            error="TypeError" if dt in BOOL_REFUSED else None,
        )
        yield Case(f"{f}/{s}/convert/list", f, (xs, [0, 1, 2, 3], 99))
        yield Case(f"{f}/{s}/convert/py_complex", f, (xs, 1, 3 + 0j), error="TypeError")
    yield Case(f"{f}/i32/convert/2pow40", f, (A([1, 2, 3, 4], "int32"), 0, 2**40))
    yield Case(f"{f}/i8/convert/1000", f, (A([1, 2], "int8"), 0, 1000))
    yield Case(f"{f}/u8/convert/neg1", f, (A([1, 2], "uint8"), -1, 1))
    yield Case(f"{f}/f16/convert/1e6", f, (A([1e4, 1.0], "float16"), 0.0, 1e6))
    yield Case(f"{f}/f16/convert/min1e6", f, (A([1.0], "float16"), 1e6, 2e6))
    yield Case(f"{f}/bf16/convert/0.1", f, (A([0.05, 0.1, 0.2], "bfloat16"), 0.1, 0.15))
    yield Case(f"{f}/f32/convert/1e39", f, (A([1e38, -3e38], "float32"), -1e39, 1e39))

    # 5. Python data as the main input
    yield Case(f"{f}/py/int_list", f, (Py([[1, 2], [3, 4]]), 2, 3))
    yield Case(f"{f}/py/float_list", f, (Py([[1.5, -2.0], [3.0, 4.0]]), -1.0, 3.5))
    yield Case(f"{f}/py/int_list_float_bounds", f, (Py([1, 2, 3]), 1.5, 2.5), error="TypeError")
    yield Case(f"{f}/py/scalar", f, (Py(5.5), -1.0, 2.0))
    yield Case(f"{f}/py/empty", f, (Py([]), -1.0, 2.0))
    yield Case(f"{f}/py/with_array_bound", f, (Py([0.5, 9.0]), A(0.0, "float32"), 1.0))

    # 6. refusals
    for dt in ("bool", *COMPLEX):
        val = [True, False] if dt == "bool" else [1 + 1j, -2.0]
        yield Case(f"{f}/{SHORT[dt]}/error/dtype", f, (A(val, dt), 0, 1), error="TypeError")
    x23 = A([[-1.0, 0.0, 10.0], [-1.0, 0.0, 10.0]], "float32")
    errs = {
        "bound_f64_array": ((x23, A(0.0, "float64"), 1.0), "TypeError", None),
        "bound_f16_array": ((x23, -1.0, A(1.0, "float16")), "TypeError", None),
        "bound_i32_array": ((x23, A(0, "int32"), 1.0), "TypeError", None),
        "bound_f64_ndarray": (
            (x23, A(0.0, "float64", tf="numpy"), 1.0),
            "TypeError",
            "anyclip never casts an array of another dtype; TF casts NumPy values silently",
        ),
        "bound_f64_ndarray_vec": (
            (x23, A([0.0, 1.0, 2.0], "float64", tf="numpy"), 5.0),
            "TypeError",
            "anyclip never casts an array of another dtype; TF casts NumPy values silently",
        ),
        "shape_4": ((x23, A([0.0] * 4, "float32"), 1.0), "ValueError", None),
        "shape_112": ((x23, A([[[0.0, 1.0]]], "float32"), 1.0), "ValueError", None),
        "enlarge_rank_min": ((x23, A(np.zeros((1, 2, 3)), "float32"), 1.0), "ValueError", None),
        "enlarge_rank_max": ((x23, -1.0, A(np.ones((1, 2, 3)), "float32")), "ValueError", None),
        "enlarge_dim": (
            (A([[1.0], [2.0]], "float32"), A(np.zeros((2, 3)), "float32"), 5.0),
            "ValueError",
            None,
        ),
        "enlarge_dim_max": (
            (A([[1.0], [2.0]], "float32"), 0.0, A(np.ones((1, 3)), "float32")),
            "ValueError",
            None,
        ),
        "enlarge_0d": ((A(1.0, "float32"), A([0.0, 0.0, 0.0], "float32"), 5.0), "ValueError", None),
        "none_min": ((x23, None, 1.0), "ValueError", None),
        "none_max": ((x23, 0.0, None), "ValueError", None),
        "none_t": ((None, 0.0, 1.0), "ValueError", None),
        "int_t_i64_bound": ((A([1, 2], "int32"), A(0, "int64"), 5), "TypeError", None),
        "str_bound": ((x23, "a", 1.0), "TypeError", None),
    }
    for name, (args, err, pol) in errs.items():
        yield Case(f"{f}/f32/error/{name}", f, args, error=err, policy=pol)
    # broadcasting that TF accepts
    yield Case(f"{f}/f32/bcast/min_2x1", f, (x23, A([[2.0], [1.0]], "float32"), 10.0))
    yield Case(f"{f}/f32/bcast/max_2x1", f, (x23, -10.0, A([[2.0], [1.0]], "float32")))
    yield Case(f"{f}/f32/bcast/min_3", f, (x23, A([-2.0, 0.5, 4.0], "float32"), 9.0))
    yield Case(
        f"{f}/f32/bcast/empty_0x3",
        f,
        (A(np.zeros((0, 3)), "float32"), A([0.0, 1.0, 2.0], "float32"), 5.0),
    )
    yield Case(f"{f}/f32/bcast/min_1x1", f, (x23, A([[0.5]], "float32"), 5.0))

    # 7. gradients
    base = [-2.0, -1.0, 0.0, 1.0, 2.0, NAN]
    for dt in FLOATS:
        s = SHORT[dt]
        g = {
            "tensor_bounds": (A(base, dt), A(-1.0, dt), A(1.0, dt)),
            "py_bounds": (A([*base, INF], dt), -1.0, 1.0),
            "min_eq_max": (A([-1.0, 0.0, 1.0], dt), A(0.0, dt), A(0.0, dt)),
            "min_gt_max": (A([-2.0, 0.0, 2.0], dt), A(1.0, dt), A(-1.0, dt)),
            "bcast_min": (A([[0.0, 5.0], [0.0, 5.0]], dt), A([[1.0], [-1.0]], dt), 4.0),
            "full_bounds": (
                A(gen(f"g{dt}", (3, 4), scale=2.0), dt),
                A(gen(f"g{dt}", (3, 4), "uniform", lo=-2.0, hi=0.0, salt="lo"), dt),
                A(gen(f"g{dt}", (3, 4), "uniform", lo=0.0, hi=2.0, salt="hi"), dt),
            ),
            "zeros": (A([0.0, 0.0, -0.0], dt), A(0.0, dt), A(0.0, dt)),
            "at_bounds": (
                A([-0.5, 0.25, 0.5, nudge(0.5, dt, 1), nudge(-0.5, dt, -1)], dt),
                A(-0.5, dt),
                A(0.5, dt),
            ),
            "nan_bound": (A([1.0, 2.0], dt), A(NAN, dt), A(3.0, dt)),
            "0d": (A(3.0, dt), A(-1.0, dt), A(1.0, dt)),
            "random_3d": (A(gen(f"g3{dt}", (2, 3, 4), scale=2.0), dt), A(-1.0, dt), 1.25),
        }
        for name, args in g.items():
            yield Case(f"{f}/{s}/grad/{name}", f, args, grad=True)


# ------------------------------------------------------------------------------ clip_by_norm
#: Reduction axes per shape (every axes form: None, int, negative int, list, tuple, [], all).
SHAPE_AXES: tuple[tuple[tuple[int, ...], tuple[Any, ...]], ...] = (
    ((), (None, [])),
    ((0,), (None, 0)),
    ((1,), (None, 0)),
    ((7,), (None, 0, -1, [], [0])),
    ((3, 4), (None, 0, 1, -1, [0, 1], (0, 1), [], [1], (-1, 0))),
    ((2, 0), (None, 0, 1)),
    ((2, 3, 4), (None, 0, 2, [0, 2], (1, 2), [], (0, 1, 2))),
    ((2, 1, 3, 2), (None, 1, 3, (1, 3), (0, 1, 2, 3), [0, 2])),
    ((3, 1, 1, 5), (None, -1, (1, 2))),
)


def _reduced_size(shape: tuple[int, ...], axes: Any) -> int:
    if axes is None:
        return int(np.prod(shape, dtype=np.int64))
    flat = [axes] if isinstance(axes, int) else list(axes)
    return int(np.prod([shape[a] for a in flat], dtype=np.int64))


def _clip_by_norm() -> Iterator[Case]:
    f = "clip_by_norm"
    for dt in FLOATS:
        s = SHORT[dt]
        # 1. shapes x axes x clip level: "mixed" puts clip_norm at the typical slice norm
        #    (sqrt of the slice size), so some slices are clipped and others are not
        for shape, axes_list in SHAPE_AXES:
            sl = _shape_label(shape)
            for axes in axes_list:
                mixed = math.sqrt(max(_reduced_size(shape, axes), 1))
                for level, c in (("mixed", rounded(mixed, dt)), ("inactive", 40.0)):
                    cid = f"{f}/{s}/axes={_axes_label(axes)}/{sl}/{level}"
                    x = A(gen(cid, shape), dt)
                    kw = () if axes is None else (("axes", axes),)
                    yield Case(cid, f, (x, c), kw, bulk=True)
        # clip_norm given as arrays (0-d, shape [1], per element, per row)
        x = A(gen(f"{f}/{s}/cn", (3, 4), scale=2.0), dt)
        for name, cn, kw in (
            ("0d", A(1.5, dt), ()),
            ("shape1", A([1.5], dt), ()),
            ("per_element", A(gen(f"{f}/{s}/cnpe", (3, 4), "uniform", lo=0.1, hi=3), dt), ()),
            ("per_row", A([[0.5], [2.0], [50.0]], dt), (("axes", 1),)),
            ("per_col", A([0.5, 1.0, 2.0, 50.0], dt), (("axes", 0),)),
            ("py_int", 2, ()),
            ("py_bool", True, ()),
            ("np_f64", NpScalar(1.5, "float64"), ()),
            ("np_f32", NpScalar(1.5, "float32"), ()),
            ("list", [1.0, 2.0, 3.0, 4.0], (("axes", 0),)),
        ):
            err = "TypeError" if name == "py_bool" and dt in BOOL_REFUSED else None
            yield Case(f"{f}/{s}/clip_norm/{name}", f, (x, cn), kw, error=err)

        # 2. boundary: clip_norm at n(1-eps), n, n(1+eps) for exactly known norms
        for i, (vec, n) in enumerate(EXACT):
            for k, scale in enumerate((1.0, 2.0**-6, 64.0) if i < 2 else (1.0,)):
                v = [e * scale for e in vec]
                nn = n * scale
                for tag, steps in (("below", -1), ("tie", 0), ("above", 1)):
                    c = nudge(nn, dt, steps)
                    cid = f"{f}/{s}/boundary/{tag}/{i}.{k}"
                    yield Case(cid, f, (A(v, dt), c))
                    if k == 0:
                        yield Case(cid + "/arr", f, (A(v, dt), A(c, dt)), grad=True)
        # rows with exact norms, per-row ties under axes=1 and axes=0
        rows = [[3.0, 4.0, 0.0], [5.0, 0.0, -12.0], [0.0, 0.0, 0.0], [-1.0, 2.0, 2.0]]
        for c in (3.0, 5.0, 13.0, nudge(5.0, dt, -1), nudge(5.0, dt, 1)):
            yield Case(
                f"{f}/{s}/boundary/rows/axes=1/c={c!r}",
                f,
                (A(rows, dt), c),
                (("axes", 1),),
                grad=c in (5.0, 13.0),
            )
            yield Case(f"{f}/{s}/boundary/rows/axes=0/c={c!r}", f, (A(rows, dt), c), (("axes", 0),))

        # 3. edge values
        big = 1e20 if dt == "float32" else (300.0 if dt == "float16" else 1e200)
        edges = {
            "zeros": ([0.0, 0.0, 0.0], 1.0),
            "signed_zeros": ([-0.0, 0.0], 1.0),
            "clip0": ([3.0, -4.0], 0.0),
            "clip_neg": ([3.0, 4.0], -1.0),
            "clip_neg_zero": ([3.0, 4.0], -0.0),
            "zeros_clip0": ([0.0, 0.0], 0.0),
            "zeros_clip_neg": ([0.0, 0.0], -1.0),
            "clip_inf": ([3.0, 4.0], INF),
            "zeros_clip_inf": ([0.0, 0.0], INF),
            "clip_nan": ([3.0, 4.0], NAN),
            "inf": ([INF, 1.0], 1.0),
            "neg_inf": ([-INF, 1.0], 1.0),
            "nan": ([NAN, 1.0], 1.0),
            "square_overflow": ([big, big], 1.0),
            "square_overflow_one": ([big, 0.0], 1.0),
            "tc_overflow": ([fmax(dt) / 4, 0.0], fmax(dt) / 2),
            "tc_overflow2": (
                [1e10 if dt != "float16" else 100.0, 0.0],
                1e30 if dt != "float16" else 1e3,
            ),
            "underflow": (
                [1e-30, 1e-30] if dt != "float16" else [1e-6, 1e-6],
                1e-31 if dt != "float16" else 1e-7,
            ),
            "subnormal": ([tiny(dt) / 8, -tiny(dt) / 2], 1.0),
            "huge_clip": ([3.0, 4.0], fmax(dt)),
            "clip_beyond_dtype": ([3.0, 4.0], 1e300),
            "tiny_clip": ([3.0, 4.0], tiny(dt)),
            "0d_neg": (-5.0, 2.0),
            "0d_pos": (1.0, 2.0),
            "0d_zero": (0.0, 2.0),
        }
        for name, (xs, c) in edges.items():
            yield Case(f"{f}/{s}/edge/{name}", f, (A(xs, dt), c))
            if "clip" in name or name in ("zeros", "square_overflow", "tc_overflow"):
                yield Case(f"{f}/{s}/edge/{name}/arr", f, (A(xs, dt), A(c, dt)))
        yield Case(f"{f}/{s}/edge/empty", f, (A(np.zeros((0,)), dt), 1.0))
        yield Case(f"{f}/{s}/edge/empty_axes1", f, (A(np.zeros((2, 0)), dt), 1.0), (("axes", 1),))
        yield Case(
            f"{f}/{s}/edge/elementwise", f, (A([[3.0, 4.0], [6.0, -8.0]], dt), 5.0), (("axes", []),)
        )
        # 4. large reductions
        for n in (100, 1000):
            cid = f"{f}/{s}/large/{n}"
            yield Case(cid, f, (A(gen(cid, (n,), scale=0.1), dt), 1.0))
            yield Case(
                cid + "/axes=0", f, (A(gen(cid, (n // 10, 10), scale=0.1), dt), 0.5), (("axes", 0),)
            )
        cid = f"{f}/{s}/large/lognormal"
        yield Case(cid, f, (A(gen(cid, (64,), "lognormal", lo=-3, hi=3), dt), 1.0))

        # 5. gradients
        g = {
            "active": (A([3.0, 4.0], dt), 1.0, ()),
            "inactive": (A([3.0, 4.0], dt), 10.0, ()),
            "tie": (A([3.0, 4.0], dt), 5.0, ()),
            "zeros": (A([0.0, 0.0], dt), 1.0, ()),
            "zeros_clip0": (A([0.0, 0.0], dt), 0.0, ()),
            "tensor_clip_active": (A([3.0, 4.0], dt), A(1.0, dt), ()),
            "tensor_clip_inactive": (A([3.0, 4.0], dt), A(10.0, dt), ()),
            "tensor_clip_tie": (A([3.0, 4.0], dt), A(5.0, dt), ()),
            "tensor_clip_neg": (A([3.0, 4.0], dt), A(-1.0, dt), ()),
            "rows_zero_row": (A([[3.0, 4.0], [0.0, 0.0]], dt), 1.0, (("axes", 1),)),
            "inf": (A([INF, 1.0], dt), 1.0, ()),
            "underflow": (A([1e-30, 1e-30] if dt != "float16" else [1e-7, 1e-7], dt), 1.0, ()),
            "random_active": (A(gen(f"{f}/g/{dt}", (3, 4)), dt), 1.0, ()),
            "random_axes0": (A(gen(f"{f}/g0/{dt}", (3, 4)), dt), 1.0, (("axes", 0),)),
            "random_4d": (
                A(gen(f"{f}/g4/{dt}", (2, 1, 3, 2)), dt),
                A(0.5, dt),
                (("axes", (1, 3)),),
            ),
            "per_element_clip": (A([3.0, 4.0], dt), A([1.0, 2.0], dt), ()),
            "0d": (A(-5.0, dt), A(2.0, dt), ()),
            "elementwise": (A([[3.0, -4.0], [6.0, 0.5]], dt), 2.0, (("axes", []),)),
        }
        for name, (x, c, kw) in g.items():
            yield Case(f"{f}/{s}/grad/{name}", f, (x, c), kw, grad=True)

    # 6. refusals and argument forms (float32)
    m = A([[3.0, 4.0], [6.0, 8.0]], "float32")
    for name, axes in (
        ("np_int64", NpScalar(1, "int64")),
        ("ndarray_i32", NpArr([1], "int32")),
        ("ndarray_i64", NpArr([1], "int64")),
        ("nested_list", [[1]]),
        ("neg_tuple", (-1, -2)),
        ("bool", True),
    ):
        yield Case(f"{f}/f32/axes_form/{name}", f, (m, 5.0), (("axes", axes),))
    for dt in (*INTS, "bool", *COMPLEX):
        val = [3 + 4j, 0] if dt in COMPLEX else ([True, False] if dt == "bool" else [3, 4])
        yield Case(f"{f}/{SHORT[dt]}/error/dtype", f, (A(val, dt), 1.0), error="TypeError")
    errs = {
        "py_int_list": ((Py([3, 4]), 1.0), (), "TypeError", None),
        "clip_none": ((m, None), (), "ValueError", None),
        "t_none": ((None, 1.0), (), "ValueError", None),
        "clip_str": ((m, "1"), (), "TypeError", None),
        "axes_dup": ((m, 5.0), (("axes", [1, 1]),), "ValueError", None),
        "axes_dup_neg": ((m, 5.0), (("axes", [1, -1]),), "ValueError", None),
        "axes_2": ((m, 5.0), (("axes", 2),), "ValueError", None),
        "axes_neg3": ((m, 5.0), (("axes", -3),), "ValueError", None),
        "axes_float": ((m, 5.0), (("axes", 1.0),), "TypeError", None),
        "axes_0d_input": ((A(2.0, "float32"), 5.0), (("axes", 0),), "ValueError", None),
        "clip_shape3": (
            (A([3.0, 4.0], "float32"), A([1.0, 2.0, 3.0], "float32")),
            (),
            "ValueError",
            None,
        ),
        "clip_enlarge": (
            (A([3.0, 4.0], "float32"), A([[1.0, 2.0]], "float32")),
            (),
            "ValueError",
            None,
        ),
    }
    for name, (args, kw, err, pol) in errs.items():
        yield Case(f"{f}/f32/error/{name}", f, args, kw, error=err, policy=pol)
    # clip_norm arrays of another dtype: TF casts them (the one place it does)
    for cdt in ("float64", "float16", "int32"):
        yield Case(
            f"{f}/f32/clip_norm_dtype/{SHORT[cdt]}", f, (A([3.0, 4.0], "float32"), A(1, cdt))
        )
    yield Case(f"{f}/f32/py/float_list", f, (Py([3.0, 4.0]), 1.0))


# ---------------------------------------------------------------- global_norm / clip_by_global
LIST_SHAPES = (
    ((4,),),
    ((3,), (2, 2)),
    ((), (5,), (2, 3)),
    ((2, 3, 4), (1,), (0,), (3, 1)),
    ((0,),),
    ((2, 1, 3, 2), (6,)),
    ((), ()),
)


def _tlist(cid: str, dt: str, shapes: tuple[tuple[int, ...], ...], scale: float = 1.0) -> Seq:
    return Seq(tuple(A(gen(cid, sh, scale=scale, salt=str(i)), dt) for i, sh in enumerate(shapes)))


def _global_norm() -> Iterator[Case]:
    f = "global_norm"
    a, b = [3.0, 4.0], [[12.0]]
    for dt in FLOATS:
        s = SHORT[dt]
        for i, shapes in enumerate(LIST_SHAPES):
            for scale in (1.0, 0.01, 30.0):
                cid = f"{f}/{s}/random/{i}/scale={scale}"
                yield Case(cid, f, (_tlist(cid, dt, shapes, scale),), bulk=True)
        lists = {
            "pair": Seq((A(a, dt), A(b, dt))),
            "tuple": Seq((A(a, dt), A(b, dt)), "tuple"),
            "with_none": Seq((A(a, dt), None, A(b, dt))),
            "single": Seq((A(a, dt),)),
            "0d": Seq((A(-2.0, dt),)),
            "empty_array": Seq((A(np.zeros((0,)), dt),)),
            "zeros": Seq((A([0.0, 0.0], dt), A([[0.0]], dt))),
            "inf": Seq((A([INF, 1.0], dt),)),
            "nan": Seq((A([NAN, 1.0], dt),)),
            "inf_nan": Seq((A([INF], dt), A([NAN], dt))),
            "neg_zero": Seq((A([-0.0], dt),)),
            "f16_overflow_300": Seq((A([300.0], dt),)),
            "f16_200": Seq((A([200.0], dt),)),
            "f16_250": Seq((A([250.0], dt),)),
            "f32_overflow": Seq((A([1e20], dt),)),
            "f32_2e19": Seq((A([2e19], dt),)),
            "f32_1.5e19": Seq((A([1.5e19], dt),)),
            "underflow": Seq((A([1e-30, 1e-30], dt),)),
            "many": Seq(tuple(A(gen(f"{f}/{s}/many", (3,), salt=str(k)), dt) for k in range(12))),
            "large": Seq(
                (
                    A(gen(f"{f}/{s}/large", (1000,), scale=0.05), dt),
                    A(gen(f"{f}/{s}/large", (10, 30), scale=0.05, salt="b"), dt),
                )
            ),
        }
        for name, tl in lists.items():
            yield Case(f"{f}/{s}/{name}", f, (tl,))
        for name, tl in (
            ("pair", Seq((A(a, dt), A(b, dt)))),
            ("zeros", Seq((A([0.0, 0.0], dt),))),
            ("with_none", Seq((A(a, dt), None, A(b, dt)))),
            ("random", _tlist(f"{f}/{s}/grad", dt, ((3,), (2, 2)))),
            ("partial_zero", Seq((A([0.0, 0.0], dt), A([1.0, -2.0], dt)))),
            ("0d", Seq((A(-2.0, dt), A([1.0], dt)))),
            ("inf", Seq((A([INF, 1.0], dt),))),
        ):
            yield Case(f"{f}/{s}/grad/{name}", f, (tl,), grad=True)
    yield Case(f"{f}/empty_list", f, (Seq(()),))
    yield Case(f"{f}/none_only", f, (Seq((None,)),))
    yield Case(f"{f}/empty_tuple", f, (Seq((), "tuple"),))
    yield Case(f"{f}/py_lists", f, (Seq((Py([3.0, 4.0]), Py([12.0]))),))
    errs = {
        "single_array": ((A([3.0, 4.0], "float32"),), "TypeError"),
        "generator": ((Seq((A([3.0, 4.0], "float32"),), "generator"),), "TypeError"),
        "dict": ((Seq((A([3.0, 4.0], "float32"),), "dict"),), "TypeError"),
        "str": (("abc",), "TypeError"),
        "none": ((None,), "TypeError"),
        "int_list": ((Seq((A([3, 4], "int32"),)),), "TypeError"),
        "py_int_list": ((Seq((Py([3, 4]),)),), "TypeError"),
        "complex": ((Seq((A([3 + 4j], "complex64"),)),), "TypeError"),
        "mixed_f32_f64": ((Seq((A([3.0], "float32"), A([4.0], "float64"))),), "TypeError"),
        "mixed_f32_f16": ((Seq((A([3.0], "float32"), A([4.0], "float16"))),), "TypeError"),
        "mixed_bf16_f32": ((Seq((A([3.0], "bfloat16"), A([4.0], "float32"))),), "TypeError"),
    }
    for name, (args, err) in errs.items():
        yield Case(f"{f}/error/{name}", f, args, error=err)


def _clip_by_global_norm() -> Iterator[Case]:
    f = "clip_by_global_norm"
    a, b = [3.0, 4.0], [[12.0]]
    for dt in FLOATS:
        s = SHORT[dt]
        for i, shapes in enumerate(LIST_SHAPES):
            for level, c in (("active", 0.5), ("inactive", 50.0), ("mid", 2.0)):
                cid = f"{f}/{s}/random/{i}/{level}"
                yield Case(cid, f, (_tlist(cid, dt, shapes), c), bulk=True)
        ab = Seq((A(a, dt), A(b, dt)))
        calls = {
            "active": ((ab, 6.5), ()),
            "tuple": ((Seq((A(a, dt), A(b, dt)), "tuple"), 6.5), ()),
            "with_none": ((Seq((A(a, dt), None, A(b, dt))), 6.5), ()),
            "inactive": ((ab, 100.0), ()),
            "tie": ((ab, 13.0), ()),
            "tie_below": ((ab, nudge(13.0, dt, -1)), ()),
            "tie_above": ((ab, nudge(13.0, dt, 1)), ()),
            "rounding_41": ((Seq((A([1.0, 2.0], dt),)), 41.0), ()),
            "rounding_47": ((Seq((A([1.0, 2.0], dt),)), 47.0), ()),
            "clip0": ((ab, 0.0), ()),
            "zeros_clip0": ((Seq((A([0.0, 0.0], dt),)), 0.0), ()),
            "zeros_clip1": ((Seq((A([0.0, 0.0], dt),)), 1.0), ()),
            "clip_neg": ((ab, -1.0), ()),
            "clip_neg_6.5": ((ab, -6.5), ()),
            "clip_nan": ((ab, NAN), ()),
            "clip_inf": ((ab, INF), ()),
            "clip_int": ((ab, 1), ()),
            "clip_bool": ((ab, True), ()),
            "clip_np_f64": ((ab, NpScalar(6.5, "float64")), ()),
            "clip_array": ((ab, A(6.5, dt)), ()),
            "clip_huge": ((ab, fmax(dt)), ()),
            "clip_tiny": ((ab, tiny(dt)), ()),
            "use_norm": ((ab, 6.5), (("use_norm", A(26.0, dt)),)),
            "use_norm_0": ((ab, 6.5), (("use_norm", A(0.0, dt)),)),
            "use_norm_neg": ((ab, 6.5), (("use_norm", A(-13.0, dt)),)),
            "use_norm_inf": ((ab, 6.5), (("use_norm", A(INF, dt)),)),
            "use_norm_nan": ((ab, 6.5), (("use_norm", A(NAN, dt)),)),
            "use_norm_none": ((ab, 6.5), (("use_norm", None),)),
            "inf_entry": ((Seq((A([INF, 1.0], dt), A([2.0], dt))), 1.0), ()),
            "nan_entry": ((Seq((A([NAN, 1.0], dt), A([2.0], dt))), 1.0), ()),
            "overflow": ((Seq((A([1e20, 1.0], dt),)), 1.0), ()),
            "f16_overflow": ((Seq((A([300.0, 1.0], dt),)), 1.0), ()),
            "empty_array": ((Seq((A(np.zeros((0, 2)), dt), A([3.0, 4.0], dt))), 1.0), ()),
            "scale_f16": ((Seq((A([3.0, 4.0], dt),)), 1.0), ()),
        }
        for name, (args, kw) in calls.items():
            err = "TypeError" if name == "clip_bool" and dt in BOOL_REFUSED else None
            yield Case(f"{f}/{s}/{name}", f, args, kw, error=err)
        for name, (args, kw) in {
            "active": ((ab, 6.5), ()),
            "inactive": ((ab, 100.0), ()),
            "tie": ((ab, 13.0), ()),
            "zeros": ((Seq((A([0.0, 0.0], dt),)), 1.0), ()),
            "inf": ((Seq((A([INF, 1.0], dt),)), 1.0), ()),
            "clip_tensor_active": ((Seq((A(a, dt),)), A(1.0, dt)), ()),
            "clip_tensor_inactive": ((Seq((A(a, dt),)), A(10.0, dt)), ()),
            "clip_tensor_tie": ((Seq((A(a, dt),)), A(5.0, dt)), ()),
            "use_norm": ((ab, 6.5), (("use_norm", A(26.0, dt)),)),
            "use_norm_small": ((ab, 6.5), (("use_norm", A(2.0, dt)),)),
            "with_none": ((Seq((A(a, dt), None, A(b, dt))), 6.5), ()),
            "random": ((_tlist(f"{f}/{s}/g", dt, ((3,), (2, 2))), 1.0), ()),
        }.items():
            yield Case(f"{f}/{s}/grad/{name}", f, args, kw, grad=True, grad_outputs=("0",))
        yield Case(f"{f}/{s}/grad/with_norm_output", f, (ab, 6.5), grad=True)
    yield Case(f"{f}/empty_list", f, (Seq(()), 1.0))
    yield Case(f"{f}/none_only", f, (Seq((None,)), 1.0))
    yield Case(f"{f}/py_lists", f, (Seq((Py([3.0, 4.0]), Py([12.0]))), 6.5))
    yield Case(
        f"{f}/f64_list_f32_use_norm",
        f,
        (Seq((A([3.0, 4.0], "float64"),)), 1.0),
        (("use_norm", A(5.0, "float32")),),
    )
    yield Case(
        f"{f}/f32_list_f64_use_norm",
        f,
        (Seq((A([3.0, 4.0], "float32"),)), 6.5),
        (("use_norm", A(26.0, "float64")),),
    )
    yield Case(
        f"{f}/i32_list_use_norm",
        f,
        (Seq((A([3, 4], "int32"),)), 1.0),
        (("use_norm", A(5.0, "float32")),),
    )
    yield Case(
        f"{f}/f32/clip_shape2",
        f,
        (Seq((A([3.0, 4.0], "float32"), A([[12.0]], "float32"))), A([6.5, 1.0], "float32")),
    )
    ab32 = Seq((A(a, "float32"), A(b, "float32")))
    errs = {
        "single_array": ((A([3.0, 4.0], "float32"), 1.0), (), "TypeError"),
        "generator": ((Seq((A([3.0, 4.0], "float32"),), "generator"), 1.0), (), "TypeError"),
        "dict": ((Seq((A([3.0, 4.0], "float32"),), "dict"), 1.0), (), "TypeError"),
        "use_norm_py_float": ((ab32, 6.5), (("use_norm", 26.0),), "TypeError"),
        "clip_f64_array": ((ab32, A(6.5, "float64")), (), "TypeError"),
        "clip_f16_array": ((ab32, A(6.5, "float16")), (), "TypeError"),
        "clip_i32_array": ((ab32, A(6, "int32")), (), "TypeError"),
        "clip_none": ((ab32, None), (), "ValueError"),
        "mixed_dtypes": ((Seq((A([3.0], "float32"), A([4.0], "float64"))), 1.0), (), "TypeError"),
        "int_list": ((Seq((A([3, 4], "int32"),)), 1.0), (), "TypeError"),
    }
    for name, (args, kw, err) in errs.items():
        yield Case(f"{f}/error/{name}", f, args, kw, error=err)


# ----------------------------------------------------------------------- clip_by_average_norm
def _clip_by_average_norm() -> Iterator[Case]:
    f = "clip_by_average_norm"
    dt = "float32"
    for shape in SHAPES:
        sl = _shape_label(shape)
        for level, c in (("active", 0.05), ("inactive", 10.0), ("mid", 0.5)):
            cid = f"{f}/f32/{sl}/{level}"
            yield Case(cid, f, (A(gen(cid, shape), dt), c), bulk=True)
            yield Case(cid + "/arr", f, (A(gen(cid, shape), dt), A(c, dt)), bulk=True)
    edges = {
        "active": ([3.0, 4.0], 1.0),
        "tie": ([3.0, 4.0], 2.5),
        "tie_below": ([3.0, 4.0], nudge(2.5, dt, -1)),
        "tie_above": ([3.0, 4.0], nudge(2.5, dt, 1)),
        "inactive": ([3.0, 4.0], 3.0),
        "matrix": ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], 0.5),
        "0d": (-4.0, 2.0),
        "zeros": ([0.0, 0.0], 1.0),
        "clip0": ([3.0, 4.0], 0.0),
        "zeros_clip0": ([0.0, 0.0], 0.0),
        "clip_neg": ([3.0, 4.0], -1.0),
        "clip_neg10": ([3.0, 4.0], -10.0),
        "clip_inf": ([3.0, 4.0], INF),
        "clip_nan": ([3.0, 4.0], NAN),
        "inf": ([INF, 1.0], 1.0),
        "nan": ([NAN, 1.0], 1.0),
        "overflow": ([1e20, 1e20], 1.0),
        "underflow": ([1e-30, 1e-30], 1e-31),
        "huge_clip": ([3.0, 4.0], 3e38),
        "tiny_clip": ([3.0, 4.0], 1e-38),
        "signed_zeros": ([-0.0, 0.0], 1.0),
    }
    for name, (xs, c) in edges.items():
        yield Case(f"{f}/f32/edge/{name}", f, (A(xs, dt), c))
        yield Case(f"{f}/f32/edge/{name}/arr", f, (A(xs, dt), A(c, dt)))
    yield Case(f"{f}/f32/edge/empty", f, (A(np.zeros((0,)), dt), 1.0))
    yield Case(f"{f}/f32/edge/py_int_clip", f, (A([3.0, 4.0], dt), 1))
    yield Case(f"{f}/f32/edge/clip_shape2", f, (A([3.0, 4.0], dt), A([1.0, 10.0], dt)))
    yield Case(f"{f}/f32/edge/py_float_list", f, (Py([3.0, 4.0]), 1.0))
    for n in (100, 1000):
        cid = f"{f}/f32/large/{n}"
        yield Case(cid, f, (A(gen(cid, (n,)), dt), 0.1))
    for name, (xs, c) in {
        "active": ([3.0, 4.0], 1.0),
        "inactive": ([3.0, 4.0], 10.0),
        "tie": ([3.0, 4.0], 2.5),
        "zeros": ([0.0, 0.0], 1.0),
        "tensor_clip_active": ([3.0, 4.0], A(1.0, dt)),
        "tensor_clip_inactive": ([3.0, 4.0], A(10.0, dt)),
        "tensor_clip_tie": ([3.0, 4.0], A(2.5, dt)),
        "matrix": ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], A(0.5, dt)),
        "random": (gen(f"{f}/g", (3, 4)), 0.2),
        "0d": (-4.0, A(2.0, dt)),
    }.items():
        yield Case(f"{f}/f32/grad/{name}", f, (A(xs, dt), c), grad=True)
    for dt2 in ("float16", "bfloat16", "float64", "int32", "complex64"):
        val = [3 + 4j, 0] if dt2 == "complex64" else [3, 4]
        yield Case(f"{f}/{SHORT[dt2]}/error/dtype", f, (A(val, dt2), 1.0), error="TypeError")
    yield Case(
        f"{f}/f32/error/clip_f64_array",
        f,
        (A([3.0, 4.0], dt), A(1.0, "float64")),
        error="TypeError",
    )
    yield Case(f"{f}/f32/error/clip_none", f, (A([3.0, 4.0], dt), None), error="ValueError")
    yield Case(
        f"{f}/f32/error/clip_enlarge",
        f,
        (A([3.0, 4.0], dt), A([[1.0, 1.0]], dt)),
        error="ValueError",
        policy="TF has no shape check here and enlarges t to [1, 2]; anyclip never "
        "lets an argument enlarge t",
    )
    yield Case(f"{f}/f32/error/py_int_list", f, (Py([3, 4]), 1.0), error="TypeError")


# ------------------------------------------------------------------------------------- norm
VECTOR_ORDS = ("euclidean", 2, 1, INF, 0.5, 3, 2.5)
MATRIX_ORDS = ("euclidean", "fro", 1, 2, INF)


def _ord_label(o: Any) -> str:
    if o == INF:
        return "inf"
    return str(o)


def _norm() -> Iterator[Case]:
    f = "norm"
    shapes_axes = (
        ((), (None,)),
        ((0,), (None, 0)),
        ((7,), (None, 0, -1)),
        ((3, 4), (None, 0, 1, -1)),
        ((2, 3, 4), (None, 0, 2, -2)),
        ((2, 1, 3, 2), (None, 3, 1)),
        ((0, 3), (None, 0, 1)),
    )
    for dt in FLOATS:
        s = SHORT[dt]
        # 1. vector norms
        for shape, axes in shapes_axes:
            sl = _shape_label(shape)
            for axis in axes:
                # every ord on the 1-d and 2-d shapes; the main ones elsewhere
                full = shape in ((7,), (3, 4)) and axis in (None, 0, 1)
                for o in VECTOR_ORDS if full else ("euclidean", 1, INF):
                    for keep in (False, True):
                        if keep and (o not in ("euclidean", INF) or len(shape) < 2):
                            continue
                        cid = f"{f}/{s}/ord={_ord_label(o)}/axis={_axes_label(axis)}/{sl}"
                        cid += "/keepdims" if keep else ""
                        kw: list[tuple[str, Any]] = []
                        if o != "euclidean":
                            kw.append(("ord", o))
                        if axis is not None:
                            kw.append(("axis", axis))
                        if keep:
                            kw.append(("keepdims", True))
                        yield Case(
                            cid, f, (A(gen(cid, shape, scale=2.0), dt),), tuple(kw), bulk=True
                        )
        # 2. matrix norms. The last two shapes name one axis twice (issue 14): TF's Python check
        # refuses only equal ints; ord 1 and inf reduce over the axis twice (a value), the
        # others fail in TF's kernels.
        for shape, axis_list in (
            ((3, 4), ((0, 1), (1, 0), (-2, -1), [0, 1])),
            ((2, 3, 4), ((0, 2), (-1, 1))),
            ((2, 1, 3, 2), ((3, 0),)),
            ((0, 3), ((0, 1),)),
            ((2, 2), ((0, 1),)),
            ((5,), ((0, -1), (-1, 0))),
            ((3, 4), ((0, -2), (1, -1))),
        ):
            sl = _shape_label(shape)
            for axis in axis_list:
                twice = axis[0] % len(shape) == axis[1] % len(shape)
                for o in MATRIX_ORDS:
                    for keep in (False, True):
                        kept = (1, INF) if twice else (2, 1)
                        if keep and (o not in kept or (axis not in ((0, 1), (0, 2)) and not twice)):
                            continue
                        cid = f"{f}/{s}/matrix/ord={_ord_label(o)}/axis={_axes_label(axis)}/{sl}"
                        cid += "/keepdims" if keep else ""
                        kw = [("ord", o), ("axis", axis)]
                        if keep:
                            kw.append(("keepdims", True))
                        err = "TypeError" if o == 2 and dt in NO_SVD else None
                        if twice and o not in (1, INF):
                            err = "ValueError"
                        yield Case(
                            cid,
                            f,
                            (A(gen(cid, shape, scale=2.0), dt),),
                            tuple(kw),
                            error=err,
                            bulk=not twice,
                        )
        # 3. edge values
        edges = {
            "empty": (np.zeros((0,)), ("euclidean", 1, INF, 3)),
            "nan_first": ([NAN, 1.0], ("euclidean", 1, INF, 3)),
            "nan_last": ([1.0, NAN], ("euclidean", 1, INF, 0.5)),
            "nan_inf": ([NAN, INF], ("euclidean", INF)),
            "inf": ([INF, 1.0], ("euclidean", 1, INF, 3)),
            "neg_inf": ([-INF, 1.0], ("euclidean", 3, INF)),
            "neg_zero": ([-0.0], ("euclidean", 1, INF, 3)),
            "zeros": ([0.0, 0.0], ("euclidean", 1, INF, 3, 0.5)),
            "square_overflow": ([300.0 if dt == "float16" else 1e20, 0.0], ("euclidean", 1, INF)),
            "big_pair": ([1e20, 1e20], ("euclidean", 1, INF)),
            "pow_overflow": ([10.0, 1.0], (100.0,)),
            "underflow": ([1e-30, 1e-30], ("euclidean", 1, 3)),
            "subnormal": ([tiny(dt) / 8, tiny(dt)], ("euclidean", 1, INF)),
            "exact": ([3.0, -4.0, 0.0, 12.0], VECTOR_ORDS),
            "0d_neg": (-3.0, ("euclidean", 1, INF, 3)),
        }
        for name, (xs, ords) in edges.items():
            for o in ords:
                kw = () if o == "euclidean" else (("ord", o),)
                yield Case(f"{f}/{s}/edge/{name}/ord={_ord_label(o)}", f, (A(xs, dt),), kw)
        yield Case(
            f"{f}/{s}/edge/empty_0x3/ord=inf/axis=0",
            f,
            (A(np.zeros((0, 3)), dt),),
            (("ord", INF), ("axis", 0)),
        )
        yield Case(
            f"{f}/{s}/edge/empty_0x3/matrix_ord=2",
            f,
            (A(np.zeros((0, 3)), dt),),
            (("ord", 2), ("axis", (0, 1))),
            error="TypeError" if dt in NO_SVD else None,
        )
        yield Case(
            f"{f}/{s}/edge/empty_0x3/matrix_ord=1",
            f,
            (A(np.zeros((0, 3)), dt),),
            (("ord", 1), ("axis", (0, 1))),
        )
        if dt not in NO_SVD:
            for name, xs in (
                ("nan", [[0.0, 1.0], [NAN, 2.0]]),
                ("inf", [[INF, 1.0], [0.0, 2.0]]),
                ("zeros", [[0.0, 0.0], [0.0, 0.0]]),
                ("nan_3x5", [[0.0] * 5, [0.0] * 5, [0.0] * 4 + [NAN]]),
            ):
                yield Case(
                    f"{f}/{s}/edge/matrix2_{name}", f, (A(xs, dt),), (("ord", 2), ("axis", (0, 1)))
                )
        yield Case(
            f"{f}/{s}/edge/shape113/axis=2", f, (A(gen(f"{s}113", (1, 1, 3)), dt),), (("axis", 2),)
        )
        for o in (1, 2, INF):
            yield Case(
                f"{f}/{s}/edge/flatten_2d/ord={_ord_label(o)}",
                f,
                (A([[1.0, -2.0], [3.0, 4.0]], dt),),
                (("ord", o),),
            )
            err = "TypeError" if o == 2 and dt in NO_SVD else None
            yield Case(
                f"{f}/{s}/edge/matrix_2d/ord={_ord_label(o)}",
                f,
                (A([[1.0, -2.0], [3.0, 4.0]], dt),),
                (("ord", o), ("axis", (0, 1))),
                error=err,
            )
            yield Case(
                f"{f}/{s}/edge/matrix_2d_T/ord={_ord_label(o)}",
                f,
                (A([[1.0, -2.0], [3.0, 4.0]], dt),),
                (("ord", o), ("axis", (1, 0))),
                error=err,
            )
        for n in (100, 1000):
            cid = f"{f}/{s}/large/{n}"
            for o in ("euclidean", 1, INF, 3):
                yield Case(
                    cid + f"/ord={_ord_label(o)}",
                    f,
                    (A(gen(cid, (n,), scale=0.1), dt),),
                    () if o == "euclidean" else (("ord", o),),
                )
        # 4. gradients
        g = {
            "euclidean": ([3.0, 4.0], ()),
            "euclidean_zeros": ([0.0, 0.0], ()),
            "euclidean_axis0_keep": ([[0.0, 1.0], [0.0, 2.0]], (("axis", 0), ("keepdims", True))),
            "fro_zeros": ([[0.0, 0.0], [0.0, 0.0]], (("ord", "fro"), ("axis", (0, 1)))),
            "ord1": ([0.0, -2.0, 3.0], (("ord", 1),)),
            "ord_inf_tie": ([3.0, -3.0, 1.0], (("ord", INF),)),
            "ord_inf": ([3.0, -5.0, 1.0], (("ord", INF),)),
            "ord3_zeros": ([0.0, 0.0], (("ord", 3),)),
            "ord3": ([1.0, 0.0], (("ord", 3),)),
            "ord3_random": (gen(f"{f}/g3/{dt}", (5,)), (("ord", 3),)),
            "ord0.5": ([1.0, 0.0], (("ord", 0.5),)),
            "ord2.5": ([1.0, -2.0, 0.5], (("ord", 2.5),)),
            "matrix1": ([[1.0, -2.0], [3.0, 4.0]], (("ord", 1), ("axis", (0, 1)))),
            "matrix_inf": ([[1.0, -2.0], [3.0, 4.0]], (("ord", INF), ("axis", (0, 1)))),
            "matrix2_diag": ([[2.0, 0.0], [0.0, 1.0]], (("ord", 2), ("axis", (0, 1)))),
            "matrix2": ([[1.0, -2.0], [3.0, 4.0]], (("ord", 2), ("axis", (0, 1)))),
            "matrix2_zeros": ([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], (("ord", 2), ("axis", (0, 1)))),
            "matrix2_zero_1x1": ([[0.0]], (("ord", 2), ("axis", (0, 1)))),
            "matrix2_tie": ([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], (("ord", 2), ("axis", (0, 1)))),
            "matrix2_inf": ([[INF, 1.0], [1.0, 1.0]], (("ord", 2), ("axis", (0, 1)))),
            "matrix2_nan": ([[NAN, 1.0], [1.0, 1.0]], (("ord", 2), ("axis", (0, 1)))),
            "matrix2_batch": (
                [[[0.0, 0.0], [0.0, 0.0]], [[3.0, 0.0], [0.0, 3.0]], [[-INF, 0.0], [0.0, 0.0]]],
                (("ord", 2), ("axis", (1, 2))),
            ),
            "matrix_fro": ([[1.0, -2.0], [3.0, 4.0]], (("ord", "fro"), ("axis", (0, 1)))),
            "random_axis1": (gen(f"{f}/g/{dt}", (3, 4)), (("axis", 1),)),
            "random_3d_matrix1": (gen(f"{f}/g3d/{dt}", (2, 3, 4)), (("ord", 1), ("axis", (0, 2)))),
            "inf": ([INF, 1.0], ()),
        }
        for name, (xs, kw) in g.items():
            if name.startswith("matrix2") and dt in NO_SVD:
                yield Case(f"{f}/{s}/error/{name}", f, (A(xs, dt),), kw, error="TypeError")
                continue
            yield Case(f"{f}/{s}/grad/{name}", f, (A(xs, dt),), kw, grad=True)
    # integer and complex dtypes
    for dt in INTS:
        s = SHORT[dt]
        cid = f"{f}/{s}"
        x = A(gen(cid, (3, 4), "int", lo=0 if dt.startswith("u") else -9, hi=9), dt)
        # TF's abs has no unsigned kernels: ord 1 / inf refuse unsigned integers
        err = "TypeError" if dt.startswith("uint") else None
        for o in (1, INF):
            yield Case(f"{cid}/ord={_ord_label(o)}", f, (x,), (("ord", o),), error=err)
            yield Case(
                f"{cid}/ord={_ord_label(o)}/axis=1", f, (x,), (("ord", o), ("axis", 1)), error=err
            )
            yield Case(
                f"{cid}/matrix/ord={_ord_label(o)}",
                f,
                (x,),
                (("ord", o), ("axis", (0, 1))),
                error=err,
            )
        yield Case(f"{cid}/error/euclidean", f, (x,), error="TypeError")
        yield Case(f"{cid}/error/ord3", f, (x,), (("ord", 3),), error="TypeError")
    for dt in COMPLEX:
        s = SHORT[dt]
        for shape in ((5,), (3, 4)):
            sl = _shape_label(shape)
            cid = f"{f}/{s}/{sl}"
            x = A(gen(cid, shape, "complex"), dt)
            for o in VECTOR_ORDS:
                yield Case(
                    f"{cid}/ord={_ord_label(o)}", f, (x,), () if o == "euclidean" else (("ord", o),)
                )
            if len(shape) == 2:
                for o in MATRIX_ORDS:
                    yield Case(
                        f"{cid}/matrix/ord={_ord_label(o)}", f, (x,), (("ord", o), ("axis", (0, 1)))
                    )
                yield Case(f"{cid}/axis=1", f, (x,), (("axis", 1),))
        yield Case(f"{f}/{s}/exact", f, (A([3 + 4j, 0], dt),))
        yield Case(
            f"{f}/{s}/matrix_small/fro",
            f,
            (A([[1 + 1j, 2], [0, 1j]], dt),),
            (("ord", "fro"), ("axis", (0, 1))),
        )
    # argument forms TF accepts
    v = A([3.0, -4.0, 0.0, 12.0], "float32")
    m = A([[1.0, -2.0], [3.0, 4.0]], "float32")
    for name, kw in {
        "ord_2.0": (("ord", 2.0),),
        "ord_1.0": (("ord", 1.0),),
        "ord_true": (("ord", True),),
        "ord_np_int64": (("ord", NpScalar(1, "int64")),),
        "ord_np_f32_2": (("ord", NpScalar(2, "float32")),),
        "ord_np_inf": (("ord", NpScalar(INF, "float64")),),
        "axis_true": (("axis", True),),
        "keepdims_1": (("keepdims", 1), ("axis", 0)),
        "keepdims_false": (("keepdims", False),),
        "keepdims_none": (("keepdims", None),),
    }.items():
        yield Case(f"{f}/f32/form/{name}", f, (v if "axis" not in name else m,), kw)
    yield Case(f"{f}/f32/form/matrix_axis_tuple_neg", f, (m,), (("axis", (-2, -1)),))
    yield Case(f"{f}/py/float_list", f, (Py([3.0, 4.0]),))
    yield Case(f"{f}/py/int_list_ord1", f, (Py([3, -4]),), (("ord", 1),))
    # refusals
    errs: dict[str, tuple[Any, tuple[tuple[str, Any], ...], str]] = {
        "ord_fro_vector": (v, (("ord", "fro"),), "ValueError"),
        "ord_nuc": (v, (("ord", "nuc"),), "ValueError"),
        "ord_0": (v, (("ord", 0),), "ValueError"),
        "ord_neg1": (v, (("ord", -1),), "ValueError"),
        "ord_neg2": (v, (("ord", -2),), "ValueError"),
        "ord_neg_inf": (v, (("ord", -INF),), "ValueError"),
        "ord_str_inf": (v, (("ord", "inf"),), "ValueError"),
        "ord_str_2": (v, (("ord", "2"),), "ValueError"),
        "ord_none": (v, (("ord", None),), "TypeError"),
        "ord_complex": (v, (("ord", 1 + 0j),), "TypeError"),
        "matrix_ord_neg1": (m, (("ord", -1), ("axis", (0, 1))), "ValueError"),
        "matrix_ord_neg2": (m, (("ord", -2), ("axis", (0, 1))), "ValueError"),
        "matrix_ord_nuc": (m, (("ord", "nuc"), ("axis", (0, 1))), "ValueError"),
        "matrix_ord_0.5": (m, (("ord", 0.5), ("axis", (0, 1))), "ValueError"),
        "matrix_ord_3": (m, (("ord", 3), ("axis", (0, 1))), "ValueError"),
        "matrix_ord_0": (m, (("ord", 0), ("axis", (0, 1))), "ValueError"),
        "matrix_ord_neg_inf": (m, (("ord", -INF), ("axis", (0, 1))), "ValueError"),
        "axis_2": (m, (("axis", 2),), "ValueError"),
        "axis_neg3": (m, (("axis", -3),), "ValueError"),
        "axis_0d": (A(-3.0, "float32"), (("axis", 0),), "ValueError"),
        "axis_np_int64": (m, (("axis", NpScalar(0, "int64")),), "ValueError"),
        "axis_list1": (m, (("axis", [0]),), "ValueError"),
        "axis_tuple1": (m, (("axis", (0,)),), "ValueError"),
        "axis_dup": (m, (("axis", (0, 0)),), "ValueError"),
        "axis_dup_neg": (m, (("axis", (0, -2)),), "ValueError"),
        "axis_3": (A(np.ones((2, 2, 2)), "float32"), (("axis", (0, 1, 2)),), "ValueError"),
        "axis_np_pair": (
            m,
            (("axis", (NpScalar(0, "int64"), NpScalar(1, "int64"))),),
            "ValueError",
        ),
        "axis_float": (m, (("axis", 1.0),), "ValueError"),
        "axis_matrix_out_of_range": (m, (("axis", (0, 2)),), "ValueError"),
        "keep_dims": (m, (("keep_dims", True),), "TypeError"),
        "bool": (A([True, False], "bool"), (), "TypeError"),
        "none": (None, (), "ValueError"),
        "f16_matrix2": (
            A([[1.0, 2.0], [3.0, 4.0]], "float16"),
            (("ord", 2), ("axis", (0, 1))),
            "TypeError",
        ),
        "bf16_matrix2": (
            A([[1.0, 2.0], [3.0, 4.0]], "bfloat16"),
            (("ord", 2), ("axis", (0, 1))),
            "TypeError",
        ),
    }
    for name, (x, kw, err) in errs.items():
        yield Case(f"{f}/error/{name}", f, (x,), kw, error=err)


# ------------------------------------------------------------------------- l2_normalize
def _l2_normalize() -> Iterator[Case]:
    f = "l2_normalize"
    for dt in FLOATS:
        s = SHORT[dt]
        for shape, axes_list in SHAPE_AXES:
            sl = _shape_label(shape)
            for axes in axes_list:
                cid = f"{f}/{s}/axis={_axes_label(axes)}/{sl}"
                kw = () if axes is None else (("axis", axes),)
                yield Case(cid, f, (A(gen(cid, shape, scale=3.0), dt),), kw, bulk=True)
        edges = {
            "exact": ([3.0, 4.0], ()),
            "zeros": ([0.0, 0.0], ()),
            "signed_zeros": ([-0.0, 0.0], ()),
            "below_floor": ([1e-7, 0.0], ()),
            "at_floor": ([1e-6, 0.0], ()),
            "eps0_zeros": ([0.0, 0.0], (("epsilon", 0.0),)),
            "eps_neg_zeros": ([0.0, 0.0], (("epsilon", -1.0),)),
            "eps_neg": ([3.0, 4.0], (("epsilon", -1.0),)),
            "eps100": ([3.0, 4.0], (("epsilon", 100.0),)),
            "eps_nan": ([3.0, 4.0], (("epsilon", NAN),)),
            "eps_inf": ([3.0, 4.0], (("epsilon", INF),)),
            "eps_int": ([0.5, 0.0], (("epsilon", 1),)),
            "eps_array": ([0.5, 0.0], (("epsilon", A(1.0, dt)),)),
            "eps_vec": ([0.0, 0.0], (("epsilon", A([1.0, 4.0], dt)),)),
            "eps_huge": ([3.0, 4.0], (("epsilon", 1e300),)),
            "nan": ([NAN, 1.0], ()),
            "inf": ([INF, 1.0], ()),
            "square_overflow": ([300.0 if dt == "float16" else 1e20, 0.0], ()),
            "big_pair": ([1e20, 1e20], ()),
            "subnormal": ([tiny(dt) / 8, 0.0], ()),
            "0d": (-3.0, ()),
            "empty": (np.zeros((0,)), ()),
            "empty_axis1": (np.zeros((2, 0)), (("axis", 1),)),
            "elementwise": ([[3.0, -4.0], [0.0, 1e-7]], (("axis", []),)),
            "dim1": ([[3.0, 4.0], [6.0, 8.0]], (("dim", 1),)),
            "dim0": ([[3.0, 4.0], [6.0, 8.0]], (("dim", 0),)),
            "axis_np_int64": ([[3.0, 4.0], [6.0, 8.0]], (("axis", NpScalar(1, "int64")),)),
            "rows_with_zero": ([[3.0, 4.0], [0.0, 0.0], [1e-7, 0.0]], (("axis", 1),)),
        }
        for name, (xs, kw) in edges.items():
            yield Case(f"{f}/{s}/edge/{name}", f, (A(xs, dt),), kw)
        for n in (100, 1000):
            cid = f"{f}/{s}/large/{n}"
            yield Case(cid, f, (A(gen(cid, (n,)), dt),))
            yield Case(
                cid + "/rows", f, (A(gen(cid, (n // 10, 10), salt="r"), dt),), (("axis", 1),)
            )
        g = {
            "exact": ([3.0, 4.0], ()),
            "zeros": ([0.0, 0.0], ()),
            "below_floor": ([1e-7, 0.0], ()),
            "above_floor": ([1e-5, 0.0], ()),
            "rows": ([[3.0, 4.0], [0.0, 0.0]], (("axis", 1),)),
            "random_axis0": (gen(f"{f}/g/{dt}", (3, 4)), (("axis", 0),)),
            "random_all": (gen(f"{f}/ga/{dt}", (2, 3)), ()),
            "eps_array": ([0.5, 0.0], (("epsilon", A(1.0, dt)),)),
            "eps_array_inactive": ([3.0, 4.0], (("epsilon", A(1.0, dt)),)),
            "elementwise": ([3.0, -4.0, 0.0], (("axis", []),)),
            "0d": (-3.0, ()),
        }
        for name, (xs, kw) in g.items():
            yield Case(f"{f}/{s}/grad/{name}", f, (A(xs, dt),), kw, grad=True)
    for dt in COMPLEX:
        s = SHORT[dt]
        for shape, axis in (((5,), None), ((3, 4), 1), ((3, 4), 0), ((2, 3, 2), (0, 2))):
            cid = f"{f}/{s}/{_shape_label(shape)}/axis={_axes_label(axis)}"
            kw = () if axis is None else (("axis", axis),)
            yield Case(cid, f, (A(gen(cid, shape, "complex"), dt),), kw)
        yield Case(f"{f}/{s}/exact", f, (A([3 + 4j, 0], dt),))
        yield Case(f"{f}/{s}/zeros", f, (A([0j, 0j], dt),))
        yield Case(f"{f}/{s}/one_plus_i", f, (A([1 + 1j], dt),))
    errs = {
        "int": ((A([3, 4], "int32"),), (), "TypeError"),
        "py_int_list": ((Py([3, 4]),), (), "TypeError"),
        "axis_and_dim": ((A([[3.0, 4.0]], "float32"),), (("axis", 1), ("dim", 1)), "ValueError"),
        "axis_dup": ((A([[3.0, 4.0]], "float32"),), (("axis", [1, 1]),), "ValueError"),
        "axis_2": ((A([[3.0, 4.0]], "float32"),), (("axis", 2),), "ValueError"),
        "eps_f64_array": (
            (A([3.0, 4.0], "float32"),),
            (("epsilon", A(1e-12, "float64")),),
            "TypeError",
        ),
        "eps_none": ((A([3.0, 4.0], "float32"),), (("epsilon", None),), "ValueError"),
        "none": ((None,), (), "ValueError"),
        "bool": ((A([True], "bool"),), (), "TypeError"),
    }
    for name, (args, kw, err) in errs.items():
        yield Case(f"{f}/error/{name}", f, args, kw, error=err)
    yield Case(f"{f}/py/float_list", f, (Py([3.0, 4.0]),))


# ---------------------------------------------------------------------------- normalize
def _normalize() -> Iterator[Case]:
    f = "normalize"
    for dt in FLOATS:
        s = SHORT[dt]
        for shape, axes in (
            ((7,), (None, 0)),
            ((3, 4), (None, 0, -1, (0, 1))),
            ((2, 3, 4), (None, 1, (2, 0))),
            ((), (None,)),
            ((0,), (None,)),
        ):
            sl = _shape_label(shape)
            for axis in axes:
                ords = MATRIX_ORDS if isinstance(axis, tuple) else VECTOR_ORDS
                if len(shape) != 2 and not isinstance(axis, tuple):
                    ords = ("euclidean", 1, INF, 3)
                for o in ords:
                    err = (
                        "TypeError" if o == 2 and isinstance(axis, tuple) and dt in NO_SVD else None
                    )
                    cid = f"{f}/{s}/ord={_ord_label(o)}/axis={_axes_label(axis)}/{sl}"
                    kw: list[tuple[str, Any]] = []
                    if o != "euclidean":
                        kw.append(("ord", o))
                    if axis is not None:
                        kw.append(("axis", axis))
                    yield Case(
                        cid,
                        f,
                        (A(gen(cid, shape, scale=2.0), dt),),
                        tuple(kw),
                        error=err,
                        bulk=True,
                    )
        edges = {
            "exact": ([3.0, 4.0], ()),
            "zeros": ([0.0, 0.0], ()),
            "zeros_ord1": ([0.0, 0.0], (("ord", 1),)),
            "nan": ([NAN, 1.0], ()),
            "inf": ([INF, 1.0], ()),
            "inf_ord_inf": ([INF, 1.0], (("ord", INF),)),
            "square_overflow": ([300.0 if dt == "float16" else 1e20, 0.0], ()),
            "subnormal": ([tiny(dt) / 8, 0.0], ()),
            "empty_0x3_inf": (np.zeros((0, 3)), (("ord", INF), ("axis", 0))),
            "m_ord1_axis1": ([[3.0, 4.0], [6.0, 8.0]], (("ord", 1), ("axis", 1))),
            "m_inf_axis0": ([[3.0, 4.0], [6.0, 8.0]], (("ord", INF), ("axis", 0))),
            "m_matrix2": ([[3.0, 4.0], [6.0, 8.0]], (("ord", 2), ("axis", (0, 1)))),
            "m_fro_list": ([[3.0, 4.0], [6.0, 8.0]], (("ord", "fro"), ("axis", [0, 1]))),
            "m_ord1_axis_twice": ([[3.0, -4.0], [6.0, 8.0]], (("ord", 1), ("axis", (0, -2)))),
            "v_inf_axis_twice": ([3.0, -4.0, 1.0], (("ord", INF), ("axis", (-1, 0)))),
        }
        for name, (xs, kw) in edges.items():
            err = "TypeError" if name == "m_matrix2" and dt in NO_SVD else None
            yield Case(f"{f}/{s}/edge/{name}", f, (A(xs, dt),), kw, error=err)
        g = {
            "exact": ([3.0, 4.0], (), None),
            "exact_norm_out": ([3.0, 4.0], (), ("1",)),
            "exact_both": ([3.0, 4.0], (), ("0", "1")),
            "ord1": ([3.0, -4.0, 1.0], (("ord", 1),), None),
            "ord_inf": ([3.0, -4.0, 1.0], (("ord", INF),), None),
            "ord3": ([3.0, -4.0, 1.0], (("ord", 3),), None),
            "random_axis1": (gen(f"{f}/g/{dt}", (3, 4)), (("axis", 1),), None),
            "matrix_fro": ([[1.0, -2.0], [3.0, 4.0]], (("ord", "fro"), ("axis", (0, 1))), None),
            "matrix1": ([[1.0, -2.0], [3.0, 4.0]], (("ord", 1), ("axis", (0, 1))), None),
        }
        for name, (xs, kw, outs) in g.items():
            yield Case(
                f"{f}/{s}/grad/{name}", f, (A(xs, dt),), kw, grad=True, grad_outputs=outs or ("0",)
            )
    for dt in ("int32", "int64", "int8", "uint8"):
        s = SHORT[dt]
        err = "TypeError" if dt.startswith("uint") else None
        yield Case(f"{f}/{s}/ord=1", f, (A([3, 4], dt),), (("ord", 1),), error=err)
        yield Case(
            f"{f}/{s}/ord=inf/axis=1",
            f,
            (A([[3, 4], [1, 0]], dt),),
            (("ord", INF), ("axis", 1)),
            error=err,
        )
        yield Case(f"{f}/{s}/zeros_ord1", f, (A([0, 0], dt),), (("ord", 1),), error=err)
        yield Case(f"{f}/{s}/error/euclidean", f, (A([3, 4], dt),), error="TypeError")
    for dt in COMPLEX:
        s = SHORT[dt]
        yield Case(f"{f}/{s}/exact", f, (A([3 + 4j, 0], dt),))
        yield Case(f"{f}/{s}/exact_ord1", f, (A([3 + 4j, 0], dt),), (("ord", 1),))
        yield Case(
            f"{f}/{s}/random_axis1",
            f,
            (A(gen(f"{f}/{s}/r", (3, 4), "complex"), dt),),
            (("axis", 1),),
        )
        yield Case(
            f"{f}/{s}/random_ord_inf",
            f,
            (A(gen(f"{f}/{s}/r", (3, 4), "complex"), dt),),
            (("ord", INF),),
        )
    m = A([[3.0, 4.0], [6.0, 8.0]], "float32")
    errs = {
        "ord0": ((m,), (("ord", 0),), "ValueError"),
        "ord_fro_vector": ((m,), (("ord", "fro"),), "ValueError"),
        "ord_neg1": ((m,), (("ord", -1),), "ValueError"),
        "matrix_ord3": ((m,), (("ord", 3), ("axis", (0, 1))), "ValueError"),
        "axis_list1": ((m,), (("axis", [0]),), "ValueError"),
        "axis_2": ((m,), (("axis", 2),), "ValueError"),
        "keepdims": ((m,), (("keepdims", True),), "TypeError"),
        "none": ((None,), (), "ValueError"),
        "bool": ((A([True], "bool"),), (), "TypeError"),
    }
    for name, (args, kw, err) in errs.items():
        yield Case(f"{f}/error/{name}", f, args, kw, error=err)
    yield Case(f"{f}/py/float_list", f, (Py([3.0, 4.0]),))
    yield Case(f"{f}/py/int_list_ord1", f, (Py([3, 4]),), (("ord", 1),))


def _fidelity() -> Iterator[Case]:
    """Reproductions from differential fuzzing against live TF (issue 14), with neighbours.

    Half-precision sums (TF sums bfloat16 in float32 and rounds once, where a bfloat16 running
    sum stops growing at 256 times an addend), Python complex input (complex128 in TF) and the
    complex Euclidean norm (an imaginary part of exactly 0).
    """
    for dt, big in (("bfloat16", 256.0), ("bfloat16", 128.0), ("float16", 16.0)):
        s = SHORT[dt]
        for n in (1001, 2000, 3000, 10000):
            x = A([big] + [1.0] * (n - 1), dt)
            tag = f"acc/{big:g}_and_ones{n}"
            yield Case(f"norm/{s}/{tag}", "norm", (x,), grad=n == 1001)
            yield Case(f"normalize/{s}/{tag}", "normalize", (x,))
            yield Case(f"l2_normalize/{s}/{tag}", "l2_normalize", (x,), grad=n == 1001)
            yield Case(f"clip_by_norm/{s}/{tag}", "clip_by_norm", (x, 1.0))
            yield Case(f"global_norm/{s}/{tag}", "global_norm", (Seq((x,)),), grad=n == 1001)
            yield Case(f"clip_by_global_norm/{s}/{tag}", "clip_by_global_norm", (Seq((x,)), 1.0))
        rows = A([[big] + [1.0] * 1000] * 3, dt)
        tag = f"acc/{big:g}_rows_axis1"
        yield Case(f"norm/{s}/{tag}", "norm", (rows,), (("axis", 1),))
        yield Case(f"l2_normalize/{s}/{tag}", "l2_normalize", (rows,), (("axis", 1),))
        yield Case(f"clip_by_norm/{s}/{tag}", "clip_by_norm", (rows, 1.0, 1))
        for n in (2000, 5000):
            cid = f"{s}/acc/{big:g}/random{n}"
            x = A(gen(cid, (n,), scale=3.0), dt)
            yield Case(f"norm/{cid}", "norm", (x,))
            yield Case(f"l2_normalize/{cid}", "l2_normalize", (x,))
            yield Case(f"clip_by_norm/{cid}", "clip_by_norm", (x, 1.0))
            yield Case(f"global_norm/{cid}", "global_norm", (Seq((x, x)),))
            yield Case(f"clip_by_global_norm/{cid}", "clip_by_global_norm", (Seq((x, x)), 1.0))
    # Sums over several axes of same-sign squares (XLA:CPU nests one loop per axis).
    shape = (7, 2, 2, 5, 3)
    for dt in ("float32", "float64"):
        s = SHORT[dt]
        for i in range(12 if dt == "float32" else 3):
            cid = f"{s}/several_axes/{i}"
            x = A(gen(cid, shape, "uniform", lo=0.5, hi=1.5), dt)
            yield Case(f"norm/{cid}", "norm", (x,))
            yield Case(f"global_norm/{cid}", "global_norm", (Seq((x,)),))
            if dt == "float32":
                yield Case(f"clip_by_average_norm/{cid}", "clip_by_average_norm", (x, 0.01))
            for axes in (None, (0, 1, 2, 3, 4), (0, 2, 4), (1, 3)):
                label = _axes_label(axes)
                yield Case(f"clip_by_norm/{cid}/{label}", "clip_by_norm", (x, 1.0, axes))
                kw = () if axes is None else (("axis", axes),)
                yield Case(f"l2_normalize/{cid}/{label}", "l2_normalize", (x,), kw)
    # Argument shapes and dtypes TF accepts, or refuses, that backends used to get first.
    x23 = A(gen("f32/shapes/x23", (2, 3)), "float32")
    for name, eps in (("5", [1.0] * 5), ("3", [1e-12] * 3), ("2x1", [[1e-12], [4.0]])):
        err = "ValueError" if name == "5" else None
        yield Case(
            f"l2_normalize/f32/epsilon_shape/{name}",
            "l2_normalize",
            (x23,),
            (("epsilon", A(eps, "float32")),),
            error=err,
        )
    v3, v2 = A([1.0, 2.0, 2.0], "float32"), A([3.0, 4.0], "float32")
    shapes = {
        "clip2_t3": ((Seq((v3,)), A([1.0, 2.0], "float32")), (), "ValueError"),
        "clip2_t2": ((Seq((v2,)), A([1.0, 2.0], "float32")), (), None),
        "clip1_t3": ((Seq((v3,)), A([1.0], "float32")), (), None),
        "use2_t3": ((Seq((v3,)), 1.0), (("use_norm", A([1.0, 2.0], "float32")),), "ValueError"),
        "use1_t3": ((Seq((v3,)), 1.0), (("use_norm", A([2.0], "float32")),), None),
    }
    for name, (args, kw, err) in shapes.items():
        yield Case(
            f"clip_by_global_norm/f32/shape/{name}", "clip_by_global_norm", args, kw, error=err
        )
    for cdt in ("uint8", "uint16", "uint32", "uint64", "int64", "bool"):
        err = "TypeError" if cdt == "bool" else None
        c = A(True if cdt == "bool" else 2, cdt)
        yield Case(
            f"clip_by_norm/f32/clip_norm_dtype/{SHORT[cdt]}", "clip_by_norm", (v2, c), error=err
        )
    # Python complex data is complex128 in TF (complex64 would underflow these squares).
    tiny = 2.76e-31 - 7.68e-31j
    yield Case("normalize/py/complex_scalar", "normalize", (tiny,))
    yield Case("norm/py/complex_scalar", "norm", (tiny,))
    yield Case("l2_normalize/py/complex_scalar", "l2_normalize", (tiny,))
    yield Case("norm/py/complex_list", "norm", (Py([1 + 2j, 3]),))
    yield Case("normalize/py/complex_list", "normalize", (Py([2j, 1.0]),))
    yield Case("norm/py/complex_list_ord1", "norm", (Py([3 + 4j, 1j]),), (("ord", 1),))
    # The complex Euclidean norm: TF's x * conj(x) has an imaginary part of exactly 0.
    for dt in COMPLEX:
        s = SHORT[dt]
        z = -0.8019 - 1.3244j
        yield Case(f"norm/{s}/imag/scalar", "norm", (A(z, dt),))
        yield Case(f"norm/{s}/imag/vector_axis0", "norm", (A([z, 2 + 1j], dt),), (("axis", 0),))
        yield Case(f"normalize/{s}/imag/vector", "normalize", (A([z, 2 + 1j], dt),))
        for name, vals in (
            ("inf_imag", [3 + 4j, complex(0.0, INF)]),
            ("inf_real", [complex(INF, 0.0)]),
            ("inf_both", [complex(INF, -INF), 1j]),
            ("nan_real", [complex(NAN, 0.0)]),
            ("overflow", [complex(1e30, 1e30), 1.0]),
        ):
            for fn in ("norm", "normalize", "l2_normalize"):
                yield Case(f"{fn}/{s}/imag/{name}", fn, (A(vals, dt),))
        m = A(gen(f"{s}/imag/m", (3, 4), "complex"), dt)
        yield Case(f"norm/{s}/imag/fro", "norm", (m,), (("ord", "fro"), ("axis", (0, 1))))
        yield Case(f"normalize/{s}/imag/axis1", "normalize", (m,), (("axis", 1),))


def _all() -> tuple[Case, ...]:
    out = tuple(
        itertools.chain(
            _clip_by_value(),
            _clip_by_norm(),
            _global_norm(),
            _clip_by_global_norm(),
            _clip_by_average_norm(),
            _norm(),
            _l2_normalize(),
            _normalize(),
            _fidelity(),
        )
    )
    seen: set[str] = set()
    for c in out:
        if c.id in seen:
            raise ValueError(f"duplicate case id {c.id}")
        seen.add(c.id)
        if c.function not in FUNCTIONS:
            raise ValueError(f"unknown function in {c.id}")
    return out


CASES: tuple[Case, ...] = _all()
