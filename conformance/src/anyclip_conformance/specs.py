"""The format of ``data/index.json``: encoded arguments, and the one walker that decodes them.

An encoded argument is a Python value (``{"value": ...}``, floats as ``repr``) or a dict naming
what to build: ``{"array": key, "dtype": ...}`` (an array of the library under test),
``{"ndarray": key}``, ``{"npscalar": dtype, "value": ...}``, ``{"py": ...}`` (Python data where
TF expects a tensor), ``{"seq": kind, "items": [...]}`` or ``{"tuple": [...]}``. :func:`build`
decodes one for the TensorFlow generator and the harness alike, each with its own way of making
arrays; every argument has a path (``"0"``, ``"1.2"``, ``"axis"``) that names it in the data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "array_specs",
    "build",
    "decode_value",
    "encode_value",
    "make_seq",
    "output_leaves",
    "result_leaves",
    "selected",
    "weights_for",
]


def encode_value(v: Any) -> Any:
    """A Python value as JSON (floats spelled with ``repr`` so inf, NaN and -0.0 survive)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, complex):
        return {"complex": [repr(v.real), repr(v.imag)]}
    if isinstance(v, list):
        return [encode_value(e) for e in v]
    if isinstance(v, tuple):
        return {"tuple": [encode_value(e) for e in v]}
    raise TypeError(f"cannot encode {v!r}")


def decode_value(v: Any) -> Any:
    """A Python value from its JSON form (:func:`encode_value`).

    >>> decode_value({"tuple": [{"float": "-0.0"}, 1]})
    (-0.0, 1)
    """
    if isinstance(v, dict):
        if "float" in v:
            return float(v["float"])
        if "complex" in v:
            return complex(float(v["complex"][0]), float(v["complex"][1]))
        if "tuple" in v:
            return tuple(decode_value(e) for e in v["tuple"])
    if isinstance(v, list):
        return [decode_value(e) for e in v]
    return v


def make_seq(kind: str, items: list[Any]) -> Any:
    """A container of ``kind`` (list, tuple, generator or dict) holding ``items``."""
    if kind == "list":
        return list(items)
    if kind == "tuple":
        return tuple(items)
    if kind == "generator":
        return (e for e in items)
    if kind == "dict":
        return {str(i): e for i, e in enumerate(items)}
    raise ValueError(f"`kind` must be list, tuple, generator or dict, got {kind!r}")


def build(
    spec: Any,
    path: str,
    array: Callable[[dict[str, Any], str], Any],
    ndarray: Callable[[str], Any],
) -> Any:
    """The argument ``spec`` stands for.

    ``array(spec, path)`` makes each array of the library under test, ``ndarray(key)`` each
    NumPy array; everything else is decoded here.

    >>> build({"seq": "list", "items": [{"array": "k", "dtype": "float32"}, {"value": None}]},
    ...       "0", array=lambda spec, path: path, ndarray=None)
    ['0.0', None]
    """

    def walk(s: Any, p: str) -> Any:
        if isinstance(s, list):
            return [walk(e, f"{p}.{i}") for i, e in enumerate(s)]
        if not isinstance(s, dict):
            raise TypeError(f"bad spec {s!r} at {p!r}")
        if "array" in s:
            return array(s, p)
        if "ndarray" in s:
            return ndarray(s["ndarray"])
        if "npscalar" in s:
            return np.dtype(s["npscalar"]).type(decode_value(s["value"]))
        if "py" in s:
            return decode_value(s["py"])
        if "seq" in s:
            return make_seq(s["seq"], [walk(e, f"{p}.{i}") for i, e in enumerate(s["items"])])
        if "tuple" in s:
            return tuple(walk(e, f"{p}.{i}") for i, e in enumerate(s["tuple"]))
        if "value" in s:
            return decode_value(s["value"])
        raise TypeError(f"bad spec {s!r} at {p!r}")

    return walk(spec, path)


def array_specs(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``path -> spec`` of every array argument of an index entry, in argument order."""
    found: dict[str, dict[str, Any]] = {}

    def record(spec: dict[str, Any], path: str) -> None:
        found[path] = spec

    for i, a in enumerate(entry["args"]):
        build(a, str(i), record, lambda key: None)
    for k, v in entry["kwargs"].items():
        build(v, k, record, lambda key: None)
    return found


def output_leaves(struct: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """``(path, leaf)`` for every array of a recorded output structure, in order."""
    if struct is None:
        return []
    if "key" in struct:
        return [(path or "r", struct)]
    items = struct.get("list", struct.get("tuple"))
    out: list[tuple[str, Any]] = []
    for i, s in enumerate(items):
        out += output_leaves(s, f"{path}.{i}".lstrip("."))
    return out


def result_leaves(out: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(path, array)`` for every array of an actual result (paths as in the data)."""
    if out is None:
        return []
    if isinstance(out, (list, tuple)):
        res: list[tuple[str, Any]] = []
        for i, o in enumerate(out):
            res += result_leaves(o, f"{path}.{i}".lstrip("."))
        return res
    return [(path or "r", out)]


def selected(path: str, grad_outputs: list[str] | None) -> bool:
    """Whether output ``path`` enters the gradient loss."""
    if grad_outputs is None:
        return True
    return any(path == g or path.startswith(g + ".") for g in grad_outputs)


def weights_for(shape: tuple[int, ...]) -> np.ndarray:
    """``1..n`` in ``shape`` (float64; cast to the output's dtype by the caller)."""
    n = int(np.prod(shape, dtype=np.int64))
    return np.arange(1, n + 1, dtype=np.float64).reshape(shape)
