"""``python -m anyclip_conformance``: check anyclip against TensorFlow 2.21 on your backends.

Runs the suite (``anyclip_conformance/suite``) through pytest on the chosen backends (default:
every backend that loads here), prints the function x backend matrix and the failures, and exits
0 only when nothing failed. It writes the Markdown report only when asked (``--report PATH``);
JAX's compiled programs go to a persistent cache (``~/.cache/anyclip/jax``; ``--no-jax-cache``
to run without it), so that a second JAX run reads them instead of compiling them again.

On JAX it runs a sample of the catalogue unless given ``--full`` (or ``--report``): one case of
every function x case family and of every function x dtype, in every variant, and one step of
every real model (:func:`anyclip_conformance.reference.sample`). JAX lowers and compiles a
program for every new shape and dtype, tens of milliseconds each even when the compiled program
is in the cache, and the whole catalogue makes thousands of them: minutes on two cores, where
the sample takes about a minute. Other backends run every case; a source checkout's ``pytest``
runs every case everywhere.

Example: ``python -m anyclip_conformance --backends torch-cuda -k clip_by_norm``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

__all__ = ["main"]

#: How many failures are printed in full (all are counted).
SHOWN_FAILURES = 20


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m anyclip_conformance`` (returns the exit status)."""
    import pytest

    from anyclip_conformance import jax_cache, plugin, report
    from anyclip_conformance.backends import BACKEND_IDS, BackendId, parse_backends

    parser = argparse.ArgumentParser(
        prog="python -m anyclip_conformance",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument(
        "--backends",
        default=None,
        help=f"comma-separated, from {', '.join(BACKEND_IDS)} (default: every one that loads)",
    )
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help="write the Markdown report here (runs every case: implies --full)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="run every case of the catalogue on JAX too (default there: a sample covering "
        "every function, dtype and case family, about a minute; the whole catalogue takes "
        "several minutes)",
    )
    parser.add_argument("-k", dest="keyword", default=None, help="a pytest -k expression")
    parser.add_argument(
        "--live-tf", action="store_true", help="also compare with a live TensorFlow (slow)"
    )
    parser.add_argument(
        "--no-jax-cache",
        action="store_true",
        help="do not keep JAX's compiled programs between runs (the cache lives in "
        "$JAX_COMPILATION_CACHE_DIR, or ~/.cache/anyclip/jax)",
    )
    args = parser.parse_args(argv)
    if args.live_tf and importlib.util.find_spec("tensorflow") is None:
        print(
            "error: --live-tf needs TensorFlow 2.21, which is not installed here: "
            "pip install 'anyclip-conformance[live]' (or tensorflow-cpu==2.21.0)",
            file=sys.stderr,
        )
        return 2
    if not args.no_jax_cache:
        jax_cache.enable()  # before any backend imports JAX
    try:
        wanted = parse_backends(args.backends) if args.backends else list(BackendId)
    except ValueError as exc:
        parser.error(f"--backends: {exc}")
    if not wanted:
        parser.error(f"--backends: name at least one of {', '.join(BACKEND_IDS)}")

    required = plugin.required_backends() | ({b.value for b in wanted} if args.backends else set())
    backends, missing = [], []
    for b in wanted:
        loaded = plugin.try_backend(b.value)
        if isinstance(loaded, str):
            missing.append(f"{b.value} ({loaded})")
        else:
            backends.append(loaded)
    unavailable = [m for m in missing if m.split(" ", 1)[0] in required]
    if unavailable or not backends:
        why = "; ".join(unavailable or missing)
        print(f"error: backends requested but not available here: {why}", file=sys.stderr)
        return 2
    if missing:
        print("not run here: " + "; ".join(missing), file=sys.stderr)
    missing += [f"{b.value} (not selected)" for b in BackendId if b not in wanted]

    package = resources.files("anyclip_conformance")
    pytest_args = [str(package / "suite"), "-c", str(package / "pytest-suite.ini")]
    pytest_args += ["--rootdir", str(package), "-p", "no:terminal", "-p", "no:cacheprovider"]
    pytest_args += ["--capture=sys"]  # fd 2 stays the terminal, for the progress bar
    pytest_args += ["--anyclip-backends", ",".join(b.name for b in backends)]
    pytest_args += ["--live-tf"] if args.live_tf else ["-m", "not live_tf"]
    sampled = [] if args.full or args.report else [b.name for b in backends if b.library == "jax"]
    if sampled:
        pytest_args += ["--anyclip-sample", ",".join(sampled)]
        note = sample_note(sampled)
        print(note, file=sys.stderr)
    if args.keyword:
        pytest_args += ["-k", args.keyword]
    matrix = report.Matrix(progress=sys.stderr.isatty())
    code = pytest.main(pytest_args, plugins=[plugin, matrix])

    for nodeid, text in matrix.failures[:SHOWN_FAILURES]:
        print(f"FAILED {nodeid}\n{text[-2000:]}\n", file=sys.stderr)
    print(matrix.table())
    print(
        matrix.summary()
        + (f" ({', '.join(sampled)}: a sample, --full runs every case)" if sampled else "")
    )
    if args.report is not None:
        args.report.write_text(report.document(matrix, backends, missing), encoding="utf-8")
        print(f"wrote {args.report}")
    return 0 if code == 0 and matrix.failed == 0 else max(int(code), 1)


def sample_note(backends: Sequence[str]) -> str:
    """The line saying that ``backends`` run the sample, and how to run every case."""
    from anyclip_conformance.reference import load_index, real_gradient_cases, sample

    chosen = sample()
    real = real_gradient_cases()
    cases = len(chosen) - len(chosen.intersection(real))
    steps = len(chosen) - cases
    return (
        f"{', '.join(backends)}: a sample of the catalogue, {cases} of {len(load_index())} cases "
        f"(every function x case family and function x dtype) in every variant, and {steps} of "
        f"{len(real)} real-model steps; --full runs every case (several minutes on JAX)"
    )


if __name__ == "__main__":
    sys.exit(main())
