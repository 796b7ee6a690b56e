"""Shared pytest fixtures for ``tests/`` and ``conformance/``.

Every test that touches arrays takes the ``backend`` fixture. It is parametrised over every
backend anyclip supports; a backend that is not installed (or a device that is not present) is a
visible SKIP locally. Backends named in the environment variable ``ANYCLIP_REQUIRE_BACKENDS``
(comma separated; ``.ci/run`` sets it) FAIL instead of skipping when they cannot be loaded.

The generic ``dask`` backend is opt-in: it runs only when named in
``ANYCLIP_REQUIRE_BACKENDS``. dask is installed by the ``test`` extra for
``tests/test_dask.py`` (laziness, the matrix 2-norm, out of core on a LocalCluster), but the
whole catalogue on dask still has known failures at the edges (NaN/inf policies, overflow and
empty cases; about 360 of the parametrisations) and takes minutes on 2 cores.
"""

from __future__ import annotations

import os

import pytest

from anyclip._testing import BACKEND_IDS, Backend, load_backend


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--live-tf",
        action="store_true",
        default=False,
        help="also compare anyclip with a live TensorFlow on hypothesis-generated inputs",
    )
    parser.addoption(
        "--live-tf-examples",
        type=int,
        default=200,
        help="hypothesis examples per function in the live TensorFlow comparison",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "xfail_backend(*backends, reason, raises=None, params=None): a known, explained "
        "deviation on these backend ids (strict: it fails once fixed); `params` restricts it "
        "to parametrisations with these values, e.g. params={'dtype': 'uint64'}",
    )


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--live-tf"):
        return
    skip = pytest.mark.skip(reason="live TensorFlow comparison: run with --live-tf")
    for item in items:
        if "live_tf" in item.keywords:
            item.add_marker(skip)


def _required() -> set[str]:
    raw = os.environ.get("ANYCLIP_REQUIRE_BACKENDS", "")
    return {name.strip() for name in raw.split(",") if name.strip()}


_CACHE: dict[str, Backend | str] = {}

#: Backends of the shared fixtures that run only when named in ANYCLIP_REQUIRE_BACKENDS.
OPT_IN = frozenset({"dask"})


def get_backend(name: str) -> Backend:
    """Load backend ``name`` once per session; skip or fail when it is unavailable."""
    if name in OPT_IN and name not in _required():
        pytest.skip(f"backend {name!r} is opt-in: name it in ANYCLIP_REQUIRE_BACKENDS")
    if name not in _CACHE:
        try:
            _CACHE[name] = load_backend(name)
        except Exception as exc:  # noqa: BLE001 - any import or device failure: unavailable
            _CACHE[name] = f"{type(exc).__name__}: {exc}"
    loaded = _CACHE[name]
    if isinstance(loaded, str):
        msg = f"backend {name!r} is unavailable ({loaded})"
        if name in _required():
            pytest.fail(msg + "; it is listed in ANYCLIP_REQUIRE_BACKENDS", pytrace=False)
        pytest.skip(msg)
    return loaded


@pytest.fixture(params=BACKEND_IDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Every backend (and device), one at a time."""
    loaded = get_backend(request.param)
    _apply_backend_xfails(request, request.param)
    return loaded


@pytest.fixture(params=[name for name in BACKEND_IDS if name in Backend.AUTODIFF])
def grad_backend(request: pytest.FixtureRequest) -> Backend:
    """The backends with automatic differentiation (torch and JAX, every device)."""
    loaded = get_backend(request.param)
    _apply_backend_xfails(request, request.param)
    return loaded


@pytest.fixture
def xp(backend: Backend):
    """The array namespace of ``backend``."""
    return backend.xp
