"""No public torch entry point, adapter or stateful rule synchronises the host with the device.

A host sync (a tensor value read back, a tensor made on the device from host data, an output
whose shape depends on values) stalls the GPU's queue at every training step. The only syncs
are the ones the user asks for: ``nonfinite="raise"`` and ``error_if_nonfinite=True`` read the
norm to raise.

* On the CPU (CI): ``tests/_host_sync_worker.py`` runs every scenario twice in a fresh process,
  on fake tensors of a device that is not the CPU, with each kind of sync flagged (its module
  docstring says how and what). Its detector probes show that it flags each kind and not the
  operations that do not sync.
* On CUDA (``torch-cuda``): the same scenarios under ``torch.cuda.set_sync_debug_mode("error")``
  (``Backend.host_syncs_raise``), after a first call that may fill caches.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_json_worker

_WORKER = Path(__file__).with_name("_host_sync_worker.py")


def _load_worker() -> Any:
    spec = importlib.util.spec_from_file_location("_host_sync_worker", _WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


worker = _load_worker()
SCENARIOS = worker.scenarios()
CASES = [(name, dtype) for name, s in SCENARIOS.items() for dtype in s.dtypes]
CASE_IDS = [f"{name}-{dtype}" for name, dtype in CASES]
PROBES = worker.probes()


@pytest.fixture(scope="module")
def fake_device_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The worker's results: every scenario and probe on the fake accelerator, twice."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("host_sync") / "results.json"
    results: dict[str, Any] = run_json_worker("_host_sync_worker.py", out=out)
    return results


def _report(result: dict[str, Any]) -> str:
    lines = []
    for which in ("first", "second"):
        for hit in result[which]:
            lines.append(f"{which} call: {hit['kind']} ({hit['op']}) at\n{hit['stack']}")
    if result["error"]:
        lines.append(f"error:\n{result['error']}")
    return "\n".join(lines)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("probe", list(PROBES))
def test_detector_flags_each_kind_of_sync_and_nothing_else(backend, fake_device_run, probe):
    result = fake_device_run[f"probe:{probe}"]
    assert result["error"] is None, _report(result)
    kinds = [hit["kind"] for hit in result["first"] + result["second"]]
    want = PROBES[probe]
    assert kinds == ([] if want is None else [want]), _report(result)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize(("name", "dtype"), CASES, ids=CASE_IDS)
def test_no_host_sync_on_a_device(backend, fake_device_run, name, dtype):
    """Two calls on the fake accelerator: none may sync but the documented ones."""
    result = fake_device_run[f"{name}-{dtype}"]
    assert result["error"] is None, _report(result)
    if SCENARIOS[name].syncs is None:
        assert not result["first"] and not result["second"], _report(result)
    else:  # the detector sees the value read that the user asked for
        assert [hit["kind"] for hit in result["first"]] == ["value read"], _report(result)


#: Every scenario on fake CPU tensors, in its dtypes and float64 (whose CPU sums take TF's
#: order on a NumPy view of the memory, which a fake tensor does not have).
FAKE_CPU_CASES = CASES + [(n, "float64") for n, s in SCENARIOS.items() if "bfloat16" in s.dtypes]


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize(
    ("name", "dtype"), FAKE_CPU_CASES, ids=[f"{n}-{d}" for n, d in FAKE_CPU_CASES]
)
def test_every_scenario_runs_on_fake_cpu_tensors(backend, name, dtype):
    """``torch.export`` and shape propagation run a step on fake CPU tensors: it must run.

    Every public entry point refused them where the CPU sums view a tensor's memory through
    NumPy (``RuntimeError: .numpy() is not supported for tensor subclasses``).
    """
    scenario = SCENARIOS[name]
    if scenario.syncs is not None:
        pytest.skip(f"reads a value by design ({scenario.syncs}), which a fake tensor has not")
    if name.startswith("torch.apply_if_finite.step"):
        pytest.skip("its optimizer is capturable=True, which torch takes on accelerators only")
    torch = backend.module
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        call = scenario.build(torch, torch.device("cpu"), getattr(torch, dtype))
        call()
        call()


def test_every_public_torch_entry_point_has_a_scenario():
    """A public function, adapter or rule added later must be added to the scenarios."""
    import anyclip
    import anyclip.constraints
    import anyclip.tree

    covered = {name.split("-")[0] for name in SCENARIOS}
    covered |= {name.split(".step")[0] for name in covered}
    # not computations on tensors: a context manager (its scenario is clip_by_global_norm-flush),
    # tree helpers, the constraint classes (their functions have scenarios), an exception type
    skip = {"flush_subnormals", "constraints", "tree", "tree.flatten", "tree.map_leaves"}
    skip |= {f"constraints.{c}" for c in ("MaxNorm", "MinMaxNorm", "NonNeg", "UnitNorm")}
    skip |= {"torch.NonfiniteNormError", "torch.SkipOnSpike", "torch.ApplyIfFinite"}
    public = set(anyclip.__all__)
    public |= {f"tree.{n}" for n in anyclip.tree.__all__}
    public |= {f"constraints.{n}" for n in anyclip.constraints.__all__}
    if importlib.util.find_spec("torch") is not None:
        import anyclip.torch

        public |= {f"torch.{n}" for n in anyclip.torch.__all__}
    assert "clip_by_global_norm-flush" in SCENARIOS
    missing = public - skip - covered
    assert not missing, sorted(missing)


@pytest.mark.parametrize("backend", ["torch-cuda"], indirect=True)
@pytest.mark.parametrize(("name", "dtype"), CASES, ids=CASE_IDS)
def test_cuda_no_host_sync(backend, name, dtype):
    """On CUDA, the second call of each scenario under ``set_sync_debug_mode("error")``."""
    torch = backend.module
    scenario = SCENARIOS[name]
    call = scenario.build(torch, torch.device(backend.device), getattr(torch, dtype))
    call()  # the first call may fill caches (none of anyclip's syncs, but torch's lazy inits)
    if scenario.syncs is None:
        with backend.host_syncs_raise():
            call()
    else:
        with pytest.raises(RuntimeError, match="synchroniz"), backend.host_syncs_raise():
            call()
