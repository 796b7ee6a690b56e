"""timm's adaptive gradient clipping, run live: the reference of ``test_adaptive.py``'s timm cases.

Usage: ``python tests/data/make_timm_agc.py [--timm-agc PATH] [OUT.npz]`` (default output:
``timm_agc.npz`` next to this script). Needs torch and timm's ``adaptive_clip_grad``: from an
installed ``timm`` (``timm.utils.agc``), or, where timm cannot be installed (it needs a
torchvision built for the pinned torch), from timm's one file ``timm/utils/agc.py`` saved at
``PATH`` (the committed data used huggingface/pytorch-image-models at commit
``15d1dbc896dde826b89d1aab479f9bd4ffda085a``, git blob ``f51401726ff6810d97d0fa567f4e31b474325a59``;
the script records the SHA-256 of what it loaded). timm's code is not part of this repository.

For each case ``<dtype>/<shape>/<norm_type>/<clip_factor>`` the file holds the parameter
(``.../p``), its gradient before (``.../g``) and after (``.../out``) one call of
``adaptive_clip_grad([p], clip_factor, eps=EPS, norm_type)``. Shapes are torch's layouts
(output channel first: ``OI``, ``OIHW``, ``OIDHW``, a bias). The gradients' units are scaled
so that some are clipped and some are not; one parameter unit is zero (``eps`` then sets the
threshold) and one gradient unit is zero. The float16 and bfloat16 cases take the same inputs
times ``HALF_SCALE`` (rounded to the dtype), so that some unit norms of ``p`` and ``g`` exceed
256, where a float16 sum of squares overflows (timm's ``Tensor.norm`` accumulates in float32:
it does not). NumPy has no bfloat16: its arrays are stored as float32 holding bfloat16 values
exactly (the parameter and gradient rounded to bfloat16 before timm's call, its result after).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CASES", "EPS", "HALF_SCALE", "SEED", "case_inputs", "load_timm", "main"]

SEED = 2021
EPS = 1e-3
SHAPES = ((5,), (6, 4), (4, 3, 3, 3), (3, 2, 2, 3, 2))
NORM_TYPES = (2.0, 1.0, float("inf"), 3.0)
CLIP_FACTORS = (0.01, 0.1)
DTYPES = ("float32", "float64", "float16", "bfloat16")
#: the half dtypes' inputs are scaled by this, so that some unit norms exceed 256
HALF_SCALE = 1000.0
CASES = [
    (dtype, shape, norm_type, clip)
    for dtype in DTYPES
    for shape in SHAPES
    for norm_type in NORM_TYPES
    for clip in CLIP_FACTORS
]


def key(dtype: str, shape: tuple[int, ...], norm_type: float, clip: float) -> str:
    return f"{dtype}/{'x'.join(map(str, shape))}/{norm_type!r}/{clip!r}"


def case_inputs(dtype: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The parameter and its gradient: unit ``i`` of the gradient scaled by ``SCALES[i]``.

    bfloat16 ones as float32 arrays of bfloat16 values (rounded to nearest even by torch).
    """
    rng = np.random.default_rng([SEED, *shape])
    p = rng.standard_normal(shape) * 0.5
    g = rng.standard_normal(shape)
    if len(shape) >= 2:
        scales = np.geomspace(1e-4, 1.0, shape[0]).reshape((shape[0],) + (1,) * (len(shape) - 1))
        g = g * scales
        p[0] = 0.0  # a zero unit: the threshold is clip_factor * eps
        g[-1] = 0.0  # a zero gradient unit
    else:
        g = g * 0.01
    if dtype in ("float16", "bfloat16"):
        p, g = p * HALF_SCALE, g * HALF_SCALE
    if dtype == "bfloat16":
        import torch

        def bf16(a: np.ndarray) -> np.ndarray:
            return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16).float().numpy()

        return bf16(p), bf16(g)
    return p.astype(dtype), g.astype(dtype)


def load_timm(path: str | None) -> tuple[Any, str]:
    """timm's ``adaptive_clip_grad`` and where it came from."""
    if path is None:
        import timm
        from timm.utils import agc

        return agc.adaptive_clip_grad, f"timm {timm.__version__} (installed)"
    text = Path(path).read_bytes()
    spec = importlib.util.spec_from_file_location("timm_agc", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return (
        module.adaptive_clip_grad,
        f"timm/utils/agc.py, sha256 {hashlib.sha256(text).hexdigest()}",
    )


def main(out: Path, timm_path: str | None) -> None:
    import torch

    fn, source = load_timm(timm_path)
    data: dict[str, np.ndarray] = {}
    for dtype, shape, norm_type, clip in CASES:
        p_np, g_np = case_inputs(dtype, shape)
        tdtype = getattr(torch, dtype)
        p = torch.nn.Parameter(torch.from_numpy(p_np.copy()).to(tdtype))
        p.grad = torch.from_numpy(g_np.copy()).to(tdtype)
        fn([p], clip_factor=clip, eps=EPS, norm_type=norm_type)
        k = key(dtype, shape, norm_type, clip)
        data[f"{k}/p"], data[f"{k}/g"] = p_np, g_np
        got = p.grad.float() if dtype == "bfloat16" else p.grad
        data[f"{k}/out"] = got.numpy()
    provenance = {
        "script": "tests/data/make_timm_agc.py",
        "timm": source,
        "timm_commit": "15d1dbc896dde826b89d1aab479f9bd4ffda085a",
        "torch": torch.__version__,
        "numpy": np.__version__,
        "seed": SEED,
        "half_scale": HALF_SCALE,
        "call": f"adaptive_clip_grad([p], clip_factor, eps={EPS}, norm_type)",
    }
    data["provenance"] = np.asarray(json.dumps(provenance))
    np.savez(out, **data)


if __name__ == "__main__":
    args = sys.argv[1:]
    timm_path = None
    if args[:1] == ["--timm-agc"]:
        timm_path, args = args[1], args[2:]
    main(Path(args[0]) if args else Path(__file__).with_name("timm_agc.npz"), timm_path)
