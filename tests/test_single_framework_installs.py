"""Real single-framework installs: torch alone (no NumPy at all), and JAX alone (no torch).

``tests/test_porting.py`` simulates a missing NumPy by blocking its import; this test builds
the installs such users have. :func:`build_venv` creates a venv (``python -m venv``, not
``--system-site-packages``, which would see this environment's packages), installs a list of
requirements at the versions ``constraints.txt`` pins, with their own dependencies, anyclip's
runtime dependencies and its build backend, then anyclip from this tree without its
dependencies; :func:`run_in` runs a script there, outside the checkout. Each :class:`Install`
names its requirements, the distributions it must not have, and its script:

* **torch-only**: torch and no NumPy (torch requires none). ``import numpy`` must fail; every
  public function, ``anyclip.tree`` and the ``anyclip.torch`` adapters give hand-derived
  values on torch tensors, including a call with no array at all (documented to build its
  result with torch when NumPy is absent).
* **JAX-only**: jax, jaxlib and optax, no torch and no dask. JAX itself requires NumPy, so a
  JAX install always has it; what a JAX user lacks is torch. ``import torch`` must fail;
  every public function, ``anyclip.tree`` and the ``anyclip.optax`` transformations give
  hand-derived values on JAX arrays (namespace, dtype and shape checked before values), under
  ``jax.jit`` and ``jax.grad`` too; a call with no array at all gives what the docs say: a
  0-d float32 NumPy array (NumPy is installed, and builds it).

In both, ``import anyclip`` imports no array library, ``python -m anyclip --version`` works,
and the docs' examples that import that framework and no other run and print what their
``# ->`` comments say.

The venvs are made without pip (this environment's pip installs into them, ``pip --python``)
and installed without bytecode (``--no-compile``): their interpreters compile what they import,
once, for the next. Measured on two shared cores with the wheels in a local package index: the
torch-only venv builds in 13 to 15 s (35 s with its own pip and all of torch compiled), its
script runs in 11 s (it compiles what ``torch.optim`` imports: torch._dynamo, sympy; 4 s
compiled); the JAX-only venv builds in 8 to 9 s (22 s), its script runs in 5 to 6 s (3 s).
The docs' examples run in one interpreter per install (``tests/conftest.py``'s
``DocsBlockRunner``, each block bounded in time): torch-only's 28 in 7.5 s (87 s with one
interpreter each, on a loaded machine).
Where a venv cannot be built (no package index, no wheel) its tests are a visible SKIP, and a
failure under ``CI=true``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
import venv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import DOCS_RUNNER, DocsBlockFailed, DocsBlockRunner, DocsBlockTimeout

#: One pytest-xdist worker runs this module and tests/test_packaging.py: both build in the
#: checkout (``pip install`` of it writes ``build/`` and ``src/anyclip.egg-info`` there); each
#: venv is built once (module-scoped ``python``), in the worker's own temporary folder.
pytestmark = pytest.mark.xdist_group("checkout-build")

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"


def _pyproject_list(section: str, key: str) -> list[str]:
    """A list of strings from ``pyproject.toml`` (no ``tomllib`` on Python 3.10)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    body = re.search(rf"^\[{re.escape(section)}\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    assert body, f"pyproject.toml has no [{section}]"
    value = re.search(rf"^{key} = (\[.*?\])", body.group(1), re.M | re.S)
    assert value, f"pyproject.toml [{section}] has no `{key}`"
    return list(ast.literal_eval(value.group(1)))


#: What anyclip needs at run time, and what builds it (installed first, so that anyclip
#: itself installs with ``--no-deps --no-build-isolation``: nothing else comes in with it).
RUNTIME = _pyproject_list("project", "dependencies")
BUILD = _pyproject_list("build-system", "requires")


def _name(requirement: str) -> str:
    """The normalised distribution name of ``requirement`` (``Array_API.compat>=1`` → ...)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _load_test_docs():
    """``tests/test_docs.py``, for its block parser (tests are not importable by name here)."""
    spec = importlib.util.spec_from_file_location(
        "_anyclip_test_docs", ROOT / "tests" / "test_docs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DOCS = _load_test_docs()

#: Run first in every script: ``import anyclip`` (and ``anyclip.tree``) import no array
#: library, and the copy imported is the one installed in the venv.
PRELUDE = textwrap.dedent(
    """
    import math
    import subprocess
    import sys
    import warnings

    import anyclip
    import anyclip.tree

    LIBRARIES = {
        "numpy", "torch", "jax", "jaxlib", "optax", "dask", "array_api_strict", "cupy",
        "tensorflow",
    }


    def loaded():
        return {name.split(".")[0] for name, mod in sys.modules.items() if mod is not None}


    assert not loaded() & LIBRARIES, sorted(loaded() & LIBRARIES)
    assert anyclip.__file__.startswith(sys.prefix), anyclip.__file__  # the installed copy
    done = subprocess.run(
        [sys.executable, "-m", "anyclip", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.startswith("anyclip "), done


    def flat(values):
        if isinstance(values, (list, tuple)):
            return [x for v in values for x in flat(v)]
        return [float(values)]


    def same_values(got, want, rel_tol):
        got, want = flat(got), flat(want)
        assert len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert math.isclose(g, w, rel_tol=rel_tol, abs_tol=1e-30), (got, want)


    warnings.simplefilter("error")
    """
)
#: Where each script runs :data:`TREE_CHECKS`.
_TREE_SLOT = "# @TREE_CHECKS@\n"

#: ``anyclip.tree`` on the scripts' ``v`` ([3, 4]) and ``b`` ([[12]]), with hand-derived values.
TREE_CHECKS = textwrap.dedent(
    """
    tree = {"w": v, "b": (b, None)}
    leaves, rebuild = anyclip.tree.flatten(tree)
    assert len([x for x in leaves if x is not None]) == 2
    assert rebuild(leaves)["w"] is v
    close(anyclip.tree.map_leaves(lambda x: x * 2, tree)["w"], [6.0, 8.0])
    close(anyclip.tree.global_norm(tree), 13.0, shape=())
    out, n = anyclip.tree.clip_by_global_norm(tree, 6.5)
    close(out["w"], [1.5, 2.0])
    close(out["b"][0], [[6.0]], shape=(1, 1))
    assert out["b"][1] is None
    close(n, 13.0)
    out = anyclip.tree.clip_by_norm(tree, 1.0)
    close(out["w"], [0.6, 0.8])
    close(out["b"][0], [[1.0]])
    out = anyclip.tree.clip_by_value(tree, 0.0, 3.5)
    close(out["w"], [3.0, 3.5])
    close(out["b"][0], [[3.5]])
    close(anyclip.tree.clip_by_average_norm({"w": v}, 1.0)["w"], [1.2, 1.6])
    """
)


TORCH_SCRIPT = textwrap.dedent(
    """
    # torch's own import warns once that it found no NumPy: that is the point here
    warnings.filterwarnings("ignore", "Failed to initialize NumPy", UserWarning)

    try:
        import numpy  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("numpy is importable in the torch-only venv")

    import torch

    import anyclip.torch as at


    def close(t, expected, dtype=torch.float32, shape=None):
        assert isinstance(t, torch.Tensor), type(t)
        assert t.dtype == dtype, (t.dtype, dtype)
        if shape is not None:
            assert tuple(t.shape) == shape, (tuple(t.shape), shape)
        same_values(t.tolist(), expected, rel_tol=2e-7)


    v = torch.tensor([3.0, 4.0])  # norm 5
    b = torch.tensor([[12.0]])  # with v: global norm 13
    m = torch.tensor([[3.0, 4.0], [6.0, 8.0]])  # row norms 5 and 10

    # ------------------------------------------------------------- the functions
    close(anyclip.clip_by_value(v, 3.5, 3.75), [3.5, 3.75], shape=(2,))
    close(anyclip.clip_by_norm(v, 1.0), [0.6, 0.8])
    close(anyclip.clip_by_norm(v, 10.0), [3.0, 4.0])
    close(anyclip.clip_by_norm(m, 5.0, axes=1), [[3.0, 4.0], [3.0, 4.0]], shape=(2, 2))
    close(anyclip.clip_by_norm(v.double(), 1.0), [0.6, 0.8], torch.float64)
    close(anyclip.global_norm([v, None, b]), 13.0, shape=())
    clipped, n = anyclip.clip_by_global_norm([v, None, b], 6.5)
    close(clipped[0], [1.5, 2.0])
    assert clipped[1] is None
    close(clipped[2], [[6.0]], shape=(1, 1))
    close(n, 13.0)
    # average norm 5 / 2 = 2.5 > 1: scaled by 1 / 2.5
    close(anyclip.clip_by_average_norm(v, 1.0), [1.2, 1.6])
    u = torch.tensor([3.0, -4.0, 0.0, 12.0])
    close(anyclip.norm(u), 13.0)
    close(anyclip.norm(u, ord=1), 19.0)
    close(anyclip.norm(u, ord=math.inf), 12.0)
    close(anyclip.norm(torch.tensor([[1.0, -2.0], [3.0, 4.0]]), ord=1, axis=(0, 1)), 6.0)
    close(anyclip.norm(m, axis=1, keepdims=True), [[5.0], [10.0]], shape=(2, 1))
    close(anyclip.l2_normalize(v), [0.6, 0.8])
    close(anyclip.l2_normalize(m, axis=1), [[0.6, 0.8], [0.6, 0.8]])
    normalized, n = anyclip.normalize(v)
    close(normalized, [0.6, 0.8])
    close(n, [5.0], shape=(1,))
    try:
        anyclip.clip_by_average_norm(v.double(), 1.0)
    except TypeError as exc:
        assert "float32" in str(exc), exc
    else:
        raise AssertionError("clip_by_average_norm accepted float64")

    # ------------------------------------------- no array at all: torch builds it
    n = anyclip.global_norm([None, None])
    close(n, 0.0, shape=())
    out, n = anyclip.clip_by_global_norm([None], 1.0)
    assert out == [None], out
    close(n, 0.0)
    close(anyclip.tree.global_norm({"a": None, "b": [None]}), 0.0)

    # @TREE_CHECKS@

    # -------------------------------------------------------------- anyclip.torch
    def params(*grads):
        ps = []
        for g in grads:
            p = torch.nn.Parameter(torch.zeros(2))
            p.grad = None if g is None else torch.tensor(g)
            ps.append(p)
        return ps

    p, q = params([3.0, 4.0], None)  # q has no gradient
    close(at.clip_grad_norm_([p, q], 1.0), 5.0)
    assert all(math.isclose(g, w, rel_tol=1e-6) for g, w in zip(p.grad.tolist(), [0.6, 0.8]))
    # the all-None gradient list: a zero norm from torch, nothing to clip
    (q,) = params(None)
    close(at.clip_grad_norm_([q], 1.0), 0.0)
    assert q.grad is None
    close(at.get_total_norm([]), 0.0)
    close(at.get_total_norm([torch.tensor([3.0, 4.0]), torch.tensor([12.0])]), 13.0)
    close(at.get_total_norm([torch.tensor([3.0, -4.0])], norm_type=1), 7.0)
    (p,) = params([3.0, -4.0])
    at.clip_grad_value_([p], 0.7)
    close(p.grad, [0.7, -0.7])
    (p,) = params([3.0, -4.0])
    at.clip_grad_by_value_([p], -1.0, 2.0)
    close(p.grad, [2.0, -1.0])
    (p,) = params([3.0, 4.0])
    at.clip_grad_by_norm_([p], 1.0)
    close(p.grad, [0.6, 0.8])
    (p,) = params([3.0, 4.0])
    at.clip_grads_with_norm_([p], 10.0, torch.tensor(20.0))  # scaled by 10 / (20 + 1e-6)
    assert all(math.isclose(g, w, rel_tol=1e-6) for g, w in zip(p.grad.tolist(), [1.5, 2.0]))
    (p,) = params([float("inf"), 1.0])
    try:
        at.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    except at.NonfiniteNormError:
        pass
    else:
        raise AssertionError("no NonfiniteNormError on an infinite norm")
    # keras_clipping: SGD with lr 1 from zero moves the weights by minus the clipped gradient
    (p,) = params(None)
    opt = torch.optim.SGD([p], lr=1.0)
    handle = at.keras_clipping(opt, clipnorm=1.0)
    p.grad = torch.tensor([3.0, 4.0])
    opt.step()
    handle.remove()
    close(p.detach(), [-0.6, -0.8])

    assert "numpy" not in loaded(), sorted(loaded())
    print("ok")
    """
)
TORCH_SCRIPT = TORCH_SCRIPT.replace(_TREE_SLOT, TREE_CHECKS)

JAX_SCRIPT = textwrap.dedent(
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("torch is importable in the JAX-only venv")

    import array_api_compat
    import jax
    import jax.numpy as jnp
    import optax

    import anyclip.optax as ao

    f32 = jnp.float32


    def close(t, expected, dtype=f32, shape=None, rel_tol=2e-7):
        assert isinstance(t, jax.Array), type(t)
        assert array_api_compat.array_namespace(t) is jnp, array_api_compat.array_namespace(t)
        assert t.dtype == dtype, (t.dtype, dtype)
        if shape is not None:
            assert t.shape == shape, (t.shape, shape)
        same_values(t.tolist(), expected, rel_tol)


    v = jnp.array([3.0, 4.0], dtype=f32)  # norm 5
    b = jnp.array([[12.0]], dtype=f32)  # with v: global norm 13
    m = jnp.array([[3.0, 4.0], [6.0, 8.0]], dtype=f32)  # row norms 5 and 10
    s = jnp.array([3.0, -4.0], dtype=f32)

    # ------------------------------------------------------------- the functions
    close(anyclip.clip_by_value(v, 3.5, 3.75), [3.5, 3.75], shape=(2,))
    # 3.5 and 3.75 are exact in bfloat16: the dtype is kept, the values too
    close(anyclip.clip_by_value(v.astype(jnp.bfloat16), 3.5, 3.75), [3.5, 3.75], jnp.bfloat16)
    close(anyclip.clip_by_norm(v, 1.0), [0.6, 0.8], shape=(2,))
    close(anyclip.clip_by_norm(v, 10.0), [3.0, 4.0])
    close(anyclip.clip_by_norm(m, 5.0, axes=1), [[3.0, 4.0], [3.0, 4.0]], shape=(2, 2))
    # float16 stays float16: within one float16 ULP (2**-11 at 0.6)
    close(anyclip.clip_by_norm(v.astype(jnp.float16), 1.0), [0.6, 0.8], jnp.float16, rel_tol=1e-3)
    close(anyclip.global_norm([v, None, b]), 13.0, shape=())
    clipped, n = anyclip.clip_by_global_norm([v, None, b], 6.5)
    close(clipped[0], [1.5, 2.0], shape=(2,))
    assert clipped[1] is None
    close(clipped[2], [[6.0]], shape=(1, 1))
    close(n, 13.0, shape=())
    # average norm 5 / 2 = 2.5 > 1: scaled by 1 / 2.5
    close(anyclip.clip_by_average_norm(v, 1.0), [1.2, 1.6])
    u = jnp.array([3.0, -4.0, 0.0, 12.0], dtype=f32)
    close(anyclip.norm(u), 13.0, shape=())
    close(anyclip.norm(u, ord=1), 19.0)
    close(anyclip.norm(u, ord=math.inf), 12.0)
    close(anyclip.norm(jnp.array([[1.0, -2.0], [3.0, 4.0]]), ord=1, axis=(0, 1)), 6.0, shape=())
    close(anyclip.norm(m, axis=1, keepdims=True), [[5.0], [10.0]], shape=(2, 1))
    close(anyclip.l2_normalize(v), [0.6, 0.8])
    close(anyclip.l2_normalize(m, axis=1), [[0.6, 0.8], [0.6, 0.8]], shape=(2, 2))
    normalized, n = anyclip.normalize(v)
    close(normalized, [0.6, 0.8])
    close(n, [5.0], shape=(1,))
    try:
        anyclip.clip_by_average_norm(v.astype(jnp.float16), 1.0)
    except TypeError as exc:
        assert "float32" in str(exc), exc
    else:
        raise AssertionError("clip_by_average_norm accepted float16")

    # under jax.jit, and jax.grad: d/dx sqrt(sum(x**2)) = x / 5 at (3, 4)
    clipped, n = jax.jit(lambda x: anyclip.clip_by_global_norm([x], 1.0))(v)
    close(clipped[0], [0.6, 0.8])
    close(n, 5.0)
    close(jax.grad(lambda x: anyclip.global_norm([x]))(v), [0.6, 0.8])

    # --------- no array at all: NumPy (which JAX requires) builds it, as the docs say
    import numpy as np

    def numpy_zero(z):
        assert type(z) is np.ndarray, type(z)
        assert z.dtype == np.float32 and z.shape == (), (z.dtype, z.shape)
        assert float(z) == 0.0, z

    numpy_zero(anyclip.global_norm([]))
    out, n = anyclip.clip_by_global_norm([], 1.0)
    assert out == [], out
    numpy_zero(n)
    numpy_zero(anyclip.global_norm([None, None]))
    out, n = anyclip.clip_by_global_norm([None], 1.0)
    assert out == [None], out
    numpy_zero(n)
    numpy_zero(anyclip.tree.global_norm({"a": None, "b": [None]}))

    # @TREE_CHECKS@
    out, n = jax.jit(lambda t: anyclip.tree.clip_by_global_norm(t, 6.5))({"w": v, "b": b})
    close(out["w"], [1.5, 2.0])
    close(n, 13.0)

    # --------------------------------------------------------------- anyclip.optax
    updates = {"w": v, "b": b}
    for tx in (
        ao.clip_by_global_norm(6.5),
        ao.clip_by_global_norm(max_norm=6.5),
        ao.clip_by_global_norm(clip_norm=6.5),
        ao.keras_clipping(global_clipnorm=6.5),
    ):
        state = tx.init(updates)
        assert state == optax.EmptyState(), state  # optax's own state
        out, state = tx.update(updates, state)
        close(out["w"], [1.5, 2.0])
        close(out["b"], [[6.0]], shape=(1, 1))
        out, _ = jax.jit(tx.update)(updates, state)
        close(out["w"], [1.5, 2.0])
    tx = ao.clip_by_global_norm(6.5, norm_in_state=True)
    out, state = tx.update(updates, tx.init(updates))
    close(out["w"], [1.5, 2.0])
    close(state.global_norm, 13.0, shape=())
    # max_norm=inf: unchanged, as optax's
    tx = ao.clip_by_global_norm(math.inf)
    close(tx.update(updates, tx.init(updates))[0]["w"], [3.0, 4.0])
    try:
        ao.clip_by_global_norm(1.0, clip_norm=1.0)
    except TypeError as exc:
        assert "max_norm" in str(exc) and "clip_norm" in str(exc), exc
    else:
        raise AssertionError("clip_by_global_norm took both max_norm and clip_norm")
    # SGD with lr 1 moves the parameters by minus the clipped update
    tx = optax.chain(ao.clip_by_global_norm(max_norm=1.0), optax.sgd(1.0))
    params = {"w": jnp.zeros(2, f32)}
    out, _ = tx.update({"w": v}, tx.init(params), params)
    close(optax.apply_updates(params, out)["w"], [-0.6, -0.8])
    # keras_clipping: clipnorm is per leaf, clipvalue symmetric, no option clips nothing
    tx = ao.keras_clipping(clipnorm=1.0)
    out, _ = tx.update(updates, tx.init(updates))
    close(out["w"], [0.6, 0.8])
    close(out["b"], [[1.0]])
    tx = ao.keras_clipping(clipvalue=0.7)
    close(tx.update([s], tx.init([s]))[0][0], [0.7, -0.7])
    tx = ao.keras_clipping()
    close(tx.update([s], tx.init([s]))[0][0], [3.0, -4.0])
    try:
        ao.keras_clipping(clipnorm=1.0, clipvalue=1.0)
    except ValueError:
        pass
    else:
        raise AssertionError("keras_clipping took two options")
    tx = ao.clip_by_norm(1.0)
    close(tx.update([v], tx.init([v]))[0][0], [0.6, 0.8])
    tx = ao.clip_by_value(-1.0, 2.0)
    close(tx.update([s], tx.init([s]))[0][0], [2.0, -1.0])
    tx = ao.clip(0.7)
    close(tx.update([s], tx.init([s]))[0][0], [0.7, -0.7])

    assert "torch" not in loaded(), sorted(loaded())
    print("ok")
    """
)
JAX_SCRIPT = JAX_SCRIPT.replace(_TREE_SLOT, TREE_CHECKS)


@dataclass(frozen=True)
class Install:
    """A single-framework install: what goes in, what must stay out, what runs there."""

    name: str
    #: Requirements, each pinned by ``constraints.txt``.
    requirements: tuple[str, ...]
    #: Distributions the venv must not have.
    absent: tuple[str, ...]
    #: Run after :data:`PRELUDE`; prints ``ok`` last.
    script: str
    #: A docs example runs here when it imports one of these and none of ``others``.
    frameworks: tuple[str, ...]
    others: tuple[str, ...]
    #: Interpreter options for the docs' examples.
    flags: tuple[str, ...] = ()


TORCH_ONLY = Install(
    name="torch-only",
    requirements=("torch",),
    absent=("numpy",),
    script=TORCH_SCRIPT,
    frameworks=("torch",),
    others=("numpy", "jax", "optax", "dask", "array_api_strict", "cupy"),
    flags=("-W", "ignore:Failed to initialize NumPy"),
)
JAX_ONLY = Install(
    name="jax-only",
    requirements=("jax", "jaxlib", "optax"),
    absent=("torch", "dask"),
    script=JAX_SCRIPT,
    frameworks=("jax", "optax"),
    others=("numpy", "torch", "dask", "array_api_strict", "cupy"),
)
INSTALLS = (TORCH_ONLY, JAX_ONLY)


def _run(*args: str | Path, timeout: int = 300, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )


def _unavailable(label: str, why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the {label} venv could not be built on CI: {why}")
    pytest.skip(f"the {label} venv could not be built here: {why}")


def _outer_pip() -> tuple[str, ...] | None:
    """This environment's pip, when it can install into another interpreter's environment.

    pip 22.3 and later take ``--python``: the venvs are then made without pip of their own
    (``ensurepip`` took 8 s of each venv's build on a loaded 2-core machine) and hold only
    what is installed in them. None where pip is missing or older.
    """
    try:
        version = importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        return None
    parts = [int(part) for part in re.findall(r"\d+", version)[:2]]
    return (sys.executable, "-m", "pip") if parts >= [22, 3] else None


def build_venv(
    env_dir: Path, requirements: Sequence[str], absent: Sequence[str], *, label: str
) -> Path:
    """A fresh venv at ``env_dir`` with ``requirements`` and anyclip from this tree.

    Each requirement is a bare name that ``constraints.txt`` pins; they are installed through
    it with their own dependencies, together with anyclip's runtime dependencies and build
    backend, then anyclip without dependencies. Checks that every requirement and anyclip are
    installed and nothing of ``absent`` is. Skips (fails under ``CI=true``) when the venv or
    the requirements cannot be installed; ``label`` names the install in the messages.
    Returns the venv's interpreter.
    """
    pins = CONSTRAINTS.read_text(encoding="utf-8")
    for requirement in requirements:
        assert re.search(rf"^{re.escape(requirement)}==\S", pins, re.M), (
            f"{requirement} is not pinned in constraints.txt: add `{requirement}==<version>`"
        )
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    outer_pip = _outer_pip()
    try:
        venv.create(env_dir, with_pip=outer_pip is None)
    except (OSError, subprocess.CalledProcessError) as exc:
        _unavailable(label, f"python -m venv failed: {exc}")
    pip = (python, "-m", "pip") if outer_pip is None else (*outer_pip, "--python", python)
    install = (*pip, "install", "--quiet", "--disable-pip-version-check", "--no-compile")
    wanted = (*requirements, *RUNTIME, *BUILD)
    done = _run(*install, "-c", CONSTRAINTS, *wanted, timeout=600)
    if done.returncode != 0:
        _unavailable(label, f"pip install {' '.join(wanted)} failed:\n{done.stderr[-2000:]}")
    done = _run(*install, "--no-deps", "--no-build-isolation", ROOT)
    assert done.returncode == 0, f"pip install of anyclip failed:\n{done.stderr[-3000:]}"
    listed = _run(*pip, "list", "--format=freeze")
    names = {_name(line) for line in listed.stdout.splitlines() if line.strip()}
    assert not names & set(absent), f"the {label} venv has {sorted(names & set(absent))}"
    expected = {_name(r) for r in (*requirements, *RUNTIME)} | {"anyclip"}
    assert expected <= names, f"the {label} venv lacks {sorted(expected - names)}"
    return python


def run_in(
    python: Path, script: Path, *flags: str, args: Sequence[str | Path] = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with ``python`` in the script's folder, with nothing of ours on the path.

    The folder is outside the checkout (a pytest ``tmp_path``), so the installed anyclip is the
    one imported.
    """
    return _run(python, *flags, script, *args, cwd=script.parent, env=venv_env())


def venv_env() -> dict[str, str]:
    """The environment a venv's interpreter runs in: this one, without our paths.

    It may write bytecode: the venvs are installed without it (``pip install --no-compile``;
    compiling all of torch took most of its install), so the first interpreter compiles what
    it imports, once, for the next (with ``PYTHONDONTWRITEBYTECODE``, which CI may set, each
    ``import torch`` compiled it again: 2.8 s, not 2.2 s).
    """
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="module", params=INSTALLS, ids=lambda install: install.name)
def install(request) -> Install:
    return request.param


@pytest.fixture(scope="module")
def python(install, tmp_path_factory) -> Path:
    """The interpreter of a fresh venv holding ``install``."""
    env_dir = tmp_path_factory.mktemp(install.name) / "venv"
    return build_venv(env_dir, install.requirements, install.absent, label=install.name)


def test_single_framework_install(install, python, tmp_path):
    script = tmp_path / f"{install.name}.py"
    script.write_text(PRELUDE + install.script, encoding="utf-8")
    done = run_in(python, script)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert done.stdout.strip().endswith("ok"), done.stdout


def _blocks(install: Install) -> list[pytest.param]:
    """The docs' runnable blocks that import one of ``install.frameworks`` and no other."""

    def imports(modules: Sequence[str]) -> re.Pattern[str]:
        return re.compile(rf"^\s*(import|from) ({'|'.join(modules)})\b", re.M)

    ours, other = imports(install.frameworks), imports(install.others)
    return [
        pytest.param(code, id=f"{page.name}:{line}")
        for page in DOCS.PAGES
        for line, code in DOCS.python_blocks(page)
        if not DOCS.is_tf_reference(code) and ours.search(code) and not other.search(code)
    ]


def test_docs_examples_run_on_single_framework_install(install, python, tmp_path):
    """The docs' blocks for this framework print what their ``# ->`` comments say, in the venv.

    All in one interpreter of the venv, which imports the framework once (one interpreter per
    block, 28 torch imports, took 87 s of the torch-only install's run): the runner of
    ``tests/test_docs.py``'s torch.distributed blocks (``tests/conftest.py``'s
    ``DocsBlockRunner``), each block in fresh globals, its stdout captured, torch's print
    options reset after it, bounded in time; its file is copied outside the checkout and run
    with nothing of ours on the path, so the installed anyclip is the one imported.
    """
    blocks = _blocks(install)
    assert len(blocks) >= 10, f"fewer {install.name} examples than expected in the docs"
    script = tmp_path / DOCS_RUNNER.name
    shutil.copyfile(DOCS_RUNNER, script)
    runner = DocsBlockRunner(
        python, tmp_path, script=script, flags=install.flags, cwd=tmp_path, env=venv_env()
    )
    failures = []
    try:
        for block in blocks:
            (code,) = block.values
            expected = [
                m.group(1).rstrip() for m in map(DOCS._EXPECTED.search, code.splitlines()) if m
            ]
            try:
                printed = [line.rstrip() for line in runner.run(block.id, code)]
            except DocsBlockTimeout as exc:  # the blocks after it are not run
                failures.append(f"{exc}\n(the blocks after it were not run)")
                break
            except DocsBlockFailed as exc:
                failures.append(str(exc)[-1500:])
                continue
            if printed != expected:
                failures.append(f"{block.id}: prints {printed}, its `# ->` comments say {expected}")
    finally:
        runner.close()
    assert not failures, f"{install.name}:\n" + "\n\n".join(failures)
