"""``python -m benchmarks.memory``: peak memory of each function with ``accumulate_dtype``.

Every function runs on float16 input accumulated in float32 (``accumulate_dtype="float32"``),
next to an anchor: the naive way in the same framework (cast every array to float32, compute,
cast back) and, for torch, torch's own function where one exists. The report is the ratio of
the peak memory in use during the call (the input, which exists before it, plus what the call
allocates at its peak) to the memory no implementation can avoid (the input plus the output).
1.0 would mean no temporary at all; the naive way is about 2.5 to 3.

How each backend is measured:

* NumPy, torch (CPU), JAX eager and dask: in a fresh process per backend and implementation,
  the peak resident memory (``VmHWM``, reset through ``/proc/self/clear_refs`` after a
  warm-up call and ``malloc_trim``) minus the resident memory before the call. ``tracemalloc``
  would miss torch's and XLA's buffers. dask runs with the synchronous scheduler and with
  threads, on chunks of ``CHUNK`` elements.
* JAX under ``jit``: ``jax.jit(f).lower(...).compile().memory_analysis()``, the compiled
  program's arguments, outputs and temporaries (what XLA plans, no run).

:func:`peak_ratio` is the deterministic NumPy measure the tests assert (``tracemalloc``, which
sees NumPy's buffers); :func:`torch_peak_ratios` the torch one, through the resident memory of
a fresh process.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CALLS",
    "FUNCTIONS",
    "IMPLS",
    "main",
    "measure",
    "peak_ratio",
    "torch_peak_ratios",
]

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "_ext" / "memory-results.md"
#: Elements per dask chunk (8 MiB of float16).
CHUNK = 1 << 22
#: Elements per row of the 2-D inputs (reductions over one axis).
COLS = 1024


def _normal(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` standard normal float16 values, drawn in float32 (twice as fast as float64 draws:
    1 s of each 32 Mi input, 8 times in each of the memory tests)."""
    return rng.standard_normal(n, dtype=np.float32).astype(np.float16)


def _split(n: int) -> list[np.ndarray]:
    """One large and three smaller float16 arrays of ``n`` elements in all."""
    rng = np.random.default_rng(0)
    sizes = [n // 2, n // 4, n // 8, n - n // 2 - n // 4 - n // 8]
    return [_normal(rng, s) for s in sizes]


def _one(n: int) -> list[np.ndarray]:
    return [_normal(np.random.default_rng(0), n)]


def _rows(n: int) -> list[np.ndarray]:
    return [_one(n)[0].reshape(-1, COLS)]


def _anyclip() -> Any:
    import anyclip

    return anyclip


F32 = "float32"

#: name -> (inputs from a size, anyclip's call on the list of inputs, bounded by design).
FUNCTIONS: dict[str, tuple[Callable[[int], list[Any]], Callable[[list[Any]], Any], bool]] = {
    "global_norm": (_split, lambda a: _anyclip().global_norm(a, accumulate_dtype=F32), True),
    "clip_by_global_norm": (
        _split,
        lambda a: _anyclip().clip_by_global_norm(a, 1.0, accumulate_dtype=F32),
        True,
    ),
    "clip_by_norm": (
        _one,
        lambda a: _anyclip().clip_by_norm(a[0], 1.0, accumulate_dtype=F32),
        True,
    ),
    "l2_normalize": (_one, lambda a: _anyclip().l2_normalize(a[0], accumulate_dtype=F32), True),
    "norm": (_one, lambda a: _anyclip().norm(a[0], accumulate_dtype=F32), True),
    "norm ord=1": (_one, lambda a: _anyclip().norm(a[0], ord=1, accumulate_dtype=F32), True),
    "norm ord=inf": (
        _one,
        lambda a: _anyclip().norm(a[0], ord=math.inf, accumulate_dtype=F32),
        True,
    ),
    "norm ord=3": (_one, lambda a: _anyclip().norm(a[0], ord=3, accumulate_dtype=F32), True),
    "clip_by_norm axes=1": (
        _rows,
        lambda a: _anyclip().clip_by_norm(a[0], 1.0, axes=1, accumulate_dtype=F32),
        False,
    ),
    "norm ord=1 axis=1": (
        _rows,
        lambda a: _anyclip().norm(a[0], ord=1, axis=1, accumulate_dtype=F32),
        False,
    ),
}


# ------------------------------------------------------------ the naive anchors
def _naive(name: str, arrays: list[Any]) -> Any:
    """The naive way, in the arrays' own framework: cast everything, compute, cast back."""
    from array_api_compat import array_namespace

    xp = array_namespace(*arrays)
    w = [xp.astype(a, xp.float32) for a in arrays]
    x = w[0]
    if name in ("global_norm", "clip_by_global_norm"):
        norm = xp.sqrt(sum(xp.sum(v * v) for v in w))
        if name == "global_norm":
            return norm
        scale = 1.0 / xp.maximum(norm, xp.asarray(1.0, dtype=xp.float32))
        return [xp.astype(v * scale, a.dtype) for v, a in zip(w, arrays, strict=True)], norm
    if name == "clip_by_norm":
        n = xp.sqrt(xp.sum(x * x))
        return xp.astype(x / xp.maximum(n, xp.asarray(1.0, dtype=xp.float32)), arrays[0].dtype)
    if name == "l2_normalize":
        return xp.astype(x / xp.sqrt(xp.sum(x * x)), arrays[0].dtype)
    if name == "norm":
        return xp.astype(xp.sqrt(xp.sum(x * x)), arrays[0].dtype)
    if name == "norm ord=1":
        return xp.astype(xp.sum(xp.abs(x)), arrays[0].dtype)
    if name == "norm ord=inf":
        return xp.astype(xp.max(xp.abs(x)), arrays[0].dtype)
    if name == "norm ord=3":
        return xp.astype(xp.sum(xp.abs(x) ** 3) ** (1 / 3), arrays[0].dtype)
    if name == "clip_by_norm axes=1":
        n = xp.sqrt(xp.sum(x * x, axis=1, keepdims=True))
        return xp.astype(x / xp.maximum(n, xp.asarray(1.0, dtype=xp.float32)), arrays[0].dtype)
    if name == "norm ord=1 axis=1":
        return xp.astype(xp.sum(xp.abs(x), axis=1), arrays[0].dtype)
    raise KeyError(name)


def _torch_native(name: str, arrays: list[Any]) -> Any:
    """torch's own function, where one exists (``dtype=`` accumulates without a copy)."""
    import torch

    x = arrays[0]
    if name == "norm":
        return torch.linalg.vector_norm(x, dtype=torch.float32).half()
    if name == "norm ord=1":
        return torch.linalg.vector_norm(x, 1, dtype=torch.float32).half()
    if name == "norm ord=inf":
        return torch.linalg.vector_norm(x, math.inf, dtype=torch.float32).half()
    if name == "norm ord=3":
        return torch.linalg.vector_norm(x, 3, dtype=torch.float32).half()
    if name == "norm ord=1 axis=1":
        return torch.linalg.vector_norm(x, 1, dim=1, dtype=torch.float32).half()
    if name == "global_norm":
        norms = [torch.linalg.vector_norm(a, dtype=torch.float32) for a in arrays]
        return torch.linalg.vector_norm(torch.stack(norms))
    return None


#: implementation -> (backends it runs on, its call of (function name, inputs)).
IMPLS: dict[str, tuple[tuple[str, ...], Callable[[str, list[Any]], Any]]] = {
    "anyclip": (
        ("numpy", "torch", "jax", "dask-sync", "dask-threads"),
        lambda name, a: FUNCTIONS[name][1](a),
    ),
    "naive (cast all first)": (
        ("numpy", "torch", "jax", "dask-sync", "dask-threads"),
        _naive,
    ),
    "torch native": (("torch",), _torch_native),
}


# ------------------------------------------------------------- one measurement
def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _release() -> None:
    """Collect garbage and give freed heap memory back to the system."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _to_backend(backend: str, host: list[np.ndarray]) -> list[Any]:
    if backend == "numpy":
        return host
    if backend == "torch":
        import torch

        return [torch.from_numpy(h) for h in host]
    if backend == "jax":
        import jax.numpy as jnp

        return [jnp.asarray(h) for h in host]
    import dask.array as da

    return [
        da.from_array(h, chunks=(CHUNK,) if h.ndim == 1 else (CHUNK // COLS, COLS)) for h in host
    ]


def _finish(backend: str, out: Any) -> Any:
    """The result made concrete (dask computed, JAX waited for)."""
    if backend.startswith("dask"):
        import dask

        scheduler = "sync" if backend == "dask-sync" else "threads"
        (done,) = dask.compute(out, scheduler=scheduler)
        return done
    if backend == "jax":
        import jax

        return jax.block_until_ready(out)
    return out


def _nbytes(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if value is None:
        return 0
    return int(np.prod(value.shape)) * value.dtype.itemsize if hasattr(value, "dtype") else 0


def measure(backend: str, impl: str, names: Sequence[str], n: int) -> dict[str, float | None]:
    """Peak / (input + output) of each function, resident memory, in this process.

    Call it in a fresh process (``python -m benchmarks.memory --one``): a framework's first
    call (imports, compilation) is made before the reset of the peak, at the full size.
    """
    call = IMPLS[impl][1]
    out: dict[str, float | None] = {}
    for name in names:
        host = FUNCTIONS[name][0](n)
        args = _to_backend(backend, host)
        if backend not in ("numpy", "torch"):
            del host
        first = _finish(backend, call(name, args))  # warm-up: imports, compilation
        if first is None:
            out[name] = None
            continue
        del first
        _release()
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")  # reset VmHWM to the current resident memory
        before = _status("VmRSS")
        result = _finish(backend, call(name, args))
        peak = _status("VmHWM")
        inp = _nbytes(args)
        out[name] = (inp + peak - before) / (inp + _nbytes(result))
        del result, args
        _release()
    return out


def jit_ratios(impl: str, names: Sequence[str], n: int) -> dict[str, float]:
    """(arguments + outputs + temporaries) / (arguments + outputs) of the jitted function."""
    import jax
    import jax.numpy as jnp

    call = IMPLS[impl][1]
    out = {}
    for name in names:
        shapes = [jax.ShapeDtypeStruct(s, jnp.float16) for s in _shapes(name, n)]
        compiled = jax.jit(lambda a, name=name: call(name, list(a))).lower(shapes).compile()
        ma = compiled.memory_analysis()
        need = ma.argument_size_in_bytes + ma.output_size_in_bytes
        out[name] = (need + ma.temp_size_in_bytes) / need
    return out


def _shapes(name: str, n: int) -> list[tuple[int, ...]]:
    make = FUNCTIONS[name][0]
    if make is _split:
        return [(s,) for s in (n // 2, n // 4, n // 8, n - n // 2 - n // 4 - n // 8)]
    if make is _rows:
        return [(n // COLS, COLS)]
    return [(n,)]


def _in_subprocess(args: list[str], timeout: float = 900) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmarks.memory {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def torch_peak_ratios(names: Sequence[str], n: int) -> dict[str, float | None]:
    """:func:`measure` of anyclip on torch tensors, in a fresh process."""
    return dict(_in_subprocess(["--one", "torch", "anyclip", str(n), *names]))


# ----------------------------------------------------------- NumPy, in process
#: name -> (inputs from a size, the call): the NumPy calls the tests measure with tracemalloc.
CALLS: dict[str, tuple[Callable[[int], Any], Callable[[Any], Any]]] = {
    name: (make, call) for name, (make, call, bounded) in FUNCTIONS.items() if bounded
}


def peak_ratio(name: str, n: int, impl: str = "anyclip") -> float:
    """(input + peak allocated by the call) / (input + output) for ``name``, NumPy.

    ``tracemalloc`` sees NumPy's buffers, so this is exact and does not depend on the load.
    ``impl``: a key of :data:`IMPLS` (anyclip's call is ``CALLS[name]``).
    """
    make = FUNCTIONS[name][0]
    run = IMPLS[impl][1]

    def call(a: list[Any]) -> Any:
        return run(name, a)

    args = make(n)
    call(make(1024))  # warm caches and imports outside the measurement
    gc.collect()
    tracemalloc.start()
    try:
        out = call(args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    need = _nbytes(args) + _nbytes(out)
    return (_nbytes(args) + peak) / need


# ------------------------------------------------------------------ the report
def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def run(n: int, backends: Sequence[str]) -> list[tuple[str, str, str, float | None]]:
    """(function, backend, implementation, ratio) for every row of the report."""
    rows: list[tuple[str, str, str, float | None]] = []
    names = list(FUNCTIONS)
    for backend in backends:
        if backend == "jax-jit":
            for impl in ("anyclip", "naive (cast all first)"):
                got = _in_subprocess(["--jit", impl, str(n), *names])
                rows += [(name, "jax, jit", impl, got[name]) for name in names]
            continue
        for impl, (where, _) in IMPLS.items():
            if backend not in where:
                continue
            got = _in_subprocess(["--one", backend, impl, str(n), *names])
            label = "jax, eager" if backend == "jax" else backend
            rows += [(name, label, impl, got[name]) for name in names if got[name] is not None]
    return rows


def write_report(rows: list[tuple[str, str, str, float | None]], n: int, out: Path) -> str:
    order = {name: i for i, name in enumerate(FUNCTIONS)}
    rows = sorted(rows, key=lambda r: order[r[0]])  # stable: backends, then implementations
    lines = [
        "### Peak memory with `accumulate_dtype`",
        "",
        f"Measured by `python -m benchmarks.memory`: {n:,} float16 elements "
        f"({n * 2 / 2**20:,.0f} MiB; the global norms on four arrays of 1/2, 1/4, 1/8 and 1/8 "
        "of them), accumulated in float32. The ratio is the peak memory in use during the call "
        "over the input plus the output (1.00: no temporary). NumPy, torch, JAX eager and dask: "
        "peak resident memory of a fresh process (reset after a warm-up call); JAX under `jit`: "
        "the compiled program's arguments, outputs and temporaries (`memory_analysis`). dask: "
        f"chunks of {CHUNK:,} elements, computed with the synchronous scheduler and with "
        "threads. The last two functions reduce over one axis of a "
        f"({n // COLS:,}, {COLS}) array: anyclip casts the whole input there (not bounded).",
        "",
        "What is not bounded (the whole input is cast, or a whole temporary made, as the "
        "naive way does):",
        "",
        "- a reduction over some of the axes (`axes=` / `axis=` given: the last two functions "
        "below), the matrix norms (`ord` with two axes), complex inputs, and `clip_by_norm` / "
        "`l2_normalize` with a `clip_norm` / `epsilon` array of more than one element;",
        "- JAX arrays that may be sharded over several devices (placed there, or traced on a "
        "mesh): the whole formula (a flat view of a sharded array would gather it), whose "
        "cast XLA:CPU does not fuse into a reduction (a float32 copy of the input). JAX arrays "
        "on one device, eager or under your own `jit` (the `jax, jit` rows), run a compiled "
        "loop over blocks;",
        "- torch with a gradient recorded: the vector p-norms reduce the whole input (ties of "
        "the maximum across blocks would share its gradient otherwise than TF), and the "
        "elementwise steps join their blocks with `cat`;",
        "- dask keeps a few cast chunks per worker: the bound is per chunk, not per block; its "
        "`compute` joins the output chunks into one array (twice the output at the end), so "
        "a function whose output is as large as its input (`clip_by_norm`, `l2_normalize`) "
        "cannot go under 1.5 on dask, whatever builds the graph: input + 2 x output over "
        "input + output.",
        "",
        "A ratio under 1 means the allocator reused memory the warm-up call had freed but kept.",
        "",
        "| function | backend | implementation | peak / (input + output) |",
        "| --- | --- | --- | ---: |",
    ]
    for name, backend, impl, ratio in rows:
        shown = f"**{impl}**" if impl == "anyclip" else impl
        lines.append(f"| `{name}` | {backend} | {shown} | {_cell(ratio)} |")
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1 << 27, help="input size (float16)")
    parser.add_argument("--backends", default="numpy,torch,jax,jax-jit,dask-sync,dask-threads")
    parser.add_argument("--output", default=str(OUT))
    parser.add_argument("--one", nargs="+", help=argparse.SUPPRESS)  # backend impl n names...
    parser.add_argument("--jit", nargs="+", help=argparse.SUPPRESS)  # impl n names...
    args = parser.parse_args(argv)
    if args.one:
        backend, impl, n, *names = args.one
        print(json.dumps(measure(backend, impl, names, int(n))))
        return 0
    if args.jit:
        impl, n, *names = args.jit
        print(json.dumps(jit_ratios(impl, names, int(n))))
        return 0
    rows = run(args.elements, args.backends.split(","))
    print(write_report(rows, args.elements, Path(args.output)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
