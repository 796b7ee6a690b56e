"""The norm-history rules against their reference loops and plain clipping, side by side.

``python -m benchmarks.history [--budget SECONDS] [--small] [--no-torch] [--no-jax]
[--output PATH]`` (from the repository root) times one training step's clipping (or
optimizer step) on ResNet-50's gradients (161 float32 tensors, 25.6 M elements; ``--small``:
the first 10), in one process and in turns (:func:`benchmarks.__main__.interleaved_medians`):

* torch: ``anyclip.torch.ZClip.step`` against ``zclip`` 1.0's ``ZClip.step`` (the reference
  loop: ``.item()`` and Python ``if`` every step) and against plain
  ``torch.nn.utils.clip_grad_norm_``, after warm-up (the EMA statistics set);
  ``anyclip.torch.QuantileClip.step`` (per parameter and global) against ``autoclip`` 0.2's
  ``QuantileClip.step`` and ``clip_grad_norm_``, with a full history of 1000 norms; an optimizer
  step wrapped by ``anyclip.torch.skip_on_spike`` against the bare step (SGD with momentum,
  AdamW; torch's default ``foreach`` implementations);
* optax, each update compiled with ``jax.jit``: ``anyclip.optax.zclip`` and ``quantile_clip``
  against ``optax.clip_by_global_norm``; ``anyclip.optax.skip_on_spike(adamw)`` against
  ``adamw`` and ``optax.apply_if_finite(adamw)``.

References that are not installed (``pip install --no-deps zclip==1.0.0 autoclip==0.2.1``)
are left out of the table. It writes ``docs/_ext/history-results.md`` (``--output``), which
``docs/performance.md`` includes.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.__main__ import interleaved_medians
from benchmarks.workloads import resnet50_shapes

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "_ext" / "history-results.md"
#: The history autoclip and anyclip's QuantileClip keep (autoclip's default), filled up front.
HISTORY = 1000

#: ``(name, role, call)``: role ``"anyclip"``, ``"reference"`` or ``"anchor"``.
Impl = tuple[str, str, Callable[[], Any]]


def _shapes(small: bool) -> list[tuple[int, ...]]:
    shapes = resnet50_shapes()
    return shapes[:10] if small else shapes


def _grads(shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """Random normal gradients of global norm about 5 (so that a limit of 1 clips)."""
    rng = np.random.default_rng(0)
    n = sum(math.prod(s) for s in shapes)
    scale = 5.0 / math.sqrt(n)
    return [(rng.standard_normal(s) * scale).astype(np.float32) for s in shapes]


# ------------------------------------------------------------------ torch
def torch_groups(small: bool) -> list[tuple[str, list[Impl]]]:
    """The torch groups: each a title and the implementations timed together."""
    import torch

    import anyclip.torch

    grads = _grads(_shapes(small))

    def module() -> torch.nn.Module:
        """Parameters with ``grads`` as their gradients (a module: zclip takes a model)."""
        m = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(g.shape)) for g in grads])
        for p, g in zip(m.parameters(), grads, strict=True):
            p.grad = torch.from_numpy(g.copy())
        return m

    def warmed(step: Callable[[], Any], n: int) -> Callable[[], Any]:
        for _ in range(n):
            step()
        return step

    have_zclip = importlib.util.find_spec("zclip") is not None
    have_autoclip = importlib.util.find_spec("autoclip") is not None
    groups: list[tuple[str, list[Impl]]] = []

    # ZClip: after its 25 warm-up steps, the statistics set
    m_ref, m_any, m_plain = module(), module(), module()
    zc = anyclip.torch.ZClip()
    p_any = list(m_any.parameters())
    impls: list[Impl] = [
        ("`anyclip.torch.ZClip().step`", "anyclip", warmed(lambda: zc.step(p_any), 30)),
    ]
    if have_zclip:
        import zclip

        zref = zclip.ZClip()
        impls.append(
            ("`zclip.ZClip().step` (zclip 1.0)", "reference", warmed(lambda: zref.step(m_ref), 30))
        )
    p_plain = list(m_plain.parameters())
    impls.append(
        (
            "`torch.nn.utils.clip_grad_norm_(max_norm=1)`",
            "anchor",
            lambda: torch.nn.utils.clip_grad_norm_(p_plain, 1.0),
        )
    )
    groups.append(("ZClip, after warm-up", impls))

    # QuantileClip with a full history, per parameter and global
    for global_threshold in (False, True):
        m_ref, m_any, m_plain = module(), module(), module()
        p_any, p_ref, p_plain = (list(m.parameters()) for m in (m_any, m_ref, m_plain))
        qc = anyclip.torch.QuantileClip(p_any, 0.9, HISTORY, global_threshold=global_threshold)
        qc.step()
        _fill_anyclip_history(qc, p_any, global_threshold)
        impls = [("`anyclip.torch.QuantileClip(...).step`", "anyclip", qc.step)]
        if have_autoclip:
            from autoclip.torch import QuantileClip as AutoQuantileClip

            ref = AutoQuantileClip(p_ref, 0.9, HISTORY, global_threshold=global_threshold)
            ref.step()
            _fill_autoclip_history(ref, p_ref, global_threshold)
            impls.append(
                ("`autoclip.torch.QuantileClip(...).step` (autoclip 0.2)", "reference", ref.step)
            )
        impls.append(
            (
                "`torch.nn.utils.clip_grad_norm_(max_norm=1)`",
                "anchor",
                lambda p=p_plain: torch.nn.utils.clip_grad_norm_(p, 1.0),
            )
        )
        which = "global" if global_threshold else "per parameter"
        groups.append((f"QuantileClip ({which}), history of {HISTORY} norms", impls))

    # skip_on_spike around an optimizer: the wrapped step against the bare one
    optimizers: list[tuple[str, Callable[[list[torch.Tensor]], torch.optim.Optimizer]]] = [
        ("SGD(momentum=0.9)", lambda ps: torch.optim.SGD(ps, lr=1e-4, momentum=0.9)),
        ("AdamW", lambda ps: torch.optim.AdamW(ps, lr=1e-4)),
    ]
    for name, make in optimizers:
        p_any = list(module().parameters())
        p_plain = list(module().parameters())
        wrapped = anyclip.torch.skip_on_spike(make(p_any))
        bare = make(p_plain)
        impls = [
            (f"`anyclip.torch.skip_on_spike({name}).step()`", "anyclip", warmed(wrapped.step, 3)),
            (f"`{name}.step()`", "anchor", warmed(bare.step, 3)),
        ]
        groups.append((f"optimizer step, {name}", impls))
    return groups


def _fill_anyclip_history(qc: Any, params: list[Any], global_threshold: bool) -> None:
    """Load a full history (the norms times 0.5 to 1.5) through ``load_state_dict``."""
    import torch

    gen = torch.Generator().manual_seed(1)
    norms = torch.stack([p.grad.norm() for p in params])
    if global_threshold:
        norms = norms.norm().reshape(1)
    window = norms[:, None] * (0.5 + torch.rand(len(norms), HISTORY, generator=gen))
    h = {
        "count": torch.full((len(norms),), HISTORY, dtype=torch.int32),
        "mean": torch.zeros(len(norms)),
        "var": torch.zeros(len(norms)),
        "window": window,
    }
    if global_threshold:
        h = {k: v[0] for k, v in h.items()}
        qc.load_state_dict({"groups": [{}], "global": h})
    else:
        qc.load_state_dict({"groups": [h], "global": {}})


def _fill_autoclip_history(ref: Any, params: list[Any], global_threshold: bool) -> None:
    """autoclip's histories (1-d tensors it ``hstack``s to): full, as above."""
    import torch

    gen = torch.Generator().manual_seed(1)
    norms = torch.stack([p.grad.norm() for p in params])
    if global_threshold:
        ref.state["global_history"] = norms.norm() * (0.5 + torch.rand(HISTORY, generator=gen))
        return
    for p, n in zip(params, norms, strict=True):
        ref.state[p]["history"] = n * (0.5 + torch.rand(HISTORY, generator=gen))


# ------------------------------------------------------------------ optax
def jax_groups(small: bool) -> list[tuple[str, list[Impl]]]:
    """The optax groups: each update compiled with ``jax.jit`` (state not threaded)."""
    import jax
    import jax.numpy as jnp
    import optax

    import anyclip.optax

    grads = {f"p{i}": jnp.asarray(g) for i, g in enumerate(_grads(_shapes(small)))}
    params = jax.tree.map(jnp.zeros_like, grads)

    def compiled(tx: Any, warm: int = 0) -> Callable[[], Any]:
        """A jitted update of ``tx`` from the state after ``warm`` updates."""
        update = jax.jit(tx.update)
        state = tx.init(params)
        for _ in range(warm):
            _, state = update(grads, state, params)
        return lambda: update(grads, state, params)

    clip = ("`optax.clip_by_global_norm(1)`", "anchor", compiled(optax.clip_by_global_norm(1.0)))
    adamw = optax.adamw(1e-4)
    return [
        (
            "ZClip, after warm-up",
            [("`anyclip.optax.zclip()`", "anyclip", compiled(anyclip.optax.zclip(), 30)), clip],
        ),
        (
            "QuantileClip (per parameter), history of 1000 norms",
            [
                (
                    "`anyclip.optax.quantile_clip()`",
                    "anyclip",
                    compiled(anyclip.optax.quantile_clip(), 3),
                ),
                clip,
            ],
        ),
        (
            "QuantileClip (global), history of 1000 norms",
            [
                (
                    "`anyclip.optax.quantile_clip(global_threshold=True)`",
                    "anyclip",
                    compiled(anyclip.optax.quantile_clip(global_threshold=True), 3),
                ),
                clip,
            ],
        ),
        (
            "optimizer update, adamw",
            [
                (
                    "`anyclip.optax.skip_on_spike(adamw)`",
                    "anyclip",
                    compiled(anyclip.optax.skip_on_spike(adamw), 3),
                ),
                ("`adamw`", "anchor", compiled(adamw)),
                (
                    "`optax.apply_if_finite(adamw, 10)`",
                    "reference",
                    compiled(optax.apply_if_finite(adamw, 10)),
                ),
            ],
        ),
    ]


# ------------------------------------------------------------------ report
def _time(
    groups: list[tuple[str, list[Impl]]], sync: Callable[[Any], Any], budget: float
) -> list[list[str]]:
    rows = []
    for title, impls in groups:
        times = interleaved_medians([call for _, _, call in impls], sync, budget)
        by_role = {role: t for (_, role, _), t in zip(impls, times, strict=True)}
        for (name, role, _), t in zip(impls, times, strict=True):
            ratios = [
                f"{t / by_role[other]:.2f}" if role == "anyclip" and other in by_role else ""
                for other in ("reference", "anchor")
            ]
            shown = f"**{name}**" if role == "anyclip" else name
            rows.append([title, shown, f"{t * 1e3:.3f}", *ratios])
    return rows


def header(small: bool) -> list[str]:
    """The lines above the tables: what is measured and how to read it."""
    elements = sum(math.prod(s) for s in _shapes(small))
    return [
        "## Norm-history rules",
        "",
        "Written by `python -m benchmarks.history`. One training step's clipping (or optimizer "
        f"step) on ResNet-50's gradients ({len(_shapes(small))} float32 tensors, {elements:,} "
        f"elements), on {platform.machine()} with {os.cpu_count()} cores; median ms per call, "
        "the implementations of a row group timed in turns in one process. `x reference` is "
        "anyclip's time over the reference loop's (zclip 1.0, autoclip 0.2, "
        "`optax.apply_if_finite`), `x plain` over plain clipping (or the bare optimizer step).",
        "",
        "How to read it:",
        "",
        "- zclip reads the norm on the host (`.item()`) and multiplies the gradients only when "
        "it clips; anyclip's ZClip keeps the decision on the device and multiplies by its factor "
        "(1 when it does not clip) every step, as `clip_grad_norm_` does. On a CPU the host read "
        "is free; on an accelerator it stalls the queue every step.",
        "- autoclip's per-parameter QuantileClip calls `clip_grad_norm_` and `torch.quantile` "
        "once per parameter and grows its histories with `hstack`; anyclip takes the quantiles "
        "of all parameters' fixed-size buffers in one batched call.",
        "- `skip_on_spike` copies the parameters and the optimizer's state before the step and "
        "selects (`torch.where`) between them and the stepped values after it: extra memory "
        "passes over every tensor the optimizer writes, the price of a skip decided on the "
        "device.",
        "",
    ]


def run(budget: float, small: bool, use_torch: bool, use_jax: bool) -> str:
    lines = header(small)
    if use_torch:
        import torch

        # one thread: on a loaded machine torch's OpenMP workers spin at every barrier (a
        # 10-tensor clip_grad_norm_ measured 0.3 ms on one thread, 24 ms on two)
        torch.set_num_threads(1)
        lines += [
            f"torch {torch.__version__}, eager, {torch.get_num_threads()} thread:",
            "",
            "| step | implementation | ms | x reference | x plain |",
            "| --- | --- | ---: | ---: | ---: |",
        ]
        lines += [
            "| " + " | ".join(r) + " |" for r in _time(torch_groups(small), lambda _: None, budget)
        ]
        lines.append("")
    if use_jax:
        import jax
        import optax

        jax.config.update("jax_enable_x64", False)
        lines += [
            f"JAX {jax.__version__}, optax {optax.__version__}, `jax.jit` "
            f"({jax.devices()[0].platform}):",
            "",
            "| update | implementation | ms | x reference | x plain |",
            "| --- | --- | ---: | ---: | ---: |",
        ]
        rows = _time(jax_groups(small), jax.block_until_ready, budget)
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.history", description=__doc__)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per function")
    parser.add_argument("--small", action="store_true", help="the first 10 tensors (a smoke run)")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-jax", action="store_true")
    parser.add_argument("--output", type=Path, default=OUT, help="where the table is written")
    args = parser.parse_args(argv)
    table = run(args.budget, args.small, not args.no_torch, not args.no_jax)
    print(table, end="")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
