"""How the suite runs a live reference script (``conftest.run_reference_script``).

The ``--live-tf`` tests and the reference fixtures run ``tests/data/make_*.py`` in a fresh
Python. A failing script must fail the test with its own stderr; only TensorFlow's rare abort in
its scalar cache (which says nothing of the values compared) is run once more. Each case here
runs a small stand-in script that behaves the way a real one can.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import run_reference_script

#: A stand-in reference: writes ``out`` unless told to fail; ``tries`` counts its runs.
STAND_IN = """
import os, sys
from pathlib import Path
out, tries, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
n = int(tries.read_text()) + 1 if tries.exists() else 1
tries.write_text(str(n))
if mode == "tf-abort-once" and n == 1 or mode == "tf-abort-always":
    sys.stderr.write({abort!r})
    sys.stderr.flush()
    os.abort()
if mode == "other-abort":
    sys.stderr.write("F0000 some other fatal check\\n")
    sys.stderr.flush()
    os.abort()
if mode == "exit-1":
    sys.exit("the reference refused the case")
out.write_text("ok")
"""

#: The head of what TensorFlow 2.21 printed when it aborted so (make_tf_error_messages.py, both
#: cores busy), as printed.
TF_ABORT_TEXT = (
    "F0000 00:00:1795819905.559227   18901 pywrap_tensor_conversion.h:59] Check failed: "
    "!PyErr_Occurred() \n"
    "*** Check failure stack trace: ***\n"
    "    @     0x7fb9228ce564  absl::lts_20250814::log_internal::LogMessage::SendToLog()\n"
    "    @     0x7fb9228ce4e6  absl::lts_20250814::log_internal::LogMessage::Flush()\n"
    "    @     0x7fb8fc8ac811  std::__tuple_compare<>::__eq()\n"
    "    @     0x7fb8fc8aa737  tensorflow::TFE_TensorHandleCache::Insert()\n"
    "    @     0x7fb8fc8a71d1  tensorflow::ConvertToEagerTensor()\n"
)


def _run(tmp_path: Path, mode: str) -> tuple[Path, Path]:
    script = tmp_path / "make_stand_in.py"
    script.write_text(STAND_IN.format(abort=TF_ABORT_TEXT))
    out, tries = tmp_path / "out.txt", tmp_path / "tries.txt"
    run_reference_script(script, out, tries, mode, timeout=120)
    return out, tries


def test_a_passing_script_runs_once(tmp_path):
    out, tries = _run(tmp_path, "pass")
    assert out.read_text() == "ok"
    assert tries.read_text() == "1"


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_tensorflows_scalar_cache_abort_is_run_once_more(tmp_path):
    out, tries = _run(tmp_path, "tf-abort-once")
    assert out.read_text() == "ok"
    assert tries.read_text() == "2"


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_a_second_abort_fails_with_the_scripts_stderr(tmp_path):
    with pytest.raises(pytest.fail.Exception, match=r"(?s)exited with -6 \(run 2\).*Check failed"):
        _run(tmp_path, "tf-abort-always")
    assert (tmp_path / "tries.txt").read_text() == "2"


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_another_abort_is_not_run_again(tmp_path):
    with pytest.raises(pytest.fail.Exception, match=r"(?s)\(run 1\).*some other fatal check"):
        _run(tmp_path, "other-abort")
    assert (tmp_path / "tries.txt").read_text() == "1"


def test_an_error_exit_fails_with_the_scripts_stderr(tmp_path):
    with pytest.raises(
        pytest.fail.Exception, match=r"(?s)exited with 1 \(run 1\).*the reference refused"
    ):
        _run(tmp_path, "exit-1")
    assert (tmp_path / "tries.txt").read_text() == "1"
