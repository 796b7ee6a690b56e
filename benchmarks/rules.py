"""Per-example clipping and AGC against optax's own, under ``jax.jit``, side by side.

``python -m benchmarks.rules [--budget SECONDS] [--small] [--output PATH]`` (from the repository
root) times, in one process and in turns (:func:`benchmarks.__main__.interleaved_medians`):

* per-example clipping of a batch of MLP gradients: ``anyclip.tree.per_example_clip(...,
  style="optax")`` against ``optax.per_example_global_norm_clip``;
* AGC of ResNet-50's parameters in JAX's layouts (``HWIO``, ``IO``):
  ``anyclip.optax.adaptive_grad_clip`` against ``optax.adaptive_grad_clip``;
* block RMS of the same tree: ``anyclip.optax.clip_by_block_rms`` against optax's.

Each function is compiled once with ``jax.jit``; the table gives the median time per call and
anyclip's ratio to optax (below 1: faster). ``--small`` shrinks the workloads (a smoke run).
The table is printed, and written to ``--output`` when given.
"""

from __future__ import annotations

import argparse
import itertools
import platform
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.__main__ import interleaved_medians
from benchmarks.workloads import resnet50_shapes


def _hwio(shape: tuple[int, ...]) -> tuple[int, ...]:
    """torch's ``OIHW`` / ``OI`` as JAX's ``HWIO`` / ``IO``."""
    if len(shape) == 4:
        o, i, h, w = shape
        return (h, w, i, o)
    if len(shape) == 2:
        return shape[::-1]
    return shape


def cases(small: bool) -> list[tuple[str, str, Any, Any, tuple[Any, ...]]]:
    """``(workload, operation, anyclip_fn, optax_fn, args)`` for every row."""
    import jax
    import jax.numpy as jnp
    import optax

    import anyclip.optax
    from anyclip import tree

    rng = np.random.default_rng(0)
    batch, widths = (8, (64, 32, 10)) if small else (64, (784, 256, 10))
    per_example = {}
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        per_example[f"w{i}"] = jnp.asarray(rng.standard_normal((batch, a, b)), jnp.float32)
        per_example[f"b{i}"] = jnp.asarray(rng.standard_normal((batch, b)), jnp.float32)
    shapes = [_hwio(s) for s in resnet50_shapes()]
    if small:
        shapes = shapes[:10]
    params = {
        f"p{i}": jnp.asarray(rng.standard_normal(s) * 0.05, jnp.float32)
        for i, s in enumerate(shapes)
    }
    grads = {
        k: jnp.asarray(rng.standard_normal(v.shape) * 1e-3, jnp.float32) for k, v in params.items()
    }

    def transform(tx: Any) -> Any:
        return jax.jit(lambda g, p: tx.update(g, tx.init(p), p)[0])

    n = sum(int(np.prod(v.shape)) for v in per_example.values())
    m = sum(int(np.prod(s)) for s in shapes)
    pe_title = f"MLP per-example gradients, batch {batch} ({n:,} elements)"
    r_title = f"ResNet-50 parameters, HWIO ({m:,} elements)"
    return [
        (
            pe_title,
            "per_example_clip",
            jax.jit(lambda g: tree.per_example_clip(g, 1.0, style="optax")),
            jax.jit(lambda g: optax.per_example_global_norm_clip(g, 1.0)),
            (per_example,),
        ),
        (
            r_title,
            "adaptive_grad_clip",
            transform(anyclip.optax.adaptive_grad_clip(0.01)),
            transform(optax.adaptive_grad_clip(0.01)),
            (grads, params),
        ),
        (
            r_title,
            "clip_by_block_rms",
            transform(anyclip.optax.clip_by_block_rms(1e-3)),
            transform(optax.clip_by_block_rms(1e-3)),
            (grads, params),
        ),
    ]


def run(budget: float, small: bool) -> str:
    import jax

    def sync(out: Any) -> None:
        jax.block_until_ready(out)

    lines = [
        f"JAX {jax.__version__} on {platform.machine()} ({jax.devices()[0].platform}), jit; "
        "median ms per call, in turns",
        "",
        "| workload | operation | anyclip (ms) | optax (ms) | anyclip / optax |",
        "|---|---|---:|---:|---:|",
    ]
    for title, op, ours, theirs, args in cases(small):
        t_ours, t_ref = interleaved_medians(
            [lambda f=ours, a=args: f(*a), lambda f=theirs, a=args: f(*a)], sync, budget
        )
        lines.append(
            f"| {title} | {op} | {t_ours * 1e3:.3f} | {t_ref * 1e3:.3f} | {t_ours / t_ref:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rules", description=__doc__)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per function")
    parser.add_argument("--small", action="store_true", help="small workloads (a smoke run)")
    parser.add_argument("--output", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    table = run(args.budget, args.small)
    print(table, end="")
    if args.output is not None:
        args.output.write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
