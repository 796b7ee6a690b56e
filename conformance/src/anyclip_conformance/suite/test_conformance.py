"""anyclip vs the TensorFlow 2.21 reference data, one item per case, backend and variant.

The rules (dtype, shape, NaN/inf positions, ulp budgets, error classes) live in ``harness.py``;
known deviations in ``xfails/<backend>.txt`` are strict xfails (the plugin applies them to every
test marked ``conformance``).
"""

from __future__ import annotations

from typing import Any

import pytest

import anyclip
from anyclip_conformance import reference
from anyclip_conformance.backends import BACKEND_IDS, BackendId
from anyclip_conformance.suite import run

ALL = reference.case_ids()
GRAD = reference.case_ids(kind="grad")
JIT = reference.case_ids(kind="jit")
JAX_BACKENDS = [b.value for b in BackendId if b.library == "jax"]


@pytest.mark.conformance("eager")
@pytest.mark.parametrize("case_id", ALL)
def test_case(case_id: str, backend: Any, record_property: Any) -> None:
    run(case_id, backend, "eager", record_property)


@pytest.mark.conformance("jit")
@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
@pytest.mark.parametrize("case_id", JIT)
def test_case_jit(case_id: str, backend: Any, record_property: Any) -> None:
    run(case_id, backend, "jit", record_property)


@pytest.mark.conformance("grad")
@pytest.mark.parametrize("case_id", GRAD)
def test_grad(case_id: str, grad_backend: Any, record_property: Any) -> None:
    run(case_id, grad_backend, "grad", record_property)


def test_catalogue_size() -> None:
    """The data holds what the catalogue promises (output, gradient and error cases)."""
    index = reference.load_index()
    outputs = sum("outputs" in e for e in index.values())
    grads = sum("grads" in e for e in index.values())
    errors = sum("error" in e for e in index.values())
    assert outputs >= 1500
    assert grads >= 300
    assert errors >= 100
    # every public TF-named clip/norm function (submodules, embedding_lookup, tested in
    # tests/test_embedding.py, and the flush_subnormals switch aside) has reference data
    assert set(reference.functions()) == set(anyclip.__all__) - {
        "tree",
        "constraints",
        "embedding_lookup",
        "flush_subnormals",
    }


def test_xfail_lists_are_valid() -> None:
    """Every xfail entry names a known case (load_xfails raises otherwise) and has a reason."""
    for name in BACKEND_IDS:
        for (case_id, _variant), reason in reference.load_xfails(name).items():
            assert reason != "(no reason given)", f"{name}: {case_id} has no reason"
