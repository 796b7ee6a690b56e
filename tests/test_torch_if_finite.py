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
