"""Sparse inputs, written down once: TF's ``IndexedSlices`` rule for sparse arrays.

Layer: the public layer's checks, beside :mod:`anyclip._policy`. TF 2.21 (measured,
``docs/tf-reference.md`` §14) takes an ``IndexedSlices`` in two ways:

* ``clip_by_value``, ``clip_by_norm``, ``global_norm`` and ``clip_by_global_norm`` work on its
  stored values only (every stored value counted once, repeated indices included; ``axes`` and
  the bounds apply to the values' shape) and return an ``IndexedSlices`` with the same indices;
* ``clip_by_average_norm``, ``norm``, ``l2_normalize`` and ``normalize`` convert it to a dense
  tensor first (repeated indices summed) and return dense results.

anyclip applies the same two rules to sparse torch tensors (COO, CSR, CSC, BSR, BSC) and JAX
``BCOO`` arrays: :func:`through_values` and :func:`densified` wrap the public layer's private
functions, :func:`values_list` does it for ``t_list``. A result has the input's layout, its very
index arrays (an uncoalesced COO tensor stays uncoalesced) and the new values. SciPy sparse
matrices are refused: they are not arrays of the array API. Nothing here imports a framework.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from anyclip._compat import imported, is_numpy_scalar

__all__ = [
    "dense_operand",
    "densified",
    "is_sparse",
    "refuse_foreign",
    "refuse_nested",
    "refuse_sparse_norm",
    "sparse_or_refuse",
    "through_values",
    "through_values_or_jagged",
    "values_list",
    "values_of",
    "with_values",
]

F = TypeVar("F", bound=Callable[..., Any])


def _torch_sparse(value: Any) -> bool:
    torch = imported("torch")
    return torch is not None and isinstance(value, torch.Tensor) and value.layout != torch.strided


def _is_jagged(value: Any) -> bool:
    """Whether ``value`` is a torch nested tensor of the jagged layout (``torch.jagged``)."""
    torch = imported("torch")
    return torch is not None and getattr(value, "layout", None) == torch.jagged


def _is_bcoo(value: Any) -> bool:
    return type(value).__name__ == "BCOO" and type(value).__module__.startswith(
        "jax.experimental.sparse"
    )


def is_sparse(value: Any) -> bool:
    """Whether ``value`` is a sparse array anyclip takes (torch sparse layouts, JAX BCOO)."""
    return _torch_sparse(value) or _is_bcoo(value)


#: Where the sparse types anyclip knows of (or refuses) are defined.
_SPARSE_MODULES = ("scipy.sparse", "jax.experimental.sparse")


def sparse_or_refuse(value: Any, name: str, index: int | None = None) -> bool:
    """Whether ``value`` is a sparse array anyclip takes; ``TypeError`` for a foreign one.

    ``name`` (``name[index]`` with an ``index``) is the argument the message names.

    The check every call makes, so it is cheap for a dense array: one ``isinstance`` and a
    layout comparison for a torch tensor, one module-name test for anything else.
    """
    torch = imported("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.layout == torch.strided and not value.is_nested:  # the common case
            return False
        if value.is_nested:
            refuse_nested(value, name if index is None else f"{name}[{index}]")
        return True
    if not type(value).__module__.startswith(_SPARSE_MODULES):
        return False
    if _is_bcoo(value):
        return True
    refuse_foreign(value, name if index is None else f"{name}[{index}]")
    return False


def _may_be_sparse(tp: type) -> bool:
    """Whether an object of type ``tp`` can be sparse or foreign for :func:`sparse_or_refuse`.

    False for every type whose objects :func:`sparse_or_refuse` answers False without
    looking at the object: everything but torch tensors (a layout per tensor) and the types
    of the sparse modules.
    """
    torch = imported("torch")
    if torch is not None and issubclass(tp, torch.Tensor):
        return True
    return tp.__module__.startswith(_SPARSE_MODULES)


def refuse_foreign(value: Any, name: str) -> None:
    """``TypeError`` for a sparse object that is not an array of the array API (SciPy's)."""
    module = type(value).__module__
    if module.startswith("scipy.sparse"):
        msg = (
            f"`{name}` must be an array of the array API, got a SciPy sparse "
            f"{type(value).__name__}; pass `{name}.toarray()` for TF's dense behaviour, or "
            "its stored values `.data` (TF's IndexedSlices behaviour) and put the result back "
            "in a copy"
        )
        raise TypeError(msg)
    if module.startswith("jax.experimental.sparse"):
        msg = (
            f"`{name}` must be an array or a BCOO array, got a JAX {type(value).__name__}; "
            f"convert it with `{name}.to_bcoo()` (a BCSR array) or pass `{name}.todense()`"
        )
        raise TypeError(msg)


def refuse_nested(value: Any, name: str) -> None:
    """``TypeError`` for a torch nested tensor (``torch.nested``) where anyclip takes none.

    TF's counterpart, a ``RaggedTensor``, is taken by ``tf.clip_by_value`` only (TF 2.21,
    measured: every other function fails converting it), and anyclip takes a jagged nested
    tensor there only (through its values), with 0-d bounds.
    """
    layout = "torch.jagged" if _is_jagged(value) else "torch.strided"
    msg = (
        f"`{name}` must be a dense or sparse tensor, got a nested tensor (torch.nested, layout "
        f"{layout}); only clip_by_value's `t` may be nested (layout torch.jagged, 0-d bounds, "
        "as TF's clip_by_value takes a RaggedTensor): apply the function to each component "
        f"(`[f(c) for c in {name}.unbind()]`), to its packed values (`{name}.values()` of a "
        f"jagged one), or to `{name}.to_padded_tensor(0.0)`"
    )
    raise TypeError(msg)


#: Python values an argument often is: never sparse, answered without a module-name test
#: (which ``torch.compile`` cannot trace).
_PYTHON = (float, int, bool, complex, str, list, tuple, type(None))


def dense_operand(value: Any, name: str) -> Any:
    """An argument beside the input (a bound, ``clip_norm``, ``epsilon``), dense.

    TF converts those arguments with ``convert_to_tensor``, which densifies an
    ``IndexedSlices`` (repeated indices summed; measured in TF 2.21, ``docs/tf-reference.md``
    §14): a sparse torch tensor or JAX ``BCOO`` array is made dense the same way. A nested
    tensor is refused (TF's ``RaggedTensor`` there fails or broadcasts raggedly).
    """
    if type(value) in _PYTHON or is_numpy_scalar(value) or not sparse_or_refuse(value, name):
        return value
    return _dense(value)


def refuse_sparse_norm(value: Any, name: str) -> None:
    """``TypeError`` for a sparse ``use_norm``, as TF's for an ``IndexedSlices`` there.

    TF computes ``1.0 / use_norm``, which an ``IndexedSlices`` does not support (measured in
    TF 2.21).
    """
    if type(value) in _PYTHON or is_numpy_scalar(value) or not sparse_or_refuse(value, name):
        return
    what = "a JAX BCOO array" if _is_bcoo(value) else f"a sparse tensor (layout {value.layout})"
    msg = (
        f"`{name}` must be a dense 0-d array (the precomputed global norm), got {what}; pass "
        f"`{name}.to_dense()` (`.todense()` for BCOO)"
        " (TF: unsupported operand type(s) for /: 'float' and 'IndexedSlices')"
    )
    raise TypeError(msg)


def values_of(t: Any, name: str = "t") -> Any:
    """The stored values of a sparse ``t`` (a view where the library gives one).

    A coalesced torch COO tensor gives ``t.values()``, which autograd follows; an uncoalesced
    one gives ``t._values()``, which it does not, so an uncoalesced ``t`` that requires grad is
    refused while gradients are recorded. A dense ``t`` is returned unchanged.
    """
    if _is_bcoo(t):
        return t.data
    if not _torch_sparse(t):
        return t
    import torch

    if t.layout == torch.jagged:
        return t.values()

    if t.layout != torch.sparse_coo:
        return t.values()
    if t.is_coalesced():
        return t.values()
    if t.requires_grad and torch.is_grad_enabled():
        msg = (
            f"`{name}` is an uncoalesced sparse COO tensor that requires grad, and torch's "
            f"autograd does not follow the values of an uncoalesced tensor; pass "
            f"`{name}.detach()` (no gradient), or build it with `is_coalesced=True` from unique, "
            f"sorted indices (`{name}.coalesce()` sums repeated indices, which TF does not)"
        )
        raise TypeError(msg)
    return t._values()


def with_values(t: Any, values: Any) -> Any:
    """A sparse array of ``t``'s layout and shape, with ``t``'s indices and ``values``."""
    if _is_bcoo(t):
        return type(t)(
            (values, t.indices),
            shape=t.shape,
            indices_sorted=t.indices_sorted,
            unique_indices=t.unique_indices,
        )
    import torch

    if t.layout == torch.jagged:
        return torch.nested.nested_tensor_from_jagged(
            values, offsets=t.offsets(), lengths=t.lengths(), jagged_dim=t._ragged_idx
        )
    if t.layout == torch.sparse_coo:
        return torch.sparse_coo_tensor(
            t._indices(),
            values,
            t.shape,
            is_coalesced=t.is_coalesced(),
            check_invariants=False,  # the indices are t's own
        )
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        compressed, plain = t.crow_indices(), t.col_indices()
    else:
        compressed, plain = t.ccol_indices(), t.row_indices()
    return torch.sparse_compressed_tensor(
        compressed, plain, values, t.shape, layout=t.layout, check_invariants=False
    )


def _dense(t: Any) -> Any:
    return t.todense() if _is_bcoo(t) else t.to_dense()


def _shape_note(exc: Exception, values: Any) -> Exception:
    note = (
        f" (for a sparse `t`, TF's IndexedSlices rule applies: `axes` and the bounds refer to "
        f"its stored values, of shape {tuple(values.shape)})"
    )
    return type(exc)(f"{exc}{note}")


def through_values(fn: F) -> F:
    """Wrap ``fn(kernels, t, ...)``: a sparse ``t`` is computed through its values.

    The result has ``t``'s layout and indices. A ``ValueError`` about shapes (an axis, a
    bound) says that they refer to the stored values, as TF's ``IndexedSlices`` rule does.
    """
    return _through(fn, jagged=False)


def through_values_or_jagged(fn: F) -> F:
    """:func:`through_values`, and a jagged nested ``t`` through its packed values too.

    For ``clip_by_value``, as TF's takes a ``RaggedTensor`` (elementwise on its flat values);
    the other arguments must then be 0-d (a bound of another shape would broadcast against
    the packed values, not against the ragged rows as TF's does).
    """
    return _through(fn, jagged=True)


def _ndim(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return 1
    return len(getattr(value, "shape", ()))


def _through(fn: F, *, jagged: bool) -> F:
    @functools.wraps(fn)
    def wrapper(kernels: Any, t: Any, *args: Any, **kwargs: Any) -> Any:
        if jagged and _is_jagged(t):
            shaped = [a for a in (*args, *kwargs.values()) if not isinstance(a, str) and _ndim(a)]
            if shaped:
                msg = (
                    f"the bounds of a nested `t` (torch.jagged) must be numbers or 0-d arrays, "
                    f"got one of shape {tuple(getattr(shaped[0], 'shape', ()))}; pass a number, "
                    "or clip each component (`[f(c) for c in t.unbind()]`)"
                )
                raise ValueError(msg)
        elif not sparse_or_refuse(t, "t"):
            return fn(kernels, t, *args, **kwargs)
        values = values_of(t, "t")
        try:
            out = fn(kernels, values, *args, **kwargs)
        except ValueError as exc:
            if "shape" not in str(exc) and "`axes`" not in str(exc):
                raise
            raise _shape_note(exc, values) from None
        return with_values(t, out)

    return wrapper  # type: ignore[return-value]


def densified(name: str) -> Callable[[F], F]:
    """Wrap ``fn(kernels, <name>, ...)``: a sparse argument is made dense first, as TF does.

    TF's ``convert_to_tensor`` sums the values of repeated indices; torch's ``to_dense`` and
    BCOO's ``todense`` do the same (and autograd follows them).
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(kernels: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
            if sparse_or_refuse(x, name):
                x = _dense(x)
            return fn(kernels, x, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def values_list(items: list[Any]) -> tuple[list[Any], Callable[[list[Any]], list[Any]]]:
    """``t_list``'s entries with sparse ones replaced by their values, and the way back.

    The second item turns a list of results (one per entry) back into sparse arrays where the
    entry was sparse; it is the identity when no entry is.
    """
    kinds = {type(v) for v in items}
    if not any(_may_be_sparse(tp) for tp in kinds):  # by type: NumPy arrays, None
        return items, _same
    torch = imported("torch")
    if torch is not None and all(tp is type(None) or issubclass(tp, torch.Tensor) for tp in kinds):
        dense = (torch.strided, False)  # a nested tensor is strided too: refused below
        if {(v.layout, v.is_nested) for v in items if v is not None} <= {dense}:  # all dense
            return items, _same
    sparse = [i for i, v in enumerate(items) if v is not None and sparse_or_refuse(v, "t_list", i)]
    if not sparse:
        return items, _same
    values = list(items)
    for i in sparse:
        values[i] = values_of(items[i], f"t_list[{i}]")

    def back(outs: list[Any]) -> list[Any]:
        outs = list(outs)
        for i in sparse:
            outs[i] = with_values(items[i], outs[i])
        return outs

    return values, back


def _same(outs: list[Any]) -> list[Any]:
    return outs
