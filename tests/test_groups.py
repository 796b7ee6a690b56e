"""Per-group norms and limits: ``tree.global_norm(groups=)``, ``anyclip.torch`` ``groups=``.

The contract: each group's norm equals the norm of that group alone, bit for bit (the single-group
function is checked against TF elsewhere), and its value is the exact norm of the group computed
here in float64 (within the ULP budget of a float32 reduction); torch's ``get_total_norm`` on
each group is the reference for the torch adapter. The one-all-reduce promise is checked in
``tests/test_distributed_torch.py`` (scenario ``groups``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pytest

from anyclip import tree
from anyclip_conformance import Backend, assert_same_bits

ULP = 3
torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)

ENC_W = [[3.0, -4.0, 0.5], [1.0, 2.0, -2.0]]
ENC_B = [12.0, -0.25]
DEC_W = [[0.75, -1.5]]
HEAD = [7.0, 24.0]


class Pair(NamedTuple):
    w: Any
    b: Any


def exact(*arrays: Any) -> float:
    return math.sqrt(sum(float(np.sum(np.asarray(a, np.float64) ** 2)) for a in arrays))


def grads_tree(make: Any, dtype: str = "float32", head_dtype: str | None = None) -> dict:
    return {
        "enc": Pair(make(ENC_W, dtype), make(ENC_B, dtype)),
        "dec": {"w": make(DEC_W, dtype), "b": None},
        "head": [make(HEAD, head_dtype or dtype)],
    }


LABELS = {"enc": "body", "dec": {"w": "body", "b": "body"}, "head": ["head"]}


# ------------------------------------------------------------------ anyclip.tree
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_tree_group_norms_are_each_groups_norm(backend, make, check, dtype):
    g = grads_tree(make, dtype)
    out = tree.global_norm(g, groups=LABELS)
    assert list(out) == ["body", "head"]
    alone = {
        "body": tree.global_norm([g["enc"], g["dec"]]),
        "head": tree.global_norm(g["head"]),
    }
    for name, arrays in (("body", [ENC_W, ENC_B, DEC_W]), ("head", [HEAD])):
        check(out[name], exact(*arrays), dtype, ULP if dtype == "float32" else 1, name)
        assert_same_bits(backend, out[name], alone[name])


def test_tree_groups_widest_is_per_group(backend, make, check):
    # body float16 (summed in float16 alone), head float32: each group keeps its own dtype
    g = grads_tree(make, "float16", head_dtype="float32")
    out = tree.global_norm(g, groups=LABELS)
    check(out["body"], exact(ENC_W, ENC_B, DEC_W), "float16", 1)
    check(out["head"], 25.0, "float32", 0)
    assert_same_bits(backend, out["body"], tree.global_norm([g["enc"], g["dec"]]))


def test_tree_groups_labels_forms(backend, make, check):
    g = grads_tree(make)
    # a callable, as optax.multi_transform's param_labels; int names
    out = tree.global_norm(g, groups=lambda t: {k: i for i, k in enumerate(t)})
    assert list(out) == [0, 1, 2]
    check(out[0], exact(ENC_W, ENC_B), "float32", ULP)
    check(out[1], exact(DEC_W), "float32", ULP)
    check(out[2], 25.0, "float32", 0)
    # a group holding only None leaves has norm 0, in the float32 of TF's empty global_norm
    out = tree.global_norm(g, groups={"enc": "e", "dec": {"w": "w", "b": "none"}, "head": "e"})
    check(out["none"], 0.0, "float32", 0)
    check(out["e"], exact(ENC_W, ENC_B, HEAD), "float32", ULP)


@pytest.mark.parametrize(
    ("labels", "error", "match"),
    [
        ({"enc": "a", "head": "b"}, ValueError, r"tree has key 'dec'"),
        ({"enc": "a", "dec": "a", "head": ["a", "b"]}, ValueError, r"1 children.*2 labels"),
        ({"enc": "a", "dec": "a", "head": [1.5]}, TypeError, r"got float at groups\['head'\]"),
        ({"enc": "a", "dec": "a", "head": {"x": "a"}}, ValueError, r"got dict where the tree has"),
    ],
)
def test_tree_groups_errors(backend, make, labels, error, match):
    with pytest.raises(error, match=match):
        tree.global_norm(grads_tree(make), groups=labels)


@pytest.mark.parametrize("backend", ["jax"], indirect=True)
def test_tree_groups_under_jit(backend, make, check):
    jax = backend.module
    g = grads_tree(make)
    out = jax.jit(lambda t: tree.global_norm(t, groups=LABELS))(g)
    eager = tree.global_norm(g, groups=LABELS)
    for name in ("body", "head"):
        check(out[name], float(np.asarray(eager[name])), "float32", 2, name)


# ------------------------------------------------------------------ anyclip.torch
def _params(backend: Backend, grads: list, dtype: str = "float32") -> list:
    torch = backend.module
    out = []
    for g in grads:
        p = torch.nn.Parameter(
            torch.zeros(np.shape(g), dtype=backend.dtype(dtype), device=backend.device)
        )
        p.grad = backend.asarray(g, dtype)
        out.append(p)
    return out


@torch_backends
@pytest.mark.parametrize("norm_type", [2.0, math.inf, 1.0])
def test_get_total_norm_groups_match_torch(backend, check, norm_type):
    import anyclip.torch as at

    torch = backend.module
    body = [backend.asarray(a, "float32") for a in (ENC_W, ENC_B, DEC_W)]
    head = [backend.asarray(HEAD, "float32")]
    out = at.get_total_norm(None, norm_type, groups={"body": body, "head": head})
    for name, ts in (("body", body), ("head", head)):
        want = torch.nn.utils.get_total_norm(ts, norm_type)
        check(out[name], want.double().cpu().numpy(), "float32", ULP, name)
        assert_same_bits(backend, out[name], at.get_total_norm(ts, norm_type))


@torch_backends
def test_get_total_norm_groups_other_forms(backend, check):
    import anyclip.torch as at

    torch = backend.module
    params = _params(backend, [ENC_W, ENC_B, HEAD])
    params.append(torch.nn.Parameter(torch.zeros(3, device=backend.device)))  # no gradient: skipped
    opt = torch.optim.SGD([{"params": params[:2], "name": "enc"}, {"params": params[2:]}], lr=0.1)
    # an optimizer's param_groups: the norms of the gradients, by "name" or index
    out = at.get_total_norm(None, groups=opt.param_groups)
    assert list(out) == ["enc", 1]
    check(out["enc"], exact(ENC_W, ENC_B), "float32", ULP)
    check(out[1], 25.0, "float32", 0)
    # one name per tensor
    grads = [p.grad for p in params[:3]]
    out = at.get_total_norm(grads, groups=["x", "y", "x"])
    check(out["x"], exact(ENC_W, HEAD), "float32", ULP)
    check(out["y"], exact(ENC_B), "float32", ULP)


@torch_backends
@pytest.mark.parametrize("norm_type", [2.0, math.inf, 1.0])
def test_groups_without_gradients_give_torchs_empty_norm(backend, norm_type):
    # fuzzing round 4 (issue 28): with no gradient in any group, norm_type=2 gave NumPy
    # array(0.) per group (nothing named a library); torch's get_total_norm([]) is a tensor
    import anyclip.torch as at

    torch = backend.module
    want = torch.nn.utils.get_total_norm([], norm_type)
    params = _params(backend, [ENC_W, HEAD])
    for p in params:
        p.grad = None
    opt = torch.optim.SGD([{"params": params[:1], "name": "a"}, {"params": params[1:]}], lr=0.1)
    for out in (
        at.get_total_norm(None, norm_type, groups={"a": [], "b": []}),
        at.get_total_norm(None, norm_type, groups=opt.param_groups),
        at.clip_grad_norm_(None, 1.0, norm_type, groups=opt.param_groups),
        at.clip_grad_norm_(params, 1.0, norm_type, groups=["a", "b"]),
    ):
        assert len(out) == 2
        for norm in out.values():
            assert isinstance(norm, torch.Tensor), type(norm)
            assert (norm.dtype, norm.device, norm.shape) == (want.dtype, want.device, want.shape)
            assert torch.equal(norm, want)


@torch_backends
def test_clip_grad_norm_per_group_limits(backend, check):
    import anyclip.torch as at

    body = _params(backend, [ENC_W, ENC_B])
    head = _params(backend, [HEAD])
    frozen = _params(backend, [DEC_W])
    limits = {"body": 2.0, "head": 100.0, "frozen": None}
    out = at.clip_grad_norm_(None, limits, groups={"body": body, "head": head, "frozen": frozen})
    # the reference: anyclip's single-group clip on copies, and TF's factor in float64
    for name, ps, data in (("body", body, [ENC_W, ENC_B]), ("head", head, [HEAD])):
        n = exact(*data)
        check(out[name], n, "float32", ULP, name)
        copies = _params(backend, data)
        assert_same_bits(backend, out[name], at.clip_grad_norm_(copies, limits[name]))
        c = limits[name]
        for p, q, d in zip(ps, copies, data, strict=True):
            assert_same_bits(backend, p.grad, q.grad)
            check(p.grad, np.asarray(d, np.float64) * (c * min(1 / n, 1 / c)), "float32", ULP)
    check(out["frozen"], exact(DEC_W), "float32", ULP)
    check(frozen[0].grad, DEC_W, "float32", 0)  # None: measured, not clipped


@torch_backends
def test_clip_grad_norm_groups_one_limit_and_labels(backend, check):
    import anyclip.torch as at

    params = _params(backend, [ENC_W, ENC_B, HEAD])
    out = at.clip_grad_norm_(params, 1.0, groups=["a", "a", "b"])
    check(out["b"], 25.0, "float32", 0)
    check(params[2].grad, np.asarray(HEAD) / 25.0, "float32", ULP)
    n = exact(ENC_W, ENC_B)
    check(params[1].grad, np.asarray(ENC_B) / n, "float32", ULP)


@torch_backends
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_norm": {"a": 1.0}}, ValueError, r"no limit for \['b'\]"),
        ({"max_norm": {"a": 1.0, "b": 1.0, "c": 1.0}}, ValueError, r"unknown groups \['c'\]"),
        ({"max_norm": 1.0, "parameters": "params"}, TypeError, r"`parameters` must be None"),
        ({"max_norm": 1.0, "groups": "ab"}, TypeError, r"`groups` must be a dict"),
    ],
)
def test_clip_grad_norm_groups_errors(backend, kwargs, error, match):
    import anyclip.torch as at

    params = _params(backend, [ENC_B, HEAD])
    call = {"parameters": None, "groups": {"a": params[:1], "b": params[1:]}, **kwargs}
    if call["parameters"] == "params":
        call["parameters"] = params
    with pytest.raises(error, match=match):
        at.clip_grad_norm_(**call)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_clip_grad_norm_groups_compiles_fullgraph(backend, check):
    import anyclip.torch as at

    torch = backend.module
    body, head = _params(backend, [ENC_W, ENC_B]), _params(backend, [HEAD])

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(limit: Any) -> Any:
        return at.clip_grad_norm_(
            None, {"body": limit, "head": None}, groups={"body": body, "head": head}
        )

    out = step(torch.tensor(1.0))
    n = exact(ENC_W, ENC_B)
    check(out["body"], n, "float32", ULP)
    check(body[1].grad, np.asarray(ENC_B) / n, "float32", ULP)
    check(head[0].grad, HEAD, "float32", 0)
