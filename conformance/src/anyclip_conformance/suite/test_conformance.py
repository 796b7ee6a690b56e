"""anyclip vs the TensorFlow 2.21 reference data, one item per case, backend and variant.

The rules (dtype, shape, NaN/inf positions, ulp budgets, error classes) live in ``harness.py``;
known deviations in ``xfails/<backend>.txt`` are strict xfails.
"""

from __future__ import annotations

import pytest

import anyclip
from anyclip import _fast
from anyclip._testing import BACKEND_IDS
from conformance import harness

ALL = harness.case_ids()
GRAD = harness.case_ids(kind="grad")
JIT = harness.case_ids(kind="jit")
JAX_BACKENDS = [name for name in BACKEND_IDS if name.startswith("jax")]


def _run(case_id: str, backend, variant: str) -> None:
    why = harness.applicable(case_id, backend, variant)
    if why is not None:
        pytest.skip(why)
    harness.check_case(case_id, backend, variant)


@pytest.mark.parametrize("case_id", ALL)
def test_case(case_id: str, backend) -> None:
    _run(case_id, backend, "eager")


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
@pytest.mark.parametrize("case_id", JIT)
def test_case_jit(case_id: str, backend) -> None:
    _run(case_id, backend, "jit")


@pytest.mark.parametrize("case_id", GRAD)
def test_grad(case_id: str, grad_backend) -> None:
    _run(case_id, grad_backend, "grad")


#: The functions with backend fast paths (anyclip._fast), per backend that has them.
_FAST_PATHS = {
    "numpy": ("clip_by_value", "clip_by_norm", "norm", "global_norm", "clip_by_global_norm"),
    "torch": ("clip_by_value", "clip_by_norm", "norm", "global_norm", "clip_by_global_norm"),
    "jax": ("global_norm", "clip_by_global_norm"),
}
_FAST_PATHS["torch-cuda"] = _FAST_PATHS["torch"]
_FAST_PATHS["jax-gpu"] = _FAST_PATHS["jax"]


def _fast_path_params(kind: str | None) -> list[tuple[str, str]]:
    ids = GRAD if kind == "grad" else ALL
    return [
        (case_id, name)
        for name in BACKEND_IDS
        if name in _FAST_PATHS
        for case_id in ids
        if case_id.split("/", 1)[0] in _FAST_PATHS[name]
    ]


@pytest.mark.parametrize(("case_id", "backend"), _fast_path_params(None), indirect=["backend"])
def test_case_generic_path(case_id: str, backend) -> None:
    """The generic array-API code passes the same data as the fast paths used by default."""
    with _fast.disabled():
        _run(case_id, backend, "eager")


@pytest.mark.parametrize(
    ("case_id", "grad_backend"),
    [(c, b) for c, b in _fast_path_params("grad") if b != "numpy"],
    indirect=["grad_backend"],
)
def test_grad_generic_path(case_id: str, grad_backend) -> None:
    """TF's gradients through the generic code too (the fast paths are used by default)."""
    with _fast.disabled():
        _run(case_id, grad_backend, "grad")


def test_catalogue_size() -> None:
    """The data holds what the catalogue promises (output, gradient and error cases)."""
    index = harness.load_index()
    outputs = sum("outputs" in e for e in index.values())
    grads = sum("grads" in e for e in index.values())
    errors = sum("error" in e for e in index.values())
    assert outputs >= 1500
    assert grads >= 300
    assert errors >= 100
    # every public TF-named function (the submodule ``tree`` aside) has reference data
    assert set(harness.functions()) == set(anyclip.__all__) - {"tree"}


def test_xfail_lists_are_valid() -> None:
    """Every xfail entry names a known case (load_xfails raises otherwise) and has a reason."""
    for name in BACKEND_IDS:
        for (case_id, _variant), reason in harness.load_xfails(name).items():
            assert reason != "(no reason given)", f"{name}: {case_id} has no reason"
