"""TF 2.21's ``tf.nn.embedding_lookup``, run live: the reference values of ``test_embedding.py``.

Usage: ``python tests/data/make_embedding.py [OUT.npz]`` (default: ``embedding.npz`` next to
this script). Needs TensorFlow 2.21; the tests read the committed file, and with ``--live-tf``
also run this script and check that the file is still what TF gives.

The file holds:

* ``lookup/<case>``: ``tf.nn.embedding_lookup(params, ids, max_norm)`` for each case of
  :data:`CASES` (``params/<name>`` and ``ids/<case>`` are the inputs), and
  ``grad/<case>/values``, ``grad/<case>/indices``: the ``IndexedSlices`` gradient of
  ``sum(w * result)`` (``w = 1..n``) with respect to ``params``, and ``grad/<case>/dense``, its
  dense form (repeated ids summed).
* ``error/<case>``: TF's message for the out-of-range ids of :data:`BAD_IDS`.
* ``shard/<case>/...``: a table split into shards (``params`` a list: TF's "div" strategy),
  for each case of :data:`SHARD_CASES`: ``.../lookup``, and ``.../grad/<i>`` the dense form of
  the ``IndexedSlices`` gradient with respect to shard ``i`` (``sum(w * result)``,
  ``w = 1..n``), and ``.../global_norm`` ``tf.linalg.global_norm`` of those ``IndexedSlices``
  (a repeated id once per occurrence); the shards are ``params/<name>`` split after the rows
  in ``sizes``.
  ``shard-error/<case>``: TF's message for :data:`SHARD_ERRORS` (an id outside every shard;
  shards whose sizes are not the "div" ones, where an id falls past its shard's rows).
* ``tuple/<case>/...``: ``params`` a tuple of arrays, which TF converts to one tensor (a
  ``Pack`` of the items: row ``i`` is item ``i``), for each case of :data:`TUPLE_CASES`:
  ``.../lookup``, and ``.../grad/<i>`` the gradient with respect to item ``i`` (dense: the
  ``Pack``'s gradient unpacks the ``IndexedSlices``) of ``sum(w * result)``, ``w = 1..n``.
* ``model/...``: a small model (an embedding table, ids with repeated rows, a dense layer,
  mean squared error) whose gradients TF gives as ``[IndexedSlices, Tensor]``:
  ``model/global_norm`` is ``tf.linalg.global_norm`` of them (each repeated id counted once per
  occurrence), ``model/dense_norm`` the norm of the dense gradients (what a dense gradient
  gives), ``model/clipped/<i>`` the dense form of ``tf.clip_by_global_norm(grads, CLIP)``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BAD_IDS",
    "CASES",
    "CLIP",
    "PARAMS",
    "SHARD_CASES",
    "SHARD_ERRORS",
    "TUPLE_CASES",
    "main",
    "model_inputs",
    "shards",
    "tuple_items",
]

f32 = np.float32

_rng = np.random.default_rng(21)

#: name: the table.
PARAMS: dict[str, np.ndarray] = {
    "p32": (_rng.standard_normal((5, 3)) * 2).astype(f32),
    "p64": (_rng.standard_normal((5, 3)) * 2),
    "p16": (_rng.standard_normal((5, 3)) * 2).astype(np.float16),
    "p1d": np.array([-2.0, 0.5, 3.0, 0.0], f32),
    "p3d": (_rng.standard_normal((4, 3, 2))).astype(f32),
}
PARAMS["p32"][4] = 0.0  # an all-zero row
PARAMS["p10"] = (_rng.standard_normal((10, 2)) * 2).astype(f32)

#: case: (params name, shard sizes, ids, max_norm). "div" sizes: the first ``V % S`` shards
#: hold ``V // S + 1`` rows, the others ``V // S``; "3-4-3" is not (TF then reads row
#: ``(i - 1) % 3`` of shard 1 for ids 4 to 6, not the concatenation's).
SHARD_CASES: dict[str, tuple[str, tuple[int, ...], np.ndarray, float | None]] = {
    "div2": ("p32", (3, 2), np.array([[0, 4], [3, 1], [2, 2]], np.int32), None),
    "div3-clip": ("p32", (2, 2, 1), np.array([4, 0, 3, 1, 1, 2], np.int64), 1.0),
    "div4-clip": ("p10", (3, 3, 2, 2), np.array([[9, 0, 5], [6, 3, 7]], np.int32), 1.5),
    "one-shard": ("p32", (5,), np.array([3, 0], np.int32), 1.0),
    "f64-div2-clip": ("p64", (3, 2), np.array([0, 4, 4, 2], np.int32), 1.0),
    "1d-div3": ("p1d", (2, 1, 1), np.array([[3, 0], [2, 1]], np.int32), None),
    "3d-div2-clip": ("p3d", (2, 2), np.array([3, 1, 0], np.int32), 1.5),
    "scalar": ("p10", (4, 3, 3), np.array(7, np.int32), None),
    "empty": ("p10", (4, 3, 3), np.zeros((0, 2), np.int32), 1.0),
    "3-4-3": ("p10", (3, 4, 3), np.array([0, 2, 4, 5, 6, 7, 9], np.int32), None),
}

#: case: (shard sizes of ``p10``, ids) that TF refuses.
SHARD_ERRORS: dict[str, tuple[tuple[int, ...], np.ndarray]] = {
    "too-big": ((4, 3, 3), np.array([0, 10], np.int32)),
    "negative": ((4, 3, 3), np.array([[2, -1]], np.int32)),
    "not-div": ((2, 8), np.array([1, 3], np.int32)),
    "3-4-3": ((3, 4, 3), np.array([9, 3], np.int32)),
}


#: case: (params name, ids, max_norm); the tuple is ``tuple(params/<name>)``: its rows.
TUPLE_CASES: dict[str, tuple[str, np.ndarray, float | None]] = {
    "rows": ("p32", np.array([[4, 1], [0, 0]], np.int32), None),
    "rows-clip": ("p32", np.array([3, 0, 3, 2], np.int32), 1.0),
    "matrices-clip": ("p3d", np.array([2, 0, 2], np.int64), 1.5),
}


def tuple_items(name: str) -> tuple[np.ndarray, ...]:
    """``params/<name>`` as a tuple of its rows."""
    return tuple(PARAMS[name])


def shards(name: str, sizes: tuple[int, ...]) -> list[np.ndarray]:
    """``params/<name>`` split after the rows in ``sizes``."""
    cuts = np.cumsum(sizes)[:-1]
    return np.split(PARAMS[name], cuts)


#: case: (params name, ids (NumPy, with their dtype), max_norm).
CASES: dict[str, tuple[str, np.ndarray, float | None]] = {
    "scalar": ("p32", np.array(2, np.int32), None),
    "scalar-clip": ("p32", np.array(2, np.int32), 1.0),
    "matrix": ("p32", np.array([[0, 3], [1, 1]], np.int32), None),
    "matrix-clip": ("p32", np.array([[0, 3], [1, 1], [4, 0]], np.int32), 1.5),
    "int64-clip": ("p32", np.array([4, 0, 0, 2], np.int64), 2.0),
    "int16": ("p32", np.array([3, 1], np.int16), None),
    "empty": ("p32", np.zeros((0,), np.int32), 1.0),
    "negative-max-norm": ("p32", np.array([1, 2], np.int32), -1.0),
    "int-max-norm": ("p32", np.array([1, 2], np.int32), 1),
    "f64-clip": ("p64", np.array([0, 1, 1], np.int32), 1.0),
    "f16-clip": ("p16", np.array([0, 1, 3], np.int32), 1.0),
    "1d-clip": ("p1d", np.array([[0, 3], [2, 1]], np.int32), 1.5),
    "3d-clip": ("p3d", np.array([1, 3, 1], np.int32), 1.5),
}

#: case: out-of-range ids into ``p32`` (5 rows).
BAD_IDS: dict[str, np.ndarray] = {
    "too-big": np.array([0, 5], np.int32),
    "negative": np.array([-1], np.int32),
    "matrix": np.array([[0, 1], [2, 7]], np.int32),
    "scalar": np.array(9, np.int32),
}

#: ``clip_norm`` of ``tf.clip_by_global_norm`` in the model.
CLIP = 0.5


def model_inputs() -> dict[str, np.ndarray]:
    """The model's table, ids (repeated rows), dense kernel, targets."""
    rng = np.random.default_rng(5)
    return {
        "model/table": (rng.standard_normal((7, 4)) * 0.5).astype(f32),
        "model/ids": np.array([[0, 3, 3, 5, 0], [3, 1, 0, 6, 3]], np.int32),
        "model/kernel": (rng.standard_normal((4, 3)) * 0.5).astype(f32),
        "model/y": rng.standard_normal((2, 5, 3)).astype(f32),
    }


def _weights(shape: Any) -> np.ndarray:
    return np.arange(1, int(np.prod(shape)) + 1, dtype=np.float64).reshape(shape)


def run_tf() -> dict[str, np.ndarray]:
    """Every reference value (see the module docstring for the keys)."""
    import tensorflow as tf

    out: dict[str, np.ndarray] = {}
    for name, p in PARAMS.items():
        out[f"params/{name}"] = p
    for case, (name, ids, max_norm) in CASES.items():
        out[f"ids/{case}"] = ids
        table = tf.constant(PARAMS[name])  # a tensor: a Variable refuses int16 ids
        with tf.GradientTape() as tape:
            tape.watch(table)
            r = tf.nn.embedding_lookup(table, tf.constant(ids), max_norm=max_norm)
            loss = tf.reduce_sum(r * tf.constant(_weights(r.shape), dtype=r.dtype))
        grad = tape.gradient(loss, table)
        out[f"lookup/{case}"] = np.asarray(r)
        out[f"grad/{case}/values"] = np.asarray(grad.values)
        out[f"grad/{case}/indices"] = np.asarray(grad.indices)
        out[f"grad/{case}/dense"] = np.asarray(tf.convert_to_tensor(grad))
    for case, ids in BAD_IDS.items():
        try:
            tf.nn.embedding_lookup(tf.constant(PARAMS["p32"]), tf.constant(ids))
        except tf.errors.InvalidArgumentError as e:
            found = re.search(r"indices\S* = -?\d+ is not in \[0, \d+\)", str(e))
            out[f"error/{case}"] = np.asarray(found.group(0) if found else str(e))
    for case, (name, sizes, ids, max_norm) in SHARD_CASES.items():
        parts = [tf.constant(t) for t in shards(name, sizes)]
        with tf.GradientTape() as tape:
            for t in parts:
                tape.watch(t)
            r = tf.nn.embedding_lookup(parts, tf.constant(ids), max_norm=max_norm)
            loss = tf.reduce_sum(r * tf.constant(_weights(r.shape), dtype=r.dtype))
        out[f"shard/{case}/ids"] = ids
        out[f"shard/{case}/lookup"] = np.asarray(r)
        shard_grads = tape.gradient(loss, parts)
        for i, g in enumerate(shard_grads):
            dense = tf.zeros_like(parts[i]) if g is None else tf.convert_to_tensor(g)
            out[f"shard/{case}/grad/{i}"] = np.asarray(dense)
        out[f"shard/{case}/global_norm"] = np.asarray(tf.linalg.global_norm(shard_grads))
    for case, (sizes, ids) in SHARD_ERRORS.items():
        parts = [tf.constant(t) for t in shards("p10", sizes)]
        try:
            tf.nn.embedding_lookup(parts, tf.constant(ids))
        except tf.errors.InvalidArgumentError as e:
            found = re.search(r"(partitions|indices)\S* = -?\d+ is not in \[0, \d+\)", str(e))
            out[f"shard-error/{case}"] = np.asarray(found.group(0) if found else str(e))
        else:
            raise AssertionError(f"TF accepted the ids of {case}")
    for case, (name, ids, max_norm) in TUPLE_CASES.items():
        items = tuple(tf.constant(t) for t in tuple_items(name))
        with tf.GradientTape() as tape:
            for t in items:
                tape.watch(t)
            r = tf.nn.embedding_lookup(items, tf.constant(ids), max_norm=max_norm)
            loss = tf.reduce_sum(r * tf.constant(_weights(r.shape), dtype=r.dtype))
        out[f"tuple/{case}/ids"] = ids
        out[f"tuple/{case}/lookup"] = np.asarray(r)
        for i, g in enumerate(tape.gradient(loss, list(items))):
            out[f"tuple/{case}/grad/{i}"] = np.asarray(tf.convert_to_tensor(g))
    data = model_inputs()
    out.update(data)
    table, kernel = tf.Variable(data["model/table"]), tf.Variable(data["model/kernel"])
    with tf.GradientTape() as tape:
        emb = tf.nn.embedding_lookup(table, tf.constant(data["model/ids"]))
        loss = tf.reduce_mean(tf.square(tf.tensordot(emb, kernel, 1) - data["model/y"]))
    grads = tape.gradient(loss, [table, kernel])
    assert isinstance(grads[0], tf.IndexedSlices)
    out["model/global_norm"] = np.asarray(tf.linalg.global_norm(grads))
    dense = [tf.convert_to_tensor(g) for g in grads]
    out["model/dense_norm"] = np.asarray(tf.linalg.global_norm(dense))
    clipped, _ = tf.clip_by_global_norm(grads, CLIP)
    for i, g in enumerate(clipped):
        out[f"model/clipped/{i}"] = np.asarray(tf.convert_to_tensor(g))
    return out


def main(out: Path) -> None:
    """Write the reference values and their provenance to ``out``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    arrays = run_tf()
    arrays["provenance"] = np.asarray(
        f"tensorflow {tf.__version__}, numpy {np.__version__}; tests/data/make_embedding.py"
    )
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("embedding.npz"))
