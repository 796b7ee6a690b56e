"""Loss-scaler-aware clipping: ``clip_grad_norm_(..., scaler=, optimizer=)`` against torch's recipe.

The reference is torch's documented AMP loop (``scaler.scale(loss).backward()``,
``scaler.unscale_(optimizer)``, clip, ``scaler.step(optimizer)``, ``scaler.update()``) with a
real ``torch.amp.GradScaler``, run side by side on a copy of the model over a sequence of steps
with an overflow injected: the norms, the parameters and the scale must be the same bit for bit
at every step, and each norm is torch's ``get_total_norm`` of the unscaled gradients.
"""

from __future__ import annotations

import copy
import math

import pytest

from anyclip_conformance import assert_same_bits

ULP = 3
torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
#: the step whose loss overflows (inf gradients): GradScaler skips it and halves the scale
OVERFLOW_STEP = 2


def _setup(backend):
    torch = backend.module
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    model = model.to(backend.device)
    data = [torch.randn(5, 4, generator=gen).to(backend.device) for _ in range(5)]
    return model, data


def _scaler(backend):
    torch = backend.module
    kind = "cuda" if backend.name == "torch-cuda" else "cpu"
    return torch.amp.GradScaler(kind, init_scale=2.0**12, growth_interval=2)


def _loss(model, x, step):
    loss = model(x).square().sum()
    return loss * math.inf if step == OVERFLOW_STEP else loss


@torch_backends
def test_scaler_matches_torchs_unscale_then_clip(backend, check):
    import anyclip.torch as at

    torch = backend.module
    ours, data = _setup(backend)
    ref = copy.deepcopy(ours)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours, ref))
    scaler, ref_scaler = _scaler(backend), _scaler(backend)
    for step, x in enumerate(data):
        for m, o, s in ((ours, opt, scaler), (ref, ref_opt, ref_scaler)):
            o.zero_grad()
            s.scale(_loss(m, x, step)).backward()
        ref_scaler.unscale_(ref_opt)
        unscaled = [p.grad.clone() for p in ref.parameters()]
        want = at.clip_grad_norm_(ref.parameters(), 1.0)
        norm = at.clip_grad_norm_(ours.parameters(), 1.0, scaler=scaler, optimizer=opt)
        assert_same_bits(backend, norm, want)
        if step != OVERFLOW_STEP:  # the unscaled norm, as torch computes it
            theirs = torch.nn.utils.get_total_norm(unscaled)
            check(norm, theirs.double().cpu().numpy(), "float32", ULP)
        before = [p.detach().clone() for p in ours.parameters()]
        scale = scaler.get_scale()
        for s, o in ((scaler, opt), (ref_scaler, ref_opt)):
            s.step(o)
            s.update()
        assert scaler.get_scale() == ref_scaler.get_scale(), step
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert_same_bits(backend, p, q)
        if step == OVERFLOW_STEP:  # skipped by scaler.step, and the scale backed off
            assert scaler.get_scale() == scale / 2
            for p, b in zip(ours.parameters(), before, strict=True):
                assert_same_bits(backend, p.detach(), b)


@torch_backends
def test_second_call_in_a_step_does_not_unscale_again(backend, check):
    import anyclip.torch as at

    torch = backend.module
    ours, data = _setup(backend)
    ref = copy.deepcopy(ours)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours, ref))
    scaler, ref_scaler = _scaler(backend), _scaler(backend)
    for m, s in ((ours, scaler), (ref, ref_scaler)):
        s.scale(_loss(m, data[0], 0)).backward()
    ref_scaler.unscale_(ref_opt)
    with pytest.raises(RuntimeError, match="already been called"):  # torch's own
        ref_scaler.unscale_(ref_opt)
    want = at.clip_grad_norm_(ref.parameters(), 1.0)
    # a first call that only reads the norm (inf: unchanged), then the clip
    first = at.clip_grad_norm_(ours.parameters(), math.inf, scaler=scaler, optimizer=opt)
    second = at.clip_grad_norm_(ours.parameters(), 1.0, scaler=scaler, optimizer=opt)
    assert_same_bits(backend, first, want)
    assert_same_bits(backend, second, want)
    for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
        assert_same_bits(backend, p.grad, q.grad)


@torch_backends
def test_disabled_scaler_is_a_plain_clip(backend):
    import anyclip.torch as at

    torch = backend.module
    ours, data = _setup(backend)
    ref = copy.deepcopy(ours)
    opt = torch.optim.SGD(ours.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    for m in (ours, ref):
        scaler.scale(_loss(m, data[0], 0)).backward()
    norm = at.clip_grad_norm_(ours.parameters(), 1.0, scaler=scaler, optimizer=opt)
    assert_same_bits(backend, norm, at.clip_grad_norm_(ref.parameters(), 1.0))


@torch_backends
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scaler": "scaler"}, r"`scaler` needs `optimizer` too"),
        ({"optimizer": "opt"}, r"`optimizer` needs `scaler` too"),
        ({"scaler": "opt", "optimizer": "opt"}, r"`scaler` must be a torch\.amp\.GradScaler"),
        ({"scaler": "scaler", "optimizer": "scaler"}, r"`optimizer` must be a torch\.optim"),
    ],
)
def test_scaler_argument_errors(backend, kwargs, match):
    import anyclip.torch as at

    torch = backend.module
    model, _ = _setup(backend)
    objects = {"scaler": _scaler(backend), "opt": torch.optim.SGD(model.parameters(), lr=0.1)}
    with pytest.raises(TypeError, match=match):
        at.clip_grad_norm_(model.parameters(), 1.0, **{k: objects[v] for k, v in kwargs.items()})


def test_torch_grad_scaler_keeps_the_stage_anyclip_reads():
    # anyclip.torch._scaler.already_unscaled reads GradScaler's private per-optimizer stage
    # (torch has no public accessor): this fails loudly when a torch release changes it
    torch = pytest.importorskip("torch")
    from torch.amp.grad_scaler import OptState

    from anyclip.torch._scaler import already_unscaled

    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    scaler.scale(torch.ones(()))  # a step starts by scaling the loss
    p.grad = torch.full((3,), 8.0)
    assert already_unscaled(scaler, opt) is False
    assert id(opt) not in scaler._per_optimizer_states  # reading creates no entry
    scaler.unscale_(opt)
    state = scaler._per_optimizer_states[id(opt)]
    assert isinstance(state, dict) and state["stage"] is OptState.UNSCALED
    assert already_unscaled(scaler, opt) is True
    scaler.step(opt)
    assert scaler._per_optimizer_states[id(opt)]["stage"] is OptState.STEPPED
    assert already_unscaled(scaler, opt) is False
    scaler.update()
    assert already_unscaled(scaler, opt) is False
    # a changed layout is an error naming the fix, never a silent second unscale
    scaler._per_optimizer_states = None
    with pytest.raises(RuntimeError, match=r"call scaler\.unscale_\(optimizer\) yourself"):
        already_unscaled(scaler, opt)
