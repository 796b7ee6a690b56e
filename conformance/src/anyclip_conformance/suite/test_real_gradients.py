"""Gradients of real TF models: every recorded training step, on every backend.

``data/real_gradients.npz`` (made by ``python -m anyclip_conformance.real_models``) holds the
raw gradients of four small Keras models trained with TensorFlow 2.21 (an LSTM language model
with an embedding, a convnet also in mixed precision, a transformer block, an MLP policy also
in float16 and bfloat16) and what ``tf.linalg.global_norm`` and ``tf.clip_by_global_norm``
returned for them; ``data/real_programs.npz`` (``python -m anyclip_conformance.real_programs``)
the same for two programs written in raw TF ops: tensorflow/models' PTB word-level LSTM (its
embedding gradient an ``IndexedSlices`` with repeated ids) and openai/baselines' PPO2 update.
anyclip must give the same within ``budgets.REAL_GRADIENT_BUDGETS``.
"""

from __future__ import annotations

from typing import Any

import pytest

from anyclip_conformance import harness, reference
from anyclip_conformance.backends import BackendId

CASES = reference.real_gradient_cases()
FUNCTIONS = ["global_norm", "clip_by_global_norm"]
JAX_BACKENDS = [b.value for b in BackendId if b.library == "jax"]


def _run(case_id: str, function: str, backend: Any, variant: str, record: Any) -> None:
    try:
        worst = harness.check_real_gradients(case_id, function, backend, variant)
    except LookupError as exc:  # a dtype the backend lacks (bfloat16 on NumPy)
        pytest.skip(str(exc))
    record("max_ulp", worst)


@pytest.mark.conformance("real gradients")
@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("case_id", CASES)
def test_real_gradients(case_id: str, function: str, backend: Any, record_property: Any) -> None:
    _run(case_id, function, backend, "eager", record_property)


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("case_id", CASES)
def test_real_gradients_jit(case_id: str, function: str, backend: Any) -> None:
    harness.check_real_gradients(case_id, function, backend, "jit")


def test_real_gradient_data() -> None:
    """Every model is there, with its dtypes, several steps, and an embedding among them."""
    provenance, arrays = reference.load_real_gradients()
    assert provenance["tensorflow"] == "2.21.0"
    models = provenance["models"]
    assert {"lstm_lm", "convnet", "transformer", "mlp_policy"} <= set(models)
    dtypes = {d for m in models.values() for d in m["dtypes"]}
    assert {"float32", "float16", "bfloat16"} <= dtypes
    assert provenance["steps"] >= 3
    steps = [len(m.get("steps", range(provenance["steps"]))) for m in models.values()]
    assert len(CASES) == sum(steps)
    # the LSTM's first gradient is the embedding's IndexedSlices values: one row per id
    embedding = arrays["lstm_lm|0|grad|0"]
    assert embedding.shape == (8 * 12, 32)


def test_real_program_data() -> None:
    """The two programs of ``real_programs.py``: the PTB LSTM's embedding gradient repeats ids."""
    provenance, arrays = reference.load_real_gradients()
    assert provenance["programs"]["tensorflow"] == "2.21.0"
    models = provenance["models"]
    assert {"ptb_lstm", "ppo2_mlp"} <= set(models)
    ptb = models["ptb_lstm"]
    assert ptb["kinds"][0] == "indexed_slices" and ptb["clip_norm"] == 5.0
    for step in ptb["steps"]:
        ids = arrays[f"ptb_lstm|{step}|indices|0"]
        assert arrays[f"ptb_lstm|{step}|grad|0"].shape[0] == len(ids) == 80
        assert len(set(ids.tolist())) < 60  # about 40 distinct ids: each repeated one counts
    assert set(models["ppo2_mlp"]["kinds"]) == {"dense"}
