"""The TF reference data through the other routes to the same formulas.

``anyclip.tree`` (with ``accumulate_dtype=None``, TF's rule), the torch adapter (in place on
``.grad``) and the optax transformations must give TF's numbers wherever the policy is "tf".
Each route runs the catalogue cases it can express: no expected error, no ``name=`` argument,
and the argument kinds the route takes (a list of arrays for the global norm, Python-number
clip values for the adapters).
"""

from __future__ import annotations

from typing import Any

import pytest

from anyclip import tree
from anyclip._testing import BACKEND_IDS
from conformance import harness

TORCH = [b for b in BACKEND_IDS if b.startswith("torch")]
JAX = [b for b in BACKEND_IDS if b.startswith("jax")]
FLOATING = ("float16", "bfloat16", "float32", "float64")


def _selected(functions: tuple[str, ...], *, list_input: bool, python_scalars: bool) -> list[str]:
    out = []
    for case_id, entry in harness.load_index().items():
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
ADAPTER_GLOBAL = _selected(("clip_by_global_norm",), list_input=True, python_scalars=True)


def _tree_route(function: str) -> Any:
    if function in GLOBAL:
        return lambda *a, **k: getattr(tree, function)(*a, accumulate_dtype=None, **k)
    return getattr(tree, function)


def _run(case_id: str, backend: Any, fn: Any) -> None:
    why = harness.applicable(case_id, backend, "eager")
    if why is not None:
        pytest.skip(why)
    reason = harness.xfail_reason(case_id, backend.name, "eager")
    if reason is not None:  # a declared deviation of the backend: not this test's subject
        pytest.skip(f"declared deviation: {reason}")
    harness.check_case(case_id, backend, "eager", fn=fn)


@pytest.mark.parametrize("case_id", TREE_SINGLE + TREE_GLOBAL)
def test_tree(case_id: str, backend: Any) -> None:
    _run(case_id, backend, _tree_route(harness.load_index()[case_id]["function"]))


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
            anyclip.torch.clip_grad_value_([p], *args, **kwargs)
        else:
            anyclip.torch.clip_grad_by_norm_([p], *args, **kwargs)
        return p.grad

    return run


@pytest.mark.parametrize("backend", TORCH, indirect=True)
@pytest.mark.parametrize("case_id", ADAPTER_SINGLE + ADAPTER_GLOBAL)
def test_torch_adapter(case_id: str, backend: Any) -> None:
    entry = harness.load_index()[case_id]
    if any(d not in FLOATING for d in _dtypes(entry)):
        pytest.skip("gradients are floating point")
    fn = _torch_global if entry["function"] in GLOBAL else _torch_single(entry["function"])
    _run(case_id, backend, fn)


def _optax_route(function: str) -> Any:
    import jax

    import anyclip.optax

    def run(updates: Any, *args: Any, **kwargs: Any) -> Any:
        if function == "clip_by_global_norm":
            tx = anyclip.optax.clip_by_global_norm(*args, accumulate_dtype=None, **kwargs)
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


@pytest.mark.parametrize("backend", JAX, indirect=True)
@pytest.mark.parametrize("case_id", ADAPTER_SINGLE + ADAPTER_GLOBAL)
def test_optax_adapter(case_id: str, backend: Any) -> None:
    _run(case_id, backend, _optax_route(harness.load_index()[case_id]["function"]))


def _dtypes(entry: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(spec: Any) -> None:
        if isinstance(spec, dict):
            if "array" in spec:
                found.append(spec["dtype"])
            for v in spec.values():
                walk(v)
        elif isinstance(spec, list):
            for v in spec:
                walk(v)

    walk(entry["args"][0])
    return found


def test_routes_cover_the_catalogue() -> None:
    """Each route runs a meaningful share of the catalogue, not a handful of cases."""
    assert len(TREE_SINGLE) >= 500
    assert len(TREE_GLOBAL) >= 100
    assert len(ADAPTER_SINGLE) >= 300
    assert len(ADAPTER_GLOBAL) >= 50
