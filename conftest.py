"""pytest wiring of a source checkout: the conformance suite's plugin serves every test.

``anyclip_conformance.plugin`` provides the ``backend``/``grad_backend``/``xp`` fixtures, the
markers, the xfail lists, ``--anyclip-backends``, ``--live-tf`` and ``ANYCLIP_REQUIRE_BACKENDS``.

JAX compiles every function for every shape and dtype it meets, and on two cores that is most of
the suite's JAX time. Its persistent compilation cache keeps the programs between runs (a rerun
of ``tests/test_jit.py`` went from 12.7 s to 3.5 s): it is switched on here, before anything
imports JAX, in ``$XDG_CACHE_HOME/anyclip/jax`` (``~/.cache`` by default). Set
``JAX_COMPILATION_CACHE_DIR`` to use another folder; the cache is keyed by JAX's version, the
program and its flags, so a stale entry is never reused.
"""

import os
from pathlib import Path

_CACHE_HOME = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_CACHE_HOME / "anyclip" / "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

pytest_plugins = ["anyclip_conformance.plugin"]
