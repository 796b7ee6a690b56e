"""The package's imports point down: no import loops, and no import from a floor to a higher one.

The floors are CONTRIBUTING.md's ("The package's floors"), lowest first, in :data:`FLOORS`.
Every module of ``src/anyclip`` is read with :mod:`ast` (it is not imported) and every import
in it counts: at module level, inside functions and classes, and inside ``if TYPE_CHECKING:``
blocks (none is excluded: an import made for the type checker only draws the same arrow on the
map). Imports are ``import anyclip.x``, ``from anyclip.x import y``, ``from anyclip import x``
and the relative forms (``from . import x``, ``from ._x import y``); ``from P import name``
counts as an import of the module ``P.name`` where that is a module of the package, else of
``P``. Importing ``anyclip.a.b`` also runs the package ``anyclip.a``'s ``__init__`` first; that
implied arrow is not drawn (every module would otherwise import ``anyclip`` itself).

A module of the package that no floor names fails the test: a new module is placed on a floor
when it is added.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterator
from pathlib import Path

import pytest

import anyclip

#: The floors, lowest first, as CONTRIBUTING.md names them: (name, module patterns). A module
#: may import modules on its own floor or on lower ones, never on a higher one; within a floor
#: the imports must still form no loop.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "anyclip._typing",
            "anyclip._keywords",
            "anyclip._memo",
            "anyclip._compat",
            "anyclip._torch_namespace",
            "anyclip._torch_unsigned",
            "anyclip._torch_rounding",
        ),
    ),
    (
        "numerics",
        (
            "anyclip._numerics",
            "anyclip._sparse",
            "anyclip._subnormals",
            "anyclip._pytree",
            "anyclip._torch_autograd",
            "anyclip._gradients",
        ),
    ),
    ("kernels", ("anyclip._kernels", "anyclip._kernels.*")),
    (
        "core",
        (
            "anyclip._core",
            "anyclip._policy",
            "anyclip._policy_axes",
            "anyclip._policy_dtypes",
            "anyclip._policy_lists",
            "anyclip._policy_words",
            "anyclip._constraints",
            "anyclip._history",
            "anyclip._if_finite",
            "anyclip._schedule",
        ),
    ),
    (
        "rules",
        (
            "anyclip._clip",
            "anyclip._clip_tensor",
            "anyclip._norms",
            "anyclip._groups",
            "anyclip._adaptive",
            "anyclip._agc",
            "anyclip._per_example",
            "anyclip._embedding",
            "anyclip._api",
        ),
    ),
    ("public", ("anyclip", "anyclip.tree", "anyclip.constraints")),
    ("adapters", ("anyclip.torch", "anyclip.torch.*", "anyclip.optax", "anyclip.optax.*")),
    ("entry", ("anyclip.__main__",)),
]

#: Adapters that must not import each other (a torch user does not import JAX, and back).
SEPARATE = (("anyclip.torch", "anyclip.optax"),)

ROOT = Path(anyclip.__file__).resolve().parent


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module of the package under ``root``: dotted name -> (file, is a package)."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = (path, is_package)
    return out


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]
) -> Iterator[str]:
    """The package's modules that ``node`` (an import in ``module``) imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join([*base, *([node.module] if node.module else [])])
        else:
            prefix = node.module or ""
        names = [
            f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in known else prefix
            for alias in node.names
        ]
    for name in names:
        while name and name not in known:  # ``import anyclip.x.y`` of a name, not a module
            name = name.rpartition(".")[0]
        if name:
            yield name


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its source (itself left out)."""
    modules = _modules(root)
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(_targets(node, module, is_package, known))
        edges.discard(module)
        graph[module] = edges
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import loops: strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def floor_of(module: str) -> int | None:
    """The index in :data:`FLOORS` of the floor ``module`` stands on (``None``: no floor)."""
    hits = [
        i
        for i, (_, patterns) in enumerate(FLOORS)
        if any(fnmatch.fnmatchcase(module, p) for p in patterns)
    ]
    assert len(hits) <= 1, f"{module} matches several floors: {[FLOORS[i][0] for i in hits]}"
    return hits[0] if hits else None


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a floor to a higher one, and between adapters kept apart."""
    out = []
    for module, targets in sorted(graph.items()):
        here = floor_of(module)
        assert here is not None
        for target in sorted(targets):
            there = floor_of(target)
            assert there is not None
            if there > here:
                out.append(
                    f"{module} ({FLOORS[here][0]}) imports {target} ({FLOORS[there][0]}, higher)"
                )
            for a, b in SEPARATE:
                for x, y in ((a, b), (b, a)):
                    inside = module == x or module.startswith(x + ".")
                    if inside and (target == y or target.startswith(y + ".")):
                        out.append(f"{module} imports {target}: {x} and {y} stay apart")
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(ROOT)


def test_every_module_stands_on_one_floor(graph: dict[str, set[str]]) -> None:
    unplaced = sorted(m for m in graph if floor_of(m) is None)
    assert not unplaced, (
        f"modules on no floor: {unplaced}; add each to FLOORS here and to CONTRIBUTING.md's floors"
    )


def test_no_import_loops(graph: dict[str, set[str]]) -> None:
    assert loops(graph) == []


def test_imports_point_down(graph: dict[str, set[str]]) -> None:
    assert upward(graph) == []


def test_the_reader_sees_imports_inside_functions(tmp_path: Path) -> None:
    """The checks see a loop made by imports inside functions, and a relative upward import."""
    pkg = tmp_path / "anyclip"
    (pkg / "torch").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from anyclip import tree\n")
    (pkg / "tree.py").write_text("def f():\n    from anyclip._core import g\n")
    (pkg / "_core.py").write_text("def g():\n    from . import tree\n")
    (pkg / "torch" / "__init__.py").write_text("")
    (pkg / "torch" / "_x.py").write_text("from .. import __main__\nfrom ... import other\n")
    (pkg / "__main__.py").write_text("")
    g = import_graph(pkg)
    assert g["anyclip._core"] == {"anyclip.tree"}
    assert g["anyclip.torch._x"] == {"anyclip.__main__"}
    assert loops(g) == [["anyclip._core", "anyclip.tree"]]
    assert upward(g) == [
        "anyclip._core (core) imports anyclip.tree (public, higher)",
        "anyclip.torch._x (adapters) imports anyclip.__main__ (entry, higher)",
    ]
