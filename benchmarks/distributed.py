"""Distributed benchmark: communication and time of global-norm clipping across ranks.

``python -m benchmarks.distributed`` (from the repository root) measures, on CPU:

* torch, FSDP2 (``fully_shard``) on 2 and 4 gloo ranks on 127.0.0.1, the same model and
  gradients for ``anyclip.torch.clip_grad_norm_`` and ``torch.nn.utils.clip_grad_norm_``: the
  collectives each issues (counted by a dispatch mode that sees DTensor's and c10d's), the
  bytes they move per rank, and the median time per call;
* JAX, a tree sharded over 8 host devices under ``jit``: the compiled program's temporaries
  (``memory_analysis().temp_size_in_bytes``) and collectives, anyclip against
  ``optax.clip_by_global_norm``.

It writes ``docs/_ext/distributed-results.md``, which ``docs/performance.md`` includes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "_ext" / "distributed-results.md"
#: The FSDP2 model: Linear layers (in, out); 10 rows shard unevenly on 4 ranks, 7 on 2 and 4.
LAYERS = [(512, 1024), (1024, 1000), (1000, 512), (512, 10), (10, 7)]
CALLS = 20
#: Names of the c10d and functional-collective ops that move data between ranks.
COLLECTIVES = ("all_reduce", "allreduce", "gather", "scatter", "broadcast", "all_to_all")


# ----------------------------------------------------------------- torch ranks
class CommBytes:
    """Collectives issued inside the block: name -> (count, bytes this rank sends/receives)."""

    def __enter__(self) -> CommBytes:
        from torch.distributed.tensor import DTensor
        from torch.utils._python_dispatch import TorchDispatchMode

        record: dict[str, list[int]] = {}
        self.record = record

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if any(issubclass(t, DTensor) for t in types):
                    return NotImplemented  # let DTensor turn it into collectives first
                out = func(*args, **(kwargs or {}))
                ns = func.namespace
                if ns in ("c10d", "_c10d_functional", "c10d_functional"):
                    name = func.__name__.split(".")[0]
                    if any(k in name for k in COLLECTIVES):
                        size = _nbytes(out if "gather" in name else args)
                        entry = record.setdefault(name, [0, 0])
                        entry[0] += 1
                        entry[1] += size
                return out

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)


def _nbytes(obj: Any) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    return 0


def rank_main(out_path: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor

    import anyclip.torch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    # the ranks meet through a file (ANYCLIP_DIST_INIT): no TCP port that another process
    # (a second test worker's ranks) could take between picking it and listening on it
    dist.init_process_group(
        "gloo", init_method=os.environ["ANYCLIP_DIST_INIT"], rank=rank, world_size=world
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(i, o) for i, o in LAYERS))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(1)
    full = [torch.randn(p.shape, generator=gen) for p in params]

    def reset() -> None:
        for p, g in zip(params, full, strict=True):
            p.grad = distribute_tensor(g, p.device_mesh, p.placements)

    fns = {
        "anyclip.torch.clip_grad_norm_": lambda: anyclip.torch.clip_grad_norm_(params, 1.0),
        "torch.nn.utils.clip_grad_norm_": lambda: torch.nn.utils.clip_grad_norm_(params, 1.0),
    }
    results: dict[str, Any] = {}
    for name, fn in fns.items():
        reset()
        fn()  # warm up
        reset()
        with CommBytes() as c:
            norm = fn()
        value = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        times = []
        for _ in range(CALLS):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        results[name] = {
            "comms": c.record,
            "ms": statistics.median(times) * 1e3,
            "norm": float(value),
        }
    grad_bytes = sum(p.grad.to_local().numel() * 4 for p in params)
    if rank == 0:
        payload = {"world": world, "results": results, "local_grad_bytes": grad_bytes}
        Path(out_path).write_text(json.dumps(payload), encoding="utf-8")
    dist.destroy_process_group()


def run_torch(world: int, tmp: Path) -> dict[str, Any]:
    out = tmp / f"torch{world}.json"
    env = {
        **os.environ,
        "ANYCLIP_DIST_INIT": (tmp / f"torch{world}.rendezvous").as_uri(),
        "WORLD_SIZE": str(world),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT / "src"),
    }
    cmd = [sys.executable, "-m", "benchmarks.distributed", "--rank", str(out)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env={**env, "RANK": str(r)}) for r in range(world)]
    try:
        for p in procs:
            p.wait(timeout=300)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return json.loads(out.read_text())


# ------------------------------------------------------------------------- JAX
JAX_SCRIPT = r"""
import json, sys
import jax, numpy as np, optax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
import anyclip.tree
out = {}
for kind in (AxisType.Auto, AxisType.Explicit):
    mesh = jax.make_mesh((8,), ("x",), axis_types=(kind,))
    rng = np.random.default_rng(0)
    tree = {
        "w": jax.device_put(rng.standard_normal((4096, 4096), dtype=np.float32),
                            NamedSharding(mesh, P("x", None))),
        "v": jax.device_put(rng.standard_normal((1024, 1024), dtype=np.float32),
                            NamedSharding(mesh, P(None, "x"))),
        "b": jax.device_put(rng.standard_normal(4096, dtype=np.float32), NamedSharding(mesh, P())),
    }
    fns = {
        "anyclip.tree.clip_by_global_norm": lambda t: anyclip.tree.clip_by_global_norm(t, 1.0),
        "optax.clip_by_global_norm": lambda t: optax.clip_by_global_norm(1.0).update(
            t, optax.EmptyState())[0],
    }
    for name, fn in fns.items():
        with jax.set_mesh(mesh):
            compiled = jax.jit(fn).lower(tree).compile()
        hlo = compiled.as_text()
        mem = compiled.memory_analysis()
        out[f"{kind.name}|{name}"] = {
            "temp_bytes": int(mem.temp_size_in_bytes),
            "all_gather": hlo.count("all-gather("),
            "all_reduce": hlo.count("all-reduce("),
        }
json.dump(out, open(sys.argv[1], "w"))
"""


def run_jax(tmp: Path) -> dict[str, Any]:
    out = tmp / "jax.json"
    script = tmp / "jax_bench.py"
    script.write_text(JAX_SCRIPT, encoding="utf-8")
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(ROOT / "src"),
    }
    subprocess.run([sys.executable, str(script), str(out)], env=env, check=True, timeout=600)
    return json.loads(out.read_text())


# ---------------------------------------------------------------------- report
def _comms(record: dict[str, list[int]]) -> str:
    if not record:
        return "none"
    return ", ".join(f"{n} x{c} ({b:,} B)" for n, (c, b) in sorted(record.items()))


def report(torch_runs: list[dict[str, Any]], jax_run: dict[str, Any] | None) -> str:
    lines = [
        "### Across ranks and devices",
        "",
        "Measured by `python -m benchmarks.distributed` (CPU, gloo on 127.0.0.1; the JAX "
        "tree on 8 host devices). torch: FSDP2 `fully_shard` on Linear layers "
        f"{', '.join(f'{i}x{o}' for i, o in LAYERS)} (with biases; 10 rows shard unevenly on "
        "4 ranks, 7 rows on 2 and 4), the same gradients for both functions; bytes are "
        "those of the tensors each collective takes (all-reduce) or returns (gathers), per "
        f"rank; time is the median of {CALLS} calls.",
        "",
        "| ranks | function | collectives per call (bytes per rank) | ms per call | norm |",
        "|---|---|---|---|---|",
    ]
    for run in torch_runs:
        for name, r in run["results"].items():
            lines.append(
                f"| {run['world']} | `{name}` | {_comms(r['comms'])} | {r['ms']:.2f} | "
                f"{r['norm']:.7g} |"
            )
    if jax_run:
        lines += [
            "",
            "JAX, under `jit`, a tree of a 4096x4096 weight sharded on rows, a 1024x1024 "
            "sharded on columns and a replicated bias (8 devices): the compiled program's "
            "temporaries per device and its collectives.",
            "",
            "| mesh axes | function | temporaries (bytes) | all-gathers | all-reduces |",
            "|---|---|---|---|---|",
        ]
        for key, r in jax_run.items():
            kind, name = key.split("|")
            lines.append(
                f"| {kind} | `{name}` | {r['temp_bytes']:,} | {r['all_gather']} | "
                f"{r['all_reduce']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.distributed")
    parser.add_argument("--rank", help=argparse.SUPPRESS)
    parser.add_argument("--worlds", default="2,4")
    parser.add_argument("--no-jax", action="store_true")
    parser.add_argument("--output", default=str(OUT))
    args = parser.parse_args(argv)
    if args.rank:
        rank_main(args.rank)
        return 0
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        torch_runs = [run_torch(int(w), Path(tmp)) for w in args.worlds.split(",")]
        jax_run = None if args.no_jax else run_jax(Path(tmp))
    text = report(torch_runs, jax_run)
    Path(args.output).write_text(text, encoding="utf-8")
    print(re.sub(r"\n+", "\n", text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
