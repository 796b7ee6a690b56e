"""JAX's persistent compilation cache, switched on before JAX compiles anything.

JAX compiles every function for every shape and dtype it meets, and on two cores that is most of
a JAX run's time. Its persistent compilation cache keeps the compiled programs on disk between
runs, so a rerun reads them instead of compiling them again (the 361 JAX checks of
``clip_by_average_norm``: 20.3 s, then 8.9 s; JAX still lowers each program to find it in the
cache). The cache is keyed by JAX's version, the program and its flags, so a stale entry is never
reused.

Both ``python -m anyclip_conformance`` and a source checkout's ``conftest.py`` call
:func:`enable` first. The folder is ``$JAX_COMPILATION_CACHE_DIR`` when set, otherwise
``$XDG_CACHE_HOME/anyclip/jax`` (``~/.cache/anyclip/jax``), claimed for the process's lifetime
(a lock on its ``.in-use`` file): a second run at the same time (a second ``make test``, another
clone) takes ``jax-1``, a third ``jax-2``, and so on, each warm from its own earlier runs,
instead of reading entries the first one is writing. What a run starts (its xdist workers,
their subprocesses) inherits the claimed folder through ``JAX_COMPILATION_CACHE_DIR``.

Each pytest-xdist worker (``PYTEST_XDIST_WORKER``: ``gw0``, ``gw1``, ...) gets a folder of its
own inside it (``.../jax/gw0``): JAX writes a cache entry with a plain ``write_bytes`` (no lock
without a size limit, no rename), so a second process reading the same entry while it is written
reads it truncated, and JAX turns that into a warning, which the suite's warnings-as-errors
make a failure. The subprocesses a worker starts inherit its folder. So that a worker finds
what the other workers compiled in earlier runs (which tests a worker runs changes from run to
run), the controller links each worker folder's entries into the others before any worker starts
(:func:`share_worker_entries`); JAX's keys then match across folders because the cache's
GPU-only XLA caches are off (``JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES=none``: JAX 0.10 puts
their paths, inside the folder, into the compile options it hashes, so the same program had
another key in each folder).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["claim", "default_dir", "enable", "share_worker_entries"]

#: JAX's settings (environment variables it reads at import) and the values set here: every
#: program is cached, however small and however quickly it compiled.
_SETTINGS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "none",
}


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/anyclip/jax``, or ``~/.cache/anyclip/jax``."""
    home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(home) / "anyclip" / "jax"


def enable() -> Path:
    """Switch the cache on (settings already in the environment win); return its folder.

    Sets JAX's environment variables, which JAX reads when it is imported; when JAX is already
    imported, sets its configuration too (it takes effect if nothing has compiled yet). In a
    pytest-xdist worker the folder is the worker's own subfolder (see the module's docstring).
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    folder = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if folder is None:  # a run of its own: a folder no other run uses now
        folder = str(default_dir() if worker else claim(default_dir()))
        os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
    if worker and Path(folder).name != worker:
        folder = os.environ["JAX_COMPILATION_CACHE_DIR"] = str(Path(folder) / worker)
    for name, value in _SETTINGS.items():
        os.environ.setdefault(name, value)
    jax = sys.modules.get("jax")
    if jax is not None:
        jax.config.update("jax_compilation_cache_dir", folder)
        for name in _SETTINGS:
            value = os.environ[name]
            typed: float | int | str = (
                float(value) if "TIME" in name else int(value) if "BYTES" in name else value
            )
            try:
                jax.config.update(name.lower(), typed)
            except AttributeError:  # an option this JAX does not have
                pass
    return Path(folder)


#: The lock files' descriptors of the folders this process claimed, kept open until it exits.
_CLAIMED: dict[Path, int] = {}

#: How many folders :func:`claim` tries before it gives up and shares ``base``.
_SLOTS = 32


def claim(base: Path) -> Path:
    """The first of ``base``, ``base-1``, ``base-2``, ... that no other process holds; now held.

    The hold is an exclusive ``flock`` on the folder's ``.in-use`` file, released when this
    process exits (also when it is killed), not passed to the processes it starts. Where the
    platform has no ``flock`` (Windows) or every folder is held, ``base`` is returned unheld,
    as before this lock existed; a folder that cannot be written or locked (a file system
    without locks) is returned unheld.
    """
    try:
        import fcntl
    except ImportError:
        return base
    for n in range(_SLOTS):
        folder = base if n == 0 else base.with_name(f"{base.name}-{n}")
        if folder in _CLAIMED:
            return folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder / ".in-use", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # not writable here: JAX reports the folder itself
            return folder
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process holds it
            os.close(fd)
            continue
        except OSError:  # a file system without locks (some network mounts): unheld
            os.close(fd)
            return folder
        _CLAIMED[folder] = fd
        return folder
    return base


def share_worker_entries(folder: Path) -> int:
    """Link every entry of each worker folder (``folder/gw*``) into the others; how many.

    Call it only while no worker runs (the pytest-xdist controller, before it starts them): a
    link made while JAX writes the entry would let another worker read it truncated. A hard
    link costs no space; where the file system refuses one, the entry is copied.
    """
    workers = [d for d in folder.glob("gw*") if d.is_dir()]
    names = {d: _entry_names(d) for d in workers}
    made = 0
    for source in workers:
        for target in workers:
            for name in names[source] - names[target]:
                try:
                    os.link(source / name, target / name)
                except FileExistsError:
                    continue
                except OSError:
                    shutil.copyfile(source / name, target / name)
                names[target].add(name)
                made += 1
    return made


def _entry_names(folder: Path) -> set[str]:
    """The names of the files in ``folder``, hidden ones left out.

    ``os.scandir`` reads each entry's type from the directory listing: ``Path.is_file`` made a
    ``stat`` call per entry, 4.8 s before the workers started with 40,000 entries per folder.
    """
    with os.scandir(folder) as entries:
        return {e.name for e in entries if e.is_file() and not e.name.startswith(".")}
