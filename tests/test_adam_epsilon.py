"""The porting guide's table of Adam's epsilon placement (docs/porting.md), checked live.

TF 1.x's ``tf.compat.v1.train.AdamOptimizer`` and Keras 3's ``keras.optimizers.Adam`` add
epsilon to the square root of the *uncorrected* second moment and correct the learning rate
instead ("epsilon hat"); ``torch.optim.Adam`` and ``optax.adam`` add it to the square root of
the *bias-corrected* one. From the same gradient, the same learning rate and the same epsilon,
they take different steps wherever the gradient is not large next to epsilon, which clipped
gradients often are not. The reference for TF 1.x and Keras is TF itself: live (in a subprocess)
when TensorFlow is installed, and then also checked against the committed
``tests/data/adam_epsilon.npz``, else that file (``tests/data/make_adam_epsilon.py``). torch and
optax run here. Each optimizer's steps are compared with the closed form the table states.
"""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from .conftest import run_reference_script

#: One pytest-xdist worker runs this module: TF's script (module-scoped ``tf_reference``) runs once.
pytestmark = pytest.mark.xdist_group("adam-epsilon")

DATA = Path(__file__).with_name("data")
SCRIPT = DATA / "make_adam_epsilon.py"
gen = SimpleNamespace(**runpy.run_path(str(SCRIPT)))

#: The closed forms are float64; the optimizers run in float32 (Keras computes ``1 - beta_2``
#: in float32, 1.3e-5 off): a relative tolerance well below the differences the test shows.
RTOL = 1e-4
#: The two placements differ by more than this (relative) on the gradients below TF's
#: effective first-step epsilon ``eps / sqrt(1 - beta_2)``: the test could not pass with the
#: other placement.
APART = 0.5
SMALL = gen.GRAD < gen.EPSILON / np.sqrt(1 - gen.BETA_2)


@pytest.fixture(scope="module")
def tf_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """TF 1.x's and Keras's steps: live when TensorFlow is installed, else the committed file."""
    committed = dict(np.load(DATA / "adam_epsilon.npz"))
    if importlib.util.find_spec("tensorflow") is None:
        return committed
    out = tmp_path_factory.mktemp("adam") / "live.npz"
    run_reference_script(SCRIPT, out)
    live = dict(np.load(out))
    assert live.keys() == committed.keys()
    for k, v in live.items():
        if v.dtype.kind == "f":  # the committed file is still what TF gives
            np.testing.assert_allclose(v, committed[k], rtol=1e-6, atol=0, err_msg=k)
    return live


def adam_closed_form(step: int, *, epsilon_on: str, eps: float = gen.EPSILON) -> np.ndarray:
    """The variable after ``step`` steps of Adam from ``W0`` with gradient ``GRAD`` each time.

    ``epsilon_on="uncorrected"``: ``lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``
    (TF 1.x, Keras). ``"corrected"``: ``lr * m_hat / (sqrt(v_hat) + eps)`` (torch, optax).
    """
    g = gen.GRAD.astype(np.float64)
    w = gen.W0.astype(np.float64)
    m = np.zeros_like(g)
    v = np.zeros_like(g)
    for t in range(1, step + 1):
        m = gen.BETA_1 * m + (1 - gen.BETA_1) * g
        v = gen.BETA_2 * v + (1 - gen.BETA_2) * g * g
        c1, c2 = 1 - gen.BETA_1**t, 1 - gen.BETA_2**t
        if epsilon_on == "uncorrected":
            w = w - gen.LR * np.sqrt(c2) / c1 * m / (np.sqrt(v) + eps)
        else:
            w = w - gen.LR * (m / c1) / (np.sqrt(v / c2) + eps)
    return w


def assert_placement(steps: list[np.ndarray], epsilon_on: str, what: str) -> None:
    """``steps`` follow ``epsilon_on``'s closed form, and clearly not the other one."""
    other = "corrected" if epsilon_on == "uncorrected" else "uncorrected"
    for k, w in enumerate(steps, 1):
        assert w.dtype == np.float32, what
        assert w.shape == gen.GRAD.shape, what
        want = adam_closed_form(k, epsilon_on=epsilon_on)
        np.testing.assert_allclose(w, want, rtol=RTOL, atol=0, err_msg=f"{what}, step {k}")
        away = adam_closed_form(k, epsilon_on=other)
        gap = np.abs(w[SMALL] - away[SMALL]) / np.abs(away[SMALL])
        assert np.all(gap > APART), f"{what}, step {k}: {gap}"


def test_tf1_adam_adds_epsilon_before_the_bias_correction(tf_reference):
    steps = [tf_reference[f"tf1/{k}"] for k in range(1, gen.STEPS + 1)]
    assert_placement(steps, "uncorrected", "tf.compat.v1.train.AdamOptimizer")


def test_keras_adam_adds_epsilon_before_the_bias_correction(tf_reference):
    steps = [tf_reference[f"keras/{k}"] for k in range(1, gen.STEPS + 1)]
    assert_placement(steps, "uncorrected", "keras.optimizers.Adam")


def _torch_steps(eps: float) -> list[np.ndarray]:
    torch = pytest.importorskip("torch")
    w = torch.nn.Parameter(torch.from_numpy(gen.W0.copy()))
    opt = torch.optim.Adam([w], lr=gen.LR, betas=(gen.BETA_1, gen.BETA_2), eps=eps)
    steps = []
    for _ in range(gen.STEPS):
        w.grad = torch.from_numpy(gen.GRAD.copy())
        opt.step()
        steps.append(w.detach().numpy().copy())
    return steps


def test_torch_adam_adds_epsilon_after_the_bias_correction():
    assert_placement(_torch_steps(gen.EPSILON), "corrected", "torch.optim.Adam")


def test_optax_adam_adds_epsilon_after_the_bias_correction():
    pytest.importorskip("optax")
    import jax.numpy as jnp
    import optax

    tx = optax.adam(gen.LR, b1=gen.BETA_1, b2=gen.BETA_2, eps=gen.EPSILON)
    w = jnp.asarray(gen.W0)
    state = tx.init(w)
    steps = []
    for _ in range(gen.STEPS):
        updates, state = tx.update(jnp.asarray(gen.GRAD), state, w)
        w = optax.apply_updates(w, updates)
        steps.append(np.asarray(w))
    assert_placement(steps, "corrected", "optax.adam")


def test_tf_epsilon_is_torch_epsilon_over_sqrt_of_the_correction(tf_reference):
    # the table's conversion: TF's epsilon at step t is torch's eps / sqrt(1 - beta_2**t), so
    # one step of torch with eps / sqrt(1 - beta_2) is TF's first step (and no constant
    # epsilon gives every step)
    (first, *_) = _torch_steps(gen.EPSILON / np.sqrt(1 - gen.BETA_2))
    np.testing.assert_allclose(first, tf_reference["tf1/1"], rtol=RTOL, atol=0)
    np.testing.assert_allclose(first, tf_reference["keras/1"], rtol=RTOL, atol=0)
