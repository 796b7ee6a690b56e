"""One MLIR context per thread for JAX's lowerings, instead of a new one per program.

JAX lowers every program it compiles (each jitted function, and each eager operation, per shape
and dtype) into a module of a *new* MLIR context, loading its dialects each time. On the
project's 2-core machine that was half the time of the JAX conformance checks: 11,605 checks ran
in 304 s with a context per program and in 147 s with one shared context (the persistent
compilation cache warm in both; JAX finds a program in that cache only after lowering it).

:func:`share` replaces JAX's context factory (``jax._src.interpreters.mlir.make_ir_context``)
by one that hands out the same context again on the same thread. A context holds the types and
attributes its modules used (constants among them), so the shared one is replaced by a fresh one
every :data:`LOWERINGS_PER_CONTEXT` lowerings and whenever the compiled programs are dropped
(:func:`~anyclip_conformance.harness.release_compiled` calls :func:`renew`). The programs are
the same: ``tests/test_conformance_suite.py`` lowers programs both ways and compares their text.

A verification tool's speed-up only, used by the suite (``conftest.py``) and
``python -m anyclip_conformance``; ``ANYCLIP_CONFORMANCE_MLIR_CONTEXT=fresh`` leaves JAX as it
is. Where JAX has no such factory (a JAX that lowers otherwise), nothing is changed.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["LOWERINGS_PER_CONTEXT", "renew", "share", "shared"]

#: After this many lowerings on a thread, its shared context is replaced by a fresh one.
LOWERINGS_PER_CONTEXT = 2000

_ORIGINAL: list[Callable[[], Any]] = []
_LOCAL = threading.local()


def _factory(original: Callable[[], Any]) -> Callable[[], Any]:
    def make_ir_context() -> Any:
        count = getattr(_LOCAL, "count", 0)
        context = getattr(_LOCAL, "context", None)
        if context is None or count >= LOWERINGS_PER_CONTEXT:
            context, count = original(), 0
            _LOCAL.context = context
        _LOCAL.count = count + 1
        return context

    make_ir_context.__doc__ = original.__doc__
    return make_ir_context


def share() -> bool:
    """Make JAX lower into one context per thread (JAX must be imported); whether it does.

    False when ``ANYCLIP_CONFORMANCE_MLIR_CONTEXT=fresh`` is set or this JAX has no
    ``make_ir_context`` to replace. Calling it again changes nothing.
    """
    if os.environ.get("ANYCLIP_CONFORMANCE_MLIR_CONTEXT") == "fresh":
        return False
    if _ORIGINAL:
        return True
    mlir = _mlir()
    original = getattr(mlir, "make_ir_context", None)
    if not callable(original):
        return False
    _ORIGINAL.append(original)
    mlir.make_ir_context = _factory(original)
    return True


def shared() -> bool:
    """Whether :func:`share` has replaced JAX's context factory."""
    return bool(_ORIGINAL)


def renew() -> None:
    """Let the next lowering on this thread start a fresh context (the old one is freed with
    the last module that uses it)."""
    _LOCAL.context = None
    _LOCAL.count = 0


def _mlir() -> Any:
    """``jax._src.interpreters.mlir`` when JAX is imported, else None."""
    if "jax" not in sys.modules:
        return None
    try:
        from jax._src.interpreters import mlir
    except ImportError:
        return None
    return mlir
