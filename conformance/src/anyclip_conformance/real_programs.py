"""Gradients of two real training programs, run small on TensorFlow 2.21, and TF's clipping of them.

:mod:`anyclip_conformance.real_models` trains Keras models; these two are written as the
original programs are, with raw TF ops, and keep their structure:

- ``ptb_lstm``: the word-level PTB language model of tensorflow/models
  (``tutorials/rnn/ptb/ptb_word_lm.py``): ``tf.nn.embedding_lookup`` of the word ids, two
  ``BasicLSTMCell`` layers (one ``[in + hidden, 4 hidden]`` kernel and a bias each, forget
  bias 1), a softmax over the vocabulary, the sequence loss summed over the time steps and
  averaged over the batch, ``tf.clip_by_global_norm(grads, 5)`` and SGD (learning rate 1).
  The embedding's gradient is an ``IndexedSlices`` of ``batch * num_steps`` rows (4 * 20 = 80)
  whose ids repeat (word ids drawn from a Zipf law: about 40 distinct ids per step);
  TF's global norm squares its ``values`` as they are, a repeated id once per occurrence.
- ``ppo2_mlp``: the PPO2 update of openai/baselines (``ppo2/model.py`` with the ``MlpPolicy``
  of ``ppo2/policies.py``): separate policy and value MLPs (two tanh layers of 64,
  orthogonal initialisation: gain sqrt(2), 0.01 for the logits, 1 for the value), the clipped
  surrogate, the clipped value loss (coefficient 0.5), an entropy bonus (0.01),
  ``tf.clip_by_global_norm(grads, 0.5)`` and Adam (3e-4). Dense gradients from 8 to 4,096
  elements whose magnitudes span several decades.

Every step records the raw gradients (an ``IndexedSlices`` as its ``values`` and ``indices``),
``tf.linalg.global_norm`` of them and ``tf.clip_by_global_norm``'s clipped values and norm.
TF runs with its default threads (recorded in the provenance).

Maintainers only (needs ``tensorflow-cpu==2.21.0``)::

    python -m anyclip_conformance.real_programs                  # data/real_programs.npz
    python -m anyclip_conformance.real_programs --check          # fails if the file differs
    python -m anyclip_conformance.real_programs --steps 60 --all-steps --output /tmp/p.npz

The committed file keeps :data:`KEPT` steps of each program of the :data:`STEPS` run, to stay
small: the first, and those where anyclip 0.x before TF's float32 order (the sums of squares in
rows of 256, then pairwise) was furthest from TF's (2 ulp on the norm, 4 on clipped values).
The conformance suite runs them with the real models'
(:func:`anyclip_conformance.reference.load_real_gradients`).
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

__all__ = ["CONFIGS", "KEPT", "PROGRAMS", "STEPS", "main"]

#: Steps run per program, and the steps of each that the committed file keeps.
STEPS = 60
KEPT = {"ptb_lstm": (0, 2, 7, 10), "ppo2_mlp": (0, 8, 23)}
PROGRAMS = ("ptb_lstm", "ppo2_mlp")
#: Sizes: ``tiny`` is committed; ``small`` is the PTB ``SmallConfig`` (vocabulary 10,000,
#: hidden 200: a softmax of 2 million weights, above the size where TF's default threads
#: split a float32 sum) with a batch of 4.
CONFIGS = {
    "tiny": {"vocab": 500, "hidden": 32, "obs": 8, "actions": 4, "width": 64},
    "small": {"vocab": 10000, "hidden": 200, "obs": 8, "actions": 4, "width": 64},
}
BATCH, NUM_STEPS, LSTM_CLIP = 4, 20, 5.0
PPO_BATCH, PPO_CLIP = 64, 0.5
SEED = 20261127
OUT = Path(__file__).parent / "data" / "real_programs.npz"


def _zipf_ids(rng: np.random.Generator, vocab: int, shape: tuple[int, ...]) -> np.ndarray:
    """Word ids with Zipf-law frequencies (rank ``r`` drawn with weight ``r ** -1.1``)."""
    w = np.arange(1, vocab + 1) ** -1.1
    perm = rng.permutation(vocab)
    return perm[rng.choice(vocab, size=shape, p=w / w.sum())].astype(np.int32)


def _ptb_lstm(tf: Any, cfg: dict[str, int], steps: int) -> list[tuple[list[Any], Any]]:
    """``ptb_word_lm.py``'s model and training step, one batch of word ids per step."""
    rng = np.random.default_rng(SEED)
    vocab, hidden = cfg["vocab"], cfg["hidden"]
    init = tf.random_uniform_initializer(-0.1, 0.1, seed=SEED)
    embedding = tf.Variable(init([vocab, hidden]), name="embedding")
    cells = [
        (
            tf.Variable(init([2 * hidden, 4 * hidden]), name=f"lstm{k}/kernel"),
            tf.Variable(tf.zeros([4 * hidden]), name=f"lstm{k}/bias"),
        )
        for k in range(2)
    ]
    softmax_w = tf.Variable(init([hidden, vocab]), name="softmax_w")
    softmax_b = tf.Variable(init([vocab]), name="softmax_b")
    variables = [embedding] + [v for c in cells for v in c] + [softmax_w, softmax_b]
    state = [(tf.zeros([BATCH, hidden]), tf.zeros([BATCH, hidden])) for _ in cells]
    out = []
    for _ in range(steps):
        data = _zipf_ids(rng, vocab, (BATCH, NUM_STEPS + 1))
        x, y = tf.constant(data[:, :-1]), tf.constant(data[:, 1:])
        with tf.GradientTape() as tape:
            inputs = tf.nn.embedding_lookup(embedding, x)
            new_state = []
            layer_in = [inputs[:, t, :] for t in range(NUM_STEPS)]
            for (kernel, bias), (c, h) in zip(cells, state, strict=True):
                outs = []
                for t in range(NUM_STEPS):  # BasicLSTMCell, forget_bias 1.0
                    gates = tf.matmul(tf.concat([layer_in[t], h], 1), kernel) + bias
                    i, j, f, o = tf.split(gates, 4, axis=1)
                    c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
                    h = tf.tanh(c) * tf.sigmoid(o)
                    outs.append(h)
                new_state.append((c, h))
                layer_in = outs
            output = tf.reshape(tf.concat(layer_in, 1), [-1, hidden])
            logits = tf.reshape(tf.matmul(output, softmax_w) + softmax_b, [BATCH, NUM_STEPS, vocab])
            xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            cost = tf.reduce_sum(tf.reduce_mean(xent, axis=0))  # sequence_loss, summed over time
        grads = tape.gradient(cost, variables)
        out.append((grads, LSTM_CLIP))
        clipped, _ = tf.clip_by_global_norm(grads, LSTM_CLIP)
        for v, g in zip(variables, clipped, strict=True):  # SGD, learning rate 1
            v.assign_sub(g)
        state = [(tf.stop_gradient(c), tf.stop_gradient(h)) for c, h in new_state]
    return out


def _orthogonal(rng: np.random.Generator, shape: tuple[int, int], gain: float) -> np.ndarray:
    """baselines' ``ortho_init``: the orthogonal factor of a Gaussian matrix, times ``gain``."""
    a = rng.standard_normal(shape)
    u, _, v = np.linalg.svd(a, full_matrices=False)
    q = u if u.shape == shape else v
    return (gain * q).astype(np.float32)


def _ppo2_mlp(tf: Any, cfg: dict[str, int], steps: int) -> list[tuple[list[Any], Any]]:
    """baselines' PPO2 ``Model.train`` on an ``MlpPolicy``, one minibatch per step."""
    rng = np.random.default_rng(SEED + 1)
    obs, actions, width = cfg["obs"], cfg["actions"], cfg["width"]
    root2 = float(np.sqrt(2.0))

    def dense(n_in: int, n_out: int, gain: float, name: str) -> list[Any]:
        return [
            tf.Variable(_orthogonal(rng, (n_in, n_out), gain), name=f"{name}/w"),
            tf.Variable(tf.zeros([n_out]), name=f"{name}/b"),
        ]

    pi = dense(obs, width, root2, "pi_fc1") + dense(width, width, root2, "pi_fc2")
    pi += dense(width, actions, 0.01, "pi")
    vf = dense(obs, width, root2, "vf_fc1") + dense(width, width, root2, "vf_fc2")
    vf += dense(width, 1, 1.0, "vf")
    variables = pi + vf
    opt_m = [tf.Variable(tf.zeros_like(v)) for v in variables]
    opt_v = [tf.Variable(tf.zeros_like(v)) for v in variables]

    def mlp(x: Any, p: list[Any]) -> Any:
        h = tf.tanh(tf.matmul(x, p[0]) + p[1])
        h = tf.tanh(tf.matmul(h, p[2]) + p[3])
        return tf.matmul(h, p[4]) + p[5]

    out = []
    for step in range(steps):
        x = tf.constant(rng.standard_normal((PPO_BATCH, obs)).astype(np.float32) * 2.0)
        a = tf.constant(rng.integers(0, actions, PPO_BATCH).astype(np.int32))
        logits0 = mlp(x, pi)
        old_neglogp = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=a, logits=logits0)
        old_neglogp += tf.constant(rng.normal(0, 0.05, PPO_BATCH).astype(np.float32))
        old_v = tf.reshape(mlp(x, vf), [-1])
        returns = old_v + tf.constant(rng.normal(0, 3.0, PPO_BATCH).astype(np.float32))
        adv = returns - old_v
        adv = (adv - tf.reduce_mean(adv)) / (tf.math.reduce_std(adv) + 1e-8)
        with tf.GradientTape() as tape:
            logits = mlp(x, pi)
            neglogp = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=a, logits=logits)
            p = tf.nn.softmax(logits)
            entropy = tf.reduce_mean(-tf.reduce_sum(p * tf.nn.log_softmax(logits), axis=-1))
            v = tf.reshape(mlp(x, vf), [-1])
            v_clipped = old_v + tf.clip_by_value(v - old_v, -0.2, 0.2)
            vf_loss = 0.5 * tf.reduce_mean(
                tf.maximum(tf.square(v - returns), tf.square(v_clipped - returns))
            )
            ratio = tf.exp(old_neglogp - neglogp)
            pg_loss = tf.reduce_mean(
                tf.maximum(-adv * ratio, -adv * tf.clip_by_value(ratio, 0.8, 1.2))
            )
            loss = pg_loss - entropy * 0.01 + vf_loss * 0.5
        grads = tape.gradient(loss, variables)
        out.append((grads, PPO_CLIP))
        clipped, _ = tf.clip_by_global_norm(grads, PPO_CLIP)
        t = step + 1
        for var, g, m, s in zip(variables, clipped, opt_m, opt_v, strict=True):  # Adam, 3e-4
            m.assign(0.9 * m + 0.1 * g)
            s.assign(0.999 * s + 0.001 * g * g)
            lr = float(3e-4 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t))
            var.assign_sub(lr * m / (tf.sqrt(s) + 1e-5))
    return out


def record(
    name: str, config: str, steps: int, keep: tuple[int, ...] | None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Run program ``name`` for ``steps`` steps; the arrays of the ``keep`` steps (None: all)."""
    import tensorflow as tf

    tf.random.set_seed(SEED)
    cfg = CONFIGS[config]
    run = _ptb_lstm if name == "ptb_lstm" else _ppo2_mlp
    arrays: dict[str, np.ndarray] = {}
    kinds: list[str] = []
    distinct: list[int] = []
    for step, (grads, clip) in enumerate(run(tf, cfg, steps)):
        if keep is not None and step not in keep:
            continue
        norm = tf.linalg.global_norm(grads)
        clipped, tf_norm = tf.clip_by_global_norm(grads, clip)
        assert float(tf_norm) == float(norm)
        for i, (g, c) in enumerate(zip(grads, clipped, strict=True)):
            if isinstance(g, tf.IndexedSlices):
                ids = g.indices.numpy()
                arrays[f"{name}|{step}|indices|{i}"] = ids
                arrays[f"{name}|{step}|dense_shape|{i}"] = g.dense_shape.numpy()
                distinct.append(len(np.unique(ids)))
                g, c = g.values, c.values
                kind = "indexed_slices"
            else:
                kind = "dense"
            if len(kinds) <= i:
                kinds.append(kind)
            arrays[f"{name}|{step}|grad|{i}"] = g.numpy()
            arrays[f"{name}|{step}|clipped|{i}"] = c.numpy()
        arrays[f"{name}|{step}|norm"] = norm.numpy()
    meta = {
        "config": dict(cfg),
        "clip_norm": LSTM_CLIP if name == "ptb_lstm" else PPO_CLIP,
        "dtypes": ["float32"] * len(kinds),
        "kinds": kinds,
        "steps": sorted({int(k.split("|")[1]) for k in arrays}),
    }
    if distinct:
        meta["distinct_ids"] = [min(distinct), max(distinct)]
    return arrays, meta


def build(config: str = "tiny", steps: int = STEPS, all_steps: bool = False) -> bytes:
    """The ``.npz`` file's bytes (deterministic: no timestamps); ``all_steps``: not :data:`KEPT`."""
    import tensorflow as tf

    arrays: dict[str, np.ndarray] = {}
    programs: dict[str, Any] = {}
    for name in PROGRAMS:
        a, meta = record(name, config, steps, None if all_steps else KEPT[name])
        arrays.update(a)
        programs[name] = meta
    provenance = {
        "script": "python -m anyclip_conformance.real_programs",
        "tensorflow": tf.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "threads": {  # 0: TF's default (the machine's cores)
            "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
        },
        "seed": SEED,
        "config": config,
        "steps_run": steps,
        "programs": programs,
    }
    arrays["provenance"] = np.array(json.dumps(provenance, sort_keys=True))
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``) ``data/real_programs.npz``."""
    parser = argparse.ArgumentParser(prog="python -m anyclip_conformance.real_programs")
    parser.add_argument("--check", action="store_true", help="fail if the data differs")
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--all-steps", action="store_true", help="keep every step")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    data = build(args.config, args.steps, args.all_steps)
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
