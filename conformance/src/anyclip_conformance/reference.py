"""The reference data and the known deviations, read from this package.

``data/index.json`` holds one entry per case (function, encoded arguments, the recorded output
structure, gradients or the expected error); ``data/<function>.npz`` holds its arrays (see
``data/README.md``). ``xfails/<backend>.txt`` lists the known, explained deviations of one
backend: one case id a line, an optional ``[eager]``/``[jit]``/``[grad]`` tag, then ``# reason``.
Both are package data, read through :mod:`importlib.resources`, so an installed
``anyclip-conformance`` needs no source checkout.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from anyclip_conformance.backends import BACKEND_IDS
from anyclip_conformance.budgets import budget_table_markdown
from anyclip_conformance.specs import output_leaves

__all__ = [
    "JIT_BULK_STRIDE",
    "VARIANTS",
    "case_ids",
    "fingerprint",
    "functions",
    "in_jit_sample",
    "load_arrays",
    "load_index",
    "load_real_gradients",
    "load_xfails",
    "real_gradient_cases",
    "sample",
    "xfail_reason",
]

#: How a case is run: eagerly, under ``jax.jit``, or differentiated.
VARIANTS = ("eager", "jit", "grad")

#: The jit variant runs every case except the random grids ("bulk" cases), of which it runs
#: one in JIT_BULK_STRIDE (chosen by a hash of the id, so every grid is sampled). Tracing
#: compiles one XLA program per case (~30-60 ms on CPU); the grids repeat the same code
#: paths over more shapes, which the eager variant already runs in full.
JIT_BULK_STRIDE = 4


def _package_file(*parts: str) -> Any:
    return resources.files("anyclip_conformance").joinpath(*parts)


@cache
def load_index() -> dict[str, Any]:
    """``index.json``: case id -> entry (function, args, outputs / grads / error)."""
    return json.loads(_package_file("data", "index.json").read_text(encoding="utf-8"))["cases"]


@cache
def load_arrays(function: str) -> dict[str, np.ndarray]:
    """Every array of ``function``'s cases, by member name (``<case id>|in|<path>``, ...)."""
    out: dict[str, np.ndarray] = {}
    raw = _package_file("data", f"{function}.npz").read_bytes()
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        for name in zf.namelist():
            out[name.removesuffix(".npy")] = np.lib.format.read_array(
                io.BytesIO(zf.read(name)), allow_pickle=False
            )
    return out


@cache
def load_real_gradients() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``data/real_gradients.npz`` and ``data/real_programs.npz``: provenance and arrays.

    Members: ``<model>|<step>|grad|<i>`` (TF's raw gradients), ``<model>|<step>|clipped|<i>``
    (``tf.clip_by_global_norm``'s output), ``<model>|<step>|norm`` (``tf.linalg.global_norm``),
    and ``provenance`` (JSON: versions, seed, ``clip_norm``, each model's gradient dtypes).
    The programs of ``real_programs.py`` (an ``IndexedSlices`` gradient also has
    ``<model>|<step>|indices|<i>``) join the models, each with its own ``clip_norm`` and
    recorded ``steps``; ``provenance["programs"]`` is that file's provenance.
    """
    provenance, arrays = _load_npz("real_gradients.npz")
    programs, more = _load_npz("real_programs.npz")
    arrays.update(more)
    provenance["models"].update(programs.pop("programs"))
    provenance["programs"] = programs
    return provenance, arrays


def _load_npz(name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A data file's ``provenance`` (JSON) and its other arrays, by member name."""
    raw = _package_file("data", name).read_bytes()
    with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
        arrays = {member: npz[member] for member in npz.files}
    return json.loads(str(arrays.pop("provenance"))), arrays


def real_gradient_cases() -> list[str]:
    """``<model>/step<k>`` for every recorded training step of every model."""
    provenance, _ = load_real_gradients()
    every = range(provenance["steps"])
    return [
        f"{m}/step{k}" for m, meta in provenance["models"].items() for k in meta.get("steps", every)
    ]


def in_jit_sample(case_id: str) -> bool:
    """Whether the jit variant runs ``case_id``."""
    entry = load_index()[case_id]
    return not entry.get("bulk") or zlib.crc32(case_id.encode()) % JIT_BULK_STRIDE == 0


def case_ids(function: str | None = None, *, kind: str = "all") -> list[str]:
    """Case ids in catalogue order; ``kind`` is ``all``, ``grad``, ``error`` or ``jit``."""
    index = load_index()
    keep = {
        "all": lambda c: True,
        "jit": in_jit_sample,
        "grad": lambda c: "grads" in index[c],
        "error": lambda c: "error" in index[c],
    }[kind]
    return [c for c, e in index.items() if function in (None, e["function"]) and keep(c)]


def _family(case_id: str) -> tuple[str, str, str]:
    """``(function, dtype, family)`` of a case id: ``clip_by_norm/bf16/edge/clip_inf`` gives
    ``("clip_by_norm", "bf16", "edge")``, ``global_norm/error/dict`` ``("global_norm", "-",
    "error")`` (a family is the id's part after the function and its dtype)."""
    from anyclip_conformance.cases import SHORT

    parts = case_id.split("/")
    if len(parts) > 1 and parts[1] in SHORT.values():
        return parts[0], parts[1], parts[2] if len(parts) > 2 else ""
    return parts[0], "-", parts[1] if len(parts) > 1 else ""


@cache
def sample() -> frozenset[str]:
    """The cases of the sample run: every function, dtype and family of the catalogue.

    One case of every ``(function, family)`` and of every ``(function, dtype)`` (see
    :func:`_family`): every kind of edge case, every error, gradient, grid and dtype of every
    function, each in at least one dtype, plus the first recorded step of every real model
    (:func:`real_gradient_cases`). What ``python -m anyclip_conformance`` runs on JAX unless
    given ``--full``: each new shape and dtype is a program JAX lowers and compiles (every
    eager operation too), which the whole catalogue makes thousands of. So a group, taken in
    catalogue order, takes among its cases that the jit variant runs (when it has any), and
    among those with a result (when it has any: an error case runs little of the function),
    the case that brings the fewest array shapes and dtypes not already in the sample
    (:func:`_signatures`), then the lowest ``crc32`` of the id. The sample is the same in
    every run, and its cases share their programs (1,186 compilations in the JAX run, where a
    choice by ``crc32`` alone made 1,408).
    """
    index = load_index()
    groups: dict[tuple[str, str], list[str]] = {}
    for case_id in index:
        function, dtype, family = _family(case_id)
        groups.setdefault((function, "family " + family), []).append(case_id)
        groups.setdefault((function, "dtype " + dtype), []).append(case_id)
    chosen: set[str] = set()
    seen: set[tuple[str, tuple[int, ...]]] = set()
    for members in groups.values():
        if chosen.isdisjoint(members):
            best = min(
                members,
                key=lambda c: (
                    not in_jit_sample(c),
                    "error" in index[c],
                    len(_signatures(index[c]) - seen),
                    zlib.crc32(c.encode()),
                ),
            )
            chosen.add(best)
            seen |= _signatures(index[best])
    steps = {case.partition("/step")[0]: case for case in reversed(real_gradient_cases())}
    return frozenset(chosen | set(steps.values()))


def _signatures(entry: dict[str, Any]) -> set[tuple[str, tuple[int, ...]]]:
    """The ``(dtype, shape)`` of every recorded output and gradient of an index entry (the
    inputs' shapes are in the ``.npz`` files; an output's shape is its input's, or a
    reduction of it)."""
    leaves = [leaf for _, leaf in output_leaves(entry.get("outputs"))]
    leaves += list(entry.get("grads", {}).values())
    return {(leaf["dtype"], tuple(leaf["shape"])) for leaf in leaves}


def functions() -> list[str]:
    """The functions in the data, in catalogue order."""
    return list(dict.fromkeys(e["function"] for e in load_index().values()))


@cache
def load_xfails(backend: str) -> dict[tuple[str, str | None], str]:
    """``(case id, variant or None) -> reason`` from ``xfails/<backend>.txt``."""
    path = _package_file("xfails", f"{backend}.txt")
    out: dict[tuple[str, str | None], str] = {}
    if not path.is_file():
        return out
    for raw in path.read_text(encoding="utf-8").splitlines():
        text, _, reason = raw.partition("#")
        parts = text.split()
        if not parts:
            continue
        variant = None
        if len(parts) > 1:
            variant = parts[1].strip("[]")
            if variant not in VARIANTS:
                msg = f"xfails/{backend}.txt: the tag must be one of {VARIANTS}, got {raw!r}"
                raise ValueError(msg)
        if parts[0] not in load_index():
            raise ValueError(f"xfails/{backend}.txt: {parts[0]!r} is not a case id of the data")
        out[(parts[0], variant)] = reason.strip() or "(no reason given)"
    return out


def xfail_reason(case_id: str, backend: str, variant: str) -> str | None:
    """The reason ``case_id`` is a known deviation on ``backend`` in ``variant`` (or None)."""
    table = load_xfails(backend)
    return table.get((case_id, variant), table.get((case_id, None)))


def fingerprint() -> str:
    """A short hash of everything a conformance report depends on besides anyclip itself.

    The data files, the xfail lists and the budget table: a report that records another
    fingerprint was made from other data and is stale.
    """
    h = hashlib.sha256()
    names = sorted(p.name for p in _package_file("data").iterdir() if p.name != "README.md")
    for name in names:
        h.update(name.encode() + b"\0" + _package_file("data", name).read_bytes())
    for backend in BACKEND_IDS:
        path = _package_file("xfails", f"{backend}.txt")
        if path.is_file():
            h.update(backend.encode() + b"\0" + path.read_bytes())
    h.update(budget_table_markdown().encode())
    return h.hexdigest()[:16]
