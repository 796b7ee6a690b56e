"""pytest wiring for the conformance suite: import path and the per-backend xfail lists."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # ``from conformance import harness`` (pytest runs importlib mode)
    sys.path.insert(0, str(ROOT))

from conformance import harness  # noqa: E402

_VARIANT = {
    "test_case": "eager",
    "test_case_generic_path": "eager",
    "test_case_jit": "jit",
    "test_grad": "grad",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the cases listed in ``xfails/<backend>.txt`` as strict xfails."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        variant = _VARIANT.get(getattr(item, "originalname", ""))
        if callspec is None or variant is None or "case_id" not in callspec.params:
            continue
        backend = next(
            (callspec.params[k] for k in ("backend", "grad_backend") if k in callspec.params),
            None,
        )
        if backend is None:
            continue
        reason = harness.xfail_reason(callspec.params["case_id"], backend, variant)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True, raises=AssertionError))
