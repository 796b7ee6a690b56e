"""A JAX/optax training loop that clips its gradients the way a TF 1.x model did.

The TF 1.x recipe was::

    grads = tf.gradients(loss, params)
    grads = [tf.clip_by_value(g, -1.0, 1.0) for g in grads]
    grads, global_norm = tf.clip_by_global_norm(grads, 0.5)
    optimizer.apply_gradients(zip(grads, params))

The first loop writes exactly that with anyclip inside a ``jax.jit``-compiled step. The second
puts the same clipping into an ``optax.chain`` with the ``anyclip.optax`` transformations and
reads the pre-clip norm back from the optimizer state. Run it with
``python examples/jax_optax_tf1_style.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

import anyclip
import anyclip.optax

STEPS = 5
CLIP_VALUE = 1.0
CLIP_NORM = 0.5
LEARNING_RATE = 0.05


def make_problem() -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    params = {
        "w1": 0.3 * jax.random.normal(k1, (8, 16)),
        "b1": jnp.zeros(16),
        "w2": 0.3 * jax.random.normal(k2, (16, 1)),
        "b2": jnp.zeros(1),
    }
    x = jax.random.normal(k3, (64, 8))
    y = 10.0 * x[:, :1] - 3.0 * x[:, 1:2] + 5.0  # large targets: large gradients to clip
    return params, x, y


def loss_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


def train_functional() -> dict[str, jax.Array]:
    """Compute the grads, clip the list by value and by global norm, apply them."""
    params, x, y = make_problem()
    names = sorted(params)
    opt = optax.sgd(LEARNING_RATE)
    state = opt.init(params)

    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grad_list = [grads[k] for k in names]
        grad_list = [anyclip.clip_by_value(g, -CLIP_VALUE, CLIP_VALUE) for g in grad_list]
        grad_list, global_norm = anyclip.clip_by_global_norm(grad_list, CLIP_NORM)
        updates, state = opt.update(dict(zip(names, grad_list, strict=True)), state, params)
        return optax.apply_updates(params, updates), state, loss, global_norm

    for i in range(STEPS):
        params, state, loss, global_norm = step(params, state)
        print(f"step {i}: loss {float(loss):9.4f}  global norm before clipping {global_norm:.6f}")
    return params


def train_chain() -> dict[str, jax.Array]:
    """The same clipping as optax transformations; the norm is read from the state."""
    params, x, y = make_problem()
    tx = optax.chain(
        anyclip.optax.clip_by_value(-CLIP_VALUE, CLIP_VALUE),
        anyclip.optax.clip_by_global_norm(CLIP_NORM, norm_in_state=True),
        optax.sgd(LEARNING_RATE),
    )
    state = tx.init(params)

    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    for i in range(STEPS):
        params, state, loss = step(params, state)
        global_norm = state[1].global_norm  # ClipByGlobalNormState of the second transformation
        print(f"step {i}: loss {float(loss):9.4f}  global norm before clipping {global_norm:.6f}")
    return params


def main() -> None:
    print("functional: anyclip.clip_by_value + anyclip.clip_by_global_norm under jax.jit")
    a = train_functional()
    print("optax.chain: anyclip.optax.clip_by_value + anyclip.optax.clip_by_global_norm")
    b = train_chain()
    same = all(bool(jnp.array_equal(a[k], b[k])) for k in a)
    print(f"both loops end with the same parameters: {same}")


if __name__ == "__main__":
    main()
