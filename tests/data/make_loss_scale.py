"""Keras 3's ``LossScaleOptimizer`` under ``mixed_float16``, run live: test_loss_scale.py's data.

Usage: ``python tests/data/make_loss_scale.py [OUT.npz]`` (default: ``loss_scale.npz`` next to
this script). Needs TensorFlow 2.21 with Keras 3; the tests read the committed file, and with
``--live-tf`` also run this script and check the file is still what Keras gives.

A two-layer tanh network (4 -> 3 -> 2) under the ``mixed_float16`` policy (float32 variables,
float16 computation) takes ``STEPS`` steps of ``LossScaleOptimizer(SGD(learning_rate=LR,
global_clipnorm=CLIP), initial_scale=INITIAL_SCALE, dynamic_growth_steps=GROWTH)`` with a
float32 mean squared error, in a custom loop (``scale_loss``, ``GradientTape``,
``apply_gradients``). Keras's order is: unscale the gradients, skip the step (and halve the
scale) when one is not finite, and only then let the inner optimizer clip and update. The
targets are large enough that the first steps' scaled float16 gradients overflow. The file
holds the inputs and, after each step ``k``, the weights ``step<k>/<i>`` (kernels ``(in,
out)``) and the loss scale ``scale<k>``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

__all__ = ["CLIP", "GROWTH", "INITIAL_SCALE", "LR", "STEPS", "inputs", "main", "run_keras"]

STEPS = 8
LR = 0.1
CLIP = 0.5
INITIAL_SCALE = 2.0**15
GROWTH = 3


def inputs() -> dict[str, np.ndarray]:
    """The data and the initial weights (Keras's layout)."""
    rng = np.random.default_rng(3)
    f32 = np.float32
    return {
        "x": rng.standard_normal((16, 4)).astype(f32),
        "y": (rng.standard_normal((16, 2)) * 6).astype(f32),
        "w0": (rng.standard_normal((4, 3)) * 0.5).astype(f32),
        "b0": (rng.standard_normal(3) * 0.1).astype(f32),
        "w1": (rng.standard_normal((3, 2)) * 0.5).astype(f32),
        "b1": (rng.standard_normal(2) * 0.1).astype(f32),
    }


def run_keras(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Weights and loss scale after each step (see the module docstring)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        layers = [keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(2)]
        model = keras.Sequential([keras.Input((4,)), *layers])
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    for layer, w, b in zip(layers, ("w0", "w1"), ("b0", "b1"), strict=True):
        layer.set_weights([data[w], data[b]])
    opt = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(learning_rate=LR, global_clipnorm=CLIP),
        initial_scale=INITIAL_SCALE,
        dynamic_growth_steps=GROWTH,
    )
    x, y = tf.constant(data["x"]), tf.constant(data["y"])
    out: dict[str, np.ndarray] = {}
    for k in range(STEPS):
        with tf.GradientTape() as tape:
            pred = model(x)
            assert pred.dtype == tf.float16
            loss = tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - y))
            scaled = opt.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        for i, v in enumerate(model.trainable_variables):
            out[f"step{k}/{i}"] = np.asarray(v)
        out[f"scale{k}"] = np.asarray(opt.dynamic_scale)
    return out


def main(out: Path) -> None:
    """Write the inputs, Keras's weights and scales, and their provenance to ``out``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    data = inputs()
    arrays = dict(data)
    arrays.update(run_keras(data))
    arrays["provenance"] = np.asarray(
        f"tensorflow {tf.__version__}, keras {keras.__version__} ({keras.backend.backend()}), "
        f"numpy {np.__version__}; tests/data/make_loss_scale.py"
    )
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("loss_scale.npz"))
