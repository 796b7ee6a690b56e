"""Hints that lead to the right fix: unknown keywords and a generator of torch parameters.

* Every public function answers a keyword it does not take with a ``TypeError`` that names the
  argument it does take (``clip_by_norm(t, max_norm=1.0)`` -> "did you mean `clip_norm`"), for
  the names torch, optax, Keras and NumPy use; the signature ``inspect.signature`` shows stays
  the function's own (TF's argument names are the contract), and any other ``TypeError`` comes
  through unchanged.
* ``anyclip.clip_by_global_norm(model.parameters(), c)`` (a generator of weights) points at
  ``anyclip.torch.clip_grad_norm_`` and ``[p.grad for p in model.parameters()]``, not at
  ``list(...)``, which would clip the weights.
"""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest

import anyclip
from anyclip import tree

TOP_LEVEL = [name for name in anyclip.__all__ if inspect.isfunction(getattr(anyclip, name))]

#: (function, call arguments as a function of an array ``a``, unknown keyword, the hint).
CASES = [
    ("clip_by_norm", lambda a: (a,), {"max_norm": 1.0}, "did you mean `clip_norm`"),
    ("clip_by_norm", lambda a: (a, 1.0), {"axis": 0}, "did you mean `axes`"),
    ("clip_by_norm", lambda a: (a, 1.0), {"dim": 0}, "did you mean `axes`"),
    ("clip_by_global_norm", lambda a: ([a],), {"max_norm": 1.0}, "did you mean `clip_norm`"),
    ("clip_by_global_norm", lambda a: ([a],), {"clipnorm": 1.0}, "did you mean `clip_norm`"),
    (
        "clip_by_global_norm",
        lambda a: ([a], 1.0),
        {"norm_type": 2},
        "anyclip.torch.clip_grad_norm_",
    ),
    (
        "clip_by_global_norm",
        lambda a: ([a], 1.0),
        {"error_if_nonfinite": True},
        'nonfinite="raise"',
    ),
    ("global_norm", lambda a: (), {"tensors": []}, "did you mean `t_list`"),
    ("clip_by_average_norm", lambda a: (a,), {"max_norm": 1.0}, "did you mean `clip_norm`"),
    ("clip_by_value", lambda a: (a,), {"clip_value": 1.0}, "clip_value_min=-v, clip_value_max=v"),
    ("clip_by_value", lambda a: (a,), {"min": 0.0, "max": 1.0}, "did you mean `clip_value_min`"),
    ("clip_by_value", lambda a: (a,), {"a_min": 0.0, "a_max": 1.0}, "`clip_value_min`"),
    ("norm", lambda a: (a,), {"norm_type": 1}, "did you mean `ord`"),
    ("norm", lambda a: (a,), {"p": 1}, "did you mean `ord`"),
    ("norm", lambda a: (a,), {"dim": 0}, "did you mean `axis`"),
    ("norm", lambda a: (a,), {"keepdim": True}, "did you mean `keepdims`"),
    ("l2_normalize", lambda a: (a,), {"eps": 1e-6}, "did you mean `epsilon`"),
    ("normalize", lambda a: (a,), {"dim": 0}, "did you mean `axis`"),
    ("normalize", lambda a: (a,), {"ordd": 1}, "did you mean `ord`"),  # a typo: closest name
]


@pytest.mark.parametrize(("name", "args", "kwargs", "hint"), CASES, ids=lambda v: str(v)[:20])
def test_unknown_keyword_says_the_name_to_use(backend, make, name, args, kwargs, hint):
    fn = getattr(anyclip, name)
    with pytest.raises(TypeError, match="unexpected keyword argument") as exc:
        fn(*args(make([3.0, 4.0])), **kwargs)
    message = str(exc.value)
    assert message.startswith(f"{name}() got an unexpected keyword argument `"), message
    assert hint in message, message
    assert exc.value.__cause__ is None  # one error, not a chain


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_every_top_level_function_lists_what_it_takes(name):
    fn = getattr(anyclip, name)
    params = list(inspect.signature(fn).parameters)
    with pytest.raises(TypeError) as exc:
        fn(no_such_argument=1)
    for p in params:
        assert f"`{p}`" in str(exc.value), (p, str(exc.value))


@pytest.mark.parametrize("name", [*TOP_LEVEL, *(f"tree.{n}" for n in tree.__all__)])
def test_signature_is_the_functions_own(name):
    fn = anyclip
    for part in name.split("."):
        fn = getattr(fn, part)
    wrapped = inspect.unwrap(fn)
    assert wrapped is not fn  # hinted
    assert inspect.signature(fn) == inspect.signature(wrapped)
    assert fn.__doc__ == wrapped.__doc__
    assert fn.__name__ == wrapped.__name__


def test_other_type_errors_pass_through_unchanged(backend, make):
    # a float bound on an integer input: anyclip's own message, not a keyword hint
    with pytest.raises(TypeError, match="`clip_value_min`") as exc:
        anyclip.clip_by_value(t=make([1, 2], "int32"), clip_value_min=0.5, clip_value_max=1)
    assert "unexpected keyword" not in str(exc.value)


@pytest.mark.parametrize("name", ["clip_by_global_norm", "global_norm", "clip_by_norm"])
def test_tree_functions_hint_too(name):
    grads = {"w": np.array([3.0, 4.0], dtype=np.float32)}
    with pytest.raises(TypeError, match=r"did you mean `(clip_norm|accumulate_dtype)`"):
        if name == "global_norm":
            getattr(tree, name)(grads, acc_dtype="float32")
        else:
            getattr(tree, name)(grads, max_norm=1.0)


#: (module, function, a keyword of TF or torch it does not take, the name it suggests).
ADAPTERS = [
    ("anyclip.torch", "clip_grad_norm_", "clip_norm", "max_norm"),
    ("anyclip.torch", "clip_grads_with_norm_", "clip_norm", "max_norm"),
    ("anyclip.torch", "get_total_norm", "ord", "norm_type"),
    ("anyclip.torch", "clip_grad_value_", "clipvalue", "clip_value"),
    ("anyclip.optax", "clip_by_global_norm", "clipnorm", "clip_norm` or `max_norm"),
    ("anyclip.optax", "clip_by_norm", "max_norm", "clip_norm"),
]


@pytest.mark.parametrize(("module", "name", "unknown", "want"), ADAPTERS)
def test_adapters_hint_the_names_they_take(module, name, unknown, want):
    pytest.importorskip(module.split(".")[1])
    fn = getattr(importlib.import_module(module), name)
    with pytest.raises(TypeError, match=f"did you mean `{want}`"):
        fn(**{unknown: 1.0})


@pytest.mark.parametrize("module", ["anyclip.torch", "anyclip.optax"])
def test_every_adapter_function_is_hinted(module):
    pytest.importorskip(module.split(".")[1])
    mod = importlib.import_module(module)
    for public in mod.__all__:
        obj = getattr(mod, public)
        if inspect.isfunction(obj):
            assert inspect.unwrap(obj) is not obj, f"{module}.{public}"
            assert inspect.signature(obj) == inspect.signature(inspect.unwrap(obj))


def test_generator_of_parameters_points_at_the_gradients():
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(2, 1)
    for fn in (anyclip.clip_by_global_norm, anyclip.global_norm):
        args = (
            (model.parameters(), 1.0)
            if fn is anyclip.clip_by_global_norm
            else (model.parameters(),)
        )
        with pytest.raises(TypeError, match="`t_list` should be a sequence of tensors") as exc:
            fn(*args)
        message = str(exc.value)
        assert "anyclip.torch.clip_grad_norm_(model.parameters(), max_norm)" in message
        assert "[p.grad for p in model.parameters()]" in message
        assert "pass list(...)" not in message


def test_generator_of_gradients_still_says_list():
    torch = pytest.importorskip("torch")
    grads = (torch.ones(2) for _ in range(2))
    with pytest.raises(TypeError, match=r"pass list\(\.\.\.\) of it"):
        anyclip.clip_by_global_norm(grads, 1.0)
