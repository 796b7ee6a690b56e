"""An mkdocs hook: each API page shows the rows of the differences table that name its function.

``docs/tf-behaviour.md`` keeps one table, "Where anyclip differs from TF", and one section per
behaviour anyclip keeps on purpose. A function's API page holds the placeholder
``<!-- differences: NAME -->``; this hook replaces it with the table rows whose text names
``NAME`` in backticks (`` `NAME` `` or `` `NAME(...)` ``), the sections whose heading names it, and
a link to the whole table (the rows that concern every function name none). The table stays
the one source: a row added there appears on its function's page at the next build.

mkdocs.yml loads it under ``hooks``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["on_page_markdown"]

_PLACEHOLDER = re.compile(r"<!-- differences: (?P<name>[\w.]+) -->")
_SOURCE = Path(__file__).resolve().parent.parent / "tf-behaviour.md"
_TABLE_HEADING = "## Where anyclip differs from TF"


def _names(text: str, name: str) -> bool:
    return re.search(rf"`(?:anyclip\.)?{re.escape(name)}[`(]", text) is not None


def _slug(heading: str) -> str:
    """The anchor mkdocs' ``toc`` extension gives a heading (its default slugify)."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _relinked(row: str, prefix: str) -> str:
    """A row of ``tf-behaviour.md`` with its relative links made relative to ``prefix``."""
    return re.sub(r"\]\((?![a-z]+:|#)([^)]+)\)", lambda m: f"]({prefix}{m[1]})", row)


def _section(name: str, link: str) -> str:
    source = _SOURCE.read_text(encoding="utf-8")
    head, _, table_part = source.partition(_TABLE_HEADING)
    rows = [line for line in table_part.splitlines() if line.startswith("| ")]
    header, matched = rows[:2], [r for r in rows[2:] if _names(r, name)]
    kept = [h[3:].strip() for h in head.splitlines() if h.startswith("## ") and _names(h, name)]
    out = []
    if kept:
        out.append("TF's behaviour that anyclip keeps on purpose, with examples:")
        out.append("")
        out += [f"- [{h}]({link}#{_slug(h)})" for h in kept]
        out.append("")
    if matched:
        out.append(f"Where anyclip differs from TF in `{name}` (rows of the full table):")
        out.append("")
        prefix = link.removesuffix("tf-behaviour.md")
        out += header + [_relinked(r, prefix) for r in matched]
        out.append("")
    else:
        out.append(f"No difference from TF is specific to `{name}`.")
        out.append("")
    out.append(
        f"The rows that concern every function are in [the full table]"
        f"({link}#where-anyclip-differs-from-tf)."
    )
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each placeholder with the function's rows and sections."""
    depth = page.file.src_uri.count("/")
    link = "../" * depth + "tf-behaviour.md"
    return _PLACEHOLDER.sub(lambda m: _section(m["name"], link), markdown)
