"""TensorFlow's own error messages, measured live: the reference of ``test_tf_error_messages.py``.

Usage: ``python tests/data/make_tf_error_messages.py [OUT.json]`` (default:
``tf_error_messages.json`` next to this script). Needs TensorFlow 2.21; run in eager mode.

Each case of :data:`CASES` is a call of one public function that both TensorFlow and anyclip
refuse: a wrong dtype, shapes that cannot broadcast, a bad axis, an argument that cannot be
converted. The file records, per case, the call (as JSON, see :func:`decode`) and what TF
raised: the exception class (``tf_class``, e.g. ``InvalidArgumentError``) and the full message
(``tf_message``). ``test_tf_error_messages.py`` checks that anyclip's message contains TF's key
phrase (:func:`key_phrase`), and, with ``--live-tf``, that the committed file is what TF gives.

Arguments are JSON: a number, string, ``None`` or a list is passed as it is (a list is a Python
list, which TF converts); ``{"array": data, "dtype": name}`` is an array of that dtype (a
``tf.constant`` here, a backend array in the test); ``{"list": [...]}`` is a Python list of
decoded arguments (``t_list``); ``{"tuple": [...]}`` a tuple of them (``axis=(0, 1)``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "CASES",
    "FUNCTIONS",
    "case_ids",
    "decode",
    "key_pattern",
    "key_phrase",
    "main",
    "measure",
]


def _a(data: Any, dtype: str = "float32") -> dict[str, Any]:
    return {"array": data, "dtype": dtype}


def _ones(shape: tuple[int, ...], dtype: str = "float32") -> dict[str, Any]:
    data: Any = 1.0 if dtype.startswith("float") else 1
    for n in reversed(shape):
        data = [data] * n
    return _a(data, dtype)


M = [[3.0, 4.0], [6.0, 8.0]]
PAIR = {"tuple": [0, 1]}

#: ``(id, function, args, kwargs)``. Every case raises in TF 2.21 (eager) and in anyclip.
CASES: list[tuple[str, str, list[Any], dict[str, Any]]] = [
    # clip_by_value: op kernels (Minimum, Maximum), conversion, the static shape check
    ("cbv-bool-t", "clip_by_value", [_a([True, False], "bool"), False, True], {}),
    ("cbv-complex-t", "clip_by_value", [_a([1, 2], "complex64"), 0, 1], {}),
    ("cbv-float-on-int", "clip_by_value", [_a([1, 2], "int32"), 0, 3.1], {}),
    ("cbv-max-f64", "clip_by_value", [_a([1.0, 2.0]), 0.0, _a(1.0, "float64")], {}),
    ("cbv-min-f64", "clip_by_value", [_a([1.0, 2.0]), _a(0.0, "float64"), 1.0], {}),
    ("cbv-min-int64", "clip_by_value", [_a([1, 2], "int32"), _a(0, "int64"), 1], {}),
    ("cbv-min-f32-on-f64", "clip_by_value", [_a([1.0], "float64"), _a(0.0), 1.0], {}),
    ("cbv-min-shape-4", "clip_by_value", [_ones((2, 3)), _ones((4,)), 2.0], {}),
    ("cbv-max-shape-5", "clip_by_value", [_ones((2, 3)), 0.0, _ones((5,))], {}),
    ("cbv-min-shape-112", "clip_by_value", [_ones((2, 3)), _ones((1, 1, 2)), 2.0], {}),
    ("cbv-bad-shape-231", "clip_by_value", [_ones((2, 3, 1)), 1.0, _ones((2,))], {}),
    ("cbv-min-rank-up", "clip_by_value", [_ones((2, 3)), _ones((1, 2, 3)), 2.0], {}),
    ("cbv-max-dim-up", "clip_by_value", [_ones((2, 1)), 0.0, _ones((2, 3))], {}),
    ("cbv-scalar-t", "clip_by_value", [_a(1.0), _ones((3,)), 2.0], {}),
    ("cbv-none-min", "clip_by_value", [_a([1.0]), None, 1.0], {}),
    ("cbv-uint8-true", "clip_by_value", [_a([1, 2], "uint8"), 0, True], {}),
    ("cbv-bf16-true", "clip_by_value", [_a([1.0, 2.0], "bfloat16"), 0.0, True], {}),
    ("cbv-complex-bound", "clip_by_value", [_a([1.0, 2.0]), 0.0, {"complex": [1, 1]}], {}),
    ("cbv-string-bound", "clip_by_value", [_a([1.0, 2.0]), 0.0, "1"], {}),
    ("cbv-int-overflow", "clip_by_value", [_a([1, 2], "int32"), 0, 2**64], {}),
    ("cbv-uint64-overflow", "clip_by_value", [_a([1, 2], "uint64"), 0, 2**64], {}),
    ("cbv-uint64-negative", "clip_by_value", [_a([1, 2], "uint64"), -1, 1], {}),
    ("cbv-int8-underflow", "clip_by_value", [_a([1, 2], "int8"), -(2**63) - 1, 1], {}),
    # TF evaluates minimum(t, clip_value_max) first: its error wins over clip_value_min's
    ("cbv-both-dtypes", "clip_by_value", [_a([1.0]), _a(0.0, "float64"), _a(1, "int32")], {}),
    (
        "cbv-max-dtype-before-min-shape",
        "clip_by_value",
        [_a([1.0, 2.0]), _ones((3,)), _a(1.0, "float64")],
        {},
    ),
    ("cbv-none-t", "clip_by_value", [None, 0.0, 1.0], {}),
    # clip_by_norm
    ("cbn-int-t", "clip_by_norm", [_a([3, 4], "int32"), 1.0], {}),
    ("cbn-int-list", "clip_by_norm", [[3, 4], 1.0], {}),
    ("cbn-complex-t", "clip_by_norm", [_a([3, 4], "complex64"), 1.0], {}),
    ("cbn-bool-t", "clip_by_norm", [_a([True, False], "bool"), 1.0], {}),
    ("cbn-clip-string", "clip_by_norm", [_a([3.0, 4.0]), "1"], {}),
    ("cbn-clip-none", "clip_by_norm", [_a([3.0, 4.0]), None], {}),
    ("cbn-clip-complex", "clip_by_norm", [_a([3.0, 4.0]), {"complex": [1, 1]}], {}),
    ("cbn-clip-complex-array", "clip_by_norm", [_a([3.0, 4.0]), _a(1, "complex64")], {}),
    ("cbn-clip-bool-array", "clip_by_norm", [_a([3.0, 4.0]), _a(True, "bool")], {}),
    ("cbn-clip-shape-3", "clip_by_norm", [_a([3.0, 4.0]), _ones((3,))], {}),
    ("cbn-clip-shape-12", "clip_by_norm", [_a([3.0, 4.0]), _ones((1, 2))], {}),
    ("cbn-bad-shape-231", "clip_by_norm", [_ones((2, 3, 1)), _a([1.0, 2.0])], {}),
    ("cbn-axes-duplicate", "clip_by_norm", [_a(M), 5.0], {"axes": [1, 1]}),
    ("cbn-axes-duplicate-neg", "clip_by_norm", [_a(M), 5.0], {"axes": [1, -1]}),
    ("cbn-axes-out-of-range", "clip_by_norm", [_a(M), 5.0], {"axes": 2}),
    ("cbn-axes-negative", "clip_by_norm", [_a(M), 5.0], {"axes": -3}),
    ("cbn-axes-float", "clip_by_norm", [_a(M), 5.0], {"axes": 1.0}),
    ("cbn-axes-duplicate-first", "clip_by_norm", [_a(M), 5.0], {"axes": [0, 0, 5]}),
    ("cbn-axes-out-of-range-first", "clip_by_norm", [_a(M), 5.0], {"axes": [5, 0, 0]}),
    # global_norm
    ("gn-int", "global_norm", [{"list": [_a([3, 4], "int32")]}], {}),
    ("gn-complex", "global_norm", [{"list": [_a([3, 4], "complex64")]}], {}),
    ("gn-bool", "global_norm", [{"list": [_a([True], "bool")]}], {}),
    ("gn-f32-int", "global_norm", [{"list": [_a([3.0]), _a([4], "int32")]}], {}),
    ("gn-range", "global_norm", [{"range": 3}], {}),
    ("gn-f32-f64", "global_norm", [{"list": [_a([3.0, 4.0]), _a([12.0], "float64")]}], {}),
    ("gn-f32-f16", "global_norm", [{"list": [_a([3.0, 4.0]), _a([12.0], "float16")]}], {}),
    ("gn-not-a-list", "global_norm", [_a([3.0, 4.0])], {}),
    # clip_by_global_norm
    ("cbgn-int", "clip_by_global_norm", [{"list": [_a([3, 4], "int32")]}, 1.0], {}),
    (
        "cbgn-f32-f64",
        "clip_by_global_norm",
        [{"list": [_a([3.0, 4.0]), _a([12.0], "float64")]}, 1.0],
        {},
    ),
    ("cbgn-clip-f64", "clip_by_global_norm", [{"list": [_a([3.0, 4.0])]}, _a(1.0, "float64")], {}),
    ("cbgn-clip-f16", "clip_by_global_norm", [{"list": [_a([3.0, 4.0])]}, _a(1.0, "float16")], {}),
    ("cbgn-clip-int", "clip_by_global_norm", [{"list": [_a([3.0, 4.0])]}, _a(1, "int32")], {}),
    ("cbgn-clip-shape-3", "clip_by_global_norm", [{"list": [_a([3.0, 4.0])]}, _ones((3,))], {}),
    (
        "cbgn-use-norm-shape-3",
        "clip_by_global_norm",
        [{"list": [_a([3.0, 4.0])]}, 1.0],
        {"use_norm": _ones((3,))},
    ),
    (
        "cbgn-use-norm-float",
        "clip_by_global_norm",
        [{"list": [_a([3.0, 4.0])]}, 6.5],
        {"use_norm": 26.0},
    ),
    ("cbgn-clip-none", "clip_by_global_norm", [{"list": [_a([3.0, 4.0])]}, None], {}),
    ("cbgn-bool", "clip_by_global_norm", [{"list": [_a([True], "bool")]}, 1.0], {}),
    (
        "cbgn-use-norm-int",
        "clip_by_global_norm",
        [{"list": [_a([3.0, 4.0])]}, 1.0],
        {"use_norm": _a(5, "int32")},
    ),
    (
        "cbgn-use-norm-f64-clip-f32",
        "clip_by_global_norm",
        [{"list": [_a([3.0, 4.0])]}, _a(1.0)],
        {"use_norm": _a(5.0, "float64")},
    ),
    (
        "cbgn-clip-vs-use-norm",
        "clip_by_global_norm",
        [{"list": [_a([3.0])]}, _ones((2,))],
        {"use_norm": _ones((3,))},
    ),
    ("cbgn-not-a-list", "clip_by_global_norm", [_a([3.0, 4.0]), 1.0], {}),
    # clip_by_average_norm
    ("cban-f64-t", "clip_by_average_norm", [_a([3.0, 4.0], "float64"), 1.0], {}),
    ("cban-f16-t", "clip_by_average_norm", [_a([3.0, 4.0], "float16"), 1.0], {}),
    ("cban-bf16-t", "clip_by_average_norm", [_a([3.0, 4.0], "bfloat16"), 1.0], {}),
    ("cban-complex-t", "clip_by_average_norm", [_a([3, 4], "complex64"), 1.0], {}),
    ("cban-int-t", "clip_by_average_norm", [_a([3, 4], "int32"), 1.0], {}),
    ("cban-bool-t", "clip_by_average_norm", [_a([True, False], "bool"), 1.0], {}),
    ("cban-uint8-t", "clip_by_average_norm", [_a([3, 4], "uint8"), 1.0], {}),
    ("cban-complex128-t", "clip_by_average_norm", [_a([3, 4], "complex128"), 1.0], {}),
    ("cban-clip-f64", "clip_by_average_norm", [_a([3.0, 4.0]), _a(1.0, "float64")], {}),
    ("cban-clip-int", "clip_by_average_norm", [_a([3.0, 4.0]), _a(1, "int32")], {}),
    ("cban-clip-shape-3", "clip_by_average_norm", [_a([3.0, 4.0]), _ones((3,))], {}),
    ("cban-clip-none", "clip_by_average_norm", [_a([3.0, 4.0]), None], {}),
    # norm
    ("norm-int-euclidean", "norm", [_a([3, -4], "int32")], {}),
    ("norm-int-ord-2", "norm", [_a([3, -4], "int32")], {"ord": 2}),
    ("norm-int-ord-3", "norm", [_a([3, -4], "int32")], {"ord": 3}),
    ("norm-int-ord-half", "norm", [_a([3, -4], "int32")], {"ord": 0.5}),
    ("norm-uint-ord-1", "norm", [_a([3, 4], "uint8")], {"ord": 1}),
    ("norm-bool", "norm", [_a([True, False], "bool")], {}),
    ("norm-bool-ord-1", "norm", [_a([True, False], "bool")], {"ord": 1}),
    ("norm-bool-ord-2", "norm", [_a([True, False], "bool")], {"ord": 2}),
    ("norm-bool-ord-3", "norm", [_a([True, False], "bool")], {"ord": 3}),
    ("norm-bool-fro", "norm", [_a([[True]], "bool")], {"ord": "fro", "axis": PAIR}),
    ("norm-bool-matrix-1", "norm", [_a([[True]], "bool")], {"ord": 1, "axis": PAIR}),
    ("norm-bool-matrix-2", "norm", [_a([[True]], "bool")], {"ord": 2, "axis": PAIR}),
    ("norm-int-fro", "norm", [_a([[1, 2]], "int32")], {"ord": "fro", "axis": PAIR}),
    ("norm-int-ord-3-float", "norm", [_a([3, -4], "int32")], {"ord": 3.0}),
    ("norm-int64-ord-3", "norm", [_a([3, -4], "int64")], {"ord": 3}),
    ("norm-uint8-euclidean", "norm", [_a([3, 4], "uint8")], {}),
    ("norm-uint8-ord-3", "norm", [_a([3, 4], "uint8")], {"ord": 3}),
    ("norm-uint8-matrix-1", "norm", [_a([[3, 4]], "uint8")], {"ord": 1, "axis": PAIR}),
    ("norm-f16-matrix-2", "norm", [_a(M, "float16")], {"ord": 2, "axis": PAIR}),
    ("norm-bf16-matrix-2", "norm", [_a(M, "bfloat16")], {"ord": 2, "axis": PAIR}),
    (
        "norm-int-matrix-2",
        "norm",
        [_a([[1, 2], [3, 4]], "int32")],
        {"ord": 2, "axis": PAIR},
    ),
    ("norm-axis-out-of-range", "norm", [_a(M)], {"axis": 2}),
    ("norm-axis-negative", "norm", [_a(M)], {"axis": -3}),
    ("norm-axis-pair-duplicate", "norm", [_a(M)], {"axis": {"tuple": [0, -2]}}),
    ("norm-axis-pair-out-of-range", "norm", [_a(M)], {"axis": {"tuple": [0, 2]}}),
    ("norm-axis-on-0d", "norm", [_a(-3.0)], {"axis": 0}),
    ("norm-ord-0", "norm", [_a([3.0, 4.0])], {"ord": 0}),
    ("norm-ord-nuc-matrix", "norm", [_a(M)], {"ord": "nuc", "axis": PAIR}),
    ("norm-axis-kind", "norm", [_a(M)], {"axis": [0]}),
    ("norm-none", "norm", [None], {}),
    # l2_normalize
    ("l2-int", "l2_normalize", [_a([3, 4], "int32")], {}),
    ("l2-bool", "l2_normalize", [_a([True, False], "bool")], {}),
    ("l2-uint8", "l2_normalize", [_a([3, 4], "uint8")], {}),
    ("l2-int-epsilon-int", "l2_normalize", [_a([3, 4], "int32")], {"epsilon": 1}),
    (
        "l2-complex-epsilon-f64",
        "l2_normalize",
        [_a([3, 4], "complex64")],
        {"epsilon": _a(1e-12, "float64")},
    ),
    ("l2-epsilon-vs-sum", "l2_normalize", [_ones((2, 3))], {"axis": 1, "epsilon": _ones((3, 1))}),
    ("l2-epsilon-string", "l2_normalize", [_a([3.0, 4.0])], {"epsilon": "a"}),
    ("l2-epsilon-f64", "l2_normalize", [_a([3.0, 4.0])], {"epsilon": _a(1e-12, "float64")}),
    ("l2-epsilon-shape-3", "l2_normalize", [_a([3.0, 4.0])], {"epsilon": _ones((3,))}),
    ("l2-epsilon-none", "l2_normalize", [_a([3.0, 4.0])], {"epsilon": None}),
    ("l2-axis-duplicate", "l2_normalize", [_a(M)], {"axis": [1, 1]}),
    ("l2-axis-out-of-range", "l2_normalize", [_a(M)], {"axis": 2}),
    ("l2-dim-out-of-range", "l2_normalize", [_a(M)], {"dim": 2}),
    ("l2-axis-and-dim", "l2_normalize", [_a(M)], {"axis": 1, "dim": 1}),
    ("l2-axis-float", "l2_normalize", [_a(M)], {"axis": 1.0}),
    # normalize
    ("normalize-int-euclidean", "normalize", [_a([3, 4], "int32")], {}),
    ("normalize-bool", "normalize", [_a([True, False], "bool")], {"ord": 1}),
    ("normalize-uint8-inf", "normalize", [_a([3, 4], "uint8")], {"ord": {"float": "inf"}}),
    ("normalize-int-ord-3", "normalize", [_a([3, 4], "int32")], {"ord": 3}),
    ("normalize-ord-0", "normalize", [_a([3.0, 4.0])], {"ord": 0}),
    ("normalize-axis-out-of-range", "normalize", [_a(M)], {"axis": 3}),
    ("normalize-axis-pair-duplicate", "normalize", [_a(M)], {"axis": {"tuple": [0, 0]}}),
    # embedding_lookup: GatherV2's index dtypes, Sqrt's dtypes (max_norm's clip_by_norm)
    ("el-uint8-ids", "embedding_lookup", [_a(M), _a([0], "uint8")], {}),
    ("el-float-ids", "embedding_lookup", [_a(M), _a([0.0])], {}),
    ("el-int-params-max-norm", "embedding_lookup", [_a([[3, 4]], "int32"), [0]], {"max_norm": 1.0}),
]

#: The TF function each anyclip function mirrors.
FUNCTIONS = {
    "clip_by_value": "clip_by_value",
    "clip_by_norm": "clip_by_norm",
    "global_norm": "linalg.global_norm",
    "clip_by_global_norm": "clip_by_global_norm",
    "clip_by_average_norm": "compat.v1.clip_by_average_norm",
    "norm": "norm",
    "l2_normalize": "math.l2_normalize",
    "normalize": "linalg.normalize",
    "embedding_lookup": "nn.embedding_lookup",
}


def case_ids() -> list[str]:
    """The ids of :data:`CASES`, in order."""
    return [c[0] for c in CASES]


def decode(value: Any, array: Any) -> Any:
    """A JSON argument as a call argument; ``array(data, dtype)`` builds the arrays."""
    if isinstance(value, dict):
        if "array" in value:
            return array(value["array"], value["dtype"])
        if "list" in value:
            return [decode(v, array) for v in value["list"]]
        if "tuple" in value:
            return tuple(decode(v, array) for v in value["tuple"])
        if "range" in value:
            return range(value["range"])
        if "complex" in value:
            return complex(*value["complex"])
        if "float" in value:  # inf and nan, which JSON has no spelling for
            return float(value["float"])
        msg = f"unknown argument encoding {value!r}"
        raise ValueError(msg)
    return value


#: TF's eager suffixes: ``" [Op:Minimum]"``, ``" [Op:Pack] name: stack"``.
_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\].*$", re.DOTALL)
#: The op-dependent start of a dtype mismatch (``"cannot compute Mul as input #1(zero-based)"``).
_CANNOT_COMPUTE = re.compile(r"^cannot compute \w+ as input #\d+\(zero-based\) was ")
#: The first line of TF's "not in the list of allowed values" message, up to the list.
_ATTR_T = re.compile(r"^(Value for attr 'T' of \w+ is not in the list of allowed values)")
#: A leading ``{{function_node ...}}`` that some kernels' messages carry.
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")


def key_phrase(message: str) -> str:
    """The part of TF's message a ported ``assertRaisesRegex`` matches (the documented rule).

    1. Only the first line counts, without a leading ``{{function_node ...}}`` and without
       the eager suffix that names the op (``" [Op:Minimum]"``, ``" [Op:Pack] name: stack"``).
    2. A dtype mismatch drops its op-dependent start ``"cannot compute <Op> as input
       #<i>(zero-based) was "``, keeping ``"expected to be a float tensor but is a double
       tensor"`` (which op TF evaluates first is an implementation detail).
    3. An unsupported dtype keeps ``"Value for attr 'T' of int32 is not in the list of
       allowed values"``, without the op-dependent list and the NodeDef that follow.

    Everything else is kept as TF wrote it, shapes and dtypes spelled TF's way
    (``"Incompatible shapes: [2,3] vs. [4]"``, ``"Shapes (2, 3) and (1, 2, 3) are
    incompatible"``, ``"Cannot convert 3.1 to EagerTensor of dtype int32"``).
    """
    text = _FUNCTION_NODE.sub("", message.strip())
    text = _OP_SUFFIX.sub("", text.splitlines()[0] if text else text).strip()
    text = _CANNOT_COMPUTE.sub("", text)
    attr = _ATTR_T.match(text)
    if attr:
        text = attr.group(1)
    return text


#: A Python class as TF names it in a message (``<class 'tensorflow...EagerTensor'>``).
_CLASS = re.compile(r"<class '[^']*'>")


def key_pattern(message: str) -> str:
    """:func:`key_phrase` as a regular expression, the one a ported test would write.

    Rule 4: a Python class TF names (``Received <class '...EagerTensor'>``) matches any
    class, since the caller's array is not TF's; everything else matches literally.
    """
    parts = _CLASS.split(key_phrase(message))
    return "<class '[^']*'>".join(re.escape(p) for p in parts)


def measure() -> dict[str, dict[str, Any]]:
    """Run every case in TF (eager) and record its call, exception class and message."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    def array(data: Any, dtype: str) -> Any:
        if dtype == "bfloat16":
            return tf.cast(tf.constant(np.asarray(data, dtype=np.float32)), tf.bfloat16)
        return tf.constant(np.asarray(data, dtype=dtype))

    out: dict[str, dict[str, Any]] = {}
    for case_id, function, args, kwargs in CASES:
        fn: Any = tf
        for part in FUNCTIONS[function].split("."):
            fn = getattr(fn, part)
        call_args = [decode(a, array) for a in args]
        call_kwargs = {k: decode(v, array) for k, v in kwargs.items()}
        record: dict[str, Any] = {"function": function, "args": args, "kwargs": kwargs}
        try:
            fn(*call_args, **call_kwargs)
        except Exception as exc:  # noqa: BLE001 - what TF raises is the measurement
            record["tf_class"] = type(exc).__name__
            record["tf_message"] = str(exc)
        else:
            record["tf_class"] = None
            record["tf_message"] = None
        out[case_id] = record
    return out


def main(out: Path) -> None:
    """Measure every case and write the JSON file ``out``."""
    data = {"tensorflow": _tf_version(), "cases": measure()}
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def _tf_version() -> str:
    import tensorflow as tf

    return str(tf.__version__)


if __name__ == "__main__":
    main(
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(__file__).with_name("tf_error_messages.json")
    )
