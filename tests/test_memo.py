"""anyclip._memo: answers remembered per key, filled outside torch.compile's traces.

What the memos do under ``torch.compile`` (no recompile as they fill or grow) is tested in
``tests/test_compile.py`` (``test_torch_compile_compiles_once_while_anyclip_remembers_more``)
and in the fresh process of ``tests/_first_call_worker.py``; here, what they remember.
"""

from __future__ import annotations

import itertools
import sys
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from anyclip._memo import (
    ConstantMemo,
    Memo,
    constant_by_dtype,
    memo_by_dtype,
    remember,
    remembered,
)

_NUMBERS = itertools.count()


def new_name() -> str:
    """A memo name no other memo has (a test run twice in one process makes new memos)."""
    return f"test_memo.{next(_NUMBERS)}"


class Counter:
    """A compute function that counts its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        self.calls.append(args)
        return ("answer", *args)


def test_remembered_computes_once_per_key():
    memo: Memo[tuple[Any, ...]] = Memo(new_name())
    compute = Counter()
    assert remembered(memo, "a", compute, 1) == ("answer", 1)
    assert remembered(memo, "a", compute, 2) == ("answer", 1)  # the key decides, not the args
    assert remembered(memo, int, compute, 3) == ("answer", 3)
    assert compute.calls == [(1,), (3,)]
    assert len(memo) == 2


def test_each_answer_in_an_attribute_named_by_remember():
    memo: Memo[tuple[Any, ...]] = Memo(new_name())
    first = remember(memo.name, "a", Counter(), 1)
    second = remember(memo.name, "b", Counter(), 2)
    assert first != second
    assert remember(memo.name, "a", Counter(), 9) == first
    assert getattr(memo, first) == ("answer", 1)
    assert getattr(memo, second) == ("answer", 2)


def test_an_unhashable_key_is_computed_each_time():
    memo: Memo[tuple[Any, ...]] = Memo(new_name())
    compute = Counter()
    key: list[int] = [1]
    assert remember(memo.name, key, compute, 5) == ""
    assert remembered(memo, key, compute, 6) == ("answer", 6)
    assert remembered(memo, key, compute, 7) == ("answer", 7)
    assert len(memo) == 0
    assert compute.calls == [(6,), (7,)]


def test_memo_by_dtype_keeps_namespaces_apart():
    # the same dtype object under two namespaces: two answers
    memo: Memo[tuple[Any, ...]] = Memo(new_name())
    compute = Counter()
    xp1, xp2 = SimpleNamespace(__name__="one"), SimpleNamespace(__name__="two")
    assert memo_by_dtype(memo, xp1, "float32", compute) == ("answer", xp1, "float32")
    assert memo_by_dtype(memo, xp2, "float32", compute) == ("answer", xp2, "float32")
    assert memo_by_dtype(memo, xp1, "float32", compute) == ("answer", xp1, "float32")
    assert memo_by_dtype(memo, xp1, "float64", compute) == ("answer", xp1, "float64")
    assert len(compute.calls) == 3
    assert len(memo) == 3


def test_memo_by_dtype_computes_an_unhashable_dtype_each_time():
    memo: Memo[tuple[Any, ...]] = Memo(new_name())
    compute = Counter()
    xp = SimpleNamespace(__name__="one")
    dtype: dict[str, str] = {}
    assert memo_by_dtype(memo, xp, dtype, compute) == ("answer", xp, dtype)
    assert memo_by_dtype(memo, xp, dtype, compute) == ("answer", xp, dtype)
    assert len(compute.calls) == 2
    assert len(memo) == 0


def test_an_error_in_compute_remembers_nothing():
    memo: Memo[int] = Memo(new_name())

    def fails() -> int:
        raise ValueError("no answer")

    with pytest.raises(ValueError, match="no answer"):
        remembered(memo, "a", fails)
    assert remembered(memo, "a", lambda: 3) == 3
    assert len(memo) == 1


def test_constant_by_dtype_keeps_namespaces_apart():
    memo: ConstantMemo[tuple[Any, ...]] = ConstantMemo(new_name())
    compute = Counter()
    xp1, xp2 = SimpleNamespace(__name__="one"), SimpleNamespace(__name__="two")
    assert constant_by_dtype(memo, xp1, "float32", compute) == ("answer", xp1, "float32")
    assert constant_by_dtype(memo, xp2, "float32", compute) == ("answer", xp2, "float32")
    assert constant_by_dtype(memo, xp1, "float32", compute) == ("answer", xp1, "float32")
    assert constant_by_dtype(memo, xp1, {}, compute) == ("answer", xp1, {})  # unhashable
    assert constant_by_dtype(memo, xp1, {}, compute) == ("answer", xp1, {})
    assert len(compute.calls) == 4


def test_threads_filling_one_memo_each_get_their_own_answers():
    # without the lock in Memo._add, two threads adding at once took the same attribute and
    # one key answered with the other's value (about 70 of these 24,000 keys per run)
    memo: Memo[tuple[int, int]] = Memo(new_name())
    wrong: list[tuple[Any, Any]] = []

    def fill(thread: int) -> None:
        for i in range(3000):
            key = (thread, i)
            got = remembered(memo, key, lambda k: k, key)
            if got != key:
                wrong.append((key, got))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows
    try:
        threads = [threading.Thread(target=fill, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []
    assert len(memo) == 24000


@pytest.mark.parametrize("kinds", [(Memo, Memo), (Memo, ConstantMemo), (ConstantMemo, Memo)])
def test_a_second_memo_of_the_same_name_is_an_error(kinds):
    # the functions Dynamo runs find a memo by its name: a second memo under it would take the
    # first one's new answers, and the first would answer a new key with an older key's value
    first, second = kinds
    name = new_name()
    memo = first(name)
    with pytest.raises(ValueError, match=f"a memo named '{name}' exists already"):
        second(name)
    if isinstance(memo, Memo):
        assert remembered(memo, "k1", lambda: 1) == 1
        assert remembered(memo, "k2", lambda: 2) == 2
