"""Adam's epsilon in TF 1.x and Keras 3, run live: the reference of ``test_adam_epsilon.py``.

Usage: ``python tests/data/make_adam_epsilon.py [OUT.npz]`` (default: ``adam_epsilon.npz`` next
to this script). Needs TensorFlow 2.21 (Keras 3); the tests run it in a subprocess when
TensorFlow is installed and read the committed file otherwise.

One float32 variable ``w0`` takes ``STEPS`` steps of ``tf.compat.v1.train.AdamOptimizer`` (graph
mode, a ``tf.compat.v1.Session``) and of ``keras.optimizers.Adam`` (eager, ``apply_gradients``),
each from the same gradient ``GRAD`` at every step, with ``LR``, ``BETA_1``, ``BETA_2`` and
``EPSILON``. The file holds the inputs and the variable after each step (``tf1/<k>`` and
``keras/<k>`` for step ``k`` = 1 .. ``STEPS``), plus the library versions.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

__all__ = [
    "BETA_1",
    "BETA_2",
    "EPSILON",
    "GRAD",
    "LR",
    "STEPS",
    "W0",
    "main",
    "run_keras",
    "run_tf1",
]

#: Steps of every run.
STEPS = 3
LR = 0.1
BETA_1 = 0.9
BETA_2 = 0.999
#: TF 1.x's default epsilon; large next to the smaller gradients, so its placement shows.
EPSILON = 1e-8
#: Gradients from 1e-9 (below epsilon) to 1: the placement matters for the small ones only.
GRAD = np.array([1e-9, 1e-8, 1e-7, 1e-6, 1e-3, 1.0], dtype=np.float32)
W0 = np.zeros(GRAD.shape, dtype=np.float32)


def run_tf1() -> list[np.ndarray]:
    """The variable after each step of ``tf.compat.v1.train.AdamOptimizer``."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.Variable(W0)
        opt = tf.compat.v1.train.AdamOptimizer(LR, beta1=BETA_1, beta2=BETA_2, epsilon=EPSILON)
        step = opt.apply_gradients([(tf.constant(GRAD), w)])
        out = []
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(STEPS):
                sess.run(step)
                out.append(sess.run(w))
    return out


def run_keras() -> list[np.ndarray]:
    """The variable after each step of ``keras.optimizers.Adam`` (Keras 3)."""
    import keras
    import tensorflow as tf

    w = tf.Variable(W0)
    opt = keras.optimizers.Adam(LR, beta_1=BETA_1, beta_2=BETA_2, epsilon=EPSILON)
    out = []
    for _ in range(STEPS):
        opt.apply_gradients([(tf.constant(GRAD), w)])
        out.append(w.numpy())
    return out


def main(out: Path) -> None:
    """Run both and write ``out``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import keras
    import tensorflow as tf

    arrays: dict[str, np.ndarray] = {
        "grad": GRAD,
        "w0": W0,
        "hyper": np.array([LR, BETA_1, BETA_2, EPSILON]),
        "versions": np.array([f"tensorflow {tf.__version__}", f"keras {keras.__version__}"]),
    }
    for k, w in enumerate(run_tf1(), 1):
        arrays[f"tf1/{k}"] = w
    for k, w in enumerate(run_keras(), 1):
        arrays[f"keras/{k}"] = w
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("adam_epsilon.npz"))
