"""The two wings: anyclip never imports its verification; the suite's command and report.

* ``src/anyclip`` imports neither pytest nor the conformance suite;
* ``python -m anyclip_conformance`` refuses an unknown backend (listing the valid ones), writes a
  file only when given ``--report``, and exits non-zero when a case fails;
* ``docs/conformance.md`` is not stale: it records the fingerprint of today's reference data,
  xfail lists and budgets, and its counts agree with the catalogue and the xfail lists.
"""

from __future__ import annotations

import ast
import re
import types
from pathlib import Path

import pytest

import anyclip
from anyclip_conformance import reference
from anyclip_conformance.__main__ import main
from anyclip_conformance.backends import BACKEND_IDS
from anyclip_conformance.suite import test_routes

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "conformance.md"
#: The backends ``make conformance-report`` requires (the Makefile's REPORT_BACKENDS).
REPORT_BACKENDS = ("numpy", "array_api_strict", "torch", "jax", "dask")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


@pytest.mark.parametrize(
    "path", sorted((ROOT / "src" / "anyclip").rglob("*.py")), ids=lambda p: p.name
)
def test_library_imports_no_verification(path: Path) -> None:
    bad = {
        name
        for name in _imports(path)
        if name.split(".")[0] in ("pytest", "conformance", "anyclip_conformance", "hypothesis")
    }
    assert not bad, (
        f"{path.relative_to(ROOT)} imports {sorted(bad)}: verification belongs in conformance/"
    )


def test_live_tf_without_tensorflow_exits_with_the_install_line(monkeypatch, capsys) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorflow" else real(name, *a),
    )
    assert main(["--backends", "numpy", "--live-tf", "-k", "clip_by_average_norm"]) == 2
    err = capsys.readouterr().err
    assert "TensorFlow 2.21, which is not installed here" in err
    assert "pip install 'anyclip-conformance[live]'" in err


def test_progress_without_a_terminal_is_one_line_per_row(capsys) -> None:
    # capsys replaces stderr with a buffer: what a pipe or a CI log gets
    assert main(["--backends", "numpy", "-k", "clip_by_average_norm"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"(\d+) checks \(\1 numpy\); their time is estimated after .*", err[0])
    assert any(re.fullmatch(r"200 checks in [\d.]+ s: .* left at this pace", e) for e in err)
    rows = [line for line in err if "clip_by_average_norm on numpy (eager)" in line]
    assert len(rows) == 1, err
    assert re.match(
        r"\[ *\d+\.\d s\] clip_by_average_norm on numpy \(eager\): \d+ cases, ", rows[0]
    )


def test_sample_covers_every_function_family_and_dtype() -> None:
    index = reference.load_index()
    chosen = reference.sample()
    cases = chosen - set(reference.real_gradient_cases())
    assert cases <= set(index)
    for level in (lambda f: (f[0], f[2]), lambda f: (f[0], f[1])):
        wanted = {level(reference._family(c)) for c in index}
        assert {level(reference._family(c)) for c in cases} == wanted
    assert {e["function"] for c, e in index.items() if c in cases} == set(reference.functions())
    # every kind of case: outputs, gradients, errors, a random grid (bulk), under jit
    for kind in ("grads", "error", "bulk"):
        assert any(kind in index[c] for c in cases), kind
    assert cases & set(reference.case_ids(kind="jit"))
    models = {c.partition("/step")[0] for c in reference.real_gradient_cases()}
    assert {c.partition("/step")[0] for c in chosen - cases} == models
    assert len(cases) < len(index) / 10


def test_jax_runs_the_sample_unless_full(capsys) -> None:
    pytest.importorskip("jax")
    keyword = ["-k", "test_case and clip_by_average_norm"]
    assert main(["--backends", "jax", *keyword]) == 0
    captured = capsys.readouterr()
    assert "jax: a sample of the catalogue" in captured.err
    assert "--full runs every case" in captured.out
    sampled = re.search(r"\| `clip_by_average_norm` \| jax \| (\d+) \|", captured.out)
    eager = [c for c in reference.case_ids("clip_by_average_norm") if c in reference.sample()]
    assert sampled is not None and int(sampled[1]) == len(eager), captured.out
    assert main(["--backends", "jax", "--full", "-k", keyword[1] + " and edge and nan"]) == 0
    captured = capsys.readouterr()
    assert "sample" not in captured.err + captured.out
    full = re.search(r"\| `clip_by_average_norm` \| jax \| (\d+) \|", captured.out)
    edge = [c for c in reference.case_ids("clip_by_average_norm") if "/edge/" in c and "nan" in c]
    assert full is not None and int(full[1]) == len(edge), captured.out


def test_jit_variant_shares_a_program_between_cases_that_differ_in_data_only() -> None:
    from anyclip_conformance import harness, load_backend

    pytest.importorskip("jax")
    jax = load_backend("jax")
    a, b = "global_norm/f32/random/3/scale=0.01", "global_norm/f32/random/3/scale=30.0"
    harness.release_compiled()
    assert harness.check_case(a, jax, "jit") >= 0
    assert harness.check_case(b, jax, "jit") >= 0
    assert len(harness._JITTED) == 1
    (runner,) = harness._JITTED.values()
    assert runner._cache_size() == 1  # one trace and one program for both cases
    harness.release_compiled()
    assert runner._cache_size() == 0
    assert harness._JITTED == {}


def _run_python(tmp_path, env, script, outer: tuple[str, ...]) -> list[str]:
    """``script`` in a fresh Python in ``tmp_path``: this environment without the variables
    starting with ``outer``, plus ``env``; the words it printed (it must exit 0)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(outer)} | env
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def _enable_jax_cache(tmp_path, env, code) -> list[str]:
    outer = ("JAX_", "XDG_", "PYTEST_XDIST_")  # this run's settings (and xdist worker) left out
    return _run_python(tmp_path, env, "from anyclip_conformance import jax_cache\n" + code, outer)


def test_jax_cache_folder_and_settings(tmp_path) -> None:
    home = {"XDG_CACHE_HOME": str(tmp_path)}
    setting = "os.environ['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS']"
    code = f"import os; print(jax_cache.enable(), {setting})"
    assert _enable_jax_cache(tmp_path, home, code) == [str(tmp_path / "anyclip" / "jax"), "0"]
    # settings already in the environment win
    mine = {
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "mine"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2",
    }
    assert _enable_jax_cache(tmp_path, home | mine, code) == [str(tmp_path / "mine"), "2"]
    # JAX imported first: its configuration is set too
    code = "import jax; jax_cache.enable(); print(jax.config.jax_compilation_cache_dir)"
    assert _enable_jax_cache(tmp_path, home, code) == [str(tmp_path / "anyclip" / "jax")]
    # a pytest-xdist worker gets a folder of its own (inherited by what it starts), also inside
    # a folder set in the environment, and a second call keeps it
    worker = {"PYTEST_XDIST_WORKER": "gw1"}
    code = "import os; print(jax_cache.enable(), jax_cache.enable(), os.environ[" + (
        "'JAX_COMPILATION_CACHE_DIR'])"
    )
    mine_dir = str(tmp_path / "anyclip" / "jax" / "gw1")
    assert _enable_jax_cache(tmp_path, home | worker, code) == [mine_dir] * 3
    theirs = {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "mine")}
    assert (
        _enable_jax_cache(tmp_path, home | worker | theirs, code)
        == [str(tmp_path / "mine" / "gw1")] * 3
    )


def test_a_second_run_at_once_gets_a_jax_cache_folder_of_its_own(tmp_path) -> None:
    # two `make test` at once (two clones, one machine) each claim a folder for their lifetime:
    # the second would otherwise read entries the first one's workers are writing
    import os
    import subprocess
    import sys

    outer = ("JAX_", "XDG_", "PYTEST_XDIST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(outer)}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    base = tmp_path / "anyclip" / "jax"
    code = "print(jax_cache.enable(), flush=True); import sys; sys.stdin.read()"
    with subprocess.Popen(
        [sys.executable, "-c", "from anyclip_conformance import jax_cache\n" + code],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline().strip() == str(base)  # the first run: as usual
            show = "import os; print(jax_cache.enable(), os.environ['JAX_COMPILATION_CACHE_DIR'])"
            second = _enable_jax_cache(tmp_path, {"XDG_CACHE_HOME": str(tmp_path)}, show)
            assert second == [str(tmp_path / "anyclip" / "jax-1")] * 2  # its workers inherit it
            # a worker of either run keeps its run's folder (inherited), claiming nothing
            worker = {"JAX_COMPILATION_CACHE_DIR": str(base), "PYTEST_XDIST_WORKER": "gw0"}
            assert _enable_jax_cache(tmp_path, worker, show) == [str(base / "gw0")] * 2
            holder.stdin.close()
            assert holder.wait(timeout=120) == 0
        finally:
            if holder.poll() is None:
                holder.kill()
    # the first run is over: the usual folder is free again
    again = _enable_jax_cache(tmp_path, {"XDG_CACHE_HOME": str(tmp_path)}, show)
    assert again == [str(base)] * 2


def test_a_jax_cache_folder_that_cannot_be_made_is_returned_unheld(tmp_path) -> None:
    # the run goes on (JAX reports the folder itself) instead of failing at conftest import
    from anyclip_conformance.jax_cache import claim

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert claim(blocker / "jax") == blocker / "jax"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no jax-1, jax-2, ...


def test_jax_cache_keys_do_not_depend_on_the_folder(tmp_path) -> None:
    # the same program compiled with the cache in two worker folders gets the same key (the
    # file name of its entry), so that one worker's entries serve the other: JAX's GPU-only XLA
    # caches, whose paths inside the folder JAX hashes into the key, are off
    pytest.importorskip("jax")
    code = (
        "import os, jax, jax.numpy as jnp\n"
        "folder = jax_cache.enable()\n"
        "jax.jit(lambda x: jnp.sin(x) * 2)(jnp.ones(3)).block_until_ready()\n"
        "print(*sorted(n for n in os.listdir(folder) if n.startswith('jit__lambda')))"
    )
    keys = [
        _enable_jax_cache(tmp_path, {"XDG_CACHE_HOME": str(tmp_path / home), **worker}, code)
        for home, worker in (("a", {"PYTEST_XDIST_WORKER": "gw0"}), ("b", {}))
    ]
    assert len(keys[0]) == 1, keys
    assert keys[0] == keys[1]


def test_share_worker_entries_gives_each_worker_the_others_entries(tmp_path) -> None:
    from anyclip_conformance.jax_cache import share_worker_entries

    entries = {"gw0": {"a-cache": b"A", "b-cache": b"B"}, "gw1": {"b-cache": b"B", "c-cache": b"C"}}
    for worker, files in entries.items():
        (tmp_path / worker).mkdir()
        (tmp_path / worker / ".lockfile").write_bytes(b"")
        for name, data in files.items():
            (tmp_path / worker / name).write_bytes(data)
    (tmp_path / "gw0" / "sub").mkdir()  # not an entry: not linked
    (tmp_path / "other").mkdir()  # not a worker folder: left alone
    (tmp_path / "other" / "d-cache").write_bytes(b"D")
    assert share_worker_entries(tmp_path) == 2
    assert not (tmp_path / "gw1" / "sub").exists()
    for worker in entries:
        got = {p.name: p.read_bytes() for p in (tmp_path / worker).iterdir() if p.is_file()}
        assert got == {".lockfile": b"", "a-cache": b"A", "b-cache": b"B", "c-cache": b"C"}
    assert [p.name for p in (tmp_path / "other").iterdir()] == ["d-cache"]
    assert share_worker_entries(tmp_path) == 0


def test_checkout_conftest_loads_without_xdist(tmp_path) -> None:
    # pytest-xdist is optional (`pytest` in one process, an environment without it): the root
    # conftest's xdist hook is marked optional, and its JAX-cache links run only under xdist
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    command = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider"]
    command += ["--collect-only", "-q", "tests/test_memo.py"]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "tests/test_memo.py::test_remembered_computes_once_per_key" in done.stdout


def test_unknown_backend_is_an_error_listing_the_valid_names(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--backends", "numpy,nmupy"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'nmupy'" in err
    assert all(name in err for name in BACKEND_IDS)


def test_writes_nothing_without_report(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--backends", "numpy", "-k", "clip_by_average_norm and edge"]) == 0
    out = capsys.readouterr().out
    row = re.search(r"\| `clip_by_average_norm` \| numpy \| (\d+) \| (\d+) \| (\d+) \| 0 \|", out)
    assert row is not None, out
    assert int(row[3]) > 0, "the edge cases include the FTZ deviations listed for numpy"
    assert list(tmp_path.iterdir()) == []
    assert (
        main(
            [
                "--backends",
                "numpy",
                "-k",
                "test_case and global_norm and overflow",
                "--report",
                "r.md",
            ]
        )
        == 0
    )
    text = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert f"fingerprint `{reference.fingerprint()}`" in text
    assert "| `global_norm` | numpy |" in text


def test_failing_case_exits_nonzero(monkeypatch, capsys) -> None:
    monkeypatch.setattr(anyclip, "clip_by_average_norm", lambda t, clip_norm, name=None: t)
    assert main(["--backends", "numpy", "-k", "test_case and clip_by_average_norm"]) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.err
    assert re.search(
        r"\| `clip_by_average_norm` \| numpy \| \d+ \| \d+ \| \d+ \| [1-9]", captured.out
    )


# ------------------------------------------------------------------------- the committed report
ROW = re.compile(
    r"^\| `(?P<function>\w+)` \| (?P<backend>[\w-]+)(?: \((?P<variant>[\w ]+)\))? \| "
    r"(?P<cases>\d+) \| (?P<passed>\d+) \| (?P<xfailed>\d+) \| (?P<failed>\d+) \| "
    r"(?P<skipped>\d+) \| [\d.e+-]+ \|$",
    re.MULTILINE,
)


def _report_rows() -> list[dict[str, str]]:
    return [m.groupdict() for m in ROW.finditer(REPORT.read_text(encoding="utf-8"))]


def _route_cases(variant: str) -> list[str]:
    if variant == "tree":
        return test_routes.TREE_SINGLE + test_routes.TREE_GLOBAL
    return test_routes.ADAPTER_SINGLE + test_routes.ADAPTER_GLOBAL


def _expected(function: str, backend: str, variant: str) -> tuple[int, int]:
    """(cases, xfailed) of a report row, from the catalogue and the xfail lists alone."""
    index = reference.load_index()
    if variant == "real gradients":  # every recorded step, no xfails
        return len(reference.real_gradient_cases()), 0
    if variant in ("eager", "jit", "grad"):
        ids = reference.case_ids(function, kind={"eager": "all"}.get(variant, variant))
        run, tag = ids, variant
    else:
        ids = [c for c in _route_cases(variant) if index[c]["function"] == function]
        run, tag = ids, "eager"
        if variant == "torch adapter":  # it skips what has no gradient (not floating)
            floating = test_routes.FLOATING
            run = [c for c in ids if set(test_routes._dtypes(index[c])) <= set(floating)]
    listed = {c for c in run if reference.xfail_reason(c, backend, tag) is not None}
    return len(ids), len(listed)


def test_report_is_made_from_todays_data() -> None:
    text = REPORT.read_text(encoding="utf-8")
    found = re.search(r"fingerprint `([0-9a-f]+)`", text)
    assert found is not None, (
        "docs/conformance.md records no fingerprint: run `make conformance-report`"
    )
    assert found[1] == reference.fingerprint(), (
        "docs/conformance.md was made from other reference data, xfail lists or budgets: "
        "run `make conformance-report`"
    )


def test_report_counts_agree_with_the_catalogue() -> None:
    rows = _report_rows()
    seen = {(r["function"], r["backend"]) for r in rows if r["variant"] is None}
    wanted = {(f, b) for f in reference.functions() for b in REPORT_BACKENDS}
    assert wanted <= seen, f"docs/conformance.md lacks rows {sorted(wanted - seen)}"
    real = {(r["function"], r["backend"]) for r in rows if r["variant"] == "real gradients"}
    wanted = {(f, b) for f in ("global_norm", "clip_by_global_norm") for b in REPORT_BACKENDS}
    assert wanted <= real, f"docs/conformance.md lacks real-gradient rows {sorted(wanted - real)}"
    for r in rows:
        variant = r["variant"] or "eager"
        cases, xfailed = _expected(r["function"], r["backend"], variant)
        what = f"docs/conformance.md row {r['function']} / {r['backend']} ({variant})"
        counted = sum(int(r[k]) for k in ("passed", "xfailed", "failed", "skipped"))
        assert int(r["cases"]) == cases == counted, f"{what}: cases"
        assert int(r["xfailed"]) == xfailed, f"{what}: xfailed vs the xfail list"
        assert int(r["failed"]) == 0, f"{what}: failures"


def _fake_cuda_backend():
    """A torch-cuda backend object on a machine without a GPU (fake tensors need none)."""
    torch = pytest.importorskip("torch")
    from anyclip_conformance.backends import Backend, load_backend

    cpu = load_backend("torch")
    return torch, Backend("torch-cuda", "torch", cpu.xp, torch.device("cuda"), torch)


def test_device_check_fills_in_the_current_cuda_index() -> None:
    # A tensor on the current CUDA device (0 without a CUDA runtime, as torch's) is on the
    # backend's device "cuda"; one on another index or the CPU is not. The check once compared
    # torch.device("cuda") with "cuda:0" and failed every torch-cuda comparison.
    torch, cuda = _fake_cuda_backend()
    from torch._subclasses.fake_tensor import FakeTensorMode

    current = torch.cuda.current_device() if torch.cuda.is_available() else 0
    with FakeTensorMode():
        here = torch.empty(3, device="cuda")
    # The other index need not exist: a fake tensor there was refused on a real one-GPU machine
    # (an H200: "CUDA error: invalid device ordinal"), so the check reads it from a stand-in
    # that has only the ``device`` attribute (all that array_api_compat.device reads).
    elsewhere = types.SimpleNamespace(device=torch.device("cuda", current + 1))
    assert str(here.device) == f"cuda:{current}"
    assert cuda.same_device(here)
    assert not cuda.same_device(elsewhere)
    assert not cuda.same_device(torch.empty(3))
    cpu = cuda.__class__("torch", "torch", cuda.xp, torch.device("cpu"), torch)
    assert cpu.same_device(torch.empty(3)) and not cpu.same_device(here)


def test_host_sync_guard_never_outlives_its_block(monkeypatch) -> None:
    # set_sync_debug_mode warns that it is a prototype; under the suite's warnings-as-errors
    # that warning once escaped after the mode was set and before the try that reset it, and
    # every later test in the process failed on its own setup. The guard sets and resets it.
    torch, cuda = _fake_cuda_backend()
    modes: list[object] = []

    def set_mode(mode):
        modes.append(mode)
        if mode == "error":
            import warnings

            warnings.warn("Synchronization debug mode is a prototype feature", stacklevel=2)

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_mode)
    with pytest.raises(KeyError), cuda.host_syncs_raise():
        assert modes == ["error"]
        raise KeyError("a failing check inside the block")
    assert modes == ["error", "default"]


_LOWER_BOTH_WAYS = """
import threading
import jax
import jax.numpy as jnp
from anyclip_conformance import jax_lowering
import anyclip

jax.config.update("jax_enable_x64", True)


def programs():
    # new function objects each time: nothing comes from JAX's lowering caches
    fns = [
        lambda x: anyclip.clip_by_norm(x, 1.0),
        lambda x: anyclip.global_norm([x, x[:1]]),
        lambda x: jnp.cumsum(x * jnp.asarray([1.5, 2.5, 3.5], x.dtype)),
    ]
    xs = [jnp.arange(3.0, dtype=d) for d in (jnp.float32, jnp.float64, jnp.bfloat16)]
    lowered = [jax.jit(f).lower(x) for f in fns for x in xs]
    contexts = []  # the objects, kept alive: ids of freed ones could be reused
    for low in lowered:
        context = low.compiler_ir().context
        if not any(context is c for c in contexts):
            contexts.append(context)
    return [low.as_text() for low in lowered], contexts


fresh, fresh_contexts = programs()
assert len(fresh_contexts) == len(fresh), "a context per program before sharing"
assert jax_lowering.share() and jax_lowering.share()
jax.clear_caches()
same, contexts = programs()
assert same == fresh, "the shared context lowers other programs"
assert len(contexts) == 1, contexts
jax_lowering.renew()
jax.clear_caches()
again, renewed = programs()
assert again == fresh and len(renewed) == 1 and renewed[0] is not contexts[0]
other = []
thread = threading.Thread(target=lambda: other.append(programs()))
thread.start()
thread.join()
assert other[0][0] == fresh and len(other[0][1]) == 1 and other[0][1][0] is not renewed[0]
print("ok")
"""


@pytest.mark.parametrize("setting", ["shared", "fresh"])
def test_shared_mlir_context_lowers_the_same_programs(tmp_path, setting) -> None:
    """One MLIR context per thread gives JAX's programs character for character; a renewed
    context and another thread's are other contexts; ``..._MLIR_CONTEXT=fresh`` opts out."""
    pytest.importorskip("jax")
    env, script = {}, _LOWER_BOTH_WAYS
    if setting == "fresh":
        env["ANYCLIP_CONFORMANCE_MLIR_CONTEXT"] = "fresh"
        script = (
            "import jax\nfrom anyclip_conformance import jax_lowering\n"
            "assert not jax_lowering.share() and not jax_lowering.shared()\nprint('ok')\n"
        )
    assert _run_python(tmp_path, env, script, ("ANYCLIP_CONFORMANCE",)) == ["ok"]


# ------------------------------------------------------------- backends chosen before collection
_ITEMS_PLUGIN = """
import json, os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    rows = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        rows.append([item.nodeid, params.get("backend", params.get("grad_backend"))])
    with open(os.environ["ANYCLIP_ITEMS_OUT"], "w", encoding="utf-8") as f:
        json.dump(rows, f)
"""

#: Modules with each way a test gets its backend: the fixture's parameters alone
#: (test_errors), beside another parametrised fixture (test_policies), a mark naming the case
#: and the backend together (test_generic_kernels), an override of `backend` that takes
#: `grad_backend` (test_gradients), a mark of the backend alone (test_compile).
_BACKEND_WAYS = (
    "tests/test_errors.py",
    "tests/test_policies.py",
    "tests/test_generic_kernels.py",
    "tests/test_gradients.py",
    "tests/test_compile.py",
)


def _items_built(tmp_path: Path, name: str, *args: str) -> list[list]:
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "anyclip_items_out.py").write_text(_ITEMS_PLUGIN, encoding="utf-8")
    out = tmp_path / f"{name}.json"
    env = {**os.environ, "ANYCLIP_ITEMS_OUT": str(out)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    env.pop("ANYCLIP_REQUIRE_BACKENDS", None)  # collection only: nothing is loaded or run
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "anyclip_items_out"]
    command += ["-p", "no:cacheprovider", *args, *_BACKEND_WAYS]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


def test_selected_backends_are_the_only_ones_collected(tmp_path) -> None:
    # --anyclip-backends (the CLI's --backends) parametrises with the selected backends only,
    # instead of building every backend's items and deselecting most of them: the items run are
    # the same, with the same ids, in the same order
    everything = _items_built(tmp_path, "all")
    chosen = _items_built(tmp_path, "chosen", "--anyclip-backends", "numpy,torch")
    wanted = {"numpy", "torch", None}
    assert [n for n, b in chosen if b in wanted] == [n for n, b in everything if b in wanted]
    built = {b for _, b in chosen}
    assert {"numpy", "torch", None} <= built
    # the other backends' items are still built (to be deselected) only for a test with another
    # parametrised fixture, and for a test that has none of the selected backends (see the
    # plugin's _parametrize_selected_backends)
    others = {n.partition("[")[0] for n, b in chosen if b not in wanted}
    has_wanted = {n.partition("[")[0] for n, b in everything if b in wanted}
    assert others - has_wanted, "no test without a selected backend among the modules"
    # test_policies' tests take a parametrised case fixture besides the backend
    mixed = others & has_wanted
    assert mixed and all(n.startswith("tests/test_policies.py::") for n in mixed), mixed
    # every other item was never built (here 9,477 items instead of 16,663)
    assert len(chosen) < len(everything), (len(chosen), len(everything))
