"""The benchmark workloads: parameter shapes of real models, and synthetic extremes."""

from __future__ import annotations

import dataclasses
import math


def resnet50_shapes() -> list[tuple[int, ...]]:
    """Parameter shapes of torchvision's ResNet-50 (161 tensors, 25,557,032 elements)."""
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,)]
            shapes += [(planes, planes, 3, 3), (planes,), (planes,)]
            shapes += [(planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if block == 0:
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    shapes += [(1000, 2048), (1000,)]
    return shapes


def gpt2_small_shapes() -> list[tuple[int, ...]]:
    """Parameter shapes of GPT-2 small (148 tensors, 124,439,808 elements; tied embedding)."""
    d, vocab, ctx = 768, 50257, 1024
    shapes: list[tuple[int, ...]] = [(vocab, d), (ctx, d)]
    for _ in range(12):
        shapes += [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,)]
        shapes += [(d,), (d,), (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    shapes += [(d,), (d,)]
    return shapes


def llama32_1b_shapes() -> list[tuple[int, ...]]:
    """Parameter shapes of Llama-3.2-1B (147 tensors, 1,235,814,400 elements; tied embedding).

    Hidden size 2048, 16 layers, 32 query and 8 key-value heads of 64, MLP 8192, vocabulary
    128,256 (the model's ``config.json``).
    """
    d, kv, mlp, vocab = 2048, 512, 8192, 128256
    shapes: list[tuple[int, ...]] = [(vocab, d)]
    for _ in range(16):
        shapes += [(d, d), (kv, d), (kv, d), (d, d)]  # q, k, v, o
        shapes += [(mlp, d), (mlp, d), (d, mlp)]  # gate, up, down
        shapes += [(d,), (d,)]  # the two RMSNorm weights
    shapes += [(d,)]
    return shapes


@dataclasses.dataclass(frozen=True)
class Workload:
    """A named list of tensor shapes, their dtype and the operations timed on it."""

    key: str
    title: str
    shapes: tuple[tuple[int, ...], ...]
    ops: tuple[str, ...]
    #: The arrays' dtype: "float32" or "bfloat16" (torch only: NumPy has no bfloat16).
    dtype: str = "float32"

    @property
    def elements(self) -> int:
        """Total number of elements."""
        return sum(math.prod(s) for s in self.shapes)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return 2 if self.dtype == "bfloat16" else 4


WORKLOADS = (
    Workload("W1", "ResNet-50 parameters", tuple(resnet50_shapes()), ("clip_by_global_norm",)),
    Workload("W2", "GPT-2 small parameters", tuple(gpt2_small_shapes()), ("clip_by_global_norm",)),
    Workload(
        "W3", "2,000 x 256 elements", ((256,),) * 2000, ("clip_by_global_norm", "global_norm")
    ),
    Workload(
        "W4", "one 8192 x 8192 tensor", ((8192, 8192),), ("clip_by_norm", "clip_by_value", "norm")
    ),
    Workload("W5", "one 6-element tensor", ((6,),), ("clip_by_value", "clip_by_norm", "norm")),
    Workload(
        "W6",
        "ResNet-50 parameters, bfloat16",
        tuple(resnet50_shapes()),
        ("clip_by_global_norm",),
        "bfloat16",
    ),
    Workload(
        "W7",
        "GPT-2 small parameters, bfloat16",
        tuple(gpt2_small_shapes()),
        ("clip_by_global_norm",),
        "bfloat16",
    ),
)

#: The backends that time bfloat16 workloads (NumPy, dask and TF's CPU kernels are left out).
BFLOAT16_BACKENDS = ("torch",)
