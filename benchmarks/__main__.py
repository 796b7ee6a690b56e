"""``python -m benchmarks``: anyclip against each framework's own clipping, side by side.

Every workload is timed for anyclip and its anchors in this one process: medians of repeated
runs after warm-up (JAX results are blocked on). Each anyclip time is reported as a ratio to its
anchor and to the memory-bandwidth floor measured in the same run. Writes
``docs/performance.md`` and ``docs/performance.png``.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.workloads import BFLOAT16_BACKENDS, WORKLOADS, Workload

ROOT = Path(__file__).resolve().parent.parent

Row = dict[str, Any]


def interleaved_medians(
    fns: list[Callable[[], Any]], sync: Callable[[Any], Any], budget: float
) -> list[float]:
    """Median seconds of each of ``fns``, timed in turns (one call of each per round).

    Taking turns puts an implementation and its anchor under the same machine state (cache,
    allocator, other load), so their ratio does not drift with whatever ran before. At least
    5 rounds, then about ``budget`` seconds per function (at most 200 rounds); the order
    rotates every round.
    """
    for fn in fns:
        for _ in range(2):  # warm-up: compilation, caches, allocator
            sync(fn())
    times: list[list[float]] = [[] for _ in fns]
    start = time.perf_counter()
    rounds = 0
    while rounds < 5 or (time.perf_counter() - start < budget * len(fns) and rounds < 200):
        for k in range(len(fns)):
            i = (k + rounds) % len(fns)
            t0 = time.perf_counter()
            sync(fns[i]())
            times[i].append(time.perf_counter() - t0)
        rounds += 1
    return [statistics.median(t) for t in times]


def _none(_: Any) -> None:
    return None


# ------------------------------------------------------------------ backends
def numpy_cases(w: Workload, arrays: list[np.ndarray], c: float) -> list[tuple]:
    import anyclip

    outs = [np.empty_like(a) for a in arrays]

    def baseline_global() -> Any:
        total = sum(float(np.vdot(a.ravel(), a.ravel())) for a in arrays)
        norm = np.float32(np.sqrt(np.float32(total)))
        scale = np.float32(c) * min(np.float32(1) / norm, np.float32(1) / np.float32(c))
        for a, o in zip(arrays, outs, strict=True):
            np.multiply(a, scale, out=o)
        return outs

    def baseline_global_new() -> Any:
        total = sum(float(np.vdot(a.ravel(), a.ravel())) for a in arrays)
        norm = np.float32(np.sqrt(np.float32(total)))
        scale = np.float32(c) * min(np.float32(1) / norm, np.float32(1) / np.float32(c))
        return [np.multiply(a, scale) for a in arrays]

    def baseline_norm() -> Any:
        return np.sqrt(np.float32(sum(float(np.vdot(a.ravel(), a.ravel())) for a in arrays)))

    x = arrays[0]
    cases = []
    for op in w.ops:
        if op == "clip_by_global_norm":
            cases += [
                (op, "numpy baseline (vdot, out=)", baseline_global, None),
                (
                    op,
                    "numpy baseline (vdot, new arrays)",
                    baseline_global_new,
                    "numpy baseline (vdot, out=)",
                ),
                (
                    op,
                    "anyclip",
                    lambda: anyclip.clip_by_global_norm(arrays, c),
                    "numpy baseline (vdot, out=)",
                ),
            ]
        elif op == "global_norm":
            cases += [
                (op, "numpy baseline (vdot)", baseline_norm, None),
                (op, "anyclip", lambda: anyclip.global_norm(arrays), "numpy baseline (vdot)"),
            ]
        elif op == "clip_by_norm":
            cases += [
                (
                    op,
                    "numpy native",
                    lambda: x * (c / max(np.sqrt(np.vdot(x.ravel(), x.ravel())), c)),
                    None,
                ),
                (op, "anyclip", lambda: anyclip.clip_by_norm(x, c), "numpy native"),
            ]
        elif op == "clip_by_value":
            cases += [
                (op, "numpy native", lambda: np.minimum(np.maximum(x, -c), c), None),
                (op, "anyclip", lambda: anyclip.clip_by_value(x, -c, c), "numpy native"),
            ]
        elif op == "norm":
            cases += [
                (op, "numpy native", lambda: np.linalg.norm(x.ravel()), None),
                (op, "anyclip", lambda: anyclip.norm(x), "numpy native"),
            ]
    return [(*case, _none) for case in cases]


def torch_cases(w: Workload, arrays: list[np.ndarray], c: float) -> list[tuple]:
    import torch

    import anyclip
    import anyclip.torch

    torch.set_num_threads(os.cpu_count() or 1)
    ts = [torch.from_numpy(a.copy()).to(getattr(torch, w.dtype)) for a in arrays]
    params = [torch.nn.Parameter(t.clone()) for t in ts]
    for p, t in zip(params, ts, strict=True):
        p.grad = t.clone()
    ref_params = [torch.nn.Parameter(t.clone()) for t in ts]
    for p, t in zip(ref_params, ts, strict=True):
        p.grad = t.clone()

    def foreach_functional() -> Any:
        norms = torch._foreach_norm(ts, 2.0)
        total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
        coef = torch.clamp(c / (total + 1e-6), max=1.0)
        return torch._foreach_mul(ts, coef)

    def foreach_norm() -> Any:
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(ts, 2.0)), 2.0)

    x = ts[0]
    cases = []
    for op in w.ops:
        if op == "clip_by_global_norm":
            fn_name = "torch _foreach_norm + _foreach_mul"
            cases += [
                (op, fn_name, foreach_functional, None),
                (op, "anyclip", lambda: anyclip.clip_by_global_norm(ts, c), fn_name),
                (
                    op,
                    "torch clip_grad_norm_(foreach=True), in place",
                    lambda: torch.nn.utils.clip_grad_norm_(ref_params, c, foreach=True),
                    None,
                ),
                (
                    op,
                    "anyclip.torch.clip_grad_norm_, in place",
                    lambda: anyclip.torch.clip_grad_norm_(params, c),
                    "torch clip_grad_norm_(foreach=True), in place",
                ),
            ]
        elif op == "global_norm":
            cases += [
                (op, "torch _foreach_norm", foreach_norm, None),
                (op, "anyclip", lambda: anyclip.global_norm(ts), "torch _foreach_norm"),
            ]
        elif op == "clip_by_norm":
            native = lambda: x * (c / torch.clamp(torch.linalg.vector_norm(x), min=c))  # noqa: E731
            cases += [
                (op, "torch native", native, None),
                (op, "anyclip", lambda: anyclip.clip_by_norm(x, c), "torch native"),
            ]
        elif op == "clip_by_value":
            cases += [
                (op, "torch native", lambda: torch.clamp(x, -c, c), None),
                (op, "anyclip", lambda: anyclip.clip_by_value(x, -c, c), "torch native"),
            ]
        elif op == "norm":
            cases += [
                (op, "torch native", lambda: torch.linalg.vector_norm(x), None),
                (op, "anyclip", lambda: anyclip.norm(x), "torch native"),
            ]
    return [(*case, _none) for case in cases]


def jax_cases(w: Workload, arrays: list[np.ndarray], c: float) -> list[tuple]:
    import jax
    import jax.numpy as jnp
    import optax

    import anyclip

    xs = [jnp.asarray(a) for a in arrays]
    tx = optax.clip_by_global_norm(c)
    state = tx.init(xs)
    optax_clip = jax.jit(lambda u: tx.update(u, state)[0])
    ours = jax.jit(lambda u: anyclip.clip_by_global_norm(u, c))
    optax_norm = jax.jit(optax.global_norm)
    our_norm = jax.jit(anyclip.global_norm)
    x = xs[0]
    native_cbn = jax.jit(lambda v: v * (c / jnp.maximum(jnp.linalg.norm(v.ravel()), c)))
    native_cbv = jax.jit(lambda v: jnp.clip(v, -c, c))
    native_norm = jax.jit(lambda v: jnp.linalg.norm(v.ravel()))
    our_cbn = jax.jit(lambda v: anyclip.clip_by_norm(v, c))
    our_cbv = jax.jit(lambda v: anyclip.clip_by_value(v, -c, c))
    our_norm1 = jax.jit(anyclip.norm)
    cases = []
    for op in w.ops:
        if op == "clip_by_global_norm":
            cases += [
                (op, "optax.clip_by_global_norm, jit", lambda: optax_clip(xs), None),
                (op, "anyclip, jit", lambda: ours(xs), "optax.clip_by_global_norm, jit"),
            ]
        elif op == "global_norm":
            cases += [
                (op, "optax.global_norm, jit", lambda: optax_norm(xs), None),
                (op, "anyclip, jit", lambda: our_norm(xs), "optax.global_norm, jit"),
            ]
        elif op == "clip_by_norm":
            cases += [
                (op, "jax native, jit", lambda: native_cbn(x), None),
                (op, "anyclip, jit", lambda: our_cbn(x), "jax native, jit"),
            ]
        elif op == "clip_by_value":
            cases += [
                (op, "jax native, jit", lambda: native_cbv(x), None),
                (op, "anyclip, jit", lambda: our_cbv(x), "jax native, jit"),
            ]
        elif op == "norm":
            cases += [
                (op, "jax native, jit", lambda: native_norm(x), None),
                (op, "anyclip, jit", lambda: our_norm1(x), "jax native, jit"),
            ]
    return [(*case, jax.block_until_ready) for case in cases]


#: Chunks (of rows) of the dask array of the one-tensor workload (8 of 32 MiB for W4).
DASK_CHUNKS = 8


def dask_cases(w: Workload, arrays: list[np.ndarray], c: float) -> list[tuple]:
    """The one-tensor operations on a dask array, against the same formula written in ``da``.

    Each call builds the graph and computes it (dask's default threaded scheduler), so the
    time holds anyclip's graph construction too. The list workloads are left out: a graph of
    thousands of small arrays measures dask's task overhead, not the clipping.
    """
    import dask.array as da

    import anyclip

    if len(arrays) != 1 or arrays[0].size < DASK_CHUNKS << 20:  # W4 only: chunks of 1 Mi or more
        return []
    rows = max(1, arrays[0].shape[0] // DASK_CHUNKS)
    x = da.from_array(arrays[0], chunks=(rows, *arrays[0].shape[1:]))
    c32 = np.float32(c)
    table = {
        # TF's formulas, in dask's own functions
        "clip_by_norm": (
            lambda: (x * c32) / da.maximum(da.sqrt((x * x).sum()), c32),
            lambda: anyclip.clip_by_norm(x, c),
        ),
        "clip_by_value": (
            lambda: da.maximum(da.minimum(x, c32), -c32),
            lambda: anyclip.clip_by_value(x, -c, c),
        ),
        "norm": (lambda: da.sqrt((x * x).sum()), lambda: anyclip.norm(x)),
    }
    name = "dask expression of TF's formula"
    cases = []
    for op in w.ops:
        if op in table:
            hand, ours = table[op]
            cases += [(op, name, hand, None), (op, "anyclip", ours, name)]
    return [(*case, _compute) for case in cases]


def _compute(out: Any) -> Any:
    return out.compute()


def tf_cases(w: Workload, arrays: list[np.ndarray], c: float) -> list[tuple]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    ts = [tf.constant(a) for a in arrays]
    cbgn = tf.function(lambda u: tf.clip_by_global_norm(u, c))
    gn = tf.function(tf.linalg.global_norm)
    x = ts[0]
    cbn = tf.function(lambda v: tf.clip_by_norm(v, c))
    cbv = tf.function(lambda v: tf.clip_by_value(v, -c, c))
    nrm = tf.function(lambda v: tf.norm(v))
    table = {
        "clip_by_global_norm": lambda: cbgn(ts),
        "global_norm": lambda: gn(ts),
        "clip_by_norm": lambda: cbn(x),
        "clip_by_value": lambda: cbv(x),
        "norm": lambda: nrm(x),
    }
    return [(op, "tf in tf.function", table[op], None, _none) for op in w.ops]


BACKENDS: dict[str, Callable[..., list[tuple]]] = {
    "numpy": numpy_cases,
    "torch": torch_cases,
    "jax": jax_cases,
    "dask": dask_cases,
    "tensorflow": tf_cases,
}


def bandwidth_bytes_per_s() -> float:
    """Copy bandwidth of this machine (bytes read + written per second), 256 MiB buffers."""
    src = np.ones(64 * 2**20, dtype=np.float32)
    dst = np.empty_like(src)
    (t,) = interleaved_medians([lambda: np.copyto(dst, src)], _none, 1.0)
    return 2 * src.nbytes / t


# --------------------------------------------------------------------- main
def run(workloads: list[Workload], backends: list[str], budget: float) -> tuple[list[Row], float]:
    bw = bandwidth_bytes_per_s()
    rows: list[Row] = []
    rng = np.random.default_rng(0)
    for w in workloads:
        arrays = [rng.standard_normal(s, dtype=np.float32) for s in w.shapes]
        c = 1.0  # far below the norm of N(0, 1) data: clipping happens
        nbytes = w.itemsize * w.elements
        floor = {  # one read for the norm, one read and one write for the scaling
            "clip_by_global_norm": 3 * nbytes / bw,
            "clip_by_norm": 3 * nbytes / bw,
            "clip_by_value": 2 * nbytes / bw,
            "global_norm": nbytes / bw,
            "norm": nbytes / bw,
        }
        for backend in backends:
            if w.dtype != "float32" and backend not in BFLOAT16_BACKENDS:
                continue
            try:
                cases = BACKENDS[backend](w, arrays, c)
            except ImportError as exc:
                print(f"  {backend}: not installed ({exc})", file=sys.stderr)
                continue
            times: dict[tuple[str, str], float] = {}
            by_op: dict[str, list[tuple]] = {}
            for case in cases:
                by_op.setdefault(case[0], []).append(case)
            for op, group in by_op.items():
                sync = group[0][4]
                medians = interleaved_medians([case[2] for case in group], sync, budget)
                for (_, label, *_), t in zip(group, medians, strict=True):
                    times[(op, label)] = t
                for _, label, _, anchor, _ in group:
                    t = times[(op, label)]
                    ratio = t / times[(op, anchor)] if anchor else None
                    rows.append(
                        {
                            "workload": w.key,
                            "title": w.title,
                            "op": op,
                            "backend": backend,
                            "impl": label,
                            "ms": t * 1e3,
                            "anchor": anchor,
                            "vs_anchor": ratio,
                            "vs_floor": t / floor[op],
                            "anyclip": "anyclip" in label,
                        }
                    )
                    shown = f"{ratio:5.2f}x {anchor}" if anchor else ""
                    print(f"{w.key} {op:<20} {backend:<10} {label:<48} {t * 1e3:10.3f} ms  {shown}")
                    sys.stdout.flush()
            del cases
            gc.collect()
    return rows, bw


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_report(
    rows: list[Row], bw: float, out_md: Path, out_png: Path, machine: str | None = None
) -> None:
    """Write the page (chart and summary first, every measurement after) and the chart."""
    if machine is None:
        machine = (
            f"{platform.machine()}, {os.cpu_count()} cores, {_cpu_model()}, "
            f"Python {platform.python_version()}, measured copy bandwidth {bw / 1e9:.1f} GB/s "
            "(read + write)."
        )
    lines = [
        "# Performance",
        "",
        "Generated by `make bench` (`python -m benchmarks`); do not edit by hand.",
        "",
        f"![anyclip's time over each framework's own function]({out_png.name})",
        "",
        "## Summary",
        "",
        "anyclip's time over the framework's own function (its anchor) on the same data, in the "
        "same process; below 1 is faster. NumPy's anchor writes into preallocated `out=` "
        "arrays, which a function returning new arrays (anyclip, like TF) cannot: the full "
        "table also has the anchor returning new arrays. Every measurement, with the "
        "memory-bandwidth floor, is in [the full table](#every-measurement).",
        "",
        *_summary(rows),
        "",
        "## Every measurement",
        "",
        f"Machine: {machine}",
        "",
        "All data float32 (W6 and W7: bfloat16, torch only), random normal, clip_norm 1 "
        "(clipping happens). Times are medians of "
        "repeated runs after warm-up, in one process; the implementations of one workload and "
        "operation are timed in turns, one call each per round, so that they share the machine's "
        "state. `x anchor` is the time over the anchor's; `x floor` is the time over the "
        "memory-bandwidth floor (bytes that must be read and written, at the measured copy "
        "bandwidth).",
        "",
        "How to read it:",
        "",
        "- The NumPy baseline writes into preallocated `out=` arrays; anyclip, like TF, returns "
        "new arrays. The row `numpy baseline (vdot, new arrays)` is the same baseline returning "
        "new arrays: what fresh output memory costs any functional NumPy code on this machine.",
        "- The anchors' norms are not TF's: `vdot`, torch's `_foreach_norm` and `vector_norm` sum "
        "float32 sequentially (hundreds of ULP off over millions of elements); anyclip's sums "
        "stay within a few ULP of TF's.",
        "- `clip_by_norm` keeps TF's `(t * c) / max(norm, c)`, a division per element, where the "
        "native anchors multiply by one reciprocal.",
        "- W5 measures Python overhead: microseconds per call.",
        f"- dask: the W4 tensor in {DASK_CHUNKS} chunks of rows; each call builds the graph "
        "and computes it with dask's threaded scheduler, against TF's formula written with "
        "`dask.array` functions.",
        "",
        "| workload | op | backend | implementation | ms | x anchor | x floor |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        ratio = f"{r['vs_anchor']:.2f}" if r["vs_anchor"] is not None else ""
        name = f"**{r['impl']}**" if r["anyclip"] else r["impl"]
        lines.append(
            f"| {r['workload']} {r['title']} | {r['op']} | {r['backend']} | {name} | "
            f"{r['ms']:.3f} | {ratio} | {r['vs_floor']:.2f} |"
        )
    lines.append("")
    # across ranks and devices: written by `python -m benchmarks.distributed`
    lines += ['--8<-- "docs/_ext/distributed-results.md"', ""]
    # peak memory with accumulate_dtype: written by `python -m benchmarks.memory`
    lines += ['--8<-- "docs/_ext/memory-results.md"', ""]
    # ZClip, QuantileClip and skip_on_spike: written by `python -m benchmarks.history`
    lines += ['--8<-- "docs/_ext/history-results.md"', ""]
    # float64 in TF's order against each library's own norm: `python -m benchmarks.float64`
    lines += ['--8<-- "docs/_ext/float64-order.md"', ""]
    # per-example clipping and AGC against optax, Opacus and timm: `python -m benchmarks.rules`
    lines += ['--8<-- "docs/_ext/rules-results.md"', ""]
    # make demo and the installed JAX conformance run: written by `python -m benchmarks.newcomer`
    lines += ['--8<-- "docs/_ext/newcomer-results.md"', ""]
    out_md.write_text("\n".join(lines))
    _chart(rows, out_png)


def _ratios(rows: list[Row]) -> dict[tuple[str, str, str], float]:
    """anyclip's best ratio to its anchor per (workload, op, backend)."""
    best: dict[tuple[str, str, str], float] = {}
    for r in rows:
        if r["anyclip"] and r["vs_anchor"] is not None:
            key = (f"{r['workload']} {r['title']}", r["op"], r["backend"])
            best[key] = min(best.get(key, float("inf")), r["vs_anchor"])
    return best


def _summary(rows: list[Row]) -> list[str]:
    """A workload x backend table of anyclip's time over its anchor (best route)."""
    ratios = _ratios(rows)
    backends = list(dict.fromkeys(k[2] for k in ratios))
    lines = [
        "| workload | op | " + " | ".join(backends) + " |",
        "| --- | --- |" + " ---: |" * len(backends),
    ]
    for wk, op in dict.fromkeys((k[0], k[1]) for k in ratios):
        cells = [ratios.get((wk, op, b)) for b in backends]
        shown = " | ".join(f"{c:.2f}x" if c is not None else "" for c in cells)
        lines.append(f"| {wk} | {op} | {shown} |")
    return lines


def _chart(rows: list[Row], out_png: Path) -> None:
    """One bar per workload, op and backend: anyclip's time over its anchor (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = _ratios(rows)
    labels = [f"{wk.split(' ', 1)[0]} {op} ({backend})" for wk, op, backend in ratios]
    values = list(ratios.values())
    fig, ax = plt.subplots(figsize=(9, 0.24 * len(values) + 1.2))
    colors = ["tab:blue" if v <= 1.0 else "tab:orange" for v in values]
    ax.barh(range(len(values)), values, color=colors)
    ax.set_yticks(range(len(values)), labels, fontsize=7)
    ax.axvline(1.0, color="tab:red", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("anyclip time / the framework's own function (red line: as fast)", fontsize=8)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


_TABLE_ROW = re.compile(
    r"^\| (?P<workload>W\d+) (?P<title>[^|]+?) \| (?P<op>\w+) \| (?P<backend>\w+) \| "
    r"(?P<impl>[^|]+?) \| (?P<ms>[\d.]+) \| (?P<ratio>[\d.]*) \| (?P<floor>[\d.]+) \|$",
    re.MULTILINE,
)


def read_report(path: Path) -> tuple[list[Row], str]:
    """The rows and the machine line of a page :func:`write_report` wrote (no measuring)."""
    text = path.read_text()
    machine = re.search(r"^Machine: (.+)$", text, re.MULTILINE)
    rows = []
    for m in _TABLE_ROW.finditer(text):
        impl = m["impl"]
        rows.append(
            {
                "workload": m["workload"],
                "title": m["title"],
                "op": m["op"],
                "backend": m["backend"],
                "impl": impl.strip("*"),
                "ms": float(m["ms"]),
                "vs_anchor": float(m["ratio"]) if m["ratio"] else None,
                "vs_floor": float(m["floor"]),
                "anyclip": impl.startswith("**"),
            }
        )
    if not rows or machine is None:
        raise ValueError(f"{path} holds no benchmark table to re-render")
    return rows, machine[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--workloads", default="W1,W2,W3,W4,W5,W6,W7")
    parser.add_argument("--backends", default="numpy,torch,jax,dask,tensorflow")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per measurement")
    parser.add_argument("--output", default=str(ROOT / "docs" / "performance.md"))
    parser.add_argument(
        "--rerender",
        action="store_true",
        help="measure nothing: rewrite the page and chart from the numbers already in --output",
    )
    args = parser.parse_args(argv)
    if args.rerender:
        out_md = Path(args.output)
        rows, machine = read_report(out_md)
        write_report(rows, 0.0, out_md, out_md.with_suffix(".png"), machine=machine)
        print(f"re-rendered {out_md} and {out_md.with_suffix('.png')} ({len(rows)} rows)")
        return 0
    if "jax" in args.backends.split(","):
        import jax

        jax.config.update("jax_enable_x64", False)  # float32 as in the other backends
    chosen = [w for w in WORKLOADS if w.key in args.workloads.split(",")]
    rows, bw = run(chosen, args.backends.split(","), args.budget)
    out_md = Path(args.output)
    out_md.parent.mkdir(parents=True, exist_ok=True)
    write_report(rows, bw, out_md, out_md.with_suffix(".png"))
    print(f"wrote {out_md} and {out_md.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
