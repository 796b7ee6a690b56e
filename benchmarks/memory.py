"""``python -m benchmarks.memory``: peak memory of each function with ``accumulate_dtype``.

Each function runs once on NumPy float16 input accumulated in float32; ``tracemalloc`` (which
sees NumPy's buffers) records the peak of what the call allocates. The report is the ratio of
the peak memory in use (the input, which exists before the call, plus that peak) to the memory
no implementation can avoid (the input plus the output). 1.0 would mean no temporary at all.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["CALLS", "main", "peak_ratio"]


def _split(n: int) -> list[np.ndarray]:
    """One large and three smaller float16 arrays of ``n`` elements in all."""
    rng = np.random.default_rng(0)
    sizes = [n // 2, n // 4, n // 8, n - n // 2 - n // 4 - n // 8]
    return [rng.standard_normal(s).astype(np.float16) for s in sizes]


#: name -> (inputs from a size, the call). Every call asks for float32 accumulation.
CALLS: dict[str, tuple[Callable[[int], Any], Callable[[Any], Any]]] = {
    "global_norm": (_split, lambda a: _anyclip().global_norm(a, accumulate_dtype="float32")),
    "clip_by_global_norm": (
        _split,
        lambda a: _anyclip().clip_by_global_norm(a, 1.0, accumulate_dtype="float32"),
    ),
    "clip_by_norm": (
        lambda n: _split(n)[0],
        lambda a: _anyclip().clip_by_norm(a, 1.0, accumulate_dtype="float32"),
    ),
    "l2_normalize": (
        lambda n: _split(n)[0],
        lambda a: _anyclip().l2_normalize(a, accumulate_dtype="float32"),
    ),
    "norm": (
        lambda n: _split(n)[0],
        lambda a: _anyclip().norm(a, accumulate_dtype="float32"),
    ),
}


def _anyclip() -> Any:
    import anyclip

    return anyclip


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


def peak_ratio(name: str, n: int) -> float:
    """(input + peak allocated by the call) / (input + output) for ``CALLS[name]``."""
    make, call = CALLS[name]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1 << 26, help="input size (float16)")
    args = parser.parse_args(argv)
    print(f"| function | peak / (input + output), {args.elements:,} float16 elements |")
    print("| --- | ---: |")
    for name in CALLS:
        print(f"| `{name}` | {peak_ratio(name, args.elements):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
