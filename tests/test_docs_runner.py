"""The out-of-process docs block runner (``tests/_docs_runner.py``, driven by ``DocsBlockRunner``
of ``tests/conftest.py``).

``tests/test_docs.py`` runs the torch.distributed blocks through it and
``tests/test_single_framework_installs.py`` every block of an install: a block that hangs (in
its code, or when its globals are freed, as a gloo group's teardown once did) fails in bounded
time, naming the block and showing what it printed, and no process of it is left behind. A block
that runs through starts from what a block run in the test process starts from.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

from .conftest import DocsBlockFailed, DocsBlockRunner

#: A block's time limit in the hang tests, once the runner's Python is up: the blocks print
#: their first lines at once, which a loaded machine does in well under this.
SHORT = 4.0

#: The code of a block that starts a helper process, prints, then hangs where ``HANG`` says.
HANGS = textwrap.dedent(
    """
    import os
    import subprocess
    import sys
    import time

    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("pids", os.getpid(), helper.pid)
    print("before the hang")
    """
)
#: A hang in the block's own code.
IN_CODE = HANGS + "time.sleep(600)\n"
#: A hang when the block's globals are freed, after it ran (as a gloo process group's threads
#: were joined from a DDP reducer freed after ``destroy_process_group``).
AT_TEARDOWN = HANGS + textwrap.dedent(
    """
    class Group:
        def __del__(self):
            import time  # the block's globals may be gone by now

            time.sleep(600)

    group = Group()
    print("ran through")
    """
)


def gone(pid: int) -> bool:
    """``pid`` has exited: reaped, or a zombie left to the init process to reap."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    return False


def wait_gone(pid: int, bound: float = 60.0) -> bool:
    """Whether ``pid`` exits within ``bound`` s (a SIGKILLed process may take a moment)."""
    deadline = time.monotonic() + bound
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def runner(tmp_path):
    run = DocsBlockRunner(sys.executable, tmp_path)
    yield run
    run.close()


@pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX")
@pytest.mark.parametrize("code", [IN_CODE, AT_TEARDOWN], ids=["in-code", "at-teardown"])
def test_block_that_hangs_fails_named_and_leaves_no_process(runner, code):
    assert runner.run("fake.md:1", "print('up')") == ["up"]  # its Python started
    runner.timeout = SHORT
    with pytest.raises(DocsBlockFailed) as info:
        runner.run("fake.md:12", code)
    message = str(info.value)
    assert message.startswith(f"fake.md:12 ran over {SHORT:g} s and was stopped"), message
    assert "before the hang" in message, message  # what it printed so far
    if code is AT_TEARDOWN:
        assert "ran through" in message, message
    match = re.search(r"pids (\d+) (\d+)", message)
    assert match, message
    python, helper = int(match[1]), int(match[2])
    assert runner.proc is None
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(python, 0)
    assert wait_gone(helper), f"the block's helper process {helper} was not killed"
    # the next block gets a fresh Python
    assert runner.run("fake.md:40", "import os\nprint(os.getpid())") != [str(python)]


def test_block_that_raises_is_named_with_its_traceback(runner):
    with pytest.raises(DocsBlockFailed, match=r"(?s)^fake\.md:3 raised:.*ValueError: bad value"):
        runner.run("fake.md:3", "print('one')\nraise ValueError('bad value')")
    assert runner.run("fake.md:9", "print('next')") == ["next"]  # the same Python goes on


@pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX")
def test_python_that_dies_is_named_and_leaves_no_process(runner):
    with pytest.raises(DocsBlockFailed, match=r"^fake\.md:5: the Python running it exited") as info:
        runner.run("fake.md:5", HANGS + "os._exit(3)\n")
    match = re.search(r"pids (\d+) (\d+)", str(info.value))
    assert match, str(info.value)
    assert runner.proc is None
    assert wait_gone(int(match[2])), f"the block's helper process {match[2]} was not killed"


#: What a block sees of where it runs.
PROBE = textwrap.dedent(
    """
    import os
    import sys
    import warnings
    print(__name__, sorted(globals()))
    print(os.getcwd())
    print(os.environ.get("ANYCLIP_DOCS_PROBE"), os.environ.get("PYTHONPATH"))
    print(sys.executable)
    print(warnings.filters[:3])
    """
)


def test_block_starts_from_what_an_in_process_block_starts_from(runner, monkeypatch):
    monkeypatch.setenv("ANYCLIP_DOCS_PROBE", "set by the test")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # as tests/test_docs.py runs a block in-process
        exec(compile(PROBE, "<probe>", "exec"), {"__name__": "__docs__"})
    here = out.getvalue().splitlines()
    assert runner.run("probe.md:1", PROBE, runner.warning_filters_here()) == here


def test_warnings_are_errors_as_in_process(runner):
    code = "import warnings\nwarnings.warn('from a docs block', UserWarning)"
    with pytest.raises(UserWarning, match="from a docs block"):  # pyproject.toml: "error"
        exec(compile(code, "<warns>", "exec"), {"__name__": "__docs__"})
    with pytest.raises(DocsBlockFailed, match=r"UserWarning: from a docs block"):
        runner.run("warns.md:1", code, runner.warning_filters_here())
