"""Answers remembered per key, which ``torch.compile`` reads without compiling again.

Layer: foundation (imports nothing of anyclip, and no framework). anyclip remembers what it
works out once per type, dtype or library (an array type's namespace, a dtype's kernels, its
kind, its overflow threshold): a dict lookup per call is cheap, and Dynamo traces it. But
Dynamo guards on what a trace reads: a key found, on that entry; a key missed, on the dict's
length. A trace that fills a plain dict therefore fails its own guard at the next call, and the
user's compiled function is compiled twice (measured: the process's first ``clip_by_norm``,
``clip_by_global_norm`` or ``anyclip.torch.clip_grad_norm_`` inside ``torch.compile``), and
again whenever a later call (a NumPy one, say) adds an entry that an earlier trace missed.

Two more things rule out a plain dict that is filled outside the trace: Dynamo's guard on a
dict whose keys are not all Python literals (types, dtypes) also checks its length, so such a
dict may not grow either; and Dynamo reads a dict's entries once per trace, so an entry added
later in the same trace is missing from its copy. A :class:`Memo` therefore keeps each answer
in an attribute of its own (``memo.n0``, ``memo.n1``, ...), which Dynamo reads when the trace
asks for it, and the attribute's name under the key in ``memo.index``. It is filled only by
the functions here, which Dynamo runs instead of tracing them (they carry the mark
``torch.compiler.assume_constant_result`` sets) and whose answer, the name, it takes as a
constant: a trace reads one attribute that is there and guards on it alone. Eagerly a memo
costs one call and one ``getattr`` more than a dict.

A string answer needs no attribute: a :class:`ConstantMemo` holds a plain dict that only the
function behind :func:`constant_by_dtype` reads, which Dynamo runs and whose answer it takes as
a constant (no guard at all). Eagerly it costs two calls, where a dict costs one. Only strings (and
None), which anyclip compares and nothing else: Dynamo gives such a constant no place it can
guard, and fails (``NotImplementedError``) on ``type()`` of it, or of an item of a tuple, which
anyclip's arithmetic takes of its numbers; numbers and tuples go to a :class:`Memo` (a number
that is only compared, never computed with, may be a constant: ``_kernels/_plain.py``'s
largest finite value).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

V = TypeVar("V")
T = TypeVar("T")

__all__ = ["ConstantMemo", "Memo", "constant_by_dtype", "memo_by_dtype", "remember", "remembered"]


#: Held while a memo adds an answer (rare: once per key).
_ADDING = threading.Lock()

#: Every memo by its name: the functions Dynamo runs are given the name, not the memo (Dynamo
#: before torch 2.13 cannot pass them an object of a user class: "is not a constant").
_MEMOS: dict[str, Any] = {}


def _register(name: str, memo: Any) -> None:
    if name in _MEMOS:
        raise ValueError(
            f"a memo named {name!r} exists already; expected a name no other memo has: name "
            "each memo after its module and what it holds (importing again a module that makes "
            "memos, as importlib.reload does, is not supported)"
        )
    _MEMOS[name] = memo


class Memo(Generic[V]):
    """Answers remembered by key: each in an attribute, its name in ``index``.

    Fill it with :func:`remembered`, :func:`memo_by_dtype` or :func:`remember` only. An
    object rather than a dict: Dynamo reads an attribute when the trace asks for it. The
    index holds each key object, so that no key's answer is found under another object's key:
    under the key itself (:func:`remembered`), or under the namespace's name, then the dtype
    (:func:`memo_by_dtype`). ``name`` names the memo for the functions Dynamo runs; no two
    memos may share one (:class:`ValueError`).
    """

    def __init__(self, name: str) -> None:
        _register(name, self)
        self.name = name
        self.index: dict[Any, Any] = {}
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def _add(self, value: Any) -> str:
        # under a lock: two threads adding at once would otherwise take the same name, and
        # one key would then answer with the other's value
        with _ADDING:
            name = f"n{self.size}"
            setattr(self, name, value)
            self.size += 1
        return name


def remember(memo: str, key: Any, compute: Callable[..., Any], *args: Any) -> str:
    """The attribute of the memo named ``memo`` that holds ``key``'s answer.

    ``compute(*args)`` is stored first if the key is new; ``""`` for an unhashable key
    (nothing stored). Dynamo runs this function rather than tracing it, and takes the name as
    a constant.
    """
    m: Memo[Any] = _MEMOS[memo]
    try:
        name: str | None = m.index.get(key)
    except TypeError:  # an unhashable key (a dtype object of some library): never remembered
        return ""
    if name is None:
        name = m.index[key] = m._add(compute(*args))
    return name


# What ``torch.compiler.assume_constant_result`` sets (anyclip cannot import torch to call it;
# tests/test_compile.py checks that torch still sets this).
remember._dynamo_marked_constant = True  # type: ignore[attr-defined]


def remembered(memo: Memo[T], key: Any, compute: Callable[..., T], *args: Any) -> T:
    """``compute(*args)``, remembered in ``memo`` under ``key`` (computed each time if unhashable).

    ``compute`` must depend on its arguments alone, and ``key`` must say everything about them
    that it uses: under ``torch.compile`` it runs once, outside the trace.
    """
    name = remember(memo.name, key, compute, *args)
    if not name:
        return compute(*args)
    value: T = getattr(memo, name)
    return value


def _remember_by_dtype(memo: str, xp: Any, dtype: Any, compute: Callable[[Any, Any], Any]) -> str:
    """:func:`remember` keyed by the namespace's name, then the dtype (Dynamo runs it).

    One index per namespace: a dict that holds both NumPy and torch dtypes would compare one
    with the other on a hash collision.
    """
    m: Memo[Any] = _MEMOS[memo]
    per_dtype = m.index.get(xp.__name__)
    if per_dtype is None:  # setdefault: two threads here at once keep the same dict
        per_dtype = m.index.setdefault(xp.__name__, {})
    try:
        name: str | None = per_dtype.get(dtype)
    except TypeError:
        return ""
    if name is None:
        name = per_dtype[dtype] = m._add(compute(xp, dtype))
    return name


_remember_by_dtype._dynamo_marked_constant = True  # type: ignore[attr-defined]


def memo_by_dtype(memo: Memo[T], xp: Any, dtype: Any, compute: Callable[[Any, Any], T]) -> T:
    """``compute(xp, dtype)``, remembered in ``memo`` per namespace, then per dtype.

    An unhashable dtype object is computed every time.
    """
    name = _remember_by_dtype(memo.name, xp, dtype, compute)
    if not name:
        return compute(xp, dtype)
    value: T = getattr(memo, name)
    return value


class ConstantMemo(Generic[V]):
    """String answers (or None) by namespace, then dtype, in the dict ``answers``.

    Read and filled by :func:`constant_by_dtype` only; ``name`` as :class:`Memo`'s.
    """

    def __init__(self, name: str) -> None:
        _register(name, self)
        self.name = name
        self.answers: dict[str, dict[Any, V]] = {}

    def __len__(self) -> int:
        return sum(len(d) for d in self.answers.values())


def constant_by_dtype(
    memo: ConstantMemo[T], xp: Any, dtype: Any, compute: Callable[[Any, Any], T]
) -> T:
    """``compute(xp, dtype)``, a string or None, remembered per namespace, then per dtype.

    As :func:`memo_by_dtype` (an unhashable dtype object is computed every time), but the
    answer itself is what Dynamo takes as a constant.
    """
    value: T = _constant_by_dtype(memo.name, xp, dtype, compute)
    return value


def _constant_by_dtype(memo: str, xp: Any, dtype: Any, compute: Callable[[Any, Any], Any]) -> Any:
    answers = _MEMOS[memo].answers
    per_dtype = answers.get(xp.__name__)
    if per_dtype is None:
        per_dtype = answers.setdefault(xp.__name__, {})
    try:
        return per_dtype[dtype]
    except KeyError:
        pass
    except TypeError:
        return compute(xp, dtype)
    value = per_dtype[dtype] = compute(xp, dtype)
    return value


_constant_by_dtype._dynamo_marked_constant = True  # type: ignore[attr-defined]
