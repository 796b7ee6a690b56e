"""The public API: names, signatures (docs/tf-reference.md §0.1), docstrings, import hygiene,
``name=`` being ignored and inputs never being mutated."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import anyclip
from anyclip_conformance import assert_array

EMPTY = inspect.Parameter.empty

# §0.1 [exp_signatures]: TF 2.21's signatures, parameter by parameter (name, default).
SIGNATURES = {
    "clip_by_value": [
        ("t", EMPTY),
        ("clip_value_min", EMPTY),
        ("clip_value_max", EMPTY),
        ("name", None),
    ],
    "clip_by_norm": [("t", EMPTY), ("clip_norm", EMPTY), ("axes", None), ("name", None)],
    "clip_by_global_norm": [
        ("t_list", EMPTY),
        ("clip_norm", EMPTY),
        ("use_norm", None),
        ("name", None),
    ],
    "global_norm": [("t_list", EMPTY), ("name", None)],
    "clip_by_average_norm": [("t", EMPTY), ("clip_norm", EMPTY), ("name", None)],
    "norm": [
        ("tensor", EMPTY),
        ("ord", "euclidean"),
        ("axis", None),
        ("keepdims", None),
        ("name", None),
    ],
    "l2_normalize": [
        ("x", EMPTY),
        ("axis", None),
        ("epsilon", 1e-12),
        ("name", None),
        ("dim", None),
    ],
    "normalize": [("tensor", EMPTY), ("ord", "euclidean"), ("axis", None), ("name", None)],
    "embedding_lookup": [("params", EMPTY), ("ids", EMPTY), ("max_norm", None), ("name", None)],
}

TF_NAMES = {
    "clip_by_value": "tf.clip_by_value",
    "clip_by_norm": "tf.clip_by_norm",
    "clip_by_global_norm": "tf.clip_by_global_norm",
    "global_norm": "tf.linalg.global_norm",
    "clip_by_average_norm": "tf.compat.v1.clip_by_average_norm",
    "norm": "tf.norm",
    "l2_normalize": "tf.math.l2_normalize",
    "normalize": "tf.linalg.normalize",
    "embedding_lookup": "tf.nn.embedding_lookup",
}


def test_all_lists_the_eight_functions():
    # the TF functions (the eight, and embedding_lookup); other public entries (issue 4's
    # `tree`, `constraints`, ...) must be submodules, but the flush_subnormals context manager
    functions = [
        n
        for n in anyclip.__all__
        if not inspect.ismodule(getattr(anyclip, n)) and n != "flush_subnormals"
    ]
    assert sorted(functions) == sorted(SIGNATURES)
    assert len(anyclip.__all__) == len(set(anyclip.__all__))
    for name in functions:
        assert inspect.isfunction(getattr(anyclip, name))


def test_version():
    assert isinstance(anyclip.__version__, str)
    assert anyclip.__version__
    assert "__version__" not in anyclip.__all__


#: Adapter submodules: not imported by ``import anyclip`` (they import torch / optax), but once
#: a user imports ``anyclip.torch``, Python sets it as an attribute of the package.
ADAPTERS = {"torch", "optax"}


def test_no_other_public_names():
    public = {n for n in dir(anyclip) if not n.startswith("_")}
    assert public <= set(anyclip.__all__) | {"annotations"} | ADAPTERS


def test_flush_subnormals_is_a_context_manager():
    assert inspect.isclass(anyclip.flush_subnormals)
    assert anyclip.flush_subnormals.__module__ == "anyclip._subnormals"
    with anyclip.flush_subnormals(), anyclip.flush_subnormals(False):
        pass


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signature_matches_tf(name):
    params = list(inspect.signature(getattr(anyclip, name)).parameters.values())
    tf_params = [p for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    # TF's parameters, in TF's order, with TF's defaults, all positional-or-keyword
    assert [(p.name, p.default) for p in tf_params] == SIGNATURES[name]
    for p in tf_params:
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, (name, p.name, p.kind)
    # anything beyond TF (issue 4's options) is keyword-only with a default, so that every
    # TF call works unchanged
    for p in params[len(tf_params) :]:
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, (name, p.name, p.kind)
        assert p.default is not EMPTY, (name, p.name)


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_docstring(name):
    doc = inspect.getdoc(getattr(anyclip, name))
    assert doc, f"{name} has no docstring"
    for section in ("Parameters", "Returns"):
        assert section in doc, f"{name}'s docstring has no {section} section"
    # STYLE.md: See Also names the TF function each one mirrors
    assert TF_NAMES[name] in doc, f"{name}'s docstring does not name {TF_NAMES[name]}"
    for param, _ in SIGNATURES[name]:
        assert param in doc, f"{name}'s docstring does not document `{param}`"


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_import_does_not_import_frameworks():
    result = _run_python(
        """
        import sys
        import anyclip
        loaded = sorted(m for m in ("torch", "jax", "jaxlib", "tensorflow") if m in sys.modules)
        print(loaded)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


def test_works_with_frameworks_unavailable():
    # a None entry in sys.modules makes `import torch` raise ImportError
    result = _run_python(
        """
        import sys
        for mod in ("torch", "jax", "jaxlib", "tensorflow"):
            sys.modules[mod] = None
        import numpy as np
        import anyclip
        out = anyclip.clip_by_norm(np.array([3.0, 4.0], dtype=np.float32), 1.0)
        assert type(out) is np.ndarray and out.dtype == np.float32, (type(out), out.dtype)
        print(anyclip.global_norm([np.array([3.0, 4.0])]).dtype)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "float64"


# ------------------------------------------------------------------ name= is ignored
CALLS = {
    "clip_by_value": lambda make, **kw: anyclip.clip_by_value(make([-2, 0.5, 2]), -1, 1, **kw),
    "clip_by_norm": lambda make, **kw: anyclip.clip_by_norm(make([3, 4]), 1, **kw),
    "clip_by_global_norm": lambda make, **kw: anyclip.clip_by_global_norm(
        [make([3, 4]), make([[12]])], 6.5, **kw
    ),
    "global_norm": lambda make, **kw: anyclip.global_norm([make([3, 4])], **kw),
    "clip_by_average_norm": lambda make, **kw: anyclip.clip_by_average_norm(make([3, 4]), 1, **kw),
    "norm": lambda make, **kw: anyclip.norm(make([[1, -2], [3, 4]]), ord=1, axis=0, **kw),
    "l2_normalize": lambda make, **kw: anyclip.l2_normalize(make([3, 4]), **kw),
    "normalize": lambda make, **kw: anyclip.normalize(make([3, 4]), **kw),
    "embedding_lookup": lambda make, **kw: anyclip.embedding_lookup(
        make([[3, 4], [0.3, 0.4]]), [1, 0, 1], 1, **kw
    ),
}


def _flatten(result):
    if isinstance(result, tuple):
        first, second = result
        return [*first, second] if isinstance(first, list) else [first, second]
    return [result]


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("given", ["scope/op", None, 3])
def test_name_is_ignored(backend, make, name, given):
    plain = _flatten(CALLS[name](make))
    named = _flatten(CALLS[name](make, name=given))
    assert len(plain) == len(named)
    for p, n in zip(plain, named, strict=True):
        assert_array(
            n, backend.to_numpy(p), backend=backend, dtype=backend.dtype_name(p), what=name
        )


# --------------------------------------------------------------- inputs are not mutated
MUTATION_CALLS = {
    "clip_by_value": lambda t, lo, hi: anyclip.clip_by_value(t, lo, hi),
    "clip_by_norm": lambda t, lo, hi: anyclip.clip_by_norm(t, hi, axes=1),
    "clip_by_global_norm": lambda t, lo, hi: anyclip.clip_by_global_norm([t, lo], hi, use_norm=hi),
    "global_norm": lambda t, lo, hi: anyclip.global_norm([t, lo]),
    "clip_by_average_norm": lambda t, lo, hi: anyclip.clip_by_average_norm(t, hi),
    "norm": lambda t, lo, hi: anyclip.norm(t, ord=2, axis=(0, 1)),
    "l2_normalize": lambda t, lo, hi: anyclip.l2_normalize(t, axis=0, epsilon=hi),
    "normalize": lambda t, lo, hi: anyclip.normalize(t, ord=1, axis=1),
    "embedding_lookup": lambda t, lo, hi: anyclip.embedding_lookup(t, [1, 0], max_norm=hi),
}


@pytest.mark.parametrize("name", sorted(MUTATION_CALLS))
def test_inputs_not_mutated(backend, make, name):
    t_np = np.array([[3.0, -4.0, 0.5], [6.0, 8.0, -0.25]], dtype=np.float32)
    lo_np = np.float32(-1.0)
    hi_np = np.float32(1.5)
    t, lo, hi = make(t_np), make(lo_np), make(hi_np)
    MUTATION_CALLS[name](t, lo, hi)
    assert_array(t, t_np, backend=backend, dtype="float32", what="t after the call")
    assert_array(lo, lo_np, backend=backend, dtype="float32", what="lo after the call")
    assert_array(hi, hi_np, backend=backend, dtype="float32", what="hi after the call")


def test_t_list_not_mutated(backend, make):
    a, b = make([3, 4]), make([[12]])
    t_list = [a, None, b]
    t_tuple = (a, b)
    out, _ = anyclip.clip_by_global_norm(t_list, 6.5)
    anyclip.clip_by_global_norm(t_tuple, 6.5)
    anyclip.global_norm(t_list)
    assert len(t_list) == 3
    assert t_list[0] is a and t_list[1] is None and t_list[2] is b
    assert out is not t_list
    assert_array(a, np.array([3, 4], dtype=np.float32), backend=backend, dtype="float32")


def test_python_list_input_becomes_numpy_float32():
    # §0.2: a Python list of floats converts to float32 (NumPy when there is no other array)
    from anyclip_conformance import load_backend

    out = anyclip.clip_by_value([1.0, 5.0, 9.0], 2.0, 6.0)
    assert_array(
        out, np.array([2, 5, 6], dtype=np.float32), backend=load_backend("numpy"), dtype="float32"
    )


def test_python_int_list_input_becomes_int32():
    # exp_clip_by_value: python list input [1,5,9], 2, 6 gives int32 [2, 5, 6]
    from anyclip_conformance import load_backend

    out = anyclip.clip_by_value([1, 5, 9], 2, 6)
    assert_array(
        out, np.array([2, 5, 6], dtype=np.int32), backend=load_backend("numpy"), dtype="int32"
    )
