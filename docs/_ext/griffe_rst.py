"""A griffe extension for the docs site: anyclip's numpydoc docstrings as mkdocstrings' Markdown.

The docstrings are numpydoc, written for ``help()`` and doctests. mkdocstrings renders their
text as Markdown, where three things would come out wrong; this extension rewrites them before
the docstring is parsed:

* a doctest outside an ``Examples`` section (a module docstring's example) would read as a
  quotation: it becomes a ``pycon`` code block;
* ``See Also`` entries (``name : description``) would run into one paragraph: each becomes a
  list item, linked as below;
* RST roles (``:func:`anyclip.clip_by_norm```) would show as literal text. A role that names a
  public object becomes an autorefs link, ``[`label`][anyclip.path]``, so
  ``mkdocs build --strict`` fails if the object is not on the API page. A name relative to the
  docstring's module (``:func:`global_norm``` in ``anyclip.tree``) is looked up in that module
  first, then at the top level; a private object (``anyclip._clip.global_norm``) is linked
  through its public name (``anyclip.global_norm``); a target with no public page
  (``:mod:`anyclip._core```) becomes inline code.

mkdocs.yml loads it through the mkdocstrings option ``extensions``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import griffe

__all__ = ["RstRoles"]

_SEE_ALSO_ENTRY = re.compile(r"^(\S+)\s+:\s+(.*)$")
_ROLE = re.compile(r":(?:func|class|mod|meth|data|obj|attr):`~?([^`]+)`")


def _is_public(path: str) -> bool:
    return not any(part.startswith("_") for part in path.split("."))


class RstRoles(griffe.Extension):
    """Rewrite ``:func:`x``` and its kin as autorefs links once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite the docstrings of every object defined in ``pkg``."""
        for obj in _walk(pkg):
            if obj.docstring is not None:
                module = obj if obj.is_module else obj.module
                text = _sections(obj.docstring.value, lambda name, m=module: _link(pkg, m, name))
                obj.docstring.value = _ROLE.sub(
                    lambda m, module=module: _link(pkg, module, m.group(1).strip()), text
                )


def _sections(text: str, link: Callable[[str], str]) -> str:
    """Fence doctests outside ``Examples``; turn ``See Also`` entries into a list."""
    lines = text.splitlines()
    out: list[str] = []
    section = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and line.strip() and set(lines[i + 1].strip()) == {"-"}:
            section = line.strip()
            out.extend(lines[i : i + 2])
            i += 2
            continue
        if section != "Examples" and line.lstrip().startswith(">>>"):
            end = i
            while end < len(lines) and lines[end].strip():
                end += 1
            out.extend(["```pycon", *lines[i:end], "```"])
            i = end
            continue
        entry = _SEE_ALSO_ENTRY.match(line)
        if section == "See Also" and entry:
            out.append(f"- {link(entry.group(1))}: {entry.group(2)}")
        elif section == "See Also" and line.strip() and out and out[-1].startswith("- "):
            out[-1] += f" {line.strip()}"
        else:
            out.append(line)
        i += 1
    return "\n".join(out)


def _walk(obj: griffe.Object) -> list[griffe.Object]:
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found.extend(_walk(member))
    return found


def _exists(pkg: griffe.Module, path: str) -> bool:
    if path == pkg.path:
        return True
    try:
        pkg[path.removeprefix(f"{pkg.path}.")]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return False
    return True


def _link(pkg: griffe.Module, module: griffe.Module, target: str) -> str:
    """The Markdown for one role: an autorefs link to the public object, or inline code."""
    if target.startswith(f"{pkg.path}.") or target == pkg.path:
        candidates = [target]
    else:
        candidates = [f"{module.path}.{target}", f"{pkg.path}.{target}"]
    for path in candidates:
        if not _exists(pkg, path):
            continue
        if not _is_public(path):
            path = f"{pkg.path}.{path.rsplit('.', 1)[-1]}"
            if not (_is_public(path) and _exists(pkg, path)):
                break
        return f"[`{target}`][{path}]"
    return f"`{target}`"
