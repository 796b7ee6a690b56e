"""The release artefacts: the sdist and wheel that ``python -m build`` makes, the installed wheel.

``python -m build`` builds the sdist from the checkout and the wheel from that sdist, so a file
missing from the sdist is missing from the wheel too. Both must carry the Apache-2.0
``LICENSE``; the wheel must hold the package with ``py.typed`` and no test-support module; and
the wheel, installed with pip, must give ``python -m anyclip --version``. The build uses the
running environment's setuptools (``--no-isolation``), so it needs no network.
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

ROOT = Path(__file__).resolve().parent.parent
VERSION = re.search(
    r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M
).group(1)  # type: ignore[union-attr]
PIP_INSTALL = (sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index")
#: Modules that serve the tests and the conformance report, not users: not in the wheel.
TEST_SUPPORT = ("anyclip/_testing.py", "anyclip/_report.py")


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
    for module in ("__init__", "__main__", "tree", "torch", "optax"):
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
    located = subprocess.run(
        [sys.executable, "-c", "import anyclip; print(anyclip.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert Path(located.stdout.strip()).is_relative_to(target)
