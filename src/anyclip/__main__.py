"""``python -m anyclip``: TensorFlow's clipping on every installed backend, in under a minute.

The demo prints, without writing any file:

1. the installed backends and their devices (a missing one is listed and skipped);
2. each function on a small example on every backend side by side, under the value TensorFlow
   2.21 gives for the same call;
3. the cases where a framework's own look-alike function gives other numbers than TF (torch's
   ``clip_grad_norm_``, optax's ``clip_by_global_norm``, ``np.clip`` with min > max,
   ``torch.linalg.norm`` of a matrix, float16 overflow), next to anyclip's result;
4. a short training loop ported from TF 1.x (clip each gradient by value, then all of them by
   their global norm) with TF's losses and norms beside anyclip's: on torch (or NumPy), and on
   JAX as an optax chain with ``anyclip.optax``.

The TF values are constants measured once with TensorFlow 2.21 on CPU; the demo never imports
TensorFlow. ``python -m anyclip --version`` prints the version. The conformance suite is a
separate distribution, run with ``python -m anyclip_conformance``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyclip

__all__ = ["BACKENDS", "DIFFERENCES", "EXAMPLES", "TRAINING_TF", "demo", "main"]

#: The backends the demo tries, in display order.
BACKENDS = ("numpy", "torch", "jax", "array_api_strict", "cupy", "dask")

_INF = float("inf")
_NAN = float("nan")

#: (call shown, TF 2.21's result, the call on a backend's float32 ``asarray``).
EXAMPLES: list[tuple[str, Any, Callable[[Callable[..., Any]], Any]]] = [
    (
        "clip_by_value([-2, 0.5, 3], -1, 1)",
        [-1.0, 0.5, 1.0],
        lambda a: anyclip.clip_by_value(a([-2, 0.5, 3]), -1, 1),
    ),
    (
        "clip_by_value([0, 5, 10], 6, 4)    # min > max: min wins",
        [6.0, 6.0, 6.0],
        lambda a: anyclip.clip_by_value(a([0, 5, 10]), 6, 4),
    ),
    ("clip_by_norm([3, 4], 1)", [0.6, 0.8], lambda a: anyclip.clip_by_norm(a([3, 4]), 1.0)),
    (
        "clip_by_norm([3, 4], 5)            # at the threshold: (t * 5) / 5",
        [3.0, 4.0],
        lambda a: anyclip.clip_by_norm(a([3, 4]), 5.0),
    ),
    ("global_norm([[3, 4], [12]])", 13.0, lambda a: anyclip.global_norm([a([3, 4]), a([12])])),
    (
        "clip_by_global_norm([[1, 2]], 41)[0]  # no shortcut: 41 * (1/41) < 1",
        [0.99999994, 1.9999999],
        lambda a: anyclip.clip_by_global_norm([a([1, 2])], 41)[0][0],
    ),
    (
        "clip_by_global_norm([[inf, 1]], 1)[0]",
        [_NAN, _NAN],
        lambda a: anyclip.clip_by_global_norm([a([_INF, 1])], 1)[0][0],
    ),
    (
        "clip_by_average_norm([3, 4], 1)",
        [1.2, 1.6],
        lambda a: anyclip.clip_by_average_norm(a([3, 4]), 1.0),
    ),
    (
        "norm([[1, -2], [3, 4]], ord=1)     # axis=None flattens",
        10.0,
        lambda a: anyclip.norm(a([[1, -2], [3, 4]]), ord=1),
    ),
    (
        "norm([[1, -2], [3, 4]], 2, axis=(0, 1))  # SVD: a few ULP from TF",
        5.1166735,
        lambda a: anyclip.norm(a([[1, -2], [3, 4]]), 2, axis=(0, 1)),
    ),
    ("l2_normalize([1e-7, 0])", [0.1, 0.0], lambda a: anyclip.l2_normalize(a([1e-7, 0.0]))),
    ("normalize([3, 4])[0]", [0.6, 0.8], lambda a: anyclip.normalize(a([3, 4]))[0]),
]


# ------------------------------------------------------------ the look-alike functions
def _clip_grad_norm_on_params(
    clip: str, grads: list[list[float]], max_norm: float, dtype: str = "float32"
) -> list[Any]:
    """``clip_grad_norm_`` of ``"torch"`` or ``"anyclip"`` on parameters with these gradients."""
    import torch

    import anyclip.torch

    fn = torch.nn.utils.clip_grad_norm_ if clip == "torch" else anyclip.torch.clip_grad_norm_
    params = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(len(g), dtype=getattr(torch, dtype)))
        p.grad = torch.tensor(g, dtype=getattr(torch, dtype))
        params.append(p)
    fn(params, max_norm)
    return [p.grad for p in params]


def _optax_clip(clip: str, grads: list[list[float]], max_norm: float) -> list[Any]:
    """``clip_by_global_norm(max_norm)`` of ``"optax"`` or ``"anyclip"`` on these gradients."""
    import jax.numpy as jnp
    import optax

    import anyclip.optax

    fn = optax.clip_by_global_norm if clip == "optax" else anyclip.optax.clip_by_global_norm
    tx = fn(max_norm)
    updates = [jnp.asarray(g, dtype=jnp.float32) for g in grads]
    clipped, _ = tx.update(updates, tx.init(updates))
    return list(clipped)


def _np(values: Any, dtype: str = "float32") -> Any:
    import numpy as np

    return np.asarray(values, dtype=dtype)


def _torch(values: Any, dtype: str = "float32") -> Any:
    import torch

    return torch.tensor(values, dtype=getattr(torch, dtype))


def _torch_matrix_norms() -> Any:
    import torch

    m = _torch([[1.0, -2.0], [3.0, 4.0]])
    return torch.stack([torch.linalg.norm(m, ord=o) for o in (1, 2, _INF)])


def _anyclip_norms(asarray: Callable[..., Any]) -> Any:
    """``anyclip.norm`` of the matrix with ord 1, 2 and inf, stacked into one array."""
    import array_api_compat

    m = asarray([[1.0, -2.0], [3.0, 4.0]])
    xp = array_api_compat.array_namespace(m)
    return xp.stack([anyclip.norm(m, ord=o) for o in (1, 2, _INF)])


#: (what is compared, TF's call, TF 2.21's result, rows of (backend needed, label, function)).
DIFFERENCES: list[tuple[str, str, Any, list[tuple[str, str, Callable[[], Any]]]]] = [
    (
        "clip a gradient [3, 4] to norm 5 (at the threshold)",
        "tf.clip_by_global_norm([[3, 4]], 5)",
        [[3.0, 4.0]],
        [
            (
                "torch",
                "torch.nn.utils.clip_grad_norm_",
                lambda: _clip_grad_norm_on_params("torch", [[3.0, 4.0]], 5.0),
            ),
            (
                "torch",
                "anyclip.torch.clip_grad_norm_",
                lambda: _clip_grad_norm_on_params("anyclip", [[3.0, 4.0]], 5.0),
            ),
        ],
    ),
    (
        "clip gradients [3, 4] and [12] to global norm 6.5",
        "tf.clip_by_global_norm([[3, 4], [12]], 6.5)",
        [[1.5, 2.0], [6.0]],
        [
            (
                "torch",
                "torch.nn.utils.clip_grad_norm_",
                lambda: _clip_grad_norm_on_params("torch", [[3.0, 4.0], [12.0]], 6.5),
            ),
            (
                "torch",
                "anyclip.torch.clip_grad_norm_",
                lambda: _clip_grad_norm_on_params("anyclip", [[3.0, 4.0], [12.0]], 6.5),
            ),
            (
                "optax",
                "optax.clip_by_global_norm",
                lambda: _optax_clip("optax", [[3.0, 4.0], [12.0]], 6.5),
            ),
            (
                "optax",
                "anyclip.optax.clip_by_global_norm",
                lambda: _optax_clip("anyclip", [[3.0, 4.0], [12.0]], 6.5),
            ),
        ],
    ),
    (
        "clip [0, 5, 10] to [6, 4] (min > max)",
        "tf.clip_by_value([0, 5, 10], 6, 4)",
        [6.0, 6.0, 6.0],
        [
            ("numpy", "np.clip", lambda: _np_clip()),
            (
                "numpy",
                "anyclip.clip_by_value on numpy",
                lambda: anyclip.clip_by_value(_np([0, 5, 10]), 6, 4),
            ),
            ("torch", "torch.clamp", lambda: _torch([0.0, 5.0, 10.0]).clamp(6.0, 4.0)),
            (
                "torch",
                "anyclip.clip_by_value on torch",
                lambda: anyclip.clip_by_value(_torch([0.0, 5.0, 10.0]), 6.0, 4.0),
            ),
        ],
    ),
    (
        "norm of the matrix [[1, -2], [3, 4]], ord = 1, 2, inf",
        "tf.norm(m, ord)",
        [10.0, 5.477226, 4.0],
        [
            ("torch", "torch.linalg.norm", _torch_matrix_norms),
            ("torch", "anyclip.norm on torch", lambda: _anyclip_norms(_torch)),
            ("numpy", "np.linalg.norm", lambda: _np_matrix_norms()),
            ("numpy", "anyclip.norm on numpy", lambda: _anyclip_norms(_np)),
        ],
    ),
    (
        "clip a float16 gradient [300, 0] to norm 1 (300**2 overflows float16)",
        "tf.clip_by_global_norm([[300, 0]], 1)",
        [[_NAN, _NAN]],
        [
            (
                "torch",
                "torch.nn.utils.clip_grad_norm_",
                lambda: _clip_grad_norm_on_params("torch", [[300.0, 0.0]], 1.0, "float16"),
            ),
            (
                "torch",
                "anyclip.clip_by_global_norm",
                lambda: anyclip.clip_by_global_norm([_torch([300.0, 0.0], "float16")], 1.0)[0],
            ),
        ],
    ),
    (
        "the same with clip_by_norm (accumulate_dtype is anyclip's opt-in, not TF)",
        "tf.clip_by_norm([300, 0], 1)",
        [0.0, 0.0],
        [
            (
                "numpy",
                "anyclip.clip_by_norm",
                lambda: anyclip.clip_by_norm(_np([300.0, 0.0], "float16"), 1.0),
            ),
            (
                "numpy",
                'anyclip.clip_by_norm(accumulate_dtype="float32")',
                lambda: anyclip.clip_by_norm(
                    _np([300.0, 0.0], "float16"), 1.0, accumulate_dtype="float32"
                ),
            ),
        ],
    ),
]


def _np_clip() -> Any:
    import numpy as np

    return np.clip(_np([0, 5, 10]), 6, 4)


def _np_matrix_norms() -> Any:
    import numpy as np

    m = _np([[1.0, -2.0], [3.0, 4.0]])
    return np.stack([np.linalg.norm(m, o) for o in (1, 2, _INF)])


# ------------------------------------------------------------------------- the training loop
#: TF 1.x's recipe, as the demo runs it.
TRAINING_RECIPE = """\
    grads = [tf.clip_by_value(g, -5.0, 5.0) for g in tape.gradient(loss, [w, b])]
    grads, norm = tf.clip_by_global_norm(grads, 1.0)
    optimizer.apply_gradients(zip(grads, [w, b]))   # SGD, learning rate 0.1"""

#: TF 2.21's (loss, global norm before clipping) at each step of the loop, on CPU.
TRAINING_TF = [
    (9.583333, 8.6602545),
    (6.7530212, 8.514409),
    (4.3963614, 8.031889),
    (2.487169, 7.6211896),
    (1.0932344, 7.3090396),
]


def _train_torch() -> list[tuple[float, float]]:
    """The loop on torch, gradients by autograd, clipping by anyclip."""
    import torch

    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    y = torch.tensor([[1.0], [2.0], [4.0]])
    w = torch.nn.Parameter(torch.tensor([[0.5], [-0.5]]))
    b = torch.nn.Parameter(torch.tensor([0.0]))
    optimizer = torch.optim.SGD([w, b], lr=0.1)
    steps = []
    for _ in TRAINING_TF:
        loss = ((x @ w + b - y) ** 2).mean()
        (grad_w, grad_b) = torch.autograd.grad(loss, (w, b))
        grads = [anyclip.clip_by_value(g, -5.0, 5.0) for g in (grad_w, grad_b)]
        clipped, norm = anyclip.clip_by_global_norm(grads, 1.0)
        w.grad, b.grad = clipped
        optimizer.step()
        steps.append((loss.item(), norm.item()))
    return steps


def _train_numpy() -> list[tuple[float, float]]:
    """The loop on NumPy, with the mean squared error's gradient written out."""
    import numpy as np

    x = _np([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    y = _np([[1.0], [2.0], [4.0]])
    w = _np([[0.5], [-0.5]])
    b = _np([0.0])
    steps = []
    for _ in TRAINING_TF:
        err = x @ w + b - y
        loss = np.mean(err**2)
        grads = [x.T @ err * np.float32(2 / 3), np.sum(err, axis=0) * np.float32(2 / 3)]
        grads = [anyclip.clip_by_value(g, -5.0, 5.0) for g in grads]
        grads, norm = anyclip.clip_by_global_norm(grads, 1.0)
        w = w - np.float32(0.1) * grads[0]
        b = b - np.float32(0.1) * grads[1]
        steps.append((float(loss), float(norm)))
    return steps


#: The same recipe as an optax chain, as the demo runs it on JAX.
TRAINING_RECIPE_OPTAX = """\
    tx = optax.chain(anyclip.optax.clip_by_value(-5.0, 5.0),
                     anyclip.optax.clip_by_global_norm(1.0, norm_in_state=True),
                     optax.sgd(0.1))"""


def _train_optax() -> list[tuple[float, float]]:
    """The loop on JAX, gradients by ``jax.value_and_grad``, clipping by an optax chain."""
    import jax
    import jax.numpy as jnp
    import optax

    import anyclip.optax

    x = jnp.asarray([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=jnp.float32)
    y = jnp.asarray([[1.0], [2.0], [4.0]], dtype=jnp.float32)
    params = {
        "w": jnp.asarray([[0.5], [-0.5]], dtype=jnp.float32),
        "b": jnp.asarray([0.0], dtype=jnp.float32),
    }
    tx = optax.chain(
        anyclip.optax.clip_by_value(-5.0, 5.0),
        anyclip.optax.clip_by_global_norm(1.0, norm_in_state=True),
        optax.sgd(0.1),
    )
    state = tx.init(params)

    def loss_fn(p: dict[str, Any]) -> Any:
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    steps = []
    for _ in TRAINING_TF:
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        steps.append((float(loss), float(state[1].global_norm)))
    return steps


def _print_steps(where: str, steps: list[tuple[float, float]]) -> None:
    """TF's losses and norms next to ``steps``, one row per step."""
    print(f"\n  anyclip on {where}; loss and global norm before clipping, float32")
    head = ("loss (TF)", "loss (anyclip)", "norm (TF)", "norm (anyclip)")
    print(f"  step  {head[0]:>11} {head[1]:>15}  {head[2]:>11} {head[3]:>15}")
    for i, ((tf_loss, tf_norm), (loss, norm)) in enumerate(zip(TRAINING_TF, steps, strict=True), 1):
        row = (_f32(tf_loss), _f32(loss), _f32(tf_norm), _f32(norm))
        print(f"  {i:>4}  {row[0]:>11} {row[1]:>15}  {row[2]:>11} {row[3]:>15}")


# ------------------------------------------------------------------------------- printing
def _load(name: str) -> tuple[Callable[..., Any], str] | None:
    """(float32 ``asarray``, device description) of backend ``name``, or None if absent."""
    try:
        if name == "jax":
            jax = importlib.import_module("jax")
            jnp = jax.numpy
            devices = ", ".join(str(d) for d in jax.devices())
            return (lambda v: jnp.asarray(v, dtype=jnp.float32)), devices
        if name == "array_api_strict":
            xp = importlib.import_module("array_api_strict")
            return (lambda v: xp.asarray(v, dtype=xp.float32)), "CPU_DEVICE"
        import array_api_compat

        mod = importlib.import_module({"dask": "dask.array"}.get(name, name))
        xp = array_api_compat.array_namespace(mod.asarray([0.0]))
        devices = "cpu"
        if name == "torch":
            devices = "cpu" + (", cuda" if mod.cuda.is_available() else "")
        elif name == "cupy":
            devices = f"cuda:{mod.cuda.Device().id}"
        return (lambda v: xp.asarray(v, dtype=xp.float32)), devices
    except Exception:  # noqa: BLE001 - anything that stops a backend loading: absent
        return None


def _load_optax() -> str | None:
    """The version of optax, or None if it does not import."""
    try:
        optax = importlib.import_module("optax")
    except Exception:  # noqa: BLE001 - anything that stops optax loading: absent
        return None
    return str(getattr(optax, "__version__", "?"))


def _host(x: Any) -> Any:
    """``x`` as a NumPy array (or a list of them), or ``x`` itself without NumPy."""
    if isinstance(x, (list, tuple)):
        return [_host(v) for v in x]
    try:
        import numpy as np
    except ImportError:
        return x.compute() if hasattr(x, "compute") else x
    if hasattr(x, "compute"):
        # dask is lazy: NumPy's arithmetic runs here, after anyclip returned and outside the
        # errstate anyclip holds while it builds the graph, so TF's silent inf/NaN needs the
        # caller's errstate (docs/tf-behaviour.md, "inf and NaN results never warn"), in this
        # thread: dask's thread pool sees it only from dask 2026.3 with NumPy 2
        with np.errstate(all="ignore"):
            x = x.compute(scheduler="synchronous")
    if type(x).__module__.startswith("array_api_strict"):
        return np.asarray(x)
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if hasattr(x, "get") and not isinstance(x, dict):
        return x.get()
    return np.asarray(x)


def _show(x: Any, dtype: bool = True) -> str:
    """Values (8 significant digits) and, for one array, its dtype."""
    host = _host(x)
    if isinstance(host, list):
        return "[" + ", ".join(_show(v, dtype=False) for v in host) + "]"
    try:
        import numpy as np

        text = np.array2string(np.asarray(host), precision=8, separator=", ")
    except ImportError:
        text = str(host)
    if dtype and hasattr(x, "dtype"):
        text += f"  {str(x.dtype).rsplit('.', 1)[-1]}"
    return text


def _show_tf(value: Any) -> str:
    """A TF constant in the format of :func:`_show` (float32 values)."""
    try:
        import numpy as np
    except ImportError:
        return str(value)
    if isinstance(value, list) and value and isinstance(value[0], list):
        return "[" + ", ".join(_show_tf(v) for v in value) + "]"
    return np.array2string(np.asarray(value, dtype=np.float32), precision=8, separator=", ")


def _f32(value: float) -> str:
    """The shortest decimal that rounds to ``value`` in float32 (``repr`` without NumPy)."""
    try:
        import numpy as np
    except ImportError:
        return repr(value)
    return str(np.float32(value))


def demo() -> int:
    """Print the backends, every function on every backend, the differences, a training loop."""
    start = time.perf_counter()
    print(f"anyclip {anyclip.__version__}: TensorFlow 2.21's clipping and norms, any array library")
    print("\nBackends")
    loaded: dict[str, Callable[..., Any]] = {}
    for name in BACKENDS:
        got = _load(name)
        if got is None:
            print(f"  {name:<17} not installed: skipped")
            continue
        asarray, devices = got
        mod = sys.modules[name]
        print(f"  {name:<17} {getattr(mod, '__version__', '?'):<14} devices: {devices}")
        loaded[name] = asarray
    optax = _load_optax() if "jax" in loaded else None
    if optax is None:
        print(f"  {'optax':<17} not installed: skipped (anyclip.optax needs jax and optax)")
    else:
        print(f"  {'optax':<17} {optax:<14} for anyclip.optax")
        loaded["optax"] = loaded["jax"]

    print("\n1. Every function on every backend, under TensorFlow 2.21's result (float32)")
    for call, tf_value, fn in EXAMPLES:
        print(f"\n  {call}")
        print(f"    {'TF 2.21':<17} {_show_tf(tf_value)}")
        for name, asarray in loaded.items():
            try:
                shown = _show(fn(asarray))
            except Exception as exc:  # noqa: BLE001 - shown, not hidden
                shown = f"raises {type(exc).__name__}: {exc}"
            print(f"    {name:<17} {shown}")

    print("\n2. Where a framework's own function is not TF's")
    for what, tf_call, tf_value, rows in DIFFERENCES:
        print(f"\n  {what}")
        print(f"    {tf_call:<50} {_show_tf(tf_value)}  (TF 2.21)")
        for needs, label, compute in rows:
            if needs not in loaded:
                print(f"    {label:<50} skipped: {needs} not installed")
                continue
            print(f"    {label:<50} {_show(compute())}")

    print("\n3. A training loop ported from TF 1.x: y = x @ w + b, mean squared error, 5 steps")
    print(TRAINING_RECIPE)
    if "torch" in loaded:
        where, steps = "torch (autograd)", _train_torch()
    elif "numpy" in loaded:
        where, steps = "numpy (gradient by hand)", _train_numpy()
    else:
        where, steps = "", []
        print("  skipped: needs torch or numpy")
    if steps:
        _print_steps(where, steps)

    print("\n4. The same loop on JAX, as an optax chain")
    print(TRAINING_RECIPE_OPTAX)
    if "optax" in loaded:
        _print_steps("JAX with optax (jax.value_and_grad)", _train_optax())
    else:
        print("  skipped: needs jax and optax")
    print(f"\nDone in {time.perf_counter() - start:.1f} s. Docs: docs/index.md, or `make docs`.")
    return 0


# ------------------------------------------------------------------------------------ CLI
_DESCRIPTION = """\
Show TensorFlow 2.21's clipping and norm functions on every installed array library: each
function on every backend under TF's result, the cases where torch's and NumPy's own functions
give other numbers, and a short training loop ported from TF. Writes no files.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m anyclip``."""
    parser = argparse.ArgumentParser(prog="python -m anyclip", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"anyclip {anyclip.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{conformance}")
    sub.add_parser(
        "conformance",
        help="say where the conformance suite is (python -m anyclip_conformance)",
        description="The conformance suite is not part of anyclip.",
    )
    args = parser.parse_args(argv)
    if args.command == "conformance":
        return _conformance_pointer()
    return demo()


def _conformance_pointer() -> int:
    """Say how to run the conformance suite, from what is really installed (imports nothing)."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("anyclip_conformance") is None:
        print(
            "The conformance suite is the separate `anyclip-conformance` distribution, which is "
            "not installed here: `pip install anyclip-conformance` (in a source checkout: "
            "`pip install -e ./conformance`), then run `python -m anyclip_conformance`.",
            file=sys.stderr,
        )
        return 2
    try:
        version = " " + importlib.metadata.version("anyclip-conformance")
    except importlib.metadata.PackageNotFoundError:  # importable from a path, not installed
        version = ""
    print(
        f"anyclip-conformance{version} is installed: run `python -m anyclip_conformance` "
        "(`--backends numpy,torch` to choose backends, `--help` for the rest)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
