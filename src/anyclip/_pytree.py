"""The tree walk: nested lists, tuples, dicts, namedtuples and JAX pytrees as lists of leaves.

Layer: helpers below the rules (it knows containers, not formulas). :mod:`anyclip.tree`
re-exports :func:`flatten` and :func:`map_leaves`; the rule modules that take trees
(:mod:`anyclip._groups`, :mod:`anyclip._adaptive`, :mod:`anyclip._per_example`) walk them here,
below the public :mod:`anyclip.tree` that re-exports their functions.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from anyclip._compat import is_array, torch_compiling
from anyclip._keywords import hints_keywords
from anyclip._sparse import is_sparse

__all__ = ["Enclosing", "Rebuild", "TreeT", "flatten", "map_leaves"]

TreeT = TypeVar("TreeT")
Rebuild = Callable[[Iterator[Any]], Any]


def _is_namedtuple(node: Any) -> bool:
    # getattr, not hasattr: torch.compile before 2.13 cannot trace hasattr on a class
    return isinstance(node, tuple) and isinstance(getattr(type(node), "_fields", None), tuple)


#: Under ``torch.compile`` the ancestors are compared only from this depth on (see below)
_TRACED_CYCLE_DEPTH = 32

#: The containers a node is inside, outermost first, each with its path
Enclosing = tuple[tuple[Any, str], ...]


def _cycle_path(node: Any, path: str, enclosing: Enclosing) -> str | None:
    """Where ``node`` first holds itself, if it is one of the containers ``enclosing`` it.

    The path of the first container below the outermost copy of ``node`` that is ``node``
    again: ``path`` itself in an eager call, which finds a cycle where it first closes.
    torch.compile before torch 2.13 can neither take the ``id()`` of a traced list or dict
    nor compare two distinct ones with ``is`` (Dynamo's "Failed to trace builtin operator
    `is_`"), so while it traces, a tree is checked only deeper than ``_TRACED_CYCLE_DEPTH``
    containers, where a cycle must show and no real tree goes; the compiled call then stops
    there (without ``fullgraph`` the call runs eagerly and raises the same ``ValueError``)
    instead of recursing until Dynamo's ``RecursionError``.
    """
    if len(enclosing) < _TRACED_CYCLE_DEPTH and torch_compiling():
        return None
    seen = False
    for c, at in enclosing:
        if c is node:
            if seen:
                return at
            seen = True
    return path if seen else None


def _structure(node: Any, leaves: list[Any], path: str, enclosing: Enclosing = ()) -> Rebuild:
    """Append ``node``'s leaves to ``leaves``; return how to rebuild it from new leaves.

    ``enclosing`` holds the containers ``node`` is inside, with their paths, to refuse a
    container that holds itself (Python would recurse until ``RecursionError``).
    """
    if node is None or is_array(node) or is_sparse(node):  # a sparse array is one leaf
        leaves.append(node)
        return next
    if isinstance(node, (dict, list, tuple)):
        cycle = _cycle_path(node, path, enclosing)
        if cycle is not None:
            msg = (
                f"`tree` must not contain itself: the {type(node).__name__} at tree{cycle} is "
                "one of its own ancestors; pass a tree without cycles"
            )
            raise ValueError(msg)
        enclosing = (*enclosing, (node, path))
    if isinstance(node, dict):
        keys = list(node)
        subs = [_structure(node[k], leaves, f"{path}[{k!r}]", enclosing) for k in keys]

        def rebuild_dict(it: Iterator[Any]) -> Any:
            values = [s(it) for s in subs]
            if type(node) is dict:  # the common case, and the one torch.compile traces
                return dict(zip(keys, values, strict=True))
            out = copy.copy(node)  # keeps the mapping type and attributes (state_dict metadata)
            out.update(zip(keys, values, strict=True))
            return out

        return rebuild_dict
    if isinstance(node, (list, tuple)):
        subs = [_structure(c, leaves, f"{path}[{i}]", enclosing) for i, c in enumerate(node)]
        if type(node) in (list, tuple):  # the common cases, and the ones torch.compile traces
            return lambda it: type(node)([s(it) for s in subs])
        if _is_namedtuple(node):
            return lambda it: type(node)(*[s(it) for s in subs])
        return lambda it: _same_sequence(node, [s(it) for s in subs])
    # NumPy subclasses that are no array-API arrays (after the containers: torch.compile
    # traces this function, and cannot trace a str method on a module name)
    module = type(node).__module__
    if module.startswith("numpy.ma"):
        msg = (
            f"`tree` leaves must be arrays without a mask, got a NumPy masked array at "
            f"tree{path}: TF drops masks and would count the masked values; pass `x.filled(0)` "
            "to clip with them as zeros"
        )
        raise TypeError(msg)
    if module.startswith("numpy") and type(node).__name__ == "matrix":
        leaves.append(node)  # converted to a plain 2-D array by the functions, as TF does
        return next
    jax_tree = _jax_structure(node, leaves, path, enclosing)
    if jax_tree is not None:
        return jax_tree
    msg = (
        f"`tree` leaves must be arrays or None inside lists, tuples, dicts, namedtuples or "
        f"JAX pytrees, got {type(node).__name__} at tree{path}"
    )
    raise TypeError(msg)


def _same_sequence(node: Any, values: list[Any]) -> Any:
    """A list or tuple subclass of ``node``'s type, with ``values`` and ``node``'s attributes."""
    if isinstance(node, list):
        out = copy.copy(node)  # keeps the type and the attributes
        out[:] = values
        return out
    out = type(node)(values)
    if hasattr(node, "__dict__"):
        out.__dict__.update(node.__dict__)
    return out


def _jax_structure(node: Any, leaves: list[Any], path: str, enclosing: Enclosing) -> Rebuild | None:
    """A JAX pytree node (only when JAX is already imported: anyclip never imports it)."""
    if "jax" not in sys.modules:
        return None
    import jax

    # One level at a time: the node's children go through _structure, so that a dict, list
    # or tuple inside it (subclasses and their attributes, a defaultdict's factory included)
    # is rebuilt as anywhere else; JAX treats an OrderedDict subclass as a leaf and rebuilds
    # only the exact types it registers.
    children, level = jax.tree_util.tree_flatten(node, is_leaf=lambda x: x is not node)
    if jax.tree_util.treedef_is_leaf(level):  # not a registered container
        return None
    mark = len(leaves)
    try:
        subs = [
            _structure(c, leaves, f"{path}.<{i}>", (*enclosing, (node, path)))
            for i, c in enumerate(children)
        ]
    except TypeError:  # a bad leaf inside: the message names this node
        del leaves[mark:]
        return None
    return lambda it: jax.tree_util.tree_unflatten(level, [s(it) for s in subs])


@hints_keywords
def flatten(tree: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """The leaves of ``tree`` (arrays and ``None``) and a function that rebuilds the structure.

    Raises
    ------
    TypeError
        If a leaf is not an array or ``None``.
    ValueError
        If a container holds itself (a recursive list or dict).

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> leaves, unflatten = tree.flatten({"a": [np.zeros(1), None]})
    >>> len(leaves), unflatten([np.ones(1), None])
    (2, {'a': [array([1.]), None]})
    """
    leaves: list[Any] = []
    rebuild = _structure(tree, leaves, "")

    def unflatten(new_leaves: list[Any]) -> Any:
        return rebuild(iter(new_leaves))

    return leaves, unflatten


@hints_keywords
def map_leaves(fn: Callable[[Any], Any], tree: TreeT) -> TreeT:
    """Apply ``fn`` to every array leaf of ``tree``; ``None`` leaves stay ``None``.

    Parameters
    ----------
    fn : callable
        Takes one array, returns one array.
    tree : nested structure of arrays
        As in :func:`flatten`.

    Returns
    -------
    same structure as ``tree``

    Examples
    --------
    >>> import numpy as np
    >>> from anyclip import tree
    >>> tree.map_leaves(lambda a: a * 2, (np.ones(2), None))
    (array([2., 2.]), None)
    """
    leaves, unflatten = flatten(tree)
    return cast(TreeT, unflatten([None if leaf is None else fn(leaf) for leaf in leaves]))
