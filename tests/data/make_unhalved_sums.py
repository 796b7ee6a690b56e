"""TF 2.21's sums of squares that it does not halve, near the smallest normal number, run live.

Usage: ``python tests/data/make_unhalved_sums.py [OUT.npz]`` (default: ``unhalved_sums.npz``
next to this script). Needs TensorFlow 2.21; ``tests/test_norm.py`` reads the committed file,
and with ``--live-tf`` also runs this script and checks that the file is still what TF gives.

``tf.norm``, ``tf.clip_by_norm`` and ``tf.math.l2_normalize`` sum ``square(t)`` whole
(``reduce_sum``), where ``tf.linalg.global_norm`` halves each array's sum (``l2_loss``). A
sum of squares from the smallest normal number up to twice it (float32 ``[2**-126,
2**-125)``: one element of 1.09e-19 to 1.53e-19) is normal, its half is not: TF's CPU kernels
keep the sum and flush such a half to zero. anyclip's ``accumulate_dtype=`` is TF's function
on the input cast to that dtype, the result cast back (``docs/beyond-tf.md``); each case here
is a bfloat16 array (float32's exponent range) accumulated in float32, whose every square is
normal (no square of it is flushed).

The file holds, per case ``<case>``: ``<case>/x`` (the bfloat16 values, as float32: exact),
``<case>/arg`` (``clip_norm`` or ``epsilon``, float32; 0 for ``norm``) and ``<case>/out``
(TF's bfloat16 result, as float32).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

__all__ = ["CASES", "main"]

#: ``name -> (function, bfloat16 values, clip_norm or epsilon)``: one element, its square in
#: ``[2**-126, 2**-125)``; ``l2_normalize``'s epsilon below that square, ``clip_norm`` such that
#: ``t * clip_norm`` is normal (both normal float32).
CASES: dict[str, tuple[str, list[float], float]] = {
    "norm/1.2e-19": ("norm", [1.2e-19], 0.0),
    "norm/-1.1e-19": ("norm", [-1.1e-19], 0.0),
    "norm/1.5e-19-2d": ("norm", [[0.0, 1.5e-19], [0.0, -0.0]], 0.0),
    "clip_by_norm/1.2e-19": ("clip_by_norm", [1.2e-19], 1e-19),
    "clip_by_norm/-1.5e-19": ("clip_by_norm", [0.0, -1.5e-19], 1.3e-19),
    "l2_normalize/1.2e-19": ("l2_normalize", [1.2e-19], 1.2e-38),
    "l2_normalize/-1.1e-19": ("l2_normalize", [[-1.1e-19, 0.0]], 1.2e-38),
}


def main(out: Path) -> None:
    """Write every case's input, argument and TF's result to ``out``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    arrays: dict[str, np.ndarray] = {}
    for name, (fn, values, arg) in CASES.items():
        x = tf.constant(np.asarray(values, np.float32), dtype=tf.bfloat16)
        wide = tf.cast(x, tf.float32)
        a = tf.constant(arg, tf.float32)
        if fn == "norm":
            y = tf.norm(wide)
        elif fn == "clip_by_norm":
            y = tf.clip_by_norm(wide, a)
        else:
            y = tf.math.l2_normalize(wide, epsilon=a)
        arrays[f"{name}/x"] = tf.cast(x, tf.float32).numpy()
        arrays[f"{name}/arg"] = np.float32(arg)
        arrays[f"{name}/out"] = tf.cast(tf.cast(y, tf.bfloat16), tf.float32).numpy()
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("unhalved_sums.npz"))
