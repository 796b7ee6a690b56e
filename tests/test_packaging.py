"""The release artefacts: the sdist and wheel that ``python -m build`` makes, the installed wheel.

``python -m build`` builds the sdist from the checkout and the wheel from that sdist, so a file
missing from the sdist is missing from the wheel too. Both must carry the Apache-2.0
``LICENSE``; the wheel must hold the package with ``py.typed`` and no test-support module; and
the wheel, installed with pip, must give ``python -m anyclip --version``. The build uses the
running environment's setuptools (``--no-isolation``), so it needs no network.

The sdist also carries its tests (``MANIFEST.in``): unpacked, ``pytest`` collects every test
there, with this environment's ``anyclip-conformance`` (which provides the fixtures plugin) and
the unpacked ``src`` on the path, and runs a sample of them: one test of every test module and
of every module with docstring examples, the one that looks cheapest by its marks, fixtures and
backend (see ``_SAMPLE_PLUGIN``). Collecting imports every module (what a module reads at import
must be there); the sample runs one test of each module with its fixtures and helpers (what they
read and start must be there); the files the other tests read or start are checked by name
(:data:`TEST_INPUTS` and every ``tests/*.py``). The whole suite again on NumPy (276 s on two
cores) checked nothing more about the sdist than that. Run from an unpacked sdist (``PKG-INFO``
at the root), that test skips itself rather than build and test a copy of itself again.

``python -m build`` here and ``pip install`` of the checkout in
``tests/test_single_framework_installs.py`` write ``build/`` and ``src/anyclip.egg-info`` in the
checkout: both modules are in one pytest-xdist group, so that two workers never build there at
once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

#: One xdist worker runs this module and tests/test_single_framework_installs.py (see above).
pytestmark = pytest.mark.xdist_group("checkout-build")

ROOT = Path(__file__).resolve().parent.parent
VERSION = re.search(
    r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M
).group(1)  # type: ignore[union-attr]
PIP_INSTALL = (sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index")
#: Modules that serve the tests and the conformance report, not users: not in the wheel.
TEST_SUPPORT = ("anyclip/_testing.py", "anyclip/_report.py")
#: What the tests read besides ``tests/`` and ``src/``: the sdist must carry it.
TEST_INPUTS = (
    "conftest.py",
    "constraints.txt",
    "mkdocs.yml",
    "tests/conftest.py",
    "tests/data/keras_clipping.npz",
    "tests/data/sparse.npz",
    "tests/data/zclip.npz",
    "tests/data/autoclip.npz",
    "tests/data/skip_step.npz",
    "docs/porting.md",
    "examples/torch_tf1_style.py",
    "benchmarks/workloads.py",
)
#: An unpacked sdist has PKG-INFO at its root; a checkout does not.
IN_SDIST = (ROOT / "PKG-INFO").is_file()


def imported_anyclip(cwd: Path, env: dict[str, str]) -> Path:
    """The file ``import anyclip`` loads in a fresh interpreter run in ``cwd`` with ``env``."""
    done = subprocess.run(
        [sys.executable, "-c", "import anyclip; print(anyclip.__file__)"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return Path(done.stdout.strip())


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    pytest.importorskip("build", reason="the test extra's `build` package")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"python -m build failed:\n{done.stdout[-3000:]}{done.stderr}"
    return out


@pytest.fixture(scope="module")
def wheel_names(dist) -> list[str]:
    (wheel,) = dist.glob(f"anyclip-{VERSION}-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


@pytest.fixture(scope="module")
def sdist_names(dist) -> list[str]:
    (sdist,) = dist.glob(f"anyclip-{VERSION}.tar.gz")
    with tarfile.open(sdist) as tf:
        return [name.split("/", 1)[1] for name in tf.getnames() if "/" in name]


def test_sdist_has_the_license_and_the_sources(sdist_names):
    for name in ("LICENSE", "README.md", "pyproject.toml", "src/anyclip/py.typed"):
        assert name in sdist_names, f"the sdist lacks {name}"
    assert "src/anyclip/__init__.py" in sdist_names


def test_sdist_has_what_its_tests_read(sdist_names):
    missing = [name for name in TEST_INPUTS if name not in sdist_names]
    assert not missing, f"the sdist lacks {missing}: see MANIFEST.in"
    checkout = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("*.py")}
    assert checkout <= set(sdist_names), sorted(checkout - set(sdist_names))
    docs = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert docs <= set(sdist_names), sorted(docs - set(sdist_names))
    # the conformance suite is its own distribution; no byte code either
    assert not [n for n in sdist_names if n.startswith("conformance/") or "__pycache__" in n]


def test_wheel_has_the_license(wheel_names, dist):
    info = f"anyclip-{VERSION}.dist-info"
    assert f"{info}/licenses/LICENSE" in wheel_names, sorted(wheel_names)
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(f"{info}/METADATA").decode()
        shipped = zf.read(f"{info}/licenses/LICENSE").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "License-File: LICENSE" in metadata
    assert shipped == (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in shipped and "Version 2.0, January 2004" in shipped


def test_wheel_has_the_package_and_py_typed(wheel_names):
    for module in ("__init__", "__main__", "tree", "torch/__init__", "optax/__init__"):
        assert f"anyclip/{module}.py" in wheel_names
    assert "anyclip/py.typed" in wheel_names
    assert not [n for n in wheel_names if n.startswith(("tests/", "conformance/", "docs/"))]


def test_wheel_has_no_test_support_modules(wheel_names):
    shipped = [name for name in TEST_SUPPORT if name in wheel_names]
    assert not shipped, f"the wheel ships test support: {shipped}"


def test_installed_wheel_has_license_and_version(dist, tmp_path):
    (wheel,) = dist.glob("*.whl")
    target = tmp_path / "site"
    done = subprocess.run(
        [*PIP_INSTALL, "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    licenses = list(target.glob("anyclip-*.dist-info/licenses/LICENSE"))
    assert len(licenses) == 1, sorted(p.name for p in target.iterdir())
    # only the installed copy on the path (array-api-compat comes from this environment)
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run(
        [sys.executable, "-m", "anyclip", "--version"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"anyclip {VERSION}"
    assert imported_anyclip(tmp_path, env).is_relative_to(target)


def readme_quickstart() -> tuple[str, str, list[str]]:
    """The README's first ``sh`` block, first ``python`` block and that block's ``# ->`` output."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    sh = re.search(r"^```sh\n(.*?)^```", text, re.M | re.S)
    py = re.search(r"^```python\n(.*?)^```", text, re.M | re.S)
    assert sh is not None and py is not None
    assert sh.start() < py.start() < text.index("\n## "), "the pip quickstart opens the README"
    expected = [m.group(1) for m in re.finditer(r"#\s*->\s?(.*)$", py.group(1), re.M)]
    return sh.group(1), py.group(1), expected


def test_readme_pip_quickstart_names_real_extras():
    command, _, _ = readme_quickstart()
    extras_text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extras = set(
        re.findall(r"^(\w+) = \[", extras_text.split("[project.optional-dependencies]")[1], re.M)
    )
    assert "all" in extras
    (line,) = command.strip().splitlines()
    match = re.fullmatch(r'pip install "anyclip\[(\w+)\]"', line.strip())
    assert match is not None, line
    assert match.group(1) in extras


def test_readme_first_call_runs_on_the_installed_wheel(dist, tmp_path):
    # the README's pip quickstart, in a fresh interpreter that sees only the installed wheel of
    # anyclip (its dependencies, array-api-compat and torch, come from this environment)
    pytest.importorskip("torch")
    _, code, expected = readme_quickstart()
    (wheel,) = dist.glob("*.whl")
    target = tmp_path / "site"
    done = subprocess.run(
        [*PIP_INSTALL, "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PYTHONPATH": str(target)}
    assert imported_anyclip(tmp_path, env).is_relative_to(target)
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected
    assert done.stderr == ""


#: A pytest plugin for the unpacked sdist's run: it writes every collected test id to
#: ``$ANYCLIP_SDIST_COLLECTED`` and keeps one test of each module, the first of those that
#: look cheapest by ``sample_key``, so that one run both lists what the sdist collects and runs
#: the sample (one collection, not two: the sdist collects some 20,700 test ids, its tests
#: and docstring examples). The key, from what collection knows (marks, fixtures,
#: parameters; no timings), in order:
#:
#: 1. no ``skip``/``skipif``/``xfail``/``xfail_backend`` mark (a test that skips somewhere
#:    shows there only that its module imports; a ``live_tf`` test carries ``skip`` without
#:    ``--live-tf``);
#: 2. the fewest fixtures to set up: those in ``fixturenames`` that are not its parameters
#:    (a parameter costs nothing; a fixture may start a gloo world, the demo, a fake device's
#:    run);
#: 3. its backend: NumPy, then another CPU backend (one eager call per check), then none
#:    (this suite's tests without a backend include its fresh-interpreter ones: the torch
#:    peak-memory benchmark, the first ``torch.compile`` in a new process, JAX without x64),
#:    then a GPU backend (it skips without its device and starts the device where it is);
#: 4. collection order.
_SAMPLE_PLUGIN = """
import os
from pathlib import Path

import pytest

CONDITIONAL = ("skip", "skipif", "xfail", "xfail_backend")
GPU_BACKENDS = ("torch-cuda", "jax-gpu", "cupy")


def sample_key(item):
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    conditional = any(item.get_closest_marker(name) for name in CONDITIONAL)
    setup = [name for name in item.fixturenames if name not in params and name != "request"]
    backend = params.get("backend", params.get("grad_backend"))
    if backend is None:
        rank = 2
    else:
        rank = 0 if backend == "numpy" else 3 if backend in GPU_BACKENDS else 1
    return (conditional, len(setup), rank)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    Path(os.environ["ANYCLIP_SDIST_COLLECTED"]).write_text(
        "".join(item.nodeid + "\\n" for item in items), encoding="utf-8"
    )
    chosen = {}
    for item in items:  # the first of the least keys: deterministic for one collection
        module = item.nodeid.split("::")[0]
        best = chosen.get(module)
        if best is None or sample_key(item) < sample_key(best):
            chosen[module] = item
    keep = set(map(id, chosen.values()))
    config.hook.pytest_deselected(items=[i for i in items if id(i) not in keep])
    items[:] = [i for i in items if id(i) in keep]
"""


def test_unpacked_sdist_collects_its_tests_and_passes_a_sample(dist, tmp_path):
    if IN_SDIST:
        pytest.skip("running from an unpacked sdist already: not building and testing it again")
    pytest.importorskip("anyclip_conformance", reason="the anyclip-conformance distribution")
    (sdist,) = dist.glob(f"anyclip-{VERSION}.tar.gz")
    with tarfile.open(sdist) as tf:
        if hasattr(tarfile, "data_filter"):
            tf.extractall(tmp_path, filter="data")
        else:  # Python < 3.10.12 / 3.11.4: our own sdist, just built
            tf.extractall(tmp_path)
    tree = tmp_path / f"anyclip-{VERSION}"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "anyclip_sdist_sample.py").write_text(_SAMPLE_PLUGIN, encoding="utf-8")
    collected = tmp_path / "collected.txt"
    # the unpacked src first, so it is what `import anyclip` finds; the rest of the path keeps
    # this environment's anyclip_conformance
    path = [str(tree / "src"), str(plugins), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    env["ANYCLIP_SDIST_COLLECTED"] = str(collected)
    env.pop("ANYCLIP_REQUIRE_BACKENDS", None)  # a sample, not the backends' full check
    located = imported_anyclip(tree, env)
    assert located.is_relative_to(tree / "src"), located
    # plain `pytest`: the configured testpaths, the docstring examples in src/anyclip and tests/
    # (conformance/ is not in the sdist); the plugin keeps one test of each module
    pytest_in_tree = (
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "anyclip_sdist_sample",
        # the outer run builds the single-framework venvs already
        "--ignore=tests/test_single_framework_installs.py",
        "-q",
    )
    run = {"cwd": tree, "env": env, "capture_output": True, "text": True, "check": False}
    done = subprocess.run(pytest_in_tree, timeout=900, **run)
    assert collected.is_file(), f"pytest cannot collect the unpacked sdist:\n{done.stdout[-6000:]}"
    ids = collected.read_text(encoding="utf-8").splitlines()
    modules = {node.split("::")[0] for node in ids}
    checkout = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("test_*.py")}
    missing = checkout - modules - {"tests/test_single_framework_installs.py"}
    assert not missing, f"the unpacked sdist collects no test of {sorted(missing)}"
    assert any(m.startswith("src/anyclip/") for m in modules), "no docstring example collected"
    summary = done.stdout.splitlines()[-1] if done.stdout else ""
    assert done.returncode == 0, f"pytest in the unpacked sdist failed:\n{done.stdout[-6000:]}"
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|skipped|xfailed)", summary)}
    assert sum(counts.values()) == len(modules), f"{len(modules)} tests chosen, ran: {summary}"
    assert counts.get("passed", 0) > len(modules) // 2, summary
