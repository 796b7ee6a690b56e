"""Keras optimizer clipping, run live: the reference weights of ``test_keras_clipping.py``.

Usage: ``python tests/data/make_keras_clipping.py [OUT.npz]`` (default: ``keras_clipping.npz``
next to this script). Needs TensorFlow 2.21 (Keras 3); the tests run it in a subprocess when
TensorFlow is installed and read the committed file otherwise.

A two-layer tanh network (4 -> 3 -> 2, mean squared error) starts from fixed weights and takes
``STEPS`` steps of ``keras.optimizers.SGD`` or ``Adam`` with one of Keras's clipping options
(``clipnorm``, ``clipvalue``, ``global_clipnorm``, or none), through
``optimizer.apply_gradients``, the path ``model.fit`` takes. The file holds the inputs
(``x``, ``y``, ``w0``...) and, for each case ``<optimizer>-<option>``, the final weights
(``<case>/0`` ... ``<case>/3``: kernel and bias of each layer, Keras's layout).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

__all__ = ["ADAM_EPSILON", "CASES", "LR", "STEPS", "inputs", "main", "run_keras"]

#: Steps of every run.
STEPS = 5

#: Learning rate of each optimizer.
LR = {"sgd": 0.1, "adam": 0.05}

#: Adam's epsilon, here and in the ports. Keras adds it to ``sqrt(v)`` (before the bias
#: correction), torch and optax to ``sqrt(v_hat)`` (after it): the two updates agree only when
#: epsilon is negligible next to ``sqrt(v)``, which clipped (small) gradients are not for
#: Keras's default 1e-7. A negligible epsilon compares the clipping, not that difference.
ADAM_EPSILON = 1e-12

#: Each option's value: all below the gradients' norms and magnitudes, so each one clips.
CASES = {
    "none": {},
    "clipnorm": {"clipnorm": 0.05},
    "clipvalue": {"clipvalue": 0.02},
    "global_clipnorm": {"global_clipnorm": 0.08},
}


def inputs() -> dict[str, np.ndarray]:
    """The data and the initial weights (Keras's layout: kernels are (in, out))."""
    rng = np.random.default_rng(11)
    f32 = np.float32
    return {
        "x": rng.standard_normal((16, 4)).astype(f32),
        "y": (rng.standard_normal((16, 2)) * 3).astype(f32),
        "w0": (rng.standard_normal((4, 3)) * 0.5).astype(f32),
        "b0": (rng.standard_normal(3) * 0.1).astype(f32),
        "w1": (rng.standard_normal((3, 2)) * 0.5).astype(f32),
        "b1": (rng.standard_normal(2) * 0.1).astype(f32),
    }


def run_keras(data: dict[str, np.ndarray], optimizer: str, options: dict[str, float]) -> list:
    """The weights after ``STEPS`` steps of Keras's ``optimizer`` with ``options``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    layers = [keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(2)]
    model = keras.Sequential([keras.Input((4,)), *layers])
    for layer, w, b in zip(layers, ("w0", "w1"), ("b0", "b1"), strict=True):
        layer.set_weights([data[w], data[b]])
    if optimizer == "sgd":
        opt = keras.optimizers.SGD(learning_rate=LR[optimizer], **options)
    else:
        opt = keras.optimizers.Adam(learning_rate=LR[optimizer], epsilon=ADAM_EPSILON, **options)
    x, y = tf.constant(data["x"]), tf.constant(data["y"])
    for _ in range(STEPS):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return [np.asarray(v) for v in model.trainable_variables]


def main(out: Path) -> None:
    """Write the inputs and every case's final weights to ``out``."""
    data = inputs()
    arrays = dict(data)
    for optimizer in LR:
        for case, options in CASES.items():
            for i, w in enumerate(run_keras(data, optimizer, options)):
                arrays[f"{optimizer}-{case}/{i}"] = w
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("keras_clipping.npz"))
