"""Every public function under ``jax.jit`` and under ``torch.compile(fullgraph=True)``.

``fullgraph=True`` turns any graph break into an error, and ``jax.jit`` turns any host read of a
traced value into a concretization error, so a passing case proves the function never branches
on an array value and never syncs with the host. Results must equal eager execution within
2 ULP (inductor fuses and reorders reductions; XLA turns ``1 / sqrt`` into ``rsqrt``);
gradients within 1e-5 of the largest entry, since they cancel.

The only documented exception is ``nonfinite="raise"``, which reads the norm on the host: under
``jax.jit`` it raises JAX's ``ConcretizationTypeError`` while tracing (before any data is seen),
and under ``torch.compile(fullgraph=True)`` Dynamo refuses the data-dependent ``if`` with a
``torch._dynamo.exc.UserError``; without ``fullgraph`` the graph breaks there and the
``FloatingPointError`` comes through.

The cases close over every non-array argument (``ord``, ``axis``, Python bounds), so those are
static; array arguments (bounds, ``clip_norm``, ``use_norm``, ``epsilon``) are traced.
"""

from __future__ import annotations

import collections
import importlib
import math
import runpy
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np
import pytest

import anyclip
from anyclip import tree
from anyclip_conformance import Backend, assert_array
from anyclip_conformance.budgets import gpu_budget

INF = math.inf
NAN = math.nan
M = [[3.0, 4.0], [6.0, 8.0]]
V = [3.0, -4.0, 0.0, 12.0]
A = [3.0, 4.0]
B = [[12.0]]
#: torch.compile's default backend; "aot_eager" skips code generation (faster, exact)
TORCH_COMPILER = "inductor"
#: inductor may fuse and reorder float32 reductions
TORCH_ULP = 2
#: XLA fuses ``1 / sqrt(x)`` into ``rsqrt`` and reassociates under jit: 1 ULP seen
JAX_ULP = 2


class Pair(NamedTuple):
    first: Any
    second: Any


@dataclass
class Case:
    fn: Callable[..., Any]
    args: list[Any]  # NumPy data for the array arguments
    dtypes: list[str] | None = None  # default float32 for every argument
    grad: bool = True  # differentiable in its first argument
    torch: bool = True  # runs on torch (False: JAX-only, e.g. the optax adapter)
    #: the oldest torch whose Dynamo traces it in one graph (older ones refuse it: declared in
    #: docs/faq.md, measured on torch 2.11)
    min_torch: str | None = None


#: Dynamo before torch 2.13 cannot copy a dict subclass (``copy.copy`` is marked as skipped)
#: nor read its ``__dict__``, which anyclip needs to rebuild an OrderedDict with its attributes
OLD_DYNAMO_DICT_SUBCLASS = "2.13"


def torch_too_old(case: Case, torch: Any) -> bool:
    """Whether the installed torch is older than the case's ``min_torch``."""
    return case.min_torch is not None and torch.__version__ < case.min_torch


def _gn(*ts):
    return anyclip.global_norm(list(ts))


def _cbgn(clip, **kw):
    return lambda *ts: anyclip.clip_by_global_norm(list(ts), clip, **kw)


CASES: dict[str, Case] = {
    # --- clip_by_value
    "clip_by_value": Case(lambda t: anyclip.clip_by_value(t, -1.0, 3.5), [M]),
    "clip_by_value-array-bounds": Case(anyclip.clip_by_value, [M, 3.5, [[4.0, 7.0]]]),
    "clip_by_value-min-gt-max": Case(lambda t: anyclip.clip_by_value(t, 6.0, 4.0), [M]),
    "clip_by_value-int32": Case(
        lambda t: anyclip.clip_by_value(t, 0, 5), [[-3, 2, 9]], ["int32"], grad=False
    ),
    # --- clip_by_norm
    "clip_by_norm": Case(lambda t: anyclip.clip_by_norm(t, 5.0), [M]),
    "clip_by_norm-axes1": Case(lambda t: anyclip.clip_by_norm(t, 5.0, axes=1), [M]),
    "clip_by_norm-axes-empty": Case(lambda t: anyclip.clip_by_norm(t, 5.0, axes=[]), [M]),
    "clip_by_norm-traced-clip": Case(anyclip.clip_by_norm, [M, 5.0]),
    "clip_by_norm-zeros": Case(lambda t: anyclip.clip_by_norm(t, 1.0), [[0.0, 0.0]]),
    "clip_by_norm-accumulate": Case(
        lambda t: anyclip.clip_by_norm(t, 1.0, accumulate_dtype="float32"),
        [[300.0, 0.0]],
        ["float16"],
    ),
    # --- global_norm / clip_by_global_norm
    "global_norm": Case(_gn, [A, B]),
    "global_norm-mixed-widest": Case(
        lambda a, b: anyclip.global_norm([a, b], accumulate_dtype="widest"),
        [A, B],
        ["float16", "float32"],
    ),
    "clip_by_global_norm": Case(_cbgn(6.5), [A, B]),
    "clip_by_global_norm-tie": Case(_cbgn(13.0), [A, B]),
    "clip_by_global_norm-traced-clip": Case(
        lambda a, b, c: anyclip.clip_by_global_norm([a, b], c), [A, B, 6.5]
    ),
    "clip_by_global_norm-use-norm": Case(
        lambda a, b, n: anyclip.clip_by_global_norm([a, None, b], 6.5, use_norm=n), [A, B, 26.0]
    ),
    "clip_by_global_norm-inf-tf": Case(_cbgn(1.0), [[INF, 1.0], B], grad=False),
    "clip_by_global_norm-inf-torch": Case(_cbgn(1.0, nonfinite="torch"), [[INF, 1.0], B]),
    "clip_by_global_norm-inf-skip": Case(_cbgn(1.0, nonfinite="skip"), [[INF, 1.0], B]),
    "clip_by_global_norm-nan-skip": Case(_cbgn(1.0, nonfinite="skip"), [[NAN, 1.0], B]),
    "clip_by_global_norm-finite-skip": Case(_cbgn(6.5, nonfinite="skip"), [A, B]),
    "clip_by_global_norm-mixed": Case(
        _cbgn(6.5, accumulate_dtype="widest"), [A, B], ["bfloat16", "float32"]
    ),
    # --- clip_by_average_norm
    "clip_by_average_norm": Case(lambda t: anyclip.clip_by_average_norm(t, 1.0), [M]),
    # --- norm: every vector ord, every matrix ord, axis kinds, keepdims
    **{
        f"norm-ord-{o}": Case(lambda t, o=o: anyclip.norm(t, ord=o), [V])
        for o in ("euclidean", 1, 2, INF, 3, 0.5)
    },
    **{
        f"norm-matrix-{o}": Case(lambda t, o=o: anyclip.norm(t, ord=o, axis=(0, 1)), [M])
        for o in ("euclidean", "fro", 1, INF)
    },
    "norm-matrix-2": Case(
        lambda t: anyclip.norm(t, ord=2, axis=(1, 0)), [[[1.0, -2.0], [3.0, 4.0]]], grad=False
    ),
    "norm-axis-keepdims": Case(lambda t: anyclip.norm(t, axis=-1, keepdims=True), [M]),
    "norm-matrix-axis-none-flattens": Case(lambda t: anyclip.norm(t, ord=1), [M]),
    "norm-accumulate": Case(
        lambda t: anyclip.norm(t, accumulate_dtype="float32"), [[300.0, 0.0]], ["float16"]
    ),
    # --- l2_normalize / normalize
    "l2_normalize": Case(lambda t: anyclip.l2_normalize(t), [M]),
    "l2_normalize-axis": Case(lambda t: anyclip.l2_normalize(t, axis=0), [M]),
    "l2_normalize-traced-epsilon": Case(
        lambda t, e: anyclip.l2_normalize(t, epsilon=e), [[1e-7, 0.0], 1e-12]
    ),
    "l2_normalize-accumulate": Case(
        lambda t: anyclip.l2_normalize(t, accumulate_dtype="float32"), [[0.0, 0.0]], ["float16"]
    ),
    "normalize": Case(lambda t: anyclip.normalize(t), [M]),
    "normalize-ord1-axis": Case(lambda t: anyclip.normalize(t, ord=1, axis=1), [M]),
    # --- tree
    "tree-clip_by_value": Case(lambda a, b: tree.clip_by_value([a, (b, None)], -1.0, 3.5), [A, B]),
    "tree-clip_by_norm": Case(lambda a, b: tree.clip_by_norm(Pair(a, [b]), 2.5), [A, B]),
    "tree-clip_by_norm-axes": Case(lambda m: tree.clip_by_norm([m], 1.0, axes=0), [M]),
    "tree-clip_by_average_norm": Case(
        lambda a, b: tree.clip_by_average_norm([[a], b], 1.0), [A, B]
    ),
    "tree-global_norm": Case(lambda a, b: tree.global_norm(Pair(a, (b, None))), [A, B]),
    "tree-clip_by_global_norm": Case(
        lambda a, b: tree.clip_by_global_norm([a, Pair(b, None)], 6.5), [A, B]
    ),
    "tree-clip_by_global_norm-mixed": Case(
        lambda a, b: tree.clip_by_global_norm((a, b), 6.5), [A, B], ["float16", "float32"]
    ),
    "tree-clip_by_global_norm-skip": Case(
        lambda a, b: tree.clip_by_global_norm([a, b], 1.0, nonfinite="skip"), [[INF, 1.0], B]
    ),
    "tree-dict-clip_by_global_norm": Case(
        lambda a, b: tree.clip_by_global_norm({"a": a, "b": [b, None]}, 6.5), [A, B]
    ),
    "tree-dict-clip_by_value": Case(lambda a: tree.clip_by_value({"a": a}, -1.0, 3.5), [A]),
    "tree-ordereddict-clip_by_norm": Case(
        lambda a, b: tree.clip_by_norm(collections.OrderedDict(a=a, b=b), 2.5),
        [A, B],
        min_torch=OLD_DYNAMO_DICT_SUBCLASS,
    ),
    "tree-map_leaves": Case(lambda a, b: tree.map_leaves(lambda t: t * 2.0, [a, None, b]), [A, B]),
    "tree-flatten": Case(lambda a, b: tree.flatten(Pair(a, [b]))[1]([b, a]), [A, B]),
}


# ------------------------------------------------------------------ helpers
def _leaves(node: Any) -> list[Any]:
    """Arrays and ``None`` of a result (array, list, tuple, namedtuple, dict), in order."""
    if node is None:
        return [None]
    if isinstance(node, dict):
        return [leaf for v in node.values() for leaf in _leaves(v)]
    if isinstance(node, (list, tuple)):
        return [leaf for c in node for leaf in _leaves(c)]
    return [node]


def _skeleton(node: Any) -> Any:
    if isinstance(node, dict):
        return (type(node), [(k, _skeleton(v)) for k, v in node.items()])
    if isinstance(node, (list, tuple)):
        return (type(node), [_skeleton(c) for c in node])
    return None if node is None else "leaf"


def _inputs(backend: Backend, case: Case, *, requires_grad: bool = False) -> list[Any]:
    dtypes = case.dtypes or ["float32"] * len(case.args)
    dtypes = dtypes + ["float32"] * (len(case.args) - len(dtypes))
    out = []
    for i, (a, dt) in enumerate(zip(case.args, dtypes, strict=True)):
        backend.dtype(dt)  # skip when absent
        out.append(backend.asarray(a, dt, requires_grad=requires_grad and i == 0))
    return out


def _assert_same(
    backend: Backend, compiled: Any, eager: Any, ulp: float, gpu: str | None = None
) -> None:
    """Same structure, dtypes and values within ``ulp`` (plus GPU difference ``gpu``'s)."""
    assert _skeleton(compiled) == _skeleton(eager)
    for i, (c, e) in enumerate(zip(_leaves(compiled), _leaves(eager), strict=True)):
        if e is None:
            assert c is None
            continue
        dtype = backend.dtype_name(e)
        assert_array(
            c,
            backend.to_numpy(e),
            backend=backend,
            dtype=dtype,
            ulp=ulp if gpu is None else gpu_budget(gpu, backend.name, ulp, dtype),
            what=f"output {i}",
        )


def _assert_close_grads(backend: Backend, compiled: Any, eager: Any) -> None:
    """Gradients: same dtype, shape, NaN/inf positions; values close relative to the largest.

    Gradients cancel (``w - (t.w) t / n**2`` is exactly 0 for some rows), so a few-ULP change of
    an intermediate is a large relative change of a small entry: compare on the scale of the
    whole gradient instead of per element.
    """
    for i, (c, e) in enumerate(zip(_leaves(compiled), _leaves(eager), strict=True)):
        ref = backend.to_numpy(e)
        assert_array(
            c, ref, backend=backend, dtype=backend.dtype_name(e), ulp=math.inf, what=f"grad {i}"
        )
        finite = np.isfinite(ref)
        scale = float(np.max(np.abs(ref[finite]), initial=1.0))
        np.testing.assert_allclose(
            backend.to_numpy(c)[finite], ref[finite], rtol=1e-5, atol=1e-6 * scale
        )


def _loss(fn: Callable[..., Any], xp: Any, device: Any = None) -> Callable[..., Any]:
    """``sum(output * weights)`` over every float output (the docs/tf-reference.md §9 loss).

    The weights are made on ``device`` (the backend's: torch's default device is the CPU).
    """

    def loss(*args: Any) -> Any:
        total = 0.0
        for leaf in _leaves(fn(*args)):
            if leaf is None:
                continue
            n = math.prod(leaf.shape)
            w = xp.reshape(xp.arange(1, n + 1, dtype=leaf.dtype, device=device), leaf.shape)
            total = total + xp.sum(leaf * w)
        return total

    return loss


# ====================================================================== JAX
jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)


@jax_backends
@pytest.mark.parametrize("case_id", list(CASES))
def test_jax_jit(backend, case_id):
    case = CASES[case_id]
    args = _inputs(backend, case)
    eager = case.fn(*args)
    compiled = backend.module.jit(case.fn)(*args)
    # on XLA:GPU, float32 division and rsqrt are not correctly rounded: a declared difference
    _assert_same(backend, compiled, eager, ulp=JAX_ULP, gpu="xla-gpu-float32")


GRAD_CASES = [k for k, c in CASES.items() if c.grad and "accumulate" not in k]


@jax_backends
@pytest.mark.parametrize("case_id", GRAD_CASES)
def test_jax_jit_grad(backend, case_id):
    jax = backend.module
    case = CASES[case_id]
    args = _inputs(backend, case)
    loss = _loss(case.fn, backend.xp)
    eager = jax.grad(loss)(*args)
    compiled = jax.jit(jax.grad(loss))(*args)
    _assert_close_grads(backend, compiled, eager)


@jax_backends
def test_jax_jit_raise_policy_is_a_concretization_error(backend):
    jax = backend.module
    a, b = backend.asarray(A, "float32"), backend.asarray(B, "float32")

    def f(a, b):
        return anyclip.clip_by_global_norm([a, b], 1.0, nonfinite="raise")

    # "raise" must read the norm on the host; under jit there is no value to read
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(f)(a, b)
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(lambda t: tree.clip_by_global_norm(t, 1.0, nonfinite="raise"))({"a": a})
    # eagerly it works, and raises only for a non-finite norm
    f(a, b)
    with pytest.raises(FloatingPointError):
        f(backend.asarray([INF], "float32"), b)


@jax_backends
def test_jax_jit_custom_pytree(backend):
    jax = backend.module

    @jax.tree_util.register_pytree_node_class
    class Box:
        def __init__(self, w, b):
            self.w, self.b = w, b

        def tree_flatten(self):
            return (self.w, self.b), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    box = Box(backend.asarray(A, "float32"), backend.asarray(B, "float32"))
    eager, n_eager = tree.clip_by_global_norm(box, 6.5)
    compiled, n_compiled = jax.jit(lambda t: tree.clip_by_global_norm(t, 6.5))(box)
    assert isinstance(compiled, Box)
    for c, e in [(compiled.w, eager.w), (compiled.b, eager.b), (n_compiled, n_eager)]:
        assert_array(c, backend.to_numpy(e), backend=backend, dtype="float32")


@jax_backends
def test_jax_jit_optax_adapters(backend):
    optax = pytest.importorskip("optax")
    ao = pytest.importorskip("anyclip.optax")
    jax = backend.module
    params = {"w": backend.asarray(M, "float32"), "b": backend.asarray([0.5, -7.0], "float32")}
    transforms = {
        "clip_by_global_norm": ao.clip_by_global_norm(1.0),
        "clip_by_global_norm-skip": ao.clip_by_global_norm(1.0, nonfinite="skip"),
        "clip_by_norm": ao.clip_by_norm(2.0, axes=0),
        "clip_by_value": ao.clip_by_value(-1.0, 1.0),
        "chain": optax.chain(ao.clip_by_value(-5.0, 5.0), ao.clip_by_global_norm(1.0)),
    }
    for name, tx in transforms.items():
        state = tx.init(params)
        eager = tx.update(params, state, params)
        compiled = jax.jit(tx.update)(params, state, params)
        e_leaves = jax.tree_util.tree_leaves(eager)
        c_leaves = jax.tree_util.tree_leaves(compiled)
        assert jax.tree_util.tree_structure(compiled) == jax.tree_util.tree_structure(eager)
        for i, (c, e) in enumerate(zip(c_leaves, e_leaves, strict=True)):
            dtype = backend.dtype_name(e)
            # XLA:GPU's float32 division, fused otherwise under jit: a declared GPU difference
            ulp = gpu_budget("xla-gpu-float32", backend.name, 0, dtype)
            assert_array(
                c, np.asarray(e), backend=backend, dtype=dtype, ulp=ulp, what=f"{name} {i}"
            )


# ==================================================================== torch
torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)


def _declare_too_old(backend: Backend, case: Case, request: Any) -> None:
    """A strict xfail (Dynamo's ``Unsupported``) where the torch is older than the case allows."""
    torch = backend.module
    if torch_too_old(case, torch):
        reason = f"torch {torch.__version__} < {case.min_torch}: Dynamo refuses it (declared)"
        mark = pytest.mark.xfail(raises=torch._dynamo.exc.Unsupported, strict=True, reason=reason)
        request.applymarker(mark)


@pytest.fixture
def compile_fullgraph(backend):
    """``torch.compile(fn, fullgraph=True)`` with a fresh Dynamo cache."""
    torch = backend.module
    torch._dynamo.reset()

    def _compile(fn: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compile(fn, fullgraph=True, backend=TORCH_COMPILER)

    yield _compile
    torch._dynamo.reset()


TORCH_CASES = [k for k, c in CASES.items() if c.torch]


@torch_backends
@pytest.mark.parametrize("case_id", TORCH_CASES)
def test_torch_compile(backend, compile_fullgraph, case_id, request):
    case = CASES[case_id]
    _declare_too_old(backend, case, request)
    args = _inputs(backend, case)
    eager = case.fn(*args)  # eager first: anyclip's type cache is warm when Dynamo traces
    compiled = compile_fullgraph(case.fn)(*args)
    _assert_same(backend, compiled, eager, ulp=TORCH_ULP)


TORCH_GRAD_CASES = [
    "clip_by_value",
    "clip_by_norm-axes1",
    "clip_by_global_norm",
    "clip_by_average_norm",
    "norm-ord-euclidean",
    "norm-matrix-1",
    "l2_normalize-axis",
    "normalize",
    "tree-clip_by_global_norm",
]


@torch_backends
@pytest.mark.parametrize("case_id", TORCH_GRAD_CASES)
def test_torch_compile_grad(backend, case_id):
    # forward compiled with an input that requires grad (a model using l2_normalize, say);
    # AOTAutograd compiles the backward too. aot_eager: the graph capture is what matters here.
    torch = backend.module
    torch._dynamo.reset()
    case = CASES[case_id]
    loss = _loss(case.fn, backend.xp, backend.device)
    args = _inputs(backend, case, requires_grad=True)
    (eager,) = torch.autograd.grad(loss(*args), [args[0]])
    compiled_fn = torch.compile(loss, fullgraph=True, backend="aot_eager")
    (compiled,) = torch.autograd.grad(compiled_fn(*args), [args[0]])
    torch._dynamo.reset()
    _assert_close_grads(backend, compiled, eager)


@torch_backends
def test_torch_compile_raise_policy(backend, compile_fullgraph):
    torch = backend.module
    a, b = backend.asarray([INF, 1.0], "float32"), backend.asarray(B, "float32")

    def f(a, b):
        return anyclip.clip_by_global_norm([a, b], 1.0, nonfinite="raise")

    # fullgraph: Dynamo refuses to guard on the norm's value (the documented host sync)
    with pytest.raises(torch._dynamo.exc.UserError, match="data-dependent"):
        compile_fullgraph(f)(a, b)
    # without fullgraph the graph breaks at the check and the error comes through
    torch._dynamo.reset()
    with pytest.raises(FloatingPointError):
        torch.compile(f, backend="aot_eager")(a, b)
    # the torch adapter's error_if_nonfinite is the same policy
    at = pytest.importorskip("anyclip.torch")
    params = _grad_params(backend, [[INF, 1.0]])
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.UserError, match="data-dependent"):
        compile_fullgraph(lambda ps: at.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True))(params)


def _grad_params(backend: Backend, grads: list[Any]) -> list[Any]:
    torch = backend.module
    params = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(np.shape(g), device=backend.device))
        p.grad = None if g is None else backend.asarray(g, "float32")
        params.append(p)
    return params


ADAPTER_CASES = {
    "clip_grad_norm_": lambda at, ps: at.clip_grad_norm_(ps, 6.5),
    "clip_grad_norm_-torch-policy": lambda at, ps: at.clip_grad_norm_(ps, 1.0, nonfinite="torch"),
    "clip_grad_norm_-skip-policy": lambda at, ps: at.clip_grad_norm_(ps, 1.0, nonfinite="skip"),
    "clip_grad_value_": lambda at, ps: at.clip_grad_value_(ps, 3.5),
    "clip_grad_by_value_": lambda at, ps: at.clip_grad_by_value_(ps, -1.0, 3.5),
    "clip_grad_norm_-p1": lambda at, ps: at.clip_grad_norm_(ps, 6.5, norm_type=1),
    "clip_grad_by_norm_": lambda at, ps: at.clip_grad_by_norm_(ps, 2.5),
    "clip_grad_by_norm_-axes": lambda at, ps: at.clip_grad_by_norm_(ps, 2.5, axes=0),
}


@torch_backends
@pytest.mark.parametrize("name", list(ADAPTER_CASES))
def test_torch_compile_adapters(backend, compile_fullgraph, name):
    at = pytest.importorskip("anyclip.torch")
    fn = ADAPTER_CASES[name]
    grads = [[3.0, 4.0], None, [[12.0, -1.0], [0.5, 2.0]]]
    eager_params, compiled_params = _grad_params(backend, grads), _grad_params(backend, grads)
    eager = fn(at, eager_params)
    compiled = compile_fullgraph(lambda ps: fn(at, ps))(compiled_params)
    if eager is None:
        assert compiled is None
    else:
        assert_array(
            compiled, backend.to_numpy(eager), backend=backend, dtype="float32", ulp=TORCH_ULP
        )
    for i, (c, e) in enumerate(zip(compiled_params, eager_params, strict=True)):
        if e.grad is None:
            assert c.grad is None
            continue
        assert_array(
            c.grad,
            backend.to_numpy(e.grad),
            backend=backend,
            dtype="float32",
            ulp=TORCH_ULP,
            what=f"grad {i}",
        )


@torch_backends
@pytest.mark.parametrize("name", list(ADAPTER_CASES))
def test_torch_compile_adapters_on_gradients_made_in_the_graph(backend, compile_fullgraph, name):
    """The gradients are made inside the compiled function (as compiled autograd makes them),
    so Inductor fuses their producers with the clipping: on CUDA its multi-tensor kernel for
    ``_foreach_mul_`` read the factor before the same launch wrote it, and the first gradient
    came back unscaled (GPU run 5, torch 2.11)."""
    at = pytest.importorskip("anyclip.torch")
    fn = ADAPTER_CASES[name]
    torch = backend.module
    raw = [backend.asarray(g, "float32") for g in ([3.0, 4.0], [[12.0, -1.0], [0.5, 2.0]])]

    def step(ps, a, b):
        ps[0].grad, ps[2].grad = a * 2.0, b * 2.0
        out = fn(at, ps)
        return out, ps[0].grad, ps[2].grad

    results = []
    for run in (step, compile_fullgraph(step)):
        params = _grad_params(backend, [[0.0, 0.0], None, [[0.0, 0.0], [0.0, 0.0]]])
        results.append(run(params, *raw))
    (eager, *eager_grads), (compiled, *compiled_grads) = results
    if eager is None:
        assert compiled is None
    else:
        want = backend.to_numpy(eager)
        assert_array(compiled, want, backend=backend, dtype="float32", ulp=TORCH_ULP)
    for i, (c, e) in enumerate(zip(compiled_grads, eager_grads, strict=True)):
        want = backend.to_numpy(e)
        assert_array(c, want, backend=backend, dtype="float32", ulp=TORCH_ULP, what=f"grad {i}")
    assert torch.equal(raw[0], backend.asarray([3.0, 4.0], "float32"))  # inputs untouched


#: Model-sized lists for the global norms: small tensors whose sizes add up past a group of the
#: sums of squares, so that they are joined (where every tensor is smaller than a group, the
#: groups are cut from the running total), as in a real model's list of biases and small
#: layers. The CPU caps a group at ``SERIAL`` elements, other devices at ``JOIN``.
MODEL_LISTS = {
    "cpu-join": [(64, 32)] * 20 + [(5,)],
    "device-join": [(240, 250)] * 24 + [(5,)],
}

#: name -> a new call on a list of parameters (a new ZClip for each: its history is its state)
GLOBAL_NORM_CASES: dict[str, Callable[[Any], Callable[[list[Any]], Any]]] = {
    "clip_by_global_norm": lambda at: (
        lambda ps: anyclip.clip_by_global_norm([p.grad for p in ps], 1.0)
    ),
    "global_norm": lambda at: lambda ps: anyclip.global_norm([p.grad for p in ps]),
    "tree.clip_by_global_norm": lambda at: (
        lambda ps: tree.clip_by_global_norm({"g": [p.grad for p in ps]}, 1.0)
    ),
    "clip_grad_norm_": lambda at: lambda ps: at.clip_grad_norm_(ps, 1.0),
    "get_total_norm": lambda at: lambda ps: at.get_total_norm([p.grad for p in ps]),
    "ZClip.step": lambda at: at.ZClip(warmup_steps=1).step,
}


@torch_backends
@pytest.mark.parametrize("shapes", list(MODEL_LISTS.values()), ids=list(MODEL_LISTS))
@pytest.mark.parametrize("name", list(GLOBAL_NORM_CASES))
def test_torch_compile_global_norms_of_model_sized_lists(backend, name, shapes):
    """``fullgraph=True`` on lists whose small tensors are joined into groups: the cut of the
    groups used ``bisect.bisect_left``, a C builtin that Dynamo refuses ("Attempted to call
    function marked as skipped"), so every global norm of such a list failed to compile in one
    graph (and broke the graph without ``fullgraph``). Dynamo's tracing is what is checked
    (backend ``eager``: the graph's ops run as traced); the values equal the eager call's."""
    at = pytest.importorskip("anyclip.torch")
    torch = backend.module
    from anyclip._kernels._base import BLOCK, JOIN, groups
    from anyclip._kernels._torch_sums import SERIAL

    on_cpu = backend.device.type == "cpu"
    if (shapes == MODEL_LISTS["cpu-join"]) == on_cpu:
        # the list takes the path under test on this device: every tensor smaller than a
        # group, the groups cut from the running total
        block, join = (SERIAL, SERIAL) if on_cpu else (BLOCK, JOIN)
        sizes = [math.prod(s) for s in shapes]
        assert max(sizes) < block and join <= sum(sizes)
        cut = groups([np.empty(s) for s in shapes], np.size, block=block, join=join)
        assert 1 < len(cut) < len(shapes)
    make = GLOBAL_NORM_CASES[name]

    def model() -> list[Any]:
        gen = torch.Generator(device=backend.device).manual_seed(5)
        params = []
        for s in shapes:
            p = torch.nn.Parameter(torch.zeros(s, device=backend.device))
            p.grad = torch.randn(s, generator=gen, device=backend.device)
            params.append(p)
        return params

    eager_params, compiled_params = model(), model()
    eager = make(at)(eager_params)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(make(at), fullgraph=True, backend="eager")(compiled_params)
    finally:
        torch._dynamo.reset()
    leaves = torch.utils._pytree.tree_leaves
    for what, got, want in (
        ("result", leaves(compiled), leaves(eager)),
        ("grads", [p.grad for p in compiled_params], [p.grad for p in eager_params]),
    ):
        assert len(got) == len(want), what
        for i, (c, e) in enumerate(zip(got, want, strict=True)):
            # compiled, the sums of squares take other steps (Dynamo-traceable ones) than
            # eagerly: norms 1 ULP apart seen, scaled values 2
            assert_array(
                c,
                backend.to_numpy(e),
                backend=backend,
                dtype="float32",
                ulp=TORCH_ULP,
                what=f"{what} {i}",
            )


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("name", ["clip_grad_norm_", "clip_grad_norm_-p1", "clip_grad_value_"])
def test_torch_compile_off_the_cpu_makes_no_multi_tensor_op(backend, name, monkeypatch):
    """What a compiled graph holds for tensors off the CPU: per-tensor ops, no ``_foreach_*``
    (see the test above). The CPU stands for a GPU here: removed from the device types that
    keep torch's multi-tensor kernels when compiled, and declared to have them, as CUDA has;
    eager calls keep them."""
    at = pytest.importorskip("anyclip.torch")
    torch = backend.module
    from torch.utils import _foreach_utils
    from torch.utils._python_dispatch import TorchDispatchMode

    import anyclip._compat as compat

    monkeypatch.setattr(compat, "TORCH_HOST_DEVICES", frozenset())
    monkeypatch.setattr(_foreach_utils, "_device_has_foreach_support", lambda device: True)
    fn = ADAPTER_CASES[name]

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.add(str(func))
            return func(*args, **(kwargs or {}))

    grads = [[3.0, 4.0], None, [[12.0, -1.0], [0.5, 2.0]]]
    with Ops() as eager:
        fn(at, _grad_params(backend, grads))
    assert any("_foreach" in op for op in eager.seen), sorted(eager.seen)

    graphs: list[set[str]] = []

    def record(gm, example_inputs):
        graphs.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(lambda ps: fn(at, ps), backend=record)(_grad_params(backend, grads))
    finally:
        torch._dynamo.reset()
    assert graphs
    assert not any("_foreach" in op for ops in graphs for op in ops), graphs


@torch_backends
@pytest.mark.parametrize("case_id", TORCH_CASES)
def test_torch_compile_flush_subnormals(backend, compile_fullgraph, case_id, request):
    # inside flush_subnormals() every case compiles without a graph break (Dynamo cannot read
    # the ContextVar; anyclip reads an attribute it guards on) with torch.compile's default
    # compiler, as users compile, and gives the eager values
    case = CASES[case_id]
    _declare_too_old(backend, case, request)
    args = _inputs(backend, case)
    with anyclip.flush_subnormals():
        eager = case.fn(*args)
        compiled = compile_fullgraph(case.fn)(*args)
    _assert_same(backend, compiled, eager, ulp=TORCH_ULP)


@torch_backends
def test_torch_compile_follows_flush_subnormals(backend, compile_fullgraph):
    # one compiled function, called outside and inside the block, and entering it itself:
    # each call gives the eager value of its setting (a change of setting recompiles)
    t = backend.asarray([1e-30, 1.0, -3e-25], "float32")

    def f(x):
        return anyclip.clip_by_global_norm([x], 1e-16)[0][0]

    def g(x):
        with anyclip.flush_subnormals():
            inside = f(x)
        return inside, f(x)

    kept = f(t)  # IEEE: -3e-25 * 1e-16 is the subnormal -3e-41
    with anyclip.flush_subnormals():
        flushed = f(t)  # TF's: -0
    assert backend.to_numpy(kept)[2] != 0
    assert backend.to_numpy(flushed)[2] == 0
    compiled = compile_fullgraph(f)
    for want, on in ((kept, False), (flushed, True), (kept, False)):
        with anyclip.flush_subnormals(on):
            _assert_same(backend, compiled(t), want, ulp=0)
    inside, outside = compile_fullgraph(g)(t)
    _assert_same(backend, inside, flushed, ulp=0)
    _assert_same(backend, outside, kept, ulp=0)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize(
    "name",
    ["clip_by_norm", "clip_by_global_norm", "l2_normalize", "tree-dict", "clip_grad_norm_"],
)
def test_torch_compile_reads_no_sys_modules(backend, name):
    # anyclip looks optional frameworks up by name (anyclip._compat.imported). Read from
    # sys.modules inside a trace, Dynamo wrapped that whole dict (some 2,500 entries here) at
    # its first read in each trace, a third of a small clip_by_norm's trace, and guarded on
    # it. The traced calls guard on no sys.modules and trace in one graph.
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    x = backend.asarray(M, "float32")
    p = torch.nn.Parameter(x.clone())
    p.grad = x.clone()
    calls = {
        "clip_by_norm": lambda t: anyclip.clip_by_norm(t, 1.0),
        "clip_by_global_norm": lambda t: anyclip.clip_by_global_norm([t, 2 * t], 1.0),
        "l2_normalize": lambda t: anyclip.l2_normalize(t, 1),
        "tree-dict": lambda t: tree.clip_by_global_norm({"a": t, "b": [2 * t]}, 1.0),
        "clip_grad_norm_": lambda t: at.clip_grad_norm_([p], 1.0),
    }
    calls[name](x)  # the eager call first, as the other compile tests
    torch._dynamo.reset()
    explained = torch._dynamo.explain(calls[name])(x)
    torch._dynamo.reset()
    assert explained.graph_break_count == 0
    guards = sorted({g.name for g in explained.out_guards})
    assert any("anyclip" in g for g in guards), guards  # anyclip's code was traced
    assert [g for g in guards if ".modules" in g or "'modules'" in g] == []


@pytest.mark.parametrize(
    "name",
    [
        "_compat._is_imported",
        "_compat._known_type",
        "_memo.remember",
        "_memo._remember_by_dtype",
        "_memo._constant_by_dtype",
        "_kernels._plain._plain",
        "_kernels._plain._plain_largest",
    ],
)
def test_is_marked_as_torch_marks_a_constant_result(name):
    # these functions carry, without importing torch, the mark that
    # torch.compiler.assume_constant_result sets: Dynamo runs them instead of tracing them
    torch = pytest.importorskip("torch")
    module, attr = name.rsplit(".", 1)
    fn = getattr(importlib.import_module(f"anyclip.{module}"), attr)

    def probe() -> bool:
        return True

    torch.compiler.assume_constant_result(probe)
    assert vars(probe), "assume_constant_result marks nothing any more"
    assert vars(probe).items() <= vars(fn).items()


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_compile_compiles_once_while_anyclip_remembers_more(backend):
    # anyclip remembers per type and dtype what it works out (anyclip._memo). Dynamo guards
    # on what a trace reads: read from plain dicts, a missed key guarded on the dict's length,
    # so a trace that filled one failed its own guard at the next call, and every compiled
    # function that had read it compiled again once any later call added an entry (a NumPy
    # call, a new dtype). Here each compiled call is made, then every memo of anyclip grows
    # (new types, dtypes and namespaces through public calls, and a new key in each memo
    # directly), and each call is made again where a recompile is an error.
    torch = backend.module
    at = pytest.importorskip("anyclip.torch")
    from anyclip._kernels import _plain
    from anyclip._memo import ConstantMemo, Memo, constant_by_dtype, remembered

    x = backend.asarray(M, "float32")
    p = torch.nn.Parameter(x.clone())
    p.grad = x.clone()
    calls = {
        "clip_by_norm": lambda t: anyclip.clip_by_norm(t, 1.0),
        "clip_by_value": lambda t: anyclip.clip_by_value(t, -1.0, 2.5),
        "clip_by_global_norm": lambda t: anyclip.clip_by_global_norm([t, 2 * t], 1.0),
        "l2_normalize": lambda t: anyclip.l2_normalize(t, 1),
        "norm": lambda t: anyclip.norm(t, ord=3),
        "tree-dict": lambda t: tree.clip_by_global_norm({"a": t, "b": [2 * t]}, 1.0),
        "clip_grad_norm_": lambda t: at.clip_grad_norm_([p], 1.0),
    }
    torch._dynamo.reset()
    compiled = {
        name: torch.compile(fn, fullgraph=True, backend="eager") for name, fn in calls.items()
    }
    for fn in compiled.values():
        fn(x)
    with torch.compiler.set_stance("fail_on_recompile"):
        for fn in compiled.values():
            fn(x)

    class Grads(list):  # a container type anyclip has not met
        pass

    class Tagged(torch.Tensor):  # a tensor type anyclip has not met
        pass

    anyclip.clip_by_global_norm(Grads([x]), 1.0)
    anyclip.clip_by_norm(x.as_subclass(Tagged), 1.0)
    for dtype in ("float16", "float64", "int8"):
        anyclip.clip_by_value(np.ones(3, dtype=dtype), 0, 1)
        anyclip.clip_by_value(torch.ones(3, dtype=getattr(torch, dtype)), 0, 1)
    memos = [
        m
        for mod in list(sys.modules.values())
        if getattr(mod, "__name__", "").startswith("anyclip")
        for m in vars(mod).values()
        if isinstance(m, (Memo, ConstantMemo))
    ]
    assert len(memos) >= 7, memos
    new = SimpleNamespace(__name__="anyclip_test_namespace")
    for m in memos:
        if isinstance(m, Memo):
            remembered(m, object(), lambda: None)
        else:
            constant_by_dtype(m, new, "float32", lambda xp, dtype: "real")
    # the plain calls' dicts, which only functions Dynamo runs read
    _plain._PLAIN_TYPES[type("NewArray", (), {})] = None
    _plain._PLAIN_DTYPES[object()] = None
    with torch.compiler.set_stance("fail_on_recompile"):
        for fn in compiled.values():
            fn(x)
    torch._dynamo.reset()


def test_imported_is_what_sys_modules_holds_now(monkeypatch):
    # imported(name) answers as sys.modules.get(name) at each call: a module found once is
    # not kept after it leaves sys.modules, and an entry of None (an import made to fail) is
    # not a module
    from types import ModuleType

    from anyclip._compat import imported

    assert imported("numpy") is sys.modules["numpy"]
    assert imported("anyclip_no_such_module") is None
    fake = ModuleType("anyclip_fake.sub")
    monkeypatch.setitem(sys.modules, "anyclip_fake.sub", fake)
    assert imported("anyclip_fake.sub") is fake
    monkeypatch.setitem(sys.modules, "anyclip_fake.sub", None)
    assert imported("anyclip_fake.sub") is None
    monkeypatch.delitem(sys.modules, "anyclip_fake.sub")
    assert imported("anyclip_fake.sub") is None


def test_torch_compile_first_call_without_warnings():
    # In a fresh process, compiling before any eager call must not emit warnings (the
    # project runs with -W error). Dynamo warns when it traces an lru_cache-wrapped function.
    pytest.importorskip("torch")
    code = textwrap.dedent(
        """
        import warnings
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", "`torch.jit.script_method` is deprecated")
        import torch
        import anyclip
        f = torch.compile(lambda t: anyclip.clip_by_norm(t, 1.0), fullgraph=True,
                          backend="aot_eager")
        print(f(torch.tensor([3.0, 4.0])).tolist())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_torch_compile_first_call_with_gradients():
    # In a fresh process, anyclip's first call inside torch.compile(fullgraph=True) on tensors
    # that require a gradient: TF's gradient rules (autograd Functions: maximum in
    # clip_by_norm, rsqrt in l2_normalize, abs in norm(ord=1)) must already exist; Dynamo
    # cannot trace their class definitions ("Invalid call to __build_class__" before). Each
    # compiled gradient equals the eager one computed afterwards, and clip_by_norm's tie
    # (norm == clip_norm) sends the gradient to the norm, TF's rule (torch's own maximum
    # would split it).
    pytest.importorskip("torch")
    code = textwrap.dedent(
        """
        import torch
        import anyclip

        fns = {
            "clip_by_norm": lambda t: anyclip.clip_by_norm(t, 5.0),
            "l2_normalize": lambda t: anyclip.l2_normalize(t),
            "norm1": lambda t: anyclip.norm(t, ord=1),
        }
        for dtype in (torch.float32, torch.float64):
            for name, fn in fns.items():
                grads = []
                for run in (torch.compile(fn, fullgraph=True, backend="aot_eager"), fn):
                    x = torch.tensor([3.0, -4.0, 0.0], dtype=dtype, requires_grad=True)
                    out = run(x)
                    weights = torch.arange(1, out.numel() + 1, dtype=dtype).reshape(out.shape)
                    (out * weights).sum().backward()
                    grads.append(x.grad)
                for g in grads:
                    assert (g.dtype, g.shape, g.device.type) == (dtype, (3,), "cpu"), g
                assert torch.equal(grads[0], grads[1]), (name, dtype, grads)
                print(name, dtype, grads[0].tolist())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 6, proc.stdout
    # TF 2.21 (live, tf.GradientTape): the gradient of sum(clip_by_norm(t, 5) * [1, 2, 3]) at
    # t = [3, -4, 0], where the norm equals clip_norm, is [1.5999999046325684,
    # 1.2000000476837158, 3.0] (= [1, 2, 3] - t (t . [1, 2, 3]) / 25 in float32: the whole
    # gradient through the norm, as TF's maximum(norm, clip_norm) gives a tie to its first
    # operand)
    assert lines[0] == "clip_by_norm torch.float32 [1.5999999046325684, 1.2000000476837158, 3.0]"


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_first_calls_compiled(backend, first_calls):
    # In a fresh process, the first call of every CASES function (float32; a float64 subset),
    # of the anyclip.torch adapters, ZClip, QuantileClip and skip_on_spike, of the constraints
    # and embedding_lookup, is inside torch.compile(fullgraph=True) with tensors that require
    # a gradient, then .backward(); the eager call after it gives the same values. Lazily
    # built state (a class definition, a cache of types filled on first use) breaks the graph
    # there: a tree held in a dict failed ("str.startswith" on dict.__module__) before the
    # type cache knew the builtin containers.
    first_calls("torch", at_least=80)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_first_calls_in_inference_mode(backend, first_calls):
    # In a fresh process, the first calls under torch.inference_mode() (a validation pass
    # before training), then calls with gradients: constants cached by the first calls were
    # inference tensors, and backward() failed ("Inference tensors cannot be saved for
    # backward") before they were kept out of the cache.
    first_calls("torch-inference", at_least=5)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_torch_fake_tensors_after_real_calls(backend):
    # Real calls fill the cache of 0-d constants; the same calls then run under
    # FakeTensorMode (as torch.export and shape propagation trace). On an H200 a cached real
    # cuda constant reached such a trace ("Please convert all Tensors to FakeTensors first ...
    # Found in aten.div.Tensor(tensor(1., device='cuda:0'), FakeTensor(...))"); the same
    # happened here on the CPU with a cached CPU constant.
    pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.utils._pytree import tree_leaves

    calls = {name: case.fn for name, case in CASES.items() if case.torch and case.args == [M]}
    assert len(calls) > 10, calls
    x = backend.asarray(M, "float32")
    eager = {name: fn(x) for name, fn in calls.items()}
    for name, fn in calls.items():
        with FakeTensorMode() as mode:
            out = fn(mode.from_tensor(x))
        fakes, reals = tree_leaves(out), tree_leaves(eager[name])
        assert len(fakes) == len(reals), name
        for f, r in zip(fakes, reals, strict=True):
            assert isinstance(f, FakeTensor), name
            assert (f.dtype, f.shape, f.device) == (r.dtype, r.shape, r.device), name


@pytest.mark.parametrize("backend", ["torch-cuda"], indirect=True)
def test_cuda_no_sync(backend):
    # with a GPU: no anyclip call may synchronise with the host, except nonfinite="raise"
    at = pytest.importorskip("anyclip.torch")
    x = backend.asarray(M, "float32")
    a, b = backend.asarray(A, "float32"), backend.asarray(B, "float32")
    calls = [case.fn for case in CASES.values() if case.args == [M]]
    params = _grad_params(backend, [A, B])
    with backend.host_syncs_raise():
        for fn in calls:
            fn(x)
        anyclip.clip_by_global_norm([a, b], 6.5)
        anyclip.clip_by_global_norm([a, b], 6.5, nonfinite="skip")
        tree.clip_by_global_norm({"a": a, "b": [b]}, 6.5, accumulate_dtype="widest")
        at.clip_grad_norm_(params, 6.5)
        with pytest.raises(RuntimeError, match="synchroniz"):
            anyclip.clip_by_global_norm([a, b], 6.5, nonfinite="raise")


# ================================================ half precision, compiled, against TF
HALF_SCRIPT = Path(__file__).with_name("data") / "make_tf_compile_half.py"
HALF_TF = dict(np.load(HALF_SCRIPT.with_name("tf_compile_half.npz")))
#: timm's AGC (``tests/data/make_timm_agc.py``) and its float16 and bfloat16 2-norm cases
TIMM_AGC = dict(np.load(HALF_SCRIPT.with_name("timm_agc.npz")))
TIMM_HALF_CASES = sorted(
    {k.rsplit("/", 1)[0] for k in TIMM_AGC if k.startswith(("float16/", "bfloat16/"))}
    & {k.rsplit("/", 1)[0] for k in TIMM_AGC if "/2.0/" in k}
)
#: the eps of timm's ``adaptive_clip_grad`` calls there
TIMM_EPS = runpy.run_path(str(HALF_SCRIPT.with_name("make_timm_agc.py")))["EPS"]
half_gen = SimpleNamespace(**runpy.run_path(str(HALF_SCRIPT)))

#: How far ``torch.compile``'s float16 and bfloat16 results may be from TF 2.21's, in ULP, on
#: the committed arrays (measured with torch 2.13's Inductor on the CPU; docs/porting.md).
#: Inductor computes fused half-precision operations in float32 and rounds only what it
#: stores; anyclip rounds each step where TF does (``anyclip._numerics.rounded_here``), and
#: the compiled results are eager anyclip's, bit for bit (they were 1 ULP off on up to half of
#: the elements, and a float16 global norm that overflows in TF came back finite, its clipped
#: list not NaN); ``l2_normalize`` over one axis is TF's in bfloat16, 2 ULP from it in float16
#: (eager: 2 ULP in both). The other entries are eager anyclip's own distance from TF here,
#: which the compiled calls keep: TF's bfloat16 ``l2_loss`` (a global norm 1 ULP off) and TF's
#: float16 sums, which add squares partly in float16 (docs/tf-behaviour.md). What cannot be
#: made eager's is the order of Inductor's float32 sums of half-precision squares: where such a
#: sum rounds to the other neighbour, results move by up to 2 ULP (``l2_normalize-random``:
#: bfloat16 9,609 of 9,999 elements 1 or 2 ULP from TF's, eager none; declared there).
COMPILED_HALF_ULP = {
    "bfloat16": {
        **dict.fromkeys(half_gen.CASE_NAMES, 0),
        "clip_by_global_norm": 2,
        "l2_normalize-random": 2,
    },
    "float16": {
        "clip_by_norm": 2,
        "clip_by_norm-axes1": 0,
        "clip_by_global_norm": 2,
        "clip_by_global_norm-big": 0,
        "l2_normalize": 1,
        "l2_normalize-axis0": 2,
        "l2_normalize-random": 2,
    },
}


def _half_calls(a: Any, b: Any, big: Any, r: Any) -> dict[str, list[Any]]:
    """The anyclip calls of ``make_tf_compile_half.py``'s TF calls: name -> outputs."""
    clip = half_gen.CLIP
    clipped, norm = anyclip.clip_by_global_norm([a, b], clip)
    clipped_big, norm_big = anyclip.clip_by_global_norm([a, big], clip)
    return {
        "clip_by_norm": [anyclip.clip_by_norm(a, clip)],
        "clip_by_norm-axes1": [anyclip.clip_by_norm(a, clip, axes=1)],
        "clip_by_global_norm": [*clipped, norm],
        "clip_by_global_norm-big": [*clipped_big, norm_big],
        "l2_normalize": [anyclip.l2_normalize(a)],
        "l2_normalize-axis0": [anyclip.l2_normalize(a, axis=0)],
        "l2_normalize-random": [anyclip.l2_normalize(r)],
    }


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("dtype", half_gen.DTYPES)
def test_torch_compile_half_precision_rounds_each_step_as_tf(backend, compile_fullgraph, dtype):
    """float16 and bfloat16 under Inductor (one compiled function for every call): each
    output within :data:`COMPILED_HALF_ULP` of TF 2.21's (``tests/data/tf_compile_half.npz``)."""
    args = [backend.asarray(v, dtype) for v in half_gen.inputs().values()]
    _half_calls(*args)  # eager first: anyclip's type cache is warm when Dynamo traces
    compiled = compile_fullgraph(_half_calls)(*args)
    assert list(compiled) == list(COMPILED_HALF_ULP[dtype])
    for name, outs in compiled.items():
        for i, got in enumerate(outs):
            want = HALF_TF[f"{dtype}/{name}/{i}"]
            ulp = COMPILED_HALF_ULP[dtype][name]
            assert_array(got, want, backend=backend, dtype=dtype, ulp=ulp, what=f"{name} {i}")


def _half_grad_global(a: Any, b: Any) -> list[Any]:
    clipped, norm = anyclip.clip_by_global_norm([a, b], half_gen.CLIP)
    return [*clipped, norm]


#: The anyclip calls of ``make_tf_compile_half.py``'s :func:`grad_cases`: name -> outputs
HALF_GRAD_CALLS: dict[str, Callable[[Any, Any], list[Any]]] = {
    "clip_by_norm": lambda a, b: [anyclip.clip_by_norm(a, half_gen.CLIP)],
    "clip_by_global_norm": _half_grad_global,
    "global_norm": lambda a, b: [anyclip.global_norm([a, b])],
    "l2_normalize": lambda a, b: [anyclip.l2_normalize(a)],
    "normalize": lambda a, b: list(anyclip.normalize(a)),
    "norm": lambda a, b: [anyclip.norm(a)],
}


#: The arrays each case of :data:`HALF_GRAD_CALLS` is differentiated in (``a``; ``a, b``)
HALF_GRAD_ARGS = {"clip_by_global_norm": 2, "global_norm": 2}


def _half_grad_losses(leaves: dict[str, list[Any]], ws: dict[str, list[Any]]) -> Any:
    """``sum(out * w)`` of every case, each case on its own copies of the arrays."""
    total = None
    for name, (a, b) in leaves.items():
        for out, w in zip(HALF_GRAD_CALLS[name](a, b), ws[name], strict=True):
            term = (out * w).sum()
            total = term if total is None else total + term
    return total


def _compiled_half_grads(
    backend: Backend, dtype: str, fn: Callable[..., Any]
) -> dict[str, list[Any]]:
    """The gradients of :func:`_half_grad_losses` run by ``fn``: name -> one per array."""
    x = half_gen.grad_inputs()
    leaves = {
        name: [backend.asarray(x[k], dtype, requires_grad=True) for k in ("a", "b")]
        for name in half_gen.GRAD_CASE_NAMES
    }
    shapes = {
        name: [tuple(o.shape) for o in fn(*leaves[name])] for name, fn in HALF_GRAD_CALLS.items()
    }
    ws = {
        name: [backend.asarray(w, dtype) for w in half_gen.weights(name, shapes[name])]
        for name in half_gen.GRAD_CASE_NAMES
    }
    fn(leaves, ws).backward()
    return {n: [t.grad for t in leaves[n][: HALF_GRAD_ARGS.get(n, 1)]] for n in leaves}


#: How far ``torch.compile``'s float16 and bfloat16 gradients (of ``sum(out * w)``,
#: :data:`HALF_GRAD_CALLS`) may be from eager anyclip's and from TF 2.21's
#: (``tests/data/tf_compile_half.npz``): ``(to eager, to TF)`` in ULP of each element, measured
#: with torch 2.13's Inductor on the CPU. Inductor computes a fused backward in float32 and
#: rounds only what it stores; anyclip rounds each backward step where eager torch and TF do
#: (``anyclip._numerics.torch_rounded``, ``anyclip._gradients.product``, ``divided`` and
#: ``uses``), and the compiled gradients are eager's bit for bit (before: 1 ULP off, or more
#: where they cancel, on up to 1,160 of 1,280 elements: docs/tf-behaviour.md). A distance
#: from TF is eager anyclip's own (TF's float16 sums add squares partly in float16).
#: What is left (declared there): the order of Inductor's float32 sums in the backward (a
#: float16 ``norm``: 7 of 1,200 elements 1 ULP from eager's).
COMPILED_HALF_GRAD_ULP: dict[str, dict[str, tuple[int, int]]] = {
    "bfloat16": {
        "clip_by_norm": (0, 0),
        "clip_by_global_norm": (0, 0),
        "global_norm": (0, 0),
        "normalize": (0, 0),
        "norm": (0, 0),
    },
    "float16": {
        "clip_by_norm": (0, 32),
        "clip_by_global_norm": (0, 0),
        "global_norm": (0, 0),
        "normalize": (0, 0),
        "norm": (1, 1),
    },
}
#: The cases whose compiled gradients are not all eager's: ``(to eager, to TF)`` in ULP of
#: the largest gradient entry. ``l2_normalize`` (its rsqrt's gradient ``-0.5 * r**3 * dy``
#: summed over the axes in float32, in Inductor's order): 35 (bfloat16) and 43 (float16)
#: of 1,200 elements apart from eager's, by at most a quarter and half of that ULP.
COMPILED_HALF_GRAD_SCALED_ULP: dict[str, dict[str, tuple[int, int]]] = {
    "bfloat16": {"l2_normalize": (1, 1)},
    "float16": {"l2_normalize": (1, 1)},
}


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("dtype", half_gen.DTYPES)
def test_torch_compile_half_precision_gradients_round_each_step(backend, compile_fullgraph, dtype):
    """float16 and bfloat16 gradients under Inductor (one compiled function for every case)
    against eager anyclip's and TF 2.21's (``tf.GradientTape``) gradients of the same sums,
    within :data:`COMPILED_HALF_GRAD_ULP` (each element) or
    :data:`COMPILED_HALF_GRAD_SCALED_ULP` (ULP of the largest entry)."""
    eager = _compiled_half_grads(backend, dtype, _half_grad_losses)
    compiled = _compiled_half_grads(backend, dtype, compile_fullgraph(_half_grad_losses))
    exact, scaled = COMPILED_HALF_GRAD_ULP[dtype], COMPILED_HALF_GRAD_SCALED_ULP[dtype]
    assert sorted({**exact, **scaled}) == sorted(half_gen.GRAD_CASE_NAMES)
    for name in half_gen.GRAD_CASE_NAMES:
        for i, (got, e) in enumerate(zip(compiled[name], eager[name], strict=True)):
            want_tf = HALF_TF[f"{dtype}/grad/{name}/{i}"]
            scale = None if name in exact else float(np.abs(want_tf).max())
            to_eager, to_tf = exact[name] if name in exact else scaled[name]
            want_eager = backend.to_numpy(e).astype(np.float32)
            for want, ulp, ref in ((want_eager, to_eager, "eager"), (want_tf, to_tf, "TF")):
                assert_array(
                    got,
                    want,
                    backend=backend,
                    dtype=dtype,
                    ulp=ulp,
                    scale=scale,
                    what=f"{name} {i} against {ref}",
                )


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
# Inductor's C++ code generator warns on any kernel that mixes the two half types (here the
# bfloat16 input cast to float16), not about anyclip
@pytest.mark.filterwarnings("ignore:bf16 and fp16 are mixed in the scheduler node:UserWarning")
def test_torch_compile_unhalved_norm_rounds_its_root_as_tf(backend, compile_fullgraph):
    """The sums TF does not halve (``tf.norm`` in ``accumulate_dtype``) round their root too.

    ``norm`` of bfloat16 ``[8, 2, 1.25]`` accumulated in float16 is TF's norm of the float16
    cast, cast back: the squares and their sum 69.5625 are exact, its root 8.3404... rounds
    to float16 8.34375, a tie between bfloat16 8.3125 and 8.375 that goes to even, 8.375
    (live TF 2.21: 8.375). Compiled, the root was rounded once, from float32, to 8.3125.
    """
    root = np.float16(np.sqrt(np.float32(69.5625)))
    assert root == np.float16(8.34375)  # midway: bfloat16 has 7 bits after the point
    x = backend.asarray([8.0, 2.0, 1.25], "bfloat16")

    def fn(x: Any) -> Any:
        return anyclip.norm(x, accumulate_dtype=backend.module.float16)

    fn(x)  # eager first: anyclip's type cache is warm when Dynamo traces
    got = compile_fullgraph(fn)(x)
    assert_array(got, np.float32(8.375), backend=backend, dtype="bfloat16", what="norm")


def _bfloat16(values: Any) -> np.ndarray:
    """``values`` rounded to bfloat16, as float32 (TF rounds each bfloat16 op so, once)."""
    from .conftest import rounded

    return rounded(np.asarray(values, dtype=np.float32), "bfloat16").astype(np.float32)


#: float32 inputs of :func:`test_compiled_accumulate_dtype_narrower_rounds_as_tf`
NARROWED_X = np.array([[0.1, -0.2], [0.3, 0.05]], dtype=np.float32)

#: its calls (:func:`_narrowed_expected`'s keys; static: ``tests/_first_call_worker.py``
#: imports this module outside the package, where the expected values' import fails)
NARROWED_NAMES = ("norm", "clip_by_norm", "clip_by_norm-axes0", "norm-axis0", "l2_normalize-axis0")


def _narrowed_expected() -> dict[str, np.ndarray]:
    """TF's functions on ``NARROWED_X`` cast to bfloat16, cast back (live TF 2.21: the same).

    Each bfloat16 step computed in float32 and rounded once; each column's two squares add
    exactly in float32, and so do all four. ``clip_by_norm`` at 1 of a norm below 1 is the
    rounded input.
    """
    xb = _bfloat16(NARROWED_X)
    sums = _bfloat16(_bfloat16(xb * xb).sum(axis=0, dtype=np.float32))
    inv = _bfloat16(np.float32(1) / np.sqrt(sums))
    total = _bfloat16(_bfloat16(xb * xb).sum(dtype=np.float32))
    return {
        "norm": _bfloat16(np.sqrt(total)),
        "clip_by_norm": xb,
        "clip_by_norm-axes0": xb,
        "norm-axis0": _bfloat16(np.sqrt(sums)),
        "l2_normalize-axis0": _bfloat16(xb * inv),
    }


def _narrowed_call(name: str, x: Any, acc: Any) -> Any:
    if name == "norm":
        return anyclip.norm(x, accumulate_dtype=acc)
    if name == "clip_by_norm":
        return anyclip.clip_by_norm(x, 1.0, accumulate_dtype=acc)
    if name == "clip_by_norm-axes0":
        return anyclip.clip_by_norm(x, 1.0, axes=0, accumulate_dtype=acc)
    if name == "norm-axis0":
        return anyclip.norm(x, axis=0, accumulate_dtype=acc)
    return anyclip.l2_normalize(x, axis=0, accumulate_dtype=acc)


@pytest.mark.parametrize("backend", ["torch", "jax"], indirect=True)
@pytest.mark.parametrize("name", NARROWED_NAMES)
def test_compiled_accumulate_dtype_narrower_rounds_as_tf(backend, name):
    """float32 input, ``accumulate_dtype=bfloat16``, under ``torch.compile`` and ``jax.jit``:
    the casts to bfloat16 and back round as eagerly (Inductor dropped the cast: the clipped
    input came back unrounded, ``0.1`` for TF's ``0.10009766``; XLA's ``l2_normalize`` and
    Inductor's ``norm`` were 1 to 3 bfloat16 ULP off)."""
    x = backend.asarray(NARROWED_X, "float32")

    def fn(x: Any) -> Any:
        return _narrowed_call(name, x, "bfloat16")

    fn(x)  # eager first: anyclip's type cache is warm when the compiler traces
    got = _compiled(backend, fn)(x)
    expected = _narrowed_expected()
    assert set(expected) == set(NARROWED_NAMES)  # every call is a case
    want = expected[name]
    assert_array(got, want, backend=backend, dtype="float32", what=name)


def _compiled(backend: Backend, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` under ``torch.compile(fullgraph=True)`` (a fresh Dynamo cache) or ``jax.jit``."""
    if backend.library == "torch":
        backend.module._dynamo.reset()
        return backend.module.compile(fn, fullgraph=True, backend=TORCH_COMPILER)
    import jax

    return jax.jit(fn)


@pytest.mark.parametrize("backend", ["torch", "jax"], indirect=True)
def test_compiled_unhalved_bfloat16_squares_round_as_tf(backend):
    """The whole sum of bfloat16 squares (``tf.norm``'s, in ``accumulate_dtype``) rounds each
    square compiled too: ``[1.0078125, 2, 1.5, 0.875]``'s squares round to ``1.015625 + 4 +
    2.25 + 0.765625 = 8.03125``, a bfloat16 tie that goes to 8 (root 2.828125, live TF
    2.21's); Inductor kept the first square unrounded (8.0313...: 8.0625, root 2.84375)."""
    x = backend.asarray([1.0078125, 2.0, 1.5, 0.875], "float32")

    def fn(x: Any) -> Any:
        return anyclip.norm(x, accumulate_dtype="bfloat16")

    fn(x)  # eager first: anyclip's type cache is warm when the compiler traces
    want = _bfloat16(np.sqrt(np.float32(8.0)))
    assert want == np.float32(2.828125)
    assert_array(_compiled(backend, fn)(x), want, backend=backend, dtype="float32", what="norm")


@pytest.mark.parametrize("backend", ["torch", "jax"], indirect=True)
def test_compiled_keras_global_norm_rounds_its_total_as_keras(backend):
    """Keras's bfloat16 global norm (``global_clipnorm``) rounds its total before the root:
    ``[1]`` and ``[0.09375]`` sum to 1.0087890625, bfloat16 1.0078125, whose root 1.0039
    rounds to 1 (live Keras 3 on TF 2.21: 1.0); Inductor took the root of the float32 total,
    1.0044, to 1.0078125."""
    from anyclip import _clip

    a = backend.asarray([1.0], "bfloat16")
    b = backend.asarray([0.09375], "bfloat16")

    def fn(a: Any, b: Any) -> Any:
        return _clip.keras_global_norm([a, b])

    fn(a, b)  # eager first: anyclip's type cache is warm when the compiler traces
    total = _bfloat16(np.float32(1.0) + np.float32(0.09375) ** 2)
    want = _bfloat16(np.sqrt(total))
    assert want == np.float32(1.0)
    got = _compiled(backend, fn)(a, b)
    assert_array(got, want, backend=backend, dtype="bfloat16", what="keras global norm")


@pytest.mark.live_tf
def test_tf_compile_half_reference_is_tfs(tmp_path):
    # the committed file is still what TF 2.21 gives (run with --live-tf). Imported here:
    # tests/_first_call_worker.py imports this module outside the tests package
    from .conftest import assert_live_reference

    assert_live_reference(HALF_SCRIPT, HALF_TF, tmp_path)


#: The gradients of the half-precision adapter test: multiples of 1/8 up to 15/8 (exact in
#: both dtypes, their sums of squares exact in float32 in any order), times a power of two per
#: step (the last a spike).
HALF_STEP_SCALES = (1.0, 2.0, 0.5, 16.0)


def _half_grads(torch: Any, dtype: Any, step: int) -> list[Any]:
    rng = np.random.default_rng(2113)
    base = [rng.integers(-15, 16, s) / 8 for s in ((16, 24), (37,))]
    return [torch.tensor(b * HALF_STEP_SCALES[step], dtype=torch.float32).to(dtype) for b in base]


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("dtype", half_gen.DTYPES)
def test_torch_compile_half_precision_adapters_match_references(backend, compile_fullgraph, dtype):
    """float16 and bfloat16 under Inductor, one compiled step per dtype: ``QuantileClip``
    against autoclip's (live), ``ZClip`` against zclip's (live), and AGC (``layout="timm"``)
    against timm's (``tests/data/timm_agc.npz``), each bit for bit. Eagerly they are; compiled,
    the rounding to the dtype between steps that Inductor skips is made (before: ``ZClip``'s
    factor rounded to the dtype before the product, ``QuantileClip``'s norms and factor and
    AGC's unit norms not rounded)."""
    torch = backend.module
    autoclip = pytest.importorskip("autoclip.torch.quantile")
    zclip = pytest.importorskip("zclip")
    at = pytest.importorskip("anyclip.torch")
    tdtype = getattr(torch, dtype)

    def params() -> list[Any]:
        return [
            torch.nn.Parameter(torch.zeros(g.shape, dtype=tdtype))
            for g in _half_grads(torch, tdtype, 0)
        ]

    ours_q, ours_z, ref_q, ref_z = params(), params(), params(), params()
    quantile, ref_quantile = at.QuantileClip(ours_q), autoclip.QuantileClip(ref_q)
    z, ref_zclip = at.ZClip(warmup_steps=2), zclip.ZClip(warmup_steps=2)
    ref_module = torch.nn.ParameterList(ref_z)
    cases = [c for c in TIMM_HALF_CASES if c.startswith(f"{dtype}/")]
    agc_g = [backend.asarray(TIMM_AGC[f"{c}/g"], dtype) for c in cases]
    agc_p = [backend.asarray(TIMM_AGC[f"{c}/p"], dtype) for c in cases]

    def step(gs: list[Any], ps: list[Any]) -> list[Any]:
        quantile.step()
        z.step(ours_z)
        return [
            tree.adaptive_clip([g], [p], clip, TIMM_EPS, layout="timm")[0]
            for g, p, clip in zip(gs, ps, (float(c.rsplit("/", 1)[1]) for c in cases), strict=True)
        ]

    compiled = compile_fullgraph(step)
    for i in range(len(HALF_STEP_SCALES)):
        for ps in (ours_q, ours_z, ref_q, ref_z):
            for p, g in zip(ps, _half_grads(torch, tdtype, i), strict=True):
                p.grad = g
        agc = compiled(agc_g, agc_p)
        ref_quantile.step()
        ref_zclip.step(ref_module)
        for what, ours, ref in (("QuantileClip", ours_q, ref_q), ("ZClip", ours_z, ref_z)):
            for k, (o, r) in enumerate(zip(ours, ref, strict=True)):
                want = r.grad.float().numpy()
                assert_array(o.grad, want, backend=backend, dtype=dtype, what=f"{what} {i} {k}")
    for c, got in zip(cases, agc, strict=True):
        assert_array(got, TIMM_AGC[f"{c}/out"], backend=backend, dtype=dtype, what=f"AGC {c}")
