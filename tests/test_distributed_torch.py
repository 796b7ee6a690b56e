"""Global norms across processes with torch.distributed: gloo on 127.0.0.1, 2 and 4 ranks.

Each world size starts its ranks once (``tests/_torch_dist_worker.py``, one subprocess per
rank, bounded in time and reaped), which run every scenario: DDP (replicated gradients),
FSDP2 ``fully_shard`` with even and uneven shards, tensor parallel ``Shard(1)``, pipeline
stages with ``group=`` (a ProcessGroup, a DeviceMesh, two groups in turn), norms over
sharded dims, and a NaN or inf on the last rank (NaN or inf on every rank, through the sum
and through the NaN-keeping maximum and minimum), the norm-history rules (ZClip,
QuantileClip, skip_on_spike) with ``group=`` and on an FSDP2 model trained with spikes and
NaN/inf losses, against one process training the unsharded model, and the per-example and AGC
norms with ``group=`` (each rank a part of the gradients; the one-process call's results),
and the per-layer per-example clipping with ``group=`` (each rank a part of every leaf), the inf
norms and AGC of DTensors with an empty shard or a NaN on the last rank, and float64 norms over
a sharded axis.
Inside the ranks, ``CommDebugMode`` counts the collectives: no gather, at most one all-reduce
of a scalar (or of a value and its NaN flag) per global norm (per group), and one of a
``(batch,)`` vector per leaf for the per-layer clipping. The expected values are the exact
norms of the full data in float64, within ``ULP_DIST`` float32 ULP.

The ranks meet at a TCPStore on a port the OS gives rank 0 when it listens, which it writes to
a file in the world's temporary folder for the others: a port picked free here beforehand could
be taken, before rank 0 listens on it, by a world or gloo connection of a second pytest-xdist
worker. Both worlds run in one
worker (an xdist group): each is started once and serves its 16 tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import start_process, stop_process

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

pytestmark = pytest.mark.xdist_group("distributed-torch")

WORKER = Path(__file__).with_name("_torch_dist_worker.py")
ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = (
    "ddp",
    "fsdp2",
    "tensor_parallel",
    "pipeline",
    "norms",
    "elementwise",
    "accumulate",
    "tf_reference",
    "nonfinite",
    "groups",
    "history",
    "fsdp2_history",
    "rules",
    "layer_rules",
    "empty_shards",
    "float64_axes",
)
#: Seconds a world may run (starting torch in 4 processes on 2 cores included; the FSDP2
#: training runs of ``fsdp2_history`` take about 40 s of it on 4 ranks on an idle machine).
#: Generous for a loaded machine, and bounded: a hung world fails its tests, with the ranks'
#: logs, after this long.
TIMEOUT = 600


def run_world(world: int, out: Path) -> tuple[dict[str, str], str]:
    """Start ``world`` ranks, wait (bounded), reap them; the results and their stderr."""
    env = {
        **os.environ,
        # a file that does not exist yet, in this world's own folder (see the module docstring)
        "ANYCLIP_DIST_PORT": str(out.parent / "port"),  # see the module docstring
        "ANYCLIP_DIST_TIMEOUT": str(TIMEOUT),  # how long a collective may wait
        "WORLD_SIZE": str(world),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    logs = [out.parent / f"rank{rank}.log" for rank in range(world)]
    procs = [
        start_process([sys.executable, WORKER, out], log=log, env={**env, "RANK": str(rank)})
        for rank, log in enumerate(logs)
    ]
    try:
        for p in procs:
            p.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            stop_process(p)  # a rank still running is killed, with what it started
    text = "\n".join(f"--- rank {i}\n{log.read_text()[-3000:]}" for i, log in enumerate(logs))
    results = json.loads(out.read_text()) if out.exists() else {}
    return results, text


@pytest.fixture(scope="module", params=[2, 4], ids=lambda w: f"world{w}")
def world(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"world{request.param}") / "results.json"
    results, logs = run_world(request.param, out)
    return request.param, results, logs


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_distributed_torch(world, scenario):
    size, results, logs = world
    assert scenario in results, f"world {size}: no result (timeout or crash)\n{logs}"
    assert results[scenario] == "ok", f"world {size}, {scenario}:\n{results[scenario]}"


def test_group_of_wrong_kind_is_a_type_error():
    import anyclip

    t = torch.ones(3)
    with pytest.raises(TypeError, match=r"`group` must be a torch\.distributed ProcessGroup"):
        anyclip.global_norm([t], group="data")
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError, match=r"`group` is for torch\.distributed or JAX arrays"):
        anyclip.clip_by_global_norm([np.ones(2)], 1.0, group="data")
    from anyclip import tree

    with pytest.raises(TypeError, match=r"`group` must be a torch\.distributed ProcessGroup"):
        tree.per_example_clip([torch.ones(2, 3)], 1.0, group="data")
    with pytest.raises(TypeError, match=r"`group` must be a torch\.distributed ProcessGroup"):
        tree.adaptive_clip([torch.ones(2, 3)], [torch.ones(2, 3)], group="data")
