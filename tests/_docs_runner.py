"""Runs docs code blocks in a Python of its own, for ``tests/conftest.py``'s ``DocsBlockRunner``.

Started as ``python _docs_runner.py``; reads one request a line on stdin, as JSON: ``name``
(the block, ``page.md:line``), ``code``, ``result`` (a file, not there yet) and ``warnings``
(the warning filters to run the block under, as ``[action, message, category, module,
lineno]`` with the category as ``module:qualname``; ``null`` keeps this interpreter's own).
Each block runs as ``tests/test_docs.py`` runs a block in the test process: in fresh globals
``{"__name__": "__docs__"}``, its stdout captured, torch's print options reset after it. What it
prints is also copied to this process's stdout as it comes (a test that stops a hung block shows
what it printed so far). Its globals are freed before the result is written (a torch.distributed
object freed after its process group was destroyed can hang there: inside the block's time
limit), then ``{"printed": [lines], "error": traceback or null}`` is written to ``result``,
renamed into place whole.

Standard library only: the single-framework installs' test copies this file into a folder of its
own and runs it with the venv's Python.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import traceback
import warnings
from typing import Any, TextIO


class _Tee(io.StringIO):
    """The block's stdout: kept for the result and copied, flushed, to ``echo``."""

    def __init__(self, echo: TextIO) -> None:
        super().__init__()
        self._echo = echo

    def write(self, s: str) -> int:
        self._echo.write(s)
        self._echo.flush()
        return super().write(s)


def _category(name: str) -> type[Warning]:
    module, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def _set_filters(filters: list[list[Any]] | None) -> None:
    if filters is None:
        return
    # the categories' modules imported first: an import can add filters of its own (torch
    # 2.11's does), which would otherwise come before the ones set here
    categories = [_category(f[2]) for f in filters]
    warnings.resetwarnings()
    for (action, message, _, module, lineno), category in zip(filters, categories, strict=True):
        warnings.filterwarnings(action, message, category, module, lineno, append=True)


def run_block(name: str, code: str, filters: list[list[Any]] | None) -> dict[str, Any]:
    """Run one block; its printed lines and its traceback (``None`` when it ran through)."""
    print(f"--- block {name}", flush=True)  # where this block's output starts
    out = _Tee(sys.stdout)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    error = None
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out):
            _set_filters(filters)
            try:
                exec(compile(code, f"<{name}>", "exec"), namespace)
            finally:  # freed here, as the test process frees a block's globals as exec returns
                namespace.clear()  # (no gc.collect: 0.2 s a block once torch and JAX are in)
    except BaseException:  # noqa: BLE001 - a block's SystemExit too: reported, the next blocks run
        error = traceback.format_exc()
    finally:
        if sys.modules.get("torch") is not None:
            sys.modules["torch"].set_printoptions(profile="default")
    return {"printed": out.getvalue().splitlines(), "error": error}


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        result = run_block(request["name"], request["code"], request["warnings"])
        partial = request["result"] + ".partial"
        with open(partial, "w", encoding="utf-8") as fh:
            json.dump(result, fh)
        os.replace(partial, request["result"])


if __name__ == "__main__":
    main()
