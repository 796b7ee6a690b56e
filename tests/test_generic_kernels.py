"""The TF reference data through the generic kernels, on the backends that have faster ones.

The public functions choose their kernels per call (``anyclip._kernels.kernels_for``) and take
the plain-call fast paths where they apply; ``conformance/`` checks them. Here the same
catalogue runs through ``bind(GENERIC)``: the array-API implementation of every step, with no
fast path, on NumPy, torch and JAX, so that both ways to every result are held to TF's data
(values and, on the autodiff backends, gradients). Known deviations are the conformance
suite's own ``xfails/<backend>.txt`` entries, as strict xfails.
"""

from __future__ import annotations

from typing import Any

import pytest

from anyclip._api import bind
from anyclip._kernels import GENERIC
from anyclip_conformance import BACKEND_IDS, Backend, BackendId, reference
from anyclip_conformance.suite import run

GENERIC_API = bind(GENERIC)

#: The functions with a kernel step or a plain-call fast path, per library that has them.
_EAGER_FAST = (
    "clip_by_value",
    "clip_by_norm",
    "norm",
    "normalize",
    "global_norm",
    "clip_by_global_norm",
)
_FAST = {
    "numpy": _EAGER_FAST,
    "torch": _EAGER_FAST,
    "jax": ("global_norm", "clip_by_global_norm"),
}


def _params(variant: str) -> list[Any]:
    ids = reference.case_ids(kind="grad" if variant == "grad" else "all")
    return [
        pytest.param(case_id, name, id=f"{case_id}-{name}")
        for name in BACKEND_IDS
        if variant != "grad" or BackendId(name).has_autodiff
        for case_id in ids
        if case_id.split("/", 1)[0] in _FAST.get(name.split("-", 1)[0], ())
    ]


# ``conformance(variant)``: the suite's plugin turns the case's xfails/<backend>.txt line into a
# strict xfail, exactly as for the public functions.
@pytest.mark.conformance("eager")
@pytest.mark.parametrize(("case_id", "backend"), _params("eager"), indirect=["backend"])
def test_case_generic_kernels(case_id: str, backend: Backend, record_property: Any) -> None:
    run(case_id, backend, "eager", record_property, impl=GENERIC_API)


@pytest.mark.conformance("grad")
@pytest.mark.parametrize(("case_id", "grad_backend"), _params("grad"), indirect=["grad_backend"])
def test_grad_generic_kernels(case_id: str, grad_backend: Backend, record_property: Any) -> None:
    run(case_id, grad_backend, "grad", record_property, impl=GENERIC_API)


def test_bound_functions_are_the_public_ones() -> None:
    """``bind`` exposes exactly the eight TF-named functions, with the public signatures."""
    import inspect

    import anyclip

    # the eight (embedding_lookup has no bound twin: it calls clip_by_norm's core; the
    # flush_subnormals context manager is no function)
    names = sorted(
        n
        for n in anyclip.__all__
        if inspect.isfunction(getattr(anyclip, n)) and n != "embedding_lookup"
    )
    for name in names:
        public = inspect.signature(getattr(anyclip, name))
        bound = inspect.signature(getattr(GENERIC_API, name))
        assert [p.name for p in bound.parameters.values()] == list(public.parameters), name
        defaults = [p.default for p in bound.parameters.values()]
        assert defaults == [p.default for p in public.parameters.values()], name
