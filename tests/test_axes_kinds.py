"""Unusual ``axis``/``axes`` values, against what TF 2.21 (and Keras 3) do with them.

``tests/data/make_tf_axes_kinds.py`` passes each value of its ``VALUES`` (NumPy scalars and
arrays, bools, ``range``, mixed and ragged sequences, torch and JAX arrays, floats, strings,
repeated and out-of-range axes, ``[]``, ``None``) as the axes of ``tf.clip_by_norm``,
``tf.norm``, ``tf.math.l2_normalize``, ``tf.linalg.normalize`` and Keras's ``MaxNorm``,
``UnitNorm`` and ``MinMaxNorm`` on float32 inputs of rank 1 to 3;
``tests/data/tf_axes_kinds.json`` holds what TF returned or raised (``--live-tf`` reruns the
script and checks the file). On every backend anyclip must return TF's values (dtype, shape,
values within the function's ulp budget) where TF accepts the value, and raise the class a TF
user catches (docs/porting.md, "Errors": ``InvalidArgumentError`` about a reduction's axes is
``ValueError``, about the axes' dtype ``TypeError``) with TF's key phrase where TF refuses it.

The exceptions are :data:`DEVIATIONS`: values that TF's reductions take by casting them to
int32 (truncating a NumPy float, wrapping an int past 2**32) or by reading a framework's tensor
on the host, which anyclip refuses on purpose (docs/tf-behaviour.md, "Axes are read as TF's
reductions read them").
"""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import anyclip
from anyclip import constraints

from .conftest import (
    ULP_CLIP_NORM,
    ULP_L2,
    ULP_PNORM,
    anyclip_class,
    assert_same_tf_cases,
    compare_tf_result,
    live_tf_json,
)

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_tf_axes_kinds.py"
COMMITTED = json.loads((DATA / "tf_axes_kinds.json").read_text())
ERRORS = runpy.run_path(str(DATA / "make_tf_error_messages.py"))

#: The script's functions (``tests/data`` is not a package), as attributes.
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))

#: anyclip's call for each function of the script (TF's and Keras's arguments).
CALLS = {
    "clip_by_norm": lambda t, a: anyclip.clip_by_norm(t, 2.0, axes=a),
    "norm": lambda t, a: anyclip.norm(t, axis=a),
    "l2_normalize": lambda t, a: anyclip.l2_normalize(t, axis=a),
    "normalize": lambda t, a: anyclip.normalize(t, axis=a),
    "max_norm": lambda t, a: constraints.MaxNorm(2.0, axis=a)(t),
    "unit_norm": lambda t, a: constraints.UnitNorm(axis=a)(t),
    "min_max_norm": lambda t, a: constraints.MinMaxNorm(1.0, 2.0, 1.0, axis=a)(t),
}

#: ULP from TF's values (test_constraints.py's float32 budget for Keras's constraints).
ULP = {
    "clip_by_norm": ULP_CLIP_NORM,
    "norm": ULP_PNORM,
    "l2_normalize": ULP_L2,
    "normalize": ULP_PNORM,
    "max_norm": 4,
    "unit_norm": 4,
    "min_max_norm": 4,
}

#: ``tf.norm`` and ``tf.linalg.normalize`` check ``axis`` in Python first (a Python int or a
#: pair of them), then reduce; the other functions reduce at once.
PYTHON_CHECKED = ("norm", "normalize")

#: TF's Python check, the start of its message (anyclip's too).
TF_AXIS_CHECK = "'axis' must be None, an integer, or a tuple of 2 unique integers, got "

#: Values TF takes that anyclip refuses on purpose (docs/tf-behaviour.md): value id ->
#: (class, phrase) for the reductions, and for ``tf.norm``'s check where it differs.
DEVIATIONS: dict[str, dict[str, tuple[type[Exception], str]]] = {
    # TF casts a NumPy float to int32: 1.5 becomes axis 1, -0.7 axis 0
    "np-float64-1.5": {"reduce": (TypeError, "not a whole number")},
    # TF casts to int32: 2**40 becomes axis 0 (a reduction's kernel), not an error
    "int-2pow40": {"reduce": (ValueError, "out of range")},
    # reading a framework's tensor as an axis is a host read (a device sync on an accelerator);
    # tf.norm refuses it too, but shows its values, which anyclip does not read
    "torch-0": {
        "reduce": (TypeError, "pass a Python int or tuple of ints"),
        "norm": (ValueError, TF_AXIS_CHECK + "a torch array of shape (1,)"),
    },
    "jax-1": {
        "reduce": (TypeError, "pass a Python int or tuple of ints"),
        "norm": (ValueError, TF_AXIS_CHECK + "a jax array of shape ()"),
    },
}


def _deviation(vid: str, function: str) -> tuple[type[Exception], str] | None:
    return DEVIATIONS.get(vid, {}).get("norm" if function in PYTHON_CHECKED else "reduce")


def builders() -> dict[str, Any]:
    """How the script's torch and JAX values are made (skipping a missing library)."""

    def torch_value(data: Any, dtype: str) -> Any:
        torch = pytest.importorskip("torch")
        return torch.tensor(data, dtype=getattr(torch, dtype))

    def jax_value(data: Any, dtype: str) -> Any:
        jnp = pytest.importorskip("jax.numpy")
        return jnp.asarray(data, dtype=dtype)

    return {"torch": torch_value, "jax": jax_value}


def test_committed_file_is_the_catalogue():
    assert list(COMMITTED["cases"]) == gen.case_ids()
    assert COMMITTED["values"] == json.loads(json.dumps(gen.VALUES))
    for case_id, function, rank, vid in gen.CASES:
        record = COMMITTED["cases"][case_id]
        assert (record["function"], record["rank"], record["value"]) == (function, rank, vid)
    assert COMMITTED["provenance"]["tensorflow"].startswith("2.21.")
    assert set(CALLS) == set(gen.FUNCTIONS)


@pytest.mark.parametrize("vid", list(DEVIATIONS))
def test_each_deviation_is_one(vid):
    # a reduction deviation is a value TF takes somewhere; a norm one, TF refuses too
    for kind in DEVIATIONS[vid]:
        records = [
            r
            for r in COMMITTED["cases"].values()
            if r["value"] == vid and (r["function"] in PYTHON_CHECKED) == (kind == "norm")
        ]
        if kind == "reduce":  # TF takes it somewhere
            assert any(r["tf_class"] is None for r in records), f"TF refuses {vid}"
        else:  # TF refuses it as anyclip does, but shows the value
            assert all(r["tf_message"].startswith(TF_AXIS_CHECK) for r in records), vid


@pytest.mark.parametrize("case_id", gen.case_ids())
def test_as_tf(backend, make, case_id):
    record = COMMITTED["cases"][case_id]
    function, vid = record["function"], record["value"]
    t = make(gen.INPUTS[record["rank"]], "float32")
    axes = gen.decode(COMMITTED["values"][vid], builders())
    call = CALLS[function]
    deviation = _deviation(vid, function)
    if deviation is not None:
        cls, phrase = deviation
        with pytest.raises(cls, match=r"`axis|`axes") as info:
            call(t, axes)
        assert type(info.value) is cls, f"{type(info.value).__name__}: {info.value}"
        assert phrase in str(info.value), str(info.value)
        return
    if record["tf_class"] is None:
        out = call(t, axes)
        compare_tf_result(backend, out, record["tf_result"], ULP[function], case_id)
        return
    with pytest.raises((TypeError, ValueError)) as info:
        call(t, axes)
    message = str(info.value)
    assert re.search(r"`(axis|axes)`", message), f"the argument is not named: {message}"
    key = ERRORS["key_phrase"](record["tf_message"])
    expected = anyclip_class(record["tf_class"], key)
    assert type(info.value) is expected, f"{type(info.value).__name__}: {message}"
    assert key in message, f"TF's words {key!r} missing from: {message}"


@pytest.mark.live_tf
def test_committed_file_is_what_tf_gives(tmp_path):
    live = live_tf_json(SCRIPT, tmp_path)
    assert live["provenance"]["tensorflow"] == COMMITTED["provenance"]["tensorflow"]
    assert live["values"] == COMMITTED["values"]
    assert_same_tf_cases(live["cases"], COMMITTED["cases"], ERRORS["key_phrase"])


@pytest.mark.parametrize("function", ["clip_by_norm", "l2_normalize"])
def test_nested_framework_array_is_shown_without_its_values(backend, make, function):
    # a torch or JAX array inside a list of axes is refused; its values are not read for the
    # message either (a host read on an accelerator): shown by type and shape, as at top level
    torch = pytest.importorskip("torch")
    t = make(gen.INPUTS[2], "float32")
    with pytest.raises(ValueError, match="`ax") as info:
        CALLS[function](t, [torch.tensor(7)])
    message = str(info.value)
    assert "a torch array of shape ()" in message, message
    assert "tensor(" not in message and "7" not in message, message
