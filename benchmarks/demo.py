"""``python -m benchmarks.demo``: how long ``make demo`` takes from a fresh clone, and its size.

Clones the repository's committed ``HEAD`` into a temporary directory, runs ``make demo`` there
(``.venv`` created from scratch with ``python3``; the Makefile installs with ``--no-cache-dir``,
so only a local wheel directory or index saves downloads), and reports the wall time, the size of
``.venv``, whether the demo wrote anything to stderr (a warning) and whether ``git status`` is
clean afterwards; ``rerun=True`` also times a second ``python -m anyclip`` on its own. The
environment is this one's without ``PYTHONPATH``, ``VIRTUAL_ENV`` and ``PYTHONDONTWRITEBYTECODE``
(a newcomer's shell sets none of them). Nothing is asserted (the time depends on the machine and
the network); ``python -m benchmarks.newcomer`` records it in ``docs/performance.md``.
``--json`` prints the numbers as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed), as ``du`` counts them."""
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def measure(repo: Path, *, rerun: bool = False) -> dict[str, object]:
    """Clone ``repo``, run ``make demo`` in the clone, and return what was measured."""
    with tempfile.TemporaryDirectory(prefix="anyclip-demo-") as tmp:
        clone = Path(tmp) / "anyclip"
        subprocess.run(["git", "clone", "--quiet", str(repo), str(clone)], check=True)
        drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        load = os.getloadavg()[0]
        start = time.perf_counter()
        done = subprocess.run(
            ["make", "demo"], cwd=clone, env=env, capture_output=True, text=True, check=False
        )
        seconds = time.perf_counter() - start
        status = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=clone,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rerun_seconds = None
        if rerun and done.returncode == 0:
            start = time.perf_counter()
            subprocess.run(
                [str(clone / ".venv" / "bin" / "python"), "-m", "anyclip"],
                cwd=clone,
                env=env,
                capture_output=True,
                check=True,
            )
            rerun_seconds = round(time.perf_counter() - start, 1)
        return {
            "returncode": done.returncode,
            "load": round(load, 1),
            "rerun_seconds": rerun_seconds,
            "seconds": round(seconds, 1),
            "venv_gib": round(tree_bytes(clone / ".venv") / 2**30, 2),
            "stderr": done.stderr.strip(),
            "tree_clean": status == "",
            "demo_says": (done.stdout.strip().splitlines() or [""])[-1],
        }


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.demo", description=__doc__)
    parser.add_argument("--repo", type=Path, default=ROOT, help="the repository to clone")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = measure(args.repo)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"make demo from a fresh clone: exit {result['returncode']}, {result['seconds']} s, "
            f".venv {result['venv_gib']} GiB, tree clean: {result['tree_clean']}, "
            f"stderr: {result['stderr'] or '(empty)'}\n{result['demo_says']}"
        )
    return 0 if result["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
