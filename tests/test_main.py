"""``python -m anyclip``: the demo, ``--version``, ``--help`` and the ``conformance`` pointer.

The demo runs in a subprocess, as ``make demo`` runs it, from an empty working directory that
must still be empty afterwards (the demo writes no files), and with nothing on stderr (no
warning). How long it takes is not asserted (it depends on the machine's load):
``benchmarks/demo.py`` times it; the subprocess is only bounded, so that a hang fails. The
numbers it shows are checked against TensorFlow 2.21's, which were measured with TF on CPU
and are the ones the README quotes (hand-checked where the arithmetic is simple:
``clip_by_global_norm`` of ``[3, 4]`` and ``[12]`` at 6.5 is ``[1.5, 2]``, ``[6]``), never
against anyclip's own output. The look-alike functions' numbers are checked against what those
functions give when called here directly.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import jax_divides_exactly

#: One pytest-xdist worker runs this module: the demo (module-scoped ``demo``) runs once.
pytestmark = pytest.mark.xdist_group("main")

ROOT = Path(__file__).resolve().parent.parent
_NUMBER = re.compile(r"-?(?:nan|inf|\d+\.?\d*(?:e[-+]?\d+)?)")


def run_anyclip(*args: str, cwd: Path, block: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``python -m anyclip *args`` on this checkout's source; ``block`` makes imports fail."""
    path = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    code = (
        "import sys\n"
        f"for name in {block!r}:\n"
        "    sys.modules[name] = None\n"
        "import runpy\n"
        "runpy.run_module('anyclip', run_name='__main__', alter_sys=True)\n"
    )
    command = (
        [sys.executable, "-m", "anyclip", *args] if not block else [sys.executable, "-c", code]
    )
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def numbers(text: str) -> list[float]:
    """Every number in ``text`` (nan and inf included), in order."""
    return [float(m) for m in _NUMBER.findall(text)]


def blocks(output: str) -> dict[str, dict[str, str]]:
    """The demo's output as {block header: {row label: rest of the row}}.

    A header is a line indented by two spaces; its rows are indented by four, with the label
    separated from the values by at least two spaces.
    """
    found: dict[str, dict[str, str]] = {}
    rows: dict[str, str] = {}
    for line in output.splitlines():
        if line.startswith("  ") and not line.startswith("   ") and line.strip():
            rows = found.setdefault(line.strip(), {})
        elif line.startswith("    ") and re.search(r"\S\s{2,}\S", line):
            label, rest = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            rows[label] = rest
    return found


def block(output: str, header_start: str) -> dict[str, str]:
    matches = [rows for header, rows in blocks(output).items() if header.startswith(header_start)]
    assert len(matches) == 1, f"no single block starting {header_start!r} in:\n{output}"
    return matches[0]


def assert_float32(shown: str, expected: list[float], what: str) -> None:
    """The numbers shown equal ``expected`` rounded to float32 (NaN equal to NaN)."""
    got = numbers(shown.split("(TF")[0].replace("float32", "").replace("float16", ""))
    want = np.asarray(expected, dtype=np.float32).ravel()
    assert len(got) == want.size, f"{what}: shows {shown!r}, expected {want}"
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float32), want, err_msg=what)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> str:
    cwd = tmp_path_factory.mktemp("demo-cwd")
    done = run_anyclip(cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert list(cwd.iterdir()) == [], "the demo wrote files"
    # clean output: no warning (dask's RuntimeWarning on inf - inf computed lazily leaked here)
    assert done.stderr == "", done.stderr
    return done.stdout


#: TF 2.21's result for each example of the demo's first part (header start -> values).
TF_EXAMPLES = {
    "clip_by_value([-2, 0.5, 3], -1, 1)": [-1.0, 0.5, 1.0],
    "clip_by_value([0, 5, 10], 6, 4)": [6.0, 6.0, 6.0],
    "clip_by_norm([3, 4], 1)": [0.6, 0.8],
    "clip_by_norm([3, 4], 5)": [3.0, 4.0],
    "global_norm([[3, 4], [12]])": [13.0],
    "clip_by_global_norm([[1, 2]], 41)": [0.99999994, 1.9999999],
    "clip_by_global_norm([[inf, 1]], 1)": [math.nan, math.nan],
    "clip_by_average_norm([3, 4], 1)": [1.2, 1.6],
    "norm([[1, -2], [3, 4]], ord=1)": [10.0],
    "l2_normalize([1e-7, 0])": [0.1, 0.0],
    "normalize([3, 4])": [0.6, 0.8],
}


# ------------------------------------------------------------------------------- the CLI
def test_version(tmp_path):
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None
    done = run_anyclip("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"anyclip {version.group(1)}"


def test_help_is_plain_text(tmp_path):
    done = run_anyclip("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m anyclip")
    assert "--version" in done.stdout
    for markup in ("``", ":func:", ":mod:", ".. "):
        assert markup not in done.stdout, f"--help shows RST markup {markup!r}:\n{done.stdout}"


def test_conformance_points_to_the_installed_suite(tmp_path):
    # the test environment has anyclip-conformance installed (the conftest imports it)
    done = run_anyclip("conformance", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    version = importlib.metadata.version("anyclip-conformance")
    assert f"anyclip-conformance {version} is installed" in done.stdout
    assert "python -m anyclip_conformance" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_conformance_says_how_to_install_the_suite(monkeypatch, capsys):
    import importlib.util

    from anyclip.__main__ import main

    real = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "anyclip_conformance" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert main(["conformance"]) == 2
    err = capsys.readouterr().err
    assert "not installed here" in err
    assert "pip install anyclip-conformance" in err


# ------------------------------------------------------------------------------ the demo
@pytest.mark.parametrize("header", TF_EXAMPLES)
def test_demo_shows_tf_values_on_every_backend(demo, header):
    rows = block(demo, header)
    assert_float32(rows["TF 2.21"], TF_EXAMPLES[header], f"{header}: TF row")
    backends = [label for label in rows if label != "TF 2.21"]
    assert "numpy" in backends
    for label in backends:
        assert_float32(rows[label], TF_EXAMPLES[header], f"{header} on {label}")


def test_demo_spectral_norm_is_within_a_few_ulp_of_tf(demo):
    rows = block(demo, "norm([[1, -2], [3, 4]], 2, axis=(0, 1))")
    tf_value = np.float32(5.1166735)  # TF 2.21 on CPU (its SVD); NumPy's is 5.1166725
    for label, shown in rows.items():
        (value,) = numbers(shown.replace("float32", ""))
        ulps = abs(float(np.float32(value)) - float(tf_value)) / float(np.spacing(tf_value))
        assert ulps <= 4, f"{label}: {value} is {ulps} ULP from TF's {tf_value}"


def test_demo_lists_every_backend(demo):
    for name in ("numpy", "torch", "jax", "array_api_strict", "cupy", "dask"):
        assert re.search(rf"^  {name}\s+(\S+\s+devices: |not installed: skipped)", demo, re.M), name


def test_demo_np_clip_and_linalg_norm_differ_from_tf(demo):
    rows = block(demo, "clip [0, 5, 10] to [6, 4]")
    assert_float32(rows["tf.clip_by_value([0, 5, 10], 6, 4)"], [6, 6, 6], "TF")
    assert_float32(rows["np.clip"], np.clip(np.array([0, 5, 10], np.float32), 6, 4), "np.clip")
    assert_float32(rows["anyclip.clip_by_value on numpy"], [6, 6, 6], "anyclip")

    rows = block(demo, "norm of the matrix")
    m = np.array([[1.0, -2.0], [3.0, 4.0]], dtype=np.float32)
    assert_float32(rows["tf.norm(m, ord)"], [10.0, 5.477226, 4.0], "TF")
    assert_float32(
        rows["np.linalg.norm"], [np.linalg.norm(m, o) for o in (1, 2, np.inf)], "np.linalg.norm"
    )
    assert_float32(rows["anyclip.norm on numpy"], [10.0, 5.477226, 4.0], "anyclip")


def test_demo_float16_overflow(demo):
    rows = block(demo, "the same with clip_by_norm")
    assert_float32(rows["tf.clip_by_norm([300, 0], 1)"], [0.0, 0.0], "TF")
    assert_float32(rows["anyclip.clip_by_norm"], [0.0, 0.0], "anyclip")
    # float32 accumulation is the exact norm 300, so the clipped gradient is [1, 0]
    assert_float32(rows['anyclip.clip_by_norm(accumulate_dtype="float32")'], [1.0, 0.0], "opt-in")


def test_demo_torch_look_alikes_differ_from_tf(demo):
    torch = pytest.importorskip("torch")

    def clip_grad_norm(grads, max_norm, dtype=torch.float32):
        params = [torch.nn.Parameter(torch.zeros(len(g), dtype=dtype)) for g in grads]
        for p, g in zip(params, grads, strict=True):
            p.grad = torch.tensor(g, dtype=dtype)
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        return np.concatenate([p.grad.float().numpy() for p in params])

    rows = block(demo, "clip a gradient [3, 4] to norm 5")
    assert_float32(rows["tf.clip_by_global_norm([[3, 4]], 5)"], [3, 4], "TF")
    assert_float32(rows["torch.nn.utils.clip_grad_norm_"], [2.9999993, 3.999999], "torch")
    assert_float32(rows["torch.nn.utils.clip_grad_norm_"], clip_grad_norm([[3, 4]], 5.0), "torch")
    assert_float32(rows["anyclip.torch.clip_grad_norm_"], [3, 4], "anyclip")

    rows = block(demo, "clip gradients [3, 4] and [12]")
    assert_float32(rows["tf.clip_by_global_norm([[3, 4], [12]], 6.5)"], [1.5, 2, 6], "TF")
    assert_float32(
        rows["torch.nn.utils.clip_grad_norm_"], [1.4999999, 1.9999999, 5.9999995], "torch"
    )
    assert_float32(rows["anyclip.torch.clip_grad_norm_"], [1.5, 2, 6], "anyclip")

    rows = block(demo, "norm of the matrix")
    assert_float32(rows["torch.linalg.norm"], [6.0, 5.1166725, 7.0], "torch.linalg.norm")
    assert_float32(rows["anyclip.norm on torch"], [10.0, 5.477226, 4.0], "anyclip")

    rows = block(demo, "clip a float16 gradient [300, 0]")
    assert_float32(rows["tf.clip_by_global_norm([[300, 0]], 1)"], [math.nan] * 2, "TF")
    assert_float32(
        rows["torch.nn.utils.clip_grad_norm_"],
        clip_grad_norm([[300.0, 0.0]], 1.0, torch.float16),
        "torch",
    )
    assert_float32(rows["anyclip.clip_by_global_norm"], [math.nan] * 2, "anyclip")


#: TF 2.21's (loss, global norm before clipping) for the demo's training loop: x = [[1, 2],
#: [3, 4], [5, 6]], y = [[1], [2], [4]], w = [[0.5], [-0.5]], b = [0], mean squared error, each
#: gradient clipped to [-5, 5], then all to global norm 1, SGD with learning rate 0.1. Step 1
#: by hand: the errors are -1.5, -2.5, -4.5, so the loss is 28.75 / 3 and every gradient
#: element is below -5, which makes the global norm sqrt(3 * 25) = 8.6602545 in float32.
TF_TRAINING = [
    (9.583333, 8.6602545),
    (6.7530212, 8.514409),
    (4.3963614, 8.031889),
    (2.487169, 7.6211896),
    (1.0932344, 7.3090396),
]


def training_rows(output: str, section: str = "3. A training loop") -> list[list[float]]:
    part = output.split(f"\n{section}", 1)[1]
    part = re.split(r"^\d\. ", part, maxsplit=1, flags=re.M)[0]  # up to the next section
    rows = re.findall(r"^\s+([1-5])\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$", part, re.M)
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4, 5], part
    return [[float(v) for v in r[1:]] for r in rows]


def check_training(output: str, section: str = "3. A training loop") -> None:
    for step, ((tf_loss, tf_norm), row) in enumerate(
        zip(TF_TRAINING, training_rows(output, section), strict=True), 1
    ):
        shown_tf_loss, loss, shown_tf_norm, norm = row
        assert np.float32(shown_tf_loss) == np.float32(tf_loss), step
        assert np.float32(shown_tf_norm) == np.float32(tf_norm), step
        # the loss is the framework's own mean (one rounding apart from TF's at most)
        assert loss == pytest.approx(tf_loss, rel=3e-7), f"step {step} loss"
        assert norm == pytest.approx(tf_norm, rel=3e-7), f"step {step} global norm"


def test_demo_training_loop_follows_tf(demo):
    assert "anyclip on torch" in demo or "anyclip on numpy" in demo
    check_training(demo)


def test_demo_optax_chain_follows_tf(demo):
    pytest.importorskip("optax")
    assert "anyclip on JAX with optax" in demo
    check_training(demo, "4. The same loop on JAX, as an optax chain")


def test_demo_optax_look_alike_differs_from_tf(demo):
    pytest.importorskip("optax")
    import jax.numpy as jnp
    import optax

    rows = block(demo, "clip gradients [3, 4] and [12]")
    tx = optax.clip_by_global_norm(6.5)
    grads = [jnp.asarray([3.0, 4.0], dtype=jnp.float32), jnp.asarray([12.0], dtype=jnp.float32)]
    clipped, _ = tx.update(grads, tx.init(grads))
    optax_values = np.concatenate([np.asarray(g) for g in clipped])
    assert_float32(rows["optax.clip_by_global_norm"], optax_values, "optax")
    # optax divides first: one rounding from TF where JAX's float32 3 / 13 is one ulp off
    # (JAX 0.10.2), TF's values where it is exact (JAX 0.5.3)
    want = [1.5, 2, 6] if jax_divides_exactly() else [1.5000001, 2, 6]
    assert_float32(rows["optax.clip_by_global_norm"], want, "optax divides first")
    assert_float32(rows["anyclip.optax.clip_by_global_norm"], [1.5, 2, 6], "anyclip.optax")


def test_demo_without_torch_and_jax(tmp_path):
    done = run_anyclip(cwd=tmp_path, block=("torch", "jax"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"^  torch\s+not installed: skipped$", out, re.M)
    assert re.search(r"^  jax\s+not installed: skipped$", out, re.M)
    assert "torch.nn.utils.clip_grad_norm_                     skipped: torch not installed" in out
    assert_float32(block(out, "clip_by_value([0, 5, 10], 6, 4)")["numpy"], [6, 6, 6], "numpy")
    assert "anyclip on numpy (gradient by hand)" in out
    check_training(out)
    assert re.search(r"^  optax\s+not installed: skipped", out, re.M)
    assert "4. The same loop on JAX, as an optax chain" in out
    assert "  skipped: needs jax and optax" in out
    assert list(tmp_path.iterdir()) == []
