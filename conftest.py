"""pytest wiring of a source checkout: the conformance suite's plugin serves every test.

``anyclip_conformance.plugin`` provides the ``backend``/``grad_backend``/``xp`` fixtures, the
markers, the xfail lists, ``--anyclip-backends``, ``--live-tf`` and ``ANYCLIP_REQUIRE_BACKENDS``.

JAX's persistent compilation cache is switched on here, before anything imports JAX
(:func:`anyclip_conformance.jax_cache.enable`: ``$XDG_CACHE_HOME/anyclip/jax`` unless
``JAX_COMPILATION_CACHE_DIR`` is set); a rerun of ``tests/test_jit.py`` went from 12.7 s to 3.5 s.

Under pytest-xdist's ``--dist loadgroup`` (``make test``) the controller schedules with
:class:`_GroupScheduling`, which does per test what xdist 3.8's own scheduler does with work
proportional to the whole run (see its docstring).

Once the tests are collected, :func:`pytest_collection_finish` hands what exists then (the
frameworks' modules, the collected items: some 1.9 million objects) to ``gc.freeze()`` and
makes the collector's young generation larger (:data:`GC_THRESHOLDS`), so that the run's full
collections no longer walk them again and again (measured in CONTRIBUTING.md, "Running the
tests").

Inductor's C++ kernels are cached under a key that holds the compiler's command line, and so
the path of the venv's torch (``-I``/``-L``): every fresh clone, with its own ``.venv``,
compiled its some 200 kernels again (about a second of CPU each) although its FX graph cache
hit. :func:`_stable_inductor_kernel_keys` writes that path into the key as the torch build
instead (measured in CONTRIBUTING.md, "Running the tests").
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from anyclip_conformance import jax_cache

jax_cache.enable()

pytest_plugins = ["anyclip_conformance.plugin"]

#: ``gc.set_threshold`` during the tests (Python's default: 700, 10, 10). With the default, the
#: two workers of a whole run made 34 and 53 full collections, up to 2.7 s each (49 and 68 s in
#: the collector); with this and the freeze below, 43 and 25 s (CONTRIBUTING.md).
GC_THRESHOLDS = (50_000, 20, 20)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what exists once the tests are collected, and collect the young less often.

    Frozen objects are never collected (``gc.freeze``): those alive at this point are modules,
    classes and the collected items, which live to the end of the run anyway; the garbage among
    them is collected first. Cycles made later are collected as before, less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


#: Whether :func:`_stable_inductor_kernel_keys` ran in this process (once torch was imported).
_KERNEL_KEYS_DONE: list[bool] = []


def _stable_inductor_kernel_keys() -> None:
    """Key Inductor's compiled C++ by the torch build, not by where the venv's torch lies.

    ``torch._inductor.codecache.write`` names a kernel's ``.so`` (and a precompiled header)
    by a hash of its source and of ``extra``, the compile command, which holds the torch
    folder in its ``-I`` and ``-L`` flags. Here that folder is replaced in ``extra`` by the
    torch version and build commit, so another venv of the same torch build (a fresh clone's)
    finds the kernels compiled before instead of compiling them again. The kernels link no
    torch library (only the C and C++ runtimes), and their headers are the build's own, so
    the same build gives the same kernel. Nothing changes when torch has no such function
    (another torch version): the keys are torch's own then. Only the test run is changed,
    never anyclip.
    """
    if _KERNEL_KEYS_DONE or "torch" not in sys.modules:
        return
    _KERNEL_KEYS_DONE.append(True)
    try:
        import torch
        from torch._inductor import codecache
        from torch.utils import cpp_extension
    except Exception:  # noqa: BLE001 - a torch without Inductor: nothing to key
        return
    write = getattr(codecache, "write", None)
    folder = getattr(cpp_extension, "_TORCH_PATH", None)
    if not callable(write) or not isinstance(folder, str) or not folder:
        return
    # the folder with its separator: a sibling such as ``.../torchvision`` is left as it is
    inside = folder.rstrip("/") + "/"
    build = f"<torch {torch.__version__} {getattr(torch.version, 'git_version', '')}>/"

    def write_keyed_by_build(*args: Any, **kwargs: Any) -> Any:
        if len(args) > 2 and isinstance(args[2], str):
            args = (*args[:2], args[2].replace(inside, build), *args[3:])
        elif isinstance(kwargs.get("extra"), str):
            kwargs["extra"] = kwargs["extra"].replace(inside, build)
        return write(*args, **kwargs)

    codecache.write = write_keyed_by_build


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _stable_inductor_kernel_keys()  # a test before imported torch: before its fixtures compile
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    _stable_inductor_kernel_keys()  # its fixtures imported torch: before the test compiles
    return (yield)


def _group_scheduling() -> Any:
    """xdist's ``LoadGroupScheduling`` with constant work per finished test (None: no xdist)."""
    try:
        from xdist.scheduler import LoadGroupScheduling
    except ImportError:
        return None

    class _GroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        """``--dist loadgroup`` as xdist schedules it, without two costs that grow with the run.

        Every test is its own work unit here, except an ``xdist_group`` (some 54,000 units).
        xdist 3.8 keeps every unit a worker has finished and, after each test, counts the
        worker's pending tests over all of them (``_pending_of``), and finds each test it sends
        by ``list.index`` in the worker's collection: both grow with the run, so the
        controller's work grows with its square. Here a unit is forgotten once every test of it
        has finished (what is pending is all that the scheduler reads of it: a crashed worker's
        unfinished units still go back to the queue), and the indices come from a dict.

        A worker is also sent its tests in batches: xdist sends one unit whenever a worker has
        two tests or fewer left, a message per test here, and a worker whose next message is
        late (the controller shares the CPUs with it) waits with nothing to run. Here a worker
        left with :attr:`REFILL_AT` tests or fewer gets units up to :attr:`BATCH` tests in one
        message, fewer as the queue empties. The units go out in xdist's order, and an
        ``xdist_group`` still runs whole on one worker (measured in CONTRIBUTING.md, "Running
        the tests").
        """

        #: a worker with this many pending tests or fewer is sent more (xdist: 2)
        REFILL_AT = 4
        #: the tests a refill tops a worker up to (xdist: one unit)
        BATCH = 24

        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            self._indices: dict[Any, dict[str, int]] = {}

        def add_node_collection(self, node: Any, collection: Any) -> None:
            super().add_node_collection(node, collection)
            if node in self.registered_collections:
                ids = self.registered_collections[node]
                self._indices[node] = {nodeid: i for i, nodeid in enumerate(ids)}

        def _assign_work_unit(self, node: Any) -> None:
            self._send_units(node, 0)

        def _send_units(self, node: Any, pending: int) -> None:
            """Send ``node`` units from the queue's head, one message, until it has BATCH tests.

            Fewer near the end of the queue: at most an eighth of what is queued per worker,
            so that a short run (``make check``, ``-k``) still spreads over every worker.
            """
            assigned = self.assigned_work.setdefault(node, {})
            indices = self._indices[node]
            most = min(self.BATCH, pending + len(self.workqueue) // (8 * len(self.nodes)))
            batch: list[int] = []
            while self.workqueue and (not batch or pending + len(batch) < most):
                scope, work_unit = self.workqueue.popitem(last=False)
                assigned[scope] = work_unit
                batch.extend(indices[n] for n, done in work_unit.items() if not done)
            node.send_runtest_some(batch)

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            pending = self._pending_of(self.assigned_work[node])
            if pending <= self.REFILL_AT:
                self._send_units(node, pending)

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            nodeid = self.registered_collections[node][item_index]
            workload = self.assigned_work[node]
            scope = self._split_scope(nodeid)
            workload[scope][nodeid] = True
            if all(workload[scope].values()):
                del workload[scope]
            self._reschedule(node)

    return _GroupScheduling


def pytest_configure(config: pytest.Config) -> None:
    # the xdist controller, before it starts the workers: each worker's JAX cache folder gets
    # what the others compiled in earlier runs (jax_cache.share_worker_entries)
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        jax_cache.share_worker_entries(jax_cache.enable())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """:class:`_GroupScheduling` for ``--dist loadgroup``; xdist's own otherwise."""
    scheduling = _group_scheduling()
    if scheduling is None or config.getvalue("dist") != "loadgroup":
        return None
    return scheduling(config, log)
