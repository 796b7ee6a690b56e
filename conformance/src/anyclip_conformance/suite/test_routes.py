"""The TF reference data through the other routes to the same formulas.

``anyclip.tree`` (with ``accumulate_dtype=None``, TF's rule), the torch adapter (in place on
``.grad``) and the optax transformations must give TF's numbers wherever the policy is "tf".
Each route runs the catalogue cases it can express: no expected error, no ``name=`` argument,
and the argument kinds the route takes (a list of arrays for the global norm, Python-number
clip values for the adapters). A case listed in ``xfails/<backend>.txt`` is a strict xfail on
every route too: the routes share the formula, so they share its known deviations.
"""

from __future__ import annotations

from typing import Any

import pytest

from anyclip import tree
from anyclip_conformance.backends import BackendId
from anyclip_conformance.reference import load_index
from anyclip_conformance.specs import array_specs
from anyclip_conformance.suite import run

TORCH = [b.value for b in BackendId if b.library == "torch"]
JAX = [b.value for b in BackendId if b.library == "jax"]
FLOATING = ("float16", "bfloat16", "float32", "float64")


def _selected(functions: tuple[str, ...], *, list_input: bool, python_scalars: bool) -> list[str]:
    out = []
    for case_id, entry in load_index().items():
        if entry["function"] not in functions or "error" in entry or "outputs" not in entry:
            continue
        args, kwargs = entry["args"], entry.get("kwargs", {})
        if "name" in kwargs or "use_norm" in kwargs:
            continue
        first = args[0]
        if list_input and first.get("seq") != "list":
            continue
        # a tree reads a Python list as a container, where TF converts a list of numbers
        if list_input and any("array" not in i and i != {"value": None} for i in first["items"]):
            continue
        if not list_input and "array" not in first:
            continue
        if list_input and len(args) > 2:  # a positional use_norm
            continue
        if python_scalars and not all("value" in a for a in args[1:]):
            continue
        # the adapters work on a framework's arrays: with none in the list, their zero is a
        # torch / JAX array (as torch's own clip_grad_norm_ returns), not TF's bare float32
        if python_scalars and list_input and not any("array" in i for i in first["items"]):
            continue
        out.append(case_id)
    return out


SINGLE = ("clip_by_value", "clip_by_norm", "clip_by_average_norm")
GLOBAL = ("global_norm", "clip_by_global_norm")
TREE_SINGLE = _selected(SINGLE, list_input=False, python_scalars=False)
TREE_GLOBAL = _selected(GLOBAL, list_input=True, python_scalars=False)
ADAPTER_SINGLE = _selected(("clip_by_value", "clip_by_norm"), list_input=False, python_scalars=True)
#: The torch and optax drop-ins leave the gradients unchanged for an infinite ``max_norm``, as
#: torch's and optax's own do, where TF's factor is ``inf * 0 = NaN`` (docs/porting.md); their
#: tests compare that case with torch and optax (``tests/test_adapter_fidelity.py``).
ADAPTER_GLOBAL = [
    case_id
    for case_id in _selected(("clip_by_global_norm",), list_input=True, python_scalars=True)
    if load_index()[case_id]["args"][1] != {"value": {"float": "inf"}}
]


def _tree_route(function: str) -> Any:
    if function in GLOBAL:
        return lambda *a, **k: getattr(tree, function)(*a, accumulate_dtype=None, **k)
    return getattr(tree, function)


@pytest.mark.conformance("tree", xfails="eager")
@pytest.mark.parametrize("case_id", TREE_SINGLE + TREE_GLOBAL)
def test_tree(case_id: str, backend: Any, record_property: Any) -> None:
    fn = _tree_route(load_index()[case_id]["function"])
    run(case_id, backend, "eager", record_property, fn=fn)


def _torch_grads(values: list[Any]) -> list[Any]:
    import torch

    params = []
    for v in values:
        if v is None:
            params.append(torch.nn.Parameter(torch.zeros(())))
            continue
        p = torch.nn.Parameter(v.detach().clone())
        p.grad = v.detach().clone()
        params.append(p)
    return params


def _torch_global(t_list: list[Any], clip_norm: Any) -> Any:
    import anyclip.torch

    params = _torch_grads(t_list)
    norm = anyclip.torch.clip_grad_norm_(params, clip_norm, accumulate_dtype=None)
    return [p.grad for p in params], norm


def _torch_single(function: str) -> Any:
    import anyclip.torch

    def run(t: Any, *args: Any, **kwargs: Any) -> Any:
        (p,) = _torch_grads([t])
        if function == "clip_by_value":
            anyclip.torch.clip_grad_by_value_([p], *args, **kwargs)  # TF's two bounds
        else:
            anyclip.torch.clip_grad_by_norm_([p], *args, **kwargs)
        return p.grad

    return run


@pytest.mark.conformance("torch adapter", xfails="eager")
@pytest.mark.parametrize("backend", TORCH, indirect=True)
@pytest.mark.parametrize("case_id", ADAPTER_SINGLE + ADAPTER_GLOBAL)
def test_torch_adapter(case_id: str, backend: Any, record_property: Any) -> None:
    entry = load_index()[case_id]
    if any(d not in FLOATING for d in _dtypes(entry)):
        pytest.skip("gradients are floating point")
    fn = _torch_global if entry["function"] in GLOBAL else _torch_single(entry["function"])
    run(case_id, backend, "eager", record_property, fn=fn)


def _optax_route(function: str) -> Any:
    import jax

    import anyclip.optax

    def run(updates: Any, *args: Any, **kwargs: Any) -> Any:
        if function == "clip_by_global_norm":
            tx = anyclip.optax.clip_by_global_norm(
                *args, accumulate_dtype=None, norm_in_state=True, **kwargs
            )
        else:
            tx = getattr(anyclip.optax, function)(*args, **kwargs)
        state = tx.init(updates)
        out, state = tx.update(updates, state)
        if function != "clip_by_global_norm":
            return out
        # The state keeps the norm in at least float32 (a float16 state turned a float32
        # norm of 1e6 into inf): a half-precision norm is held exactly, so it is compared
        # in its own dtype.
        norm = state[0]
        dtypes = {leaf.dtype for leaf in jax.tree_util.tree_leaves(updates)}
        return list(out), norm.astype(dtypes.pop()) if len(dtypes) == 1 else norm

    return run


@pytest.mark.conformance("optax adapter", xfails="eager")
@pytest.mark.parametrize("backend", JAX, indirect=True)
@pytest.mark.parametrize("case_id", ADAPTER_SINGLE + ADAPTER_GLOBAL)
def test_optax_adapter(case_id: str, backend: Any, record_property: Any) -> None:
    fn = _optax_route(load_index()[case_id]["function"])
    run(case_id, backend, "eager", record_property, fn=fn)


def _dtypes(entry: dict[str, Any]) -> list[str]:
    """The dtypes of the arrays in the first argument (the tensor or the list of tensors)."""
    return [s["dtype"] for p, s in array_specs(entry).items() if p.split(".")[0] == "0"]


def test_routes_cover_the_catalogue() -> None:
    """Each route runs a meaningful share of the catalogue, not a handful of cases."""
    assert len(TREE_SINGLE) >= 500
    assert len(TREE_GLOBAL) >= 100
    assert len(ADAPTER_SINGLE) >= 300
    assert len(ADAPTER_GLOBAL) >= 50
