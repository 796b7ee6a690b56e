"""``anyclip.torch.apply_if_finite``: optax's rule around a torch optimizer.

* Ported from optax 0.2.8, ``optax/transforms/_conditionality_test.py`` (the file installed
  with the package), ``ConditionalityTest.test_apply_if_finite`` (parameters ``sgd`` and
  ``stateful_sgd``), with a torch SGD wrapped by anyclip's function in place of optax's.
* optax 0.2.8, live: the decisions and counters of ``optax.apply_if_finite`` on the same
  seeded gradients (with NaN and inf steps), step by step; the parameters bit-equal to the
  bare torch optimizer stepped only where optax takes the step.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import anyclip.torch  # noqa: E402


# ------------------------------------------------ optax 0.2.8's own test, ported
@pytest.mark.parametrize("momentum", [None, 0.0], ids=["sgd", "stateful_sgd"])
def test_optax_apply_if_finite_on_torch(momentum):
    """optax 0.2.8 ``ConditionalityTest.test_apply_if_finite``, on ``torch.optim.SGD``."""
    p = torch.nn.Parameter(torch.tensor(0.0))
    kw = {} if momentum is None else {"momentum": momentum}
    opt = anyclip.torch.apply_if_finite(torch.optim.SGD([p], lr=1.0, **kw), 2)

    def step(x: float) -> None:
        opt.zero_grad()
        (p * x).backward()
        opt.step()

    step(1.0)  # one successful update
    assert p.item() == -1.0
    assert bool(opt.last_finite)
    for i in range(2):  # two rejected updates
        step(math.nan)
        assert p.item() == -1.0
        assert not bool(opt.last_finite)
        assert int(opt.notfinite_count) == i + 1
    step(1.0)  # the next successful update
    assert p.item() == -2.0
    assert bool(opt.last_finite)
    for i in range(2):  # again two rejected updates
        step(math.nan)
        assert p.item() == -2.0
        assert not bool(opt.last_finite)
        assert int(opt.notfinite_count) == i + 1
    step(math.nan)  # taken: the maximum is reached
    assert math.isnan(p.item())
    assert int(opt.total_notfinite) == 5


# ------------------------------------------------------- against live optax
OPTIMIZERS = {
    "sgd_dampening": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "nadam": lambda ps: torch.optim.NAdam(ps, lr=1e-2),
    "rprop": lambda ps: torch.optim.Rprop(ps, lr=1e-2),
}


def _grads(seed: int, steps: int, first_bad: bool) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(steps):
        g = [
            rng.standard_normal((3, 4)).astype(np.float32),
            rng.standard_normal(4).astype(np.float32),
        ]
        if (i == 0 and first_bad) or (i > 0 and rng.random() < 0.45):
            leaf = g[int(rng.integers(2))].reshape(-1)
            leaf[rng.integers(leaf.size)] = rng.choice([np.nan, np.inf, -np.inf])
        out.append(g)
    return out


@pytest.mark.parametrize("first_bad", [False, True], ids=["first-finite", "first-skipped"])
@pytest.mark.parametrize("max_errors", [-1, 0, 1, 3])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_same_decisions_as_optax_and_parameters_as_the_bare_optimizer(name, max_errors, first_bad):
    optax = pytest.importorskip("optax")
    jnp = pytest.importorskip("jax.numpy")
    grads = _grads(sum(map(ord, f"{name}{max_errors}")), 30, first_bad)
    start = [torch.randn(3, 4, generator=torch.Generator().manual_seed(1)), torch.zeros(4)]
    ps = [torch.nn.Parameter(t.clone()) for t in start]
    bare_ps = [torch.nn.Parameter(t.clone()) for t in start]
    opt = anyclip.torch.apply_if_finite(OPTIMIZERS[name](ps), max_errors)
    bare = OPTIMIZERS[name](bare_ps)
    ref = optax.apply_if_finite(optax.identity(), max_errors)
    state = ref.init([jnp.zeros((3, 4)), jnp.zeros(4)])
    update = ref.update
    taken = 0
    for g in grads:
        _, state = update([jnp.asarray(a) for a in g], state)
        for p, a in zip(ps, g, strict=True):
            p.grad = torch.from_numpy(a.copy())
        opt.step()
        assert bool(opt.last_finite) == bool(state.last_finite)
        assert int(opt.notfinite_count) == int(state.notfinite_count)
        assert int(opt.total_notfinite) == int(state.total_notfinite)
        assert opt.notfinite_count.dtype == torch.int32
        if bool(state.last_finite) or int(state.notfinite_count) > max_errors:  # optax's rule
            taken += 1
            for p, a in zip(bare_ps, g, strict=True):
                p.grad = torch.from_numpy(a.copy())
            bare.step()
        for p, q in zip(ps, bare_ps, strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=0, equal_nan=True)
    assert 0 < taken < len(grads) or max_errors <= 0


def test_is_an_optimizer_for_schedulers_and_round_trips_its_state():
    p = torch.nn.Parameter(torch.ones(2))
    opt = anyclip.torch.apply_if_finite(torch.optim.Adam([p], lr=0.1), 3)
    assert isinstance(opt, torch.optim.Optimizer)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for g in ([1.0, math.nan], [1.0, 2.0], [math.inf, 0.0]):
        p.grad = torch.tensor(g)
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 / 8)
    saved = copy.deepcopy(opt.state_dict())
    q = torch.nn.Parameter(p.detach().clone())
    other = anyclip.torch.apply_if_finite(torch.optim.Adam([q], lr=0.1), 3)
    other.load_state_dict(saved)
    assert int(other.notfinite_count) == 1
    assert int(other.total_notfinite) == 2
    assert not bool(other.last_finite)
    for o, t in ((opt, p), (other, q)):
        t.grad = torch.tensor([0.5, math.nan])
        o.step()
    torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert int(other.notfinite_count) == int(opt.notfinite_count) == 2


def test_counters_before_the_first_step_are_optaxs_initial_state():
    opt = anyclip.torch.apply_if_finite(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))]), 1)
    assert getattr(opt, "skipped", None) is None  # skip_on_spike's count: not kept here
    assert (int(opt.notfinite_count), bool(opt.last_finite), int(opt.total_notfinite)) == (
        0,
        True,
        0,
    )


@pytest.mark.parametrize("bad", [None, 1.5, "2", False])
def test_max_consecutive_errors_must_be_an_integer(bad: Any):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    with pytest.raises(TypeError, match="`max_consecutive_errors` must be an integer"):
        anyclip.torch.apply_if_finite(opt, bad)


def test_optimizer_must_be_a_torch_optimizer():
    with pytest.raises(TypeError, match=r"`optimizer` must be a torch\.optim\.Optimizer"):
        anyclip.torch.apply_if_finite("sgd", 2)


def test_load_state_dict_names_what_is_missing():
    opt = anyclip.torch.apply_if_finite(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))]), 1)
    with pytest.raises(KeyError, match="if_finite"):
        opt.load_state_dict({"optimizer": opt.optimizer.state_dict()})


def test_compiled_halves_step_as_the_eager_wrapper():
    """``before_step`` and ``after_step`` under ``torch.compile(fullgraph=True)``, around Adam."""
    grads = ([1.0, 2.0, 3.0], [math.nan, 1.0, 1.0], [math.inf, 0.0, 1.0], [1.0, 1.0, 1.0])
    runs = []
    for compiled in (False, True):
        ps = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))]
        opt = anyclip.torch.apply_if_finite(torch.optim.Adam(ps, lr=0.1), 1)
        before, after = opt.before_step, opt.after_step
        if compiled:
            before = torch.compile(before, fullgraph=True)
            after = torch.compile(after, fullgraph=True)
        seen = []
        for g in grads:
            ps[0].grad, ps[1].grad = torch.tensor(g), torch.ones(2)
            saved = before()
            opt.optimizer.step()
            after(saved)
            seen.append([p.detach().clone() for p in ps])
            seen.append([opt.notfinite_count.clone(), opt.total_notfinite.clone()])
        runs.append(seen)
    for a, b in zip(*runs, strict=True):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
    assert int(runs[1][-3][0]) == 2  # the inf step, the second in a row, was taken


# ------------------------------------------------ the undo: bit for bit, any tensors
def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bytes, for a comparison that tells NaN payloads and -0.0 apart."""
    return t.detach().clone().reshape(-1).view(torch.uint8)


def _all_bits(opt: Any) -> list[torch.Tensor]:
    out = []
    for g in opt.param_groups:
        for p in g["params"]:
            out.append(_bits(p))
            out += [_bits(v) for v in opt.state[p].values() if isinstance(v, torch.Tensor)]
    return out


def _special(dtype: torch.dtype) -> torch.Tensor:
    """NaNs with payloads, both zeros and infinities, the least subnormal, in ``dtype``."""
    real = {torch.complex64: torch.float32}.get(dtype, dtype)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    nan = torch.full((2,), math.nan, dtype=real).view(ints[torch.finfo(real).bits // 8])
    nan[1] += 3  # another payload
    v = torch.cat([nan.view(real), torch.tensor([0.0, -0.0, math.inf, -math.inf], dtype=real)])
    v = torch.cat([v, torch.tensor([torch.finfo(real).smallest_normal / 4], dtype=real)])
    return torch.complex(v, v.flip(0)) if dtype.is_complex else v


@pytest.mark.parametrize("wrap", ["apply_if_finite", "skip_on_spike"])
def test_a_skipped_step_restores_every_bit_of_every_dtype(wrap):
    # float16, bfloat16, float32, float64 and complex parameters holding NaNs with payloads,
    # -0.0, infinities and a subnormal (what an arithmetic blend of old and new would lose),
    # Adam's state created at a taken step; a NaN gradient's step is skipped
    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
    if wrap == "apply_if_finite":  # skip_on_spike's norm takes real gradients only
        dtypes.append(torch.complex64)
    ps = [torch.nn.Parameter(_special(dt)) for dt in dtypes]
    ps.append(torch.nn.Parameter(torch.ones(3, 4).t()))  # a non-contiguous one
    wrapped = (
        anyclip.torch.apply_if_finite(torch.optim.Adam(ps, lr=0.1), 5)
        if wrap == "apply_if_finite"
        else anyclip.torch.skip_on_spike(torch.optim.Adam(ps, lr=0.1))
    )
    for step in range(4):
        for p in ps:
            p.grad = torch.ones_like(p)
        if step >= 2:
            ps[1].grad[0] = math.nan  # skipped: the parameters' own NaNs do not count
        before = _all_bits(wrapped)
        wrapped.step()
        after = _all_bits(wrapped)
        assert bool(wrapped.last_step_applied) == (step < 2)
        if step >= 2:
            assert len(before) == len(after) == 4 * len(ps)  # step, exp_avg, exp_avg_sq
            for i, (a, b) in enumerate(zip(before, after, strict=True)):
                assert torch.equal(a, b), i


class _SharedCounter(torch.optim.Optimizer):
    """SGD whose state holds one counter tensor for every parameter (listed under each) and
    an average, written in place or (``anew=True``) made anew at each step."""

    def __init__(self, params: Any, anew: bool = False) -> None:
        super().__init__(params, {"lr": 0.1})
        self.counter = torch.zeros((), dtype=torch.int64)
        self.anew = anew

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        self.counter += 1
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                st["count"] = self.counter
                if "avg" not in st:
                    st["avg"] = torch.zeros_like(p)
                if self.anew:
                    st["avg"] = 0.5 * st["avg"] + p.grad
                else:
                    st["avg"].mul_(0.5).add_(p.grad)
                p.sub_(st["avg"] * g["lr"])


def _change(i: int, ps: list[Any], opt: Any, extra: Any) -> None:
    """What training code does between steps, done alike to both optimizers."""
    if i == 2:  # a parameter's data replaced (same object, other memory)
        ps[0].data = ps[0].data * 2
    if i == 4:  # a parameter group added
        opt.add_param_group({"params": [extra]})
    if i == 5:  # a parameter without a gradient at this step
        ps[1].grad = None


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.Adam(ps, lr=0.1),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5),
        _SharedCounter,
        lambda ps: _SharedCounter(ps, anew=True),
    ],
    ids=["adam", "sgd_dampening", "shared_state", "state_made_anew"],
)
def test_steps_as_the_bare_optimizer_while_the_tensors_change(make):
    # the snapshot kept between steps is made again where the tensors change: a parameter's
    # data replaced, a group added, a gradient missing, state created, state replaced at each
    # step, a state tensor shared by all parameters (undone once, not once per listing)
    gen = torch.Generator().manual_seed(3)
    start = [torch.randn(3, 4, generator=gen), torch.randn(5, generator=gen)]
    extra0 = torch.randn(2, generator=gen)
    runs = []
    for wrapped in (True, False):
        ps = [torch.nn.Parameter(t.clone()) for t in start]
        extra = torch.nn.Parameter(extra0.clone())
        opt = make(ps)
        if wrapped:
            opt = anyclip.torch.apply_if_finite(opt, 5)
        states = []
        for i in range(8):
            bad = i in (0, 3, 5, 6)  # the first step skipped: state as never created
            _change(i, ps, opt, extra)
            for j, p in enumerate([*ps, extra]):
                if p.grad is not None or i < 5 or j != 1:
                    p.grad = torch.full_like(p, 0.25 * (i + 1) * (j + 1))
            if bad:
                ps[0].grad[0, 0] = math.nan
            if wrapped or not bad:
                opt.step()
            states.append(_all_bits(opt) if i else [_bits(p) for p in ps])  # no state at 0
        runs.append(states)
    for i, (a, b) in enumerate(zip(*runs, strict=True)):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y), i


def _extra_ops(n: int) -> int:
    """Aten ops dispatched by ``apply_if_finite(Adam).step()`` beyond Adam's own, n params."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    counts = []
    for wrap in (False, True):
        ps = [torch.nn.Parameter(torch.ones(3)) for _ in range(n)]
        opt = torch.optim.Adam(ps, lr=0.1, foreach=True)
        if wrap:
            opt = anyclip.torch.apply_if_finite(opt, 1)
        for _ in range(3):  # the state created, the snapshot planned
            for p in ps:
                p.grad = torch.ones_like(p)
            opt.step()
        Count.n = 0
        with Count():
            opt.step()
        counts.append(Count.n)
    return counts[1] - counts[0]


def test_the_undo_costs_the_same_operations_for_any_number_of_tensors():
    # the decision, snapshot and undo: a few operations per device and width, not per tensor
    assert _extra_ops(3) == _extra_ops(40) <= 30


def test_a_copy_snapshots_its_own_tensors():
    # the snapshot kept between steps is not copied (nor pickled): the copy plans its own,
    # over its own parameters, and a skipped step of either leaves the other as it was
    ps = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.zeros(2))]
    opt = anyclip.torch.apply_if_finite(torch.optim.Adam(ps, lr=0.1), 5)
    for _ in range(2):
        for p in ps:
            p.grad = torch.ones_like(p)
        opt.step()
    twin = copy.deepcopy(opt)
    assert twin._skipper._plan is None
    tps = [p for g in twin.param_groups for p in g["params"]]
    for o, qs, g in ((twin, tps, math.nan), (opt, ps, 1.0), (twin, tps, 1.0), (opt, ps, math.nan)):
        before = _all_bits(o), _all_bits(twin if o is opt else opt)
        for q in qs:
            q.grad = torch.full_like(q, g)
        o.step()
        after = _all_bits(o), _all_bits(twin if o is opt else opt)
        for a, b in zip(before[1], after[1], strict=True):  # the other one: untouched
            assert torch.equal(a, b)
        changed = [not torch.equal(a, b) for a, b in zip(before[0], after[0], strict=True)]
        assert any(changed) == (g == 1.0)


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64]
)
def test_the_decision_is_torch_isfinite_of_every_element(dtype):
    # the finiteness is read per device and dtype in one reduction (the largest magnitude,
    # NaN propagating): the largest finite values, subnormals and empty gradients are finite
    # as torch.isfinite says (a complex one whose modulus overflows too), inf and NaN are not
    real = {torch.complex64: torch.float32}.get(dtype, dtype)
    big, tiny = torch.finfo(real).max, torch.finfo(real).smallest_normal / 2
    cases = [[big, -big], [tiny, 0.0], [math.nan, 1.0], [1.0, math.inf], [-math.inf, 0.0]]
    for values in cases:
        ps = [torch.nn.Parameter(torch.zeros(2, dtype=dtype)), torch.nn.Parameter(torch.zeros(0))]
        opt = anyclip.torch.apply_if_finite(torch.optim.SGD(ps, lr=0.1), 3)
        g = torch.tensor(values, dtype=real)
        ps[0].grad = torch.complex(g, g) if dtype.is_complex else g.to(dtype)
        ps[1].grad = torch.zeros(0)
        opt.step()
        want = all(bool(torch.isfinite(p.grad).all()) for p in ps)
        assert bool(opt.last_finite) == want, values
        assert want == (values[0] in (big, tiny)), values  # the cases do test both
