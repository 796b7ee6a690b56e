"""``python -m anyclip``: the installed backends, and every function on every backend.

The conformance suite is a distribution of its own: ``pip install anyclip-conformance`` and
run ``python -m anyclip_conformance``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

import anyclip

#: The backends the demo tries, in display order.
BACKENDS = ("numpy", "torch", "jax", "array_api_strict", "cupy", "dask")

#: (call shown to the user, function of a backend's ``asarray``) for each public function.
EXAMPLES: list[tuple[str, Callable[[Callable[..., Any]], Any]]] = [
    ("clip_by_value([-2, 0.5, 3], -1, 1)", lambda a: anyclip.clip_by_value(a([-2, 0.5, 3]), -1, 1)),
    (
        "clip_by_value([0, 5, 10], 6, 4)  # min > max",
        lambda a: anyclip.clip_by_value(a([0, 5, 10]), 6, 4),
    ),
    ("clip_by_norm([3, 4], 1)", lambda a: anyclip.clip_by_norm(a([3, 4]), 1.0)),
    ("clip_by_norm([3, 4], 5)  # tie: (t*5)/5", lambda a: anyclip.clip_by_norm(a([3, 4]), 5.0)),
    ("global_norm([[3, 4], [12]])", lambda a: anyclip.global_norm([a([3, 4]), a([12])])),
    (
        "clip_by_global_norm([[1, 2]], 41)[0]",
        lambda a: anyclip.clip_by_global_norm([a([1, 2])], 41)[0][0],
    ),
    (
        "clip_by_global_norm([[inf, 1]], 1)[0]",
        lambda a: anyclip.clip_by_global_norm([a([float("inf"), 1])], 1)[0][0],
    ),
    ("clip_by_average_norm([3, 4], 1)", lambda a: anyclip.clip_by_average_norm(a([3, 4]), 1.0)),
    (
        "norm([[1, -2], [3, 4]], ord=1)  # axis None",
        lambda a: anyclip.norm(a([[1, -2], [3, 4]]), ord=1),
    ),
    (
        "norm([[1, -2], [3, 4]], 2, axis=(0, 1))",
        lambda a: anyclip.norm(a([[1, -2], [3, 4]]), 2, axis=(0, 1)),
    ),
    ("l2_normalize([1e-7, 0])", lambda a: anyclip.l2_normalize(a([1e-7, 0.0]))),
    ("normalize([3, 4])[0]", lambda a: anyclip.normalize(a([3, 4]))[0]),
]


def _load(name: str) -> tuple[Any, Callable[[Any], Any], str] | None:
    """(namespace, float32 asarray, device description) of backend ``name``, or None."""
    try:
        if name == "jax":
            jax = importlib.import_module("jax")
            jax.config.update("jax_enable_x64", True)
            jnp = jax.numpy
            return (
                jnp,
                lambda v: jnp.asarray(v, dtype=jnp.float32),
                ", ".join(map(str, jax.devices())),
            )
        if name == "array_api_strict":
            xp = importlib.import_module("array_api_strict")
            return xp, lambda v: xp.asarray(v, dtype=xp.float32), "CPU_DEVICE"
        import array_api_compat

        mod = importlib.import_module({"dask": "dask.array"}.get(name, name))
        xp = array_api_compat.array_namespace(mod.asarray([0.0]))
        devices = "cpu"
        if name == "torch":
            devices = "cpu" + (", cuda" if mod.cuda.is_available() else "")
        elif name == "cupy":
            devices = f"cuda:{mod.cuda.Device().id}"
        return xp, lambda v: xp.asarray(v, dtype=xp.float32), devices
    except Exception:  # noqa: BLE001 - anything that stops a backend loading: absent
        return None


def _show(x: Any) -> str:
    if hasattr(x, "compute"):
        x = x.compute()
    try:
        import numpy as np

        if type(x).__module__.startswith("array_api_strict"):
            host = np.asarray(x)
        elif hasattr(x, "detach"):
            host = x.detach().cpu().numpy()
        elif hasattr(x, "get"):
            host = x.get()
        else:
            host = np.asarray(x)
        values = np.array2string(host, precision=8, separator=", ")
    except Exception:  # noqa: BLE001 - fall back to str()
        values = str(x)
    return f"{values} {str(x.dtype).rsplit('.', 1)[-1]}"


def demo() -> int:
    """Print the backends, then every example on every backend side by side."""
    print(f"anyclip {anyclip.__version__}\n\nBackends:")
    loaded = {}
    for name in BACKENDS:
        got = _load(name)
        if got is None:
            print(f"  {name:<17} not installed")
            continue
        _, asarray, devices = got
        mod = sys.modules[{"array_api_strict": "array_api_strict", "dask": "dask"}.get(name, name)]
        print(f"  {name:<17} {getattr(mod, '__version__', '?'):<12} devices: {devices}")
        loaded[name] = asarray
    print()
    for call, fn in EXAMPLES:
        print(call)
        for name, asarray in loaded.items():
            try:
                shown = _show(fn(asarray))
            except Exception as exc:  # noqa: BLE001 - shown, not hidden
                shown = f"raises {type(exc).__name__}: {exc}"
            print(f"    {name:<17} {shown}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m anyclip``."""
    parser = argparse.ArgumentParser(prog="python -m anyclip", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("conformance", help="moved: python -m anyclip_conformance")
    args = parser.parse_args(argv)
    if args.command == "conformance":
        print(
            "the conformance suite is the anyclip-conformance distribution: "
            "pip install anyclip-conformance, then python -m anyclip_conformance",
            file=sys.stderr,
        )
        return 2
    return demo()


if __name__ == "__main__":
    sys.exit(main())
