"""The root ``conftest.py``'s pytest-xdist scheduler for ``--dist loadgroup``.

It must hand out the same tests, in the same order, to the same workers as xdist's own
``LoadGroupScheduling`` (it only forgets finished work units and finds indices in a dict), keep
an ``xdist_group`` on one worker, and give a crashed worker's unfinished tests back to the
queue. The workers are stand-ins that record what they are sent; no process is started.
"""

from __future__ import annotations

import importlib.util
from collections import deque
from pathlib import Path
from typing import Any

import pytest

xdist_scheduler = pytest.importorskip("xdist.scheduler")

ROOT = Path(__file__).resolve().parents[1]


def _group_scheduling() -> Any:
    spec = importlib.util.spec_from_file_location("_root_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._group_scheduling()


class _Option:
    numprocesses = 2
    maxschedchunk = None
    loadscopereorder = True


class _Config:
    option = _Option()

    def getvalue(self, name: str) -> Any:
        return {"tx": ["popen", "popen"], "numprocesses": 2, "dist": "loadgroup"}.get(name)

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.getvalue(name) or default


class _Worker:
    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.queue: deque[int] = deque()
        self.sent: list[list[int]] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.append(list(indices))
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _ids(n: int) -> list[str]:
    """``n`` test ids, every 97th in the group ``g`` (as the plugin suffixes them)."""
    return [f"tests/test_x.py::test_case[{i}]" + ("@g" if i % 97 == 0 else "") for i in range(n)]


def _start(cls: Any, ids: list[str]) -> tuple[Any, list[_Worker]]:
    from xdist.remote import Producer

    sched = cls(_Config(), Producer("test", enabled=False))
    workers = [_Worker("gw0"), _Worker("gw1")]
    for w in workers:
        sched.add_node(w)
    for w in workers:  # equal collections, distinct string objects (as from two processes)
        sched.add_node_collection(w, ["".join(i) for i in ids])
    sched.schedule()
    return sched, workers


def _run(cls: Any, ids: list[str]) -> list[tuple[str, list[int]]]:
    """Finish the tests one by one, alternating workers; every batch sent, in order."""
    sched, workers = _start(cls, ids)
    log: list[tuple[str, int]] = []
    while any(w.queue for w in workers):
        for w in workers:
            if w.queue:
                index = w.queue.popleft()
                log.append((w.gateway.id, index))
                sched.mark_test_complete(w, index)
    assert sched.tests_finished and not sched.has_pending
    assert sorted(i for _, i in log) == list(range(len(ids)))
    return [(w.gateway.id, batch) for w in workers for batch in w.sent]


def test_same_schedule_as_xdists_loadgroup() -> None:
    ids = _ids(2_000)
    ours = _run(_group_scheduling(), ids)
    assert ours == _run(xdist_scheduler.LoadGroupScheduling, ids)
    grouped = {i for i, nodeid in enumerate(ids) if nodeid.endswith("@g")}
    holders = {worker for worker, batch in ours if grouped & set(batch)}
    assert len(holders) == 1  # the group ran whole on one worker


def test_finished_units_are_forgotten_and_a_crash_requeues_the_rest() -> None:
    ids = _ids(500)
    sched, (gw0, _) = _start(_group_scheduling(), ids)
    for _ in range(40):
        if gw0.queue:
            sched.mark_test_complete(gw0, gw0.queue.popleft())
    pending = list(gw0.queue)
    units = sched.assigned_work[gw0].values()
    assert units and all(not all(unit.values()) for unit in units)  # finished ones forgotten
    assert sum(list(unit.values()).count(False) for unit in units) == len(pending)
    crashed = sched.remove_node(gw0)
    assert crashed == ids[pending[0]]
    assert {nodeid for unit in sched.workqueue.values() for nodeid in unit} >= {
        ids[i] for i in pending
    }
