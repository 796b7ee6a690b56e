"""The backend kernels and plain-call fast paths against the generic kernels, at their edges.

Conformance runs both on TF's data (``conformance/`` with the kernels each call chooses,
``test_generic_kernels.py`` with ``bind(GENERIC)``). These tests add the arguments at the
border of what the plain paths accept (bound order, NaN, inf and out-of-range bounds, NumPy
scalars, 0-d and empty arrays): there a fast path must agree with the generic kernels, or step
aside and let them answer.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import anyclip
from anyclip._api import bind
from anyclip._kernels import GENERIC, plain_clip_by_norm, plain_clip_by_value, plain_norm
from anyclip_conformance import BACKEND_IDS, assert_array

from .conftest import ULP_CLIP_NORM, ULP_GLOBAL, ULP_L2

PLAIN_BACKENDS = [name for name in BACKEND_IDS if name in ("numpy", "torch", "torch-cuda")]

VALUES = [-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0, math.nan, math.inf, -math.inf]

BOUNDS = [
    (-1.0, 1.0),
    (1.0, -1.0),  # min > max: TF gives min everywhere, a clamp would give max
    (0.5, 0.5),
    (-math.inf, math.inf),
    (math.nan, 1.0),
    (-1.0, math.nan),
    (-1, 3),
    (-(2**53), 2**53),
    (-(2**60), 2**60),
    (-1e300, 1e300),  # overflows float32: inf bounds
    (-1e39, 1.0),
    (np.float32(-1.5), np.float32(0.25)),
    (np.float64(-1.5), np.float64(0.25)),
    (True, 2.0),
]


GENERIC_API = bind(GENERIC)


def _check_both(backend, fn, args, dtype, ulp=0):
    """``fn(*args)`` equals it with the generic kernels (or raises the same error)."""
    try:
        generic = getattr(GENERIC_API, fn.__name__)(*args)
    except (TypeError, ValueError) as exc:
        with pytest.raises(type(exc)):
            fn(*args)
        return
    assert_array(fn(*args), backend.to_numpy(generic), backend=backend, dtype=dtype, ulp=ulp)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("bounds", BOUNDS, ids=repr)
def test_clip_by_value_plain_equals_generic(backend, make, dtype, bounds):
    t = make(VALUES, dtype)
    _check_both(backend, anyclip.clip_by_value, (t, *bounds), dtype)


@pytest.mark.parametrize("shape", [(), (0,), (2, 3)])
def test_clip_by_value_plain_shapes(backend, make, shape):
    t = make(np.linspace(-3, 3, math.prod(shape)).reshape(shape), "float32")
    _check_both(backend, anyclip.clip_by_value, (t, -1.0, 2.0), "float32")


DATA = {
    "normal": lambda n: np.random.default_rng(n).standard_normal(n),
    "zeros": np.zeros,
    "squares overflow": lambda n: np.full(n, 1e3),  # float16; times BIG below
    "squares underflow": lambda n: np.full(n, 1e-5),  # float16; times 1 / BIG below
    "inf": lambda n: np.where(np.arange(n) == n // 2, math.inf, 1.0),
    "nan": lambda n: np.where(np.arange(n) == n // 2, math.nan, 1.0),
}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("n", [1, 6, 32, 33])
@pytest.mark.parametrize("data", sorted(DATA))
def test_norm_plain_equals_generic(backend, make, dtype, n, data):
    values = DATA[data](n)
    if data.startswith("squares"):
        big = {"float16": 1.0, "float32": 1e17, "float64": 1e151}[dtype]
        values = values * big if data.endswith("overflow") else values / big
    x = make(values, dtype)
    _check_both(backend, anyclip.norm, (x,), dtype, ULP_CLIP_NORM)


CLIP_NORMS = [1.0, 0.0, -1.0, math.nan, math.inf, 10**6, 2**60, 1e300, np.float32(0.5)]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("shape", [(6,), (4, 8), (33,), (0,), ()])
@pytest.mark.parametrize("clip_norm", CLIP_NORMS, ids=repr)
def test_clip_by_norm_plain_equals_generic(backend, make, dtype, shape, clip_norm):
    t = make(3 * np.random.default_rng(1).standard_normal(shape), dtype)
    _check_both(backend, anyclip.clip_by_norm, (t, clip_norm), dtype, ULP_CLIP_NORM)


@pytest.mark.parametrize("backend", PLAIN_BACKENDS, indirect=True)
def test_plain_paths_engage(backend, make):
    """The calls ``benchmarks/`` times as W5 take the plain paths (else W5 measures nothing)."""
    t = make([0.5, -3.0, 4.0, 2.0, -1.0, 0.0], "float32")
    assert plain_clip_by_value(t, -1.0, 1.0) is not None
    assert plain_norm(t) is not None
    if backend.library == "numpy":
        assert plain_clip_by_norm(t, 1.0) is not None


@pytest.mark.parametrize("backend", PLAIN_BACKENDS, indirect=True)
@pytest.mark.parametrize(
    "bounds",
    [(1.0, -1.0), (math.nan, 1.0), (-(2**60), 1.0), (-1e39, 1.0), (True, 2.0)],
    ids=repr,
)
def test_plain_clip_by_value_steps_aside(backend, make, bounds):
    """Bounds a clamp would treat differently from TF's two steps go the general way."""
    assert plain_clip_by_value(make([1.0, 2.0], "float32"), *bounds) is None


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_plain_clip_keeps_tf_gradient(backend):
    """The gradient passes at both bounds and is dropped at NaN.

    TF's rule: docs/tf-reference.md §9.1. The clamp fast path takes only tensors that need no
    gradient: torch 2.15's clamp with number bounds passes none at the bounds.
    """
    torch = backend.module
    x = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0, math.nan], requires_grad=True)
    w = torch.arange(1.0, 7.0)
    assert plain_clip_by_value(x.detach(), -1.0, 1.0) is not None
    assert plain_clip_by_value(x, -1.0, 1.0) is None
    (anyclip.clip_by_value(x, -1.0, 1.0) * w).sum().backward()
    assert_array(x.grad, [0.0, 2.0, 3.0, 4.0, 0.0, 0.0], backend=backend, dtype="float32")


@pytest.fixture(scope="module")
def long_arrays():
    """Heavy-tailed float32 data, one array of a million elements among shorter ones."""
    rng = np.random.default_rng(7)
    sizes = (1_000_003, 70_000, 300, 5, 1)
    return [(rng.standard_normal(n) * rng.lognormal(0, 2, n)).astype(np.float32) for n in sizes]


def _exact_norm(arrays):
    """The float64 root of the float64 sum of float32 squares (as TF squares: in float32)."""
    total = sum(np.sum(np.square(a).astype(np.float64)) for a in arrays)
    return np.float32(np.sqrt(total))


def test_long_sums_stay_accurate(backend, long_arrays):
    """Norms over millions of float32 elements stay within a few ULP, as TF's (torch's own
    ``vector_norm`` and ``_foreach_norm`` are hundreds of ULP off there)."""
    xs = [backend.asarray(a, "float32") for a in long_arrays]
    gn = anyclip.global_norm(xs)
    assert_array(gn, _exact_norm(long_arrays), backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    n = anyclip.norm(xs[0])
    assert_array(n, _exact_norm(long_arrays[:1]), backend=backend, dtype="float32", ulp=ULP_L2)


#: How many small arrays, of each kind, :func:`_many_small` makes.
MANY_SAME, MANY_SQUARE, MANY_MIXED = 1500, 1000, 500

#: Dask gets a thirtieth of them (99 arrays: 50 of one shape, 33 square, 16 mixed; about
#: 21,000 elements): the 3,000 took 88 s on two cores, nearly all of it dask building and
#: running graphs of thousands of tasks (building them grows faster than the count: 83 arrays
#: 0.3 s, 250 arrays 3.2 s), which tests no more of anyclip's path. The 99 still take every
#: step the 3,000 take: all arrays small (below ``BLOCK``), so the sums of squares join them
#: into one group (as the 3,000, fewer than ``JOIN`` elements too), a run of one shape, the
#: mixed ranks with 0-d and empty arrays among them (16: every shape of the cycle), the global
#: norm within ULP_GLOBAL of the exact one, the flattened arrays giving the same norm, and one
#: factor scaling every array (the first and last of the run, the first square, the last).
DASK_FRACTION = 30


def _many_small(rng, fraction=1):
    """3,000 small float32 arrays (a ``fraction`` of them): runs of one shape (joined by ``cat``
    on torch), then mixed ranks and 0-d arrays (which ``cat`` refuses: joined by
    ``_flatten_dense_tensors``)."""
    same = [rng.standard_normal(256).astype(np.float32) for _ in range(MANY_SAME // fraction)]
    square = [
        rng.standard_normal((16, 16)).astype(np.float32) for _ in range(MANY_SQUARE // fraction)
    ]
    shapes = [(), (7,), (3, 5), (2, 3, 4), (1,), (0,), (9, 1)]
    mixed = [
        rng.standard_normal(shapes[i % len(shapes)]).astype(np.float32)
        for i in range(MANY_MIXED // fraction)
    ]
    return same + square + mixed


def test_many_small_arrays_norm_and_scale(backend):
    """Thousands of small arrays, joined in groups for the sums: the global norm within a few
    ULP of the exact one, the same for the arrays flattened (how they are joined does not
    change it), and every array scaled by one factor. (Dask: 99 arrays, see DASK_FRACTION.)"""
    fraction = DASK_FRACTION if backend.library == "dask" else 1
    host = _many_small(np.random.default_rng(11), fraction)
    xs = [backend.asarray(a, "float32") for a in host]
    flat = [backend.asarray(a.reshape(-1), "float32") for a in host]
    exact = _exact_norm(host)
    gn = anyclip.global_norm(xs)
    assert_array(gn, exact, backend=backend, dtype="float32", ulp=ULP_GLOBAL)
    assert_array(anyclip.global_norm(flat), backend.to_numpy(gn), backend=backend, dtype="float32")
    clipped, norm = anyclip.clip_by_global_norm(xs, 1.0)
    assert_array(norm, backend.to_numpy(gn), backend=backend, dtype="float32")
    # TF's factor, 1 * minimum(1 / norm, 1 / 1), in float32, times each array
    factor = np.float32(1.0) * np.minimum(np.float32(1.0) / backend.to_numpy(gn), np.float32(1.0))
    same = MANY_SAME // fraction
    # the first and last of the run of one shape, the first square one, the last (mixed) one
    for i in (0, same - 1, same, len(host) - 1):
        assert_array(clipped[i], host[i] * factor, backend=backend, dtype="float32")


TORCH_BACKENDS = [name for name in BACKEND_IDS if name in ("torch", "torch-cuda")]


def _half_lists(dtype):
    """Lists of bfloat16 or float16 values at the edges of their squares and halves."""
    rng = np.random.default_rng(5)
    tiny = {"float16": 1e-4, "bfloat16": 1e-20}[dtype]  # squares (halves) subnormal
    big = {"float16": 300.0, "bfloat16": 2e19}[dtype]  # squares overflow
    return {
        "normal": [rng.standard_normal(s) for s in ((3, 4), (17,), (), (0,), (257,))],
        "tiny": [tiny * rng.standard_normal(40), tiny * rng.standard_normal((5, 3))],
        "overflow": [np.array([big, 1.0]), rng.standard_normal(6)],
        "inf": [np.array([math.inf, 1.0]), rng.standard_normal(3)],
        "nan": [np.array([math.nan, 1.0]), rng.standard_normal(3)],
        # past SQUARE_ROW (rows and a tail), and past BFLOAT16_BLOCK (several blocks)
        "long": [rng.standard_normal(70_001), rng.standard_normal((300, 7))],
        "longer": [rng.standard_normal((2, 300_001)), rng.standard_normal(1 << 19)],
    }


@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", ["normal", "tiny", "overflow", "inf", "nan", "long", "longer"])
def test_torch_half_precision_sums_equal_generic(backend, make, dtype, case):
    """bfloat16 and float16 lists take the multi-tensor sums of ``l2_loss`` and the foreach
    scaling; the norm and every scaled array equal the generic kernels' (the core's formula,
    checked on TF's data by the conformance suite) bit for bit on the CPU, where the sums are
    the same cascade sums. On CUDA the float32 sums of the halves are added in another order
    (one multi-tensor kernel): within the global norm's budget."""
    from anyclip._kernels._torch_sums import _half_precision_half_squares

    xs = [make(a, dtype) for a in _half_lists(dtype)[case]]
    assert _half_precision_half_squares(backend.xp, backend.module, xs) is not None  # engaged
    ulp = 0 if backend.name == "torch" else ULP_GLOBAL
    _check_both(backend, anyclip.global_norm, (xs,), dtype, ulp)
    clipped, norm = anyclip.clip_by_global_norm(xs, 1.0)
    want, want_norm = GENERIC_API.clip_by_global_norm(xs, 1.0)
    assert_array(norm, backend.to_numpy(want_norm), backend=backend, dtype=dtype, ulp=ulp)
    for got, ref in zip(clipped, want, strict=True):
        assert_array(got, backend.to_numpy(ref), backend=backend, dtype=dtype, ulp=ulp)


@pytest.mark.parametrize("backend", TORCH_BACKENDS, indirect=True)
def test_torch_half_precision_sums_step_aside(backend, make):
    """A recorded gradient, float32 or mixed dtypes go elsewhere (the generic formula carries
    TF's gradients; float32 has its own fast path)."""
    from anyclip._kernels._torch_sums import _half_precision_half_squares

    torch = backend.module
    x = make([3.0, 4.0], "bfloat16")
    assert _half_precision_half_squares(backend.xp, torch, [x.requires_grad_()]) is None
    assert _half_precision_half_squares(backend.xp, torch, [make([1.0], "float32")]) is None


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", ["normal", "tiny", "overflow", "inf", "nan", "long", "longer"])
def test_torch_multi_tensor_half_sums_on_cpu(backend, make, dtype, case):
    """CUDA's multi-tensor route, run on the CPU: the same formula as the generic kernels,
    its float32 sums in ``_foreach_norm``'s order (sequential on the CPU): within the global
    norm's budget of them."""
    from anyclip._kernels._torch_sums import _multi_tensor_half_squares

    xs = [make(a, dtype) for a in _half_lists(dtype)[case]]
    xp, torch = backend.xp, backend.module
    got = _core_norm(xp, _multi_tensor_half_squares(xp, torch, xs))
    want = GENERIC_API.global_norm(xs)
    assert_array(got, backend.to_numpy(want), backend=backend, dtype=dtype, ulp=ULP_GLOBAL)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_torch_cpu_half_losses_in_reused_buffers(backend, make, dtype):
    """Each array's sum (float16 ``l2_loss``; bfloat16 sum of squares in float32) from the
    buffers reused across a call is the one from fresh temporaries (``torch.mul``, float16
    ``mul_``, the sums) bit for bit, whatever the
    array's size (above torch's parallel grain too), shape, layout and values, and whatever
    came before it in the buffers."""
    from anyclip._kernels._torch_sums import _cpu_half_losses, _cpu_half_square_sum

    torch, xp = backend.module, backend.xp
    rng = np.random.default_rng(8)
    tiny = {"float16": 1e-4, "bfloat16": 1e-20}[dtype]
    arrays = [
        make(rng.standard_normal(70_001), dtype),
        make(rng.standard_normal((3, 1 << 18)), dtype),  # whole blocks, no tail
        make(rng.standard_normal(600_001), dtype),  # blocks, a last block, a tail
        make(rng.standard_normal((300, 130)), dtype),
        make(rng.standard_normal((130, 300)), dtype).T,  # not contiguous
        make(3.0, dtype),
        make(np.zeros((0, 4)), dtype),
        make(tiny * rng.standard_normal(5_000), dtype),
        make(np.array([math.nan, math.inf, -0.0, 2.0]), dtype),
        make(rng.standard_normal((7, 11)), dtype),
    ]
    loss = _cpu_half_losses(xp, torch, arrays)
    for a in arrays:
        got, want = loss(a), _cpu_half_square_sum(xp, torch, a)
        assert got.dtype == want.dtype and got.shape == want.shape == ()
        bits = {2: torch.int16, 4: torch.int32}[got.element_size()]
        assert torch.equal(got.reshape(1).view(bits), want.reshape(1).view(bits))


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("size", [70_001, 600_001])
def test_torch_bfloat16_sums_same_on_any_thread_count(backend, make, size):
    """The float32 sums of bfloat16 squares go by rows torch sums on one thread each: the
    same bits with 1, 2 and 4 threads, on the fast path and the generic one (a sum of the
    whole array is split between the threads)."""
    from anyclip._kernels._base import bfloat16_square_sum
    from anyclip._kernels._torch_sums import _cpu_half_losses

    torch, xp = backend.module, backend.xp
    rng = np.random.default_rng(size)
    x = make(rng.standard_normal(size) * np.exp(4 * rng.standard_normal(size)), "bfloat16")
    before = torch.get_num_threads()
    sums = []
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            fast = _cpu_half_losses(xp, torch, [x])(x)
            generic = bfloat16_square_sum(xp, torch.square(x))
            sums += [fast.reshape(1).view(torch.int32), generic.reshape(1).view(torch.int32)]
    finally:
        torch.set_num_threads(before)
    assert sums[0].dtype == torch.int32
    assert all(torch.equal(s, sums[0]) for s in sums)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_bfloat16_square_is_mul(backend):
    """``torch.square`` (the bfloat16 squares of :func:`_cpu_half_losses`) gives the bits of
    ``torch.mul(v, v)`` for each of the 65,536 bfloat16 values, NaN payloads included, on
    one thread's and on the parallel path alike."""
    torch = backend.module
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    for v in (every, every.repeat(4)):  # 262,144 elements: torch splits the work
        assert torch.equal(torch.square(v).view(torch.int16), torch.mul(v, v).view(torch.int16))


def _core_norm(xp, total):
    from anyclip._core import norm_from_half_squares

    return norm_from_half_squares(xp, total)


def _cuda_lists(dtype):
    """float32 or float64 lists at the edges of the CUDA route's sums of squares."""
    rng = np.random.default_rng(6)
    big = {"float32": 2e19, "float64": 1e154}[dtype]  # an array's squares overflow
    return {
        "normal": [rng.standard_normal(s) for s in ((3, 4), (17,), (), (0,), (257,), (64, 33))],
        "one-element": [np.array([3.0]), np.array([-4.0])],
        "overflow": [np.array([big, 1.0]), rng.standard_normal(6)],
        "inf": [np.array([math.inf, 1.0]), rng.standard_normal(3)],
        "nan": [np.array([math.nan, 1.0]), rng.standard_normal(3)],
        "empty": [np.zeros((0,)), np.zeros((2, 0))],
        "long": [rng.standard_normal(1_000_003), rng.standard_normal((300, 7))],
    }


#: float64's long case is left out: on the CPU, torch adds a float64 array in sequence (31 ULP
#: from TF's order over a million elements, measured); CUDA's tree is checked on torch-cuda by
#: ``test_long_sums_stay_accurate``.
_CUDA_CASES = [
    (dtype, case)
    for dtype in ("float32", "float64")
    for case in ("normal", "one-element", "overflow", "inf", "nan", "empty", "long")
    if (dtype, case) != ("float64", "long")
]


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize(("dtype", "case"), _CUDA_CASES)
def test_torch_cuda_sums_of_squares_on_cpu(backend, make, dtype, case):
    """CUDA's float32/float64 route (one ``_foreach_norm`` over the list, accumulated in
    float64; the norms squared and added in float64), run on the CPU: the generic kernels'
    global norm within its budget, with their inf and NaN, and within one ULP of the exact
    norm over a million float32 elements (torch adds in float64 on the CPU too)."""
    from anyclip._kernels._torch_multi import cuda_half_squares

    xs = [make(a, dtype) for a in _cuda_lists(dtype)[case]]
    xp, torch = backend.xp, backend.module
    total = cuda_half_squares(torch, xs)
    assert total.dtype == xs[0].dtype and total.shape == ()
    want = GENERIC_API.global_norm(xs)
    got = _core_norm(xp, total)
    assert_array(got, backend.to_numpy(want), backend=backend, dtype=dtype, ulp=ULP_GLOBAL)
    if case == "long":  # float64 sums of float32 squares: within an ULP of the exact norm
        host = [np.asarray(a, dtype=dtype) for a in _cuda_lists(dtype)[case]]
        assert_array(got, _exact_norm(host), backend=backend, dtype=dtype, ulp=1)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize(
    "values",
    [[[1.2e-19]], [[3e-19, -2e-19], [1.2e-19]], [[1.1e-19], [-1.4e-19]]],
    ids=["one", "second", "both"],
)
def test_torch_cuda_unhalved_sums_on_cpu(backend, make, values):
    """CUDA's route unhalved (Keras's ``sum(square(v))``), run on the CPU, on arrays whose
    sums of squares lie in ``[2**-126, 2**-125)``: normal, their halves not. Its float64 sum
    of the float32 squares, rounded once to float32 (the exact sum here), not half of it
    rounded to a subnormal float32, then doubled (1 ULP off for ``[1.2e-19]``)."""
    from anyclip._kernels._torch_multi import cuda_half_squares

    xs = [make(v, "float32") for v in values]
    exact = math.fsum(float(np.float32(e)) ** 2 for v in values for e in v)
    total = cuda_half_squares(backend.module, xs, halve=False)
    assert_array(total, np.float32(exact), backend=backend, dtype="float32")


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("axes", [None, (0,), (1,), (0, 1)])
def test_torch_cuda_norm_on_cpu(backend, make, axes):
    """CUDA's one-launch norm (``vector_norm`` over ``axes``, kept) run on the CPU on a short
    array: the generic kernels' norm within its budget, same shape."""
    from anyclip._kernels._torch_multi import cuda_norm

    x = make(np.random.default_rng(7).standard_normal((33, 9)), "float32")
    got = cuda_norm(backend.module, x, axes)
    want = GENERIC.norm2(backend.xp, x, axes)
    assert tuple(got.shape) == tuple(want.shape)
    assert_array(got, backend.to_numpy(want), backend=backend, dtype="float32", ulp=ULP_L2)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_torch_rsqrt_off_the_cpu_is_sqrt_then_reciprocal(backend, dtype):
    """Off the CPU anyclip's rsqrt is ``reciprocal(sqrt(x))`` (half precision in float32,
    rounded once), not the device's ``rsqrt``: CUDA's is approximate (GPU run 3). Seen on
    ``meta`` tensors (the non-CPU path) with a dispatch log; on the CPU it stays
    ``torch.rsqrt``. The values are checked on a GPU (the one-element gradient tests)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from anyclip._numerics import torch_rsqrt

    torch = backend.module
    seen: list[str] = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    dt = getattr(torch, dtype)
    for device in ("meta", "cpu"):
        seen.clear()
        x = torch.ones(5, dtype=dt, device=device)
        with Log():
            r = torch_rsqrt(torch, x)
        assert r.dtype == dt and r.shape == x.shape and r.device == x.device
        if device == "cpu":
            assert seen == ["rsqrt"]
        else:
            assert "rsqrt" not in seen and "sqrt" in seen and "reciprocal" in seen
