"""TF's per-tensor clippers for torch gradients: by value (one bound or two) and by each norm.

Layer: adapter (public; :mod:`anyclip.torch` re-exports the names in ``__all__``).
``clip_grad_value_`` is torch's drop-in; ``clip_grad_by_value_`` and ``clip_grad_by_norm_`` are
TF's ``clip_by_value`` and ``clip_by_norm`` applied to every ``p.grad`` in place.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from anyclip import _clip_tensor
from anyclip._compat import namespace
from anyclip._keywords import hints_keywords
from anyclip._policy import check_operand
from anyclip._policy_axes import normalize_axes
from anyclip._policy_dtypes import resolve_accumulate_dtype
from anyclip._sparse import values_of
from anyclip.torch._common import (
    Parameters,
    _as_float,
    _by_device_and_dtype,
    _describe,
    _foreach,
    _grads,
    _use_foreach,
)

__all__ = [
    "clip_grad_by_norm_",
    "clip_grad_by_value_",
    "clip_grad_value_",
]


def _refuse_second_bound(foreach: Any) -> None:
    """``TypeError`` for a number or tensor as ``clip_grad_value_``'s ``foreach``.

    It is usually TF's second bound (``clip_by_value(t, lo, hi)`` ported as
    ``clip_grad_value_(params, lo, hi)``), which torch would read as ``foreach=True`` and
    clip to ``[-lo, lo]``.
    """
    if isinstance(foreach, bool) or not isinstance(foreach, (numbers.Real, torch.Tensor)):
        return
    msg = (
        f"`foreach` must be True, False or None (as in torch), got {_describe(foreach)}; "
        "for two bounds (TF's clip_by_value) use anyclip.torch.clip_grad_by_value_"
    )
    raise TypeError(msg)


@hints_keywords
@torch.no_grad()
def clip_grad_value_(
    parameters: Parameters,
    clip_value: float | torch.Tensor,
    foreach: bool | None = None,
) -> None:
    """Clip every ``p.grad`` in place to ``[-clip_value, clip_value]``, as torch's function.

    TF's ``clip_by_value(g, -clip_value, clip_value)``: the upper bound first, then the lower
    one; NaN stays NaN. Identical to torch's for ``clip_value >= 0``; for a negative
    ``clip_value`` TF's order gives ``-clip_value`` everywhere (torch's gives ``clip_value``).

    Parameters
    ----------
    parameters : Tensor or iterable of Tensor
        Parameters whose ``.grad`` is clipped; those without a gradient are skipped. Sparse
        gradients are clipped through their values.
    clip_value : float or Tensor
        The largest magnitude (converted with ``float``, as torch does: a tensor is read on
        the host, a host sync; :func:`clip_grad_by_value_` keeps tensor bounds on the device).
    foreach : bool, optional
        torch's switch, honoured as in :func:`clip_grad_norm_`; a number or a tensor is
        refused (torch would take it as ``True``): it is usually a second bound, which goes to
        :func:`clip_grad_by_value_`.

    Raises
    ------
    TypeError
        If ``foreach`` is a number or a tensor, or ``clip_value`` is None, a list or complex
        (torch's class).
    ValueError
        If ``clip_value`` is a string that is no number or a tensor of several values
        (torch's class).

    Examples
    --------
    >>> import torch
    >>> from anyclip.torch import clip_grad_value_
    >>> p = torch.nn.Parameter(torch.zeros(3))
    >>> p.grad = torch.tensor([-2.0, 0.25, 3.0])
    >>> clip_grad_value_([p], 0.5)
    >>> p.grad
    tensor([-0.5000,  0.2500,  0.5000])
    """
    _refuse_second_bound(foreach)
    each = _foreach(foreach)
    v = _as_float(clip_value, "clip_value", "1.0")
    values = [values_of(g) for g in _grads(parameters)]
    for (device, _), group in _by_device_and_dtype(values).items():
        if _use_foreach(each, group, device):
            torch._foreach_clamp_max_(group, v)  # minimum(g, v) first, as TF
            torch._foreach_clamp_min_(group, -v)
        else:
            for g in group:
                g.clamp_max_(v).clamp_min_(-v)


@hints_keywords
@torch.no_grad()
def clip_grad_by_value_(
    parameters: Parameters,
    clip_value_min: float | torch.Tensor,
    clip_value_max: float | torch.Tensor,
) -> None:
    """Clip every ``p.grad`` in place to ``[clip_value_min, clip_value_max]``, as TF.

    :func:`anyclip.clip_by_value` on each gradient: the upper bound first, so the lower bound
    wins when ``clip_value_min > clip_value_max``; NaN stays NaN.

    Parameters
    ----------
    parameters : Tensor or iterable of Tensor
        Parameters whose ``.grad`` is clipped; those without a gradient are skipped.
    clip_value_min, clip_value_max : float or Tensor
        The bounds (converted as :func:`anyclip.clip_by_value` converts them).

    Examples
    --------
    >>> import torch
    >>> from anyclip.torch import clip_grad_by_value_
    >>> p = torch.nn.Parameter(torch.zeros(3))
    >>> p.grad = torch.tensor([-2.0, 0.25, 3.0])
    >>> clip_grad_by_value_([p], -1.0, 0.5)
    >>> p.grad
    tensor([-1.0000,  0.2500,  0.5000])
    """
    check_operand(clip_value_min, "clip_value_min")  # with no gradient too
    check_operand(clip_value_max, "clip_value_max")
    for g in _grads(parameters, warn_empty=True):
        v = values_of(g)
        v.copy_(_clip_tensor.clip_by_value(v, clip_value_min, clip_value_max))


@hints_keywords
@torch.no_grad()
def clip_grad_by_norm_(
    parameters: Parameters,
    clip_norm: float | torch.Tensor,
    axes: Any = None,
    *,
    accumulate_dtype: Any = None,
) -> None:
    """Clip every ``p.grad`` in place to norm ``clip_norm`` over ``axes``, each on its own.

    :func:`anyclip.clip_by_norm` on each gradient (TF has no list version of it); a sparse
    gradient through its values, as TF clips ``IndexedSlices``.

    Parameters
    ----------
    parameters : Tensor or iterable of Tensor
        Parameters whose ``.grad`` is clipped; those without a gradient are skipped.
    clip_norm : float or Tensor
        The largest norm of each gradient.
    axes : int or sequence of int, optional
        Axes of each norm (``None``: the whole gradient).
    accumulate_dtype : dtype or str, optional
        As in :func:`anyclip.clip_by_norm`.

    Examples
    --------
    >>> import torch
    >>> from anyclip.torch import clip_grad_by_norm_
    >>> p = torch.nn.Parameter(torch.zeros(2))
    >>> p.grad = torch.tensor([3.0, 4.0])
    >>> clip_grad_by_norm_([p], 1.0)
    >>> p.grad
    tensor([0.6000, 0.8000])
    """
    check_operand(clip_norm, "clip_norm")  # with no gradient too
    if axes is not None:
        normalize_axes(axes, 1 << 30, "axes")  # any rank: types only
    xp = namespace(torch.zeros(()))
    resolve_accumulate_dtype(xp, accumulate_dtype, [], single="clip_by_norm")
    for g in _grads(parameters, warn_empty=True):
        v = values_of(g)
        v.copy_(_clip_tensor.clip_by_norm(v, clip_norm, axes, accumulate_dtype=accumulate_dtype))
