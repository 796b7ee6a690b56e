"""Keras 3 weight constraints, run live: the reference values of ``test_constraints.py``.

Usage: ``python tests/data/make_constraints.py [OUT.npz]`` (default: ``constraints.npz`` next
to this script). Needs TensorFlow 2.21 with Keras 3 (TF backend); the tests read the committed
file, and with ``--live-tf`` also run this script and check the file is still what Keras gives.

Two parts:

* ``fn/<case>``: ``keras.constraints.<Class>(**kwargs)(w)`` for each case of :data:`CASES` on
  the input ``in/<input>`` of :data:`INPUTS` (bfloat16 inputs and outputs are stored as
  float32, which holds them exactly; ``dtype/<input>`` names the dtype). ``NonNeg-legacy``
  is tf.keras 2's ``NonNeg`` (``w * cast(w >= 0, floatx)``, Keras 2.15's
  ``keras/constraints.py``), written with TF ops here because tf_keras is not installed; the
  cast is to ``w``'s dtype.
* ``train/<model>/<optimizer>/<i>``: the weights (Keras's layout; kernels ``(in, out)``) of a
  two-layer tanh network with the constraints of :data:`MODELS` after ``STEPS`` steps of
  ``optimizer.apply_gradients`` (the path ``model.fit`` takes, which applies each
  ``variable.constraint`` after the update), from the inputs ``x``, ``y``, ``w0``...
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ADAM_EPSILON", "CASES", "INPUTS", "LR", "MODELS", "STEPS", "inputs", "main"]

f32 = np.float32

#: Steps of every training run, and each optimizer's learning rate.
STEPS = 5
LR = {"sgd": 0.1, "adam": 0.05}

#: Adam's epsilon, negligible next to ``sqrt(v)`` (see make_keras_clipping.py).
ADAM_EPSILON = 1e-12


def _inputs() -> dict[str, tuple[str, np.ndarray]]:
    rng = np.random.default_rng(19)
    m = (rng.standard_normal((5, 4)) * 1.5).astype(f32)
    m[:, 2] = 0.0  # an all-zero column: its norm is 0
    m[:, 3] *= 0.05  # a column well under every bound
    t = (rng.standard_normal((2, 3, 4)) * 0.7).astype(f32)
    edge = np.array(
        [[np.nan, 1.0, -0.0, 2.0], [1.0, np.inf, 0.0, -3.0], [2.0, 3.0, -np.inf, -1e-30]], f32
    )
    return {
        "m32": ("float32", m),
        "m64": ("float64", m.astype(np.float64) * (1 + 1e-9)),
        "m16": ("float16", m.astype(np.float16)),
        "mbf16": ("bfloat16", m),  # rounded to bfloat16 by the script and the tests
        "mint": ("int32", np.round(m * 3).astype(np.int32)),
        "t32": ("float32", t),
        "edge": ("float32", edge),
        "vec": ("float32", np.array([3.0, -4.0, 0.5], f32)),
        # norms that underflow to 0: the result is w / epsilon, which shows epsilon's rounding
        # (float16: 2**-24 / 1.19e-7 = 0.5; 1e-7 unrounded would give 0.596)
        "tiny16": ("float16", np.array([[2.0**-24], [0.0]], np.float16)),
        "tiny32": ("float32", np.array([[1e-30], [0.0]], f32)),
        "tinybf16": ("bfloat16", np.array([[1e-30], [0.0]], f32)),
    }


#: input name: (dtype name, values).
INPUTS = _inputs()

#: case name: (Keras class, constructor kwargs, input name).
CASES: dict[str, tuple[str, dict[str, Any], str]] = {}
for _name in ("m32", "m64", "m16", "mbf16", "mint"):
    CASES[f"MaxNorm-default-{_name}"] = ("MaxNorm", {}, _name)
    CASES[f"UnitNorm-default-{_name}"] = ("UnitNorm", {}, _name)
    CASES[f"MinMaxNorm-default-{_name}"] = ("MinMaxNorm", {}, _name)
    CASES[f"MinMaxNorm-rate-{_name}"] = (
        "MinMaxNorm",
        {"min_value": 0.5, "max_value": 1.5, "rate": 0.3},
        _name,
    )
    CASES[f"NonNeg-{_name}"] = ("NonNeg", {}, _name)
    if _name != "mint":  # tf.keras 2 compares with 0.0: TF refuses an int32 ``w``
        CASES[f"NonNeg-legacy-{_name}"] = ("NonNeg-legacy", {}, _name)
CASES.update(
    {
        "MaxNorm-axis1": ("MaxNorm", {"max_value": 0.5, "axis": 1}, "m32"),
        "MaxNorm-negative": ("MaxNorm", {"max_value": -1.0}, "m32"),
        "MaxNorm-int-bound": ("MaxNorm", {"max_value": 1}, "m32"),
        "MaxNorm-axes01": ("MaxNorm", {"max_value": 1.0, "axis": [0, 1]}, "t32"),
        "MaxNorm-axisNone": ("MaxNorm", {"max_value": 1.0, "axis": None}, "t32"),
        "MaxNorm-axis-1": ("MaxNorm", {"max_value": 0.8, "axis": -1}, "t32"),
        "MaxNorm-axes-empty": ("MaxNorm", {"max_value": 0.5, "axis": []}, "t32"),
        "MaxNorm-edge": ("MaxNorm", {"max_value": 2.0}, "edge"),
        "MaxNorm-vec": ("MaxNorm", {"max_value": 2.0}, "vec"),
        "UnitNorm-axis1": ("UnitNorm", {"axis": 1}, "m32"),
        "UnitNorm-axes12": ("UnitNorm", {"axis": [1, 2]}, "t32"),
        "UnitNorm-edge": ("UnitNorm", {}, "edge"),
        "MinMaxNorm-swapped": ("MinMaxNorm", {"min_value": 2.0, "max_value": 1.0}, "m32"),
        "MinMaxNorm-axisNone": (
            "MinMaxNorm",
            {"min_value": 0.2, "max_value": 0.9, "rate": 0.7, "axis": None},
            "t32",
        ),
        "MinMaxNorm-edge": ("MinMaxNorm", {"min_value": 0.5, "max_value": 1.0}, "edge"),
        "NonNeg-edge": ("NonNeg", {}, "edge"),
        "UnitNorm-tiny16": ("UnitNorm", {}, "tiny16"),
        "UnitNorm-tiny32": ("UnitNorm", {}, "tiny32"),
        "UnitNorm-tinybf16": ("UnitNorm", {}, "tinybf16"),
        "MaxNorm-tiny16": ("MaxNorm", {"max_value": 1.0}, "tiny16"),
        "NonNeg-legacy-edge": ("NonNeg-legacy", {}, "edge"),
    }
)

#: model name: the constraints of (kernel 0, bias 0, kernel 1, bias 1), as (class, kwargs).
MODELS: dict[str, list[tuple[str, dict[str, Any]] | None]] = {
    "maxnorm-nonneg": [("MaxNorm", {"max_value": 0.6}), ("NonNeg", {}), None, None],
    "unitnorm-minmax": [
        ("UnitNorm", {}),
        None,
        ("MinMaxNorm", {"min_value": 0.3, "max_value": 0.5, "rate": 0.5}),
        ("NonNeg", {}),
    ],
    "none": [None, None, None, None],
}


def inputs() -> dict[str, np.ndarray]:
    """The training data and initial weights (Keras's layout: kernels are (in, out))."""
    rng = np.random.default_rng(7)
    return {
        "x": rng.standard_normal((16, 4)).astype(f32),
        "y": (rng.standard_normal((16, 2)) * 3).astype(f32),
        "w0": (rng.standard_normal((4, 3)) * 0.5).astype(f32),
        "b0": (rng.standard_normal(3) * 0.1).astype(f32),
        "w1": (rng.standard_normal((3, 2)) * 0.5).astype(f32),
        "b1": (rng.standard_normal(2) * 0.1).astype(f32),
    }


def _constraint(name: str, kwargs: dict[str, Any]) -> Any:
    import keras
    import tensorflow as tf

    if name == "NonNeg-legacy":
        return lambda w: w * tf.cast(tf.greater_equal(w, 0.0), w.dtype)
    return getattr(keras.constraints, name)(**kwargs)


def _tf_input(dtype: str, values: np.ndarray) -> Any:
    import tensorflow as tf

    return tf.constant(values, dtype=dtype) if dtype == "bfloat16" else tf.constant(values)


def run_functions() -> dict[str, np.ndarray]:
    """``fn/<case>``, ``in/<input>`` and ``dtype/<input>`` (see the module docstring)."""
    import tensorflow as tf

    out: dict[str, np.ndarray] = {}
    for name, (dtype, values) in INPUTS.items():
        t = _tf_input(dtype, values)
        stored = t if dtype != "bfloat16" else tf.cast(t, tf.float32)
        out[f"in/{name}"] = np.asarray(stored)
        out[f"dtype/{name}"] = np.asarray(dtype)
    for case, (cls, kwargs, inp) in CASES.items():
        dtype, values = INPUTS[inp]
        r = _constraint(cls, kwargs)(_tf_input(dtype, values))
        if r.dtype == tf.bfloat16:
            r = tf.cast(r, tf.float32)
        out[f"fn/{case}"] = np.asarray(r)
    return out


def run_training(data: dict[str, np.ndarray], model_name: str, optimizer: str) -> list:
    """The weights after ``STEPS`` steps with the constraints of ``MODELS[model_name]``."""
    import keras
    import tensorflow as tf

    cons = [None if c is None else _constraint(*c) for c in MODELS[model_name]]
    layers = [
        keras.layers.Dense(
            3, activation="tanh", kernel_constraint=cons[0], bias_constraint=cons[1]
        ),
        keras.layers.Dense(2, kernel_constraint=cons[2], bias_constraint=cons[3]),
    ]
    model = keras.Sequential([keras.Input((4,)), *layers])
    for layer, w, b in zip(layers, ("w0", "w1"), ("b0", "b1"), strict=True):
        layer.set_weights([data[w], data[b]])
    if optimizer == "sgd":
        opt = keras.optimizers.SGD(learning_rate=LR[optimizer])
    else:
        opt = keras.optimizers.Adam(learning_rate=LR[optimizer], epsilon=ADAM_EPSILON)
    x, y = tf.constant(data["x"]), tf.constant(data["y"])
    for _ in range(STEPS):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return [np.asarray(v) for v in model.trainable_variables]


def main(out: Path) -> None:
    """Write every reference value, with the versions that produced them, to ``out``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    arrays: dict[str, np.ndarray] = {
        "provenance": np.asarray(
            f"tensorflow {tf.__version__}, keras {keras.__version__} "
            f"({keras.backend.backend()} backend), numpy {np.__version__}; "
            "tests/data/make_constraints.py"
        )
    }
    arrays.update(run_functions())
    data = inputs()
    arrays.update(data)
    for model_name in MODELS:
        for optimizer in LR:
            for i, w in enumerate(run_training(data, model_name, optimizer)):
                arrays[f"train/{model_name}/{optimizer}/{i}"] = w
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("constraints.npz"))
