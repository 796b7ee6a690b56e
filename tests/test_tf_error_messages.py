"""TF's own wording in anyclip's errors, so that a ported ``assertRaisesRegex`` still matches.

Issue 11, item 5. ``tests/data/tf_error_messages.json`` holds, for each case of
``tests/data/make_tf_error_messages.py`` (a call that both TF 2.21 and anyclip refuse), the
exception class and the full message TF raised, measured live in eager mode. On every backend,
anyclip must raise its own class for the case (:func:`anyclip_class`), name an argument in
backticks, and contain TF's key phrase: TF's message without its op-dependent parts, by the rule
of ``key_phrase`` in that script (``Incompatible shapes: [2,3] vs. [5]``, ``expected to be a
float tensor but is a double tensor``). The expected text comes from TF, never from anyclip.

With ``--live-tf`` (and TensorFlow installed) the script runs again in a subprocess and the
committed file must still be what TF gives.
"""

from __future__ import annotations

import inspect
import json
import re
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest

import anyclip

from .conftest import anyclip_class, assert_same_tf_cases, live_tf_json

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_tf_error_messages.py"
COMMITTED = json.loads((DATA / "tf_error_messages.json").read_text())


#: The script's functions (``tests/data`` is not a package), as attributes.
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))

#: The public functions whose refusals the cases cover.
PUBLIC = {name for name in anyclip.__all__ if inspect.isfunction(getattr(anyclip, name))}


def test_committed_file_is_the_catalogue():
    # the file was made from the script's cases, in order, with the same calls
    assert list(COMMITTED["cases"]) == gen.case_ids()
    for case_id, function, args, kwargs in gen.CASES:
        record = COMMITTED["cases"][case_id]
        assert record["function"] == function
        assert record["args"] == json.loads(json.dumps(args)), case_id
        assert record["kwargs"] == json.loads(json.dumps(kwargs)), case_id
        assert record["tf_class"] is not None, f"{case_id}: TF does not raise"
    assert COMMITTED["tensorflow"].startswith("2.21.")


def test_every_public_function_is_covered():
    assert {record["function"] for record in COMMITTED["cases"].values()} == PUBLIC


@pytest.mark.parametrize(
    ("message", "key"),
    [
        (
            "cannot compute Mul as input #1(zero-based) was expected to be a float tensor but "
            "is a double tensor [Op:Mul] name: ",
            "expected to be a float tensor but is a double tensor",
        ),
        (
            "{{function_node __wrapped__Maximum_device_/job:localhost/replica:0/task:0/device:"
            "CPU:0}} Incompatible shapes: [2,3] vs. [4] [Op:Maximum] name: ",
            "Incompatible shapes: [2,3] vs. [4]",
        ),
        (
            "Value for attr 'T' of int32 is not in the list of allowed values: bfloat16, half\n"
            "\t; NodeDef: {{node Sqrt}}; Op<name=Sqrt> [Op:Sqrt] name: ",
            "Value for attr 'T' of int32 is not in the list of allowed values",
        ),
        ("Shapes (2, 3) and (1, 2, 3) are incompatible", None),
        ("Cannot convert 3.1 to EagerTensor of dtype int32", None),
    ],
    ids=["dtype", "shapes", "attr", "static-shapes", "conversion"],
)
def test_key_phrase_rule(message, key):
    # the documented rule, on TF messages written out by hand
    assert gen.key_phrase(message) == (message if key is None else key)


def test_key_pattern_matches_any_class():
    message = "`t_list` should be a sequence of tensors. Received <class 'x.EagerTensor'>."
    pattern = gen.key_pattern(message)
    assert re.search(pattern, "`t_list` should be a sequence of tensors. Received <class 'dict'>.")
    assert not re.search(pattern, "`t_list` should be a list")


@pytest.mark.parametrize("case_id", gen.case_ids())
def test_message_contains_tf_wording(backend, make, case_id):
    record = COMMITTED["cases"][case_id]
    fn = getattr(anyclip, record["function"])
    args = [gen.decode(a, make) for a in record["args"]]
    kwargs = {k: gen.decode(v, make) for k, v in record["kwargs"].items()}
    expected = anyclip_class(record["tf_class"], gen.key_phrase(record["tf_message"]))
    with pytest.raises((TypeError, ValueError)) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert type(info.value) is expected, f"{type(info.value).__name__}: {message}"
    assert re.search(r"`\w+(\[\d+\])?`", message), f"no argument named: {message}"
    pattern = gen.key_pattern(record["tf_message"])
    assert re.search(pattern, message), f"TF's words {pattern!r} missing from: {message}"


@pytest.mark.live_tf
def test_committed_file_is_what_tf_gives(tmp_path):
    live = live_tf_json(SCRIPT, tmp_path)
    assert live["tensorflow"] == COMMITTED["tensorflow"]
    assert_same_tf_cases(live["cases"], COMMITTED["cases"], gen.key_phrase)
