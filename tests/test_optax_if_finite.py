"""``anyclip.optax.apply_if_finite`` against optax's own tests and live ``optax.apply_if_finite``.

* Ported from optax 0.2.8, ``optax/transforms/_conditionality_test.py`` (the file installed
  with the package), class ``ConditionalityTest``: ``test_apply_if_finite`` (parameters
  ``sgd``, ``stateful_sgd``, ``sgd_extra_args``) and ``test_apply_if_finite_pmap``, with
  anyclip's function in place of optax's, eagerly and under ``jax.jit``.
* Eager updates after the first compile nothing (``jax.monitoring``'s compile events).
* optax 0.2.8, live: seeded sequences of updates with NaN and inf steps through both
  wrappers around the same inner transformation; every update bit-equal, every state equal
  (types, dtypes, values).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402 - after the importorskip

import anyclip.optax  # noqa: E402


def _maybe_jit(fn: Any, jit: bool) -> Any:
    return jax.jit(fn) if jit else fn


# ------------------------------------------------ optax 0.2.8's own tests, ported
def _build_sgd() -> Any:
    return optax.sgd(1.0)


def _build_stateful_sgd() -> Any:
    # as optax's: momentum 0.0 rather than None, so the momentum state is computed and kept
    return optax.sgd(1.0, momentum=0.0)


def _build_sgd_extra_args() -> Any:
    def init_fn(params: Any) -> Any:
        del params
        return {"foo": 1}

    def update_fn(grads: Any, state: Any, params: Any = None, *, foo: Any = None, **extra: Any):
        del extra, foo, params
        return grads, state

    t = optax.GradientTransformationExtraArgs(init_fn, update_fn)
    return optax.chain(_build_sgd(), t)


BUILDERS = {"sgd": _build_sgd, "stateful_sgd": _build_stateful_sgd}
BUILDERS["sgd_extra_args"] = _build_sgd_extra_args


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("builder", BUILDERS)
def test_optax_apply_if_finite(builder, jit):
    """optax 0.2.8 ``ConditionalityTest.test_apply_if_finite``."""
    one = jnp.array(1.0)
    nan = jnp.array(jnp.nan)

    def fn(p, x):
        return p * x

    params = jnp.array(0.0)
    opt = anyclip.optax.apply_if_finite(BUILDERS[builder](), 2)
    state = opt.init(params)
    grads_fn = jax.grad(jax.jit(fn))
    update = _maybe_jit(opt.update, jit)
    # one successful update
    grads = grads_fn(params, one)
    updates, state = update(grads, state, params)
    params = optax.apply_updates(params, updates)
    assert float(jax.tree.flatten(params)[0][0]) == -1.0
    assert bool(state.last_finite)
    # two rejected updates
    for step in range(2):
        grads = grads_fn(params, nan)
        updates, state = update(grads, state, params)
        params = optax.apply_updates(params, updates)
        assert float(jax.tree.flatten(params)[0][0]) == -1.0
        assert not bool(state.last_finite)
        assert int(state.notfinite_count) == step + 1
    # the next successful update
    grads = grads_fn(params, one)
    updates, state = update(grads, state, params)
    params = optax.apply_updates(params, updates)
    assert float(jax.tree.flatten(params)[0][0]) == -2.0
    assert bool(state.last_finite)
    # again two rejected updates
    for step in range(2):
        grads = grads_fn(params, nan)
        updates, state = update(grads, state, params)
        params = optax.apply_updates(params, updates)
        assert float(jax.tree.flatten(params)[0][0]) == -2.0
        assert not bool(state.last_finite)
        assert int(state.notfinite_count) == step + 1
    # the next NaN update is taken: the maximum is reached
    grads = grads_fn(params, nan)
    updates, state = update(grads, state, params)
    params = optax.apply_updates(params, updates)
    assert bool(jnp.isnan(jax.tree.flatten(params)[0][0]))
    assert int(state.total_notfinite) == 5


def test_optax_apply_if_finite_pmap():
    """optax 0.2.8 ``ConditionalityTest.test_apply_if_finite_pmap``.

    ``pmap`` over the gradient and the update; the NaNs come from ``arctanh(2)`` inside.
    """
    half = jnp.ones([1]) / 2.0
    two = jnp.ones([1]) * 2.0

    def fn(p, x):
        return jnp.arctanh(x) * p

    opt = anyclip.optax.apply_if_finite(optax.sgd(1.0), 2)

    def fn_update(params, opt_state, x):
        grads = jax.grad(fn)(params, x)
        grads = jax.lax.psum(grads, axis_name="i")
        updates, new_opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_opt_state

    fn_update = jax.pmap(fn_update, axis_name="i")
    params = jnp.array(0.0)
    opt_state = opt.init(params)
    params = jax.tree.map(lambda x: x[None], params)
    opt_state = jax.tree.map(lambda x: x[None], opt_state)
    params, opt_state = fn_update(params, opt_state, half)
    assert bool(opt_state.last_finite)
    for step in range(2):
        params, opt_state = fn_update(params, opt_state, two)
        assert not bool(opt_state.last_finite)
        assert opt_state.notfinite_count.item() == step + 1
    params, opt_state = fn_update(params, opt_state, half)
    assert bool(opt_state.last_finite)
    for step in range(2):
        params, opt_state = fn_update(params, opt_state, two)
        assert not bool(opt_state.last_finite)
        assert opt_state.notfinite_count.item() == step + 1
    _, opt_state = fn_update(params, opt_state, two)
    assert opt_state.total_notfinite.item() == 5


@pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)
@pytest.mark.parametrize("with_params", [True, False], ids=["params", "no-params"])
@pytest.mark.parametrize("builder", BUILDERS)
def test_eager_steps_reuse_one_program(backend, jax_compiles, builder, with_params):
    """After the first steps, eager updates of the same shapes compile nothing.

    Each used to trace, lower and compile a new ``lax.cond`` (its branches, made at each
    step, closed over the step's arrays), as optax's ``apply_if_finite`` still does.
    """
    opt = anyclip.optax.apply_if_finite(BUILDERS[builder](), 2)
    rows = [[1.0, 2.0], [3.0, jnp.nan], [1.0, 1.0], [jnp.inf, 0.0], [0.5, 1.5], [2.0, 1.0]]
    grads = [backend.asarray(np.asarray(r), "float32") for r in rows]
    params = backend.asarray(np.zeros(2), "float32")
    foo = backend.asarray(np.asarray(1.5), "float32")  # an array extra argument
    state = opt.init(params)
    finite = []
    for i, g in enumerate(grads):
        if i == 2:  # two steps to warm up (the first finds sgd_extra_args' Python int state)
            jax_compiles.clear()
        _, state = opt.update(g, state, params if with_params else None, foo=foo)
        finite.append(bool(state.last_finite))
    assert jax_compiles == []
    assert finite == [True, False, True, False, True, True]


def _scaled_sgd(seen: list[type]) -> Any:
    """sgd, then ``* scale`` (an extra argument), recording the type ``scale`` came as."""

    def init_fn(params: Any) -> Any:
        del params
        return optax.EmptyState()

    def update_fn(grads: Any, state: Any, params: Any = None, *, scale: Any = None, **extra: Any):
        del params, extra
        seen.append(type(scale))
        return jax.tree.map(lambda g: g * scale, grads), state

    return optax.chain(optax.sgd(0.1), optax.GradientTransformationExtraArgs(init_fn, update_fn))


def test_extra_args_that_are_not_arrays_reach_inner_as_given():
    """A Python number or a NumPy array among the updates or extra arguments: as optax's.

    They are not made the cond's operands (``inner`` would see tracers): eagerly, ``inner``
    gets them as given, as inside optax's ``apply_if_finite``; same updates and states.
    """
    seen_ours: list[type] = []
    seen_ref: list[type] = []
    ours = anyclip.optax.apply_if_finite(_scaled_sgd(seen_ours), 2)
    ref = optax.apply_if_finite(_scaled_sgd(seen_ref), 2)
    s_ours, s_ref = ours.init(np.zeros(3)), ref.init(np.zeros(3))
    for g in ([1.0, 2.0, 3.0], [np.nan, 1.0, 1.0], [0.5, 0.25, 0.5]):
        for scale in (2.0, np.float32(3.0)):
            u_ours, s_ours = ours.update(np.asarray(g, np.float32), s_ours, scale=scale)
            u_ref, s_ref = ref.update(np.asarray(g, np.float32), s_ref, scale=scale)
            _same((u_ours, s_ours), (u_ref, s_ref))
    assert seen_ours == seen_ref == [float, np.float32] * 3


# ------------------------------------------------------- against live optax
INNERS = {
    "sgd": lambda: optax.sgd(0.1),
    "sgd_momentum": lambda: optax.sgd(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: optax.adam(1e-2),
    "clip_adamw": lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2)),
}


def _sequence(seed: int, steps: int, dtype: str) -> list[dict[str, Any]]:
    """Updates ``{"w": (3, 4), "b": (4,), "n": {"s": ()}}`` with runs of inf/NaN steps."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        tree = {
            "w": rng.standard_normal((3, 4)),
            "b": rng.standard_normal(4) * 10,
            "n": {"s": np.asarray(rng.standard_normal())},
        }
        if rng.random() < 0.45:  # a non-finite step: one to three bad elements
            for _ in range(rng.integers(1, 4)):
                leaf = tree[str(rng.choice(["w", "b"]))]
                flat = leaf.reshape(-1)
                flat[rng.integers(flat.size)] = rng.choice([np.nan, np.inf, -np.inf])
        out.append(jax.tree.map(lambda a: jnp.asarray(a, dtype=dtype), tree))
    return out


def _same(a: Any, b: Any) -> None:
    """Equal pytrees: structure, types, dtypes, shapes, bits (NaN equal to NaN)."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        assert type(x) is type(y)
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype
        assert x.shape == y.shape
        np.testing.assert_array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8))


#: (inner, max_consecutive_errors, dtype, jit): every inner and limit under jit, each inner
#: eagerly (slow: optax's eager ``lax.cond`` traces both branches at every step), half types.
CASES = [(i, m, "float32", True) for i in INNERS for m in (-1, 0, 1, 3)]
CASES += [(i, 2, "float32", False) for i in INNERS]
CASES += [("adam", 2, "bfloat16", True), ("sgd_momentum", 1, "float16", True)]


@pytest.mark.parametrize(("inner", "max_errors", "dtype", "jit"), CASES)
def test_same_updates_and_state_as_optax(inner, max_errors, dtype, jit):
    """30 seeded steps (about 45 % non-finite, in runs): bit-equal updates, equal states."""
    seed = sum(map(ord, f"{inner}{max_errors}{dtype}"))
    grads = _sequence(seed, 30, dtype)
    params = jax.tree.map(jnp.zeros_like, grads[0])
    ours = anyclip.optax.apply_if_finite(INNERS[inner](), max_errors)
    ref = optax.apply_if_finite(INNERS[inner](), max_errors)
    s_ours, s_ref = ours.init(params), ref.init(params)
    _same(s_ours, s_ref)
    up_ours, up_ref = _maybe_jit(ours.update, jit), _maybe_jit(ref.update, jit)
    p_ours = p_ref = params
    skipped = 0
    for g in grads:
        u_ours, s_ours = up_ours(g, s_ours, p_ours)
        u_ref, s_ref = up_ref(g, s_ref, p_ref)
        _same(u_ours, u_ref)
        _same(s_ours, s_ref)
        p_ours, p_ref = optax.apply_updates(p_ours, u_ours), optax.apply_updates(p_ref, u_ref)
        skipped += not bool(s_ours.last_finite)
    _same(p_ours, p_ref)
    assert skipped > 5  # the sequence did exercise the rule


def test_state_is_optaxs_and_checkpoints_swap():
    """The state is optax's own ``ApplyIfFiniteState``: a state of one drives the other."""
    g = {"a": jnp.array([1.0, jnp.nan]), "b": jnp.ones(2)}
    ours = anyclip.optax.apply_if_finite(optax.adam(0.1), 3)
    ref = optax.apply_if_finite(optax.adam(0.1), 3)
    _, s = ref.update(g, ref.init(g))
    assert isinstance(s, optax.ApplyIfFiniteState)
    u1, s1 = ours.update(jax.tree.map(jnp.ones_like, g), s)
    u2, s2 = ref.update(jax.tree.map(jnp.ones_like, g), s)
    _same((u1, s1), (u2, s2))


def test_integer_and_empty_updates_are_finite_as_in_optax():
    for tree in ({"i": jnp.arange(3, dtype=jnp.int32), "f": jnp.ones(2)}, {}, {"e": jnp.zeros(0)}):
        ours = anyclip.optax.apply_if_finite(optax.identity(), 0)
        ref = optax.apply_if_finite(optax.identity(), 0)
        _same(ours.update(tree, ours.init(tree)), ref.update(tree, ref.init(tree)))


def test_counters_saturate_as_optaxs_safe_increment():
    g = jnp.array([jnp.inf])
    ours = anyclip.optax.apply_if_finite(optax.sgd(1.0), 2**40)
    ref = optax.apply_if_finite(optax.sgd(1.0), 2**31 - 1)  # optax refuses 2**40 (int32)
    top = jnp.array(2**31 - 1, jnp.int32)
    for tx in (ours, ref):
        s = tx.init(g)._replace(notfinite_count=top, total_notfinite=top)
        u, s = tx.update(g, s)
        assert int(s.notfinite_count) == int(s.total_notfinite) == 2**31 - 1
        assert float(u[0]) == 0.0  # never exceeds the maximum: still skipped


@pytest.mark.parametrize("bad", [None, 2.5, "3", True])
def test_max_consecutive_errors_must_be_an_integer(bad):
    with pytest.raises(TypeError, match="`max_consecutive_errors` must be an integer"):
        anyclip.optax.apply_if_finite(optax.sgd(0.1), bad)


def test_inner_must_be_a_transformation():
    with pytest.raises(TypeError, match="`inner` must be an optax GradientTransformation"):
        anyclip.optax.apply_if_finite("sgd", 2)
