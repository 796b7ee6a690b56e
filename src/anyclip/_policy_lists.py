"""The list arguments (``t_list``): a list or tuple of arrays or ``None``, as TF takes it.

Layer: core (the argument policy for lists). ``t_list`` is a list or tuple (not a lone array, a
generator or a dict) of arrays or ``None``; its arrays share one floating dtype unless an
``accumulate_dtype`` is given. The messages say the fix for a dict, an iterator of parameters
or a lone array.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from anyclip._compat import (
    all_arrays,
    dtype_name,
    imported,
    is_array,
    library,
)
from anyclip._policy import as_input, native_order
from anyclip._policy_dtypes import dtype_kind, require_kind
from anyclip._policy_words import FLOATS, tf_attr, tf_expected, tf_words
from anyclip._typing import Namespace

__all__ = [
    "ListNames",
    "as_list",
    "floating_list",
    "is_sequence_of_arrays",
    "real_list",
]


def is_sequence_of_arrays(value: Any) -> bool:
    """Whether ``value`` is a list-like that TF accepts as ``t_list``."""
    return (
        isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and not is_array(value)
    )


# -------------------------------------------------------------------- lists
class ListNames(Sequence[str]):
    """``t_list[0]``, ``t_list[1]``, ... then ``extra``: argument names, made only when needed."""

    def __init__(self, n: int, extra: tuple[str, ...] = ()) -> None:
        self.n, self.extra = n, extra

    def __len__(self) -> int:
        return self.n + len(self.extra)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        return f"t_list[{i}]" if i < self.n else self.extra[i - self.n]


def _first_is_parameter(iterator: Iterator[Any]) -> bool:
    """Whether the first item of ``iterator`` (read, as the call fails anyway) is a weight.

    A torch ``Parameter`` or a leaf tensor that requires grad: what ``model.parameters()``
    yields, whose ``.grad`` the user means to clip.
    """
    first = next(iterator, None)
    torch = imported("torch")
    if torch is None or not isinstance(first, torch.Tensor):
        return False
    return isinstance(first, torch.nn.Parameter) or (first.requires_grad and first.is_leaf)


def as_list(t_list: Any) -> list[Any]:
    """``t_list`` as a new list; ``TypeError`` unless it is a list or tuple (TF's rule).

    The message starts with TF's own (``"`t_list` should be a sequence of tensors"``), then
    says what was expected and the fix for a dict, an iterator or a lone array. For an iterator
    of torch parameters (``model.parameters()``) the fix is to clip their gradients
    (``anyclip.torch.clip_grad_norm_`` or ``[p.grad for p in ...]``), not ``list(...)``, which
    would clip the weights.
    """
    if not is_sequence_of_arrays(t_list):
        if isinstance(t_list, Mapping):
            fix = (
                "for a dict (or any tree) of arrays use anyclip.tree (tree.global_norm, "
                "tree.clip_by_global_norm)"
            )
        elif is_array(t_list):
            fix = "wrap a lone array in a list: [t]"
        elif isinstance(t_list, Iterator) and _first_is_parameter(t_list):
            fix = (
                "these are trainable parameters (`model.parameters()`), and list(...) of them "
                "would use the weights, not their gradients: pass "
                "[p.grad for p in model.parameters()], or clip in place with "
                "anyclip.torch.clip_grad_norm_(model.parameters(), max_norm)"
            )
        elif isinstance(t_list, Iterable) and not isinstance(t_list, (str, bytes)):
            fix = "pass list(...) of it (a generator or iterator can be read only once)"
        else:
            fix = "pass a list or tuple of arrays"
        msg = (
            f"`t_list` should be a sequence of tensors. Received {type(t_list)}. "
            f"anyclip expected a list or tuple of arrays (or None); {fix}"
        )
        raise TypeError(msg)
    return list(t_list)


def floating_list(
    xp: Namespace, t_list: list[Any], *, mixed_ok: bool = False, beside: Sequence[Any] = ()
) -> list[Any]:
    """Convert the entries, check they are floating and (unless ``mixed_ok``) share one dtype.

    Python data goes to the device of the first array among the entries and ``beside`` (the
    call's other arguments), as :func:`as_input` places it.
    """
    present = [v for v in t_list if v is not None]
    if all_arrays(present):  # the common case: one check per distinct type and dtype
        dtypes = {v.dtype for v in present}
        if len(dtypes) <= 1 or mixed_ok:
            for dtype in dtypes:
                if dtype_kind(xp, dtype) != "real":
                    break
            else:
                if library(xp) == "dask":  # without chunks of no elements (native_order)
                    return [None if v is None else native_order(v) for v in t_list]
                return list(t_list)
    out: list[Any] = []
    first = None
    home = _first_array(present, beside)
    for i, v in enumerate(t_list):
        if v is None:
            out.append(None)
            continue
        v = as_input(v, xp, f"t_list[{i}]", beside=home)
        require_kind(xp, v, f"t_list[{i}]", ("real",), FLOATS, tf_attr)  # TF's L2Loss
        if first is None:
            first = v
        elif v.dtype != first.dtype and not mixed_ok:
            msg = (
                "`t_list` must hold arrays of one dtype (TF does not promote), got "
                f"{dtype_name(first.dtype)} and {dtype_name(v.dtype)} at t_list[{i}]; cast "
                "them to one dtype, or pass accumulate_dtype='widest'"
                f"{tf_words(tf_expected(first.dtype, v.dtype))}"  # TF's Pack of the sums
            )
            raise TypeError(msg)
        out.append(v)
    return out


def real_list(
    xp: Namespace, t_list: list[Any], *, beside: Sequence[Any] = ()
) -> tuple[list[Any], list[int]]:
    """Entries converted to arrays of a real or bool dtype, and the positions of the bool ones.

    For ``clip_by_global_norm`` with ``use_norm`` (no norm to compute): TF scales integers by
    a truncated factor, and a bool array by the factor cast to bool (its ``*`` on bools is a
    logical and), measured in TF 2.21. Python data goes to the device of the first array
    among the entries and ``beside``, as in :func:`floating_list`.
    """
    out: list[Any] = []
    bools: list[int] = []
    home = _first_array(t_list, beside)
    for i, v in enumerate(t_list):
        if v is None:
            out.append(None)
            continue
        v = as_input(v, xp, f"t_list[{i}]", beside=home)
        kind = require_kind(xp, v, f"t_list[{i}]", ("int", "real", "bool"), "a real or bool dtype")
        if kind == "bool":
            bools.append(i)
        out.append(v)
    return out, bools


def _first_array(*groups: Sequence[Any]) -> tuple[Any, ...]:
    """The first array of ``groups``, as a 1-tuple (empty: none), looked for once per call."""
    for group in groups:
        for v in group:
            if is_array(v):
                return (v,)
    return ()
