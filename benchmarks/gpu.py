"""``python -m benchmarks.gpu``: anyclip against each library's own clipping on one device.

``python -m benchmarks.gpu [--device cuda|cpu] [--out PATH] [--repeats N] [--smoke]`` times,
in one process and in turns (each round calls every implementation of a row group once, the
order rotating), the median of ``--repeats`` calls after warm-up:

* global-norm clipping of the parameter shapes of ResNet-50, GPT-2 small, 2,000 x 256 and
  Llama-3.2-1B, in float32 and bfloat16: ``anyclip.clip_by_global_norm`` against torch's
  ``_foreach_norm`` + ``_foreach_mul`` (functional), ``anyclip.torch.clip_grad_norm_`` against
  ``torch.nn.utils.clip_grad_norm_(foreach=True)`` (in place);
* one 8192 x 8192 tensor: ``anyclip.clip_by_norm`` against
  ``t * clamp(max_norm / vector_norm(t), max=1)``;
* the stateful rules on ResNet-50's float32 gradients: ``anyclip.torch.ZClip.step``,
  ``QuantileClip.step`` (global), ``skip_on_spike(AdamW).step`` and
  ``apply_if_finite(AdamW, 5).step`` against a plain ``clip_grad_norm_`` and the bare AdamW
  step (on CUDA also around ``AdamW(capturable=True)``; and zclip 1.0's / autoclip 0.2's own
  rules when they are importable);
* CuPy (when importable, on CUDA): ``anyclip.clip_by_global_norm`` on GPT-2's shapes against
  the same formula written in CuPy;
* JAX (when importable, on its device of the same kind): ``anyclip.optax.clip_by_global_norm``
  against ``optax.clip_by_global_norm``, both under ``jax.jit``, on the four workloads;
* the floor: the device's measured copy bandwidth (bytes read + written per second of a
  ``copy_`` of 256 MiB), and for each workload one read for the norm plus one read and one
  write for the scaling at that bandwidth.

On CUDA, torch and CuPy calls are timed with CUDA events (the device time between the events
around each call); JAX and the CPU by the wall clock, JAX results blocked on. It prints a
Markdown table and writes it to ``--out``. ``--smoke`` shrinks every workload (tiny shapes, 3
repeats) so that the whole run takes seconds on the CPU (``tests/test_benchmarks.py``). Rows
whose library is missing are left out, named in the output.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.workloads import gpt2_small_shapes, llama32_1b_shapes, resnet50_shapes

Shapes = list[tuple[int, ...]]

#: Workloads of the global-norm rows: (name, shapes).
WORKLOADS: list[tuple[str, Callable[[], Shapes]]] = [
    ("ResNet-50", resnet50_shapes),
    ("GPT-2 small", gpt2_small_shapes),
    ("2,000 x 256", lambda: [(256,)] * 2000),
    ("Llama-3.2-1B", llama32_1b_shapes),
]

DTYPES = ("float32", "bfloat16")

#: The clipping threshold: far below the norm of N(0, 1) data, so clipping happens.
C = 1.0


def smoke_shapes(shapes: Shapes) -> Shapes:
    """At most 12 of ``shapes``, each dimension cut to at most 8 (for ``--smoke``)."""
    return [tuple(min(d, 8) for d in s) for s in shapes[:12]]


class Timer:
    """Medians of calls taken in turns: CUDA events for torch/CuPy on CUDA, else wall clock."""

    def __init__(self, device: str, repeats: int, warmup: int) -> None:
        self.device, self.repeats, self.warmup = device, repeats, warmup

    def medians(self, fns: Sequence[Callable[[], Any]], kind: str = "torch") -> list[float]:
        """Median milliseconds of each of ``fns`` (``kind``: "torch", "cupy" or "jax")."""
        for fn in fns:
            for _ in range(self.warmup):
                self._sync(kind, fn())
        times: list[list[float]] = [[] for _ in fns]
        events = self.device == "cuda" and kind in ("torch", "cupy")
        for r in range(self.repeats):
            for k in range(len(fns)):
                i = (k + r) % len(fns)
                if events:
                    times[i].append(self._event_ms(kind, fns[i]))
                else:
                    t0 = time.perf_counter()
                    self._sync(kind, fns[i]())
                    times[i].append((time.perf_counter() - t0) * 1e3)
        return [statistics.median(t) for t in times]

    def _event_ms(self, kind: str, fn: Callable[[], Any]) -> float:
        if kind == "cupy":
            import cupy

            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(cupy.cuda.get_elapsed_time(start, end))
        import torch

        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        return float(s.elapsed_time(e))

    def _sync(self, kind: str, out: Any) -> None:
        if kind == "jax":
            import jax

            jax.block_until_ready(out)
        elif kind == "cupy" and self.device == "cuda":
            import cupy

            cupy.cuda.get_current_stream().synchronize()
        elif self.device == "cuda":
            import torch

            torch.cuda.synchronize()


Row = dict[str, Any]


def _rows(
    timer: Timer,
    section: str,
    workload: str,
    dtype: str,
    impls: list[tuple[str, str | None, Callable[[], Any]]],
    floor_ms: float | None,
    kind: str = "torch",
) -> list[Row]:
    """Time ``impls`` (name, anchor name or None, call) together; one row each."""
    medians = timer.medians([fn for _, _, fn in impls], kind)
    by_name = {name: t for (name, _, _), t in zip(impls, medians, strict=True)}
    rows = []
    for (name, anchor, _), t in zip(impls, medians, strict=True):
        row = {
            "section": section,
            "workload": workload,
            "dtype": dtype,
            "impl": name,
            "ms": t,
            "anchor": anchor,
            "ratio": t / by_name[anchor] if anchor else None,
            "floor": t / floor_ms if floor_ms else None,
        }
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def copy_bandwidth(device: str, smoke: bool) -> float:
    """Bytes read + written per second by ``dst.copy_(src)`` of 256 MiB (1 MiB in smoke)."""
    import torch

    n = (1 << 18) if smoke else (64 << 20)
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    timer = Timer(device, 5 if smoke else 30, 2)
    (ms,) = timer.medians([lambda: dst.copy_(src)])
    return 2 * src.numel() * 4 / (ms / 1e3)


def torch_global_rows(timer: Timer, device: str, smoke: bool, bw: float) -> list[Row]:
    """Functional and in-place global-norm clipping, every workload and dtype."""
    import torch

    import anyclip
    import anyclip.torch

    rows: list[Row] = []
    gen = torch.Generator(device=device).manual_seed(0)
    for name, make_shapes in WORKLOADS:
        shapes = make_shapes()
        if smoke:
            shapes = smoke_shapes(shapes)
        for dtype_name in DTYPES:
            dtype = getattr(torch, dtype_name)
            ts = [torch.randn(s, generator=gen, device=device, dtype=dtype) for s in shapes]
            mine = [torch.nn.Parameter(torch.empty_like(t)) for t in ts]
            ref = [torch.nn.Parameter(torch.empty_like(t)) for t in ts]
            for p, q, t in zip(mine, ref, ts, strict=True):
                p.grad, q.grad = t.clone(), t.clone()

            def functional(ts: list[Any] = ts) -> Any:
                norms = torch._foreach_norm(ts, 2.0)
                total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
                return torch._foreach_mul(ts, torch.clamp(C / (total + 1e-6), max=1.0))

            nbytes = sum(t.numel() * t.element_size() for t in ts)
            floor = 3 * nbytes / bw * 1e3
            anchor_f = "torch `_foreach_norm` + `_foreach_mul`"
            anchor_i = "torch `clip_grad_norm_(foreach=True)`"
            impls = [
                (anchor_f, None, functional),
                (
                    "anyclip `clip_by_global_norm`",
                    anchor_f,
                    lambda ts=ts: anyclip.clip_by_global_norm(ts, C),
                ),
                (
                    anchor_i,
                    None,
                    lambda ref=ref: torch.nn.utils.clip_grad_norm_(ref, C, foreach=True),
                ),
                (
                    "anyclip.torch `clip_grad_norm_`",
                    anchor_i,
                    lambda mine=mine: anyclip.torch.clip_grad_norm_(mine, C),
                ),
            ]
            rows += _rows(timer, "global norm", name, dtype_name, impls, floor)
            del ts, mine, ref, impls
            if device == "cuda":
                torch.cuda.empty_cache()
    return rows


def torch_one_tensor_rows(timer: Timer, device: str, smoke: bool, bw: float) -> list[Row]:
    """``clip_by_norm`` of one 8192 x 8192 tensor against torch's one-liner."""
    import torch

    import anyclip

    rows: list[Row] = []
    n = 64 if smoke else 8192
    for dtype_name in DTYPES:
        t = torch.randn(n, n, device=device, dtype=getattr(torch, dtype_name))
        floor = 3 * t.numel() * t.element_size() / bw * 1e3
        anchor = "torch `t * clamp(c / vector_norm(t), max=1)`"
        impls = [
            (anchor, None, lambda t=t: t * torch.clamp(C / torch.linalg.vector_norm(t), max=1.0)),
            ("anyclip `clip_by_norm`", anchor, lambda t=t: anyclip.clip_by_norm(t, C)),
        ]
        rows += _rows(timer, "one tensor", f"{n} x {n}", dtype_name, impls, floor)
    return rows


def torch_rule_rows(timer: Timer, device: str, smoke: bool) -> list[Row]:
    """ZClip, QuantileClip and skip_on_spike on ResNet-50's float32 gradients."""
    import torch

    import anyclip.torch

    shapes = resnet50_shapes()
    if smoke:
        shapes = smoke_shapes(shapes)
    gen = torch.Generator(device=device).manual_seed(1)
    n = sum(math.prod(s) for s in shapes)
    grads = [torch.randn(s, generator=gen, device=device) * (5.0 / math.sqrt(n)) for s in shapes]

    def module() -> torch.nn.Module:
        m = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(g.shape, device=device)) for g in grads]
        )
        for p, g in zip(m.parameters(), grads, strict=True):
            p.grad = g.clone()
        return m

    def warmed(step: Callable[[], Any], k: int) -> Callable[[], Any]:
        for _ in range(k):
            step()
        return step

    rows: list[Row] = []
    plain_params = list(module().parameters())
    plain = "torch `clip_grad_norm_(max_norm=1)`"
    plain_impl = (plain, None, lambda: torch.nn.utils.clip_grad_norm_(plain_params, 1.0))

    p_z = list(module().parameters())
    zc = anyclip.torch.ZClip()
    impls: list[tuple[str, str | None, Callable[[], Any]]] = [
        plain_impl,
        ("anyclip.torch `ZClip().step`", plain, warmed(lambda: zc.step(p_z), 30)),
    ]
    if importlib.util.find_spec("zclip") is not None:
        import zclip

        m_ref = module()
        zref = zclip.ZClip()
        impls.append(("zclip 1.0 `ZClip().step`", plain, warmed(lambda: zref.step(m_ref), 30)))
    rows += _rows(timer, "rules", "ResNet-50", "float32", impls, None)

    p_q = list(module().parameters())
    qc = anyclip.torch.QuantileClip(p_q, 0.9, 1000, global_threshold=True)
    impls = [plain_impl, ("anyclip.torch `QuantileClip(global).step`", plain, warmed(qc.step, 30))]
    if importlib.util.find_spec("autoclip") is not None:
        from autoclip.torch import QuantileClip as AutoQuantileClip

        p_a = list(module().parameters())
        aq = AutoQuantileClip(p_a, 0.9, 1000, global_threshold=True)
        impls.append(("autoclip 0.2 `QuantileClip(global).step`", plain, warmed(aq.step, 30)))
    rows += _rows(timer, "rules", "ResNet-50", "float32", impls, None)

    # on CUDA, also with AdamW(capturable=True): its step counters on the device, so that the
    # undo of a skipped step needs no host read
    for capturable in (False, True) if device == "cuda" else (False,):
        p_bare, p_skip, p_fin = (list(module().parameters()) for _ in range(3))
        kw: dict[str, Any] = {"lr": 1e-4, "capturable": True} if capturable else {"lr": 1e-4}
        bare = torch.optim.AdamW(p_bare, **kw)
        wrapped = anyclip.torch.skip_on_spike(torch.optim.AdamW(p_skip, **kw))
        fin = anyclip.torch.apply_if_finite(torch.optim.AdamW(p_fin, **kw), 5)
        opt = "AdamW(capturable=True)" if capturable else "AdamW"
        anchor = f"torch `{opt}.step()`"
        impls = [
            (anchor, None, warmed(bare.step, 3)),
            (f"anyclip.torch `skip_on_spike({opt}).step()`", anchor, warmed(wrapped.step, 3)),
            (f"anyclip.torch `apply_if_finite({opt}, 5).step()`", anchor, warmed(fin.step, 3)),
        ]
        rows += _rows(timer, "rules", "ResNet-50", "float32", impls, None)
    return rows


def cupy_rows(timer: Timer, smoke: bool, bw: float) -> list[Row]:
    """CuPy: ``anyclip.clip_by_global_norm`` against TF's formula in CuPy, GPT-2's shapes."""
    import cupy as cp

    import anyclip

    shapes = gpt2_small_shapes()
    if smoke:
        shapes = smoke_shapes(shapes)
    rng = cp.random.default_rng(0)
    xs = [rng.standard_normal(s, dtype=cp.float32) for s in shapes]
    c = cp.float32(C)

    def formula() -> Any:
        norm = cp.sqrt(sum(cp.sum(x * x) for x in xs))
        scale = c * cp.minimum(1 / norm, 1 / c)
        return [x * scale for x in xs]

    floor = 3 * sum(x.nbytes for x in xs) / bw * 1e3
    anchor = "CuPy, the same formula"
    impls = [
        (anchor, None, formula),
        ("anyclip `clip_by_global_norm`", anchor, lambda: anyclip.clip_by_global_norm(xs, C)),
    ]
    return _rows(timer, "CuPy", "GPT-2 small", "float32", impls, floor, kind="cupy")


def jax_rows(timer: Timer, device: str, smoke: bool, bw: float) -> list[Row]:
    """``anyclip.optax.clip_by_global_norm`` against optax's, both under ``jax.jit``."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    import anyclip.optax

    platform_name = "gpu" if device == "cuda" else "cpu"
    dev = jax.devices(platform_name)[0]
    rows: list[Row] = []
    rng = np.random.default_rng(0)
    for name, make_shapes in WORKLOADS[:1] if smoke else WORKLOADS:  # smoke: fewer compiles
        shapes = make_shapes()
        if smoke:
            shapes = smoke_shapes(shapes)
        for dtype_name in DTYPES:
            dtype = jnp.bfloat16 if dtype_name == "bfloat16" else jnp.float32
            key = jax.random.key(0)
            keys = jax.random.split(key, len(shapes))
            xs = [
                jax.device_put(jax.random.normal(k, s, dtype=dtype), dev)
                for k, s in zip(keys, shapes, strict=True)
            ]
            theirs_tx = optax.clip_by_global_norm(C)
            ours_tx = anyclip.optax.clip_by_global_norm(C)
            s_theirs, s_ours = theirs_tx.init(xs), ours_tx.init(xs)
            theirs = jax.jit(lambda u, s=s_theirs, tx=theirs_tx: tx.update(u, s)[0])
            ours = jax.jit(lambda u, s=s_ours, tx=ours_tx: tx.update(u, s)[0])
            nbytes = sum(int(x.size) * x.dtype.itemsize for x in xs)
            floor = 3 * nbytes / bw * 1e3
            anchor = "optax `clip_by_global_norm`, jit"
            impls = [
                (anchor, None, lambda xs=xs, f=theirs: f(xs)),
                ("anyclip.optax `clip_by_global_norm`, jit", anchor, lambda xs=xs, f=ours: f(xs)),
            ]
            rows += _rows(timer, "JAX", name, dtype_name, impls, floor, kind="jax")
            del xs, impls
    del rng
    return rows


def _line(r: Row) -> str:
    ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else ""
    floor = f"{r['floor']:.2f}" if r["floor"] is not None else ""
    return (
        f"| {r['section']} | {r['workload']} | {r['dtype']} | {r['impl']} | "
        f"{r['ms']:.3f} | {ratio} | {floor} |"
    )


def _versions() -> str:
    """The installed versions of the libraries the rows use (those found)."""
    from importlib import metadata

    parts = [f"Python {platform.python_version()}"]
    for dist in (
        "torch",
        "jax",
        "jaxlib",
        "cupy",
        "optax",
        "array-api-compat",
        "zclip",
        "autoclip",
    ):
        names = [dist] if dist != "cupy" else ["cupy", "cupy-cuda13x", "cupy-cuda12x"]
        for name in names:
            try:
                parts.append(f"{dist} {metadata.version(name)}")
                break
            except metadata.PackageNotFoundError:
                continue
    return ", ".join(parts)


def _device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return str(torch.cuda.get_device_name(0))
    return f"CPU ({platform.processor() or platform.machine()})"


def run(device: str, repeats: int, smoke: bool, skip: set[str]) -> tuple[list[Row], str]:
    """Every row group whose library is importable; and the page's header."""
    import torch

    warmup = 1 if smoke else 3
    timer = Timer(device, repeats, warmup)
    bw = copy_bandwidth(device, smoke)
    notes = []
    rows: list[Row] = []
    rows += torch_global_rows(timer, device, smoke, bw)
    rows += torch_one_tensor_rows(timer, device, smoke, bw)
    rows += torch_rule_rows(timer, device, smoke)
    if device == "cuda":
        torch.cuda.empty_cache()
    if "cupy" in skip or device != "cuda" or importlib.util.find_spec("cupy") is None:
        notes.append("CuPy rows left out (CuPy not importable, or not on CUDA).")
    else:
        rows += cupy_rows(timer, smoke, bw)
    have_jax = all(importlib.util.find_spec(m) is not None for m in ("jax", "optax"))
    if "jax" in skip or not have_jax:
        notes.append("JAX rows left out (jax or optax not importable, or --skip jax).")
    else:
        try:
            rows += jax_rows(timer, device, smoke, bw)
        except RuntimeError as exc:  # no JAX device of this kind
            notes.append(f"JAX rows left out: {exc}")
    header = [
        f"Device: {_device_name(device)}; {_versions()}.",
        "",
        f"Copy bandwidth (read + write, `copy_` of {'1' if smoke else '256'} MiB): "
        f"{bw / 1e9:.1f} GB/s. Medians of {repeats} calls after {warmup} warm-up calls, "
        "the implementations of a row group in turns; "
        + (
            "CUDA events for torch and CuPy, the wall clock for JAX."
            if device == "cuda"
            else "the wall clock."
        ),
        "`x anchor`: time over the row group's anchor; `x floor`: time over one read for the "
        "norm plus one read and one write for the scaling at the copy bandwidth.",
        *notes,
    ]
    return rows, "\n".join(header)


TABLE_HEAD = [
    "| section | workload | dtype | implementation | ms | x anchor | x floor |",
    "| --- | --- | --- | --- | ---: | ---: | ---: |",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--out", default=None, help="write the Markdown table here too")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls (default 30)")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, 3 repeats")
    parser.add_argument("--skip", default="", help="comma-separated: jax,cupy")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device: pass --device cpu", file=sys.stderr)
            return 2
    repeats = args.repeats or (3 if args.smoke else 30)
    print("\n".join(TABLE_HEAD), flush=True)
    rows, header = run(args.device, repeats, args.smoke, set(filter(None, args.skip.split(","))))
    page = "\n".join(
        ["# anyclip on one device", "", header, "", *TABLE_HEAD, *map(_line, rows), ""]
    )
    print()
    print(header)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
