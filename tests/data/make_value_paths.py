"""TF 2.21's values on the value paths that silently differed: ``tests/test_value_paths.py``.

Usage: ``python tests/data/make_value_paths.py [OUT.json]`` (default: ``value_paths.json`` next
to this script). Needs TensorFlow 2.21; ``tests/test_value_paths.py`` reads the committed file
and, with ``--live-tf``, runs this script in a subprocess and checks the file is still what TF
gives.

Three groups of cases, each run through TF's own function on the inputs written here (no
random data, no seed):

* ``cast``: ``tf.clip_by_global_norm`` of integer arrays with a given ``use_norm`` whose
  factor is NaN, infinite or outside the integer range, so that TF's cast of the factor to
  the arrays' dtype decides the result (every float dtype of ``use_norm`` into every integer
  dtype).
* ``unknown``: calls that anyclip gets on dask arrays of unknown chunk sizes (``x[x > 0]``):
  the values are TF's on the same elements.
* ``subnormal``: float32 and float64 inputs, bounds and factors whose results or intermediate
  results are subnormal; TF's CPU kernels flush those to zero (FTZ/DAZ).

Float values are stored as ``float.hex`` strings (exact, NaN and infinities included), their
dtype next to them; integers as ints.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CAST", "SUBNORMAL", "UNKNOWN", "decode", "encode", "main", "run_tf"]

#: Integer dtypes of the arrays and float dtypes of ``use_norm`` in the ``cast`` group.
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "bfloat16", "float32", "float64")

#: (``use_norm``, ``clip_norm``) pairs: a NaN factor, -inf (``use_norm`` -0.0), NaN from an
#: infinite norm, and finite factors beyond int32, int64 and uint64 (``c / use_norm`` for a
#: negative ``use_norm``).
CAST_NORMS = (
    (math.nan, 1.0),
    (-0.0, 1.0),
    (math.inf, 1.0),
    (-1.0, 3e9),
    (-1.0, -3e9),
    (-1.0, 1e19),
    (-1.0, 1e30),
    (-1.0, 300.0),
    (-1.0, -70000.0),
)

CAST = [
    {
        "id": f"cast/{t}/{u}/{i}",
        "fn": "clip_by_global_norm",
        "x": {"dtype": t, "values": [3, 1]},
        "use_norm": {"dtype": u, "values": norm},
        "clip_norm": clip,
    }
    for t in INTS
    for u in FLOATS
    for i, (norm, clip) in enumerate(CAST_NORMS)
]


def _f(values: Any, dtype: str = "float32") -> dict[str, Any]:
    return {"dtype": dtype, "values": values}


#: Calls on arrays whose chunk sizes dask does not know; ``x`` is 1-D unless it has rows.
UNKNOWN = [
    {
        "id": "unknown/clip_by_average_norm",
        "fn": "clip_by_average_norm",
        "x": _f([1.0, 3.0, 4.0]),
        "clip_norm": 1.0,
    },
    {
        "id": "unknown/clip_by_average_norm/clips",
        "fn": "clip_by_average_norm",
        "x": _f([1.0, 3.0, 4.0]),
        "clip_norm": 0.5,
    },
    {
        "id": "unknown/clip_by_value/array_bound",
        "fn": "clip_by_value",
        "x": _f([1.0, 3.0, 4.0]),
        "clip_value_min": _f([0.5, 3.5, 0.5]),
        "clip_value_max": 3.0,
    },
    {
        "id": "unknown/clip_by_value/array_bound_1",
        "fn": "clip_by_value",
        "x": _f([1.0, 3.0, 4.0]),
        "clip_value_min": _f([1.5]),
        "clip_value_max": _f([3.5]),
    },
    {
        "id": "unknown/clip_by_norm/array_clip_norm",
        "fn": "clip_by_norm",
        "x": _f([1.0, 3.0, 4.0]),
        "clip_norm": _f([1.0, 2.0, 0.5]),
    },
    {
        "id": "unknown/clip_by_norm",
        "fn": "clip_by_norm",
        "x": _f([1.0, 3.0, 4.0]),
        "clip_norm": 2.0,
    },
    {
        "id": "unknown/l2_normalize/array_epsilon",
        "fn": "l2_normalize",
        "x": _f([1.0, 3.0, 4.0]),
        "epsilon": _f([1e-12]),
    },
    {
        "id": "unknown/l2_normalize/array_epsilon_large",
        "fn": "l2_normalize",
        "x": _f([1.0, 3.0, 4.0]),
        "epsilon": _f([100.0, 1.0, 1000.0]),
    },
    {"id": "unknown/l2_normalize/empty", "fn": "l2_normalize", "x": _f([]), "epsilon": _f([1e-12])},
    {"id": "unknown/norm/inf/empty", "fn": "norm", "x": _f([]), "ord": "inf"},
    {"id": "unknown/norm/inf", "fn": "norm", "x": _f([1.0, -3.0, 2.0]), "ord": "inf"},
    {"id": "unknown/norm/1/empty", "fn": "norm", "x": _f([]), "ord": 1},
    {"id": "unknown/norm/2/empty", "fn": "norm", "x": _f([]), "ord": "euclidean"},
    {"id": "unknown/norm/3", "fn": "norm", "x": _f([1.0, -3.0, 2.0]), "ord": 3},
    {"id": "unknown/norm/inf/int32/empty", "fn": "norm", "x": _f([], "int32"), "ord": "inf"},
    {"id": "unknown/norm/inf/int32", "fn": "norm", "x": _f([5, -7, 2], "int32"), "ord": "inf"},
    {"id": "unknown/normalize/inf", "fn": "normalize", "x": _f([1.0, -3.0, 2.0]), "ord": "inf"},
    {"id": "unknown/global_norm", "fn": "global_norm", "x": _f([1.0, -3.0, 2.0])},
    {
        "id": "unknown/clip_by_global_norm/empty",
        "fn": "clip_by_global_norm",
        "x": _f([]),
        "clip_norm": 1.0,
    },
    {
        "id": "unknown/rows/norm/inf",
        "fn": "norm",
        "x": _f([[1.0, -3.0], [2.0, 5.0]]),
        "ord": "inf",
        "axis": [0, 1],
    },
    {
        "id": "unknown/rows/norm/1",
        "fn": "norm",
        "x": _f([[1.0, -3.0], [2.0, 5.0]]),
        "ord": 1,
        "axis": [0, 1],
    },
    {
        "id": "unknown/rows/norm/2",
        "fn": "norm",
        "x": _f([[1.0, -3.0], [2.0, 5.0], [0.5, 1.0]]),
        "ord": 2,
        "axis": [0, 1],
    },
    {
        "id": "unknown/rows/norm/2/wide",
        "fn": "norm",
        "x": _f([[1.0, -3.0], [2.0, 5.0]]),
        "ord": 2,
        "axis": [1, 0],
    },
    {
        "id": "unknown/rows/norm/inf/empty",
        "fn": "norm",
        "x": _f(np.zeros((0, 2)).tolist()),
        "ord": "inf",
        "axis": [0, 1],
        "shape": [0, 2],
    },
    {
        "id": "unknown/rows/norm/inf/axis0/empty",
        "fn": "norm",
        "x": _f(np.zeros((0, 2)).tolist()),
        "ord": "inf",
        "axis": 0,
        "shape": [0, 2],
    },
    {
        "id": "unknown/rows/clip_by_norm/axes",
        "fn": "clip_by_norm",
        "x": _f([[1.0, -3.0], [2.0, 5.0]]),
        "clip_norm": 1.0,
        "axes": [1],
    },
    {
        "id": "unknown/rows/l2_normalize/axis0",
        "fn": "l2_normalize",
        "x": _f([[1.0, -3.0], [2.0, 5.0]]),
        "axis": 0,
    },
]


def _sub(dtype: str, k: float) -> float:
    """``k`` times the smallest normal number of ``dtype`` (subnormal for ``k < 1``)."""
    return float(np.finfo(dtype).tiny) * k


def _subnormal_cases(dt: str) -> list[dict[str, Any]]:
    tiny = float(np.finfo(dt).tiny)
    small = 1e-30 if dt == "float32" else 1e-300  # a normal number whose square is subnormal
    prod = 3e-25 if dt == "float32" else 3e-290  # times `c` below: a subnormal product
    c = 1e-16 if dt == "float32" else 1e-20
    s8 = _sub(dt, 1 / 8)
    x = [s8, -s8, 1.0, tiny, _sub(dt, 2.0**-20), -_sub(dt, 0.5)]
    u = [small, 1.0, -prod]
    squares = [small, -small, small * 3]  # every square subnormal: TF's norm is 0
    out = [
        {"fn": "clip_by_value", "x": _f(x, dt), "clip_value_min": -2.0, "clip_value_max": 2.0},
        {
            "fn": "clip_by_value",
            "x": _f([0.0, -0.0, 1.0, -1.0], dt),
            "clip_value_min": _f(s8, dt),
            "clip_value_max": _f(2 * s8, dt),
        },
        {
            "fn": "clip_by_value",
            "x": _f(x, dt),
            "clip_value_min": _f([-1.0, 0.0, 0.5, s8, 0.0, -s8], dt),
            "clip_value_max": 4.0,
        },
        {"fn": "clip_by_norm", "x": _f(x, dt), "clip_norm": 0.5},
        {"fn": "clip_by_norm", "x": _f(u, dt), "clip_norm": c},
        {"fn": "clip_by_norm", "x": _f(u, dt), "clip_norm": s8},
        {
            "fn": "clip_by_norm",
            "x": _f(
                [1e-20 if dt == "float32" else 1e-160, 1e-19 if dt == "float32" else 1e-159], dt
            ),
            "clip_norm": 1e-20 if dt == "float32" else 1e-160,
        },
        {"fn": "clip_by_norm", "x": _f(squares, dt), "clip_norm": 1.0},
        {"fn": "clip_by_norm", "x": _f(x, dt), "clip_norm": 0.5, "axes": [0]},
        {"fn": "clip_by_global_norm", "x": _f(u, dt), "clip_norm": c},
        {"fn": "clip_by_global_norm", "x": _f(x, dt), "clip_norm": 0.5},
        {"fn": "clip_by_global_norm", "x": _f(u, dt), "clip_norm": s8},
        {"fn": "clip_by_global_norm", "x": _f(squares, dt), "clip_norm": 1.0},
        {
            "fn": "clip_by_global_norm",
            "x": _f(u, dt),
            "clip_norm": 1.0,
            "use_norm": _f(1e30 if dt == "float32" else 1e300, dt),
        },
        {"fn": "global_norm", "x": _f(squares, dt)},
        {"fn": "global_norm", "x": _f(x, dt)},
        {"fn": "norm", "x": _f(squares, dt), "ord": "euclidean"},
        {"fn": "norm", "x": _f(x, dt), "ord": 1},
        {"fn": "norm", "x": _f([s8, 2 * s8], dt), "ord": "inf"},
        {"fn": "norm", "x": _f(squares, dt), "ord": 3},
        {"fn": "l2_normalize", "x": _f(x, dt)},
        {"fn": "l2_normalize", "x": _f(squares, dt)},
        {
            "fn": "l2_normalize",
            "x": _f([1e-25 if dt == "float32" else 1e-200] * 2, dt),
            "epsilon": s8,
        },
        {"fn": "normalize", "x": _f(x, dt), "ord": "euclidean"},
        {"fn": "normalize", "x": _f(squares, dt), "ord": 1},
    ]
    if dt == "float32":
        out += [
            {"fn": "clip_by_average_norm", "x": _f(u, dt), "clip_norm": c},
            {"fn": "clip_by_average_norm", "x": _f(x, dt), "clip_norm": 0.1},
            {"fn": "clip_by_average_norm", "x": _f(squares, dt), "clip_norm": 1.0},
        ]
    for i, case in enumerate(out):
        case["id"] = f"subnormal/{dt}/{case['fn']}/{i}"
    # ``t * c`` is exactly between the largest subnormal and the smallest normal number, in
    # the lower half: IEEE rounds it up to the smallest normal number, x86's FTZ (tininess
    # after rounding, unbounded exponent) flushes it; then ``/ |t|`` makes it normal.
    a, c = GAP[dt]
    out.append(
        {
            "id": f"subnormal/{dt}/clip_by_norm/rounding_gap",
            "fn": "clip_by_norm",
            "x": _f([float.fromhex(a)], dt),
            "clip_norm": _f(float.fromhex(c), dt),
        }
    )
    return out


#: ``(t, c)`` per dtype whose exact product lies in ``(tiny - ulp, tiny - ulp / 2]`` (``ulp``
#: the spacing just below ``tiny`` with an unbounded exponent), found by a random search.
GAP = {
    "float32": ("0x1.8306bep-1", "0x1.52aa0ep-126"),
    "float64": ("0x1.8306bdf37922ep-1", "0x1.52aa0f089a253p-1022"),
}


SUBNORMAL = _subnormal_cases("float32") + _subnormal_cases("float64")


def _np_dtype(name: str) -> Any:
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def _array(spec: dict[str, Any], shape: Any = None) -> np.ndarray:
    a = np.asarray(spec["values"], dtype=np.float64).astype(_np_dtype(spec["dtype"]))
    return a.reshape(shape) if shape is not None else a


def encode(a: Any) -> dict[str, Any]:
    """An array as ``{"dtype", "shape", "values"}``: floats as ``float.hex``, ints as ints."""
    a = np.asarray(a)
    name = "bfloat16" if a.dtype.name == "bfloat16" else a.dtype.name
    flat = a.reshape(-1)
    if a.dtype.kind in "iub":
        values: list[Any] = [int(v) for v in flat]
    else:
        values = [float(v).hex() for v in flat.astype(np.float64)]
    return {"dtype": name, "shape": list(a.shape), "values": values}


def decode(record: dict[str, Any]) -> np.ndarray:
    """The NumPy array (float64 for bfloat16) that :func:`encode` wrote."""
    dt = "float64" if record["dtype"] == "bfloat16" else record["dtype"]
    if np.dtype(dt).kind in "iub":
        flat = np.asarray(record["values"], dtype=dt)
    else:
        flat = np.asarray([float.fromhex(v) for v in record["values"]], dtype=np.float64)
    return flat.astype(dt).reshape(record["shape"])


def _operand(tf: Any, value: Any, like: Any) -> Any:
    """A case's operand for TF: a Python number, or a tensor of the spec's dtype."""
    if isinstance(value, dict):
        return tf.constant(_array(value))
    return value


def run_tf(case: dict[str, Any]) -> Any:
    """TF's result of one case (a NumPy array, or a list for ``clip_by_global_norm``)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    x = tf.constant(_array(case["x"], case.get("shape")))
    fn = case["fn"]
    ord_ = case.get("ord", "euclidean")
    ord_ = np.inf if ord_ == "inf" else ord_
    axis = case.get("axis")
    axis = tuple(axis) if isinstance(axis, list) else axis
    if fn == "clip_by_value":
        lo = _operand(tf, case["clip_value_min"], x)
        hi = _operand(tf, case["clip_value_max"], x)
        return tf.clip_by_value(x, lo, hi).numpy()
    if fn == "clip_by_norm":
        return tf.clip_by_norm(x, _operand(tf, case["clip_norm"], x), axes=case.get("axes")).numpy()
    if fn == "clip_by_average_norm":
        return tf.compat.v1.clip_by_average_norm(x, _operand(tf, case["clip_norm"], x)).numpy()
    if fn == "clip_by_global_norm":
        use = case.get("use_norm")
        use_norm = None if use is None else tf.constant(_array(use))
        clipped, _ = tf.clip_by_global_norm([x], case["clip_norm"], use_norm=use_norm)
        return clipped[0].numpy()
    if fn == "global_norm":
        return tf.linalg.global_norm([x]).numpy()
    if fn == "norm":
        return tf.norm(x, ord=ord_, axis=axis).numpy()
    if fn == "l2_normalize":
        return tf.math.l2_normalize(
            x, axis=axis, epsilon=_operand(tf, case.get("epsilon", 1e-12), x)
        ).numpy()
    if fn == "normalize":
        return tf.linalg.normalize(x, ord=ord_, axis=axis)[0].numpy()
    raise ValueError(fn)


def main(out: Path) -> None:
    """Write every case, with TF's result, to ``out``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    cases = {}
    for case in CAST + UNKNOWN + SUBNORMAL:
        record = {k: v for k, v in case.items() if k != "id"}
        record["tf"] = encode(run_tf(case))
        cases[case["id"]] = record
    doc = {
        "script": "tests/data/make_value_paths.py",
        "tensorflow": tf.__version__,
        "numpy": np.__version__,
        "cases": cases,
    }
    out.write_text(json.dumps(doc, indent=1, allow_nan=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("value_paths.json"))
