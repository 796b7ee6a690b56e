"""``anyclip.tree`` keeps container subclasses and their attributes (issue 22, item 9).

A rebuilt tree must be the input's structure: the same container types (an ``OrderedDict``
subclass, a ``defaultdict`` with its ``default_factory``, a namedtuple, a dict, list or tuple
subclass) carrying the same instance attributes, at the top level and inside a JAX-registered
dataclass or custom pytree node, which JAX alone rebuilds as its registered types (it treats
an ``OrderedDict`` subclass as a leaf). Values: docs/tf-reference.md §4.2 (``[3, 4]`` and
``[[12]]``, global norm 13; ``clip_by_global_norm`` to 6.5 gives ``[1.5, 2]`` and ``[[6]]``).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, NamedTuple

import numpy as np
import pytest

from anyclip import tree

ULP = 3  # float32 reductions (docs/tf-reference.md §11)


class Tagged(collections.OrderedDict):  # type: ignore[type-arg]
    """An OrderedDict subclass with an attribute (as flax's and haiku's containers have)."""


class TaggedDict(dict):  # type: ignore[type-arg]
    pass


class TaggedList(list):  # type: ignore[type-arg]
    pass


class TaggedTuple(tuple):  # type: ignore[type-arg]
    pass


class Pair(NamedTuple):
    a: Any
    b: Any


def _tag(node: Any) -> Any:
    node.tag = "kept"
    return node


CONTAINERS = {
    "ordereddict-subclass": lambda a, b: _tag(Tagged([("a", a), ("b", b)])),
    "dict-subclass": lambda a, b: _tag(TaggedDict(a=a, b=b)),
    "defaultdict": lambda a, b: collections.defaultdict(list, {"a": a, "b": b}),
    "list-subclass": lambda a, b: _tag(TaggedList([a, b])),
    "tuple-subclass": lambda a, b: _tag(TaggedTuple((a, b))),
    "namedtuple": lambda a, b: Pair(a, b),
}


def _values(node: Any) -> list[Any]:
    return list(node.values()) if isinstance(node, dict) else list(node)


def _same_container(out: Any, src: Any) -> None:
    assert type(out) is type(src)
    assert getattr(out, "tag", None) == getattr(src, "tag", None)
    assert getattr(out, "default_factory", None) is getattr(src, "default_factory", None)
    if isinstance(src, dict):
        assert list(out) == list(src)


@pytest.mark.parametrize("kind", list(CONTAINERS))
def test_top_level_container_kept(backend, make, check, kind):
    src = CONTAINERS[kind](make([3.0, 4.0]), make([[12.0]]))
    out, norm = tree.clip_by_global_norm(src, 6.5)
    _same_container(out, src)
    got = _values(out)
    check(got[0], [1.5, 2.0], "float32", ULP)
    check(got[1], [[6.0]], "float32", ULP)
    check(norm, np.float32(13), "float32", ULP)


def _jax_wrappers(jax: Any) -> dict[str, Any]:
    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Params:
        inner: Any

    @jax.tree_util.register_pytree_node_class
    class Node:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def tree_flatten(self) -> tuple[tuple[Any], None]:
            return (self.inner,), None

        @classmethod
        def tree_unflatten(cls, aux: None, children: tuple[Any]) -> Node:
            return cls(*children)

    return {"dataclass": Params, "pytree-node": Node}


@pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)
@pytest.mark.parametrize("wrapper", ["dataclass", "pytree-node"])
@pytest.mark.parametrize("kind", list(CONTAINERS))
def test_container_inside_jax_node_kept(backend, make, check, wrapper, kind):
    cls = _jax_wrappers(backend.module)[wrapper]
    src = cls(CONTAINERS[kind](make([3.0, 4.0]), make([[12.0]])))
    out, norm = tree.clip_by_global_norm(src, 6.5)
    assert type(out) is cls
    _same_container(out.inner, src.inner)
    got = _values(out.inner)
    check(got[0], [1.5, 2.0], "float32", ULP)
    check(got[1], [[6.0]], "float32", ULP)
    check(norm, np.float32(13), "float32", ULP)
    out_v = tree.clip_by_value(src, -1.0, 1.0)
    _same_container(out_v.inner, src.inner)
    check(_values(out_v.inner)[1], [[1.0]], "float32")


@pytest.mark.parametrize("backend", ["jax"], indirect=True)
def test_bad_leaf_deep_in_a_jax_node_names_the_node(backend, make):
    cls = _jax_wrappers(backend.module)["dataclass"]
    with pytest.raises(TypeError, match=r"got Params at tree\['p'\]"):
        tree.global_norm({"p": cls(Tagged(a=make([1.0]), b="not an array"))})
