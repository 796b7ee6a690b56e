"""Write the TensorFlow reference data for the conformance suite.

Run in an environment with ``tensorflow-cpu==2.21.0`` and this package installed from a source
checkout (``pip install -e ".[conformance]" -e "./conformance[live]"``)::

    python -m anyclip_conformance.generate          # writes the package's data/
    python -m anyclip_conformance.generate --check  # regenerates in memory; fails if data/ differs

It runs every case of ``cases.py`` through TensorFlow (eager, CPU) and writes

* ``data/<function>.npz``: the inputs, outputs and gradients of every case of that function, one
  ``.npy`` member per array, named ``<case id>|in|<path>``, ``<case id>|out|<path>`` and
  ``<case id>|grad|<path>``; bfloat16 arrays are stored as float32 (exact) and their dtype is
  recorded in the index;
* ``data/index.json``: for every case, its function, its arguments (arrays by member name and
  dtype; Python values spelled out), the output structure with each array's dtype and shape, the
  gradients, or the exception class anyclip must raise with TensorFlow's own class and message;
* ``data/README.md``: provenance.

The files are deterministic: members are written in catalogue order with fixed zip timestamps, and
the JSON has a fixed layout, so running the generator twice gives byte-identical files.
Mismatches between the catalogue's expectations and TensorFlow (an error where outputs were
expected or the reverse) stop the run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from anyclip_conformance.cases import (
    CASES,
    FUNCTIONS,
    A,
    Case,
    NpArr,
    NpScalar,
    Py,
    Seq,
    materialize,
)
from anyclip_conformance.specs import (
    build,
    encode_value,
    result_leaves,
    selected,
    weights_for,
)

__all__ = ["CatalogueError", "generate", "main", "run_case", "tf_functions"]

#: Where the data is written: the package's own ``data/`` (a source checkout's, when installed
#: with ``pip install -e``).
DATA = Path(__file__).resolve().parent / "data"
FORMAT = 1
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


# ------------------------------------------------------------------------------- TensorFlow
def _tf() -> Any:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    warnings.filterwarnings("ignore")
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    try:
        import absl.logging

        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:  # pragma: no cover
        pass
    tf.config.set_visible_devices([], "GPU")
    return tf


def _clear_scalar_cache() -> None:
    from tensorflow.python import pywrap_tfe

    pywrap_tfe.TFE_ClearScalarCache()


def tf_functions(tf: Any) -> dict[str, Any]:
    """The TensorFlow function behind each anyclip function."""
    return {
        "clip_by_value": tf.clip_by_value,
        "clip_by_norm": tf.clip_by_norm,
        "clip_by_global_norm": tf.clip_by_global_norm,
        "global_norm": tf.linalg.global_norm,
        "clip_by_average_norm": tf.compat.v1.clip_by_average_norm,
        "norm": tf.norm,
        "l2_normalize": tf.math.l2_normalize,
        "normalize": tf.linalg.normalize,
    }


# ---------------------------------------------------------------------------------- encoding
class Encoder:
    """Turns the specs of one case into JSON plus named input arrays."""

    def __init__(self, case: Case, arrays: dict[str, np.ndarray]):
        self.case = case
        self.arrays = arrays
        self.grad_paths: list[str] = []

    def spec(self, s: Any, path: str) -> Any:
        if isinstance(s, A):
            key = f"{self.case.id}|in|{path}"
            self.arrays[key] = materialize(s.value, s.dtype)
            out: dict[str, Any] = {"array": key, "dtype": s.dtype}
            if s.tf != "tensor":
                out["tf"] = s.tf
            elif s.dtype in ("float16", "bfloat16", "float32", "float64"):
                self.grad_paths.append(path)
            return out
        if isinstance(s, NpArr):
            key = f"{self.case.id}|in|{path}"
            self.arrays[key] = materialize(s.value, s.dtype)
            return {"ndarray": key, "dtype": s.dtype}
        if isinstance(s, NpScalar):
            return {"npscalar": s.dtype, "value": encode_value(s.value)}
        if isinstance(s, Py):
            return {"py": encode_value(s.value)}
        if isinstance(s, Seq):
            return {
                "seq": s.kind,
                "items": [self.spec(e, f"{path}.{i}") for i, e in enumerate(s.items)],
            }
        if isinstance(s, tuple):
            return {"tuple": [self.spec(e, f"{path}.{i}") for i, e in enumerate(s)]}
        if isinstance(s, list):
            return [self.spec(e, f"{path}.{i}") for i, e in enumerate(s)]
        return {"value": encode_value(s)}


def build_tf(tf: Any, enc: Any, arrays: dict[str, np.ndarray], leaves: dict[str, Any]) -> Any:
    """The TensorFlow-side argument for an encoded spec; watched tensors go into ``leaves``."""

    def array(spec: dict[str, Any], path: str) -> Any:
        host = arrays[spec["array"]]
        if spec.get("tf") == "numpy":
            if spec["dtype"] == "bfloat16":
                import ml_dtypes

                return host.astype(ml_dtypes.bfloat16)
            return host.copy()
        if spec["dtype"] == "bfloat16":
            t = tf.cast(tf.constant(host, dtype=tf.float32), tf.bfloat16)
        else:
            t = tf.constant(host, dtype=getattr(tf, spec["dtype"]))
        leaves[spec["array"]] = t
        return t

    return build(enc, "", array, lambda key: arrays[key].copy())


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = re.sub(r" at 0x[0-9a-fA-F]+", " at 0x?", text)
    return text[:300]


def _to_numpy(tf: Any, t: Any) -> tuple[np.ndarray, str]:
    name = t.dtype.name
    if name == "bfloat16":
        t = tf.cast(t, tf.float32)
    return np.asarray(t.numpy()), name


def record_outputs(tf: Any, out: Any, cid: str, path: str, arrays: dict[str, np.ndarray]) -> Any:
    """The JSON structure of a TF result; its arrays go into ``arrays``."""
    if out is None:
        return None
    if isinstance(out, list):
        return {
            "list": [
                record_outputs(tf, o, cid, f"{path}.{i}".lstrip("."), arrays)
                for i, o in enumerate(out)
            ]
        }
    if isinstance(out, tuple):
        return {
            "tuple": [
                record_outputs(tf, o, cid, f"{path}.{i}".lstrip("."), arrays)
                for i, o in enumerate(out)
            ]
        }
    if isinstance(out, tf.Tensor):
        value, dtype = _to_numpy(tf, out)
        key = f"{cid}|out|{path or 'r'}"
        arrays[key] = value
        return {"key": key, "dtype": dtype, "shape": list(value.shape)}
    raise TypeError(f"{cid}: unexpected TF output {type(out)}")


# ------------------------------------------------------------------------------------ runner
def run_case(
    tf: Any, fns: dict[str, Any], case: Case, *, live: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one case; return its index entry and its arrays.

    ``live`` (hypothesis inputs): a TF refusal is recorded as "anyclip raises TypeError or
    ValueError" instead of being checked against the catalogue.
    """
    arrays: dict[str, np.ndarray] = {}
    enc = Encoder(case, arrays)
    args = [enc.spec(a, str(i)) for i, a in enumerate(case.args)]
    kwargs = {k: enc.spec(v, k) for k, v in case.kwargs}
    entry: dict[str, Any] = {"function": case.function, "args": args, "kwargs": kwargs}
    if case.bulk:
        entry["bulk"] = True
    fn = fns[case.function]

    # TF's eager scalar cache keys Python floats by value, so 0.0 and -0.0 share an entry: a
    # -0.0 converted in an earlier case would turn this case's 0.0 into -0.0 (docs/tf-reference.md
    # 0.4). Clearing it makes every case independent of the ones before it.
    _clear_scalar_cache()
    leaves: dict[str, Any] = {}
    tf_args = [build_tf(tf, a, arrays, leaves) for a in args]
    tf_kwargs = {k: build_tf(tf, v, arrays, leaves) for k, v in kwargs.items()}
    sources = {p: leaves[f"{case.id}|in|{p}"] for p in enc.grad_paths}
    try:
        with tf.GradientTape(persistent=False) as tape:
            for t in sources.values():
                tape.watch(t)
            out = fn(*tf_args, **tf_kwargs)
            loss = None
            if case.grad:
                struct_paths = result_leaves(out)
                for p, t in struct_paths:
                    if not selected(p, list(case.grad_outputs) if case.grad_outputs else None):
                        continue
                    if not t.dtype.is_floating:
                        continue
                    w = tf.cast(tf.constant(weights_for(tuple(t.shape))), t.dtype)
                    term = tf.reduce_sum(t * w)
                    loss = term if loss is None else loss + tf.cast(term, loss.dtype)
    except Exception as exc:  # noqa: BLE001 - recorded
        entry["error"] = "TypeError|ValueError" if live else case.error
        entry["tf_error"] = type(exc).__name__
        entry["tf_message"] = _message(exc)
        if case.error is None and not live:
            msg = f"{case.id}: TF raised {type(exc).__name__}: {_message(exc)}"
            raise CatalogueError(msg) from None
        if case.policy:
            raise CatalogueError(f"{case.id}: policy case, but TF refused it too") from None
        return entry, arrays
    if case.error is not None:
        if not case.policy:
            raise CatalogueError(f"{case.id}: expected {case.error}, but TF returned {out!r}"[:400])
        entry["error"] = case.error
        entry["tf_error"] = None
        entry["policy"] = case.policy
        return entry, {k: v for k, v in arrays.items() if "|in|" in k}
    entry["outputs"] = record_outputs(tf, out, case.id, "", arrays)
    if case.grad and loss is None and live:
        return entry, arrays
    if case.grad:
        if loss is None:
            raise CatalogueError(f"{case.id}: gradient case without a floating output")
        grads = tape.gradient(
            loss, list(sources.values()), unconnected_gradients=tf.UnconnectedGradients.ZERO
        )
        gentry = {}
        for p, g in zip(sources, grads, strict=True):
            value, dtype = _to_numpy(tf, tf.convert_to_tensor(g))
            key = f"{case.id}|grad|{p}"
            arrays[key] = value
            gentry[p] = {"key": key, "dtype": dtype, "shape": list(value.shape)}
        entry["grad_outputs"] = list(case.grad_outputs) if case.grad_outputs else None
        entry["grads"] = gentry
    return entry, arrays


class CatalogueError(RuntimeError):
    """The catalogue's expectation and TensorFlow disagree."""


# ------------------------------------------------------------------------------------ writing
def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """A deterministic ``.npz`` (zip of ``.npy`` members with fixed timestamps)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for key, arr in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.array(arr, order="C"), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            zf.writestr(info, member.getvalue(), compresslevel=9)
    return buf.getvalue()


def readme(tf: Any) -> str:
    """The provenance README for ``data/``."""
    import ml_dtypes

    counts = {f: sum(c.function == f for c in CASES) for f in FUNCTIONS}
    rows = "\n".join(f"| `{f}` | {n} |" for f, n in counts.items())
    return f"""# TensorFlow reference data for the conformance suite

Written by `python -m anyclip_conformance.generate` (do not edit by hand).

- TensorFlow: {tf.__version__} (tensorflow-cpu, eager mode, CPU only, `TF_CPP_MIN_LOG_LEVEL=3`)
- NumPy: {np.__version__}, ml_dtypes: {ml_dtypes.__version__}, Python: {platform.python_version()}
- Platform: {platform.system()} {platform.machine()}
- Cases: {len(CASES)} (catalogue: `anyclip_conformance/cases.py`)
- Seeds: every generated array uses `numpy.random.default_rng(seed)` with
  `seed = zlib.crc32(<case id or family tag> + "#" + <salt>)`; the inputs are stored here as
  well, so the tests never regenerate them.

| function | cases |
| --- | --- |
{rows}

## Layout

- `index.json`: case id -> function, arguments (arrays by member name and dtype; Python values
  spelled out, floats as `repr`), outputs (structure, dtype, shape per array), gradients of
  `sum(out * w)` with `w = 1..n` per output array (in the output's dtype) w.r.t. every floating
  array argument, or the exception class anyclip must raise (`error`) with TensorFlow's class
  and message (`tf_error`, `tf_message`; `tf_error: null` with a `policy` note where anyclip
  deliberately refuses what TensorFlow accepts).
- `<function>.npz`: the arrays, one `.npy` member per array, named `<case id>|in|<path>`,
  `<case id>|out|<path>`, `<case id>|grad|<path>`. bfloat16 arrays are stored as float32
  (exactly representable); the index records their dtype.
- `real_gradients.npz`: written by `python -m anyclip_conformance.real_models` (not by the
  generator): the raw gradients of real Keras models trained with TensorFlow 2.21, and TF's
  `global_norm` and `clip_by_global_norm` of every step; its `provenance` member records the
  versions, seed, `clip_norm` and each model's gradient dtypes.
- `real_programs.npz`: written by `python -m anyclip_conformance.real_programs` (not by the
  generator): the same for two programs in raw TF ops, tensorflow/models' PTB word-level LSTM
  (its embedding gradient an `IndexedSlices` of 80 rows with repeated ids, stored as its
  `values` and `indices`) and openai/baselines' PPO2 update (policy and value MLPs), 60 steps
  run with TF's default threads, a few of them kept; each program has its own `clip_norm`.

## Regenerate

    pip install -e ".[conformance]" -e "./conformance[live]"
    python -m anyclip_conformance.generate          # rewrites this folder
    python -m anyclip_conformance.generate --check  # fails if the files here differ

The output is deterministic: two runs give byte-identical files.
"""


def index_bytes(version: str, index: dict[str, Any]) -> bytes:
    """The JSON index, one line per case (diff-friendly)."""
    head = json.dumps({"format": FORMAT, "tensorflow": version})[:-1]
    lines = [
        json.dumps(cid) + ": " + json.dumps(entry, allow_nan=False, separators=(",", ":"))
        for cid, entry in index.items()
    ]
    return (head + ', "cases": {\n' + ",\n".join(lines) + "\n}}\n").encode()


def generate() -> dict[str, bytes]:
    """Every data file, as bytes by file name."""
    tf = _tf()
    fns = tf_functions(tf)
    index: dict[str, Any] = {}
    per_function: dict[str, dict[str, np.ndarray]] = {f: {} for f in FUNCTIONS}
    problems: list[str] = []
    for case in CASES:
        try:
            entry, arrays = run_case(tf, fns, case)
        except CatalogueError as exc:
            problems.append(str(exc))
            continue
        index[case.id] = entry
        per_function[case.function].update(arrays)
    if problems:
        raise SystemExit("catalogue vs TensorFlow:\n" + "\n".join(problems))
    files = {"index.json": index_bytes(tf.__version__, index)}
    for f, arrays in per_function.items():
        files[f"{f}.npz"] = npz_bytes(arrays)
    files["README.md"] = readme(tf).encode()
    return files


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with data/, write nothing")
    parser.add_argument("--out", type=Path, default=DATA, help="output folder")
    ns = parser.parse_args(argv)
    files = generate()
    if ns.check:
        bad = [
            n
            for n, b in files.items()
            if not (ns.out / n).is_file() or (ns.out / n).read_bytes() != b
        ]
        if bad:
            print("differs from the committed data: " + ", ".join(bad))
            return 1
        print(f"data/ is up to date ({len(files)} files)")
        return 0
    ns.out.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (ns.out / name).write_bytes(content)
    print(f"wrote {len(files)} files to {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
