"""Opacus's per-sample clipping of float16 and bfloat16 gradients: ``opacus_half.npz``.

Usage: ``python tests/data/make_opacus_half.py [OUT.npz]`` (default: ``opacus_half.npz`` next to
this script). Needs torch and Opacus (``pip install --no-deps opacus``); the tests read the
committed file.

For each case of :data:`CASES` (leaves of per-example gradients in float16 or bfloat16, and a
clip norm), the file holds:

* ``<case>/in/<i>``: leaf ``i``, one gradient per example along axis 0;
* ``<case>/clip``: the clip norm (``max_grad_norm``, a Python float there);
* ``<case>/opacus/<i>``: ``p.summed_grad`` after Opacus's
  ``DPOptimizer(SGD(params, lr=0), noise_multiplier=0, max_grad_norm=clip,
  expected_batch_size=B).clip_and_accumulate()`` with ``p.grad_sample`` leaf ``i`` (params of
  the leaves' dtype);
* ``<case>/norms``: the per-sample norms that call clips by, computed by the two lines of
  ``clip_and_accumulate`` that make them (``torch.stack([g.reshape(len(g), -1).norm(2,
  dim=-1) for g in grad_samples], dim=1).norm(2, dim=1)``).

bfloat16 values are stored as float32 (exactly). torch's half-precision norms sum the squares
in float32 and round the norm once, so the ``overflow`` cases' norms (about 3e4) stay finite
where squares summed in float16 overflow; ``max_grad_norm / (norms + 1e-6)`` is
``(norms + 1e-6).reciprocal() * max_grad_norm`` in torch, each step computed in float32 with
the Python numbers as float32 and rounded to the dtype.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

__all__ = ["CASES", "inputs", "main", "run_opacus"]

SEED = 20261129

#: case: (dtype, leaf shapes per example, batch, scale of the values, clip norm).
CASES: dict[str, tuple[str, tuple[tuple[int, ...], ...], int, float, float]] = {
    "f16-overflow": ("float16", ((2, 4), (3,)), 6, 1e4, 0.1),
    "f16-overflow-huge-clip": ("float16", ((2, 4), (3,)), 6, 1e4, 1e30),
    "f16-unit": ("float16", ((3, 3), (2,), ()), 9, 1.0, 1.25),
    "f16-tiny": ("float16", ((4,),), 5, 1e-3, 1e-3),
    "bf16-unit": ("bfloat16", ((2, 4), (3,)), 8, 1.0, 1.25),
    "bf16-large": ("bfloat16", ((5,), (2, 2)), 17, 100.0, 1.0),
    "bf16-small-clip": ("bfloat16", ((4,),), 3, 1.0, 0.1),
}


def inputs(case: str) -> list[np.ndarray]:
    """The leaves of ``case`` (float16, or float32 holding bfloat16 values)."""
    import torch

    dtype, shapes, batch, scale, _ = CASES[case]
    rng = np.random.default_rng([SEED, *case.encode()])
    leaves = []
    for shape in shapes:
        g = torch.from_numpy(rng.standard_normal((batch, *shape)) * scale)
        g = g.to(getattr(torch, dtype)).to(torch.float32 if dtype == "bfloat16" else g.dtype)
        leaves.append(g.numpy().astype(np.float16 if dtype == "float16" else np.float32))
    return leaves


def run_opacus(case: str) -> tuple[list[np.ndarray], np.ndarray]:
    """Opacus's clipped sums of ``case`` and the per-sample norms it clips by."""
    import torch
    from opacus.optimizers import DPOptimizer

    dtype, _, batch, _, clip = CASES[case]
    params = []
    for g in inputs(case):
        sample = torch.from_numpy(g.copy()).to(getattr(torch, dtype))
        p = torch.nn.Parameter(torch.zeros(sample.shape[1:], dtype=sample.dtype))
        p.grad_sample = sample
        params.append(p)
    samples = [p.grad_sample for p in params]
    opt = DPOptimizer(
        torch.optim.SGD(params, lr=0.0),
        noise_multiplier=0.0,
        max_grad_norm=clip,
        expected_batch_size=batch,
    )
    opt.clip_and_accumulate()
    store = torch.float32 if dtype == "bfloat16" else getattr(torch, dtype)
    sums = [p.summed_grad.detach().to(store) for p in params]
    per_param = [g.reshape(len(g), -1).norm(2, dim=-1) for g in samples]
    norms = torch.stack(per_param, dim=1).norm(2, dim=1)
    if dtype == "bfloat16":
        norms = norms.to(torch.float32)
    return [s.numpy() for s in sums], norms.numpy()


def main(out: Path) -> None:
    import opacus
    import torch

    data: dict[str, np.ndarray] = {}
    for case in CASES:
        for i, g in enumerate(inputs(case)):
            data[f"{case}/in/{i}"] = g
        sums, norms = run_opacus(case)
        for i, s in enumerate(sums):
            data[f"{case}/opacus/{i}"] = s
        data[f"{case}/norms"] = norms
        data[f"{case}/clip"] = np.float64(CASES[case][4])
    provenance = {
        "script": "tests/data/make_opacus_half.py",
        "opacus": opacus.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "seed": SEED,
        "opacus_call": "DPOptimizer(SGD(params, lr=0), noise_multiplier=0, max_grad_norm=clip,"
        " expected_batch_size=B).clip_and_accumulate(); p.summed_grad",
    }
    data["provenance"] = np.array(json.dumps(provenance))
    np.savez_compressed(out, **data)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("opacus_half.npz"))
