"""The JAX sharding checks of ``tests/test_distributed_jax.py``, run in a fresh process.

``XLA_FLAGS=--xla_force_host_platform_device_count=8`` must be set before JAX is imported,
so the test starts this file with it. Each check runs on its own; the results (``"ok"`` or
the failure) are written as JSON to ``sys.argv[1]``. Expected values: exact norms of the
unsharded data in float64 (NumPy), within ``ULP_DIST`` float32 ULP.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import anyclip
import anyclip.optax
import anyclip.tree

ULP_DIST = 3
#: The context manager that sets a mesh: ``jax.set_mesh``; JAX 0.5.3 (the floor) has only
#: ``jax.sharding.use_mesh`` (its ``jax.sharding.set_mesh`` sets the mesh for good)
SET_MESH: Callable[[Any], Any] = getattr(jax, "set_mesh", None) or jax.sharding.use_mesh


def _shard_map() -> Callable[..., Any]:
    """``jax.shard_map``; JAX 0.5.3 (the floor) has it as ``jax.experimental.shard_map``."""
    if hasattr(jax, "shard_map"):
        return jax.shard_map
    from jax.experimental.shard_map import shard_map

    return shard_map


SHARD_MAP = _shard_map()

#: The result types of every all-reduce in an HLO module: "f32[]" or a tuple of them.
_ALL_REDUCE = re.compile(r"=\s*(\(?[^=]*?\)?)\s+all-reduce(?:-start)?\(")


def ulp_distance(value: float, exact: float) -> float:
    return abs(value - exact) / float(np.spacing(np.float32(exact)))


def exact_norm(arrays: list[np.ndarray]) -> float:
    return math.sqrt(sum(float(np.sum(np.asarray(a, np.float64) ** 2)) for a in arrays))


def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((512, 256)).astype(np.float32),  # large, sharded on rows
        "v": rng.standard_normal((64, 128)).astype(np.float32),  # sharded on columns
        "s": rng.standard_normal((16, 8)).astype(np.float32),  # small, sharded
        "b": rng.standard_normal(256).astype(np.float32),  # small, replicated
    }


SPECS = {"w": P("x", None), "v": P(None, "x"), "s": P("x"), "b": P()}


def check_hlo(hlo: str) -> None:
    assert "all-gather" not in hlo, "the compiled program gathers"
    assert "all-to-all" not in hlo and "collective-permute" not in hlo
    for shapes in _ALL_REDUCE.findall(hlo):
        parts = re.findall(r"[a-z0-9]+\[[^\]]*\]", shapes)
        assert parts and all(p.endswith("[]") for p in parts), f"non-scalar all-reduce {shapes}"


def temp_bytes(f: Any, *args: Any) -> int:
    """The temporaries of the compiled ``f`` (``memory_analysis``), in bytes."""
    return int(f.lower(*args).compile().memory_analysis().temp_size_in_bytes)


def jit_sharded(kind: Any, set_mesh: bool = True, in_shardings: bool = False) -> None:
    """clip_by_global_norm under jit on a mesh with ``kind`` axes: no gather, same values.

    ``set_mesh=False``: the arrays are on the mesh but no ``jax.set_mesh`` is active (``Auto``
    axes need none). ``in_shardings=True`` (without ``jax.set_mesh``): host arrays, sharded
    by ``jax.jit(..., in_shardings=...)`` alone, so the traced arrays name no mesh. The
    temporaries stay within twice optax's (which never reshapes).
    """
    mesh = jax.make_mesh((8,), ("x",), axis_types=(kind,))
    host = data()
    shardings = {k: NamedSharding(mesh, SPECS[k]) for k in host}
    tree = {k: jax.device_put(v, shardings[k]) for k, v in host.items()}
    exact = exact_norm(list(host.values()))

    def jit(fn: Callable[..., Any], n: int = 1) -> Any:
        if not in_shardings:
            return jax.jit(fn)
        return jax.jit(fn, in_shardings=(shardings, *[None] * (n - 1)))

    args = host if in_shardings else tree
    with SET_MESH(mesh) if set_mesh else contextlib.nullcontext():
        f = jit(lambda t: anyclip.tree.clip_by_global_norm(t, 1.0))
        out, norm = f(args)
        check_hlo(f.lower(args).compile().as_text())
        g = jit(lambda t: anyclip.tree.global_norm(t))
        check_hlo(g.lower(args).compile().as_text())
        tx = anyclip.optax.clip_by_global_norm(1.0)
        state = tx.init(tree)
        h = jit(lambda u, s: tx.update(u, s)[0], 2)
        check_hlo(h.lower(args, state).compile().as_text())
        updates = h(args, state)
        ref = optax.clip_by_global_norm(1.0)
        r = jit(lambda u, s: ref.update(u, s)[0], 2)
        budget = 2 * temp_bytes(r, args, ref.init(tree))
        for name, fn, fargs in (("clip", f, (args,)), ("optax adapter", h, (args, state))):
            used = temp_bytes(fn, *fargs)
            assert used <= budget, f"{name}: {used} bytes of temporaries, optax's x2: {budget}"
    assert ulp_distance(float(norm), exact) <= ULP_DIST, (float(norm), exact)
    assert float(g(args)) == float(norm)
    for k, v in host.items():
        assert out[k].sharding.is_equivalent_to(tree[k].sharding, v.ndim), k
        want = v.astype(np.float64) / exact
        np.testing.assert_allclose(np.asarray(out[k]), want, rtol=4 * 2.0**-24, atol=1e-30)
        np.testing.assert_array_equal(np.asarray(updates[k]), np.asarray(out[k]))


def shard_map_group() -> None:
    """Inside shard_map, group= the axis name gives the global norm (one psum)."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))
    host = data()
    w = jax.device_put(host["w"], NamedSharding(mesh, P("x", None)))
    exact = exact_norm([host["w"]])

    def local(block: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        with_group = anyclip.global_norm([block], group="x")
        clipped, norm = anyclip.clip_by_global_norm([block], 1.0, group="x")
        per_device = anyclip.global_norm([block])
        return with_group, norm, clipped[0] - block * (1.0 / norm) + per_device * 0

    f = jax.jit(
        SHARD_MAP(local, mesh=mesh, in_specs=P("x", None), out_specs=(P(), P(), P("x", None)))
    )
    with_group, norm, _ = f(w)
    assert ulp_distance(float(with_group), exact) <= ULP_DIST, (float(with_group), exact)
    assert float(norm) == float(with_group)
    hlo = f.lower(w).compile().as_text()
    check_hlo(hlo)

    # several small blocks: Manual axes hold local blocks, joined into one sum without a gather
    small = [host["v"], host["s"], host["b"][:64]]
    blocks = [jax.device_put(a, NamedSharding(mesh, P("x"))) for a in small]
    joined = jax.jit(
        SHARD_MAP(
            lambda *bs: anyclip.global_norm(list(bs), group="x"),
            mesh=mesh,
            in_specs=(P("x"),) * 3,
            out_specs=P(),
        )
    )
    check_hlo(joined.lower(*blocks).compile().as_text())
    got, want = float(joined(*blocks)), exact_norm(small)
    assert ulp_distance(got, want) <= ULP_DIST, (got, want)

    per_device = jax.jit(
        SHARD_MAP(
            lambda b: jnp.reshape(anyclip.global_norm([b]), (1,)),
            mesh=mesh,
            in_specs=P("x", None),
            out_specs=P("x"),
        )
    )(w)
    assert float(jnp.max(per_device)) < exact  # without group: each device's own norm

    # jax.grad inside shard_map: JAX's own gradient of sqrt(psum(sum(b * b))), which is
    # d norm / d block = block / norm under jax.shard_map (psum's transpose); JAX 0.5.3's
    # experimental shard_map transposes psum to a psum: 8 (the devices) times that
    def grad_in_shard_map(fn: Callable[[jax.Array], jax.Array]) -> np.ndarray:
        spec = P("x", None)
        return np.asarray(
            jax.jit(SHARD_MAP(jax.grad(fn), mesh=mesh, in_specs=spec, out_specs=spec))(w)
        )

    grad = grad_in_shard_map(lambda b: anyclip.global_norm([b], group="x"))
    plain = grad_in_shard_map(lambda b: jnp.sqrt(jax.lax.psum(jnp.sum(b * b), "x")))
    np.testing.assert_allclose(grad, plain, rtol=1e-6, atol=1e-9)
    devices = 1 if hasattr(jax, "shard_map") else 8
    np.testing.assert_allclose(grad, devices * host["w"] / exact, rtol=1e-6, atol=1e-9)

    tx = anyclip.optax.clip_by_global_norm(1.0, group="x", norm_in_state=True)

    def step(block: jax.Array) -> jax.Array:
        state = tx.init({"w": block})
        _, state = tx.update({"w": block}, state)
        return state.global_norm

    g = jax.jit(SHARD_MAP(step, mesh=mesh, in_specs=P("x", None), out_specs=P()))
    assert float(g(w)) == float(with_group)


def shard_map_groups() -> None:
    """Per-group norms inside shard_map with group=: ONE psum, of the vector of the groups."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))
    host = data()
    w = jax.device_put(host["w"], NamedSharding(mesh, P("x", None)))
    s = jax.device_put(host["s"], NamedSharding(mesh, P("x")))
    labels = {"w": "big", "s": "small"}

    def local(bw: jax.Array, bs: jax.Array) -> tuple[jax.Array, ...]:
        norms = anyclip.tree.global_norm({"w": bw, "s": bs}, groups=labels, group="x")
        alone = [anyclip.global_norm([b], group="x") for b in (bw, bs)]
        return norms["big"], norms["small"], *alone

    f = jax.jit(
        SHARD_MAP(local, mesh=mesh, in_specs=(P("x", None), P("x")), out_specs=(P(), P(), P(), P()))
    )
    big, small, big_alone, small_alone = f(w, s)
    for got, alone, arr in ((big, big_alone, host["w"]), (small, small_alone, host["s"])):
        assert ulp_distance(float(got), exact_norm([arr])) <= ULP_DIST, float(got)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(alone))  # bit for bit

    grouped = jax.jit(
        SHARD_MAP(
            lambda bw, bs: anyclip.tree.global_norm({"w": bw, "s": bs}, groups=labels, group="x"),
            mesh=mesh,
            in_specs=(P("x", None), P("x")),
            out_specs=P(),
        )
    )
    text = grouped.lower(w, s).as_text()  # before XLA combines collectives
    reduces = re.findall(r"all_reduce", text)
    assert len(reduces) == 1, f"{len(reduces)} all-reduces for 2 groups"


#: AGC's budget against the one-device result (as tests/_torch_dist_worker.py's): the unit
#: norms are regrouped sums (a few ULP), and a clipped value is the gradient times their ratio.
ULP_AGC = 8


def close(got: Any, want: Any, what: str, ulp: int = ULP_DIST, scaled: bool = False) -> None:
    """Within ``ulp`` float32 ULP of each value (``scaled``: of the array's largest value, for
    sums over the examples of terms of both signs, whose factors moved by an ULP or two)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.shape, want.shape)
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    ref = np.abs(w)
    if scaled and ref.size:
        ref = np.full_like(ref, ref.max())
    tol = ulp * np.spacing(ref.astype(np.float32))
    err = np.abs(g - w)
    assert np.all(err <= tol + 1e-30), f"{what}: {float((err / (tol + 1e-30)).max())} x {ulp} ULP"


def count_collectives(f: Any, *args: Any) -> int:
    """The all-reduces ``f`` lowers to (before XLA combines them); its compiled program
    moves no block (no all-gather, all-to-all or collective-permute)."""
    hlo = f.lower(*args).compile().as_text()
    for op in ("all-gather", "all-to-all", "collective-permute"):
        assert op not in hlo, f"the compiled program has an {op}"
    return len(re.findall(r"all_reduce", f.lower(*args).as_text()))


def shard_map_rules() -> None:
    """per_example_clip and AGC with group= the axis name inside shard_map (issue 19).

    Per-example: every leaf split over the 8 devices along a non-batch axis; the norms and
    each device's part of the clipped sums are the one-device call's on the whole gradients,
    with one all-reduce (of the ``(batch,)`` sums of squares). AGC (optax's layouts: the
    unit is the output channel, last): each parameter and its gradient split along an axis
    the units span (the input channels); each device's part is the one-device result, with
    one all-reduce per leaf. Budgets as tests/_torch_dist_worker.py's ``rules``.
    """
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))
    rng = np.random.default_rng(19)
    batch = 6  # not a multiple of 4: TF's order adds the last two examples in turn
    shapes = [(batch, 16, 3), (batch, 8), (batch, 4, 16), (batch, 8, 2, 3)]
    split = [1, 1, 2, 1]  # the axis each leaf is split along
    full = []
    for shape, scale in zip(shapes, (0.05, 0.3, 1.0, 2.0), strict=True):
        ramp = np.linspace(0.0, 2.0, batch).reshape((batch,) + (1,) * (len(shape) - 1))
        full.append((rng.standard_normal(shape) * ramp * scale).astype(np.float32))

    def spec(axis: int, ndim: int) -> P:
        return P(*["x" if d == axis else None for d in range(ndim)])

    specs = [spec(a, len(s)) for a, s in zip(split, shapes, strict=True)]
    sharded = [
        jax.device_put(a, NamedSharding(mesh, sp)) for a, sp in zip(full, specs, strict=True)
    ]
    one = jax.devices()[0]
    for style in ("tf", "optax", "opacus"):
        alone, alone_norms = anyclip.tree.per_example_clip(
            [jax.device_put(a, one) for a in full], 0.7, style=style
        )
        summed_specs = [spec(a - 1, len(s) - 1) for a, s in zip(split, shapes, strict=True)]
        f = jax.jit(
            SHARD_MAP(
                lambda *bs, style=style: anyclip.tree.per_example_clip(
                    list(bs), 0.7, style=style, group="x"
                ),
                mesh=mesh,
                in_specs=tuple(specs),
                out_specs=(summed_specs, P()),
            )
        )
        got, norms = f(*sharded)
        reduces = count_collectives(f, *sharded)
        assert reduces == 1, f"{style}: {reduces} all-reduces"
        close(norms, alone_norms, f"{style} norms")
        for i, (g, a) in enumerate(zip(got, alone, strict=True)):
            close(g, a, f"{style} leaf {i}", scaled=True)
        clipped = np.asarray(alone_norms) > 0.7
        assert clipped.any() and not clipped.all(), alone_norms  # some examples clipped

    # per-layer clipping: one all-reduce per leaf, each leaf's norms the one-device call's
    alone, alone_norms = anyclip.tree.per_example_layer_clip(
        [jax.device_put(a, one) for a in full], 0.7
    )
    layer = jax.jit(
        SHARD_MAP(
            lambda *bs: anyclip.tree.per_example_layer_clip(list(bs), 0.7, group="x"),
            mesh=mesh,
            in_specs=tuple(specs),
            out_specs=(summed_specs, [P()] * len(shapes)),
        )
    )
    got, norms = layer(*sharded)
    assert count_collectives(layer, *sharded) == len(shapes)
    for i in range(len(shapes)):
        close(norms[i], alone_norms[i], f"layer norms {i}")
        close(got[i], alone[i], f"layer leaf {i}", scaled=True)
    try:
        SHARD_MAP(
            lambda *bs: anyclip.tree.per_example_layer_clip(
                list(bs), 0.7, uniform=False, group="x"
            ),
            mesh=mesh,
            in_specs=tuple(specs),
            out_specs=(summed_specs, [P()] * len(shapes)),
        )(*sharded)
    except ValueError as e:
        assert "uniform=True" in str(e), e
    else:
        raise AssertionError("uniform=False with group= must be refused")

    # AGC, optax's layouts: HWIO, IO, a bias (one unit), multi-head HIO; split along I
    p_shapes = [(3, 3, 16, 4), (16, 10), (8,), (16, 2, 5)]
    p_split = [2, 0, 0, 0]
    params = [(rng.standard_normal(s) * 0.05).astype(np.float32) for s in p_shapes]
    grads = [
        (rng.standard_normal(s) * k).astype(np.float32)
        for s, k in zip(p_shapes, (1e-3, 1e-2, 1e-4, 1.0), strict=True)
    ]
    params[1][:, 0] = 0.0  # a zero unit: eps sets its threshold
    p_specs = tuple(spec(a, len(s)) for a, s in zip(p_split, p_shapes, strict=True))
    ps = [jax.device_put(a, NamedSharding(mesh, sp)) for a, sp in zip(params, p_specs, strict=True)]
    gs = [jax.device_put(a, NamedSharding(mesh, sp)) for a, sp in zip(grads, p_specs, strict=True)]
    for norm_type in (2.0, 1.0, math.inf, 3.0):
        alone = anyclip.tree.adaptive_clip(
            [jax.device_put(a, one) for a in grads],
            [jax.device_put(a, one) for a in params],
            0.01,
            norm_type=norm_type,
        )
        agc = jax.jit(
            SHARD_MAP(
                lambda g, p, nt=norm_type: anyclip.tree.adaptive_clip(
                    g, p, 0.01, norm_type=nt, group="x"
                ),
                mesh=mesh,
                in_specs=(list(p_specs), list(p_specs)),
                out_specs=list(p_specs),
            )
        )
        got = agc(gs, ps)
        reduces = count_collectives(agc, gs, ps)
        assert 1 <= reduces <= len(p_shapes), f"AGC {norm_type}: {reduces} all-reduces"
        for i, (g, a) in enumerate(zip(got, alone, strict=True)):
            close(g, a, f"AGC {norm_type} leaf {i}", ulp=ULP_AGC)
        changed = [not np.array_equal(np.asarray(a), g) for a, g in zip(alone, grads, strict=True)]
        assert any(changed) and not all(changed), changed  # some units clipped, some not

    # the optax transformation with group=, against optax's own on one device
    ref = optax.adaptive_grad_clip(0.01)
    want, _ = ref.update(
        [jax.device_put(a, one) for a in grads],
        ref.init(None),
        [jax.device_put(a, one) for a in params],
    )
    tx = anyclip.optax.adaptive_grad_clip(0.01, group="x")
    step = jax.jit(
        SHARD_MAP(
            lambda g, p: tx.update(g, tx.init(p), p)[0],
            mesh=mesh,
            in_specs=(list(p_specs), list(p_specs)),
            out_specs=list(p_specs),
        )
    )
    got = step(gs, ps)
    assert 1 <= count_collectives(step, gs, ps) <= len(p_shapes)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        close(g, w, f"optax adapter leaf {i}", ulp=ULP_AGC)


def eager_accumulate() -> None:
    """Eager calls with accumulate_dtype: shardings kept, and the same values on one device.

    The blocks are made small: an array on one device runs the compiled block loop; arrays
    on the mesh (sharded, or replicated on every device) take the whole formula, as a flat
    view of a sharded array would gather it.
    """
    from anyclip._kernels import _base

    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))
    host = {k: v.astype(np.float16) for k, v in data().items()}
    tree = {k: jax.device_put(v, NamedSharding(mesh, SPECS[k])) for k, v in host.items()}
    single = jax.device_put(host["w"], jax.devices()[0])
    exact = exact_norm(list(host.values()))
    old, _base.UPCAST_BLOCK = _base.UPCAST_BLOCK, 64
    try:
        norm = anyclip.global_norm(list(tree.values()), accumulate_dtype="float32")
        outs = {
            "w": anyclip.clip_by_norm(tree["w"], 1.0, accumulate_dtype="float32"),
            "b": anyclip.clip_by_norm(tree["b"], 1.0, accumulate_dtype="float32"),
            "single": anyclip.clip_by_norm(single, 1.0, accumulate_dtype="float32"),
        }
        threes = [anyclip.norm(a, ord=3, accumulate_dtype="float32") for a in (tree["w"], single)]
    finally:
        _base.UPCAST_BLOCK = old
    assert ulp_distance(float(norm), exact) <= ULP_DIST, (float(norm), exact)
    for k, out in outs.items():
        src = single if k == "single" else tree[k]
        v = host["w" if k == "single" else k].astype(np.float64)
        assert out.dtype == jnp.float16
        assert out.sharding.is_equivalent_to(src.sharding, v.ndim), k
        # float16 subnormals (under 6.1e-5): within one spacing, 2**-24
        want = v / np.sqrt(np.sum(v * v))
        np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=2e-3, atol=2.0**-24)
    p3 = float(np.sum(np.abs(host["w"].astype(np.float64)) ** 3) ** (1 / 3))  # about 59
    for three in threes:
        np.testing.assert_allclose(float(three), p3, rtol=2e-3)


def nonfinite() -> None:
    """A NaN or inf in the last device's block is every device's norm (TF's rule for a list).

    ``psum`` (``group=``) and XLA's sum all-reduce carry NaN and inf from any device (TF
    then gives NaN values everywhere); XLA:CPU's max all-reduce drops a NaN of a later
    device, so the inf norms of sharded arrays reduce a NaN flag beside the values, in the
    same all-reduce.
    """
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))
    host = data()["w"]

    def every_device(block: jax.Array) -> tuple[jax.Array, jax.Array]:
        clipped, norm = anyclip.clip_by_global_norm([block], 1.0, group="x")
        return jnp.reshape(norm, (1,)), clipped[0]

    f = jax.jit(
        SHARD_MAP(every_device, mesh=mesh, in_specs=P("x", None), out_specs=(P("x"), P("x", None)))
    )
    for bad in (math.nan, math.inf):
        v = host.copy()
        v[-1, 0] = bad  # in the last device's rows
        w = jax.device_put(v, NamedSharding(mesh, P("x", None)))
        norms, clipped = f(w)
        assert str(np.asarray(norms).tolist()) == str([bad] * 8), (bad, norms)
        assert np.isnan(np.asarray(clipped)).all(), bad
        a64 = np.abs(v.astype(np.float64))  # NumPy's max propagates NaN, as TF's
        for kind in (AxisType.Auto, AxisType.Explicit):
            m = jax.make_mesh((8,), ("x",), axis_types=(kind,))
            x = jax.device_put(v, NamedSharding(m, P("x", None)))
            inf = jax.jit(lambda a: anyclip.norm(a, ord=math.inf))
            hlo = inf.lower(x).compile().as_text()
            check_hlo(hlo)
            # values and NaN flags together: in one all-reduce where XLA combines JAX's own
            # two float max reductions into one (JAX 0.10.2); JAX 0.5.3's XLA keeps those two
            pair = jax.jit(lambda a: (jnp.max(jnp.abs(a)), jnp.max(jnp.isnan(a).astype(a.dtype))))
            combined = len(_ALL_REDUCE.findall(pair.lower(x).compile().as_text())) == 1
            assert len(_ALL_REDUCE.findall(hlo)) == (1 if combined else 2), hlo
            cases = (
                (inf(x), np.max(a64)),
                (anyclip.norm(x, ord=math.inf), np.max(a64)),  # eager
                (jax.jit(lambda a: anyclip.norm(a, ord=math.inf, axis=0))(x), np.max(a64, 0)),
                (
                    jax.jit(lambda a: anyclip.norm(a, ord=math.inf, axis=(0, 1)))(x),
                    np.max(np.sum(a64, axis=1)),
                ),
                (jax.jit(lambda a: anyclip.tree.global_norm({"a": a}))(x), bad),
            )
            for i, (got, want) in enumerate(cases):
                np.testing.assert_allclose(  # NaN where NaN, inf where inf
                    np.asarray(got, np.float64), want, rtol=2e-6, err_msg=f"{kind} {bad} {i}"
                )


def nonfinite_half_complex() -> None:
    """The inf norms of sharded float16, bfloat16 and complex64 arrays keep a NaN (TF's max).

    Found by fuzzing: these dtypes take the generic kernels, whose maximum did not carry the
    NaN flag beside the values, so XLA:CPU's max all-reduce dropped a NaN of a later device
    (a column ``[nan, 1]`` on each of 8 devices gave ``-inf`` in float16 and bfloat16: every
    device's NaN became ``-inf`` before its maximum). Expected: NumPy's maximum of the
    unsharded absolute values (NaN where one is NaN, as TF's ``reduce_max``).
    """
    rng = np.random.default_rng(2)
    for dtype in (jnp.float16, jnp.bfloat16, jnp.complex64):
        v = rng.standard_normal((16, 8)).astype(np.float32)
        if dtype == jnp.complex64:
            v = v + 1j * rng.standard_normal((16, 8)).astype(np.float32)
        v[-1, 0] = math.nan  # in the last device's rows
        v[3, 5] = math.nan  # and in an earlier device's
        host = np.asarray(jnp.asarray(v, dtype))
        a64 = np.abs(host.astype(np.complex128 if dtype == jnp.complex64 else np.float64))
        for kind in (AxisType.Auto, AxisType.Explicit):
            m = jax.make_mesh((8,), ("x",), axis_types=(kind,))
            for spec, axis, want in (
                (P("x", None), None, np.max(a64)),
                (P("x", None), 0, np.max(a64, 0)),
                (P(None, "x"), 1, np.max(a64, 1)),
                (P("x", None), (0, 1), np.max(np.sum(a64, axis=1))),
                (P(None, "x"), (1, 0), np.max(np.sum(a64, axis=0))),
            ):
                x = jax.device_put(host, NamedSharding(m, spec))
                for mode in ("eager", "jit"):
                    f = functools.partial(anyclip.norm, ord=math.inf, axis=axis)
                    got = (f if mode == "eager" else jax.jit(f))(x)
                    np.testing.assert_allclose(  # NaN where NaN
                        np.abs(np.asarray(got).astype(np.complex128)),
                        want,
                        rtol=1e-2,
                        err_msg=f"{np.dtype(dtype).name} {kind} {spec} axis={axis} {mode}",
                    )


def eager_history_state() -> None:
    """The history transforms eagerly on sharded updates, their state made by ``init``.

    optax's ``init`` makes the state uncommitted on the default device (as ``optax.adam``'s
    count); an array made beside it with ``device=`` its device was committed to that one
    device, and the first eager update on arrays sharded over the mesh raised "Received
    incompatible devices". Now each step gives the updates, shardings and state of the same
    steps on one device (within ``ULP_DIST``: the sharded norms add in another order).
    """
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    host = data()
    sharded = {k: jax.device_put(v, NamedSharding(mesh, SPECS[k])) for k, v in host.items()}
    single = {k: jax.device_put(v, jax.devices()[0]) for k, v in host.items()}
    makers = {
        "quantile_clip": lambda: anyclip.optax.quantile_clip(0.5, history_length=3),
        "quantile_clip_global": lambda: anyclip.optax.quantile_clip(
            0.5, history_length=3, global_threshold=True
        ),
        "zclip": lambda: anyclip.optax.zclip(warmup_steps=1),
        "skip_on_spike": lambda: anyclip.optax.skip_on_spike(
            optax.sgd(0.1), rolling_interval_length=4
        ),
    }
    for name, make in makers.items():
        runs = []
        for tree in (sharded, single):
            tx = make()
            state = tx.init(tree)
            steps = []
            for scale in (1.0, 2.0, 40.0):
                grads = jax.tree.map(lambda a, s=scale: a * s, tree)
                updates, state = tx.update(grads, state, tree)
                steps.append(updates)
            runs.append((steps, state))
        (got, got_state), (want, want_state) = runs
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            for k in host:
                what = f"{name} step {i} {k}"
                assert g[k].sharding.is_equivalent_to(sharded[k].sharding, g[k].ndim), what
                close(g[k], w[k], what, scaled=True)
        for a, b in zip(jax.tree.leaves(got_state), jax.tree.leaves(want_state), strict=True):
            if jnp.issubdtype(a.dtype, jnp.floating):
                close(a, b, f"{name} state", scaled=True)
            else:
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def wrong_group() -> None:
    try:
        anyclip.global_norm([jnp.ones(3)], group=0)
    except TypeError as e:
        assert "axis name" in str(e)
    else:
        raise AssertionError("an int group must be refused")


CHECKS: dict[str, Callable[[], None]] = {
    "jit_auto": lambda: jit_sharded(AxisType.Auto),
    "jit_auto_no_set_mesh": lambda: jit_sharded(AxisType.Auto, set_mesh=False),
    "jit_in_shardings_no_set_mesh": lambda: jit_sharded(
        AxisType.Auto, set_mesh=False, in_shardings=True
    ),
    "jit_explicit": lambda: jit_sharded(AxisType.Explicit),
    "shard_map_group": shard_map_group,
    "shard_map_groups": shard_map_groups,
    "shard_map_rules": shard_map_rules,
    "eager_accumulate": eager_accumulate,
    "nonfinite": nonfinite,
    "nonfinite_half_complex": nonfinite_half_complex,
    "eager_history_state": eager_history_state,
    "wrong_group": wrong_group,
}


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - reported per check to the test
            results[name] = traceback.format_exc()
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
