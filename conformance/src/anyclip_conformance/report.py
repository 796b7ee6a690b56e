"""The conformance matrix: collected from a pytest run, shown, and rendered to Markdown.

:class:`Matrix` is a pytest plugin object. Handed to ``pytest.main(..., plugins=[matrix])``, it
counts every item the suite's plugin tagged with its function, backend and variant into rows
``function x backend (variant)`` (cases, passed, xfailed, failed, skipped, max ulp), keeps the
failures, and shows progress on stderr: before the run, how many checks and about how long they
take; then a ``tqdm`` bar on a terminal, or one line per finished row (counts and elapsed time)
when stderr is a pipe or a file.
:func:`document` renders a finished run as the Markdown report; it records the reference data's
:func:`~anyclip_conformance.reference.fingerprint`, so a test can tell when the report is stale.
"""

from __future__ import annotations

import platform
import sys
import time
from collections import Counter
from typing import Any

import anyclip
from anyclip_conformance.backends import BACKEND_IDS, Backend
from anyclip_conformance.budgets import budget_table_markdown
from anyclip_conformance.plugin import CONFORMANCE_KEY
from anyclip_conformance.reference import fingerprint, functions, load_index, load_xfails

__all__ = ["COLUMNS", "ROUTES", "Matrix", "document"]

#: The counted columns of a row, in table order.
COLUMNS = ("cases", "passed", "xfailed", "failed", "skipped")
#: Variants in row order: the case run three ways, then the other routes to the same formula.
ROUTES = ("eager", "jit", "grad", "real gradients", "tree", "torch adapter", "optax adapter")

#: After how many finished checks the run's own pace gives the estimate of its length.
ESTIMATE_AFTER = 200


def _duration(seconds: float) -> str:
    if seconds < 10:
        return "a few seconds"
    if seconds < 90:
        return f"about {max(round(seconds / 10) * 10, 10):.0f} s"
    return f"about {seconds / 60:.0f} min"


class Matrix:
    """A pytest plugin counting results by function, backend and variant."""

    def __init__(self, *, progress: bool) -> None:
        self.progress = progress
        self._stream = sys.stderr  # the real one: pytest replaces sys.stderr while it runs
        self.rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.other = dict.fromkeys(COLUMNS, 0)
        self.failures: list[tuple[str, str]] = []
        self._status: dict[str, str] = {}
        self._bar: Any = None
        self._start = time.monotonic()
        self._expected: Counter[tuple[str, str, str]] = Counter()
        self._total = 0
        self._done = 0

    def _say(self, line: str) -> None:
        print(line, file=self._stream, flush=True)

    # ------------------------------------------------------------------------ pytest hooks
    def pytest_collection_finish(self, session: Any) -> None:
        """Say what will run and for about how long; start the bar on a terminal."""
        from tqdm import tqdm

        counts: Counter[str] = Counter()
        for item in session.items:
            info = dict(item.user_properties).get(CONFORMANCE_KEY)
            counts[info["backend"] if info else "other"] += 1
            if info:
                self._expected[(info["function"], info["backend"], info["variant"])] += 1
        per = ", ".join(f"{n} {name}" for name, n in sorted(counts.items()))
        self._total = len(session.items)
        later = f"; their time is estimated after the first {ESTIMATE_AFTER}"
        self._say(f"{self._total} checks ({per})" + (later if self._total > ESTIMATE_AFTER else ""))
        self._start = time.monotonic()
        self._bar = tqdm(
            total=len(session.items), unit="test", file=self._stream, disable=not self.progress
        )

    def pytest_collectreport(self, report: Any) -> None:
        """Keep collection errors (a module that does not import is a failure)."""
        if report.failed:
            self.failures.append((report.nodeid or "collection", report.longreprtext))
            self.other["failed"] += 1

    def pytest_runtest_logreport(self, report: Any) -> None:
        """Classify each item from its setup, call and teardown reports."""
        status = self._status.get(report.nodeid, "passed")
        if report.failed:
            status = "failed"
            self.failures.append((report.nodeid, report.longreprtext))
        elif report.skipped and status != "failed":
            status = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        self._status[report.nodeid] = status
        if report.when != "teardown":
            return
        props = dict(report.user_properties)
        info = props.get(CONFORMANCE_KEY)
        if info is None:
            row = self.other
        else:
            key = (info["function"], info["backend"], info["variant"])
            row = self.rows.setdefault(key, {**dict.fromkeys(COLUMNS, 0), "max_ulp": 0.0})
            if status == "passed":
                row["max_ulp"] = max(row["max_ulp"], float(props.get("max_ulp", 0.0)))
        row["cases"] += 1
        row[self._status.pop(report.nodeid)] += 1
        self._done += 1
        if self._done == ESTIMATE_AFTER < self._total:
            elapsed = time.monotonic() - self._start
            left = elapsed / self._done * (self._total - self._done)
            self._say(
                f"{self._done} checks in {elapsed:.1f} s: {_duration(left)} left at this pace"
            )
        if info is not None and row["cases"] == self._expected[key]:
            self._row_done(key)
        if self._bar is not None:
            self._bar.update(1)

    def pytest_sessionfinish(self) -> None:
        """Close the progress bar."""
        if self._bar is not None:
            self._bar.close()

    def _row_done(self, key: tuple[str, str, str]) -> None:
        """Without a terminal: one line for a row whose every item has run."""
        if self.progress:
            return
        function, backend, variant = key
        counts = ", ".join(f"{self.rows[key][c]} {c}" for c in COLUMNS)
        elapsed = time.monotonic() - self._start
        self._say(f"[{elapsed:7.1f} s] {function} on {backend} ({variant}): {counts}")

    # ------------------------------------------------------------------------------ output
    @property
    def failed(self) -> int:
        """How many items failed (an unexpected pass of a strict xfail included)."""
        return sum(r["failed"] for r in self.rows.values()) + self.other["failed"]

    def table(self) -> str:
        """The matrix as a Markdown table, rows ordered by backend, variant and function."""
        order = {f: i for i, f in enumerate(functions())}

        def key(k: tuple[str, str, str]) -> tuple[int, int, int]:
            function, backend, variant = k
            return (BACKEND_IDS.index(backend), ROUTES.index(variant), order[function])

        lines = [
            "| function | backend | " + " | ".join(COLUMNS) + " | max ulp |",
            "| --- | --- |" + " ---: |" * (len(COLUMNS) + 1),
        ]
        for k in sorted(self.rows, key=key):
            function, backend, variant = k
            label = backend if variant == "eager" else f"{backend} ({variant})"
            row = self.rows[k]
            counts = " | ".join(str(row[c]) for c in COLUMNS)
            lines.append(f"| `{function}` | {label} | {counts} | {row['max_ulp']:.3g} |")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        """One line: the totals of the matrix and of the other checks."""
        total = {c: sum(r[c] for r in self.rows.values()) for c in COLUMNS}
        cases, other = (", ".join(f"{t[c]} {c}" for c in COLUMNS[1:]) for t in (total, self.other))
        return (
            f"{total['cases']} case results ({cases}); {self.other['cases']} other checks ({other})"
        )


def _deviations(backends: list[str]) -> str:
    lines = ["| backend | variant | case | reason |", "| --- | --- | --- | --- |"]
    for name in backends:
        for (case_id, variant), reason in load_xfails(name).items():
            lines.append(f"| {name} | {variant or 'all'} | `{case_id}` | {reason} |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else "None.\n"


def document(matrix: Matrix, backends: list[Backend], missing: list[str]) -> str:
    """The Markdown report of a finished run on ``backends`` (``missing``: not run, and why)."""
    index = load_index()
    counts = {k: sum(k in e for e in index.values()) for k in ("outputs", "grads", "error")}
    libraries = ", ".join(
        f"{b.name} {getattr(sys.modules.get(b.library), '__version__', '?')} on {b.device}"
        for b in backends
    )
    return "\n".join(
        [
            "# Conformance with TensorFlow 2.21",
            "",
            "Generated by `make conformance-report` (`python -m anyclip_conformance --backends "
            f"{','.join(b.name for b in backends)} --report docs/conformance.md`); do not edit "
            "by hand. Every case of the catalogue of the "
            "`anyclip-conformance` distribution (`conformance/`) was run on every backend "
            "listed below and compared with the reference outputs TensorFlow 2.21 produced "
            "(`anyclip_conformance/data/`; how they were made is in its `README.md`).",
            "",
            f"Catalogue: {len(index)} cases ({counts['outputs']} with outputs, "
            f"{counts['grads']} with gradients, {counts['error']} where TF raises). "
            f"Reference data, xfail lists and budgets: fingerprint `{fingerprint()}`.",
            "",
            f"Run on {platform.machine()} with anyclip {anyclip.__version__}, Python "
            f"{platform.python_version()}, {libraries}.",
            "",
            "Not run here: " + ("; ".join(missing) if missing else "none") + ".",
            "",
            "`(jit)` rows run the case under `jax.jit`; `(grad)` rows compare the gradients of "
            "`sum(f(x) * w)` with TF's `GradientTape` ones; `(real gradients)` rows run every "
            "recorded training step of real TF models and programs (`data/real_gradients.npz`, "
            "`data/real_programs.npz`) within the "
            "tighter budgets at the end of the budget table; `(tree)` and `(... adapter)` rows run "
            "the case through `anyclip.tree`, `anyclip.torch` or `anyclip.optax`. `max ulp` is "
            "the largest error seen, in units in the last place of the reference dtype.",
            "",
            matrix.table(),
            matrix.summary() + ".",
            "",
            "## Budgets",
            "",
            budget_table_markdown(),
            "## Known deviations (strict xfails)",
            "",
            _deviations([b.name for b in backends]),
        ]
    )
