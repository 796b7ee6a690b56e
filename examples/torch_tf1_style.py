"""A PyTorch training loop that clips its gradients the way a TF 1.x model did.

The TF 1.x recipe was::

    grads = tf.gradients(loss, params)
    grads = [tf.clip_by_value(g, -1.0, 1.0) for g in grads]
    grads, global_norm = tf.clip_by_global_norm(grads, 0.5)
    optimizer.apply_gradients(zip(grads, params))

anyclip runs the same two functions, with TF's formulas, on torch tensors. The second loop does
the same with the in-place adapter ``anyclip.torch``, a drop-in for
``torch.nn.utils.clip_grad_norm_``. Run it with ``python examples/torch_tf1_style.py``.
"""

from __future__ import annotations

import torch

import anyclip
import anyclip.torch

STEPS = 5
CLIP_VALUE = 1.0
CLIP_NORM = 0.5


def report(step: int, loss: torch.Tensor, global_norm: torch.Tensor) -> None:
    print(f"step {step}: loss {loss.item():9.4f}  global norm before clipping {global_norm:.6f}")


def make_problem() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    x = torch.randn(64, 8)
    y = 10.0 * x[:, :1] - 3.0 * x[:, 1:2] + 5.0  # large targets: large gradients to clip
    return model, x, y


def train_functional() -> list[torch.Tensor]:
    """Compute the grads, clip the list by value and by global norm, apply them."""
    model, x, y = make_problem()
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.05)
    for step in range(STEPS):
        loss = torch.nn.functional.mse_loss(model(x), y)
        grads = torch.autograd.grad(loss, params)
        grads = [anyclip.clip_by_value(g, -CLIP_VALUE, CLIP_VALUE) for g in grads]
        grads, global_norm = anyclip.clip_by_global_norm(grads, CLIP_NORM)
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        opt.step()
        report(step, loss, global_norm)
    return [p.detach().clone() for p in params]


def train_in_place() -> list[torch.Tensor]:
    """The same loop with the in-place adapter, as one would use torch's clip_grad_norm_."""
    model, x, y = make_problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        anyclip.torch.clip_grad_value_(model.parameters(), CLIP_VALUE)
        global_norm = anyclip.torch.clip_grad_norm_(model.parameters(), max_norm=CLIP_NORM)
        opt.step()
        report(step, loss, global_norm)
    return [p.detach().clone() for p in model.parameters()]


def main() -> None:
    print("functional: anyclip.clip_by_value + anyclip.clip_by_global_norm")
    a = train_functional()
    print("in place: anyclip.torch.clip_grad_value_ + anyclip.torch.clip_grad_norm_")
    b = train_in_place()
    same = all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    print(f"both loops end with the same parameters: {same}")


if __name__ == "__main__":
    main()
