"""Did-you-mean hints for keyword arguments a public function does not take.

Layer: the public layer's checks. :func:`hints_keywords` wraps a public function so that a call
with an unknown keyword (``clip_by_norm(t, max_norm=1.0)``, torch's name for TF's ``clip_norm``)
raises a ``TypeError`` that names the argument the function does take, instead of Python's bare
"got an unexpected keyword argument". The wrapper costs nothing on a correct call: it only looks
at the keywords after the call has raised ``TypeError``, and re-raises any other ``TypeError``
unchanged. ``functools.wraps`` keeps the signature ``inspect.signature`` shows (TF's argument
names are the contract), the docstring and the type a checker sees.

>>> import numpy as np
>>> import anyclip
>>> try:
...     anyclip.clip_by_norm(np.float32([3.0, 4.0]), max_norm=1.0)
... except TypeError as e:
...     print(str(e).split(" (")[0])
clip_by_norm() got an unexpected keyword argument `max_norm`: did you mean `clip_norm`?
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ALIASES", "hints_keywords"]

F = TypeVar("F", bound=Callable[..., Any])

#: Names other libraries (torch, optax, Keras, NumPy, TF 1.x) use -> anyclip's names for the
#: same argument, tried in order; only the ones the called function takes are suggested.
ALIASES: dict[str, tuple[str, ...]] = {
    "max_norm": ("clip_norm",),
    "clipnorm": ("clip_norm", "max_norm"),
    "global_clipnorm": ("clip_norm", "max_norm"),
    "clip_norm": ("max_norm",),
    "maxnorm": ("clip_norm", "max_norm"),
    "threshold": ("clip_norm", "max_norm"),
    "clip_value": ("clip_value_min", "clip_value_max"),
    "clipvalue": ("clip_value_min", "clip_value_max", "clip_value"),
    "min": ("clip_value_min",),
    "max": ("clip_value_max",),
    "a_min": ("clip_value_min",),
    "a_max": ("clip_value_max",),
    "min_value": ("clip_value_min",),
    "max_value": ("clip_value_max",),
    "lower": ("clip_value_min",),
    "upper": ("clip_value_max",),
    "norm_type": ("ord",),
    "p": ("ord", "norm_type"),
    "ord": ("norm_type",),
    "dim": ("axis", "axes"),
    "axis": ("axes", "dim"),
    "axes": ("axis",),
    "keepdim": ("keepdims",),
    "eps": ("epsilon",),
    "epsilon": ("eps",),
    "grads": ("t_list", "tensors", "parameters"),
    "gradients": ("t_list", "tensors", "parameters"),
    "tensors": ("t_list",),
    "parameters": ("t_list",),
    "params": ("t_list", "parameters"),
    "input": ("t", "tensor", "x"),
    "x": ("t", "tensor"),
    "tensor": ("t", "x"),
    "t": ("tensor", "x"),
    "total_norm": ("use_norm",),
    "use_norm": ("total_norm",),
    "dtype": ("accumulate_dtype",),
    "acc_dtype": ("accumulate_dtype",),
}

#: Keywords whose fix is another argument's value or another function, by name.
_NOTES: dict[str, str] = {
    "error_if_nonfinite": 'Pass nonfinite="raise" (or use anyclip.torch.clip_grad_norm_, which has '
    "torch's signature).",
    "norm_type": "The global-norm functions compute TF's 2-norm only; for torch's `norm_type` use "
    "anyclip.torch.clip_grad_norm_ or anyclip.torch.get_total_norm.",
    "foreach": "anyclip.torch.clip_grad_norm_ takes torch's `foreach`.",
    "clip_value": "TF's bounds are two arguments: clip_value_min=-v, clip_value_max=v.",
    "clipvalue": "TF's bounds are two arguments: clip_value_min=-v, clip_value_max=v.",
}


def _suggestion(name: str, unknown: str, taken: list[str]) -> str:
    """The hint for ``unknown`` given the parameter names ``taken`` of function ``name``."""
    candidates = [c for c in ALIASES.get(unknown, ()) if c in taken]
    if not candidates:
        candidates = difflib.get_close_matches(unknown, taken, n=2, cutoff=0.6)
    parts = []
    if candidates:
        parts.append("did you mean " + " or ".join(f"`{c}`" for c in candidates) + "?")
    note = _NOTES.get(unknown)
    if note and not (unknown == "norm_type" and "ord" in taken):
        parts.append(note)
    if not parts:
        parts.append("anyclip takes TF's argument names.")
    return (
        f"{name}() got an unexpected keyword argument `{unknown}`: {' '.join(parts)} "
        f"(it takes {', '.join(f'`{p}`' for p in taken)})"
    )


def hints_keywords(fn: F) -> F:
    """``fn``, raising a did-you-mean ``TypeError`` for a keyword it does not take.

    The signature, docstring and annotations stay ``fn``'s (``functools.wraps``); a correct call
    runs ``fn`` directly, and any ``TypeError`` not caused by an unknown keyword is re-raised as
    it came.
    """
    taken = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    known = frozenset(taken)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TypeError:
            unknown = [k for k in kwargs if k not in known]
            if not unknown:
                raise
            msg = _suggestion(fn.__name__, unknown[0], taken)
            raise TypeError(msg) from None

    return wrapper  # type: ignore[return-value]
