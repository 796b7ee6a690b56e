"""JAX sharding: jit on Auto and Explicit meshes, shard_map with ``group=``, 8 host devices.

The checks run in a fresh process (``tests/_jax_sharding_worker.py``) started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``, which JAX reads at import. They
inspect the compiled HLO (arrays put on the mesh, or host arrays sharded by ``jit``'s
``in_shardings`` alone): no all-gather, all-to-all or collective-permute, and every
all-reduce of scalars only; outputs keep their shardings; values are the exact norm of the
unsharded data within ``ULP_DIST`` float32 ULP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

#: One pytest-xdist worker runs this module: the sharding worker (module-scoped ``results``)
#: runs once.
pytestmark = pytest.mark.xdist_group("distributed-jax")

WORKER = Path(__file__).with_name("_jax_sharding_worker.py")
ROOT = Path(__file__).resolve().parent.parent
CHECKS = (
    "jit_auto",
    "jit_auto_no_set_mesh",
    "jit_in_shardings_no_set_mesh",
    "jit_explicit",
    "shard_map_group",
    "shard_map_groups",
    "shard_map_rules",
    "eager_accumulate",
    "nonfinite",
    "nonfinite_half_complex",
    "eager_history_state",
    "wrong_group",
)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("jax") / "results.json"
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = json.loads(out.read_text()) if out.exists() else {}
    return found, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("check", CHECKS)
def test_distributed_jax(results, check):
    found, logs = results
    assert check in found, f"no result (crash or timeout)\n{logs}"
    assert found[check] == "ok", found[check]
