"""anyclip's first calls in a fresh process made under a trace, for ``tests/test_compile.py``.

Run as ``python tests/_first_call_worker.py MODE OUT``. Each mode imports one framework and
anyclip, checks that no anyclip call has run yet (anyclip's per-dtype caches are empty), then
runs every scenario of its mode (:data:`MODES`) in turn, writing ``{scenario: "ok" or the
failure}`` as JSON to ``OUT``. In every scenario the traced call comes first and the eager one
after it (a value cached while tracing and reused eagerly would be a leaked tracer, or a fake
or inference tensor); the traced result must equal the eager one, which the other tests compare
with TF's.

* ``torch``: ``torch.compile(fn, fullgraph=True, backend="aot_eager")`` on tensors that require
  a gradient, then ``.backward()`` (Dynamo cannot trace lazily built state such as a class
  definition); the ``anyclip.torch`` adapters and norm-history objects compiled the same way.
  Each compiled function (the stateful ones aside) is then called once more on new inputs,
  where Dynamo must not compile it again.
* ``torch-inference``: the first calls under ``torch.inference_mode()`` (as a validation pass
  run before training), then training calls with gradients.
* ``jax``: ``jax.jit(jax.grad(loss))`` first, then eager (float32), and the reverse order
  (float64, where eager calls fill the caches and ``jax.jit`` follows); the
  ``anyclip.optax`` transformations with ``init`` and ``update`` first under ``jax.jit``.
* ``jax-vmap``: ``jax.vmap`` first, then eager row by row.

Within one process only the first scenario meets empty caches for its dtype: the modes order
the scenarios so that each framework's float32 and float64 paths are first reached traced.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

M = [[3.0, 4.0], [6.0, 8.0]]
A = [3.0, 4.0]
B = [[12.0]]

#: The cases also run in float64 (first reach of the float64 kernels, gradients included).
FLOAT64_CASES = (
    "clip_by_value",
    "clip_by_norm-axes1",
    "clip_by_global_norm",
    "global_norm",
    "norm-ord-euclidean",
    "norm-ord-1",
    "norm-matrix-1",
    "l2_normalize",
    "normalize",
    "tree-clip_by_global_norm",
)


def _cases() -> dict[str, Any]:
    """``tests/test_compile.py``'s CASES (closed-over arguments; NumPy data)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_compile import CASES

    return CASES


def _float64_case(name: str, dtypes: list[str]) -> bool:
    """Whether a float32 case also runs in float64 (TF's clip_by_average_norm is float32 only)."""
    return dtypes == ["float32"] * len(dtypes) and "average_norm" not in name


def _caches_empty() -> None:
    from anyclip import _numerics, _policy_dtypes
    from anyclip._kernels import _CHOSEN

    filled = {
        name: len(c)
        for name, c in (("_KINDS", _policy_dtypes._KINDS), ("_CHOSEN", _CHOSEN))
        if len(c)
    } | ({"_CONSTANTS": 1} if _numerics._CONSTANTS else {})
    assert not filled, f"anyclip was called before the first scenario: {filled}"


# ====================================================================== torch
def _torch_leaves(node: Any) -> list[Any]:
    if node is None:
        return []
    if isinstance(node, dict):
        return [x for v in node.values() for x in _torch_leaves(v)]
    if isinstance(node, (list, tuple)):
        return [x for v in node for x in _torch_leaves(v)]
    return [node]


def _torch_same(got: Any, want: Any, what: str) -> None:
    import torch

    g, w = _torch_leaves(got), _torch_leaves(want)
    assert len(g) == len(w), (what, len(g), len(w))
    for i, (a, b) in enumerate(zip(g, w, strict=True)):
        assert type(a) is type(b), (what, i, type(a), type(b))
        if not isinstance(b, torch.Tensor):
            assert a == b or (a != a and b != b), (what, i, a, b)
            continue
        assert (a.dtype, a.shape, a.device) == (b.dtype, b.shape, b.device), (what, i, a, b)
        torch.testing.assert_close(a, b, rtol=4e-7, atol=0, equal_nan=True, msg=f"{what} {i}")


def _again(compiled: Callable[..., Any], *args: Any) -> None:
    """Call ``compiled`` once more on new inputs like the first: Dynamo must not compile again.

    anyclip remembers per type and dtype what it works out; a first call traced by
    ``torch.compile`` fills those memos, and a trace that guarded on a memo it filled would
    fail its own guard here (``anyclip._memo`` says how the memos avoid it).
    """
    import torch

    with torch.compiler.set_stance("fail_on_recompile"):
        compiled(*args)


def _torch_case_scenarios(torch: Any, dtype: Any) -> dict[str, Callable[[], None]]:
    cases = _cases()
    out: dict[str, Callable[[], None]] = {}
    for name, case in cases.items():
        if not case.torch:
            continue
        dtypes = case.dtypes or []
        dtypes = dtypes + ["float32"] * (len(case.args) - len(dtypes))
        if dtype == torch.float64 and (
            name not in FLOAT64_CASES or not _float64_case(name, dtypes)
        ):
            continue
        if dtype == torch.float64:
            dtypes = ["float64"] * len(dtypes)

        def run(case: Any = case, dtypes: list[str] = dtypes, name: str = name) -> None:
            grad = case.grad and dtypes[0] != "int32"

            def inputs() -> list[Any]:
                ts = [
                    torch.tensor(a, dtype=getattr(torch, d))
                    for a, d in zip(case.args, dtypes, strict=True)
                ]
                if grad:
                    ts[0].requires_grad_(True)
                return ts

            if case.min_torch is not None and torch.__version__ < case.min_torch:
                # declared: this torch's Dynamo refuses the case (test_compile's min_torch)
                try:
                    torch.compile(case.fn, fullgraph=True, backend="aot_eager")(*inputs())
                except torch._dynamo.exc.Unsupported:
                    return
                msg = f"{name}: torch {torch.__version__} traced it; lower its min_torch"
                raise AssertionError(msg)
            results = []
            compiled = torch.compile(case.fn, fullgraph=True, backend="aot_eager")
            for fn in (compiled, case.fn):
                args = inputs()
                out = fn(*args)
                if grad:
                    loss = sum(
                        (t * torch.arange(1, t.numel() + 1, dtype=t.dtype).reshape(t.shape)).sum()
                        for t in _torch_leaves(out)
                        if t.is_floating_point()
                    )
                    loss.backward()
                    results.append((out, args[0].grad))
                else:
                    results.append((out, None))
            _torch_same(results[0][0], results[1][0], f"{name} output")
            if grad:
                _torch_same(results[0][1], results[1][1], f"{name} gradient")
            _again(compiled, *inputs())

        out[f"{name}-{str(dtype).rsplit('.', 1)[-1]}"] = run
    return out


def _torch_adapter_scenarios(torch: Any) -> dict[str, Callable[[], None]]:
    import anyclip.torch as at
    from anyclip.constraints import MaxNorm

    def params(grads: list[Any] | None = None) -> list[Any]:
        grads = grads or [[3.0, 4.0], None, [[12.0, -1.0], [0.5, 2.0]]]
        ps = []
        for g in grads:
            p = torch.nn.Parameter(torch.ones(np.shape(g) if g is not None else (2,)))
            p.grad = None if g is None else torch.tensor(g)
            ps.append(p)
        return ps

    def both(fn: Callable[[list[Any]], Any], name: str) -> None:
        ours, eager = params(), params()
        compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
        got = compiled(ours)
        want = fn(eager)
        _torch_same(got, want, f"{name} result")
        _torch_same([p.grad for p in ours], [p.grad for p in eager], f"{name} grads")
        _torch_same([p.data for p in ours], [p.data for p in eager], f"{name} params")
        _again(compiled, ours)  # the same parameters, as each step of a training loop

    def stateful(make: Callable[[list[Any]], Callable[[], Any]], name: str, steps: int) -> None:
        ours, eager = params(), params()
        step_c = torch.compile(make(ours), fullgraph=True, backend="aot_eager")
        step_e = make(eager)
        for i in range(steps):
            for ps in (ours, eager):
                for p, g in zip(ps, ([3.0, 4.0], None, [[12.0, -1.0], [0.5, 2.0]]), strict=True):
                    if g is not None:
                        p.grad = torch.tensor(g) * (1.0 + 4.0 * (i == steps - 1))
            _torch_same(step_c(), step_e(), f"{name} step {i}")
            _torch_same([p.grad for p in ours], [p.grad for p in eager], f"{name} grads {i}")

    def zclip(ps: list[Any]) -> Callable[[], Any]:
        z = at.ZClip(warmup_steps=2)
        return lambda: z.step(ps)

    def quantile(ps: list[Any]) -> Callable[[], Any]:
        q = at.QuantileClip(ps, history_length=4)
        return lambda: q.step()

    def spike(ps: list[Any]) -> Callable[[], Any]:
        opt = at.skip_on_spike(torch.optim.SGD(ps, lr=0.1), 3, 1.0)
        before = torch.compile(lambda: opt.before_step(), fullgraph=True, backend="aot_eager")
        after = torch.compile(lambda s: opt.after_step(s), fullgraph=True, backend="aot_eager")

        def step() -> Any:
            saved = before()
            opt.optimizer.step()
            after(saved)
            return [p.data.clone() for p in ps]

        return step

    return {
        "clip_grad_norm_": lambda: both(lambda ps: at.clip_grad_norm_(ps, 6.5), "clip_grad_norm_"),
        "clip_grad_value_": lambda: both(lambda ps: at.clip_grad_value_(ps, 3.5), "value_"),
        "clip_grad_by_value_": lambda: both(
            lambda ps: at.clip_grad_by_value_(ps, -1.0, 3.5), "by_value_"
        ),
        "clip_grad_by_norm_": lambda: both(
            lambda ps: at.clip_grad_by_norm_(ps, 2.5, axes=0), "by_norm_"
        ),
        "get_total_norm": lambda: both(
            lambda ps: at.get_total_norm([p.grad for p in ps if p.grad is not None], 1.0),
            "get_total_norm",
        ),
        "clip_grads_with_norm_": lambda: both(
            lambda ps: at.clip_grads_with_norm_(ps, 2.0, torch.tensor(13.0)), "with_norm_"
        ),
        "adaptive_clip_grad_": lambda: both(
            lambda ps: at.adaptive_clip_grad_(ps, 0.01), "adaptive_clip_grad_"
        ),
        "constrain_": lambda: both(
            lambda ps: at.constrain_(ps, {p: MaxNorm(1.0, axis=None) for p in ps}), "constrain_"
        ),
        "ZClip": lambda: stateful(zclip, "ZClip", 4),
        "QuantileClip": lambda: stateful(quantile, "QuantileClip", 4),
        "skip_on_spike": lambda: stateful_eager_opt(spike),
    }


def stateful_eager_opt(make: Callable[[list[Any]], Callable[[], Any]]) -> None:
    """skip_on_spike: its compiled halves around the optimizer's step, then an eager twin."""
    import torch

    import anyclip.torch as at

    grads = [[3.0, 4.0], [[12.0, -1.0], [0.5, 2.0]]]

    def fresh() -> list[Any]:
        return [torch.nn.Parameter(torch.ones(np.shape(g))) for g in grads]

    ours, eager = fresh(), fresh()
    step_c = make(ours)
    opt_e = at.skip_on_spike(torch.optim.SGD(eager, lr=0.1), 3, 1.0)
    for i in range(6):
        scale = 100.0 if i == 5 else 1.0 + i / 10
        for ps in (ours, eager):
            for p, g in zip(ps, grads, strict=True):
                p.grad = torch.tensor(g) * scale
        got = step_c()
        opt_e.step()
        _torch_same(got, [p.data for p in eager], f"skip_on_spike step {i}")


def _torch_embedding_scenarios(torch: Any) -> dict[str, Callable[[], None]]:
    import anyclip
    from anyclip import constraints

    def run(fn: Callable[..., Any], args: Callable[[], list[Any]], name: str) -> None:
        a, b = args(), args()
        a[0].requires_grad_(True)
        b[0].requires_grad_(True)
        compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
        got = compiled(*a)
        want = fn(*b)
        got.sum().backward()
        want.sum().backward()
        _torch_same(got, want, f"{name} output")
        _torch_same(a[0].grad, b[0].grad, f"{name} gradient")
        c = args()
        c[0].requires_grad_(True)
        _again(compiled, *c)

    def table() -> list[Any]:
        return [torch.tensor([[3.0, 4.0], [0.5, 0.0], [6.0, 8.0]]), torch.tensor([2, 0, 2])]

    def weights() -> list[Any]:
        return [torch.tensor([[3.0, 4.0], [0.5, 0.0]])]

    return {
        "embedding_lookup": lambda: run(
            lambda p, i: anyclip.embedding_lookup(p, i, 1.0), table, "embedding_lookup"
        ),
        **{
            f"constraints.{n}": lambda n=n: run(getattr(constraints, n), weights, n)
            for n in ("max_norm", "min_max_norm", "unit_norm", "non_neg")
        },
    }


def _torch_inference_scenarios(torch: Any) -> dict[str, Callable[[], None]]:
    import anyclip

    fns = {
        "clip_by_norm": lambda t: anyclip.clip_by_norm(t, 1.0),
        "clip_by_global_norm": lambda t: anyclip.clip_by_global_norm([t], 1.0)[0][0],
        "clip_by_value": lambda t: anyclip.clip_by_value(t, -1.0, 3.5),
        "l2_normalize": lambda t: anyclip.l2_normalize(t),
        "norm": lambda t: anyclip.norm(t, ord=3),
    }

    def run(fn: Callable[[Any], Any], name: str) -> None:
        for dtype in (torch.float32, torch.float64):
            with torch.inference_mode():
                first = fn(torch.tensor(A, dtype=dtype))
            x = torch.tensor(A, dtype=dtype, requires_grad=True)
            out = fn(x)
            out.sum().backward()  # with constants made under inference_mode: RuntimeError
            _torch_same(first, out.detach(), f"{name} {dtype}")
            assert x.grad is not None and bool(torch.isfinite(x.grad).all()), (name, x.grad)

    return {f"inference-{n}": lambda n=n, f=f: run(f, n) for n, f in fns.items()}


def torch_mode(inference: bool) -> dict[str, Callable[[], None]]:
    import torch

    if inference:
        return _torch_inference_scenarios(torch)
    return {
        **_torch_case_scenarios(torch, torch.float32),
        **_torch_case_scenarios(torch, torch.float64),
        **_torch_adapter_scenarios(torch),
        **_torch_embedding_scenarios(torch),
    }


# ======================================================================== JAX
def _jax_same(got: Any, want: Any, what: str, *, grad: bool = False, sums: bool = False) -> None:
    """Same tree, types, dtypes, shapes; values within 2 ULP (XLA fuses under jit).

    Gradients cancel: compared on the scale of the whole gradient, as ``tests/test_compile.py``;
    ``sums`` (sums over examples, which cancel too): within 8 ULP of the largest entry.
    """
    import jax

    g, w = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want), what
    for i, (a, b) in enumerate(zip(g, w, strict=True)):
        assert isinstance(a, jax.Array) and isinstance(b, jax.Array), (what, i, type(a), type(b))
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (what, i, a, b)
        ref, actual = np.asarray(b), np.asarray(a)
        eps = float(np.finfo(ref.dtype).eps) if ref.dtype.kind == "f" else 0.0
        # bfloat16 as float32, which holds it exactly: NumPy 1.26's allclose cannot take it
        if ref.dtype.name == "bfloat16":
            ref, actual = ref.astype(np.float32), actual.astype(np.float32)
        scale = float(np.max(np.abs(ref[np.isfinite(ref)]), initial=1.0))
        atol = 1e-6 * scale if grad else 8 * eps * scale if sums else 0.0
        np.testing.assert_allclose(
            actual,
            ref,
            rtol=2 * eps if not grad else 1e-5,
            atol=atol,
            err_msg=f"{what} {i}",
        )


def _jax_case_scenarios(jax: Any, vmap: bool) -> dict[str, Callable[[], None]]:
    import jax.numpy as jnp

    cases = _cases()
    out: dict[str, Callable[[], None]] = {}
    for name, case in cases.items():
        for width in ("float32",) if vmap else ("float32", "float64"):
            dtypes = case.dtypes or []
            dtypes = dtypes + ["float32"] * (len(case.args) - len(dtypes))
            if width == "float64":
                if name not in FLOAT64_CASES or not _float64_case(name, dtypes):
                    continue
                dtypes = ["float64"] * len(dtypes)

            def inputs(case: Any = case, dtypes: list[str] = dtypes, k: float = 1.0) -> list[Any]:
                return [
                    jnp.asarray(np.asarray(a) * (k if d.startswith("float") else 1), dtype=d)
                    for a, d in zip(case.args, dtypes, strict=True)
                ]

            def loss(*args: Any, fn: Any = case.fn) -> Any:
                return sum(
                    jnp.sum(t * jnp.arange(1, t.size + 1, dtype=t.dtype).reshape(t.shape))
                    for t in jax.tree_util.tree_leaves(fn(*args))
                    if jnp.issubdtype(t.dtype, jnp.floating)
                )

            grad = case.grad and "accumulate" not in name

            def run_jit(
                case: Any = case,
                inputs: Any = inputs,
                loss: Any = loss,
                grad: bool = grad,
                name: str = name,
                eager_first: bool = width == "float64",
            ) -> None:
                f = jax.grad(loss) if grad else case.fn
                if eager_first:  # float64: the reverse order, eager calls fill the caches
                    eager = f(*inputs())
                    traced = jax.jit(f)(*inputs())
                else:  # a tracer cached under jit: UnexpectedTracerError in the eager call
                    traced = jax.jit(f)(*inputs())
                    eager = f(*inputs())
                _jax_same(traced, eager, name, grad=grad)

            def run_vmap(case: Any = case, inputs: Any = inputs, name: str = name) -> None:
                rows = [inputs(k=1.0), inputs(k=0.5)]
                batched = [jnp.stack([r[i] for r in rows]) for i in range(len(rows[0]))]
                first = jax.vmap(case.fn)(*batched)
                for j, r in enumerate(rows):
                    row = jax.tree_util.tree_map(lambda b, j=j: b[j], first)
                    _jax_same(row, case.fn(*r), f"{name} vmap row {j}")

            out[f"{name}-{width}"] = run_vmap if vmap else run_jit
    return out


def _optax_scenarios(jax: Any) -> dict[str, Callable[[], None]]:
    import jax.numpy as jnp
    import optax

    import anyclip.optax as ao

    def params() -> dict[str, Any]:
        # keys not in sorted order: jax.tree_util.tree_map gives the gradients sorted
        return {"w": jnp.asarray(M, jnp.float32), "b": jnp.asarray([0.5, -7.0], jnp.float32)}

    transforms: dict[str, Callable[[], Any]] = {
        "clip_by_global_norm": lambda: ao.clip_by_global_norm(1.0),
        "clip_by_global_norm-skip": lambda: ao.clip_by_global_norm(1.0, nonfinite="skip"),
        "clip_by_norm": lambda: ao.clip_by_norm(2.0, axes=0),
        "clip_by_value": lambda: ao.clip_by_value(-1.0, 1.0),
        "clip": lambda: ao.clip(1.0),
        "clip_by_block_rms": lambda: ao.clip_by_block_rms(1.0),
        "keras_clipping": lambda: ao.keras_clipping(clipnorm=1.0),
        "adaptive_grad_clip": lambda: ao.adaptive_grad_clip(0.1),
        "zclip": lambda: ao.zclip(warmup_steps=2),
        "quantile_clip": lambda: ao.quantile_clip(history_length=4),
        "skip_on_spike": lambda: ao.skip_on_spike(optax.sgd(0.1), 3, 1.0),
    }

    def run(make: Callable[[], Any], name: str) -> None:
        tx = make()
        p = params()
        state_j = jax.jit(tx.init)(p)  # the first anyclip.optax call of this transform
        state_e = tx.init(p)
        _jax_same(state_j, state_e, f"{name} init")
        update = jax.jit(tx.update)
        for i in range(4):
            g = jax.tree_util.tree_map(lambda x, i=i: x * (1.0 + 9.0 * (i == 3)), p)
            got, state_j = update(g, state_j, p)
            want, state_e = tx.update(g, state_e, p)
            _jax_same((got, state_j), (want, state_e), f"{name} update {i}")

    def constrain() -> None:
        from anyclip.constraints import MaxNorm

        p = params()
        got = jax.jit(lambda q: ao.constrain(q, MaxNorm(1.0)))(p)
        _jax_same(got, ao.constrain(p, MaxNorm(1.0)), "constrain")

    return {
        **{f"optax.{n}": lambda n=n, m=m: run(m, n) for n, m in transforms.items()},
        "optax.constrain": constrain,
    }


def _jax_kernel_scenarios(jax: Any) -> dict[str, Callable[[], None]]:
    """The JAX kernels' compiled helpers (kept per key in module dicts) first made under jit."""
    import jax.numpy as jnp

    import anyclip
    from anyclip import tree
    from anyclip._kernels._base import UPCAST_BLOCK

    rng = np.random.default_rng(0)
    data = {
        # more than one block: the cast runs as a compiled block loop (_kernels._jax._LOOPS)
        "block-loop-float16": jnp.asarray(rng.standard_normal(UPCAST_BLOCK + 5), jnp.float16),
        # float64 on the CPU: the compiled sums in TF's order (_kernels._jax._TF_ORDER)
        "tf-order-float64": jnp.asarray(rng.standard_normal(20_000), jnp.float64),
        # per-example clipping: the compiled row sums (_kernels._jax._TF_ORDER)
        "rows-sum-float64": {"w": jnp.asarray(rng.standard_normal((9, 5)), jnp.float64)},
    }
    fns: dict[str, Callable[[Any], Any]] = {
        "block-loop-float16": lambda a: anyclip.clip_by_global_norm(
            [a], 1.0, accumulate_dtype="float32"
        ),
        "tf-order-float64": lambda a: anyclip.clip_by_global_norm([a], 1.0),
        "rows-sum-float64": lambda a: tree.per_example_clip(a, 1.0),
    }

    def run(name: str) -> None:
        fn, x = fns[name], data[name]
        traced = jax.jit(fn)(x)
        # a tracer kept by a helper: UnexpectedTracerError in the eager call; XLA fuses the
        # per-example sums differently under an outer jit (the same in the other order)
        _jax_same(traced, fn(x), name, sums=name.startswith("rows-sum"))

    return {f"kernels.{n}": lambda n=n: run(n) for n in fns}


def jax_mode(vmap: bool) -> dict[str, Callable[[], None]]:
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    if vmap:
        return _jax_case_scenarios(jax, vmap=True)
    # the optax transforms first: their first anyclip call is under jit
    return {
        **_optax_scenarios(jax),
        **_jax_kernel_scenarios(jax),
        **_jax_case_scenarios(jax, vmap=False),
    }


MODES: dict[str, Callable[[], dict[str, Callable[[], None]]]] = {
    "torch": lambda: torch_mode(inference=False),
    "torch-inference": lambda: torch_mode(inference=True),
    "jax": lambda: jax_mode(vmap=False),
    "jax-vmap": lambda: jax_mode(vmap=True),
}


def main(mode: str, out: str) -> None:
    import anyclip  # noqa: F401

    scenarios = MODES[mode]()
    _caches_empty()
    results: dict[str, str] = {}
    for name, run in scenarios.items():
        if mode.startswith("torch"):
            import torch

            torch._dynamo.reset()  # one recompile budget per scenario (cases share lambdas)
        try:
            run()
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - every scenario reports its own failure
            results[name] = traceback.format_exc()[-3000:]
    Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
