"""Per-example clipping and AGC against optax's, Opacus's and timm's own, side by side.

``python -m benchmarks.rules [--budget SECONDS] [--small] [--output PATH]`` (from the repository
root) times, in one process and in turns (:func:`benchmarks.__main__.interleaved_medians`),
JAX under ``jax.jit`` against optax:

* per-example clipping of a batch of MLP gradients: ``anyclip.tree.per_example_clip(...,
  style="optax")`` against ``optax.per_example_global_norm_clip``;
* AGC of ResNet-50's parameters in JAX's layouts (``HWIO``, ``IO``):
  ``anyclip.optax.adaptive_grad_clip`` against ``optax.adaptive_grad_clip``;
* block RMS of the same tree: ``anyclip.optax.clip_by_block_rms`` against optax's.

and torch (CPU, eager) against the libraries' own loops:

* per-example clipping of the same MLP's per-sample gradients (Opacus's ``grad_sample``):
  ``anyclip.tree.per_example_clip(..., style="opacus")`` against Opacus's
  ``DPOptimizer.clip_and_accumulate()`` (per-sample norms, factors, one ``einsum`` per
  parameter into ``summed_grad``);
* AGC of ResNet-50's parameters in torch's layouts (``OIHW``, ``OI``):
  ``anyclip.torch.adaptive_clip_grad_`` against timm's ``adaptive_clip_grad``. timm itself
  imports torchvision on ``import timm``, which has no build for the pinned torch; the anchor
  is then timm's own ``timm/utils/agc.py`` loaded from an installed (``pip install --no-deps
  timm``) but unimportable timm, or, without any timm, timm's loop written out here from its
  documented formula (:func:`timm_style_agc`). The table says which.

JAX functions are compiled once with ``jax.jit``; the table gives the median time per call and
anyclip's ratio to the anchor (below 1: faster). ``--small`` shrinks the workloads (a smoke
run). The tables are printed, and written to ``--output`` (by default
``docs/_ext/rules-results.md``, which ``docs/performance.md`` includes).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import platform
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.__main__ import ROOT, interleaved_medians
from benchmarks.workloads import resnet50_shapes

OUT = ROOT / "docs" / "_ext" / "rules-results.md"


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


# ------------------------------------------------------------------------ torch
def timm_style_agc(
    parameters: Any, clip_factor: float = 0.01, eps: float = 1e-3, norm_type: float = 2.0
) -> None:
    """timm's ``adaptive_clip_grad`` loop, from its documented formula (the fallback anchor).

    Per parameter with a gradient: unit norms over every axis but the first (the whole tensor
    for rank <= 1), ``max_norm = clamp(p_norm, min=eps) * clip_factor``, the gradient replaced
    by ``where(g_norm < max_norm, g, g * (max_norm / clamp(g_norm, min=1e-6)))`` in place.
    """
    import torch

    def unitwise(x: Any) -> Any:
        if x.ndim <= 1:
            return x.norm(norm_type)
        return x.norm(norm_type, dim=tuple(range(1, x.ndim)), keepdim=True)

    for p in parameters:
        if p.grad is None:
            continue
        p_data, g_data = p.detach(), p.grad.detach()
        max_norm = unitwise(p_data).clamp_(min=eps).mul_(clip_factor)
        g_norm = unitwise(g_data)
        clipped = g_data * (max_norm / g_norm.clamp(min=1e-6))
        p.grad.detach().copy_(torch.where(g_norm < max_norm, g_data, clipped))


def timm_agc() -> tuple[Any, str]:
    """timm's own ``adaptive_clip_grad`` and its source, else :func:`timm_style_agc`."""
    try:
        import timm
        from timm.utils.agc import adaptive_clip_grad

        return adaptive_clip_grad, f"timm {timm.__version__}"
    except ImportError:
        pass
    spec = importlib.util.find_spec("timm")  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "agc.py"
        if path.is_file():
            loaded = importlib.util.spec_from_file_location("timm_utils_agc", path)
            assert loaded is not None and loaded.loader is not None
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
            version = next(
                (
                    d.name.removeprefix("timm-").removesuffix(".dist-info")
                    for d in path.parents[2].glob("timm-*.dist-info")
                ),
                "?",
            )
            return module.adaptive_clip_grad, f"timm {version}'s timm/utils/agc.py (file)"
    return timm_style_agc, "timm's loop written out (no timm installed)"


def torch_cases(small: bool) -> tuple[list[tuple[str, str, str, Any, Any]], list[str]]:
    """``(workload, operation, anchor, anyclip_fn, anchor_fn)`` rows on torch, and notes."""
    import torch

    import anyclip.torch
    from anyclip import tree

    rows: list[tuple[str, str, str, Any, Any]] = []
    notes: list[str] = []
    rng = np.random.default_rng(0)
    batch, widths = (8, (64, 32, 10)) if small else (64, (784, 256, 10))
    shapes = []
    for a, b in itertools.pairwise(widths):
        shapes += [(b, a), (b,)]  # torch's Linear: weight (out, in), bias (out,)
    samples = [
        torch.from_numpy(rng.standard_normal((batch, *s)).astype(np.float32)) for s in shapes
    ]
    n = sum(int(np.prod(t.shape)) for t in samples)
    pe_title = f"MLP per-sample gradients, batch {batch} ({n:,} elements)"
    if importlib.util.find_spec("opacus") is not None:
        from opacus.optimizers import DPOptimizer

        params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        for p, g in zip(params, samples, strict=True):
            p.grad_sample = g
        opt = DPOptimizer(
            torch.optim.SGD(params, lr=0.0),
            noise_multiplier=0.0,
            max_grad_norm=1.0,
            expected_batch_size=batch,
        )

        def opacus_clip() -> Any:
            for p in params:  # what zero_grad() clears between steps (not the samples)
                p.summed_grad = None
                if hasattr(p.grad_sample, "_processed"):
                    del p.grad_sample._processed
            opt.clip_and_accumulate()
            return [p.summed_grad for p in params]

        import opacus

        rows.append(
            (
                pe_title,
                "per_example_clip",
                f"Opacus {opacus.__version__} clip_and_accumulate",
                lambda: tree.per_example_clip(samples, 1.0, style="opacus"),
                opacus_clip,
            )
        )
    else:
        notes.append("Opacus is not installed: no per-example row on torch.")
    r_shapes = resnet50_shapes()[: 10 if small else None]
    data = [rng.standard_normal(s).astype(np.float32) * 0.05 for s in r_shapes]
    grads = [rng.standard_normal(s).astype(np.float32) * 1e-3 for s in r_shapes]

    def model() -> list[Any]:
        ps = [torch.nn.Parameter(torch.from_numpy(d.copy())) for d in data]
        for p, g in zip(ps, grads, strict=True):
            p.grad = torch.from_numpy(g.copy())
        return ps

    ours, theirs = model(), model()
    fn, source = timm_agc()
    m = sum(int(np.prod(s)) for s in r_shapes)
    rows.append(
        (
            f"ResNet-50 parameters, OIHW ({m:,} elements)",
            "adaptive_clip_grad_",
            source,
            lambda: anyclip.torch.adaptive_clip_grad_(ours, 0.01),
            lambda: fn(theirs, 0.01),
        )
    )
    return rows, notes


def run_torch(budget: float, small: bool) -> str:
    import torch

    rows, notes = torch_cases(small)
    lines = [
        f"torch {torch.__version__} on {platform.machine()} (CPU, {torch.get_num_threads()} "
        "threads), eager; median ms per call, in turns",
        "",
        "| workload | operation | anchor | anyclip (ms) | anchor (ms) | anyclip / anchor |",
        "|---|---|---|---:|---:|---:|",
    ]
    for title, op, anchor, ours, theirs in rows:
        t_ours, t_ref = interleaved_medians([ours, theirs], lambda _: None, budget)
        lines.append(
            f"| {title} | {op} | {anchor} | {t_ours * 1e3:.3f} | {t_ref * 1e3:.3f} | "
            f"{t_ours / t_ref:.2f} |"
        )
    lines += [f"\n{n}" for n in notes]
    return "\n".join(lines) + "\n"


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
    parser.add_argument("--output", type=Path, default=OUT, help="write the tables here")
    args = parser.parse_args(argv)
    text = "\n".join(
        [
            "### Per-example clipping and AGC against optax, Opacus and timm",
            "",
            "Measured by `python -m benchmarks.rules`: anyclip and the library's own function "
            "on the same data, timed in turns in one process (below 1: anyclip is faster). "
            "Opacus's anchor is its `DPOptimizer.clip_and_accumulate()` on parameters whose "
            "`grad_sample` holds the per-sample gradients; timm's is `adaptive_clip_grad` "
            "(the row says where it came from: `import timm` needs a torchvision built for "
            "the pinned torch).",
            "",
            run(args.budget, args.small),
            run_torch(args.budget, args.small),
        ]
    )
    print(text, end="")
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
