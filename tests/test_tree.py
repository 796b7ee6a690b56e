"""``anyclip.tree``: the clip and norm functions over nested structures of arrays.

Expected values: docs/tf-reference.md §4.2 (``a = [3, 4]``, ``b = [[12]]``, global norm 13, clip 6.5
gives ``[1.5, 2]``, ``[[6]]``) and independent NumPy float64 formulas. The consistency tests
(``accumulate_dtype=None`` equals the top-level functions bit for bit) compare two anyclip entry
points with each other: that is the property the tree API promises ("one implementation, not a
second copy"), the top-level functions themselves are checked against TF elsewhere.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np
import pytest

import anyclip
from anyclip import tree
from anyclip_conformance import Backend, assert_array, assert_same_bits

ULP = 3  # float32 reductions (docs/tf-reference.md §11)
A = [3.0, 4.0]
B = [[12.0]]


class Pair(NamedTuple):
    a: Any
    b: Any


# ----------------------------------------------------------------- helpers
def skeleton(node: Any) -> Any:
    """The structure of a list/tuple/dict tree with every array replaced by ``"leaf"``."""
    if node is None:
        return None
    if isinstance(node, dict):
        return (type(node), [(k, skeleton(v)) for k, v in node.items()])
    if isinstance(node, (list, tuple)):
        return (type(node), [skeleton(c) for c in node])
    return "leaf"


def leaves(node: Any) -> list[Any]:
    """The leaves (arrays and ``None``) of a list/tuple/dict tree, in insertion order."""
    if node is None:
        return [None]
    if isinstance(node, dict):
        return [leaf for v in node.values() for leaf in leaves(v)]
    if isinstance(node, (list, tuple)):
        return [leaf for c in node for leaf in leaves(c)]
    return [node]


def np64(backend: Backend, x: Any) -> np.ndarray:
    return np.asarray(backend.to_numpy(x), dtype=np.float64)


def check_leafwise(backend, check, out, tr, expected, ulp=0):
    """``out`` has ``tr``'s structure, ``None`` where ``tr`` has it, and each other leaf is
    ``expected(leaf as float64 NumPy)`` (float32, within ``ulp``)."""
    assert skeleton(out) == skeleton(tr)
    for g, s in zip(leaves(out), leaves(tr), strict=True):
        if s is None:
            assert g is None
            continue
        check(g, expected(np64(backend, s)), "float32", ulp)


def global_norm64(arrays: list[np.ndarray]) -> float:
    """sqrt(sum of squares) in float64 (docs/tf-reference.md §3.1, without its rounding)."""
    return float(np.sqrt(sum(np.sum(a * a) for a in arrays)))


def gscale64(norm: float, clip: float) -> float:
    """TF's global factor ``c * min(1/n, 1/c)`` in float64 (§4.1)."""
    return clip * min(1.0 / norm, 1.0 / clip)


STRUCTURES = {
    "list": lambda a, b: [a, b],
    "tuple": lambda a, b: (a, b),
    "dict": lambda a, b: {"b": b, "a": a},  # insertion order b, a is kept
    "namedtuple": lambda a, b: Pair(a, b),
    "nested": lambda a, b: {"layer": [a, (None, {"bias": b})], "frozen": None},
    "none-leaves": lambda a, b: [a, None, b],
    "ordereddict": lambda a, b: collections.OrderedDict([("a", a), ("b", b)]),
}


@pytest.fixture(params=list(STRUCTURES))
def structure(request: pytest.FixtureRequest):
    return STRUCTURES[request.param]


@pytest.fixture
def ab(make):
    return make(A), make(B)


# ------------------------------------------------------------- structures
def test_clip_by_global_norm_structures(backend, structure, ab, check):
    tr = structure(*ab)
    out, norm = tree.clip_by_global_norm(tr, 6.5)
    assert skeleton(out) == skeleton(tr)
    assert type(out) is type(tr)
    got = [leaf for leaf in leaves(out) if leaf is not None]
    src = [leaf for leaf in leaves(tr) if leaf is not None]
    assert [leaf is None for leaf in leaves(out)] == [leaf is None for leaf in leaves(tr)]
    # §4.2: [a, b] with 6.5 gives [1.5, 2], [[6]] and the norm 13
    expected = {1: [1.5, 2.0], 2: [[6.0]]}
    for g, s in zip(got, src, strict=True):
        check(g, expected[s.ndim], "float32", ULP)
    check(norm, np.float32(13), "float32", ULP)


def test_global_norm_structures(backend, structure, ab, check):
    check(tree.global_norm(structure(*ab)), np.float32(13), "float32", ULP)


def test_clip_by_value_structures(backend, structure, ab, check):
    tr = structure(*ab)
    out = tree.clip_by_value(tr, -1.0, 3.5)
    check_leafwise(backend, check, out, tr, lambda s: np.minimum(s, 3.5))


def test_clip_by_norm_structures(backend, structure, ab, check):
    # each leaf on its own: a has norm 5, b norm 12; clip 2.5 gives [1.5, 2] and [[2.5]]
    tr = structure(*ab)
    out = tree.clip_by_norm(tr, 2.5)
    expected = lambda s: s * 2.5 / max(math.sqrt(np.sum(s * s)), 2.5)  # noqa: E731
    check_leafwise(backend, check, out, tr, expected, 2)


def test_clip_by_norm_axes(backend, make, check):
    m = [[3.0, 4.0], [0.3, 0.4]]
    out = tree.clip_by_norm({"m": make(m), "v": make([6.0, 8.0])}, 1.0, axes=-1)
    check(out["m"], [[0.6, 0.8], [0.3, 0.4]], "float32", 2)
    check(out["v"], [0.6, 0.8], "float32", 2)


def test_clip_by_average_norm_structures(backend, structure, ab, check):
    # docs/tf-reference.md §5.1: t * c * min(size / l2norm, 1 / c)
    tr = structure(*ab)
    out = tree.clip_by_average_norm(tr, 1.0)
    expected = lambda s: s * min(s.size / math.sqrt(np.sum(s * s)), 1.0)  # noqa: E731
    check_leafwise(backend, check, out, tr, expected, 3)


def test_dict_keeps_key_order_and_type(backend, ab):
    class Grads(dict):
        pass

    tr = Grads(z=ab[0], a=ab[1])
    out, _ = tree.clip_by_global_norm(tr, 1.0)
    assert type(out) is Grads
    assert list(out) == ["z", "a"]


def test_inputs_not_mutated(backend, ab):
    a, b = ab
    tr = {"a": a, "b": [b]}
    tree.clip_by_global_norm(tr, 1.0)
    assert tr["a"] is a
    assert tr["b"][0] is b
    np.testing.assert_array_equal(backend.to_numpy(a), A)


@pytest.mark.parametrize(
    "empty",
    [[], (), {}, [None], {"a": None, "b": [None]}, Pair(None, None)],
    ids=["list", "tuple", "dict", "list-of-None", "dict-of-None", "namedtuple-of-None"],
)
def test_empty_structures(empty):
    # §3.2 / §4.2: no arrays gives ([], 0.0 float32); the structure is kept
    out, norm = tree.clip_by_global_norm(empty, 1.0)
    assert skeleton(out) == skeleton(empty)
    assert str(norm.dtype) == "float32"
    assert tuple(norm.shape) == ()
    assert float(norm) == 0.0
    assert float(tree.global_norm(empty)) == 0.0
    assert skeleton(tree.clip_by_value(empty, 0.0, 1.0)) == skeleton(empty)
    assert skeleton(tree.clip_by_norm(empty, 1.0)) == skeleton(empty)


def test_single_array_is_a_tree(backend, make, check):
    # a bare array is a one-leaf tree (TF's global_norm refuses it; the tree API does not)
    out, norm = tree.clip_by_global_norm(make(A), 1.0)
    check(out, [0.6, 0.8], "float32", ULP)
    check(norm, np.float32(5), "float32", ULP)


def test_flatten_and_map_leaves(backend, ab):
    a, b = ab
    tr = {"x": [a, None], "y": Pair(b, a)}
    flat, unflatten = tree.flatten(tr)
    assert len(flat) == 4
    assert flat[0] is a and flat[1] is None and flat[2] is b and flat[3] is a
    rebuilt = unflatten(flat)
    assert skeleton(rebuilt) == skeleton(tr)
    assert rebuilt["y"].a is b
    assert tree.map_leaves(lambda t: t.shape, tr) == {
        "x": [(2,), None],
        "y": Pair((1, 1), (2,)),
    }


# -------------------------------------------------------------- torch trees
def _tiny_model(backend: Backend):
    torch = backend.module
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2, bias=False)
    )
    return model.to(backend.device)


@pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
def test_torch_state_dict(backend):
    model = _tiny_model(backend)
    sd = model.state_dict()
    clipped, norm = tree.clip_by_global_norm(sd, 0.5)
    assert type(clipped) is type(sd)
    assert list(clipped) == list(sd)
    assert clipped._metadata == sd._metadata  # needed by load_state_dict
    host = [np64(backend, v) for v in sd.values()]
    n64 = global_norm64(host)
    assert_array(norm, np.float32(n64), backend=backend, dtype="float32", ulp=ULP, what="norm")
    for (k, v), h in zip(clipped.items(), host, strict=True):
        assert_array(v, h * gscale64(n64, 0.5), backend=backend, dtype="float32", ulp=ULP, what=k)
    model.load_state_dict(clipped)  # the result is a usable state_dict
    after = [np64(backend, v) for v in model.state_dict().values()]
    assert global_norm64(after) == pytest.approx(0.5, rel=1e-6)


@pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
def test_torch_named_parameters_grads(backend):
    torch = backend.module
    model = _tiny_model(backend)
    model[0].bias.requires_grad_(False)  # frozen: its grad stays None
    x = torch.arange(6.0, device=backend.device).reshape(2, 3)
    model(x).square().sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert grads["0.bias"] is None
    clipped, norm = tree.clip_by_global_norm(grads, 1.0)
    assert list(clipped) == list(grads)
    assert clipped["0.bias"] is None
    host = {k: np64(backend, v) for k, v in grads.items() if v is not None}
    n64 = global_norm64(list(host.values()))
    assert n64 > 1.0  # the case clips
    assert_array(norm, np.float32(n64), backend=backend, dtype="float32", ulp=ULP, what="norm")
    for k, h in host.items():
        assert_array(
            clipped[k], h * gscale64(n64, 1.0), backend=backend, dtype="float32", ulp=ULP, what=k
        )
    # the parameters themselves are a tree too (tensors that require grad)
    params = dict(model.named_parameters())
    out = tree.clip_by_value(params, -0.1, 0.1)
    assert list(out) == list(params)
    for k, v in out.items():
        assert_array(
            v,
            np.clip(np64(backend, params[k]), -0.1, 0.1).astype(np.float32),
            backend=backend,
            dtype="float32",
            what=k,
        )


# ---------------------------------------------------------------- JAX trees
def _jax_classes(jax):
    @jax.tree_util.register_pytree_node_class
    class Layer:
        """A custom pytree node: children (w, b), auxiliary data name."""

        def __init__(self, w, b, name="layer"):
            self.w, self.b, self.name = w, b, name

        def tree_flatten(self):
            return (self.w, self.b), self.name

        @classmethod
        def tree_unflatten(cls, name, children):
            return cls(*children, name=name)

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Params:
        """A flax-free dataclass registered with jax.tree_util."""

        dense: Any
        scale: Any

    return Layer, Params


@pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)
def test_jax_custom_pytree_node(backend, ab, check):
    jax = backend.module
    layer_cls, _ = _jax_classes(jax)
    a, b = ab
    tr = {"enc": layer_cls(a, b, name="enc"), "other": [None]}
    out, norm = tree.clip_by_global_norm(tr, 6.5)
    assert isinstance(out["enc"], layer_cls)
    assert out["enc"].name == "enc"
    assert out["other"] == [None]
    check(out["enc"].w, [1.5, 2.0], "float32", ULP)
    check(out["enc"].b, [[6.0]], "float32", ULP)
    check(norm, np.float32(13), "float32", ULP)


@pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)
def test_jax_registered_dataclass(backend, ab, check):
    jax = backend.module
    _, params_cls = _jax_classes(jax)
    a, b = ab
    tr = params_cls(dense={"w": a, "b": None}, scale=b)
    out, norm = tree.clip_by_global_norm(tr, 6.5)
    assert isinstance(out, params_cls)
    assert out.dense["b"] is None
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(tr)
    check(out.dense["w"], [1.5, 2.0], "float32", ULP)
    check(out.scale, [[6.0]], "float32", ULP)
    check(norm, np.float32(13), "float32", ULP)
    out_v = tree.clip_by_value(tr, -1.0, 1.0)
    assert isinstance(out_v, params_cls)
    check(out_v.scale, [[1.0]], "float32")


@pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)
def test_jax_pytree_with_bad_leaf_names_the_node(backend, ab):
    jax = backend.module
    _, params_cls = _jax_classes(jax)
    with pytest.raises(TypeError, match=r"Params at tree\['p'\]"):
        tree.global_norm({"p": params_cls(dense=ab[0], scale="not an array")})


# ------------------------------------------------------------ mixed dtypes
MIXED = [
    ("float16", "float32", "float32"),
    ("bfloat16", "float32", "float32"),
    ("float32", "float64", "float64"),
    ("float16", "bfloat16", "float32"),  # neither holds the other
    ("bfloat16", "float64", "float64"),
]


@pytest.mark.parametrize(("da", "db", "acc"), MIXED, ids=["-".join(m[:2]) for m in MIXED])
def test_mixed_dtypes_widest(backend, make, check, da, db, acc):
    a, b = make(A, da), make(B, db)
    backend.dtype(acc)
    tr = {"a": a, "b": [b, None]}
    check(tree.global_norm(tr), np.float32(13), acc, ULP)
    out, norm = tree.clip_by_global_norm(tr, 6.5)
    check(norm, np.float32(13), acc, ULP)
    check(out["a"], [1.5, 2.0], da, 1)  # each leaf keeps its dtype
    check(out["b"][0], [[6.0]], db, 1)
    assert out["b"][1] is None
    # the per-leaf functions keep each dtype too
    per_leaf = tree.clip_by_norm(tr, 2.5)
    check(per_leaf["a"], [1.5, 2.0], da, 1)
    check(per_leaf["b"][0], [[2.5]], db, 1)
    values = tree.clip_by_value(tr, -1.0, 1.0)
    check(values["a"], [1.0, 1.0], da)
    check(values["b"][0], [[1.0]], db)


@pytest.mark.parametrize(("da", "db", "acc"), MIXED, ids=["-".join(m[:2]) for m in MIXED])
def test_mixed_dtypes_refused_without_accumulate_dtype(backend, make, da, db, acc):
    tr = [make(A, da), make(B, db)]
    with pytest.raises(TypeError, match="one dtype"):
        tree.global_norm(tr, accumulate_dtype=None)
    with pytest.raises(TypeError, match="one dtype"):
        tree.clip_by_global_norm(tr, 1.0, accumulate_dtype=None)


def test_mixed_float16_overflow_avoided(backend, make, check):
    # docs/tf-reference.md §3.2: float16 [300] alone has an inf norm in TF; next to a float32
    # leaf the default "widest" accumulates in float32, so the norm is 300 and float16 stays
    # float16.
    tr = {"big": make([300.0, 0.0], "float16"), "w": make([0.0], "float32")}
    out, norm = tree.clip_by_global_norm(tr, 150.0)
    check(norm, np.float32(300), "float32")
    check(out["big"], [150.0, 0.0], "float16")
    check(out["w"], [0.0], "float32")


def test_single_float16_widest_is_float16(backend, make, check):
    # "widest" of float16 leaves is float16: TF's inf norm (§3.2) and all-NaN result (§4.2)
    tr = [make([300.0, 0.0], "float16")]
    out, norm = tree.clip_by_global_norm(tr, 1.0)
    check(norm, np.float16(np.inf), "float16")
    check(out[0], [math.nan, math.nan], "float16")
    # an explicit accumulate_dtype is the way out
    out, norm = tree.clip_by_global_norm(tr, 1.0, accumulate_dtype="float32")
    check(norm, np.float32(300), "float32")
    check(out[0], [1.0, 0.0], "float16")


@pytest.mark.parametrize("acc", ["float32", "float64"])
def test_explicit_accumulate_dtype(backend, make, check, acc):
    backend.dtype(acc)
    tr = {"a": make(A, "float32"), "b": make(B, "float32")}
    check(tree.global_norm(tr, accumulate_dtype=acc), np.float32(13), acc, ULP)
    _, norm = tree.clip_by_global_norm(tr, 1.0, accumulate_dtype=acc)
    check(norm, np.float32(13), acc, ULP)


# ----------------------------------- one dtype: bit for bit the top-level functions
@pytest.fixture
def random_tree(backend, make):
    rng = np.random.default_rng(42)
    shapes = {"w1": (5, 3), "b1": (3,), "w2": (3, 7), "s": ()}
    return {k: make(rng.standard_normal(s) * 3.0, "float32") for k, s in shapes.items()}


@pytest.mark.parametrize("accumulate_dtype", [None, "widest"])
@pytest.mark.parametrize("clip", [0.5, 1e3])
def test_one_dtype_equals_top_level(backend, random_tree, accumulate_dtype, clip):
    flat = list(random_tree.values())
    out, norm = tree.clip_by_global_norm(random_tree, clip, accumulate_dtype=accumulate_dtype)
    ref_out, ref_norm = anyclip.clip_by_global_norm(flat, clip)
    assert_same_bits(backend, norm, ref_norm, "norm")
    for (k, v), r in zip(out.items(), ref_out, strict=True):
        assert_same_bits(backend, v, r, k)
    gn = tree.global_norm(random_tree, accumulate_dtype=accumulate_dtype)
    assert_same_bits(backend, gn, anyclip.global_norm(flat), "global_norm")


def test_per_leaf_equal_top_level(backend, random_tree):
    by_norm = tree.clip_by_norm(random_tree, 1.5)
    by_norm_axes = tree.clip_by_norm({k: random_tree[k] for k in ("w1", "w2")}, 1.5, axes=0)
    by_value = tree.clip_by_value(random_tree, -0.5, 2.0)
    by_avg = tree.clip_by_average_norm(random_tree, 0.2)
    for k, t in random_tree.items():
        assert_same_bits(backend, by_norm[k], anyclip.clip_by_norm(t, 1.5), k)
        assert_same_bits(backend, by_value[k], anyclip.clip_by_value(t, -0.5, 2.0), k)
        assert_same_bits(backend, by_avg[k], anyclip.clip_by_average_norm(t, 0.2), k)
    for k, v in by_norm_axes.items():
        assert_same_bits(backend, v, anyclip.clip_by_norm(random_tree[k], 1.5, axes=0), k)


def test_use_norm(backend, ab, make, check):
    # §4.2: use_norm = 26 gives [0.75, 1], [[3]] and returns use_norm unchanged
    out, norm = tree.clip_by_global_norm({"a": ab[0], "b": ab[1]}, 6.5, use_norm=make(26.0))
    check(out["a"], [0.75, 1.0], "float32", ULP)
    check(out["b"], [[3.0]], "float32", ULP)
    check(norm, np.float32(26), "float32")


# -------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("bad", "name"),
    [(1.0, "float"), ("w", "str"), (np.float32(1.0), "float32"), (object(), "object")],
    ids=["python-float", "str", "numpy-scalar", "object"],
)
def test_non_array_leaf_names_the_path(backend, ab, bad, name):
    tr = {"layer": [ab[0], {"bias": bad}]}
    pattern = rf"{name} at tree\['layer'\]\[1\]\['bias'\]"
    with pytest.raises(TypeError, match=pattern):
        tree.clip_by_global_norm(tr, 1.0)
    with pytest.raises(TypeError, match=pattern):
        tree.global_norm(tr)
    with pytest.raises(TypeError, match=pattern):
        tree.clip_by_value(tr, 0.0, 1.0)
    with pytest.raises(TypeError, match=pattern):
        tree.clip_by_norm(tr, 1.0)


def test_set_is_not_a_container():
    with pytest.raises(TypeError, match=r"set at tree\[0\]"):
        tree.global_norm([{1.0}])


def test_mixed_libraries_refused():
    strict = pytest.importorskip("array_api_strict")
    tr = [np.ones(2, dtype=np.float32), strict.ones(2, dtype=strict.float32)]
    with pytest.raises(TypeError, match="array library"):
        tree.clip_by_global_norm(tr, 1.0)


def test_integer_leaf_refused(backend, make):
    with pytest.raises(TypeError, match="floating"):
        tree.clip_by_global_norm({"a": make([1, 2], "int32")}, 1.0)


def test_average_norm_float32_only(backend, make):
    # docs/tf-reference.md §5 / B17: clip_by_average_norm accepts float32 only
    with pytest.raises(TypeError, match="float32"):
        tree.clip_by_average_norm({"a": make(A, "float64")}, 1.0)


@pytest.mark.filterwarnings(
    "ignore:the matrix subclass is not the recommended:PendingDeprecationWarning"
)
def test_numpy_matrix_leaves_are_arrays():
    # TF converts an np.matrix to a 2-D tensor; the list functions accept it, so does the tree.
    # [[3, 4]] and [12]: global norm 13, scale 1/13 (hand-derived).
    clipped, norm = tree.clip_by_global_norm(
        {"a": np.matrix([[3.0, 4.0]]), "b": [np.array([12.0])]}, 1.0
    )
    assert type(clipped["a"]) is np.ndarray
    assert clipped["a"].dtype == np.float64 and clipped["a"].shape == (1, 2)
    np.testing.assert_array_equal(clipped["a"], np.array([[3.0, 4.0]]) * (1 / 13))
    assert norm == 13.0
    out = tree.clip_by_norm({"a": np.matrix([[3.0, 4.0]])}, 1.0)["a"]
    assert type(out) is np.ndarray
    assert out.dtype == np.float64 and out.shape == (1, 2)
    np.testing.assert_array_equal(out, [[0.6, 0.8]])


def test_masked_array_leaf_is_refused_with_its_path():
    with pytest.raises(TypeError, match=r"masked array at tree\['g'\]\[1\].*filled"):
        tree.global_norm({"g": [np.ones(2), np.ma.array([3.0, 4.0], mask=[0, 1])]})
