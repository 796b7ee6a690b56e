"""The conformance suite's test modules (run by ``python -m anyclip_conformance`` or pytest)."""

from __future__ import annotations

from typing import Any

import pytest

from anyclip_conformance import harness

__all__ = ["run"]


def run(case_id: str, backend: Any, variant: str, record_property: Any, **kwargs: Any) -> None:
    """Run one case (skip where it cannot run) and record its largest ulp error."""
    why = harness.applicable(case_id, backend, variant)
    if why is not None:
        pytest.skip(why)
    record_property("max_ulp", harness.check_case(case_id, backend, variant, **kwargs))
