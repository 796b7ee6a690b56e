"""Drop-in fidelity of ``anyclip.torch`` and ``anyclip.optax``, against torch's and optax's own.

Every expectation here is torch's own function (``torch.nn.utils``) or optax's own
transformation called on the same inputs, or TF's behaviour cited from docs/tf-reference.md:

* ``max_norm=inf`` leaves the gradients (updates) unchanged, bit for bit, as torch's clamped
  coefficient and optax's ``select`` do (TF's formula gives ``inf * 0 = NaN``); the functional
  API and the Keras ports keep TF's NaN (docs/tf-reference.md §4.2, "clip nan / inf").
* A bad argument raises the exception class torch raises for it (the wording is ours: it
  names the argument and the fix), except for the deviations declared in ``DEVIATIONS``
  (and in docs/porting.md), which are asserted too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import anyclip
from anyclip_conformance import Backend, assert_array, assert_same_bits

ULP = 3

torch_backends = pytest.mark.parametrize("backend", ["torch", "torch-cuda"], indirect=True)
jax_backends = pytest.mark.parametrize("backend", ["jax", "jax-gpu"], indirect=True)

GRADS = [[[3.0, -4.0, 0.5], [1.0, 2.0, -2.0]], [12.0, -0.25], [[[0.75]]]]


@pytest.fixture
def at(backend):
    return pytest.importorskip("anyclip.torch")


@pytest.fixture
def ao(backend):
    pytest.importorskip("optax")
    return pytest.importorskip("anyclip.optax")


def _params(backend: Backend, grads: list) -> list:
    torch = backend.module
    out = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(np.shape(g), device=backend.device))
        p.grad = backend.asarray(g, "float32")
        out.append(p)
    return out


def _inf(kind: str, backend: Backend) -> Any:
    """``max_norm = inf`` as a torch user writes it."""
    if kind == "float":
        return math.inf
    if kind == "str":
        return "inf"  # torch converts max_norm with float(), so 'inf' works there
    dtype = {"tensor": "float32", "tensor64": "float64"}[kind]
    return backend.asarray(np.array(np.inf), dtype)


# ======================================================== D4: torch, max_norm = inf
@torch_backends
@pytest.mark.parametrize("kind", ["float", "str", "tensor", "tensor64"])
@pytest.mark.parametrize("foreach", [None, False, True])
@pytest.mark.parametrize(
    "grads",
    [GRADS, [[0.0, 0.0], [[0.0]]], [[math.inf, 1.0], [2.0]], [[math.nan, 1.0], [2.0]]],
    ids=["finite", "zero", "inf", "nan"],
)
def test_clip_grad_norm_inf_max_norm_is_torchs(backend, at, kind, foreach, grads):
    # torch's idiom clip_grad_norm_(params, inf), used to read the norm: gradients unchanged
    # for a finite norm (bit for bit), NaN for a non-finite one, as torch's own
    torch = backend.module
    ours, theirs = _params(backend, grads), _params(backend, grads)
    before = [p.grad.clone() for p in ours]
    n_ours = at.clip_grad_norm_(ours, _inf(kind, backend), foreach=foreach)
    n_theirs = torch.nn.utils.clip_grad_norm_(theirs, _inf(kind, backend), foreach=foreach)
    assert_array(n_ours, backend.to_numpy(n_theirs), backend=backend, dtype="float32", ulp=ULP)
    finite = bool(torch.isfinite(n_theirs))
    for o, t, b in zip(ours, theirs, before, strict=True):
        if finite:
            assert_same_bits(backend, t.grad, b, "torch's own leaves them")  # the premise
            assert_same_bits(backend, o.grad, b, "unchanged, bit for bit")
        else:
            assert_array(o.grad, backend.to_numpy(t.grad), backend=backend, dtype="float32")


@torch_backends
@pytest.mark.parametrize("kind", ["float", "str", "tensor", "tensor64"])
@pytest.mark.parametrize("total", [13.0, 0.0, math.inf, math.nan])
def test_clip_grads_with_norm_inf_max_norm_is_torchs(backend, at, kind, total):
    torch = backend.module
    ours, theirs = _params(backend, GRADS), _params(backend, GRADS)
    before = [p.grad.clone() for p in ours]
    norm = backend.asarray(np.array(total), "float32")
    at.clip_grads_with_norm_(ours, _inf(kind, backend), norm)
    torch.nn.utils.clip_grads_with_norm_(theirs, _inf(kind, backend), norm)
    for o, t, b in zip(ours, theirs, before, strict=True):
        if math.isfinite(total):
            assert_same_bits(backend, t.grad, b, "torch's own leaves them")
            assert_same_bits(backend, o.grad, b, "unchanged, bit for bit")
        else:
            assert_array(o.grad, backend.to_numpy(t.grad), backend=backend, dtype="float32")


@torch_backends
@pytest.mark.parametrize(("nonfinite", "unchanged"), [("torch", False), ("skip", True)])
def test_inf_max_norm_with_the_nonfinite_policies(backend, at, nonfinite, unchanged):
    # "torch": torch's own NaN for an inf norm; "skip": nothing is touched, whatever the norm
    torch = backend.module
    grads = [[math.inf, 1.0], [2.0]]
    ours, theirs = _params(backend, grads), _params(backend, grads)
    at.clip_grad_norm_(ours, math.inf, nonfinite=nonfinite)
    torch.nn.utils.clip_grad_norm_(theirs, math.inf)
    for o, t, g in zip(ours, theirs, grads, strict=True):
        expected = np.asarray(g, np.float32) if unchanged else backend.to_numpy(t.grad)
        assert_array(o.grad, expected, backend=backend, dtype="float32")


@torch_backends
@pytest.mark.parametrize("clip", [0.3, 41.0, 1e4, 3.4028235e38])
def test_finite_max_norm_is_still_tfs(backend, at, clip):
    # a finite max_norm (Python or 0-d tensor) scales by TF's factor, exactly the functional
    # API's (docs/tf-reference.md §4.2: 41 gives 41 * (1/41) != 1)
    expected, _ = anyclip.clip_by_global_norm([backend.asarray(g, "float32") for g in GRADS], clip)
    for max_norm in (clip, backend.asarray(np.array(clip), "float32")):
        params = _params(backend, GRADS)
        at.clip_grad_norm_(params, max_norm)
        for p, e in zip(params, expected, strict=True):
            assert_same_bits(backend, p.grad, e, f"max_norm={max_norm!r}")


@torch_backends
def test_norm_type_nan_is_torchs(backend, at):
    # torch accepts norm_type=nan: a NaN norm, and the gradients become NaN (measured)
    torch = backend.module
    ours, theirs = _params(backend, GRADS), _params(backend, GRADS)
    n_ours = at.clip_grad_norm_(ours, 1.0, norm_type=math.nan)
    n_theirs = torch.nn.utils.clip_grad_norm_(theirs, 1.0, norm_type=math.nan)
    assert_array(n_ours, backend.to_numpy(n_theirs), backend=backend, dtype="float32")
    for o, t in zip(ours, theirs, strict=True):
        assert_array(o.grad, backend.to_numpy(t.grad), backend=backend, dtype="float32")
    grads = [p.grad for p in _params(backend, GRADS)]
    assert_array(
        at.get_total_norm(grads, norm_type=math.nan),
        backend.to_numpy(torch.nn.utils.get_total_norm(grads, norm_type=math.nan)),
        backend=backend,
        dtype="float32",
    )


@torch_backends
@pytest.mark.parametrize(
    ("dtype", "grads", "max_norm"),
    [
        ("float32", [[0.0, 0.0], [[0.0]]], 0.0),  # TF: 0 * (1 / 0) = NaN; torch: zeros
        ("float32", [[3.0, -4.0], [[1.0]]], -0.0),  # TF: -0 * (1 / -0) = NaN; torch: zeros
        ("float16", [[300.0, 0.0], [[4.0]]], 1.0),  # TF: the float16 norm is inf
        ("float16", [[300.0, 0.0], [[4.0]]], math.inf),  # the same with torch's idiom
    ],
)
def test_documented_value_differences_are_tfs(backend, at, dtype, grads, max_norm):
    """The rows of docs/porting.md's drop-in table where torch's and TF's values part.

    Found by fuzzing, documented (not changed): all-zero gradients at ``max_norm=0`` (any
    gradients at ``-0.0``), and float16 gradients alone whose squares overflow float16
    (torch sums them in float32: norm 300, clipped; TF's float16 norm is inf and every
    gradient NaN, ``max_norm=inf`` included). torch live for its side, TF live for
    anyclip's; ``accumulate_dtype=float32`` gives a finite norm (torch's once rounded to
    float16) and, at ``max_norm=inf``, torch's gradients.
    """
    tf = pytest.importorskip("tensorflow")
    torch = backend.module

    def params() -> list:
        out = []
        for g in grads:
            p = torch.nn.Parameter(backend.asarray(np.zeros(np.shape(g)), dtype))
            p.grad = backend.asarray(g, dtype)
            out.append(p)
        return out

    ours, theirs, wide = params(), params(), params()
    n_ours = at.clip_grad_norm_(ours, max_norm)
    n_theirs = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    tf_grads, tf_norm = tf.clip_by_global_norm(
        [tf.constant(np.asarray(g, np.float32), dtype=dtype) for g in grads],
        # a NumPy value: TF's cache of Python floats takes -0.0 for 0.0 once it saw 0.0
        # (docs/tf-behaviour.md); inf is TF's NaN, not the drop-in's
        np.float32(max_norm if math.isfinite(max_norm) else 1.0),
    )
    assert bool(torch.isfinite(n_theirs)) and not any(
        bool(torch.isnan(t.grad).any()) for t in theirs
    )
    if max_norm == 0:  # a zero norm: anyclip's is TF's
        assert_array(n_ours, float(tf_norm.numpy()), backend=backend, dtype=dtype)
    else:  # TF's float16 norm overflows
        assert not np.isfinite(tf_norm.numpy()) and not bool(torch.isfinite(n_ours))
    for o, t in zip(ours, tf_grads, strict=True):
        assert np.isnan(t.numpy()).all()
        assert bool(torch.isnan(o.grad).all())
    if dtype == "float16":
        n_wide = at.clip_grad_norm_(wide, max_norm, accumulate_dtype=torch.float32)
        assert float(n_wide.to(n_theirs.dtype)) == float(n_theirs)  # float32, then rounded
        if max_norm == math.inf:
            for w, t in zip(wide, theirs, strict=True):
                assert_same_bits(backend, w.grad, t.grad, "accumulate_dtype=float32")


def _empty_generator_warnings(fn: Callable[[Any], Any]) -> list[tuple[type, str, str]]:
    """The warnings ``fn`` emits on an empty generator: class, message, file; errors aside."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn(p for p in [])
        except RuntimeError:  # torch's clip_grad_value_ (a deviation in docs/porting.md)
            pass
    return [(w.category, str(w.message), w.filename) for w in caught]


@torch_backends
@pytest.mark.parametrize(
    "fn", ["clip_grad_norm_", "get_total_norm", "clip_grads_with_norm_", "clip_grad_value_"]
)
def test_empty_generator_warns_as_torch(backend, at, fn):
    """An empty generator warns where torch's function warns, at the caller's line.

    Found by fuzzing: ``get_total_norm``, ``clip_grads_with_norm_`` and ``clip_grad_value_``
    warned where torch's do not (an error under ``-W error``), and every warning named a
    file of anyclip's or torch's ``no_grad`` wrapper instead of the caller's.
    """
    torch = backend.module
    args = {
        "clip_grad_norm_": (1.0,),
        "get_total_norm": (),
        "clip_grads_with_norm_": (1.0, torch.tensor(1.0)),
        "clip_grad_value_": (1.0,),
    }[fn]
    theirs = _empty_generator_warnings(lambda g: getattr(torch.nn.utils, fn)(g, *args))
    ours = _empty_generator_warnings(lambda g: getattr(at, fn)(g, *args))
    assert ours == theirs
    assert all(filename == __file__ for _, _, filename in ours)


# ============================================================ D4: optax, max_norm = inf
UPDATES = {"a": [3.0, -4.0, 0.5], "b": [[1e-3, 12.0]]}


@jax_backends
@pytest.mark.parametrize("kind", ["float", "array"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("poison", [None, math.inf, math.nan], ids=["finite", "inf", "nan"])
def test_optax_inf_max_norm_is_optaxs(backend, ao, kind, jit, poison):
    jax = backend.module
    optax = pytest.importorskip("optax")
    updates = {k: backend.asarray(v, "float32") for k, v in UPDATES.items()}
    if poison is not None:
        updates["a"] = updates["a"].at[0].set(poison)
    max_norm = math.inf if kind == "float" else backend.asarray(np.array(np.inf), "float32")

    def run(transform: Callable[[Any], Any], u: Any, c: Any) -> Any:
        tx = transform(c)
        return tx.update(u, tx.init(u))[0]

    if jit and kind == "array":  # max_norm traced: the choice is a `where`, never a Python if
        ours = jax.jit(lambda u, c: run(ao.clip_by_global_norm, u, c))(updates, max_norm)
        theirs = jax.jit(lambda u, c: run(optax.clip_by_global_norm, u, c))(updates, max_norm)
    elif jit:
        ours = jax.jit(lambda u: run(ao.clip_by_global_norm, u, max_norm))(updates)
        theirs = jax.jit(lambda u: run(optax.clip_by_global_norm, u, max_norm))(updates)
    else:
        ours = run(ao.clip_by_global_norm, updates, max_norm)
        theirs = run(optax.clip_by_global_norm, updates, max_norm)
    for k in UPDATES:
        if poison is None:
            assert_same_bits(backend, theirs[k], updates[k], "optax's own leaves them")
            assert_same_bits(backend, ours[k], updates[k], k)
        else:
            assert_array(ours[k], np.asarray(theirs[k]), backend=backend, dtype="float32")


@jax_backends
def test_optax_inf_max_norm_keeps_the_norm_in_state(backend, ao):
    # the norm is still computed (and logged) with max_norm=inf; the updates are unchanged
    optax = pytest.importorskip("optax")
    updates = [backend.asarray([3.0, 4.0], "float32"), backend.asarray([[12.0]], "float32")]
    tx = ao.clip_by_global_norm(math.inf, norm_in_state=True)
    out, state = tx.update(updates, tx.init(updates))
    ref, _ = optax.clip_by_global_norm(math.inf).update(updates, optax.EmptyState())
    for o, r in zip(out, ref, strict=True):
        assert_same_bits(backend, o, r)
    assert float(state.global_norm) == 13.0  # sqrt(9 + 16 + 144), exact


@jax_backends
@pytest.mark.parametrize("clip", [0.3, 41.0])
def test_optax_finite_max_norm_is_still_tfs(backend, ao, clip):
    updates = {k: backend.asarray(v, "float32") for k, v in UPDATES.items()}
    expected, _ = anyclip.tree.clip_by_global_norm(updates, clip)
    for max_norm in (clip, backend.asarray(np.array(clip), "float32")):
        tx = ao.clip_by_global_norm(max_norm)
        out, _ = tx.update(updates, tx.init(updates))
        for k in UPDATES:
            assert_same_bits(backend, out[k], expected[k], k)


# ============================== D4: TF's NaN where TF is mirrored (§4.2: "clip nan / inf")
@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"], indirect=True)
def test_functional_inf_clip_norm_stays_tfs_nan(backend, make):
    clipped, norm = anyclip.clip_by_global_norm([make([3.0, 4.0]), make([[12.0]])], math.inf)
    assert_array(clipped[0], [np.nan, np.nan], backend=backend, dtype="float32")
    assert_array(clipped[1], [[np.nan]], backend=backend, dtype="float32")
    assert_array(norm, np.float32(13.0), backend=backend, dtype="float32")


@torch_backends
@pytest.mark.parametrize("option", ["clipnorm", "global_clipnorm"])
def test_torch_keras_clipping_inf_is_keras_nan(backend, at, option):
    # Keras 3 (TF 2.21) SGD(clipnorm=inf) and SGD(global_clipnorm=inf) make the step NaN:
    # tf.clip_by_norm and tf.clip_by_global_norm with clip_norm inf (§2.3 B5, §4.2)
    torch = backend.module
    (p,) = _params(backend, [[3.0, 4.0]])
    opt = torch.optim.SGD([p], lr=1.0)
    handle = at.keras_clipping(opt, **{option: math.inf})
    opt.step()
    handle.remove()
    assert_array(p.detach(), [np.nan, np.nan], backend=backend, dtype="float32")


@jax_backends
@pytest.mark.parametrize("option", ["clipnorm", "global_clipnorm"])
def test_optax_keras_clipping_inf_is_keras_nan(backend, ao, option):
    updates = [backend.asarray([3.0, 4.0], "float32")]
    tx = ao.keras_clipping(**{option: math.inf})
    out, _ = tx.update(updates, tx.init(updates))
    assert_array(out[0], [np.nan, np.nan], backend=backend, dtype="float32")


# ======================================================= d6-d9: errors, as torch's
#: Bad values for every argument (built on the backend's device when tensors).
BAD: dict[str, Callable[[Any, Any], Any]] = {
    "None": lambda torch, dev: None,
    "str": lambda torch, dev: "a",
    "bool": lambda torch, dev: True,
    "nan": lambda torch, dev: math.nan,
    "negative": lambda torch, dev: -1.0,
    "tensor0d": lambda torch, dev: torch.tensor(1.0, device=dev),
    "tensor2": lambda torch, dev: torch.tensor([1.0, 2.0], device=dev),
    "complex": lambda torch, dev: 1 + 2j,
    "complex_tensor": lambda torch, dev: torch.tensor(1 + 2j, device=dev),
    "int_tensor": lambda torch, dev: torch.tensor(2, device=dev),
    "meta_tensor": lambda torch, dev: torch.ones((), device="meta"),
}

#: Each function's arguments, and its call with good values.
ARGS = {
    "clip_grad_norm_": ["parameters", "max_norm", "norm_type", "error_if_nonfinite", "foreach"],
    "clip_grad_value_": ["parameters", "clip_value", "foreach"],
    "get_total_norm": ["tensors", "norm_type", "error_if_nonfinite", "foreach"],
    "clip_grads_with_norm_": ["parameters", "max_norm", "total_norm", "foreach"],
}

#: Where anyclip raises another class than torch, on purpose (docs/porting.md lists them):
#: (function, argument, value) -> (anyclip's class, why), the reason kept with the data.
_SECOND_BOUND = (TypeError, "a number or tensor as clip_grad_value_'s foreach is a second bound")
#: ``None``: anyclip accepts the call.
DEVIATIONS: dict[tuple[str, str, str], tuple[type[Exception] | None, str]] = {
    **{
        (fn, arg, "str"): (TypeError, "torch: AttributeError from p.grad on a str element")
        for fn, arg in [
            ("clip_grad_norm_", "parameters"),
            ("clip_grad_value_", "parameters"),
            ("clip_grads_with_norm_", "parameters"),
            ("get_total_norm", "tensors"),
        ]
    },
    ("get_total_norm", "tensors", "complex_tensor"): (TypeError, "TF's global norm is real"),
    ("get_total_norm", "tensors", "int_tensor"): (TypeError, "dtype problem; torch: RuntimeError"),
    **{  # a lone tensor without .grad: nothing to clip
        ("clip_grad_value_", "parameters", v): (None, "torch 2.13 trips an internal check")
        for v in ["tensor0d", "tensor2", "complex_tensor", "int_tensor", "meta_tensor"]
    },
    **{
        ("clip_grad_value_", "foreach", v): _SECOND_BOUND
        for v in [
            "nan",
            "negative",
            "tensor0d",
            "tensor2",
            "complex_tensor",
            "int_tensor",
            "meta_tensor",
        ]
    },
}


def _call(backend: Backend, module: Any, fn: str, arg: str, value: Any) -> Any:
    torch = backend.module
    params = _params(backend, [[3.0, 4.0]])
    if fn == "get_total_norm":
        kwargs: dict[str, Any] = {"tensors": [params[0].grad]}
    else:
        kwargs = {"parameters": params}
    kwargs.update(
        {
            "clip_grad_norm_": {"max_norm": 1.0},
            "clip_grad_value_": {"clip_value": 1.0},
            "get_total_norm": {},
            "clip_grads_with_norm_": {
                "max_norm": 1.0,
                "total_norm": torch.tensor(5.0, device=backend.device),
            },
        }[fn]
    )
    kwargs[arg] = value
    return getattr(module, fn)(**kwargs)


@torch_backends
@pytest.mark.parametrize(
    ("fn", "arg", "value"),
    [(fn, arg, value) for fn, args in ARGS.items() for arg in args for value in BAD],
)
def test_bad_argument_raises_torchs_class(backend, at, fn, arg, value):
    torch = backend.module
    try:
        _call(backend, torch.nn.utils, fn, arg, BAD[value](torch, backend.device))
    except Exception as exc:  # noqa: BLE001  # torch's own class is the expectation
        theirs: type[Exception] | None = type(exc)
    else:
        theirs = None
    expected = DEVIATIONS[fn, arg, value][0] if (fn, arg, value) in DEVIATIONS else theirs
    if expected is None:
        _call(backend, at, fn, arg, BAD[value](torch, backend.device))  # accepted, as torch
        return
    with pytest.raises(expected) as ours:
        _call(backend, at, fn, arg, BAD[value](torch, backend.device))
    assert f"`{arg}" in str(ours.value) or "Boolean value of Tensor" in str(ours.value), (
        "the message names the argument (or is torch's own)"
    )


@torch_backends
@pytest.mark.parametrize("fn", ["clip_grad_norm_", "get_total_norm", "clip_grads_with_norm_"])
@pytest.mark.parametrize("foreach", ["x", 1, 0.0])
def test_foreach_is_read_as_torch_reads_it(backend, at, fn, foreach):
    # torch tests `foreach` for truth: "x" and 1 are True, 0.0 is False; no error, and the
    # clip_grad_by_value_ hint belongs to clip_grad_value_ alone
    from unittest import mock

    torch = backend.module
    for module in (torch.nn.utils, at):
        with (
            mock.patch.object(torch, "_foreach_norm", wraps=torch._foreach_norm) as norm_spy,
            mock.patch.object(torch, "_foreach_mul_", wraps=torch._foreach_mul_) as mul_spy,
        ):
            _call(backend, module, fn, "foreach", foreach)
        if fn == "get_total_norm" and module is at:  # the 2-norm is TF's, never _foreach_norm
            continue
        spy = norm_spy if fn == "get_total_norm" else mul_spy
        assert spy.called is bool(foreach), module


@torch_backends
def test_mixed_devices_name_the_callers_argument(backend, at):
    torch = backend.module
    here = torch.ones(2, device=backend.device)
    meta = torch.ones(2, device="meta")
    with pytest.raises(ValueError, match=r"^`tensors` mixes devices"):
        at.get_total_norm([here, meta])
    with pytest.raises(ValueError, match=r"^`tensors` mixes devices"):
        at.get_total_norm([here, meta], norm_type=1)
    with pytest.raises(TypeError, match=r"^`tensors` must hold real floating tensors"):
        at.get_total_norm([torch.ones(2, dtype=torch.int64, device=backend.device)])
    with pytest.raises(TypeError, match=r"^`tensors` must hold tensors of one dtype"):
        at.get_total_norm([here, here.double()], accumulate_dtype=None)
    (p,) = _params(backend, [[1.0]])
    q = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64, device=backend.device))
    q.grad = torch.ones(1, dtype=torch.float64, device=backend.device)
    for norm_type in (2, 1):
        with pytest.raises(TypeError, match=r"^`parameters` must hold tensors of one dtype"):
            at.clip_grad_norm_([p, q], 1.0, norm_type=norm_type, accumulate_dtype=None)
