"""The root ``conftest.py``'s pytest-xdist scheduler for ``--dist loadgroup``.

It must hand out every test once, the work units in the order xdist's own
``LoadGroupScheduling`` takes them from its queue, in batches of a few dozen tests where xdist
sends one unit per message (it also forgets finished work units and finds indices in a dict),
keep an ``xdist_group`` on one worker, never let a worker run dry while tests are queued, and
give a crashed worker's unfinished tests back to the queue. The workers are stand-ins that
record what they are sent; no process is started.
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
    def __init__(self, name: str, log: list[tuple[str, list[int]]]) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.queue: deque[int] = deque()
        self.log = log  # every worker's batches, in the order they were sent
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.log.append((self.gateway.id, list(indices)))
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _ids(n: int) -> list[str]:
    """``n`` test ids, every 97th in the group ``g`` (as the plugin suffixes them)."""
    return [f"tests/test_x.py::test_case[{i}]" + ("@g" if i % 97 == 0 else "") for i in range(n)]


def _start(cls: Any, ids: list[str]) -> tuple[Any, list[_Worker]]:
    from xdist.remote import Producer

    sched = cls(_Config(), Producer("test", enabled=False))
    log: list[tuple[str, list[int]]] = []
    workers = [_Worker("gw0", log), _Worker("gw1", log)]
    for w in workers:
        sched.add_node(w)
    for w in workers:  # equal collections, distinct string objects (as from two processes)
        sched.add_node_collection(w, ["".join(i) for i in ids])
    sched.schedule()
    return sched, workers


def _run(cls: Any, ids: list[str]) -> list[tuple[str, list[int]]]:
    """Finish the tests one by one, alternating workers; every batch sent, in order sent."""
    sched, workers = _start(cls, ids)
    ran: list[int] = []
    while any(w.queue for w in workers):
        for w in workers:
            if w.queue:
                index = w.queue.popleft()
                ran.append(index)
                sched.mark_test_complete(w, index)
    assert sched.tests_finished and not sched.has_pending
    assert sorted(ran) == list(range(len(ids)))
    return workers[0].log


def test_units_go_out_in_xdists_order_in_batches() -> None:
    ids = _ids(2_000)
    cls = _group_scheduling()
    ours = _run(cls, ids)
    theirs = _run(xdist_scheduler.LoadGroupScheduling, ids)
    sent = [i for _, batch in ours for i in batch]
    assert sorted(sent) == list(range(len(ids)))  # every test once
    grouped = {i for i, nodeid in enumerate(ids) if nodeid.endswith("@g")}
    holders = {worker for worker, batch in ours if grouped & set(batch)}
    assert len(holders) == 1  # the group ran whole on one worker
    # xdist sends a message per one-test unit; here one per batch of up to BATCH tests (fewer
    # as the queue empties)
    assert len(theirs) == len(ids) - len(grouped) + 1
    assert len(ours) <= len(theirs) // 10
    assert all(len(batch) <= cls.BATCH for _, batch in ours if not grouped & set(batch))
    # the units leave the queue in xdist's order: where each unit's first test stands among
    # all the tests sent, in the order sent, rises with its place in xdist's order
    split = _start(cls, ids)[0]._split_scope
    order = list(dict.fromkeys(split(ids[i]) for _, batch in theirs for i in batch))
    first_sent: dict[str, int] = {}
    for n, i in enumerate(sent):
        first_sent.setdefault(split(ids[i]), n)
    assert [first_sent[unit] for unit in order] == sorted(first_sent.values())


def test_a_worker_is_refilled_before_it_runs_dry() -> None:
    ids = [f"tests/test_x.py::test_case[{i}]" for i in range(1_000)]
    sched, workers = _start(_group_scheduling(), ids)
    while any(w.queue for w in workers):
        for w in workers:
            if w.queue:
                sched.mark_test_complete(w, w.queue.popleft())
                assert w.queue or not sched.workqueue, "a worker waits while tests are queued"


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


@pytest.mark.parametrize("n", [3, 10, 30, 100])
def test_a_short_run_is_spread_over_both_workers(n: int) -> None:
    # `make check` or a `-k` run of a few slow tests: a first batch of BATCH tests would give
    # one worker nearly all of them. Both workers finish one test at a time, alternately.
    ids = [f"tests/test_x.py::test_case[{i}]" for i in range(n)]
    sched, workers = _start(_group_scheduling(), ids)
    ran = {w.gateway.id: 0 for w in workers}
    while any(w.queue for w in workers):
        for w in workers:
            if w.queue:
                sched.mark_test_complete(w, w.queue.popleft())
                ran[w.gateway.id] += 1
    assert sum(ran.values()) == n
    assert abs(ran["gw0"] - ran["gw1"]) <= 1, ran
