"""A sample of the suite for an environment at other versions: ``make test-floors`` runs it.

``python tests/version_sample.py [--list] [PYTEST_ARGS...]`` runs pytest (in this process, one
worker) on the CPU backends, each required as CI requires them (``ANYCLIP_REQUIRE_BACKENDS``:
dask's parametrisations run, and a backend that does not load fails), with the conformance
catalogue's sample (``--anyclip-sample``: every function, dtype and case family), and keeps of
the collected tests:

* every docstring example (``src/anyclip``: each public function's own example) and every test
  that takes no parameters;
* of every parametrised test function, its first parametrisation, and of every test module,
  its first test on each backend it runs on;
* of the conformance checks, the first of each test module per catalogue function and backend;

but none of :data:`LEFT_OUT`.

The sample is some 1,100 tests (the whole suite is over 32,000 on these backends). A profile
hook records which public functions and methods of ``anyclip``, ``anyclip.tree``,
``anyclip.constraints``, ``anyclip.torch`` and ``anyclip.optax`` are entered, until each has
been (the hook slows every Python call, ``torch.compile``'s tracing most; the docstring
examples, which run first, call most of them). The run fails when a test failed or when one of
them was never called (so a version where a whole framework's tests skip does not pass as
tested). ``--list`` prints the sample's ids without running it. It is how the declared version
floors and the newest releases were run (docs/quickstart.md, "Tested versions"); CI runs the
whole suite on the pins instead.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

__all__ = ["PublicCalls", "Sample", "main", "public_code"]

ROOT = Path(__file__).resolve().parent.parent
#: The CPU backends the sample runs on (those that ``make test`` runs).
BACKENDS = "numpy,array_api_strict,torch,jax,dask"
#: Modules left out: they build environments of their own (an sdist and its test run, venvs from
#: constraints.txt, the docs site in a browser), which checks the packaging, not the versions
#: installed here; CI runs them.
LEFT_OUT = (
    "tests/test_packaging.py",
    "tests/test_single_framework_installs.py",
    "tests/test_docs_site.py",
)
#: The public modules whose functions the sample must call.
PUBLIC = ("anyclip", "anyclip.tree", "anyclip.constraints", "anyclip.torch", "anyclip.optax")


def _params(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec is not None else {}


class Sample:
    """pytest plugin: keep the first parametrisation of each test per backend (see above)."""

    def __init__(self) -> None:
        self.kept: list[str] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        seen: set[tuple[object, ...]] = set()
        keep: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for item in items:
            params = _params(item)
            backend = params.get("backend", params.get("grad_backend"))
            if "case_id" in params:  # a conformance check: per catalogue function and backend
                function = params.get("function") or str(params["case_id"]).split("/")[0]
                keys = [(item.path, backend, function)]
            else:  # the test function once, and each module once per backend
                keys = [(item.path, getattr(item, "originalname", item.name)), (item.path, backend)]
            new = [key for key in keys if key not in seen]
            (keep if new or not params else dropped).append(item)
            seen.update(new)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        self.kept = [item.nodeid for item in keep]


def public_code() -> dict[types.CodeType, str]:
    """The code of every public function, and of every method of each public class, by name.

    The name is the public one (``anyclip.torch.SkipOnSpike``): a class counts as called when
    one of its methods (``__init__`` and ``__call__`` among them) was.
    """
    code: dict[types.CodeType, str] = {}
    for module_name in PUBLIC:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            label = f"{module_name}.{name}"
            if inspect.isclass(obj):
                members: list[Any] = []
                for klass in obj.__mro__:
                    if klass.__module__.startswith("anyclip"):
                        members += vars(klass).values()
            elif callable(obj):
                members = [obj]
            else:  # a submodule or a constant
                continue
            for member in members:
                if isinstance(member, staticmethod | classmethod):
                    member = member.__func__
                elif isinstance(member, property):
                    member = member.fget
                member = inspect.unwrap(member) if callable(member) else member
                if inspect.isfunction(member):
                    code.setdefault(member.__code__, label)
    return code


class PublicCalls:
    """A profile hook (every thread) that records which public functions were entered."""

    def __init__(self, code: dict[types.CodeType, str]) -> None:
        self.code = code
        self.called: set[str] = set()
        self.wanted = len(set(code.values()))

    def _profile(self, frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call":
            label = self.code.get(frame.f_code)
            if label is not None:
                self.called.add(label)
                if len(self.called) == self.wanted:  # all seen: the hook costs time, drop it
                    sys.setprofile(None)
                    threading.setprofile(None)  # type: ignore[arg-type]
        elif len(self.called) == self.wanted:  # another thread, which still has the hook
            sys.setprofile(None)

    def __enter__(self) -> PublicCalls:
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    def missing(self) -> list[str]:
        """The public functions and classes never called."""
        return sorted(set(self.code.values()) - self.called)


def main(argv: list[str] | None = None) -> int:
    """Run (or with ``--list`` print) the sample; 0 when it passed and called every function."""
    args = list(sys.argv[1:] if argv is None else argv)
    # what `python -m pytest` from the root has on its path (the `tests` and `benchmarks`
    # packages), not this script's folder
    sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "tests")]
    listing = "--list" in args
    # every backend required, as CI requires them: dask's fixtures run only then (an opt-in
    # backend), and a backend that does not load fails rather than skips
    os.environ["ANYCLIP_REQUIRE_BACKENDS"] = BACKENDS
    args = [a for a in args if a != "--list"]
    sample = Sample()
    pytest_args = [
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        f"--anyclip-backends={BACKENDS}",
        f"--anyclip-sample={BACKENDS}",
        "-q",
        *(f"--ignore={path}" for path in LEFT_OUT),
        *(["--collect-only"] if listing else []),
        *args,
    ]
    if listing:
        return int(pytest.main(pytest_args, plugins=[sample]))
    calls = PublicCalls(public_code())
    with calls:
        code = pytest.main(pytest_args, plugins=[sample])
    missing = calls.missing()
    print(
        f"version sample: {len(sample.kept)} tests; public functions called: "
        f"{len(set(calls.code.values())) - len(missing)} of {len(set(calls.code.values()))}"
    )
    if missing:
        print("never called: " + ", ".join(missing))
    return int(code) or (1 if missing else 0)


if __name__ == "__main__":
    sys.exit(main())
