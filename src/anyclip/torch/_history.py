"""What the torch norm-history rules share: the norm, the stored state, the optimizer wrapper.

Layer: torch adapter helpers, below :mod:`anyclip.torch._zclip`,
:mod:`anyclip.torch._quantile_clip` and :mod:`anyclip.torch._skip_on_spike` (which import from
here, never the other way). The rules' state is an :class:`anyclip._history.History` of device
tensors, stored with a leading axis of length 1 and updated in place with ``copy_``; the global
norm is anyclip's, reduced over the rule's ``group``; :class:`_Wrapper` is the
``torch.optim.Optimizer`` base of the two optimizer wrappers. Nothing here reads a value back
to the host.
"""

from __future__ import annotations

from typing import Any

import torch

from anyclip import _clip
from anyclip._compat import torch_compiling
from anyclip._history import History
from anyclip._numerics import torch_rounded
from anyclip._sparse import values_of
from anyclip.torch._common import _PLAIN_TYPES, _local, _tensors
from anyclip.torch._total_norm import _join_group, _total_norm

#: helpers imported by name by the rule modules; nothing public
__all__: list[str] = []


_FIELDS = History._fields


def _parameters(model_or_parameters: Any) -> list[torch.Tensor]:
    if isinstance(model_or_parameters, torch.nn.Module):
        return list(model_or_parameters.parameters())
    return _tensors(model_or_parameters, "model_or_parameters")


def _grads(params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradients of ``params`` that exist, sparse ones by their stored values."""
    grads = [p.grad for p in params if p.grad is not None]
    if {g.layout for g in grads} <= {torch.strided}:  # the common case: dense, its own values
        return grads
    return [values_of(g) for g in grads]


_HALF = (torch.float16, torch.bfloat16)


def _norm(
    values: list[torch.Tensor], params: list[torch.Tensor], group: Any, *, torch_half: bool = False
) -> torch.Tensor:
    """Anyclip's global 2-norm of ``values`` (reduced over ``group``); 0 without gradients.

    In the widest dtype of ``values``, every step in it (TF's float16 norm: inf from 256).
    ``torch_half``: torch's ``clip_grad_norm_`` norm (autoclip's): for plain dense tensors
    (:func:`_dense`) of any dtypes, mixed ones included, torch's own ``get_total_norm``
    (:func:`_torch_total_norm`); for other float16 or bfloat16 tensors (sharded, sparse) the
    same rule (finite up to the dtype's largest value): each tensor's squares summed in
    float32 and its norm rounded to the dtype (:func:`_tensor_norm`), then the norm of those
    norms, in float32 and rounded once more. With ``group`` the squares
    of all the tensors are summed in float32, all-reduced in float32 and the norm rounded
    once (a tensor's norm needs its sums from every process).
    """
    if not values and group is not None:
        return _join_group(2.0, "widest", group)
    if not values:
        return torch.zeros((), device=params[0].device if params else None)
    widest = values[0].dtype
    for v in values[1:]:
        widest = torch.promote_types(widest, v.dtype)
    if torch_half and group is None and _dense(values):  # any dtypes, mixed ones included
        return _torch_total_norm(values)
    if torch_half and widest in _HALF and group is None:  # then every tensor is of widest
        norms = [_tensor_norm(v, torch_half=True) for v in values]
        stacked = torch.stack([n.to(norms[0].device) for n in norms])
        total: torch.Tensor = _local(_clip.global_norm([stacked], accumulate_dtype=torch.float32))
        return total.to(widest)
    acc: Any = torch.float32 if torch_half and widest in _HALF else "widest"
    norm: torch.Tensor = _local(_total_norm(values, 2.0, None, acc, group, name="parameters"))
    return norm if norm.dtype == widest else norm.to(widest)


def _zclip_norms(
    values: list[torch.Tensor], params: list[torch.Tensor], group: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients' norm as zclip 1.0 takes it, and as its warm-up ``clip_grad_norm_`` does.

    Op for op with torch's kernels (zclip is torch code): zclip's ``_compute_grad_norm``
    casts each gradient to the first parameter's dtype, takes its ``norm(2)``, then
    ``sqrt(sum(pow(norms, 2)))`` in that dtype (so a float16 norm from 256 squares to inf);
    torch's ``clip_grad_norm_`` takes each gradient's norm in its own dtype
    (``_foreach_norm``), then the ``vector_norm`` of those norms. Where every gradient has
    the first parameter's dtype and device (the common case) the per-tensor norms are taken
    once, with ``_foreach_norm`` (on the CPU the same kernel as ``norm(2)``); otherwise
    ``clip_grad_norm_``'s is torch's own ``get_total_norm`` (which stacks the per-tensor norms
    grouped by device and dtype, in its order, promoted to the widest dtype). Sharded
    (DTensor) or sparse gradients, a ``group`` or no gradient: anyclip's global norm
    (:func:`_norm`), for both.
    """
    if group is not None or not values or not _dense(values):
        norm = _norm(values, params, group)
        return norm, norm
    first = params[0]
    dtype, device = first.dtype, first.device
    if all(v.dtype == dtype and v.device == device for v in values):
        ours = per = list(torch._foreach_norm(values, 2.0))
        if torch_compiling():  # each norm rounded to its dtype, as eagerly (Inductor keeps float32)
            ours = per = [torch_rounded(n) for n in per]
        torch_norm = torch.linalg.vector_norm(torch.stack(per))
    else:
        ours = [torch.linalg.vector_norm(v.to(dtype)) for v in values]
        if torch_compiling():
            ours = [torch_rounded(n) for n in ours]
        # torch's own: it groups the gradients by device and dtype, in its order, before
        # stacking their norms (the sum of the squares in another order rounds otherwise)
        torch_norm = _torch_total_norm(values)
    stacked = torch.stack([n.to(device) for n in ours])
    squares = torch_rounded(torch.sum(torch_rounded(torch.pow(stacked, 2))))
    zclip_norm = torch_rounded(torch.sqrt(squares))
    return zclip_norm, torch_rounded(torch_norm)


def _tensor_norm(v: torch.Tensor, *, torch_half: bool = False) -> torch.Tensor:
    """The 2-norm of one gradient, in its dtype: :func:`_norm`'s rule for one tensor."""
    norm: torch.Tensor
    if torch_half and _dense([v]):
        return _torch_total_norm([v])
    if torch_half and v.dtype in _HALF:
        norm = _local(_clip.global_norm([v], accumulate_dtype=torch.float32))
        return norm.to(v.dtype)
    norm = _local(_clip.global_norm([v]))
    return norm


def _dense(values: list[torch.Tensor]) -> bool:
    """Whether ``values`` are plain dense tensors, which torch's own norms take as they are.

    Not a DTensor, a sparse tensor or another subclass: their norms are anyclip's.
    """
    return all(type(v) in _PLAIN_TYPES and v.layout == torch.strided for v in values)


def _torch_total_norm(values: list[torch.Tensor]) -> torch.Tensor:
    """The norm of torch's ``clip_grad_norm_``: ``torch.nn.utils.get_total_norm(values)``.

    torch's own call, so the bits are autoclip's on every device: each tensor's norm by
    ``_foreach_norm`` (float32 sums of half-precision squares, rounded to the dtype; on the
    CPU in ``vector_norm``'s order, which anyclip's sums in TF's order missed on float32
    rounding ties: 4 of 20,000 random float16 tensors 1 ULP off), then the ``vector_norm`` of
    those norms. No host read.
    """
    if (
        torch_compiling()
        and values[0].dtype in _HALF
        and all(v.dtype == values[0].dtype for v in values)
    ):
        # get_total_norm's steps for one dtype (the CPU's: a norm per tensor, then the norm
        # of the norms), each norm rounded to the dtype as eagerly (Inductor would skip the
        # rounding); several dtypes: torch's own call
        per = [torch_rounded(n) for n in torch._foreach_norm(values, 2.0)]
        first = values[0].device
        norm: torch.Tensor = torch_rounded(
            torch.linalg.vector_norm(torch.stack([n.to(first) for n in per]))
        )
        return norm
    total: torch.Tensor = torch.nn.utils.get_total_norm(values, 2.0)
    return total


def _state_dtype(norm: torch.Tensor, dtype: Any) -> torch.dtype:
    if dtype is not None:
        return dtype  # type: ignore[no-any-return]
    return torch.promote_types(norm.dtype, torch.float32)


# The state tensors are stored with a leading axis of length 1 and handed to the core as its
# 0-d (or batch-shaped) views: torch.compile's inductor (torch 2.13, CPU) passes a 0-d float64
# input by value, so an in-place write into it would be lost.


def _store(h: History) -> History:
    """``h`` as stored: every tensor with a leading axis of length 1."""
    return History(*(t.reshape(1, *t.shape).clone() for t in h))


def _view(stored: History) -> History:
    """The history the core reads: the stored tensors without their leading axis (views)."""
    return History(*(t[0] for t in stored))


def _assign(target: History, new: History) -> None:
    """Write ``new`` into the stored tensors ``target`` in place (their identity is kept)."""
    for t, n in zip(target, new, strict=True):
        t.copy_(n.reshape(1, *n.shape))


def _history_state(h: History | None) -> dict[str, Any]:
    return {} if h is None else {k: v[0].clone() for k, v in zip(_FIELDS, h, strict=True)}


def _load_history(state: dict[str, Any], h: History | None, name: str) -> History | None:
    if not state:
        return None
    missing = [k for k in _FIELDS if k not in state]
    if missing:
        msg = (
            f"`state_dict[{name!r}]` must hold {list(_FIELDS)}, it lacks {missing}; pass what "
            "`state_dict()` returned"
        )
        raise KeyError(msg)
    loaded = History(*(torch.as_tensor(state[k]) for k in _FIELDS))
    if h is None:
        return _store(loaded)
    for t, v in zip(h, loaded, strict=True):
        if t.shape[1:] != v.shape:
            msg = (
                f"`state_dict[{name!r}]` holds tensors of shape {tuple(v.shape)} where this "
                f"object has {tuple(t.shape[1:])}; build it with the same arguments as the "
                "saved one"
            )
            raise ValueError(msg)
        t.copy_(v.reshape(t.shape))
    return h


class _Wrapper(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` around ``self.optimizer``, whose hooks it registers.

    Its subclasses do not call ``Optimizer.__init__`` (the state is the wrapped optimizer's);
    the hook registrations, which would act on this wrapper's absent state, go to the wrapped
    optimizer (its hooks run around its own step, inside the wrapper's).
    """

    optimizer: torch.optim.Optimizer

    def register_step_pre_hook(self, hook: Any) -> Any:
        """The wrapped optimizer's ``register_step_pre_hook``."""
        return self.optimizer.register_step_pre_hook(hook)

    def register_step_post_hook(self, hook: Any) -> Any:
        """The wrapped optimizer's ``register_step_post_hook``."""
        return self.optimizer.register_step_post_hook(hook)

    def register_state_dict_pre_hook(self, hook: Any, prepend: bool = False) -> Any:
        """The wrapped optimizer's ``register_state_dict_pre_hook``."""
        return self.optimizer.register_state_dict_pre_hook(hook, prepend)

    def register_state_dict_post_hook(self, hook: Any, prepend: bool = False) -> Any:
        """The wrapped optimizer's ``register_state_dict_post_hook``."""
        return self.optimizer.register_state_dict_post_hook(hook, prepend)

    def register_load_state_dict_pre_hook(self, hook: Any, prepend: bool = False) -> Any:
        """The wrapped optimizer's ``register_load_state_dict_pre_hook``."""
        return self.optimizer.register_load_state_dict_pre_hook(hook, prepend)

    def register_load_state_dict_post_hook(self, hook: Any, prepend: bool = False) -> Any:
        """The wrapped optimizer's ``register_load_state_dict_post_hook``."""
        return self.optimizer.register_load_state_dict_post_hook(hook, prepend)
