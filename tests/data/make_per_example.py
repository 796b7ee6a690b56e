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

The order of TF's sum over the examples (``sum/...``): for each case of ``SUM_CASES`` (batch
``B``, per-example shape) and dtype of ``SUM_DTYPES``, ``sum/<case>/<dtype>/in`` holds
per-example gradients (seed ``SEED``), ``.../scale`` the factor TF multiplies each example by,
``cast(c * minimum(1 / norm, 1 / c), dtype)`` with ``c = SUM_CLIP`` and ``norm`` TF's global
norm (checked: ``tf.clip_by_global_norm``'s output is ``in * scale`` exactly), and ``.../tf``
the ``tf.reduce_sum(stacked, axis=0)`` of the clipped examples. The cases cover ``B`` below 4
(no group of four rows), below and above 16, ``B % 4 != 0``, per-example sizes ``N`` with
``N % 8`` and ``N % 4`` nonzero, more than 1024 columns, and ``N == 1`` (per-example shapes
``(1,)``, ``(1, 1)`` and ``()``, named ``<B>x``: TF reduces the ``B`` products as one vector,
Eigen's full reduction), with ``B`` past the tree splits of that reduction (1600 float16
elements, 4096 float64, 8192 float32), and a batch of one example (TF copies it: no
addition), whose first element is ``-0.0`` (its sign kept). bfloat16 is stored as float32 (its
values exactly).

The per-example norms of many leaves (``many/...``): for each case of ``MANY_CASES`` (batch
``B``, dtype, the leaves' per-example shapes: 12 float32 or 7 float64 leaves, past the 8 and 4
leaves from which a sequential sum of their ``l2_loss`` leaves TF's order, and leaves past
the tree split of TF's full reduction), ``many/<case>/in/<i>`` holds leaf ``i`` (seed
``SEED``; signed, norms around 0.1 to 10 per example), ``many/<case>/tf/<i>`` the
``reduce_sum`` over the examples of ``tf.clip_by_global_norm(example, MANY_CLIP)`` per example
(as ``tf/...``), and ``many/<case>/norms`` each example's ``tf.linalg.global_norm``.

The per-example norms and sums of float16 and bfloat16 leaves (``half/...``): for each case
of ``HALF_CASES`` (batch ``B``, dtype, the size of the entries, the leaves' per-example
shapes), ``half/<case>/in/<i>`` holds leaf ``i`` (seed ``SEED``; signed), ``half/<case>/tf/<i>``
the ``reduce_sum`` over the examples of ``tf.clip_by_global_norm(example, HALF_CLIP)`` per
example, and ``half/<case>/norms`` each example's ``tf.linalg.global_norm`` (bfloat16 stored
as float32, exactly). The sizes (``HALF_SIZES``, each example's entries that times a standard
normal, a factor of 0.3 to 3 and one over the root of the number of leaves): norms around 1
to 10; float16 entries of about 1e-4 to 1e-3, whose squares are subnormal and whose
``l2_loss`` halves round (to 0 below twice the smallest subnormal), bfloat16 entries of about
1e-19, whose halves TF flushes; norms near the dtype's largest value, finite or not (float16
about 40, bfloat16 3e18); entries whose squares overflow (float16 300, bfloat16 3e19:
infinite norms, NaN sums); a mix of all in one batch; and leaves past the tree splits of
TF's ``l2_loss`` (1600 float16 elements, 1024 bfloat16).

``provenance`` (a JSON string) records the library versions, the seed and the calls.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

__all__ = [
    "CLIPS",
    "DTYPES",
    "HALF_CASES",
    "HALF_CLIP",
    "HALF_SIZES",
    "LEAVES",
    "MANY_CASES",
    "MANY_CLIP",
    "SEED",
    "SUM_CASES",
    "SUM_CLIP",
    "SUM_DTYPES",
    "inputs",
    "half_inputs",
    "main",
    "many_inputs",
    "run_opacus",
    "run_tf",
    "run_tf_half",
    "run_tf_many",
    "run_tf_sum",
    "sum_inputs",
]

SEED = 19
#: The leaves: name and per-example shape (batch of ``BATCH`` in front).
LEAVES = {"w": (3, 4), "b": (5,), "s": ()}
BATCH = 6
DTYPES = ("float32", "float64")
CLIPS = (0.0, 0.5, 2.0, 1000.0, float("inf"))
#: (batch, per-example shape) of the summation-order cases, named "<B>x<shape>"
SUM_CASES = {
    "5x7": (5, (7,)),
    "15x9": (15, (9,)),
    "16x16": (16, (16,)),
    "17x2": (17, (2,)),
    "19x3x5": (19, (3, 5)),
    "37x13": (37, (13,)),
    "64x2x1031": (64, (2, 1031)),
    "130x33": (130, (33,)),
    "33x1": (33, (1,)),
    "37x1x1": (37, (1, 1)),
    "9000x": (9000, ()),
    "1x3": (1, (3,)),
    "2x5": (2, (5,)),
    "3x4": (3, (4,)),
}
SUM_DTYPES = ("float16", "bfloat16", "float32", "float64")
SUM_CLIP = 1.0
#: (batch, dtype, per-example shapes of the leaves) of the many-leaf norm cases
MANY_CASES = {
    "6xf32": (
        6,
        "float32",
        ((3, 4), (5,), (), (7,), (1,), (33,), (2, 9), (17,), (8,), (3,), (64,), (13,)),
    ),
    "20xf32": (
        20,
        "float32",
        ((30, 30), (9,), (), (31,), (4, 4), (1000,), (2,), (8193,), (5,), (129,), (1,), (11,)),
    ),
    "6xf64": (6, "float64", ((3, 4), (5,), (), (7,), (4097,), (2, 3), (13,))),
    "17xf64": (17, "float64", ((9,), (33,), (), (5000,), (4,), (3, 7), (2,))),
}
MANY_CLIP = 1.0
#: The half-precision cases' leaves: a matrix, vectors, a scalar, one past Eigen's packets
_HALF_SHAPES = ((3, 4), (5,), (), (7,), (33,))
#: Past the tree splits of TF's float16 and bfloat16 ``l2_loss`` (1600 and 1024 elements)
_LONG_SHAPES = ((1700,), (3,), (2100,))
#: (batch, dtype, size, per-example shapes) of the half-precision cases
HALF_CASES = {
    "1xf16": (1, "float16", "normal", _HALF_SHAPES),
    "5xf16": (5, "float16", "normal", _HALF_SHAPES),
    "17xf16": (17, "float16", "normal", _HALF_SHAPES),
    "40xf16": (40, "float16", "normal", _HALF_SHAPES),
    "16xf16tiny": (16, "float16", "tiny", _HALF_SHAPES),
    "20xf16small": (20, "float16", "small", _HALF_SHAPES),
    "17xf16huge": (17, "float16", "huge", _HALF_SHAPES),
    "9xf16over": (9, "float16", "over", _HALF_SHAPES),
    "33xf16mixed": (33, "float16", "mixed", _HALF_SHAPES),
    "6xf16long": (6, "float16", "normal", _LONG_SHAPES),
    "1xbf16": (1, "bfloat16", "normal", _HALF_SHAPES),
    "5xbf16": (5, "bfloat16", "normal", _HALF_SHAPES),
    "17xbf16": (17, "bfloat16", "normal", _HALF_SHAPES),
    "40xbf16": (40, "bfloat16", "normal", _HALF_SHAPES),
    "16xbf16tiny": (16, "bfloat16", "tiny", _HALF_SHAPES),
    "20xbf16small": (20, "bfloat16", "small", _HALF_SHAPES),
    "17xbf16huge": (17, "bfloat16", "huge", _HALF_SHAPES),
    "9xbf16over": (9, "bfloat16", "over", _HALF_SHAPES),
    "33xbf16mixed": (33, "bfloat16", "mixed", _HALF_SHAPES),
    "6xbf16long": (6, "bfloat16", "normal", _LONG_SHAPES),
}
#: The entries' size per dtype (times a standard normal and a factor of 0.3 to 3 per
#: example); "mixed": each example's size drawn from the others
HALF_SIZES = {
    "float16": {"normal": 1.0, "tiny": 6e-4, "small": 2e-3, "huge": 40.0, "over": 300.0},
    "bfloat16": {"normal": 1.0, "tiny": 1e-19, "small": 3e-19, "huge": 3e18, "over": 3e19},
}
HALF_CLIP = 1.0


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


def sum_inputs(case: str, dtype: str) -> np.ndarray:
    """Signed per-example gradients of norms around 0.1 to 10 (float32 for bfloat16)."""
    import ml_dtypes

    b, shape = SUM_CASES[case]
    rng = np.random.default_rng([SEED, *map(ord, case + dtype)])
    g = rng.standard_normal((b, *shape)) * rng.uniform(0.1, 3.0, (b,) + (1,) * len(shape))
    if b == 1:
        g.reshape(-1)[0] = -0.0  # a copy in TF: the sign of zero stays
    if dtype == "bfloat16":
        return g.astype(ml_dtypes.bfloat16).astype(np.float32)
    return g.astype(dtype)


def run_tf_sum(g: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """TF's per-example factors and ``reduce_sum`` of the clipped examples (float32 for bf16).

    Each example's ``clip_by_global_norm`` runs in ``tf.map_fn`` inside a ``tf.function`` (TF
    Privacy's optimizers clip inside a compiled train step too): the same kernels on the same
    one-example tensors as an eager loop over the examples, whose results it gave bit for bit
    on every case (the committed file was made by such a loop), in 3 s instead of 30 s for the
    9,000-example case's 36,000 eager calls.
    """
    import ml_dtypes
    import tensorflow as tf

    tf_dtype = tf.as_dtype(dtype)

    def clip_one(t: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        (out,), norm = tf.clip_by_global_norm([t], SUM_CLIP)
        # clip_by_global_norm's own factor (clip_ops.py), cast to the gradient's dtype
        one = tf.constant(1.0, norm.dtype)
        return out, tf.cast(SUM_CLIP * tf.minimum(1.0 / norm, one / SUM_CLIP), tf_dtype)

    @tf.function
    def clip_each(stacked: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.map_fn(clip_one, stacked, fn_output_signature=(tf_dtype, tf_dtype))

    clipped, scales = clip_each(tf.cast(tf.constant(g), tf_dtype))
    # the factor is the one TF multiplied by: each output is the example times its factor,
    # checked against NumPy's (correctly rounded) product, outside TF's graph
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    factors = scales.numpy().reshape((-1,) + (1,) * (g.ndim - 1))
    product = (g.astype(np_dtype) * factors).astype(np_dtype)
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(np_dtype).itemsize]
    if not np.array_equal(clipped.numpy().view(bits), product.view(bits)):
        raise AssertionError("clip_by_global_norm is not each example times its factor")
    total = tf.reduce_sum(clipped, axis=0)
    as32 = tf.float32 if dtype == "bfloat16" else tf_dtype
    return tf.cast(scales, as32).numpy(), tf.cast(total, as32).numpy()


def many_inputs(case: str) -> list[np.ndarray]:
    """The leaves of a many-leaf case: signed, each example's norm around 0.1 to 10."""
    b, dtype, shapes = MANY_CASES[case]
    rng = np.random.default_rng([SEED, *map(ord, case)])
    scale = rng.uniform(0.1, 3.0, b) / np.sqrt(len(shapes))
    return [
        (rng.standard_normal((b, *shape)) * scale.reshape((b,) + (1,) * len(shape))).astype(dtype)
        for shape in shapes
    ]


def run_tf_many(leaves: list[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """TF Privacy's rule on many leaves: ``clip_by_global_norm`` per example, then the sum."""
    import tensorflow as tf

    per_example, norms = [], []
    for b in range(leaves[0].shape[0]):
        clipped, norm = tf.clip_by_global_norm([tf.constant(g[b]) for g in leaves], MANY_CLIP)
        per_example.append(clipped)
        norms.append(norm.numpy())
    sums = [
        tf.reduce_sum(tf.stack([e[i] for e in per_example]), axis=0).numpy()
        for i in range(len(leaves))
    ]
    return sums, np.asarray(norms)


def half_inputs(case: str) -> list[np.ndarray]:
    """The leaves of a half-precision case, in their dtype (bfloat16: ``ml_dtypes``)."""
    import ml_dtypes

    b, dtype, size, shapes = HALF_CASES[case]
    rng = np.random.default_rng([SEED, *map(ord, case)])
    sizes = HALF_SIZES[dtype]
    if size == "mixed":
        scale = rng.choice(list(sizes.values()), b)
    else:
        scale = np.full(b, sizes[size])
    scale = scale * rng.uniform(0.3, 3.0, b) / np.sqrt(len(shapes))
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    return [
        (rng.standard_normal((b, *shape)) * scale.reshape((b,) + (1,) * len(shape))).astype(
            np_dtype
        )
        for shape in shapes
    ]


def run_tf_half(leaves: list[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """:func:`run_tf_many` for float16 and bfloat16 leaves (bfloat16 results as float32)."""
    import tensorflow as tf

    dtype = tf.bfloat16 if leaves[0].dtype.name == "bfloat16" else tf.as_dtype(leaves[0].dtype)
    per_example, norms = [], []
    for b in range(leaves[0].shape[0]):
        example = [tf.constant(g[b], dtype=dtype) for g in leaves]
        clipped, norm = tf.clip_by_global_norm(example, HALF_CLIP)
        per_example.append(clipped)
        norms.append(norm)
    store = tf.float32 if dtype == tf.bfloat16 else dtype
    sums = [
        tf.cast(tf.reduce_sum(tf.stack([e[i] for e in per_example]), axis=0), store).numpy()
        for i in range(len(leaves))
    ]
    return sums, tf.cast(tf.stack(norms), store).numpy()


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


def _cpu() -> str:
    """The CPU model (TF's reduction order follows its wheel's vector width: x86-64 AVX)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{platform.machine()}: {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return platform.machine()


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
    for case in SUM_CASES:
        for dtype in SUM_DTYPES:
            g = sum_inputs(case, dtype)
            scale, total = run_tf_sum(g, dtype)
            data[f"sum/{case}/{dtype}/in"] = g
            data[f"sum/{case}/{dtype}/scale"] = scale
            data[f"sum/{case}/{dtype}/tf"] = total
    for case in MANY_CASES:
        leaves = many_inputs(case)
        sums, norms = run_tf_many(leaves)
        for i, (g, total) in enumerate(zip(leaves, sums, strict=True)):
            data[f"many/{case}/in/{i}"] = g
            data[f"many/{case}/tf/{i}"] = total
        data[f"many/{case}/norms"] = norms
    for case in HALF_CASES:
        leaves = half_inputs(case)
        sums, norms = run_tf_half(leaves)
        for i, (g, total) in enumerate(zip(leaves, sums, strict=True)):
            data[f"half/{case}/in/{i}"] = g.astype(total.dtype)
            data[f"half/{case}/tf/{i}"] = total
        data[f"half/{case}/norms"] = norms
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
        "sum_call": "tf.reduce_sum(tf.stack([tf.clip_by_global_norm([t], 1.0)[0][0] ...]), 0)",
        "many_call": "tf.clip_by_global_norm(leaves of one example, 1.0) per example, then"
        " tf.reduce_sum(tf.stack(clipped leaf i), 0); norms: its global_norm",
        "half_call": "as many_call, float16 and bfloat16 leaves (bfloat16 stored as float32)",
        "cpu": _cpu(),
    }
    data["provenance"] = np.asarray(json.dumps(provenance))
    np.savez(out, **data)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("per_example.npz"))
