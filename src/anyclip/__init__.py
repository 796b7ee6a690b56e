"""anyclip: TensorFlow's clipping and norm functions for any array library.

Eight functions with TensorFlow 2.21's names, arguments, results, errors and gradients, written
once against the Python array API standard. They take and return NumPy, PyTorch, JAX (and any
array-API) arrays, keeping the array type, dtype and device.

>>> import numpy as np
>>> import anyclip
>>> anyclip.clip_by_norm(np.array([3.0, 4.0], dtype=np.float32), 1.0)
array([0.6, 0.8], dtype=float32)
"""

from __future__ import annotations

from anyclip import constraints, tree
from anyclip._clip import clip_by_global_norm, global_norm
from anyclip._clip_tensor import clip_by_average_norm, clip_by_norm, clip_by_value
from anyclip._embedding import embedding_lookup
from anyclip._norms import l2_normalize, norm, normalize
from anyclip._subnormals import flush_subnormals

__version__ = "0.1.0"

__all__ = [
    "clip_by_average_norm",
    "clip_by_global_norm",
    "clip_by_norm",
    "clip_by_value",
    "constraints",
    "embedding_lookup",
    "flush_subnormals",
    "global_norm",
    "l2_normalize",
    "norm",
    "normalize",
    "tree",
]
