"""Every function under ``jax.jit`` on the JAX backends: TF's values (docs/tf-reference.md) and the
same result as eager execution.

Non-array arguments (ord, axis, Python bounds) are closed over, so they are static; array
arguments (bounds, clip_norm, use_norm, epsilon) are traced.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import anyclip

pytestmark = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)

NAN = math.nan
INF = math.inf
M = [[3.0, 4.0], [6.0, 8.0]]


@dataclass
class Case:
    fn: Callable[..., Any]
    args: list[Any]  # NumPy data, put on the backend as float32 unless dtypes says otherwise
    expected: Any  # one array, or a list for functions that return several
    ulp: float = 0
    dtypes: list[str] = field(default_factory=list)
    out_dtype: str = "float32"


def _cbgn(t_list_and_clip):
    out, norm = anyclip.clip_by_global_norm(*t_list_and_clip)
    return [*out, norm]


CASES = {
    # §1: clip_by_value
    "clip_by_value-python-bounds": Case(
        lambda t: anyclip.clip_by_value(t, -1, 1),
        [[[-10, -1, 0], [0, 2, 10]]],
        [[-1, -1, 0], [0, 1, 1]],
    ),
    "clip_by_value-array-bounds-min-gt-max": Case(
        anyclip.clip_by_value, [[0, 5, 10], 6.0, 4.0], [6, 6, 6]
    ),
    "clip_by_value-nan": Case(
        lambda t: anyclip.clip_by_value(t, 0.0, 1.0), [[NAN, -INF, INF, 0.5]], [NAN, 0, 1, 0.5]
    ),
    "clip_by_value-int8-wrap": Case(
        lambda t: anyclip.clip_by_value(t, 0, 1000),
        [[1, 2]],
        [0, 0],
        dtypes=["int8"],
        out_dtype="int8",
    ),
    # §2: clip_by_norm
    "clip_by_norm": Case(lambda t: anyclip.clip_by_norm(t, 1.0), [[3, 4]], [0.6, 0.8], 2),
    "clip_by_norm-traced-clip": Case(anyclip.clip_by_norm, [[3, 4], 1.0], [0.6, 0.8], 2),
    "clip_by_norm-zeros": Case(lambda t: anyclip.clip_by_norm(t, 1.0), [[0, 0]], [0, 0]),
    "clip_by_norm-zeros-clip0": Case(lambda t: anyclip.clip_by_norm(t, 0.0), [[0, 0]], [NAN, NAN]),
    "clip_by_norm-axes0": Case(
        lambda t: anyclip.clip_by_norm(t, 5.0, axes=0),
        [M],
        [[2.236068, 2.236068], [4.472136, 4.472136]],
        2,
    ),
    # §3, §4: global_norm, clip_by_global_norm
    "global_norm": Case(lambda a, b: anyclip.global_norm([a, b]), [[3, 4], [[12]]], 13.0, 3),
    "clip_by_global_norm": Case(
        lambda a, b: _cbgn(([a, b], 6.5)), [[3, 4], [[12]]], [[1.5, 2], [[6]], 13.0], 3
    ),
    "clip_by_global_norm-traced-clip": Case(
        lambda a, b, c: _cbgn(([a, b], c)), [[3, 4], [[12]], 6.5], [[1.5, 2], [[6]], 13.0], 3
    ),
    "clip_by_global_norm-inf": Case(
        lambda a, b: _cbgn(([a, b], 6.5)),
        [[INF, 1], [[12]]],
        [[NAN, NAN], [[NAN]], INF],
    ),
    "clip_by_global_norm-use-norm": Case(
        lambda a, b, u: [*anyclip.clip_by_global_norm([a, None, b], 6.5, use_norm=u)[0][::2]],
        [[3, 4], [[12]], 26.0],
        [[0.75, 1], [[3]]],
        3,
    ),
    # §5: clip_by_average_norm
    "clip_by_average_norm": Case(
        lambda t: anyclip.clip_by_average_norm(t, 1.0), [[3, 4]], [1.2, 1.6], 2
    ),
    # §6: norm
    "norm": Case(anyclip.norm, [[3, -4, 0, 12]], 13.0, 2),
    "norm-ord1-axis0": Case(lambda t: anyclip.norm(t, ord=1, axis=0), [[[1, -2], [3, 4]]], [4, 6]),
    "norm-matrix-ord2": Case(
        lambda t: anyclip.norm(t, ord=2, axis=(0, 1)), [[[1, -2], [3, 4]]], 5.1166735, 5
    ),
    "norm-matrix-ord-inf-keepdims": Case(
        lambda t: anyclip.norm(t, ord=np.inf, axis=(0, 1), keepdims=True),
        [[[1, -2], [3, 4]]],
        [[7]],
    ),
    "norm-empty-inf": Case(lambda t: anyclip.norm(t, ord=np.inf), [np.zeros(0)], -INF),
    "norm-p3": Case(lambda t: anyclip.norm(t, ord=3), [[3, -4, 0, 12]], 12.207056, 5),
    "norm-complex": Case(
        anyclip.norm, [[3 + 4j, 0]], 5 + 0j, 2, dtypes=["complex64"], out_dtype="complex64"
    ),
    "norm-int-ord1": Case(
        lambda t: anyclip.norm(t, ord=1), [[3, -4]], 7, dtypes=["int32"], out_dtype="int32"
    ),
    # §7, §8: l2_normalize, normalize
    "l2_normalize-axis1": Case(
        lambda t: anyclip.l2_normalize(t, axis=1), [M], [[0.6, 0.8], [0.6, 0.8]], 3
    ),
    "l2_normalize-zeros": Case(anyclip.l2_normalize, [[0, 0]], [0, 0]),
    "l2_normalize-traced-epsilon": Case(
        lambda t, e: anyclip.l2_normalize(t, epsilon=e), [[3, 4], 100.0], [0.3, 0.4], 3
    ),
    "normalize": Case(lambda t: list(anyclip.normalize(t)), [[3, 4]], [[0.6, 0.8], [5]], 2),
    "normalize-zeros": Case(lambda t: list(anyclip.normalize(t)), [[0, 0]], [[NAN, NAN], [0]]),
}


def _run(backend, case: Case, jit: bool):
    dtypes = case.dtypes or ["float32"] * len(case.args)
    args = [backend.asarray(a, d) for a, d in zip(case.args, dtypes, strict=True)]
    fn = backend.jit(case.fn) if jit else case.fn
    return fn(*args)


def _as_list(out, expected):
    if isinstance(out, list):
        assert len(out) == len(expected)
        return out, expected
    return [out], [expected]


@pytest.mark.parametrize("name", list(CASES))
def test_jit_matches_tf(backend, check, name):
    case = CASES[name]
    outs, expected = _as_list(_run(backend, case, jit=True), case.expected)
    for i, (o, e) in enumerate(zip(outs, expected, strict=True)):
        dtype = case.out_dtype
        check(o, np.asarray(e), dtype, case.ulp, what=f"{name} output {i} under jit")


@pytest.mark.parametrize("name", list(CASES))
def test_jit_matches_eager(backend, name):
    from anyclip_conformance import assert_array

    case = CASES[name]
    jitted, _ = _as_list(_run(backend, case, jit=True), case.expected)
    eager, _ = _as_list(_run(backend, case, jit=False), case.expected)
    for i, (j, e) in enumerate(zip(jitted, eager, strict=True)):
        assert_array(
            j,
            backend.to_numpy(e),
            backend=backend,
            dtype=backend.dtype_name(e),
            ulp=2,
            what=f"{name} output {i}: jit vs eager",
        )


def test_jit_with_static_argnames(backend, check):
    fn = backend.jit(anyclip.norm, static_argnames=("ord", "axis", "keepdims"))
    out = fn(backend.asarray([[1, -2], [3, 4]], "float32"), ord=1, axis=(0, 1))
    check(out, np.float32(6), "float32")


# §9 under jit: gradients of jitted functions.
def test_jit_grad_clip_by_norm_zeros(backend, check):
    jax = backend.module

    def loss(x):
        return (anyclip.clip_by_norm(x, 1.0) * backend.asarray([1.0, 2.0], "float32")).sum()

    g = jax.jit(jax.grad(loss))(backend.asarray([0.0, 0.0], "float32"))
    check(g, [1, 2], "float32")


def test_jit_grad_clip_by_value_nan_routing(backend, check):
    jax = backend.module
    w = backend.asarray(np.arange(1, 7), "float32")

    def loss(x, lo, hi):
        return (anyclip.clip_by_value(x, lo, hi) * w).sum()

    x = backend.asarray([-2, -1, 0, 1, 2, NAN], "float32")
    lo, hi = backend.asarray(-1.0, "float32"), backend.asarray(1.0, "float32")
    gx, gmin, gmax = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(x, lo, hi)
    check(gx, [0, 2, 3, 4, 0, 0], "float32")
    check(gmin, np.float32(7), "float32")
    check(gmax, np.float32(5), "float32")


def test_jit_grad_clip_by_global_norm_tie(backend, check):
    jax = backend.module

    def loss(a, b):
        (ca, cb), _ = anyclip.clip_by_global_norm([a, b], 13.0)
        return (ca * backend.asarray([1.0, 2.0], "float32")).sum() + cb.sum()

    ga, gb = jax.jit(jax.grad(loss, argnums=(0, 1)))(
        backend.asarray([3.0, 4.0], "float32"), backend.asarray([12.0], "float32")
    )
    check(ga, [0.591716, 1.4556212], "float32", 16)
    check(gb, [-0.63313603], "float32", 16)


def test_jit_vmap_clip_by_norm(backend, check):
    jax = backend.module
    fn = jax.jit(jax.vmap(lambda r: anyclip.clip_by_norm(r, 5.0)))
    out = fn(backend.asarray(M, "float32"))
    check(out, [[3, 4], [3, 4]], "float32", 2)


@pytest.mark.parametrize("mode", ["jax", "jax-vmap"])
def test_first_calls_traced(backend, mode, first_calls):
    # In a fresh process (on the CPU), the first call of every tests/test_compile.py CASES
    # function is jax.jit(jax.grad(loss)) (mode "jax", float32; then eager: a tracer cached
    # under jit would raise UnexpectedTracerError there; float64 cases the reverse order) or
    # jax.vmap (mode "jax-vmap"), and the first init and update of each anyclip.optax
    # transformation run under jax.jit. Each traced result equals the eager one.
    if backend.name != "jax":
        pytest.skip("the fresh process runs on the CPU")
    first_calls(mode, at_least=50)
