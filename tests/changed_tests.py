"""The tests of the files changed on this branch: what ``make check`` runs after ruff and mypy.

``python tests/changed_tests.py [--base REF] [--list] [PYTEST_ARGS...]``. The changed files are
those that differ from ``REF`` (default: where this branch left ``main``, or ``HEAD`` when there
is no ``main``), committed or not, and the untracked ones git does not ignore. Each maps to
tests:

* a test module (``tests/test_*.py``, ``conformance/.../suite/test_*.py``): itself;
* a module of ``src/anyclip`` or of the conformance package: itself (its docstring examples),
  ``tests/test_<name>.py`` when there is one (``_clip.py`` and ``clip.py`` both name
  ``test_clip.py``), and the test modules that import it by its dotted name;
* a test helper (``tests/conftest.py``, ``tests/_*.py``): the test modules that name it;
* a docs page or the README: ``tests/test_docs.py``; an example: ``tests/test_examples.py``;
  a benchmark: ``tests/test_benchmarks.py``.

They run with pytest on every backend, with the conformance catalogue's sample
(``--anyclip-sample``) instead of every case, on as many workers as ``make test`` uses. This is
a quick check of a change, not the whole one: ``make test`` (CI's run) checks everything.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["changed_files", "main", "selected_for"]

ROOT = Path(__file__).resolve().parent.parent
SUITE = "conformance/src/anyclip_conformance/suite"
#: Every backend id: the catalogue's sample on each of them (``--anyclip-sample``).
ALL_BACKENDS = "numpy,array_api_strict,torch,jax,torch-cuda,jax-gpu,cupy,dask"
#: Files whose tests are one module, by the folder (or name) they are in.
BY_FOLDER = {
    "docs/": "tests/test_docs.py",
    "README.md": "tests/test_docs.py",
    "examples/": "tests/test_examples.py",
    "benchmarks/": "tests/test_benchmarks.py",
}


def _git(*args: str) -> list[str]:
    done = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    return [line for line in done.stdout.splitlines() if line.strip()]


def changed_files(base: str | None = None) -> list[str]:
    """The files (relative to the root, still there) that differ from ``base`` or are new."""
    if base is None:
        try:
            base = _git("merge-base", "HEAD", "main")[0]
        except (subprocess.CalledProcessError, IndexError):
            base = "HEAD"
    names = set(_git("diff", "--name-only", base)) | set(
        _git("ls-files", "--others", "--exclude-standard")
    )
    return sorted(n for n in names if (ROOT / n).is_file())


def _test_modules() -> dict[str, str]:
    """Every test module, by its path, with its text."""
    paths = [*(ROOT / "tests").glob("test_*.py"), *(ROOT / SUITE).glob("test_*.py")]
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def selected_for(files: list[str]) -> list[str]:
    """The test modules and modules with docstring examples that check ``files``.

    >>> selected_for(["docs/porting.md", "tests/test_norm.py", "Makefile"])
    ['tests/test_docs.py', 'tests/test_norm.py']
    """
    modules = _test_modules()
    out: list[str] = []

    def naming(pattern: str) -> list[str]:
        return [path for path, text in modules.items() if re.search(pattern, text)]

    for name in files:
        path = Path(name)
        if path.suffix == ".py" and path.name.startswith("test_"):
            out.append(name)
        elif name.startswith(("src/anyclip/", "conformance/src/anyclip_conformance/")):
            if path.suffix != ".py":
                continue
            out.append(name)
            stem = path.stem.lstrip("_")
            out.append(f"tests/test_{stem}.py")
            parts = path.with_suffix("").parts
            dotted = ".".join(parts[parts.index("src") + 1 :]).removesuffix(".__init__")
            out += naming(rf"\b{re.escape(dotted)}\b")
            if name.startswith("conformance/"):
                out.append("tests/test_conformance_suite.py")
        elif name.startswith("tests/") and path.suffix == ".py":
            out += naming(rf"\b{re.escape(path.stem)}\b") if path.stem != "conftest" else []
            if path.stem == "conftest":
                out += [p for p in modules if p.startswith("tests/")]
        else:
            out += [test for prefix, test in BY_FOLDER.items() if name.startswith(prefix)]
    seen = dict.fromkeys(p for p in out if (ROOT / p).is_file())
    return list(seen)


def main(argv: list[str] | None = None) -> int:
    """Run (or with ``--list`` print) the tests of the changed files."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0], allow_abbrev=False)
    parser.add_argument("--base", default=None, help="compare with this git ref")
    parser.add_argument("--list", action="store_true", help="print the tests, run nothing")
    args, pytest_args = parser.parse_known_args(argv)
    files = changed_files(args.base)
    tests = selected_for(files)
    if args.list:
        print("\n".join(tests))
        return 0
    if not tests:
        print(f"changed: {len(files)} files, none with tests of its own (`make test` runs all)")
        return 0
    print(f"changed: {len(files)} files; running {len(tests)} test modules", flush=True)
    command = [sys.executable, "-m", "pytest", "--anyclip-sample", ALL_BACKENDS, *pytest_args]
    os.chdir(ROOT)
    return subprocess.call([*command, *tests])


if __name__ == "__main__":
    sys.exit(main())
