"""TF's answers to argument kinds issue 22 found leaking or refused: the reference of
``test_argument_kinds.py``.

Usage: ``python tests/data/make_tf_argument_kinds.py [OUT.json]`` (default:
``tf_argument_kinds.json`` next to this script). Needs TensorFlow 2.21; runs in eager mode.

Each case of :data:`CASES` is one call of a public function with an argument of a kind TF
treats in its own way (measured, not assumed):

* an ``IndexedSlices`` as the *second* argument (``clip_norm``, a bound, ``epsilon``,
  ``use_norm``): TF densifies it there (repeated indices summed), except ``use_norm``, which
  it refuses (``1.0 / use_norm``); anyclip's counterparts are torch sparse COO tensors and JAX
  ``BCOO`` arrays;
* a ``RaggedTensor`` (anyclip's counterpart: a torch nested tensor of layout ``torch.jagged``):
  ``clip_by_value`` takes it as its input and returns one; every other function refuses it;
* a bool ``t_list`` with ``use_norm``: TF multiplies each array by the scale cast to bool;
* a complex ``ord`` in ``norm`` and ``normalize``: TF's Python checks take some and refuse
  others, with ``TypeError`` or ``ValueError``.

The file records, per case, the call (JSON, see :func:`decode`) and what TF returned
(``tf_result``, see :func:`encode`) or raised (``tf_class``, ``tf_message``).

Arguments: a number, string, ``None`` or a list is passed as it is; ``{"array": data, "dtype":
name}`` is an array; ``{"slices": {"values": v, "indices": i, "dense_shape": s}, "dtype": name}``
an ``IndexedSlices``; ``{"ragged": rows, "dtype": name}`` a ``RaggedTensor``; ``{"list": [...]}``
a Python list of decoded arguments; ``{"tuple": [...]}`` a tuple; ``{"complex": [re, im]}`` a
Python complex; ``{"npcomplex": [re, im], "dtype": name}`` a NumPy complex scalar; ``{"float":
"inf"}`` a float JSON cannot spell.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["CASES", "FUNCTIONS", "case_ids", "decode", "encode", "main", "measure"]


def _a(data: Any, dtype: str = "float32") -> dict[str, Any]:
    return {"array": data, "dtype": dtype}


def _s(values: Any, indices: list[int], dense_shape: list[int]) -> dict[str, Any]:
    return {
        "slices": {"values": values, "indices": indices, "dense_shape": dense_shape},
        "dtype": "float32",
    }


def _r(rows: Any) -> dict[str, Any]:
    return {"ragged": rows, "dtype": "float32"}


def _f(text: str) -> dict[str, Any]:
    return {"float": text}


T = _a([[3.0, 4.0], [1.0, 2.0]])
V = _a([3.0, -4.0])
M = _a([[3.0, -4.0], [1.0, 2.0]])
R = _r([[3.0, 4.0], [1.0]])
B = _a([True, False], "bool")
B2 = _a([[True]], "bool")
PAIR = {"tuple": [0, 1]}


def _bool_cases() -> list[tuple[str, str, list[Any], dict[str, Any]]]:
    out = []
    grid = [("2", "1"), ("2", "0"), ("0", "0"), ("inf", "0"), ("nan", "0"), ("-1", "0")]
    for un, cn in grid:
        for dtype in ("float32", "float64"):
            args = [{"list": [B, None, B2]}, float(cn)]
            kwargs = {"use_norm": _a(_f(un), dtype)}
            out.append((f"cbgn-bool-un{un}-cn{cn}-{dtype}", "clip_by_global_norm", args, kwargs))
    return out


def _ord_cases() -> list[tuple[str, str, list[Any], dict[str, Any]]]:
    python = {
        "1": [1, 0],
        "2": [2, 0],
        "inf": [_f("inf"), 0],
        "3": [3, 0],
        "0": [0, 0],
        "-1": [-1, 0],
        "1j": [0, 1],
        "1+1j": [1, 1],
    }
    numpy = {
        "1-c64": ([1, 0], "complex64"),
        "2-c128": ([2, 0], "complex128"),
        "3-c128": ([3, 0], "complex128"),
        "0.5-c64": ([0.5, 0], "complex64"),
        "inf-c128": ([_f("inf"), 0], "complex128"),
        "-1-c128": ([-1, 0], "complex128"),
        "0-c128": ([0, 0], "complex128"),
        "1+1j-c128": ([1, 1], "complex128"),
        "1j-c64": ([0, 1], "complex64"),
    }
    out = []
    for key, parts in python.items():
        ord_ = {"complex": parts}
        out.append((f"norm-vector-py{key}", "norm", [V], {"ord": ord_}))
        out.append((f"norm-matrix-py{key}", "norm", [M], {"ord": ord_, "axis": PAIR}))
    for key, (parts, dtype) in numpy.items():
        ord_ = {"npcomplex": parts, "dtype": dtype}
        out.append((f"norm-vector-np{key}", "norm", [V], {"ord": ord_}))
        out.append((f"norm-matrix-np{key}", "norm", [M], {"ord": ord_, "axis": PAIR}))
    out += [
        ("norm-vector-f64-np3", "norm", [_a([3.0, -4.0], "float64")], {"ord": numpy_3()}),
        ("normalize-vector-np1", "normalize", [V], {"ord": {"npcomplex": [1, 0]}}),
        ("normalize-matrix-py1", "normalize", [M], {"ord": {"complex": [1, 0]}, "axis": PAIR}),
        ("normalize-vector-py1", "normalize", [V], {"ord": {"complex": [1, 0]}}),
    ]
    return out


def numpy_3() -> dict[str, Any]:
    """``np.complex128(3+0j)``, a p-norm order TF takes as 3."""
    return {"npcomplex": [3, 0], "dtype": "complex128"}


#: ``(id, function, args, kwargs)``.
CASES: list[tuple[str, str, list[Any], dict[str, Any]]] = [
    # item 7: an IndexedSlices as the second argument is made dense (repeated indices summed)
    ("cbn-cn-slices-dup", "clip_by_norm", [T, _s([1.0, 1.0], [0, 0], [1])], {}),
    ("cbn-cn-slices-2d", "clip_by_norm", [T, _s([[2.0]], [0], [1, 1])], {}),
    ("cbv-min-slices", "clip_by_value", [T, _s([[0.5, 0.5]], [0], [2, 2]), 2.5], {}),
    ("cbv-max-slices", "clip_by_value", [T, 0.0, _s([[2.5, 2.5]], [1], [2, 2])], {}),
    (
        "cbv-max-slices-dup",
        "clip_by_value",
        [T, 0.0, _s([[1.0, 1.0], [0.5, 0.5]], [0, 0], [2, 2])],
        {},
    ),
    ("cbgn-cn-slices", "clip_by_global_norm", [{"list": [T]}, _s([2.0], [0], [1])], {}),
    ("cban-cn-slices", "clip_by_average_norm", [T, _s([0.5], [0], [1])], {}),
    ("l2n-eps-slices", "l2_normalize", [T], {"epsilon": _s([[100.0]], [0], [1, 1])}),
    (
        "l2n-eps-slices-rows",
        "l2_normalize",
        [T],
        {"axis": 1, "epsilon": _s([[100.0], [1000.0]], [0, 1], [2, 1])},
    ),
    # ... but TF refuses one as use_norm (it computes 1.0 / use_norm)
    (
        "cbgn-use-norm-slices",
        "clip_by_global_norm",
        [{"list": [T]}, 2.0],
        {"use_norm": _s([4.0], [0], [1])},
    ),
    # item 8: a RaggedTensor is taken by clip_by_value only
    ("cbv-ragged", "clip_by_value", [R, 0.0, 2.0], {}),
    ("cbv-ragged-0d-bounds", "clip_by_value", [R, _a(0.5), _a(3.5)], {}),
    ("cbn-ragged", "clip_by_norm", [R, 1.0], {}),
    ("cban-ragged", "clip_by_average_norm", [R, 1.0], {}),
    ("gn-ragged", "global_norm", [{"list": [R]}], {}),
    ("cbgn-ragged", "clip_by_global_norm", [{"list": [R]}, 1.0], {}),
    ("norm-ragged", "norm", [R], {}),
    ("l2n-ragged", "l2_normalize", [R], {}),
    ("normalize-ragged", "normalize", [R], {}),
    ("cbn-cn-ragged", "clip_by_norm", [T, _r([[2.0]])], {}),
    ("l2n-eps-ragged", "l2_normalize", [T], {"epsilon": _r([[100.0]])}),
    # item 10: a bool t_list with use_norm (and without: refused, TF's L2Loss)
    *_bool_cases(),
    (
        "cbgn-bool-float-int",
        "clip_by_global_norm",
        [{"list": [B, _a([3.0]), _a([3], "int32")]}, 1.0],
        {"use_norm": _a(2.0)},
    ),
    (
        "cbgn-python-bools",
        "clip_by_global_norm",
        [{"list": [[True, False], True]}, 0.0],
        {"use_norm": _a(2.0)},
    ),
    ("cbgn-bool-no-use-norm", "clip_by_global_norm", [{"list": [B]}, 1.0], {}),
    # item 10: complex ords
    *_ord_cases(),
]

#: anyclip's public function -> TF's (attribute path under ``tf``).
FUNCTIONS = {
    "clip_by_value": "clip_by_value",
    "clip_by_norm": "clip_by_norm",
    "global_norm": "linalg.global_norm",
    "clip_by_global_norm": "clip_by_global_norm",
    "clip_by_average_norm": "compat.v1.clip_by_average_norm",
    "norm": "norm",
    "l2_normalize": "math.l2_normalize",
    "normalize": "linalg.normalize",
}


def case_ids() -> list[str]:
    """The ids of :data:`CASES`, in order."""
    return [c[0] for c in CASES]


def _number(value: Any) -> Any:
    return float(value["float"]) if isinstance(value, dict) else value


def decode(value: Any, build: dict[str, Any]) -> Any:
    """A JSON argument as a call argument.

    ``build`` maps ``"array"``, ``"slices"``, ``"ragged"`` and ``"npcomplex"`` to functions
    ``(data, dtype)`` making that kind in the library at hand (``build["slices"]`` gets the
    dict of values, indices and dense_shape).
    """
    if isinstance(value, dict):
        for kind in ("array", "slices", "ragged"):
            if kind in value:
                data = value[kind]
                if kind == "array":
                    data = _numbers(data)
                return build[kind](data, value["dtype"])
        if "npcomplex" in value:
            re_, im = (_number(p) for p in value["npcomplex"])
            return build["npcomplex"](complex(re_, im), value.get("dtype", "complex128"))
        if "list" in value:
            return [decode(v, build) for v in value["list"]]
        if "tuple" in value:
            return tuple(decode(v, build) for v in value["tuple"])
        if "complex" in value:
            re_, im = (_number(p) for p in value["complex"])
            return complex(re_, im)
        if "float" in value:
            return float(value["float"])
        msg = f"unknown argument encoding {value!r}"
        raise ValueError(msg)
    return value


def _numbers(data: Any) -> Any:
    if isinstance(data, list):
        return [_numbers(d) for d in data]
    return _number(data)


def encode(result: Any) -> Any:
    """What TF returned, as JSON: arrays as ``{"array": data, "dtype": name}``, ragged ones as
    ``{"ragged": rows, "dtype": name}``, tuples and lists as ``{"list": [...]}``."""
    import numpy as np
    import tensorflow as tf

    if result is None:
        return None
    if isinstance(result, (list, tuple)):
        return {"list": [encode(r) for r in result]}
    if isinstance(result, tf.RaggedTensor):
        return {"ragged": result.to_list(), "dtype": result.dtype.name}
    data = np.asarray(result)
    values = data.tolist() if data.dtype != np.bool_ else data.astype(bool).tolist()
    return {"array": values, "dtype": result.dtype.name}


def measure() -> dict[str, dict[str, Any]]:
    """Run every case in TF (eager) and record its call and result or exception."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import warnings

    import numpy as np
    import tensorflow as tf

    def slices(spec: dict[str, Any], dtype: str) -> Any:
        return tf.IndexedSlices(
            tf.constant(np.asarray(spec["values"], dtype=dtype)),
            tf.constant(spec["indices"], tf.int64),
            tf.constant(spec["dense_shape"], tf.int64),
        )

    build = {
        "array": lambda data, dtype: tf.constant(np.asarray(data, dtype=dtype)),
        "slices": slices,
        "ragged": lambda rows, dtype: tf.ragged.constant(rows, dtype=dtype),
        "npcomplex": lambda value, dtype: np.dtype(dtype).type(value),
    }
    out: dict[str, dict[str, Any]] = {}
    for case_id, function, args, kwargs in CASES:
        fn: Any = tf
        for part in FUNCTIONS[function].split("."):
            fn = getattr(fn, part)
        call_args = [decode(a, build) for a in args]
        call_kwargs = {k: decode(v, build) for k, v in kwargs.items()}
        record: dict[str, Any] = {"function": function, "args": args, "kwargs": kwargs}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the deprecation and ComplexWarning notes
                result = fn(*call_args, **call_kwargs)
        except Exception as exc:  # noqa: BLE001 - what TF raises is the measurement
            record.update(tf_result=None, tf_class=type(exc).__name__, tf_message=str(exc))
        else:
            record.update(tf_result=encode(result), tf_class=None, tf_message=None)
        out[case_id] = record
    return out


def main(out: Path) -> None:
    """Measure every case and write the JSON file ``out``."""
    import numpy as np
    import tensorflow as tf

    data = {
        "provenance": {
            "script": "tests/data/make_tf_argument_kinds.py",
            "tensorflow": str(tf.__version__),
            "numpy": str(np.__version__),
            "mode": "eager, CPU",
        },
        "cases": measure(),
    }
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(__file__).with_name("tf_argument_kinds.json")
    )
