"""anyclip's torch namespace (``anyclip._torch_namespace``) against array-api-compat's.

Its ``where``, ``maximum``, ``minimum``, ``logical_and`` and ``logical_or`` call torch directly
for two tensors of one dtype; every result must be array-api-compat's (dtype, shape, device,
values, NaN and signed zeros included) for every mix of operands: tensors of one dtype or two,
0-d or not, Python scalars. Its ``cumulative_sum`` calls ``torch.cumsum`` (array-api-compat's
looks up the namespace first, which ``torch.compile`` cannot trace): the same results, traced.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
compat = pytest.importorskip("array_api_compat.torch")

from anyclip import _compat  # noqa: E402
from anyclip._torch_namespace import MODULE_ATTRIBUTES, NAME, NAMESPACE  # noqa: E402

FAST = ["where", "maximum", "minimum", "logical_and", "logical_or"]


def _operands() -> list[tuple[str, Any]]:
    values = [[-0.0, 0.0, 1.5, np.nan], [2.0, -0.0, np.nan, -3.0]]
    out: list[tuple[str, Any]] = []
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.bool):
        for shape in ("0d", "1d"):
            data = values[0] if shape == "1d" else values[1][2]
            t = torch.tensor(data, dtype=torch.float64).to(dtype)
            out.append((f"{dtype}-{shape}", t))
    out += [("py-float", 0.5), ("py-int", 2), ("py-bool", True)]
    return out


def _same(ours: Any, theirs: Any, label: str) -> None:
    assert type(ours) is type(theirs), label
    assert ours.dtype == theirs.dtype, label
    assert ours.shape == theirs.shape, label
    assert ours.device == theirs.device, label
    a = ours.to(torch.float64).numpy() if ours.dtype != torch.bool else ours.numpy()
    b = theirs.to(torch.float64).numpy() if theirs.dtype != torch.bool else theirs.numpy()
    np.testing.assert_array_equal(a, b, err_msg=label)
    if a.dtype.kind == "f":  # signed zeros: the same sign bits
        np.testing.assert_array_equal(np.signbit(a), np.signbit(b), err_msg=label)


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - the same refusal is part of the contract
        return type(e)


@pytest.mark.parametrize("name", FAST)
def test_fast_functions_give_array_api_compats_results(name):
    ours, theirs = getattr(NAMESPACE, name), getattr(compat, name)
    assert ours is not theirs  # the fast version is in place
    operands = _operands()
    condition = torch.tensor([True, False, True, False])
    checked = 0
    for (la, a), (lb, b) in itertools.product(operands, operands):
        args = (condition, a, b) if name == "where" else (a, b)
        mine, ref = _outcome(ours, *args), _outcome(theirs, *args)
        label = f"{name}({la}, {lb})"
        if isinstance(ref, type):
            assert mine is ref, label
            continue
        _same(mine, ref, label)
        checked += 1
    assert checked > len(operands) ** 2 // 2  # most mixes are valid calls


def test_everything_else_is_array_api_compats():
    own = [*FAST, "cumulative_sum"]
    names = [k for k in vars(compat) if k not in MODULE_ATTRIBUTES and k not in own]
    assert len(names) > 100
    for k in names:
        assert getattr(NAMESPACE, k, None) is getattr(compat, k), k
    info = NAMESPACE.__array_namespace_info__()
    assert info.default_dtypes() == compat.__array_namespace_info__().default_dtypes()


def test_torch_tensors_resolve_to_it():
    t = torch.zeros(2)
    assert _compat.namespace(t) is NAMESPACE
    assert _compat.namespace(torch.nn.Parameter(t)) is NAMESPACE
    assert NAMESPACE.__name__ == NAME
    assert _compat.library(NAMESPACE) == "torch"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int32])
def test_cumulative_sum_gives_array_api_compats_results(dtype):
    x = torch.tensor([[1.5, -0.0, np.nan], [2.0, 3.0, -4.0]], dtype=torch.float64).to(dtype)
    cases: list[tuple[Any, dict[str, Any]]] = [
        (x, {"axis": -1}),
        (x, {"axis": 0}),
        (x, {"axis": 1, "include_initial": True}),
        (x[0], {}),
        (x, {}),  # two dimensions, no axis: array-api-compat's error
    ]
    if dtype != torch.int32:
        cases.append((x, {"axis": 1, "dtype": torch.float64}))
    for a, kwargs in cases:
        mine = _outcome(lambda a=a, kw=kwargs: NAMESPACE.cumulative_sum(a, **kw))
        ref = _outcome(lambda a=a, kw=kwargs: compat.cumulative_sum(a, **kw))
        if isinstance(ref, type):
            assert mine is ref, kwargs
            continue
        _same(mine, ref, f"{dtype} {kwargs}")


def test_cumulative_sum_traces_under_compile():
    torch._dynamo.reset()
    fn = torch.compile(lambda t: NAMESPACE.cumulative_sum(t, axis=-1)[..., -1], fullgraph=True)
    x = torch.tensor([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]], dtype=torch.float64)
    np.testing.assert_array_equal(fn(x).numpy(), torch.cumsum(x, dim=-1)[..., -1].numpy())
