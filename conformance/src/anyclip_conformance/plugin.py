"""The pytest plugin of the suite and of anyclip's own tests: backends, deviations, options.

Loaded by ``python -m anyclip_conformance`` and by a source checkout's root ``conftest.py``.
Fixtures ``backend`` (every backend and device, one at a time), ``grad_backend`` and ``xp``; a
backend that cannot be loaded is a SKIP, or a FAIL when it is named in the environment variable
``ANYCLIP_REQUIRE_BACKENDS`` (comma separated; CI sets it). ``--anyclip-backends`` runs only
the backends it names (their tests are built, the others' not: see
:func:`pytest_generate_tests`). The markers, ``--anyclip-sample``, ``--live-tf`` and
``--live-tf-examples`` are described by their help texts below; a test marked
``conformance`` gets the case's ``xfails/<backend>.txt`` entry as a strict xfail and carries
its function, backend and variant to the report.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import pytest

from anyclip_conformance.backends import (
    BACKEND_IDS,
    Backend,
    BackendId,
    load_backend,
    parse_backends,
)
from anyclip_conformance.reference import load_index, real_gradient_cases, sample, xfail_reason

__all__ = ["backend", "get_backend", "grad_backend", "required_backends", "try_backend", "xp"]

#: How often (in tests on a JAX backend that is there) the suite looks at its memory: every 50
#: tests.
RELEASE_JAX_EVERY = 50

#: When the resident memory has grown by this much since the first JAX test (or since the
#: programs were last dropped), the compiled JAX programs are dropped
#: (:func:`~anyclip_conformance.harness.release_compiled`): each holds 2 to 5 MB, and the whole
#: catalogue compiles thousands (4 GB and more). Dropping them costs a re-trace and re-lowering
#: of every program used after it (a JAX subset ran 1.6x as long when they were dropped every 50
#: tests), so they are dropped only when they hold much: 2,500 JAX checks peaked at 1.4 GB.
#: Growth, not the total: a worker of the whole suite holds more than 1 GB before its first JAX
#: program (torch, TensorFlow, the other tests' data), and a bound on the total dropped the
#: programs every 50 JAX tests there (1,056 JAX checks: 39.5 s of CPU instead of 27.9 s).
RELEASE_JAX_ABOVE = 1 << 30

#: The ``user_properties`` key under which a conformance item carries what the report needs.
CONFORMANCE_KEY = "anyclip_conformance"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--anyclip-backends``, ``--live-tf`` and ``--live-tf-examples``."""
    group = parser.getgroup("anyclip", "anyclip conformance")
    group.addoption(
        "--anyclip-backends",
        default=None,
        help=f"comma-separated backends to run (default: all of {', '.join(BACKEND_IDS)})",
    )
    group.addoption(
        "--anyclip-sample",
        default=None,
        metavar="BACKENDS",
        help="on these comma-separated backends run only the sample of the catalogue "
        "(reference.sample(): every function, dtype and case family), not every case",
    )
    group.addoption(
        "--live-tf",
        action="store_true",
        default=False,
        help="also compare anyclip with a live TensorFlow on hypothesis-generated inputs",
    )
    group.addoption(
        "--live-tf-examples",
        type=int,
        default=200,
        help="hypothesis examples per function in the live TensorFlow comparison",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and check ``--anyclip-backends``."""
    for line in (
        "xfail_backend(*backends, reason, raises=None, params=None): a known, explained "
        "deviation on these backend ids (strict: it fails once fixed); `params` restricts it "
        "to parametrisations with these values, e.g. params={'dtype': 'uint64'}",
        "conformance(variant): runs the catalogue case `case_id` in `variant` (eager, jit, "
        "grad or a route); its xfails/<backend>.txt entry is a strict xfail",
        "live_tf: compares with a live TensorFlow (needs --live-tf)",
        # pytest-xdist's own marker, registered here too so that --strict-markers accepts it in
        # a run without xdist installed
        "xdist_group(name): under pytest-xdist's --dist loadgroup, one worker runs every test "
        "of the group (modules whose module-scoped fixtures are expensive, or that must not run "
        "beside each other)",
    ):
        config.addinivalue_line("markers", line)
    for option in ("--anyclip-backends", "--anyclip-sample"):
        try:
            _selected(config, option)
        except ValueError as exc:
            raise pytest.UsageError(f"{option}: {exc}") from None


def _selected(config: pytest.Config, option: str = "--anyclip-backends") -> set[str] | None:
    raw = config.getoption(option)
    return None if raw is None else {b.value for b in parse_backends(raw)}


def _in_sample(item: pytest.Item, sampled: set[str]) -> bool:
    """Whether ``item`` runs when ``sampled`` backends run the sample only."""
    if _item_backend(item) not in sampled:
        return True
    case_id = _params(item).get("case_id")
    return case_id is None or case_id in sample()


def _params(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    return callspec.params if callspec is not None else {}


def _item_backend(item: pytest.Item) -> str | None:
    params = _params(item)
    return next((params[k] for k in BACKEND_FIXTURES if k in params), None)


#: The fixtures that take a backend id as their parameter.
BACKEND_FIXTURES = ("backend", "grad_backend")


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise with the selected backends only, and the sample's cases where it is all.

    The same selection as :func:`pytest_collection_modifyitems` makes, made before the items
    exist: the whole catalogue is some 68,000 items (every backend) to build and deselect, most
    of a run's start (``python -m anyclip_conformance --backends numpy -k ...`` collected all of
    them to keep a few). The items kept, their ids and their order are the same. Other runs (a
    backend that runs every case among those selected) keep every case.
    """
    wanted = _selected(metafunc.config)
    if wanted is not None:
        _parametrize_selected_backends(metafunc, wanted)
    sampled = _selected(metafunc.config, "--anyclip-sample")
    if not sampled or wanted is None or not wanted <= sampled:
        return
    keep = sample()
    marks = metafunc.definition.own_markers
    for n, mark in enumerate(marks):
        if mark.name == "parametrize" and mark.args and mark.args[0] == "case_id":
            values = [c for c in mark.args[1] if c in keep]
            marks[n] = pytest.mark.parametrize(
                "case_id", values, *mark.args[2:], **mark.kwargs
            ).mark


def _parametrize_selected_backends(metafunc: pytest.Metafunc, wanted: set[str]) -> None:
    """Give the backend fixtures of ``metafunc`` only the ``wanted`` backends as parameters.

    A test's own ``parametrize("backend", [...], indirect=True)`` keeps its wanted values. A
    fixture's parameters (``backend``: every id) become a ``parametrize`` mark of the wanted
    ids, put first among the test's marks: pytest applies a fixture's parameters before the
    test's marks, so the backend leads the item's id there (``test_case[numpy-...]``), and a
    first mark keeps it so (a test with another parametrised fixture keeps every backend).
    Where no value is wanted, nothing changes: those items are deselected after collection, as
    before.
    """
    marks = metafunc.definition.own_markers
    for name in BACKEND_FIXTURES:
        if name not in metafunc.fixturenames:
            continue
        named = [
            mark
            for mark in metafunc.definition.iter_markers("parametrize")
            if name in _argnames(mark)
        ]
        if named:  # a mark gives the values: the test's own marks keep the wanted ones (a
            # module's or class's mark is left whole)
            for n, mark in enumerate(marks):
                if mark in named and len(mark.args) > 1:
                    names = _argnames(mark)
                    at = None if len(names) == 1 else names.index(name)
                    values = [v for v in mark.args[1] if _param_value(v, at) in wanted]
                    if values:
                        marks[n] = pytest.mark.parametrize(
                            mark.args[0], values, *mark.args[2:], **mark.kwargs
                        ).mark
            continue
        # pytest's own record of the fixtures that serve this test (the closest override:
        # tests/test_gradients.py's `backend` takes no parameter); a pytest without it keeps
        # every parameter
        served = getattr(metafunc, "_arg2fixturedefs", {})
        params = _fixture_params(served.get(name, ()))
        if not params or any(not isinstance(p, str) for p in params):
            continue
        if any(_fixture_params(served.get(f, ())) for f in metafunc.fixturenames if f != name):
            # another fixture's parameters: pytest applies those in fixture order, before
            # any mark, so a mark would move the backend in the item's id
            continue
        values = [p for p in params if p in wanted]
        if values:
            marks.insert(0, pytest.mark.parametrize(name, values, indirect=True).mark)


def _fixture_params(defs: Any) -> Any:
    """The parameters of the closest of ``defs`` (pytest's fixture definitions), or None."""
    return getattr(defs[-1], "params", None) if defs else None


def _argnames(mark: Any) -> list[str]:
    """The argument names of a ``parametrize`` mark (``"a,b"`` or a sequence of names)."""
    names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
    if isinstance(names, str):
        return [n.strip() for n in names.split(",") if n.strip()]
    return list(names)


def _param_value(value: Any, at: int | None) -> Any:
    """Argument ``at`` of a ``parametrize`` value (``None``: the mark names one argument)."""
    if isinstance(value, type(pytest.param(None))):
        value = value.values[0] if at is None else value.values
    if at is None:
        return value
    return value[at] if isinstance(value, (tuple, list)) and at < len(value) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the selected backends; apply ``xfails/``; skip live tests without ``--live-tf``."""
    wanted = _selected(config)
    if wanted is not None:
        dropped = [i for i in items if _item_backend(i) not in (None, *wanted)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [i for i in items if _item_backend(i) in (None, *wanted)]
    _collapse_skipped_backends(config, items)
    sampled = _selected(config, "--anyclip-sample")
    if sampled:
        dropped = [i for i in items if not _in_sample(i, sampled)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [i for i in items if _in_sample(i, sampled)]
        # one case's checks in a row: its routes find the programs its eager check compiled
        order = {c: n for n, c in enumerate([*load_index(), *real_gradient_cases()])}
        items.sort(key=lambda i: order.get(_params(i).get("case_id"), -1))
    live = config.getoption("--live-tf")
    for item in items:
        if "live_tf" in item.keywords and not live:
            item.add_marker(
                pytest.mark.skip(reason="live TensorFlow comparison: run with --live-tf")
            )
        mark = item.get_closest_marker("conformance")
        name = _item_backend(item)
        if mark is None or name is None:
            continue
        params = item.callspec.params  # type: ignore[attr-defined]
        case_id = params["case_id"]
        variant = mark.args[0]
        info = {
            "case": case_id,
            "function": params.get("function") or load_index()[case_id]["function"],
            "backend": name,
            "variant": variant,
        }
        item.user_properties.append((CONFORMANCE_KEY, info))
        reason = xfail_reason(case_id, name, mark.kwargs.get("xfails", variant))
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True, raises=AssertionError))
    _xdist_groups(config, items)


def _skip_reason(name: str) -> str | None:
    """Why every test on backend ``name`` would skip here (None: they run, or fail as required)."""
    if name in required_backends():
        return None
    if name in OPT_IN:
        return f"backend {name!r} is opt-in: name it in ANYCLIP_REQUIRE_BACKENDS"
    loaded = try_backend(name)
    return f"backend {name!r} is unavailable ({loaded})" if isinstance(loaded, str) else None


def _collapse_skipped_backends(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One visible skip per backend that cannot run here, not one per test.

    A backend that is not there (``torch-cuda``, ``jax-gpu`` and ``cupy`` on a machine without
    a GPU) or is opt-in and not required would skip each of its tests: about 40,000 on a CPU
    machine, each costing a fixture setup, a skip report and, under pytest-xdist, a message to
    the controller. Its first test is kept and skips with the reason its fixture gives, plus
    how many more were deselected; the others are deselected. A backend named in
    ``ANYCLIP_REQUIRE_BACKENDS`` is never collapsed: each of its tests fails as before. The
    backends are loaded here, once per process (:func:`try_backend`), as the tests would.
    """
    names = {_item_backend(i) for i in items} - {None}
    reasons = {n: _skip_reason(n) for n in sorted(n for n in names if n in BACKEND_IDS)}
    skipped = {n: why for n, why in reasons.items() if why is not None}
    if not skipped:
        return
    first: dict[str, pytest.Item] = {}
    keep, dropped = [], []
    for item in items:
        name = _item_backend(item)
        if name in skipped and name in first:
            dropped.append(item)
        else:
            keep.append(item)
            if name in skipped:
                first[name] = item
    for name, item in first.items():
        more = sum(_item_backend(i) == name for i in dropped)
        reason = f"{skipped[name]}; {more:,} more tests on it deselected"
        item.add_marker(pytest.mark.skip(reason=reason))
    config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def _xdist_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker under ``--dist loadgroup``: each grouped item's id ends ``@group``.

    That suffix is how xdist's scheduler (in the controller) keeps a group on one worker; its
    worker writes it into ``item._nodeid``, which pytest 9.2 no longer reads (a node's id is
    ``item._id``, a ``NodeId``): without this, ``xdist_group`` is silently ignored and a
    module's module-scoped fixture runs in every worker (both gloo worlds twice, measured).
    Where xdist's own suffix took effect (pytest before 9.2), nothing changes.
    """
    if not getattr(config.option, "loadgroup", False) or not hasattr(config, "workerinput"):
        return
    for item in items:
        names = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(names))
        if not names or item.nodeid.endswith(suffix):
            continue
        node_id = getattr(item, "_id", None)
        if dataclasses.is_dataclass(node_id) and getattr(node_id, "names", ()):
            # pytest >= 9.2: the parameters and the suffix go into the last name, so that the
            # id reads the same however it is rebuilt (a report's id is rebuilt from the parts)
            last = node_id.names[-1]
            if node_id.params is not None:
                last += f"[{node_id.params}]"
            names = (*node_id.names[:-1], last + suffix)
            item._id = dataclasses.replace(node_id, names=names, params=None)
        else:
            item._nodeid = item.nodeid + suffix


_JAX_TESTS = [0]
#: The resident memory after the first JAX test, then after each release of the programs.
_JAX_BASE: list[int] = []


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Every :data:`RELEASE_JAX_EVERY` tests on JAX, drop the compiled programs if they hold much.

    "Much": the process's resident memory has grown by :data:`RELEASE_JAX_ABOVE` since the
    first JAX test, or since they were last dropped (where it cannot be read, every time).
    Counted and measured per process: each pytest-xdist worker looks at its own tests and its
    own memory.
    """
    name = _item_backend(item)
    if name not in BACKEND_IDS or BackendId(name).library != "jax":
        return
    if not isinstance(_CACHE.get(name), Backend):
        # a backend that is not there (jax-gpu on a CPU machine) compiled nothing: its skipped
        # tests are as many as the JAX tests that ran, and counting them made the check (and
        # dropping the programs, 10 s and more on a loaded machine) twice as frequent
        return
    _JAX_TESTS[0] += 1
    if not _JAX_BASE:
        _JAX_BASE.append(_resident_bytes())
    if _JAX_TESTS[0] % RELEASE_JAX_EVERY:
        return
    resident = _resident_bytes()
    if resident == sys.maxsize or resident - _JAX_BASE[0] > RELEASE_JAX_ABOVE:
        from anyclip_conformance.harness import release_compiled

        release_compiled()
        _JAX_BASE[0] = _resident_bytes()


def _resident_bytes() -> int:
    """This process's resident memory in bytes (Linux ``/proc``); unknown elsewhere: the maximum."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return sys.maxsize
    return pages * os.sysconf("SC_PAGE_SIZE")


def required_backends() -> set[str]:
    """The backends named in ``ANYCLIP_REQUIRE_BACKENDS`` (a missing one fails, not skips)."""
    raw = os.environ.get("ANYCLIP_REQUIRE_BACKENDS", "")
    return {name.strip() for name in raw.split(",") if name.strip()}


_CACHE: dict[str, Backend | str] = {}


def try_backend(name: str) -> Backend | str:
    """Backend ``name``, loaded once per process, or why it cannot be loaded."""
    if name not in _CACHE:
        try:
            _CACHE[name] = load_backend(name)
        except Exception as exc:  # noqa: BLE001 - any import or device failure: unavailable
            _CACHE[name] = f"{type(exc).__name__}: {exc}"
    return _CACHE[name]


#: Backends that run only when named in ``ANYCLIP_REQUIRE_BACKENDS`` (a visible SKIP
#: otherwise): dask is installed by anyclip's ``test`` extra for ``tests/test_dask.py``
#: (laziness, dask's SVD, out of core on a LocalCluster), but the whole catalogue on dask
#: still fails at some edge cases (NaN/inf policies, overflow, empty inputs: about 360
#: parametrisations) and takes minutes on 2 cores.
OPT_IN = frozenset({"dask"})


def get_backend(name: str) -> Backend:
    """Backend ``name``; skip the test when it is unavailable (fail when it is required)."""
    if name in OPT_IN and name not in required_backends():
        pytest.skip(f"backend {name!r} is opt-in: name it in ANYCLIP_REQUIRE_BACKENDS")
    loaded = try_backend(name)
    if isinstance(loaded, str):
        msg = f"backend {name!r} is unavailable ({loaded})"
        if name in required_backends():
            pytest.fail(msg + "; it is listed in ANYCLIP_REQUIRE_BACKENDS", pytrace=False)
        pytest.skip(msg)
    return loaded


def _apply_backend_xfails(request: pytest.FixtureRequest, name: str) -> None:
    callspec = getattr(request.node, "callspec", None)
    values = callspec.params if callspec is not None else {}
    for mark in request.node.iter_markers("xfail_backend"):
        wanted = mark.kwargs.get("params") or {}
        if name in mark.args and all(values.get(k) == v for k, v in wanted.items()):
            request.applymarker(
                pytest.mark.xfail(
                    strict=True, reason=mark.kwargs["reason"], raises=mark.kwargs.get("raises")
                )
            )


@pytest.fixture(params=BACKEND_IDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Every backend (and device), one at a time."""
    loaded = get_backend(request.param)
    _apply_backend_xfails(request, request.param)
    return loaded


@pytest.fixture(params=[b.value for b in BackendId if b.has_autodiff])
def grad_backend(request: pytest.FixtureRequest) -> Backend:
    """The backends with automatic differentiation (torch and JAX, every device)."""
    loaded = get_backend(request.param)
    _apply_backend_xfails(request, request.param)
    return loaded


@pytest.fixture
def xp(backend: Backend) -> Any:
    """The array namespace of ``backend``."""
    return backend.xp
