"""uint16, uint32 and uint64 on torch devices without their kernels, against TF's values.

torch lacks ``minimum``, ``maximum`` and comparisons for these dtypes on every device, and on
CUDA ``mul`` and ``where`` too (torch 2.11 on an H200: ``"mul_cuda" not implemented for
'UInt16'``, ``"where_cuda" not implemented for 'UInt32'``). anyclip routes them through
signed views (:mod:`anyclip._torch_unsigned`), on the devices that :data:`MISSING` names.
Here the routes are forced on the CPU (every op taken as missing) and must give TF's values
for every unsigned case the GPU run failed: ``clip_by_value`` of the conformance catalogue
and the integer factor casts of ``clip_by_global_norm`` (``tests/data/value_paths.json``).
The default table is checked for CUDA on tensors made under ``FakeTensorMode`` (no GPU).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip_conformance import Backend, assert_array, reference
from anyclip_conformance.suite import run

from .test_value_paths import CASES, _call, gen

torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)

UNSIGNED = ("uint16", "uint32", "uint64")
SHORT = {"u16": "uint16", "u32": "uint32", "u64": "uint64"}

#: The conformance catalogue's clip_by_value cases on the three dtypes.
VALUE_CASES = [
    c for c in reference.case_ids() if re.match(r"clip_by_value/(u16|u32|u64)/", c) is not None
]
INDEX = reference.load_index()
#: value_paths.json's integer factor casts into the three dtypes.
CAST_CASES = [k for k in CASES if k.startswith("cast/") and k.split("/")[1] in UNSIGNED]


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """Every op taken as missing on every device; yields the (op, dtype) routes taken."""
    import anyclip._torch_unsigned as unsigned

    every = frozenset({"compare", "multiply"})
    monkeypatch.setattr(unsigned, "MISSING", {"cpu": every, "*": every})
    taken: list[tuple[str, str]] = []
    decide = unsigned.lacks

    def spy(x: Any, op: str) -> bool:
        out = decide(x, op)
        if out:
            taken.append((op, str(x.dtype).removeprefix("torch.")))
        return out

    monkeypatch.setattr(unsigned, "lacks", spy)
    yield taken


def test_catalogue_has_the_cases():
    assert len(VALUE_CASES) >= 3 * 20
    assert {c.split("/")[1] for c in VALUE_CASES} == set(SHORT)
    assert {k.split("/")[1] for k in CAST_CASES} == set(UNSIGNED)


@torch_backends
@pytest.mark.parametrize("case_id", VALUE_CASES)
def test_clip_by_value_routed_gives_tfs_values(
    case_id: str, backend: Backend, record_property: Any, routes: list[tuple[str, str]]
):
    run(case_id, backend, "eager", record_property)
    if "error" not in INDEX[case_id]:  # TF returned a value: anyclip compared on the route
        assert ("compare", SHORT[case_id.split("/")[1]]) in routes


@torch_backends
@pytest.mark.parametrize("case_id", CAST_CASES)
def test_integer_factor_routed_gives_tfs_values(
    case_id: str, backend: Backend, make: Any, check: Any, routes: list[tuple[str, str]]
):
    case = CASES[case_id]
    out = _call(case, make, unknown=False)
    check(out, gen.decode(case["tf"]), case["x"]["dtype"], what=case_id)
    assert ("multiply", case["x"]["dtype"]) in routes


def _edges(dtype: str) -> np.ndarray:
    """0, 1, both sides of the sign bit, the largest value and two in between."""
    n = np.iinfo(dtype).bits
    values = [0, 1, 2, 2 ** (n - 1) - 1, 2 ** (n - 1), 2 ** (n - 1) + 1, 2**n - 1, 40503, 3]
    return np.asarray(values, dtype=np.uint64).astype(dtype)


@torch_backends
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_routes_are_exact_at_the_edges(backend: Backend, dtype: str, routes: Any):
    """Every pair of edge values: NumPy's unsigned minimum, maximum and wrapping product."""
    from anyclip import _torch_unsigned as unsigned

    e = _edges(dtype)
    a, b = np.meshgrid(e, e)
    x, y = backend.asarray(a, dtype), backend.asarray(b, dtype)
    with np.errstate(over="ignore"):
        want = {"max": np.maximum(a, b), "min": np.minimum(a, b), "mul": a * b}
    got = {
        "max": unsigned.select(x, y, True),
        "min": unsigned.select(x, y, False),
        "mul": unsigned.multiply(x, y),
    }
    for k, v in got.items():
        # assert_array compares integers by their bits, so 2**64 - 1 stays exact
        assert_array(v, want[k], backend=backend, dtype=dtype, what=k)
    assert {op for op, _ in routes} == {"compare", "multiply"}


@torch_backends
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_stale_table_names_dtype_and_device(
    backend: Backend, dtype: str, monkeypatch: pytest.MonkeyPatch
):
    """An op torch turns out to lack on a device the table trusts: dtype and device named."""
    import anyclip._torch_unsigned as unsigned

    if backend.library != "torch" or backend.device.type != "cpu":
        pytest.skip("torch's CPU build is the one known to lack minimum for these dtypes")
    monkeypatch.setattr(unsigned, "MISSING", {"cpu": frozenset(), "*": frozenset()})
    t = backend.asarray(np.arange(4), dtype)
    with pytest.raises(TypeError, match=rf"dtype {dtype} on device cpu.* no minimum kernel"):
        anyclip.clip_by_value(t, 1, 2)


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_cuda_takes_the_routes_by_default(dtype: str):
    """On a CUDA tensor (faked: no GPU needed) the default table routes compare and multiply."""
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    import anyclip._torch_unsigned as unsigned

    tdtype = getattr(torch, dtype)
    with FakeTensorMode():
        cuda = torch.ones(3, dtype=tdtype, device="cuda")
        cpu = torch.ones(3, dtype=tdtype)
        assert unsigned.lacks(cuda, "multiply") and unsigned.lacks(cuda, "compare")
        assert not unsigned.lacks(cpu, "multiply") and unsigned.lacks(cpu, "compare")
        assert not unsigned.lacks(torch.ones(3, dtype=torch.uint8, device="cuda"), "multiply")
        norm = torch.tensor(2.0, device="cuda")
        ([out], _) = anyclip.clip_by_global_norm([cuda], 1.0, use_norm=norm)
        clipped = anyclip.clip_by_value(cuda, 0, 1)
    for r in (out, clipped):
        assert r.dtype == tdtype
        assert r.device.type == "cuda"
        assert tuple(r.shape) == (3,)


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "legacy"])
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_non_neg_of_unsigned_is_the_input(make: Any, check: Any, dtype: str, legacy: bool):
    """An unsigned weight is never negative: ``maximum(w, 0)`` and ``w * (w >= 0)`` are ``w``."""
    w = _edges(dtype)
    out = anyclip.constraints.non_neg(make(w, dtype), legacy=legacy)
    check(out, w, dtype)
