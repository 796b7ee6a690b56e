"""``python -m benchmarks.demo``: how long ``make demo`` takes from a fresh clone, and its size.

Clones the repository's committed ``HEAD`` into a temporary directory, runs ``make demo`` there
(``.venv`` created from scratch with ``python3``; pip's own cache is used when it has the
wheels, as on a machine that installed them before), and reports the wall time, the size of
``.venv``, whether the demo wrote anything to stderr (a warning) and whether ``git status`` is
clean afterwards. Nothing is asserted (the time depends on the machine and the network); the
README quotes what this printed. ``--json`` prints the numbers as one JSON object.
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


def measure(repo: Path) -> dict[str, object]:
    """Clone ``repo``, run ``make demo`` in the clone, and return what was measured."""
    with tempfile.TemporaryDirectory(prefix="anyclip-demo-") as tmp:
        clone = Path(tmp) / "anyclip"
        subprocess.run(["git", "clone", "--quiet", str(repo), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
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
        return {
            "returncode": done.returncode,
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
