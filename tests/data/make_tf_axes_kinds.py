"""TF's answers to unusual ``axis``/``axes`` values: the reference of ``test_axes_kinds.py``.

Usage: ``python tests/data/make_tf_axes_kinds.py [OUT.json]`` (default: ``tf_axes_kinds.json``
next to this script). Needs TensorFlow 2.21 with Keras 3 (TF backend), NumPy, torch and JAX;
runs in eager mode on the CPU.

Each case of :data:`CASES` passes one value of :data:`VALUES` as the axes of one function of
:data:`FUNCTIONS` on a float32 input of rank 1, 2 or 3 (:data:`INPUTS`): ``tf.clip_by_norm``'s
``axes`` on every rank and ``tf.norm``'s ``axis`` on ranks 1 and 3 (TF's two rules: a
reduction's axes, and ``tf.norm``'s Python check before its reduction); on one rank each (anyclip
parses all of them in one place, so one rank each keeps the test short)
``tf.math.l2_normalize``'s and ``tf.linalg.normalize``'s ``axis`` (rank 2) and Keras 3's
``MaxNorm``'s (rank 2), ``UnitNorm``'s (rank 3) and ``MinMaxNorm``'s (rank 1).
``tf.compat.v1.clip_by_average_norm`` takes no axes. The values are those a fuzzing round found
worth checking (NumPy scalars and arrays, bools, ``range``, mixed sequences, torch and JAX
arrays, floats, repeated and out-of-range axes, ``[]``, ``None``) and a few neighbours that
show TF's rule (a NumPy float that is not whole, a list that is not rectangular, an int past
int32, a string, a set).

The file records, per case, the function, the rank, the value id, and what TF returned
(``tf_result``: ``{"array": data, "dtype": name}``, or ``{"list": [...]}`` for ``normalize``'s
pair) or raised (``tf_class``, ``tf_message``).

A value is JSON (see :func:`decode`): a number, bool, string, ``None`` or list is passed as it
is (a list's items decoded in turn); ``{"tuple": [...]}`` is a tuple, ``{"range": [start,
stop]}`` a ``range``, ``{"set": [...]}`` a set; ``{"np": value, "dtype": name}`` a NumPy scalar,
``{"nparray": data, "dtype": name}`` a NumPy array; ``{"torch": data, "dtype": name}`` and
``{"jax": data, "dtype": name}`` a CPU torch tensor and a JAX array.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["CASES", "FUNCTIONS", "INPUTS", "VALUES", "case_ids", "decode", "encode", "main"]

#: The inputs by rank: float32, norms above and below the bounds (2.0; 1.0 for MinMaxNorm).
INPUTS: dict[int, list[Any]] = {
    1: [3.0, -4.0, 1.5],
    2: [[3.0, -4.0, 1.0], [0.5, 0.25, -0.5]],
    3: [[[3.0, -4.0], [1.0, 0.5], [0.25, -2.0]], [[0.1, 0.2], [-6.0, 1.5], [0.0, 0.75]]],
}

#: ``id -> value`` (JSON, see :func:`decode`).
VALUES: dict[str, Any] = {
    "None": None,
    "int-1": 1,
    "int-neg1": -1,
    "int-3": 3,
    "int-neg4": -4,
    "int-2pow40": 2**40,
    "true": True,
    "false": False,
    "float-1": 1.0,
    "str-0": "0",
    "list-empty": [],
    "list-0-0": [0, 0],
    "list-0-neg2": [0, -2],
    "list-1-0": [1, 0],
    "list-float-1": [1.0],
    "list-0-float": [0, 1.0],
    "list-nested": [[0]],
    "list-ragged": [[0], 1],
    "list-true-false": [True, False],
    "tuple-true-0": {"tuple": [True, 0]},
    "tuple-0-npint": {"tuple": [0, {"np": -1, "dtype": "int64"}]},
    "list-npfloat": [{"np": 1.0, "dtype": "float64"}],
    "range-0-2": {"range": [0, 2]},
    "set-0": {"set": [0]},
    "np-int64-neg1": {"np": -1, "dtype": "int64"},
    "np-uint8-1": {"np": 1, "dtype": "uint8"},
    "np-bool-true": {"np": True, "dtype": "bool"},
    "np-float64-1": {"np": 1.0, "dtype": "float64"},
    "np-float64-1.5": {"np": 1.5, "dtype": "float64"},
    "nparray-0-1": {"nparray": [0, 1], "dtype": "int64"},
    "nparray-0d": {"nparray": 0, "dtype": "int64"},
    "nparray-2d": {"nparray": [[0]], "dtype": "int32"},
    "nparray-float": {"nparray": [0.0, 1.0], "dtype": "float64"},
    "nparray-empty": {"nparray": [], "dtype": "int64"},
    "torch-0": {"torch": [0], "dtype": "int64"},
    "jax-1": {"jax": 1, "dtype": "int32"},
}

#: anyclip's function -> how TF (or Keras) calls it, and the ranks it is run on.
FUNCTIONS: dict[str, tuple[str, tuple[int, ...]]] = {
    "clip_by_norm": ("tf.clip_by_norm(t, 2.0, axes=a)", (1, 2, 3)),
    "norm": ("tf.norm(t, axis=a)", (1, 3)),
    "l2_normalize": ("tf.math.l2_normalize(t, axis=a)", (2,)),
    "normalize": ("tf.linalg.normalize(t, axis=a)", (2,)),
    "max_norm": ("keras.constraints.MaxNorm(2.0, axis=a)(t)", (2,)),
    "unit_norm": ("keras.constraints.UnitNorm(axis=a)(t)", (3,)),
    "min_max_norm": ("keras.constraints.MinMaxNorm(1.0, 2.0, 1.0, axis=a)(t)", (1,)),
}

#: ``(id, function, rank, value id)``.
CASES: list[tuple[str, str, int, str]] = [
    (f"{fn}-r{rank}-{vid}", fn, rank, vid)
    for fn, (_, ranks) in FUNCTIONS.items()
    for rank in ranks
    for vid in VALUES
]


def case_ids() -> list[str]:
    """The ids of :data:`CASES`, in order."""
    return [c[0] for c in CASES]


def decode(value: Any, build: dict[str, Any]) -> Any:
    """A JSON value as the axes to pass.

    ``build`` maps ``"torch"`` and ``"jax"`` to functions ``(data, dtype)`` making that
    library's array (the test skips a value whose library is missing).
    """
    import numpy as np

    if isinstance(value, list):
        return [decode(v, build) for v in value]
    if not isinstance(value, dict):
        return value
    if "tuple" in value:
        return tuple(decode(v, build) for v in value["tuple"])
    if "range" in value:
        return range(*value["range"])
    if "set" in value:
        return set(value["set"])
    if "np" in value:
        return np.dtype(value["dtype"]).type(value["np"])
    if "nparray" in value:
        return np.asarray(value["nparray"], dtype=value["dtype"])
    for kind in ("torch", "jax"):
        if kind in value:
            return build[kind](value[kind], value["dtype"])
    msg = f"unknown value encoding {value!r}"
    raise ValueError(msg)


def encode(result: Any) -> Any:
    """What TF returned, as JSON: ``{"array": data, "dtype": name}`` or ``{"list": [...]}``."""
    import numpy as np

    if isinstance(result, (list, tuple)):
        return {"list": [encode(r) for r in result]}
    return {"array": np.asarray(result).tolist(), "dtype": result.dtype.name}


def _calls() -> dict[str, Any]:
    import keras
    import tensorflow as tf

    return {
        "clip_by_norm": lambda t, a: tf.clip_by_norm(t, 2.0, axes=a),
        "norm": lambda t, a: tf.norm(t, axis=a),
        "l2_normalize": lambda t, a: tf.math.l2_normalize(t, axis=a),
        "normalize": lambda t, a: tf.linalg.normalize(t, axis=a),
        "max_norm": lambda t, a: keras.constraints.MaxNorm(2.0, axis=a)(t),
        "unit_norm": lambda t, a: keras.constraints.UnitNorm(axis=a)(t),
        "min_max_norm": lambda t, a: keras.constraints.MinMaxNorm(1.0, 2.0, 1.0, axis=a)(t),
    }


def measure() -> dict[str, dict[str, Any]]:
    """Run every case in TF (eager) and record its result or exception."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import warnings

    import jax.numpy as jnp
    import numpy as np
    import tensorflow as tf
    import torch

    build = {
        "torch": lambda data, dtype: torch.tensor(data, dtype=getattr(torch, dtype)),
        "jax": lambda data, dtype: jnp.asarray(data, dtype=dtype),
    }
    calls = _calls()
    out: dict[str, dict[str, Any]] = {}
    for case_id, function, rank, vid in CASES:
        t = tf.constant(np.asarray(INPUTS[rank], dtype=np.float32))
        record: dict[str, Any] = {"function": function, "rank": rank, "value": vid}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = calls[function](t, decode(VALUES[vid], build))
        except Exception as exc:  # noqa: BLE001 - what TF raises is the measurement
            record.update(tf_result=None, tf_class=type(exc).__name__, tf_message=str(exc))
        else:
            record.update(tf_result=encode(result), tf_class=None, tf_message=None)
        out[case_id] = record
    return out


def main(out: Path) -> None:
    """Measure every case and write the JSON file ``out``."""
    import keras
    import numpy as np
    import tensorflow as tf

    data = {
        "provenance": {
            "script": "tests/data/make_tf_axes_kinds.py",
            "tensorflow": str(tf.__version__),
            "keras": str(keras.__version__),
            "numpy": str(np.__version__),
            "mode": "eager, CPU",
        },
        "values": VALUES,
        "cases": measure(),
    }
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("tf_axes_kinds.json"))
