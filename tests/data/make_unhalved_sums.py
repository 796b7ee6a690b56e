"""TF 2.21's sums of squares that it does not halve, near the smallest normal number, run live.

Usage: ``python tests/data/make_unhalved_sums.py [OUT.npz]`` (default: ``unhalved_sums.npz``
next to this script). Needs TensorFlow 2.21; ``tests/test_norm.py`` reads the committed file,
and with ``--live-tf`` also runs this script and checks that the file is still what TF gives.

``tf.norm``, ``tf.clip_by_norm`` and ``tf.math.l2_normalize`` sum ``square(t)`` whole
(``reduce_sum``), where ``tf.linalg.global_norm`` halves each array's sum (``l2_loss``). A
sum of squares from the smallest normal number up to twice it (float32 ``[2**-126,
2**-125)``: one element of 1.09e-19 to 1.53e-19) is normal, its half is not: TF's CPU kernels
keep the sum and flush such a half to zero. anyclip's ``accumulate_dtype=`` is TF's function
on the input cast to that dtype, the result cast back (``docs/beyond-tf.md``); the cases here
are bfloat16 arrays (float32's exponent range) accumulated in float32, whose every square is
normal (no square of it is flushed), and bfloat16 and float32 arrays accumulated in float16,
whose squares are float16 subnormals: ``tf.norm`` sums them whole, where ``l2_loss`` would
halve each (a half below float16's smallest subnormal rounds to 0 or to it).

The file holds, per case ``<case>``: ``<case>/x`` (the input's values, as float32: exact),
``<case>/arg`` (``clip_norm`` or ``epsilon``, float32; 0 for ``norm``) and ``<case>/out``
(TF's result in the input's dtype, as float32); the dtypes are :data:`CASES`'.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

__all__ = ["CASES", "main"]

#: ``name -> (function, values, clip_norm or epsilon, input dtype, accumulation dtype)``: in
#: float32, one element, its square in ``[2**-126, 2**-125)``; ``l2_normalize``'s epsilon
#: below that square, ``clip_norm`` such that ``t * clip_norm`` is normal (both normal
#: float32). Accumulated in float16, 100 elements of 2.5e-4 to 3.6e-4, alternating signs.
CASES: dict[str, tuple[str, list[float], float, str, str]] = {
    "norm/1.2e-19": ("norm", [1.2e-19], 0.0, "bfloat16", "float32"),
    "norm/-1.1e-19": ("norm", [-1.1e-19], 0.0, "bfloat16", "float32"),
    "norm/1.5e-19-2d": ("norm", [[0.0, 1.5e-19], [0.0, -0.0]], 0.0, "bfloat16", "float32"),
    "clip_by_norm/1.2e-19": ("clip_by_norm", [1.2e-19], 1e-19, "bfloat16", "float32"),
    "clip_by_norm/-1.5e-19": ("clip_by_norm", [0.0, -1.5e-19], 1.3e-19, "bfloat16", "float32"),
    "l2_normalize/1.2e-19": ("l2_normalize", [1.2e-19], 1.2e-38, "bfloat16", "float32"),
    "l2_normalize/-1.1e-19": ("l2_normalize", [[-1.1e-19, 0.0]], 1.2e-38, "bfloat16", "float32"),
    "norm/bfloat16-in-float16-subnormal-squares": (
        "norm",
        (np.linspace(2.5e-4, 3.6e-4, 100) * np.tile([1.0, -1.0], 50)).tolist(),
        0.0,
        "bfloat16",
        "float16",
    ),
    "norm/float32-in-float16-subnormal-squares": (
        "norm",
        (np.linspace(2.5e-4, 3.6e-4, 100) * np.tile([1.0, -1.0], 50)).tolist(),
        0.0,
        "float32",
        "float16",
    ),
}


def main(out: Path) -> None:
    """Write every case's input, argument and TF's result to ``out``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    arrays: dict[str, np.ndarray] = {}
    for name, (fn, values, arg, dtype, acc) in CASES.items():
        x = tf.cast(tf.constant(np.asarray(values, np.float32)), dtype)
        wide = tf.cast(x, acc)
        a = tf.constant(arg, acc)
        if fn == "norm":
            y = tf.norm(wide)
        elif fn == "clip_by_norm":
            y = tf.clip_by_norm(wide, a)
        else:
            y = tf.math.l2_normalize(wide, epsilon=a)
        arrays[f"{name}/x"] = tf.cast(x, tf.float32).numpy()
        arrays[f"{name}/arg"] = np.float32(arg)
        arrays[f"{name}/out"] = tf.cast(tf.cast(y, dtype), tf.float32).numpy()
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("unhalved_sums.npz"))
