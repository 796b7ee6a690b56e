"""Fixtures shared by the unit tests in ``tests/``.

The root ``conftest.py`` provides ``backend`` (every backend and device, one at a time) and
``grad_backend``. This file adds small helpers bound to the current backend:

* ``make(values, dtype)``: NumPy data on the backend with ``dtype``; skips when the backend has
  no such dtype (float16 on array-api-strict, bfloat16 on NumPy, ...).
* ``check(actual, desired, dtype, ulp=0, what="")``: :func:`anyclip_conformance.assert_array` with
  ``desired`` first rounded to ``dtype`` (so that a float32 value copied from
  ``docs/tf-reference.md``, printed as the shortest decimal that round-trips, becomes the exact
  float32 TF returned).
* ``jax_compiles``: the JAX compile events (a trace for a program, its lowering, its XLA
  compilation) seen while the test runs, through ``jax.monitoring``.

Expected values in the tests come from ``docs/tf-reference.md`` (cited by section), from an
independent NumPy float64 formula, or from a mathematical property; never from anyclip itself.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from anyclip_conformance import Backend, assert_array

#: Scripts run in subprocesses by the distributed tests (not test modules; they import
#: frameworks at import time and need environment variables set first).
collect_ignore = [
    "_torch_dist_worker.py",
    "_jax_sharding_worker.py",
    "_first_call_worker.py",
    "_host_sync_worker.py",
]

#: ULP budgets for float32 results, from docs/tf-reference.md §11 (what a faithful port of TF's op
#: order was measured to reach): clip_by_value is bit-exact, the reductions are not.
ULP_VALUE = 0
ULP_CLIP_NORM = 2
ULP_GLOBAL = 3
ULP_L2 = 3
ULP_PNORM = 5


def rounded(values: Any, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` (bfloat16 through ml_dtypes), for exact comparisons."""
    if dtype == "bfloat16":
        import ml_dtypes

        return np.asarray(np.asarray(values, dtype=np.float32), dtype=ml_dtypes.bfloat16)
    with np.errstate(over="raise"):
        return np.asarray(values, dtype=dtype)


def jax_divides_exactly() -> bool:
    """Whether the installed JAX's CPU float32 ``[3, 4] / 13`` is the correctly rounded quotient.

    optax's ``clip_by_global_norm`` divides first (``t / norm * max_norm``), so its value on
    ``[3, 4]`` and ``[12]`` (norm 13) depends on it: JAX 0.10.2's ``3 / 13`` is one ulp above
    NumPy's (``0.23076925``), which gives optax's ``[1.5000001, 2]`` at 6.5 where TF gives
    ``[1.5, 2]``; JAX 0.5.3's is NumPy's, and optax's value is TF's there.
    """
    import jax.numpy as jnp

    got = np.asarray(jnp.asarray([3.0, 4.0], dtype=jnp.float32) / jnp.float32(13.0))
    return bool(np.array_equal(got, np.float32([3.0, 4.0]) / np.float32(13.0)))


@pytest.fixture
def make(backend: Backend) -> Callable[..., Any]:
    """Build a backend array from NumPy data, skipping dtypes the backend lacks."""

    def _make(values: Any, dtype: str = "float32") -> Any:
        backend.dtype(dtype)  # skips when absent
        return backend.asarray(values, dtype)

    return _make


@pytest.fixture
def check(backend: Backend) -> Callable[..., float]:
    """Compare ``actual`` with ``desired`` rounded to ``dtype`` (namespace/dtype/shape first)."""

    def _check(actual: Any, desired: Any, dtype: str, ulp: float = 0, what: str = "") -> float:
        return assert_array(
            actual, rounded(desired, dtype), backend=backend, dtype=dtype, ulp=ulp, what=what
        )

    return _check


@pytest.fixture
def weights(backend: Backend) -> Callable[..., Any]:
    """``w = 1..n`` reshaped like ``shape``: the loss weights of docs/tf-reference.md §9."""

    def _weights(shape: tuple[int, ...], dtype: str = "float32") -> Any:
        n = int(np.prod(shape))
        return backend.asarray(np.arange(1, n + 1, dtype=np.float64).reshape(shape), dtype)

    return _weights


def assert_live_reference(
    script: Path, committed: dict[str, Any], tmp_path: Path, *, skip: tuple[str, ...] = ()
) -> None:
    """Run a ``tests/data/make_*.py`` script on live TF: it must give the committed file.

    Every array must be bit-equal (the members in ``skip``, such as a provenance record, aside).
    Skips without TensorFlow (the ``--live-tf`` tests call it).
    """
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    out = tmp_path / "live.npz"
    subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True)
    live = dict(np.load(out))
    assert live.keys() == committed.keys()
    for k, v in live.items():
        if k not in skip:
            np.testing.assert_array_equal(v, committed[k], err_msg=k)


@pytest.fixture
def first_calls(tmp_path: Path) -> Callable[..., None]:
    """Run ``tests/_first_call_worker.py MODE`` in a fresh process; every scenario must pass.

    Warnings are errors there, as in the test run (a warning raised inside a Dynamo trace
    fails that scenario).

    Each failing scenario is reported with its traceback, all of them together; ``at_least``
    guards against a mode that silently ran fewer scenarios.
    """

    def _run(mode: str, *, at_least: int) -> None:
        out = tmp_path / f"{mode}.json"
        results: dict[str, str] = run_json_worker("_first_call_worker.py", mode, out=out)
        failed = {name: why for name, why in results.items() if why != "ok"}
        report = "\n\n".join(f"== {name}\n{why}" for name, why in failed.items())
        assert not failed, f"{len(failed)} of {len(results)} {mode} scenarios failed:\n{report}"
        assert len(results) >= at_least, sorted(results)

    return _run


def run_json_worker(script: str, *args: str, out: Path, timeout: float = 600) -> Any:
    """Run ``tests/<script> *args <out>`` in a fresh Python; the JSON it wrote to ``out``.

    Warnings are errors there, as in the test run (the filters of pyproject.toml's pytest
    section); a non-zero exit fails the calling test with the worker's stderr.
    """
    warnings = [
        "-W",
        "error",
        "-W",
        "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning",
        "-W",
        "ignore:<class 'torch.autograd.function.Function'> should not be "
        "instantiated:DeprecationWarning",
    ]
    proc = subprocess.run(
        [sys.executable, *warnings, str(Path(__file__).with_name(script)), *args, str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture
def jax_compiles() -> Iterator[list[str]]:
    """The names of the JAX compile events from now on, in order (clear the list to restart).

    ``jax.monitoring``'s duration events under ``/jax/core/compile/``: a trace for a program
    (``jit``'s, or an eager ``lax.cond``'s), its lowering to MLIR, its XLA compilation. A call
    that reuses a cached program records none. The listener is removed after the test.
    """
    jax = pytest.importorskip("jax")
    seen: list[str] = []

    def listen(event: str, duration_secs: float, **kwargs: Any) -> None:
        if event.startswith("/jax/core/compile/"):
            seen.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    yield seen
    jax.monitoring.unregister_event_duration_listener(listen)
