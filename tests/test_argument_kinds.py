"""Argument kinds issue 22 found leaking backend errors or refused where TF accepts them.

Items 7, 8 and 10. The reference is TF 2.21 itself: ``tests/data/make_tf_argument_kinds.py``
runs each call in TF (an ``IndexedSlices`` where anyclip gets a torch sparse COO tensor or a
JAX ``BCOO`` array, a ``RaggedTensor`` where it gets a torch nested tensor of layout
``torch.jagged``, bool lists, complex ``ord``) and ``tests/data/tf_argument_kinds.json`` holds
what TF returned or raised (``--live-tf`` reruns the script and checks the file). On every
backend anyclip must return TF's values (dtype, shape, values within the function's ulp
budget), or raise its own class with TF's key phrase where it quotes TF; for a nested tensor,
whose TF counterpart fails in its own way, anyclip's ``TypeError`` naming the argument.

Then what has no TF counterpart: torch ``meta`` tensors (item 8), and torch nested tensors of
the strided layout.
"""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip_conformance import Backend, assert_array

from .conftest import (
    ULP_CLIP_NORM,
    ULP_GLOBAL,
    ULP_L2,
    ULP_PNORM,
    ULP_VALUE,
    anyclip_class,
    assert_same_tf_cases,
    compare_tf_result,
    live_tf_json,
)

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_tf_argument_kinds.py"
COMMITTED = json.loads((DATA / "tf_argument_kinds.json").read_text())
ERRORS = runpy.run_path(str(DATA / "make_tf_error_messages.py"))

#: The script's functions (``tests/data`` is not a package), as attributes.
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))

ULP = {
    "clip_by_value": ULP_VALUE,
    "clip_by_norm": ULP_CLIP_NORM,
    "clip_by_average_norm": ULP_CLIP_NORM,
    "global_norm": ULP_GLOBAL,
    "clip_by_global_norm": ULP_GLOBAL,
    "norm": ULP_PNORM,
    "normalize": ULP_PNORM,
    "l2_normalize": ULP_L2,
}

torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)


def builders(backend: Backend) -> dict[str, Any]:
    """How the script's argument kinds are made on ``backend`` (skipping those it lacks)."""

    def array(data: Any, dtype: str) -> Any:
        backend.dtype(dtype)  # skips when absent
        return backend.asarray(data, dtype)

    def slices(spec: dict[str, Any], dtype: str) -> Any:
        values = array(spec["values"], dtype)
        indices = np.asarray(spec["indices"], dtype=np.int64)
        if backend.library == "torch":
            torch = backend.module
            idx = torch.tensor(indices[None], device=backend.device)
            return torch.sparse_coo_tensor(idx, values, tuple(spec["dense_shape"]))
        if backend.library == "jax":
            from jax.experimental import sparse

            idx = backend.module.numpy.asarray(indices[:, None])
            return sparse.BCOO((values, idx), shape=tuple(spec["dense_shape"]))
        pytest.skip(f"{backend.name} has no sparse arrays (TF's IndexedSlices)")

    def ragged(rows: list[Any], dtype: str) -> Any:
        if backend.library != "torch":
            pytest.skip(f"{backend.name} has no ragged arrays (TF's RaggedTensor)")
        torch = backend.module
        parts = [array(r, dtype) for r in rows]
        return torch.nested.nested_tensor(parts, layout=torch.jagged, device=backend.device)

    return {
        "array": array,
        "slices": slices,
        "ragged": ragged,
        "npcomplex": lambda value, dtype: np.dtype(dtype).type(value),
    }


def _ragged_case(record: dict[str, Any]) -> bool:
    return "ragged" in json.dumps([record["args"], record["kwargs"]])


def test_committed_file_is_the_catalogue():
    assert list(COMMITTED["cases"]) == gen.case_ids()
    for case_id, function, args, kwargs in gen.CASES:
        record = COMMITTED["cases"][case_id]
        assert record["function"] == function
        assert record["args"] == json.loads(json.dumps(args)), case_id
        assert record["kwargs"] == json.loads(json.dumps(kwargs)), case_id
    assert COMMITTED["provenance"]["tensorflow"].startswith("2.21.")


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
@pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled")
@pytest.mark.parametrize("case_id", gen.case_ids())
def test_as_tf(backend, case_id):
    record = COMMITTED["cases"][case_id]
    build = builders(backend)
    fn = getattr(anyclip, record["function"])
    args = [gen.decode(a, build) for a in record["args"]]
    kwargs = {k: gen.decode(v, build) for k, v in record["kwargs"].items()}
    if record["tf_class"] is None:
        out = fn(*args, **kwargs)
        compare_tf_result(backend, out, record["tf_result"], ULP[record["function"]], case_id)
        return
    with pytest.raises((TypeError, ValueError)) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert re.search(r"`\w+(\[\d+\])?`", message), f"no argument named: {message}"
    if _ragged_case(record):  # TF's RaggedTensor fails in its own way; anyclip says why
        assert type(info.value) is TypeError, message
        assert "nested tensor" in message, message
        return
    key = ERRORS["key_phrase"](record["tf_message"])
    expected = anyclip_class(record["tf_class"], key)
    assert type(info.value) is expected, f"{type(info.value).__name__}: {message}"
    assert key in message, f"TF's words {key!r} missing from: {message}"


@pytest.mark.live_tf
def test_committed_file_is_what_tf_gives(tmp_path):
    live = live_tf_json(SCRIPT, tmp_path)
    assert live["provenance"]["tensorflow"] == COMMITTED["provenance"]["tensorflow"]
    assert_same_tf_cases(live["cases"], COMMITTED["cases"], ERRORS["key_phrase"])


# ------------------------------------------------------------------ meta tensors (item 8)
def _meta_calls(torch: Any, t: Any, operand: Any) -> dict[str, Any]:
    return {
        "clip_norm": lambda: anyclip.clip_by_norm(t, operand),
        "clip_value_min": lambda: anyclip.clip_by_value(t, operand, 5.0),
        "clip_value_max": lambda: anyclip.clip_by_value(t, 0.0, operand),
        "epsilon": lambda: anyclip.l2_normalize(t, epsilon=operand),
        "use_norm": lambda: anyclip.clip_by_global_norm([t], 1.0, use_norm=operand),
    }


@torch_backends
@pytest.mark.parametrize("name", ["clip_norm", "clip_value_min", "clip_value_max", "epsilon"])
def test_meta_operand_beside_data_is_refused(backend, make, name):
    torch = backend.module
    t = make([[3.0, 4.0], [1.0, 2.0]])
    meta = torch.tensor(2.0, device="meta")
    with pytest.raises(RuntimeError):  # torch's own error, which anyclip used to let through
        torch.maximum(t, meta)
    with pytest.raises(TypeError, match=rf"`{name}` is a tensor on the meta device"):
        _meta_calls(torch, t, meta)[name]()


@torch_backends
def test_meta_use_norm_beside_data_is_refused(backend, make):
    torch = backend.module
    meta = torch.tensor(2.0, device="meta")
    with pytest.raises(TypeError, match=r"`use_norm` is a tensor on the meta device.*t_list\[0\]"):
        anyclip.clip_by_global_norm([make([3.0, 4.0])], 1.0, use_norm=meta, nonfinite="torch")


@torch_backends
@pytest.mark.parametrize("name", ["clip_norm", "clip_value_min", "clip_value_max", "epsilon"])
def test_meta_everything_gives_meta_results(backend, name):
    # a shape-only run, as torch's own functions give one: shape and dtype of a real call
    torch = backend.module
    real = torch.ones((2, 3), device=backend.device)
    expected = _meta_calls(torch, real, torch.tensor(2.0, device=backend.device))[name]()
    t = torch.ones((2, 3), device="meta")
    out = _meta_calls(torch, t, torch.tensor(2.0, device="meta"))[name]()
    assert out.is_meta
    assert (out.shape, out.dtype) == (expected.shape, expected.dtype)


# -------------------------------------------------------- strided nested tensors (item 8)
def _nested_calls(nt: Any, t: Any) -> dict[str, Any]:
    return {
        "t": lambda: anyclip.clip_by_norm(nt, 1.0),
        "t_list[0]": lambda: anyclip.global_norm([nt]),
        "tensor": lambda: anyclip.norm(nt),
        "x": lambda: anyclip.l2_normalize(nt),
        "clip_norm": lambda: anyclip.clip_by_norm(t, nt),
        "clip_value_min": lambda: anyclip.clip_by_value(t, nt, 2.0),
        "clip_value_max": lambda: anyclip.clip_by_value(t, 0.0, nt),
        "epsilon": lambda: anyclip.l2_normalize(t, epsilon=nt),
    }


@torch_backends
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
@pytest.mark.parametrize("name", list(_nested_calls(None, None)))
@pytest.mark.parametrize("layout", ["strided", "jagged"])
def test_nested_tensor_is_refused_with_anyclips_message(backend, make, name, layout):
    torch = backend.module
    nt = torch.nested.nested_tensor(
        [make([1.0, 2.0]), make([3.0, 4.0, 5.0])], layout=getattr(torch, layout)
    )
    with pytest.raises(TypeError, match=rf"`{re.escape(name)}` must be a dense or sparse tensor"):
        _nested_calls(nt, make([[3.0, 4.0], [1.0, 2.0]]))[name]()


@torch_backends
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
@pytest.mark.parametrize("beside", [False, True], ids=["alone", "beside-dense"])
def test_torch_total_norm_refuses_a_strided_nested_tensor(backend, make, beside):
    """The drop-in's fast path for plain dense tensors steps aside for a nested one.

    A nested tensor of layout ``strided`` is a plain ``torch.Tensor`` with a strided layout:
    it is refused as :func:`anyclip.global_norm` refuses it (a ``jagged`` one counts through
    its values, as a sparse tensor does).
    """
    torch = backend.module
    import anyclip.torch

    nt = torch.nested.nested_tensor([make([1.0, 2.0]), make([3.0, 4.0, 5.0])])
    tensors = [nt, make([1.0])] if beside else [nt]
    with pytest.raises(TypeError, match=r"`t_list\[0\]` must be a dense or sparse tensor"):
        anyclip.torch.get_total_norm(tensors)


@torch_backends
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
def test_jagged_clip_by_value_needs_0d_bounds(backend, make):
    torch = backend.module
    nt = torch.nested.nested_tensor([make([1.0, 2.0]), make([3.0])], layout=torch.jagged)
    with pytest.raises(ValueError, match=r"bounds of a nested `t`.*numbers or 0-d arrays"):
        anyclip.clip_by_value(nt, make([0.0, 0.0]), 2.0)


@torch_backends
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
def test_jagged_clip_by_value_gradient_reaches_the_components(backend, make):
    # TF's gradient of clip_by_value: 1 inside the bounds, 0 outside (docs/tf-reference.md §9)
    torch = backend.module
    parts = [make([1.0, 2.5]), make([-1.0])]
    nt = torch.nested.as_nested_tensor(parts, layout=torch.jagged).requires_grad_(True)
    out = anyclip.clip_by_value(nt, 0.0, 2.0)
    out.values().sum().backward()
    assert_array(nt.grad.values(), [1.0, 0.0, 0.0], backend=backend, dtype="float32")
