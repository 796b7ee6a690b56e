"""``python -m benchmarks.newcomer``: a newcomer's first run, measured.

Two things a new user waits for, each measured from scratch:

- ``make demo`` from a fresh clone (:func:`benchmarks.demo.measure`: ``git clone`` of ``HEAD``,
  ``.venv`` created with ``python3``, the demo's extras installed, ``python -m anyclip`` run):
  its wall time, the size of ``.venv`` after it, and a second ``python -m anyclip`` alone;
- the installed JAX conformance run, ``python -m anyclip_conformance --backends jax`` (the
  sample it runs by default; this interpreter and the anyclip it imports), with an empty JAX
  compilation cache and then again with the cache it filled: wall time, CPU time (user +
  system, which other load on the machine changes less) and the peak resident memory.

It writes the table to ``docs/_ext/newcomer-results.md``, which ``docs/performance.md``
includes. Nothing is asserted: the times depend on the machine, its load and the network; the
machine's load average is recorded beside them. ``PYTHONDONTWRITEBYTECODE`` is removed from the
environment of what it runs, as a newcomer's shell does not set it (``make demo`` runs without
``PYTHONPATH`` and ``VIRTUAL_ENV`` too).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import demo

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "_ext" / "newcomer-results.md"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment (the anyclip it imports is measured) without
    ``PYTHONDONTWRITEBYTECODE``, which a newcomer's shell does not set."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | extra


def run_measured(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Run ``cmd``; its exit status, wall and CPU seconds and peak resident memory (GiB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss: kilobytes on Linux, bytes on macOS
    peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return {
        "returncode": proc.returncode,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_gib": round(peak / 2**30, 2),
        "last_line": (output.strip().splitlines() or [""])[-1],
    }


def measure_conformance(args: list[str]) -> list[dict[str, Any]]:
    """The installed JAX conformance run with an empty compilation cache, then a warm one."""
    cmd = [sys.executable, "-m", "anyclip_conformance", "--backends", "jax", *args]
    rows = []
    with tempfile.TemporaryDirectory(prefix="anyclip-jax-cache-") as cache:
        env = clean_env(JAX_COMPILATION_CACHE_DIR=cache)
        for cache_state in ("empty", "warm"):
            load = os.getloadavg()[0]
            with tempfile.TemporaryDirectory(prefix="anyclip-conformance-") as cwd:
                result = run_measured(cmd, env, Path(cwd))
            rows.append({"cache": cache_state, "load": round(load, 1), **result})
    return rows


def measure_demo(repo: Path) -> dict[str, Any]:
    """``make demo`` from a fresh clone, then ``python -m anyclip`` once more on its own."""
    return demo.measure(repo, rerun=True)


def render(demo_row: dict[str, Any] | None, runs: list[dict[str, Any]], command: str) -> str:
    """The Markdown section (``docs/_ext/newcomer-results.md``)."""
    lines = [
        "## A newcomer's first run",
        "",
        "Measured by `python -m benchmarks.newcomer` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}. "
        "Wall times depend on the machine's load (its 1-minute load average is given); CPU "
        "time is user + system of the process and its children.",
        "",
    ]
    if demo_row is not None:
        lines += [
            "`make demo` from a fresh clone (`.venv` created, the `all` extra installed from the "
            "package index or the local wheel cache, `python -m anyclip` run):",
            "",
            "| step | wall s | `.venv` GiB | exit | load |",
            "| --- | ---: | ---: | ---: | ---: |",
            f"| `make demo` (install and first run) | {demo_row['seconds']} | "
            f"{demo_row['venv_gib']} | {demo_row['returncode']} | {demo_row['load']} |",
            f"| `python -m anyclip` again | {demo_row['rerun_seconds']} | | | |",
            "",
        ]
    lines += [
        f"The installed JAX conformance run, `{command}`:",
        "",
        "| JAX compilation cache | wall s | CPU s | peak memory GiB | exit | load | result |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in runs:
        lines.append(
            f"| {r['cache']} | {r['seconds']} | {r['cpu_seconds']} | {r['peak_gib']} | "
            f"{r['returncode']} | {r['load']} | {r['last_line']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.newcomer", description=__doc__)
    parser.add_argument("--repo", type=Path, default=ROOT, help="the repository to clone")
    parser.add_argument("--no-demo", action="store_true", help="skip `make demo`")
    parser.add_argument(
        "--conformance-args",
        default="",
        help="more arguments for the conformance run, e.g. \"-k 'clip_by_value and edge'\"",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT, help="where to write the table")
    args = parser.parse_args(argv)
    extra = shlex.split(args.conformance_args)
    runs = measure_conformance(extra)
    demo_row = None if args.no_demo else measure_demo(args.repo)
    command = f"python -m anyclip_conformance --backends jax {shlex.join(extra)}".strip()
    text = render(demo_row, runs, command)
    args.output.write_text(text, encoding="utf-8")
    print(text)
    failed = [r for r in runs if r["returncode"] != 0]
    return 1 if failed or (demo_row is not None and demo_row["returncode"] != 0) else 0


if __name__ == "__main__":
    sys.exit(main())
