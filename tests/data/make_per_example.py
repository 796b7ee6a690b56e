"""Per-example (DP-SGD) clipping by TF and by Opacus: the reference of ``test_per_example.py``.

Usage: ``python tests/data/make_per_example.py [OUT.npz]`` (default: ``per_example.npz`` next
to this script). Needs TensorFlow 2.21 and Opacus (1.6.0 was used: ``pip install --no-deps
opacus`` beside torch suffices); the tests read the committed file, and rerun the TF part live
with ``--live-tf``.

The inputs (``in/<dtype>/<leaf>``) are per-example gradients of three leaves with the examples
along axis 0 (seed ``SEED``): example 0 is all zeros, example 1 tiny, the others of norms
around 1 to 10, all entries >= 0 so that the sums over the examples do not cancel. For every
``l2_norm_clip`` in ``CLIPS``:

* ``tf/<dtype>/<clip>/<leaf>``: TF Privacy's rule, ``tf.clip_by_global_norm(example, clip)``
  (the call ``DPKerasOptimizer``'s ``GaussianSumQuery`` makes per microbatch) on each example
  in turn, then ``tf.reduce_sum(stacked, axis=0)``; ``tf/<dtype>/norms``: the per-example
  ``tf.linalg.global_norm``.
* ``opacus/<dtype>/<clip>/<leaf>``: Opacus's ``DPOptimizer.clip_and_accumulate()`` on
  parameters whose ``grad_sample`` holds the inputs (``noise_multiplier=0``), read from
  ``p.summed_grad``.

``provenance`` (a JSON string) records the library versions, the seed and the calls.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

__all__ = ["CLIPS", "DTYPES", "LEAVES", "SEED", "inputs", "main", "run_opacus", "run_tf"]

SEED = 19
#: The leaves: name and per-example shape (batch of ``BATCH`` in front).
LEAVES = {"w": (3, 4), "b": (5,), "s": ()}
BATCH = 6
DTYPES = ("float32", "float64")
CLIPS = (0.0, 0.5, 2.0, 1000.0, float("inf"))


def inputs(dtype: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    out = {}
    for name, shape in LEAVES.items():
        g = np.abs(rng.standard_normal((BATCH, *shape))) + 0.1
        g *= np.array([0.0, 1e-3, 0.2, 1.0, 2.0, 3.0]).reshape((BATCH,) + (1,) * len(shape))
        out[name] = g.astype(dtype)
    return out


def run_tf(grads: dict[str, np.ndarray], clip: float) -> tuple[dict[str, np.ndarray], np.ndarray]:
    import tensorflow as tf

    names = list(grads)
    per_example = []
    norms = []
    for b in range(BATCH):
        example = [tf.constant(grads[n][b]) for n in names]
        clipped, norm = tf.clip_by_global_norm(example, clip)
        per_example.append(clipped)
        norms.append(norm.numpy())
    sums = {
        n: tf.reduce_sum(tf.stack([e[i] for e in per_example]), axis=0).numpy()
        for i, n in enumerate(names)
    }
    return sums, np.asarray(norms)


def run_opacus(grads: dict[str, np.ndarray], clip: float) -> dict[str, np.ndarray]:
    import torch
    from opacus.optimizers import DPOptimizer

    params = []
    for g in grads.values():
        p = torch.nn.Parameter(torch.zeros(g.shape[1:], dtype=torch.from_numpy(g).dtype))
        p.grad_sample = torch.from_numpy(g.copy())
        params.append(p)
    opt = DPOptimizer(
        torch.optim.SGD(params, lr=0.0),
        noise_multiplier=0.0,
        max_grad_norm=clip,
        expected_batch_size=BATCH,
    )
    opt.clip_and_accumulate()
    return {n: p.summed_grad.detach().numpy() for n, p in zip(grads, params, strict=True)}


def main(out: Path) -> None:
    import opacus
    import tensorflow as tf
    import torch

    data: dict[str, np.ndarray] = {}
    for dtype in DTYPES:
        grads = inputs(dtype)
        for n, g in grads.items():
            data[f"in/{dtype}/{n}"] = g
        for clip in CLIPS:
            sums, norms = run_tf(grads, clip)
            for n, s in sums.items():
                data[f"tf/{dtype}/{clip!r}/{n}"] = s
            data[f"tf/{dtype}/norms"] = norms
            for n, s in run_opacus(grads, clip).items():
                data[f"opacus/{dtype}/{clip!r}/{n}"] = s
    provenance = {
        "script": "tests/data/make_per_example.py",
        "tensorflow": tf.__version__,
        "opacus": opacus.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "seed": SEED,
        "tf_call": "tf.reduce_sum(tf.stack([tf.clip_by_global_norm(example, clip)[0] ...]), 0)",
        "opacus_call": "DPOptimizer(SGD(params, lr=0), noise_multiplier=0, max_grad_norm=clip,"
        " expected_batch_size=6).clip_and_accumulate(); p.summed_grad",
    }
    data["provenance"] = np.asarray(json.dumps(provenance))
    np.savez(out, **data)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("per_example.npz"))
