"""Gradients of real TensorFlow 2.21 models, and what TF's global-norm clipping makes of them.

Random inputs give every backend an easy time: values of one magnitude, in a few arrays. Real
gradients have a wide dynamic range, many small arrays (biases, norms) next to large ones, and
embeddings (TF's ``IndexedSlices``, whose global norm counts every looked-up row, repeated ones
included). This module trains four small Keras 3 models with TensorFlow 2.21 for a few steps,
clipping with ``tf.clip_by_global_norm`` as real training code does, and records for every
step the raw gradients (an ``IndexedSlices`` gradient as its ``values``, which is what TF's
global norm and clipping work on), ``tf.linalg.global_norm`` and ``tf.clip_by_global_norm``.

- ``lstm_lm``: embedding (500 x 32), LSTM (64), softmax over 500 words (float32);
- ``convnet``: two 3 x 3 convolutions, global average pooling, a dense layer (float32, and
  ``mixed_float16`` as ``convnet_mixed``: float16 compute, float32 variables);
- ``transformer``: one pre-norm transformer block (2-head attention, 64-wide MLP) (float32);
- ``mlp_policy``: a PPO-style tanh MLP policy head (float32, and float16 and bfloat16 variables
  as ``mlp_policy_float16`` / ``mlp_policy_bfloat16``).

Maintainers only (needs ``tensorflow-cpu==2.21.0``)::

    python -m anyclip_conformance.real_models           # rewrites data/real_gradients.npz
    python -m anyclip_conformance.real_models --check   # fails if the file differs

The tests read the file through :func:`anyclip_conformance.reference.load_real_gradients`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CLIP_NORM", "MODELS", "STEPS", "main"]

#: Training steps recorded per model.
STEPS = 4
#: The ``clip_norm`` of every step (real recipes use 0.25 to 5; the norms here span 0.3 to 40).
CLIP_NORM = 0.25
#: Model name -> Keras dtype policy.
MODELS = {
    "lstm_lm": "float32",
    "convnet": "float32",
    "convnet_mixed": "mixed_float16",
    "transformer": "float32",
    "mlp_policy": "float32",
    "mlp_policy_float16": "float16",
    "mlp_policy_bfloat16": "bfloat16",
}
SEED = 20261125
OUT = Path(__file__).parent / "data" / "real_gradients.npz"


def _model_and_batch(name: str, keras: Any, rng: np.random.Generator) -> tuple[Any, Any, Any]:
    layers = keras.layers
    if name == "lstm_lm":
        vocab = 500
        model = keras.Sequential(
            [
                layers.Embedding(vocab, 32),
                layers.LSTM(64, return_sequences=True),
                layers.Dense(vocab),
            ]
        )
        ids = rng.integers(0, vocab, size=(8, 13))
        return model, ids[:, :-1], ids[:, 1:]
    if name.startswith("convnet"):
        model = keras.Sequential(
            [
                layers.Conv2D(8, 3, activation="relu"),
                layers.Conv2D(16, 3, activation="relu"),
                layers.GlobalAveragePooling2D(),
                layers.Dense(10),
            ]
        )
        x = rng.standard_normal((8, 16, 16, 3)).astype(np.float32)
        return model, x, rng.integers(0, 10, size=(8,))
    if name == "transformer":
        inputs = keras.Input((10, 32))
        h = layers.LayerNormalization()(inputs)
        h = inputs + layers.MultiHeadAttention(num_heads=2, key_dim=16)(h, h)
        m = layers.LayerNormalization()(h)
        m = layers.Dense(32)(layers.Dense(64, activation="gelu")(m))
        out = layers.Dense(7)(layers.GlobalAveragePooling1D()(h + m))
        x = rng.standard_normal((4, 10, 32)).astype(np.float32)
        return keras.Model(inputs, out), x, rng.integers(0, 7, size=(4,))
    model = keras.Sequential(
        [layers.Dense(64, activation="tanh"), layers.Dense(64, activation="tanh"), layers.Dense(4)]
    )
    obs = rng.standard_normal((32, 8)).astype(np.float32)
    return model, obs, rng.integers(0, 4, size=(32,))


def _record(name: str, policy: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    keras.mixed_precision.set_dtype_policy(policy)
    try:
        rng = np.random.default_rng(SEED)
        model, x, y = _model_and_batch(name, keras, rng)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        arrays: dict[str, np.ndarray] = {}
        dtypes: list[str] = []
        for step in range(STEPS):
            with tf.GradientTape() as tape:
                logits = tf.cast(model(x, training=True), tf.float32)
                loss = loss_fn(y, logits)
                if name.startswith("mlp_policy"):  # PPO-style: advantage-weighted log-prob
                    adv = tf.constant(rng.standard_normal(y.shape).astype(np.float32))
                    loss = loss * tf.reduce_mean(adv) + 0.01 * tf.reduce_mean(logits**2)
            variables = model.trainable_variables
            grads = tape.gradient(loss, variables)
            norm = tf.linalg.global_norm(grads)
            clipped, tf_norm = tf.clip_by_global_norm(grads, CLIP_NORM)
            assert float(tf_norm) == float(norm)
            for i, (g, c) in enumerate(zip(grads, clipped, strict=True)):
                if isinstance(g, tf.IndexedSlices):  # what TF's global norm sums
                    g, c = g.values, c.values
                if step == 0:
                    dtypes.append(g.dtype.name)
                arrays[f"{name}|{step}|grad|{i}"] = _stored(g)
                arrays[f"{name}|{step}|clipped|{i}"] = _stored(c)
            arrays[f"{name}|{step}|norm"] = _stored(norm)
            for v, c in zip(variables, clipped, strict=True):  # plain SGD on the clipped step
                v.assign_sub(tf.cast(tf.convert_to_tensor(c), v.dtype) * 0.5)
        meta = {"policy": policy, "dtypes": dtypes, "loss": float(loss)}
        return arrays, meta
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


def _stored(t: Any) -> np.ndarray:
    a = np.asarray(t.numpy() if hasattr(t, "numpy") else t)
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


def build() -> bytes:
    """The ``.npz`` file's bytes (deterministic: no timestamps)."""
    import tensorflow as tf

    arrays: dict[str, np.ndarray] = {}
    models: dict[str, Any] = {}
    for name, policy in MODELS.items():
        a, meta = _record(name, policy)
        arrays.update(a)
        models[name] = meta
    provenance = {
        "script": "python -m anyclip_conformance.real_models",
        "tensorflow": tf.__version__,
        "keras": __import__("keras").__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "seed": SEED,
        "steps": STEPS,
        "clip_norm": CLIP_NORM,
        "models": models,
    }
    arrays["provenance"] = np.array(json.dumps(provenance, sort_keys=True))
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``) ``data/real_gradients.npz``."""
    parser = argparse.ArgumentParser(prog="python -m anyclip_conformance.real_models")
    parser.add_argument("--check", action="store_true", help="fail if the data differs")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    data = build()
    if args.check:
        with np.load(io.BytesIO(data)) as new, np.load(args.output) as old:
            same = set(new.files) == set(old.files) and all(
                np.array_equal(new[k], old[k]) for k in new.files
            )
        print("up to date" if same else f"{args.output} differs from TensorFlow's output")
        return 0 if same else 1
    args.output.write_bytes(data)
    print(f"wrote {args.output} ({len(data) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
