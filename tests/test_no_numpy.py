"""A real torch-only install: a fresh venv with torch and anyclip and no NumPy at all.

``tests/test_porting.py`` simulates the missing NumPy by blocking its import; this test builds
the install a torch-only user has. It creates a venv (``python -m venv``, not
``--system-site-packages``, which would see this environment's NumPy), installs torch at the
version ``constraints.txt`` pins (torch requires no NumPy) with its own pure-Python
dependencies and array-api-compat, then anyclip from this tree without its dependencies, and
runs :data:`SCRIPT` there: ``import numpy`` must fail, and every public function, ``anyclip.tree``
and the ``anyclip.torch`` adapters must give hand-derived values on torch tensors, including a
call with no array at all (documented to build its result with torch when NumPy is absent).
The docs' examples that use torch and no other framework must run there too and print what
their ``# ->`` comments say.

Building the venv takes about 35 s on two cores with the torch wheel already on the machine,
running the docs' torch examples in it about 40 s more.
Where it cannot be built (no package index, no torch wheel) the test is a visible SKIP, and a
failure under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_PIN = re.search(r"^torch==(\S+)", (ROOT / "constraints.txt").read_text(encoding="utf-8"), re.M)
TORCH = _PIN.group(1) if _PIN else "2.13.0"


def _load_test_docs():
    """``tests/test_docs.py``, for its block parser (tests are not importable by name here)."""
    spec = importlib.util.spec_from_file_location(
        "_anyclip_test_docs", ROOT / "tests" / "test_docs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DOCS = _load_test_docs()

SCRIPT = textwrap.dedent(
    """
    import math
    import subprocess
    import sys
    import warnings

    warnings.simplefilter("error")
    # torch's own import warns once that it found no NumPy: that is the point here
    warnings.filterwarnings("ignore", "Failed to initialize NumPy", UserWarning)

    try:
        import numpy  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("numpy is importable in the torch-only venv")

    import torch

    import anyclip
    import anyclip.torch as at
    import anyclip.tree

    assert anyclip.__file__.startswith(sys.prefix), anyclip.__file__  # the installed copy


    def flat(values):
        if isinstance(values, (list, tuple)):
            return [x for v in values for x in flat(v)]
        return [float(values)]


    def close(t, expected, dtype=torch.float32, shape=None):
        assert isinstance(t, torch.Tensor), type(t)
        assert t.dtype == dtype, (t.dtype, dtype)
        if shape is not None:
            assert tuple(t.shape) == shape, (tuple(t.shape), shape)
        got, want = flat(t.tolist()), flat(expected)
        assert len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert math.isclose(g, w, rel_tol=2e-7, abs_tol=1e-30), (got, want)


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

    # ---------------------------------------------------------------- anyclip.tree
    tree = {"w": v, "b": (b, None)}
    leaves, rebuild = anyclip.tree.flatten(tree)
    assert len([x for x in leaves if x is not None]) == 2
    assert rebuild(leaves)["w"] is v
    close(anyclip.tree.map_leaves(lambda x: x * 2, tree)["w"], [6.0, 8.0])
    close(anyclip.tree.global_norm(tree), 13.0)
    out, n = anyclip.tree.clip_by_global_norm(tree, 6.5)
    close(out["w"], [1.5, 2.0])
    close(out["b"][0], [[6.0]])
    assert out["b"][1] is None
    close(n, 13.0)
    out = anyclip.tree.clip_by_norm(tree, 1.0)
    close(out["w"], [0.6, 0.8])
    close(out["b"][0], [[1.0]])
    out = anyclip.tree.clip_by_value(tree, 0.0, 3.5)
    close(out["w"], [3.0, 3.5])
    close(out["b"][0], [[3.5]])
    close(anyclip.tree.clip_by_average_norm({"w": v}, 1.0)["w"], [1.2, 1.6])

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

    # -------------------------------------------------------------- the CLI helper
    done = subprocess.run(
        [sys.executable, "-m", "anyclip", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.startswith("anyclip "), done

    loaded = {name.split(".")[0] for name, mod in sys.modules.items() if mod is not None}
    assert "numpy" not in loaded, sorted(loaded)
    print("ok")
    """
)


def _run(*args: str | Path, timeout: int = 300, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the torch-only venv could not be built on CI: {why}")
    pytest.skip(f"the torch-only venv could not be built here: {why}")


@pytest.fixture(scope="module")
def torch_only_python(tmp_path_factory) -> Path:
    """The interpreter of a fresh venv holding torch, array-api-compat and anyclip, no NumPy."""
    env_dir = tmp_path_factory.mktemp("torch-only") / "venv"
    try:
        venv.create(env_dir, with_pip=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        _unavailable(f"python -m venv failed: {exc}")
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    pip = (python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    done = _run(*pip, f"torch=={TORCH}", "array-api-compat>=1.11", timeout=600)
    if done.returncode != 0:
        _unavailable(f"pip install torch=={TORCH} failed:\n{done.stderr[-2000:]}")
    # anyclip itself must install (its build needs setuptools, which torch brings)
    done = _run(*pip, "--no-deps", "--no-build-isolation", ROOT)
    assert done.returncode == 0, f"pip install of anyclip failed:\n{done.stderr[-3000:]}"
    listed = _run(python, "-m", "pip", "list", "--format=freeze")
    names = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert "numpy" not in names, f"the torch-only venv has NumPy: {sorted(names)}"
    assert {"torch", "anyclip", "array-api-compat"} <= names, sorted(names)
    return python


def test_torch_only_install_needs_no_numpy(torch_only_python, tmp_path):
    script = tmp_path / "torch_only.py"
    script.write_text(SCRIPT, encoding="utf-8")
    # outside the checkout, with nothing of this environment on the path
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = _run(torch_only_python, script, cwd=tmp_path, env=env)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert done.stdout.strip().endswith("ok"), done.stdout


def _torch_blocks() -> list[pytest.param]:
    """The docs' runnable blocks that import torch and neither NumPy, JAX nor optax."""
    other = re.compile(r"^\s*(import|from) (numpy|jax|optax)\b", re.M)
    return [
        pytest.param(code, id=f"{page.name}:{line}")
        for page in DOCS.PAGES
        for line, code in DOCS.python_blocks(page)
        if not DOCS.is_tf_reference(code) and "import torch" in code and not other.search(code)
    ]


def test_docs_torch_examples_need_no_numpy(torch_only_python, tmp_path):
    blocks = _torch_blocks()
    assert len(blocks) >= 10, "fewer torch examples than expected in the docs"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    failures = []
    for block in blocks:
        (code,) = block.values
        script = tmp_path / "block.py"
        script.write_text(code, encoding="utf-8")
        expected = [m.group(1).rstrip() for m in map(DOCS._EXPECTED.search, code.splitlines()) if m]
        done = _run(
            torch_only_python,
            "-W",
            "ignore:Failed to initialize NumPy",
            script,
            cwd=tmp_path,
            env=env,
        )
        printed = [line.rstrip() for line in done.stdout.splitlines()]
        if done.returncode != 0 or printed != expected:
            failures.append(f"{block.id}: {done.stderr[-1500:] or printed}")
    assert not failures, "\n\n".join(failures)
