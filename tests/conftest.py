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

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest

from anyclip_conformance import Backend, assert_array

#: Scripts run in subprocesses by the distributed tests (not test modules; they import
#: frameworks at import time and need environment variables set first).
collect_ignore = [
    "_docs_runner.py",
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


#: What TensorFlow 2.21 prints when its eager runtime aborts in its cache of converted Python
#: scalars: ``F... pywrap_tensor_conversion.h:59] Check failed: !PyErr_Occurred()`` with
#: ``tensorflow::TFE_TensorHandleCache::Insert()`` on the stack (SIGABRT). It is rare and comes
#: with load: 1 of 16 runs of ``make_tf_error_messages.py`` with both cores busy, 0 of 32 more,
#: 0 of 29 on an idle machine; one CI run failed on it.
_TF_SCALAR_CACHE_ABORT = ("Check failed: !PyErr_Occurred()", "TFE_TensorHandleCache")


def run_reference_script(script: Path, *args: str | Path, timeout: float = 900) -> None:
    """Run ``python script *args`` in a fresh process: a live reference (TF, Keras, zclip...).

    A non-zero exit fails the calling test with the end of the script's stderr. The one
    exception is TensorFlow's own abort above, which says nothing of the values compared: that
    run is made once more (a second abort fails, with its stderr). ``timeout`` bounds each run.
    """
    command = [sys.executable, str(script), *(str(a) for a in args)]
    for attempt in (1, 2):
        proc = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=timeout, check=False
        )
        if proc.returncode == 0:
            return
        tf_abort = proc.returncode == -signal.SIGABRT and all(
            s in proc.stderr for s in _TF_SCALAR_CACHE_ABORT
        )
        if not (tf_abort and attempt == 1):
            pytest.fail(
                f"{Path(script).name} exited with {proc.returncode} (run {attempt}):\n"
                f"{proc.stderr[-4000:]}"
            )


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
    run_reference_script(script, out)
    live = dict(np.load(out))
    assert live.keys() == committed.keys()
    for k, v in live.items():
        if k not in skip:
            np.testing.assert_array_equal(v, committed[k], err_msg=k)


def live_tf_json(script: Path, tmp_path: Path) -> dict[str, Any]:
    """Run a ``tests/data/make_tf_*.py`` script on live TF; the JSON file it writes.

    Skips without TensorFlow (the ``--live-tf`` tests call it).
    """
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    out = tmp_path / "live.json"
    run_reference_script(script, out)
    return dict(json.loads(out.read_text()))


def assert_same_tf_cases(
    live: dict[str, Any], committed: dict[str, Any], key_phrase: Callable[[str], str]
) -> None:
    """The cases of a live TF run are the committed ones, in order.

    The same class and result (where recorded) for each, and the same key phrase of its
    message (``key_phrase``: the words anyclip must quote; the rest, such as the device in
    ``{{function_node ...CPU:0}}``, may differ).
    """
    assert list(live) == list(committed)
    for case_id, record in live.items():
        recorded = committed[case_id]
        assert record["tf_class"] == recorded["tf_class"], case_id
        assert record.get("tf_result") == recorded.get("tf_result"), case_id
        if record["tf_message"] is not None:
            assert key_phrase(record["tf_message"]) == key_phrase(recorded["tf_message"]), case_id


def anyclip_class(tf_class: str, key: str) -> type[Exception]:
    """anyclip's exception for TF's ``tf_class`` (docs/porting.md, "Errors").

    anyclip raises what TF raises in graph mode (docs/tf-reference.md §0.3): ``TypeError`` for a
    dtype (TF's eager ``InvalidArgumentError`` about a kernel's dtype, ``NotFoundError`` for a
    missing kernel, and ``AttributeError`` for a Python number where TF wants a tensor),
    ``ValueError`` for a shape, an axis or a value (``InvalidArgumentError`` about shapes or
    reduction axes, ``OverflowError`` for an integer out of range).
    """
    if tf_class in ("TypeError", "AttributeError", "NotFoundError"):
        return TypeError
    if tf_class in ("ValueError", "OverflowError"):
        return ValueError
    assert tf_class == "InvalidArgumentError", tf_class
    return TypeError if key.startswith(("Value for attr", "expected to be a")) else ValueError


def compare_tf_result(backend: Backend, got: Any, expected: Any, ulp: float, what: str) -> None:
    """``got`` is TF's result ``expected`` as the ``make_tf_*.py`` scripts encode it.

    None, a list of results, a torch nested tensor (TF's ragged rows) or an array with its
    dtype, within ``ulp``.
    """
    if expected is None:
        assert got is None, what
        return
    if "list" in expected:
        assert isinstance(got, (list, tuple)), what
        assert len(got) == len(expected["list"]), what
        for i, (g, e) in enumerate(zip(got, expected["list"], strict=True)):
            compare_tf_result(backend, g, e, ulp, f"{what}[{i}]")
        return
    if "ragged" in expected:  # a torch nested tensor of layout jagged, TF's rows
        torch = backend.module
        assert got.layout == torch.jagged, what
        rows = expected["ragged"]
        lengths = [len(r) for r in rows]
        assert got.offsets().tolist() == np.concatenate([[0], np.cumsum(lengths)]).tolist()
        flat = [v for r in rows for v in r]
        assert_array(got.values(), flat, backend=backend, dtype=expected["dtype"], ulp=ulp)
        return
    data = np.asarray(expected["array"], dtype=np.float64 if expected["dtype"] != "bool" else bool)
    assert_array(got, data, backend=backend, dtype=expected["dtype"], ulp=ulp, what=what)


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


# ------------------------------------------------------------------ subprocesses
def start_process(
    args: Sequence[str | Path], *, log: Path, stdin: int | IO[Any] | None = None, **kwargs: Any
) -> subprocess.Popen[bytes]:
    """Start ``args`` with its stdout and stderr written to ``log``.

    On POSIX it leads a process group of its own (a new session), so that :func:`stop_process`
    reaches whatever it started too (a docs block's workers, a rank's helpers).
    """
    with open(log, "wb") as fh:
        return subprocess.Popen(
            [str(a) for a in args],
            stdin=stdin,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=os.name == "posix",
            **kwargs,
        )


def exited(proc: subprocess.Popen[Any]) -> bool:
    """Whether ``proc`` has exited; on POSIX without reaping it, so that its process group id
    cannot be another process's yet when :func:`stop_process` kills the group."""
    if proc.returncode is not None:
        return True
    if hasattr(os, "waitid"):
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PID, proc.pid, flags) is not None
    return proc.poll() is not None  # pragma: no cover - Windows


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """Kill ``proc`` (a :func:`start_process` process) and its process group; reap it.

    The group is killed only while ``proc`` is not reaped (its id is still ours): a process
    reaped by ``wait`` or ``poll`` is left as it is.
    """
    if proc.returncode is None:
        if os.name == "posix":
            with contextlib.suppress(ProcessLookupError):  # the group is already gone
                os.killpg(proc.pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows
            proc.kill()
    proc.wait()


#: The docs block runner (``tests/_docs_runner.py``): a script, standard library only.
DOCS_RUNNER = Path(__file__).with_name("_docs_runner.py")
#: Seconds one docs block may run in :class:`DocsBlockRunner` (a torch.distributed block runs in
#: 1 to 5 s on the 2-core machine, the first one importing torch): generous for a loaded
#: machine, and bounded, so that a block that hangs fails instead of holding the run.
DOCS_BLOCK_TIMEOUT = 300.0


class DocsBlockFailed(Exception):
    """A docs block raised, ran over its time, or its Python died; the message says which."""


class DocsBlockTimeout(DocsBlockFailed):
    """A docs block ran over its time: it was stopped, its Python killed."""


class DocsBlockRunner:
    """Docs blocks run one at a time in a Python of its own (``tests/_docs_runner.py``).

    The Python starts at the first block and serves the next ones; each block gets
    ``timeout`` seconds. A block that runs over them is stopped: the Python is killed with its
    process group and reaped, :class:`DocsBlockFailed` names the block and shows what it printed
    so far, and the next block starts a fresh Python. :meth:`close` kills and reaps it too.
    ``python``, ``flags``, ``cwd`` and ``env`` are the interpreter, its options, its working
    folder and its environment (``None``: this process's); ``script`` the runner's file;
    ``workdir`` a folder for its log and results.
    """

    def __init__(
        self,
        python: str | Path,
        workdir: Path,
        *,
        script: Path = DOCS_RUNNER,
        flags: Sequence[str] = (),
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        timeout: float = DOCS_BLOCK_TIMEOUT,
    ) -> None:
        self.args = [python, *flags, script]
        self.workdir, self.cwd, self.env, self.timeout = workdir, cwd, env, timeout
        self.log = workdir / "runner.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._requests = 0

    Failed = DocsBlockFailed

    @staticmethod
    def warning_filters_here() -> list[list[Any]]:
        """The warning filters in force here (pytest's, inside a test), for :meth:`run`."""

        def regex(pattern: re.Pattern[str] | str | None) -> str:
            if isinstance(pattern, str):  # the interpreter's own filters match a plain string
                return re.escape(pattern) + r"\Z"
            return "" if pattern is None else pattern.pattern

        def name(category: type[Warning]) -> str:
            return f"{category.__module__}:{category.__qualname__}"

        return [
            [action, regex(message), name(cat), regex(module), line]  # type: ignore[arg-type]
            for action, message, cat, module, line in warnings.filters
        ]

    def _output(self, start: int) -> str:
        with open(self.log, "rb") as fh:
            fh.seek(start)
            return fh.read().decode(errors="replace")[-4000:]

    def run(
        self, name: str, code: str, warning_filters: list[list[Any]] | None = None
    ) -> list[str]:
        """The lines block ``name`` prints; raises :class:`DocsBlockFailed` if it fails.

        ``warning_filters`` (from :meth:`warning_filters_here`) are set around the block;
        ``None`` leaves the interpreter's own.
        """
        if self.proc is None:
            self.log = self.workdir / f"runner{self._requests}.log"
            self.proc = start_process(
                self.args, log=self.log, stdin=subprocess.PIPE, cwd=self.cwd, env=self.env
            )
        proc = self.proc
        assert proc.stdin is not None
        self._requests += 1
        result = self.workdir / f"result{self._requests}.json"
        start = self.log.stat().st_size
        request = {"name": name, "code": code, "result": str(result), "warnings": warning_filters}
        with contextlib.suppress(BrokenPipeError):  # it died: told below
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
        deadline = time.monotonic() + self.timeout
        while not result.exists():
            if exited(proc) and not result.exists():  # (it may have written it, then exited)
                self.close()
                raise DocsBlockFailed(
                    f"{name}: the Python running it exited with {proc.returncode}; "
                    f"its output:\n{self._output(start)}"
                )
            if time.monotonic() > deadline:
                self.close()
                raise DocsBlockTimeout(
                    f"{name} ran over {self.timeout:g} s and was stopped; its output so far:\n"
                    f"{self._output(start)}"
                )
            time.sleep(0.02)
        got = json.loads(result.read_text(encoding="utf-8"))
        if got["error"] is not None:
            raise DocsBlockFailed(
                f"{name} raised:\n{got['error']}\nafter printing:\n{got['printed']}"
            )
        return list(got["printed"])

    def close(self) -> None:
        """Kill and reap the runner's Python (and its process group), if it runs."""
        if self.proc is not None:
            proc, self.proc = self.proc, None
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            stop_process(proc)


@pytest.fixture(scope="module")
def docs_runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocsBlockRunner]:
    """A :class:`DocsBlockRunner` on this interpreter, in this process's folder and environment."""
    runner = DocsBlockRunner(sys.executable, tmp_path_factory.mktemp("docs-runner"))
    yield runner
    runner.close()


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
    unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
    if unregister is None:  # JAX before 0.6 (the floor is 0.5.3): only its private name
        from jax._src import monitoring

        unregister = monitoring._unregister_event_duration_listener_by_callback
    unregister(listen)
