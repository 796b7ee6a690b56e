"""The scripts in ``examples/`` run, each in a fresh interpreter, and print what they promise.

Each example trains a tiny model for five steps twice (functional anyclip calls, then the
framework adapter) and prints the pre-clip global norm of every step.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STEP = re.compile(r"^step (\d+): loss\s+(\S+)\s+global norm before clipping (\S+)$", re.MULTILINE)
CLIP_NORM = 0.5  # the value both examples clip to

SCRIPTS = {
    "torch_tf1_style.py": "torch",
    "jax_optax_tf1_style.py": "optax",
}


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_example_runs(script):
    pytest.importorskip(SCRIPTS[script])
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=EXAMPLES.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = STEP.findall(proc.stdout)
    assert [int(s) for s, _, _ in steps] == [0, 1, 2, 3, 4] * 2, proc.stdout
    norms = [float(n) for _, _, n in steps]
    assert all(math.isfinite(n) and n > CLIP_NORM for n in norms), norms  # every step clips
    losses = [float(v) for _, v, _ in steps]
    assert losses[4] < losses[0]  # training goes somewhere
    # the functional loop and the adapter loop print the same norms and end in the same place
    assert norms[:5] == norms[5:]
    assert "both loops end with the same parameters: True" in proc.stdout
