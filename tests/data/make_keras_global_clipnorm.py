"""Keras 3's ``global_clipnorm``, run live: the reference of ``test_keras_clipping.py``'s bit tests.

Usage: ``python tests/data/make_keras_global_clipnorm.py OUT.npz``. Needs TensorFlow 2.21
(Keras 3); the tests run it in a subprocess when TensorFlow is installed and skip otherwise.

Keras's optimizers clip with Keras's own ``clip_by_global_norm``
(``keras/src/optimizers/base_optimizer.py``), not ``tf.clip_by_global_norm``: the norm is
``sqrt(sum(stack([sum(square(v))])))`` (no halved squares), and ``1.0 / clip_norm`` of a
Python number is Python's quotient, rounded to the gradients' dtype, so an unclipped step is
multiplied by ``float32(c) * float32(1 / c)``, not 1 (``c = 2.3``: 0.99999994). Each case
takes one step of ``keras.optimizers.SGD(1.0, global_clipnorm=c)`` from zero variables,
through ``optimizer.apply_gradients``; the clipped gradients are the negated variables
(``0 - 1 * g`` is exact). The file holds, per case, ``<case>/c`` (float64), the gradients
``<case>/g/<i>`` and Keras's clipped gradients ``<case>/out/<i>``: those of :func:`cases` and
of :func:`flush_cases` (anyclip gives those inside ``flush_subnormals()`` only).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

__all__ = ["RANDOM", "cases", "flush_cases", "main", "run_keras"]

#: Random thresholds per dtype (``[0.05, 20]``, seeded): about a fifth give a factor not 1.
RANDOM = 40


def cases() -> dict[str, tuple[float, list[np.ndarray]]]:
    """Every case: ``name -> (global_clipnorm, gradients)``."""
    rng = np.random.default_rng(2315)
    out: dict[str, tuple[float, list[np.ndarray]]] = {}
    for dt in ("float32", "float16"):
        small = [np.array([0.01, -0.02, 0.03], dt)]
        for c in (2.3, 1.7):  # unclipped, the factor float(c) * float(1 / c)
            out[f"{dt}-unclipped-{c}"] = (c, small)
        for i, c in enumerate(np.exp(rng.uniform(np.log(0.05), np.log(20.0), RANDOM))):
            g = [
                (rng.standard_normal((3, 4)) * 0.004).astype(dt),
                (rng.standard_normal(5) * 0.004).astype(dt),
            ]  # norm < 0.05 <= c: unclipped
            out[f"{dt}-random-{i}"] = (float(c), g)
        big = [
            (rng.standard_normal((4, 3)) * 2).astype(dt),
            (rng.standard_normal(7)).astype(dt),
        ]
        out[f"{dt}-clipped"] = (0.7, big)
        with_inf = [np.array([1.0, np.inf, -2.0], dt), np.array([[0.5]], dt)]
        out[f"{dt}-inf"] = (1.0, with_inf)
        with_nan = [np.array([1.0, np.nan, -2.0], dt), np.array([[0.5]], dt)]
        out[f"{dt}-nan"] = (1.0, with_nan)
    # float16 squares below twice the smallest subnormal: TF's l2_loss halves them to 0,
    # Keras's sum(square(v)) keeps them (its norm, and so the clipped step, differ)
    tiny = [(np.linspace(1.5e-4, 3.5e-4, 60) * np.tile([1, -1], 30)).astype("float16")]
    out["float16-clipped-tiny"] = (1e-3, tiny)
    # float32 squares in [2**-126, 2**-125): normal, but TF's l2_loss halves are subnormal and
    # flushed (tf.linalg.global_norm 0); Keras's sum(square(v)) keeps them (2.6e-19)
    out["float32-clipped-halves-flushed"] = (1e-30, [np.full(4, 1.3e-19, "float32")])
    # a positive threshold that float16 rounds to 0: Keras tests `clipnorm > 0` on the
    # number, then clips with its float16 0 (zeros; 1 / c is inf there)
    out["float16-clipped-to-zero-1e-30"] = (1e-30, [np.array([0.5, -2.0, 3.0], "float16")])
    # float64 variables: the number is converted to float64 (0.1 is not float32's 0.1)
    for c in (0.1, 2.3):
        out[f"float64-clipped-{c}"] = (c, [rng.standard_normal(5), rng.standard_normal((2, 2))])
    # an array's sum of squares in [2**-126, 2**-125) (float32; float64 [2**-1022, 2**-1021)):
    # normal, its half not; Keras sums it whole (anyclip took half of it, then doubled it: 2
    # ULP off with IEEE subnormals, 0 where XLA:CPU flushed the half)
    out["float32-clipped-sum-half-subnormal"] = (1e-30, [np.array([1.2e-19], "float32")])
    out["float32-clipped-second-sum-half-subnormal"] = (
        1e-30,
        [np.array([3e-19, -2e-19], "float32"), np.array([[1.2e-19]], "float32")],
    )
    out["float32-clipped-sums-half-subnormal"] = (
        1e-30,
        [np.array([1.1e-19], "float32"), np.array([-1.4e-19], "float32")],
    )
    out["float64-clipped-sum-half-subnormal"] = (1e-300, [np.array([-1.8e-154])])
    return out


def flush_cases() -> dict[str, tuple[float, list[np.ndarray]]]:
    """The cases whose squares TF's CPU kernels flush: ``name -> (global_clipnorm, gradients)``.

    Keras's ``square`` flushes a subnormal square (float32 ``|g|`` below about 1.08e-19,
    float64 1.5e-154) and keeps a normal one, those whose ``l2_loss`` half TF would flush
    included (1.3e-19: Keras's norm 2.6e-19, clipped, :func:`cases`'s
    ``float32-clipped-halves-flushed``; 1e-19: 0, unclipped). anyclip keeps IEEE subnormals
    by default: it gives Keras's values here inside ``flush_subnormals()``.
    """
    return {
        "float32-squares-flushed": (1e-30, [np.full(4, 1e-19, "float32")]),
        "float32-both": (
            1e-30,
            [np.full(4, 1.3e-19, "float32"), np.array([1e-19, -1e-19, 1.6e-19], "float32")],
        ),
        "float64-halves-flushed": (1e-300, [np.full(4, 1.8e-154)]),
        "float64-squares-flushed": (1e-300, [np.full(4, 1.2e-154)]),
    }


def run_keras(c: float, grads: list[np.ndarray]) -> list[np.ndarray]:
    """The gradients as ``SGD(1.0, global_clipnorm=c)`` clips them (one step from zeros)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    variables = [keras.Variable(np.zeros_like(g), dtype=str(g.dtype)) for g in grads]
    opt = keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=c)
    opt.apply_gradients(zip([tf.constant(g) for g in grads], variables, strict=True))
    return [-np.asarray(v) for v in variables]


def main(out: Path) -> None:
    """Write every case's threshold, gradients and Keras's clipped gradients to ``out``."""
    arrays: dict[str, np.ndarray] = {}
    for name, (c, grads) in {**cases(), **flush_cases()}.items():
        arrays[f"{name}/c"] = np.float64(c)
        for i, (g, k) in enumerate(zip(grads, run_keras(c, grads), strict=True)):
            assert k.dtype == g.dtype, (name, k.dtype)
            arrays[f"{name}/g/{i}"] = g
            arrays[f"{name}/out/{i}"] = k
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
