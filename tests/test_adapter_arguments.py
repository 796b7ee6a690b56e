"""The adapters' arguments, checked when given, named as the caller wrote them (issue 22, 11).

optax builds a transform first and updates later: an argument no update could use must be
refused by the constructor, with anyclip's message naming the caller's argument (``max_norm``
where the user wrote ``max_norm``), not by the first ``update`` with a backend's ``TypeError``.
The references are the libraries themselves: what ``optax.clip`` and
``optax.clip_by_global_norm`` take (a number, a NumPy scalar, an array of any real dtype, an
``inject_hyperparams`` tracer), the drop-ins take too; what torch's ``clip_grad_value_`` refuses
with no gradient at all (it converts its argument first), anyclip's torch functions refuse
without a gradient too. ``accumulate_dtype="widest"`` (the widest dtype of several arrays) is
refused by every function of one array, where it could only mean the array's own dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip import tree

from .conftest import ULP_CLIP_NORM, ULP_GLOBAL

jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)
torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)


@pytest.fixture
def ao(backend):
    pytest.importorskip("optax")
    return pytest.importorskip("anyclip.optax")


@pytest.fixture
def at(backend):
    return pytest.importorskip("anyclip.torch")


def _update(tx: Any, updates: Any) -> Any:
    return tx.update(updates, tx.init(updates))[0]


#: (anyclip.optax constructor, optax's counterpart or None, argument, bad value, class)
BAD = [
    ("clip", "clip", "max_delta", "x", TypeError),
    ("clip", "clip", "max_delta", [1.0, 2.0], TypeError),
    ("clip", "clip", "max_delta", None, ValueError),
    ("clip", "clip", "max_delta", 1j, TypeError),
    ("clip_by_global_norm", "clip_by_global_norm", "max_norm", "x", TypeError),
    ("clip_by_global_norm", "clip_by_global_norm", "max_norm", object(), TypeError),
    ("clip_by_global_norm", None, "clip_norm", "x", TypeError),
    ("clip_by_value", None, "clip_value_min", "x", TypeError),
    ("clip_by_value", None, "clip_value_max", None, ValueError),
    ("clip_by_norm", None, "clip_norm", "1.0", TypeError),
    ("clip_by_norm", None, "axes", 1.5, TypeError),
    ("clip_by_norm", None, "accumulate_dtype", "int32", TypeError),
    ("clip_by_norm", None, "accumulate_dtype", "widest", ValueError),
    ("clip_by_global_norm", None, "accumulate_dtype", "int32", TypeError),
    ("clip_by_global_norm", None, "group", 5, TypeError),
]
GOOD = {"clip_value_min": -1.0, "clip_value_max": 1.0, "clip_norm": 1.0}


def _kwargs(ctor: str, arg: str, value: Any) -> dict[str, Any]:
    needs = {
        "clip": ["max_delta"],
        "clip_by_global_norm": ["max_norm"] if arg != "clip_norm" else [],
        "clip_by_value": ["clip_value_min", "clip_value_max"],
        "clip_by_norm": ["clip_norm"],
    }[ctor]
    kwargs: dict[str, Any] = {n: GOOD.get(n, 1.0) for n in needs}
    kwargs[arg] = value
    return kwargs


@jax_backends
@pytest.mark.parametrize(("ctor", "ref", "arg", "value", "cls"), BAD)
def test_optax_refuses_at_construction(backend, ao, make, ctor, ref, arg, value, cls):
    optax = pytest.importorskip("optax")
    if ref is not None:  # optax's own takes it and fails at the first update
        tx = getattr(optax, ref)(value)
        with pytest.raises(Exception):  # noqa: B017 - optax's raw backend error
            _update(tx, [make([3.0, 4.0])])
    with pytest.raises(cls, match=rf"`{arg}`"):
        getattr(ao, ctor)(**_kwargs(ctor, arg, value))


def _values(backend: Any, dtype: str) -> list[Any]:
    jnp = backend.module.numpy
    return [1, 1.0, np.float32(1.0), jnp.asarray(1.0), jnp.asarray(1, dtype=dtype)]


@jax_backends
@pytest.mark.parametrize("dtype", ["int32", "bfloat16", "float32"])
def test_optax_clip_takes_what_optax_takes(backend, ao, make, check, dtype):
    optax = pytest.importorskip("optax")
    updates = [make([-2.0, 0.25, 3.0])]
    for value in _values(backend, dtype):
        ours = _update(ao.clip(value), updates)
        theirs = _update(optax.clip(value), updates)
        check(ours[0], np.asarray(theirs[0]), "float32")  # elementwise: bit for bit
        injected = optax.inject_hyperparams(ao.clip)(max_delta=value)
        check(_update(injected, updates)[0], np.asarray(theirs[0]), "float32")


@jax_backends
@pytest.mark.parametrize("dtype", ["int32", "bfloat16", "float32"])
def test_optax_clip_by_global_norm_takes_what_optax_takes(backend, ao, make, check, dtype):
    optax = pytest.importorskip("optax")
    updates = [make([3.0, 4.0]), make([[12.0]])]
    jnp = backend.module.numpy
    for value in [6.5, np.float32(6.5), jnp.asarray(6.5), jnp.asarray(6.5, dtype=dtype)]:
        if dtype == "int32" and not isinstance(value, float):
            value = jnp.asarray(13, dtype=dtype)
        _update(optax.clip_by_global_norm(value), updates)  # optax takes it
        expected = [1.5, 2.0] if float(value) == 6.5 else [3.0, 4.0]  # §4.2
        ours = _update(ao.clip_by_global_norm(value), updates)
        check(ours[0], expected, "float32", ULP_GLOBAL)
        injected = optax.inject_hyperparams(ao.clip_by_global_norm)(max_norm=value)
        check(_update(injected, updates)[0], expected, "float32", ULP_GLOBAL)


@jax_backends
def test_optax_update_error_names_max_norm(backend, ao, make):
    tx = ao.clip_by_global_norm(backend.module.numpy.ones(3))  # 3 norms for 2 elements
    with pytest.raises(ValueError, match=r"`max_norm` of shape \(3,\)"):
        _update(tx, [make([3.0, 4.0])])


# -------------------------------------------------------------------------------- torch
@torch_backends
def test_torch_refuses_without_a_gradient(backend, at):
    torch = backend.module
    p = torch.nn.Parameter(torch.zeros(2, device=backend.device))  # no .grad
    with pytest.raises(ValueError):  # torch's own converts first
        torch.nn.utils.clip_grad_value_([p], "x")
    with pytest.raises(TypeError, match="`clip_value_min`"):
        at.clip_grad_by_value_([p], "x", 1.0)
    with pytest.raises(ValueError, match="`clip_value_max`"):
        at.clip_grad_by_value_([p], 0.0, None)
    with pytest.raises(TypeError, match="`clip_norm`"):
        at.clip_grad_by_norm_([p], "x")
    with pytest.raises(TypeError, match="`axes`"):
        at.clip_grad_by_norm_([p], 1.0, axes=0.5)
    with pytest.raises(TypeError, match="`accumulate_dtype`"):
        at.clip_grad_norm_([p], 1.0, accumulate_dtype="bogus")


@torch_backends
def test_torch_takes_what_it_took(backend, at, make, check):
    torch = backend.module
    p = torch.nn.Parameter(torch.zeros(2, device=backend.device))
    p.grad = make([3.0, 4.0])
    at.clip_grad_by_norm_([p], torch.tensor(1.0, device=backend.device))
    check(p.grad, [0.6, 0.8], "float32", ULP_CLIP_NORM)


# ----------------------------------------------------- accumulate_dtype="widest", one array
ONE_ARRAY = {
    "clip_by_norm": lambda t: anyclip.clip_by_norm(t, 1.0, accumulate_dtype="widest"),
    "norm": lambda t: anyclip.norm(t, accumulate_dtype="widest"),
    "norm-ord-1": lambda t: anyclip.norm(t, ord=1, accumulate_dtype="widest"),
    "l2_normalize": lambda t: anyclip.l2_normalize(t, accumulate_dtype="widest"),
    "l2_normalize-axis": lambda t: anyclip.l2_normalize(t, 0, accumulate_dtype="widest"),
    "tree.clip_by_norm": lambda t: tree.clip_by_norm([t], 1.0, accumulate_dtype="widest"),
}


@pytest.mark.parametrize("call", list(ONE_ARRAY))
def test_widest_refused_for_one_array(backend, make, call):
    with pytest.raises(ValueError, match=r"`accumulate_dtype` must be None or a floating dtype"):
        ONE_ARRAY[call](make([3.0, 4.0]))


@pytest.mark.parametrize("acc", [None, "float64"])
def test_one_array_takes_none_and_dtypes(backend, make, check, acc):
    if acc == "float64" and not backend.has_dtype("float64"):
        pytest.skip(f"{backend.name} has no float64")
    check(
        anyclip.clip_by_norm(make([3.0, 4.0]), 1.0, accumulate_dtype=acc),
        [0.6, 0.8],
        "float32",
        ULP_CLIP_NORM,
    )


@torch_backends
@pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled")
def test_torch_clip_grad_norm_takes_a_sparse_max_norm_as_torch(backend, at, make, check):
    torch = backend.module
    max_norm = torch.sparse_coo_tensor(
        torch.tensor([[0, 0]], device=backend.device), make([0.5, 0.5]), (1,)
    )  # one value stored twice: 1.0 once summed, as torch's own arithmetic densifies it
    grads = []
    for fn in (torch.nn.utils.clip_grad_norm_, at.clip_grad_norm_):
        p = torch.nn.Parameter(torch.zeros(2, device=backend.device))
        p.grad = make([3.0, 4.0])
        norm = fn([p], max_norm)
        check(norm, 5.0, "float32", ULP_GLOBAL)
        grads.append(p.grad)
    check(grads[1], grads[0].cpu().numpy(), "float32", ULP_GLOBAL)  # torch adds 1e-6
    check(grads[1], [0.6, 0.8], "float32", ULP_GLOBAL)


@jax_backends
def test_optax_takes_a_bcoo_max_norm(backend, ao, make, check):
    from jax.experimental import sparse

    max_norm = sparse.BCOO.fromdense(backend.module.numpy.asarray([6.5]))
    ours = _update(ao.clip_by_global_norm(max_norm), [make([3.0, 4.0]), make([[12.0]])])
    check(ours[0], [1.5, 2.0], "float32", ULP_GLOBAL)
