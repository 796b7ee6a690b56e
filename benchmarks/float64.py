"""float64 norms in TF's order of additions against each library's own norm, side by side.

``python -m benchmarks.float64 [--budget SECONDS] [--small] [--output PATH]`` (from the
repository root) times, in one process and in turns
(:func:`benchmarks.__main__.interleaved_medians`), anyclip's float64 functions, which add the
squares in TF 2.21's order (``anyclip._kernels._tforder``), against the library's own norm on
the same data:

* one tensor of 1,000,000 float64 values: ``norm`` and ``clip_by_norm`` on NumPy, torch (CPU,
  eager), JAX (CPU, eager and under ``jax.jit``) and array-api-strict;
* 2,000 tensors of 256 float64 values (one leaf of TF's tree each) and ResNet-50's parameters
  in float64 (161 tensors, 25,557,032 values): ``global_norm`` on NumPy and torch;
* one 1,000 x 1,000 float64 matrix: ``clip_by_norm`` over axis 0 (TF's columns: Eigen's packet
  accumulators) and over axis 1 (its rows: one tree each; ``anyclip._kernels._tfaxes``) on
  NumPy and torch.

The anchors are each library's own float64 norm (its order of additions: not TF's value, up to
20 ULP away) and, for ``clip_by_norm``, TF's formula written with it. The table gives the
median time per call and anyclip's ratio to the anchor (above 1: anyclip is slower).
``--small`` shrinks the workloads (a smoke run). The table is printed, and written to
``--output`` (by default ``docs/_ext/float64-order.md``, which ``docs/performance.md``
includes).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.__main__ import ROOT, interleaved_medians
from benchmarks.workloads import resnet50_shapes

OUT = ROOT / "docs" / "_ext" / "float64-order.md"

#: ``(workload, operation, backend, anchor name, anyclip_fn, anchor_fn, sync)``
Case = tuple[str, str, str, str, Callable[[], Any], Callable[[], Any], Callable[[Any], Any]]


def _none(_: Any) -> None:
    return None


def _numpy_clip(m: np.ndarray, c: float, axis: int) -> np.ndarray:
    norms = np.linalg.norm(m, axis=axis, keepdims=True)
    return m * (c / np.maximum(norms, c))


def _torch_clip(t: Any, c: float, axis: int) -> Any:
    import torch

    norms = torch.linalg.vector_norm(t, dim=axis, keepdim=True)
    return t * (c / torch.clamp(norms, min=c))


def _axes_rows(
    workload: str, backend: str, anchor: str, m: Any, clip: Callable[..., Any]
) -> list[Case]:
    """``clip_by_norm`` over axis 0 and over axis 1 of the matrix ``m``, against ``clip``."""
    import anyclip

    return [
        (
            workload,
            f"clip_by_norm, axes={axis}",
            backend,
            anchor,
            functools.partial(anyclip.clip_by_norm, m, 1.0, axes=axis),
            functools.partial(clip, m, 1.0, axis),
            _none,
        )
        for axis in (0, 1)
    ]


def cases(small: bool) -> tuple[list[Case], list[str]]:
    """Every row, and notes on the backends that are not installed."""
    import anyclip

    rng = np.random.default_rng(0)
    n, many, width = (10_000, 20, 256) if small else (1_000_000, 2_000, 256)
    side = 100 if small else 1_000
    x = rng.standard_normal(n)
    m = rng.standard_normal((side, side))
    matrix = f"one {side:,} x {side:,} float64 matrix"
    xs = [rng.standard_normal(width) for _ in range(many)]
    model = [rng.standard_normal(s) for s in resnet50_shapes()[: 10 if small else None]]
    one = f"one tensor of {n:,} float64 values"
    several = f"{many:,} tensors of {width} float64 values"
    resnet = f"ResNet-50 parameters, float64 ({sum(a.size for a in model):,} values)"
    c = 1.0
    rows: list[Case] = [
        (
            one,
            "norm",
            "numpy",
            "np.linalg.norm",
            lambda: anyclip.norm(x),
            lambda: np.linalg.norm(x),
            _none,
        ),
        (
            one,
            "clip_by_norm",
            "numpy",
            "x * (c / max(np.linalg.norm(x), c))",
            lambda: anyclip.clip_by_norm(x, c),
            lambda: x * (c / max(np.linalg.norm(x), c)),
            _none,
        ),
        (
            several,
            "global_norm",
            "numpy",
            "sqrt of the sum of np.vdot",
            lambda: anyclip.global_norm(xs),
            lambda: np.sqrt(sum(np.vdot(a, a) for a in xs)),
            _none,
        ),
        (
            resnet,
            "global_norm",
            "numpy",
            "sqrt of the sum of np.vdot",
            lambda: anyclip.global_norm(model),
            lambda: np.sqrt(sum(np.vdot(a.ravel(), a.ravel()) for a in model)),
            _none,
        ),
    ]
    rows += _axes_rows(matrix, "numpy", "m * (c / maximum(norm(m, axis), c))", m, _numpy_clip)
    notes: list[str] = []
    try:
        import torch
    except ImportError:
        notes.append("torch is not installed: no torch rows.")
    else:
        torch.set_num_threads(os.cpu_count() or 1)
        t = torch.from_numpy(x.copy())
        ts = [torch.from_numpy(a.copy()) for a in xs]
        tm = [torch.from_numpy(a.copy()) for a in model]
        rows += [
            (
                one,
                "norm",
                "torch",
                "torch.linalg.vector_norm",
                lambda: anyclip.norm(t),
                lambda: torch.linalg.vector_norm(t),
                _none,
            ),
            (
                one,
                "clip_by_norm",
                "torch",
                "t * (c / clamp(vector_norm(t), min=c))",
                lambda: anyclip.clip_by_norm(t, c),
                lambda: t * (c / torch.clamp(torch.linalg.vector_norm(t), min=c)),
                _none,
            ),
            (
                several,
                "global_norm",
                "torch",
                "vector_norm of torch._foreach_norm",
                lambda: anyclip.global_norm(ts),
                lambda: torch.linalg.vector_norm(torch.stack(torch._foreach_norm(ts, 2.0))),
                _none,
            ),
            (
                resnet,
                "global_norm",
                "torch",
                "vector_norm of torch._foreach_norm",
                lambda: anyclip.global_norm(tm),
                lambda: torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tm, 2.0))),
                _none,
            ),
        ]
        anchor = "t * (c / clamp(vector_norm(t, axis), min=c))"
        rows += _axes_rows(matrix, "torch", anchor, torch.from_numpy(m.copy()), _torch_clip)
    rows += _jax_cases(x, one, notes)
    rows += _dask_cases(small, notes)
    try:
        import array_api_strict as xps
    except ImportError:
        notes.append("array-api-strict is not installed: no array-api-strict row.")
    else:
        s = xps.asarray(x)
        rows.append(
            (
                one,
                "norm",
                "array-api-strict",
                "xp.linalg.vector_norm",
                lambda: anyclip.norm(s),
                lambda: xps.linalg.vector_norm(s),
                _none,
            )
        )
    return rows, notes


def _dask_cases(small: bool, notes: list[str]) -> list[Case]:
    try:
        import dask
        import dask.array as da
    except ImportError:
        notes.append("dask is not installed: no dask rows.")
        return []
    import anyclip

    n, chunk = (100_000, 10_000) if small else (10_000_000, 1_000_000)
    x = da.from_array(np.random.default_rng(3).standard_normal(n), chunks=chunk)
    title = f"one array of {n:,} float64 values in chunks of {chunk:,}"

    def compute(out: Any) -> Any:
        return dask.compute(out, scheduler="threads")

    return [
        (
            title,
            "norm",
            "dask",
            "sqrt((x * x).sum())",
            lambda: anyclip.norm(x),
            lambda: da.sqrt((x * x).sum()),
            compute,
        )
    ]


def _jax_cases(x: np.ndarray, title: str, notes: list[str]) -> list[Case]:
    try:
        import jax
    except ImportError:
        notes.append("JAX is not installed: no JAX rows.")
        return []
    import jax.numpy as jnp

    import anyclip

    jax.config.update("jax_enable_x64", True)
    j = jnp.asarray(x, dtype=jnp.float64)

    def sync(out: Any) -> None:
        jax.block_until_ready(out)

    ours_jit = jax.jit(anyclip.norm)
    theirs_jit = jax.jit(jnp.linalg.norm)
    return [
        (
            title,
            "norm",
            "jax, eager",
            "jnp.linalg.norm",
            lambda: anyclip.norm(j),
            lambda: jnp.linalg.norm(j),
            sync,
        ),
        (
            title,
            "norm",
            "jax, jit",
            "jnp.linalg.norm under jit",
            lambda: ours_jit(j),
            lambda: theirs_jit(j),
            sync,
        ),
    ]


def run(budget: float, small: bool) -> str:
    """The table (markdown) of every row of :func:`cases`."""
    rows, notes = cases(small)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"{platform.machine()} CPU, {os.cpu_count()} cores, load average {load:.2f} at the "
        "start; median ms per call, in turns",
        "",
        "| workload | operation | backend | anchor | anyclip (ms) | anchor (ms) "
        "| anyclip / anchor |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for title, op, backend, anchor, ours, theirs, sync in rows:
        t_ours, t_ref = interleaved_medians([ours, theirs], sync, budget)
        lines.append(
            f"| {title} | {op} | {backend} | {anchor} | {t_ours * 1e3:.3f} | "
            f"{t_ref * 1e3:.3f} | {t_ours / t_ref:.2f} |"
        )
    lines += [f"\n{n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.float64", description=__doc__)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per function")
    parser.add_argument("--small", action="store_true", help="small workloads (a smoke run)")
    parser.add_argument("--output", type=Path, default=OUT, help="write the table here")
    args = parser.parse_args(argv)
    text = "\n".join(
        [
            "## float64 sums in TF's order",
            "",
            "float64 sums of squares add in TF's (Eigen's) order on NumPy, torch (CPU), JAX "
            "(CPU, not sharded), array-api-strict and dask ([TF behaviour](tf-behaviour.md)), so "
            "they cost more than each library's own sum. Measured by "
            "`python -m benchmarks.float64`: anyclip and the library's own norm on the same "
            "data, timed in turns in one process (above 1: anyclip is slower). NumPy and "
            "torch sum the leaves of TF's tree as NumPy arrays (torch through a view of its "
            "memory) and add the tree's nodes a level at a time; JAX and array-api-strict "
            "gather the leaves and add them in array-API operations (under `jit`, traced); "
            "dask rechunks the flattened array at nodes of TF's tree and sums each node as "
            "NumPy does, one task per node (its rows build and compute the graph, with "
            "dask's threaded scheduler). A sum over some of the axes (the matrix rows) follows "
            "TF's route for the shape (`anyclip._kernels._tfaxes`): its columns add a slice "
            "at a time (NumPy's in-order reduction, torch through a view of its memory), its "
            "rows each sum as a tree. "
            "The first eager JAX call for a new shape compiles two programs (about 2 s for "
            "1,000,000 elements), outside the medians. NumPy's anchors call OpenBLAS's "
            "multi-threaded dot, whose time swings with the machine's load (0.06 ms to 16 ms "
            "for 1,000,000 values on the 2-core machine of the table above while other jobs "
            "ran), so their ratios are loose. float32 keeps each library's own order and the "
            "benchmarks above.",
            "",
            run(args.budget, args.small),
        ]
    )
    print(text, end="")
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
