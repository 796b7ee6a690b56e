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


@dataclasses.dataclass(frozen=True)
class Workload:
    """A named list of float32 tensor shapes and the operations timed on it."""

    key: str
    title: str
    shapes: tuple[tuple[int, ...], ...]
    ops: tuple[str, ...]

    @property
    def elements(self) -> int:
        """Total number of elements."""
        return sum(math.prod(s) for s in self.shapes)


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
)
