"""Skipping a step on a spike or a non-finite norm for torch: :func:`skip_on_spike`.

Layer: public adapter over :func:`anyclip._history.spike_step` (OLMo-core's rule with
``optax.apply_if_finite``'s), the shared helpers of :mod:`anyclip.torch._history` and
:mod:`anyclip.torch._optim_state` (the optimizers' initial state); :mod:`anyclip.torch`
re-exports the names in ``__all__``. The decision is a device tensor: a skipped step is undone
on the device, without a host sync (:class:`SkipOnSpike`).

The undo costs a few operations per step whatever the number of tensors (:class:`_Plan`): the
parameters and state tensors are snapshot, as integers of their width (their bits), into one
flat buffer per device and width, and a step is undone in place with integer arithmetic,
``live * taken + snapshot * skipped``: exact for every bit pattern (NaN and inf included, which
a float blend would spread). The plan is kept while the tensors it was made for are the ones
the optimizer holds; a step that creates or replaces state is undone tensor by tensor with
``torch.where``, as is every step under ``torch.compile`` (whose inductor fuses it).
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Callable
from typing import Any

import torch

from anyclip import _history
from anyclip._compat import namespace, torch_to
from anyclip._history import History, check_mapping
from anyclip._keywords import hints_keywords
from anyclip.torch import _optim_state
from anyclip.torch._common import _local
from anyclip.torch._history import (
    _assign,
    _grads,
    _history_state,
    _load_history,
    _norm,
    _store,
    _view,
    _Wrapper,
)

__all__ = ["SkipOnSpike", "skip_on_spike"]

#: the integer dtype of each element width: a tensor's bits are viewed as it
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor | None:
    """``t``'s bits as an integer tensor sharing its storage, or None where none can be made.

    A complex tensor is viewed as its real and imaginary parts first (a trailing axis of 2).
    """
    if t.layout != torch.strided:
        return None
    try:
        if t.is_complex():
            t = torch.view_as_real(t)
        dt = _BITS.get(t.element_size())
        if dt is None:
            return None
        return t if t.dtype == dt else t.view(dt)
    except RuntimeError:  # a conjugate view, ...: no integer view of it
        return None


def _unbits(b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The view of ``dtype`` over ``b`` (what :func:`_bits` made of a tensor of ``dtype``)."""
    if dtype.is_complex:
        return torch.view_as_complex(b.view(dtype.to_real()))
    return b if b.dtype == dtype else b.view(dtype)


def _sources(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """What a step may write: each parameter with a gradient, then its state tensors.

    The tensors themselves (DTensors too), in ``param_groups``' order: built at every step,
    so kept lean (no per-tensor call beyond the state lookup).
    """
    state = optimizer.state
    out: list[torch.Tensor] = []
    add = out.append
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                add(p)
                st = state.get(p)
                if st:
                    for v in st.values():
                        if isinstance(v, torch.Tensor):
                            add(v)
    return out


class _Group:
    """One device and width of a :class:`_Plan`: the live tensors' bits and their snapshot."""

    __slots__ = ("bits", "device", "dtype", "flat", "saved")

    def __init__(self, bits: list[torch.Tensor]) -> None:
        self.bits = bits
        self.device, self.dtype = bits[0].device, bits[0].dtype
        # each tensor's snapshot starts at a multiple of 16 bytes (aligned vector loads, and
        # the complex view of a snapshot)
        align = max(1, 16 // bits[0].element_size())
        starts, end = [], 0
        for b in bits:
            starts.append(end)
            end += -(-b.numel() // align) * align
        self.flat = torch.empty(end, dtype=self.dtype, device=self.device)
        self.saved = [
            self.flat[i : i + b.numel()].view(b.shape) for i, b in zip(starts, bits, strict=True)
        ]


def _move(flag: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``flag`` on ``device``: without waiting, except to the CPU, whose ops read it at once.

    A copy to the CPU is a host sync (Adam's CPU ``step`` counters on CUDA: pass
    ``capturable=True``); without waiting, the CPU would read its buffer before the copy lands.
    """
    if flag.device == device:
        return flag
    moved: torch.Tensor = torch_to(flag, device)
    return moved


def _span(t: torch.Tensor) -> tuple[int, int, int]:
    """The bytes ``t`` may touch: its storage (by identity) and ``[start, stop)`` in it."""
    start = int(t.storage_offset()) * t.element_size()
    last = sum((int(n) - 1) * int(st) for n, st in zip(t.shape, t.stride(), strict=True))
    return int(t.untyped_storage()._cdata), start, start + (last + 1) * t.element_size()


def _disjoint(tensors: list[torch.Tensor]) -> bool:
    """Whether no two of ``tensors`` may share memory (each is written once by an undo)."""
    spans = sorted(_span(t) for t in tensors if t.numel())
    return all(a[0] != b[0] or a[2] <= b[1] for a, b in itertools.pairwise(spans))


#: the tensor types whose ``data_ptr`` tells a replaced ``.data`` (others: a storage check)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


class _Plan:
    """The snapshot of one set of tensors: made once, reused while the set is unchanged.

    ``sources`` (held, so that their ids stay theirs) as :func:`_sources` lists them; ``live``
    and ``keys`` the parameters and their state keys; ``views`` each source's snapshot in its
    own dtype (for the tensor-by-tensor undo). Unchanged means the same tensor objects, in the
    same order, over the same memory (a parameter whose ``.data`` was replaced is not).
    """

    __slots__ = ("bits", "groups", "ids", "keys", "live", "plain", "ptrs", "sources", "views")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        sources: list[torch.Tensor],
        local: list[torch.Tensor],
        bits: list[torch.Tensor],
    ) -> None:
        state = optimizer.state
        self.sources = sources
        self.ids = list(map(id, sources))
        #: plain tensors are checked by data pointer; DTensors, FakeTensors, ... by storage
        self.plain = all(type(t) in _PLAIN for t in sources)
        self.ptrs = list(map(torch.Tensor.data_ptr, sources)) if self.plain else []
        self.bits = bits
        self.live = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        self.keys = [
            [k for k, v in state.get(p, {}).items() if isinstance(v, torch.Tensor)]
            for p in self.live
        ]
        by: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for i, b in enumerate(bits):
            by.setdefault((b.device, b.dtype), []).append(i)
        self.groups = [_Group([bits[i] for i in idx]) for idx in by.values()]
        views = list(local)
        for g, idx in zip(self.groups, by.values(), strict=True):
            for i, v in zip(idx, g.saved, strict=True):
                views[i] = _unbits(v, local[i].dtype)
        # in the order of the tensor-by-tensor undo: the parameters, then their state tensors
        starts, pos = [], 0
        for ks in self.keys:
            starts.append(pos)
            pos += 1 + len(ks)
        self.views = [views[i] for i in starts]
        self.views += [
            views[i + 1 + j]
            for i, ks in zip(starts, self.keys, strict=True)
            for j in range(len(ks))
        ]

    @classmethod
    def make(cls, optimizer: torch.optim.Optimizer, sources: list[torch.Tensor]) -> _Plan | None:
        """The plan of ``sources``, or None: those are then undone tensor by tensor.

        None where a tensor has no integer view (a sparse one), two may share memory (a
        tensor listed twice, whose undo would add its snapshot twice), or a tensor has no
        storage to tell (a device whose tensors have no data pointer).
        """
        local = [_local(t) for t in sources]
        bits = [_bits(t) for t in local]
        kept = [b for b in bits if b is not None]
        try:
            if len(kept) != len(bits) or not _disjoint(kept):
                return None
            return cls(optimizer, sources, local, kept)
        except (RuntimeError, NotImplementedError):  # no storage, no data pointer
            return None

    def holds(self, sources: list[torch.Tensor]) -> bool:
        """Whether ``sources`` (as :func:`_sources` lists them now) are this plan's tensors."""
        if list(map(id, sources)) != self.ids:
            return False
        if self.plain:
            return list(map(torch.Tensor.data_ptr, sources)) == self.ptrs
        # a DTensor's shard, a FakeTensor (no data pointer): does it still share the storage?
        alias = torch._C._is_alias_of  # type: ignore[attr-defined]  # not in torch's stubs
        return all(map(alias, map(_local, sources), self.bits))

    def snapshot(self) -> None:
        """Copy the live tensors' bits into the snapshot: one ``_foreach_copy_`` a group."""
        for g in self.groups:
            torch._foreach_copy_(g.saved, g.bits)

    def undo(self, apply: torch.Tensor, skip: torch.Tensor) -> None:
        """Set each live tensor to its snapshot where ``skip``, in place, bit for bit.

        ``live * apply + snapshot * skip`` in the integers of each group's width (``apply``
        and ``skip`` are 0 or 1 and each other's complement): exact for any bits, and a few
        operations a group however many tensors it holds.
        """
        for g in self.groups:
            keep = _move(apply, g.device).to(g.dtype)
            drop = _move(skip, g.device).to(g.dtype)
            torch._foreach_mul_(g.bits, keep)
            g.flat.mul_(drop)
            torch._foreach_add_(g.bits, g.saved)


class _Skipper:
    """The state and the two halves of :class:`SkipOnSpike`'s step (a plain object).

    Kept apart from the ``torch.optim.Optimizer`` subclass because torch 2.13's dynamo traces
    an Optimizer as an ``OptimizerVariable``, which drops attribute writes made in a compiled
    ``before_step`` (and intercepts every attribute whose name is a substring of
    ``"_init_group"``, such as ``group``).
    """

    def __init__(
        self,
        optimizer: Any,
        rolling_interval_length: int,
        sigma_factor: float,
        on_loss: bool,
        max_consecutive_errors: int | None,
        group: Any,
    ) -> None:
        length, sigma, errors = _history.check_spike_arguments(
            rolling_interval_length, sigma_factor, max_consecutive_errors
        )
        if not isinstance(optimizer, torch.optim.Optimizer):
            msg = (
                f"`optimizer` must be a torch.optim.Optimizer, got {type(optimizer).__name__}; "
                "pass e.g. torch.optim.AdamW(model.parameters())"
            )
            raise TypeError(msg)
        self.optimizer = optimizer
        self.rolling_interval_length = length
        self.sigma_factor = sigma
        self.on_loss = bool(on_loss)
        self.max_consecutive_errors = errors
        self.group = group
        self.norms: History | None = None
        self.losses: History | None = None
        self.counters: dict[str, torch.Tensor] = {}
        self._buffers: list[torch.Tensor] = []
        #: the snapshot of the tensors of the last step (None until the first, or unplannable)
        self._plan: _Plan | None = None
        #: SGD parameters whose momentum buffer may be a placeholder (its first step skipped)
        self._fresh: dict[torch.Tensor, torch.Tensor] = {}
        #: the last step's decision (a bool tensor: the step was taken), for logging
        self.last_step_applied: torch.Tensor | None = None

    def __getstate__(self) -> dict[str, Any]:
        # the snapshot is not state: a copy or an unpickled object plans its own
        return {**self.__dict__, "_plan": None, "_buffers": []}

    def __getattr__(self, name: str) -> Any:
        try:
            optimizer = self.__dict__["optimizer"]
        except KeyError:  # while copying or unpickling
            raise AttributeError(name) from None
        return getattr(optimizer, name)

    @property
    def skipped(self) -> torch.Tensor:
        """How many steps were skipped so far (an int32 tensor on the device: no host sync)."""
        if not self.counters:
            return torch.zeros((), dtype=torch.int32)
        return self.counters["skipped"]

    def _params(self) -> list[torch.Tensor]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _decide(self, norm: torch.Tensor, loss: Any) -> torch.Tensor:
        xp = namespace(norm)
        dt = torch.promote_types(norm.dtype, torch.float32)
        if self.norms is None:
            length = self.rolling_interval_length
            self.norms = _store(_history.init_history(xp, length, dt, norm.device))
            if self.on_loss:
                self.losses = _store(_history.init_history(xp, length, dt, norm.device))
            zero = torch.zeros((), dtype=torch.int32, device=norm.device)
            self.counters = {
                k: zero.clone() for k in ("notfinite_count", "total_notfinite", "skipped")
            }
        if self.on_loss:
            if loss is None:
                msg = "`loss` is needed at every step with on_loss=True; pass step(loss=loss)"
                raise TypeError(msg)
            if not isinstance(loss, torch.Tensor) and (
                isinstance(loss, bool) or not isinstance(loss, numbers.Real)
            ):
                msg = (
                    "`loss` must be a tensor (this step's loss) or a real number, got "
                    f"{type(loss).__name__}"
                )
                raise TypeError(msg)
            if not isinstance(loss, torch.Tensor):  # filled on the device: no host copy
                loss = torch.full((), float(loss), device=norm.device)
            loss = torch.as_tensor(loss, device=norm.device).detach()
        d = _history.spike_step(
            xp,
            _view(self.norms),
            norm,
            self.counters["notfinite_count"],
            self.counters["total_notfinite"],
            self.counters["skipped"],
            sigma_factor=self.sigma_factor,
            losses=None if self.losses is None else _view(self.losses),
            loss=loss if self.on_loss else None,
            max_consecutive_errors=self.max_consecutive_errors,
        )
        _assign(self.norms, d.norms)
        if self.losses is not None and d.losses is not None:
            _assign(self.losses, d.losses)
        self.counters["notfinite_count"].copy_(d.notfinite_count)
        self.counters["total_notfinite"].copy_(d.total_notfinite)
        self.counters["skipped"].copy_(d.skipped)
        return d.apply  # type: ignore[no-any-return]

    def step(
        self,
        closure: Callable[[], Any] | None = None,
        *,
        loss: Any = None,
        grad_norm: torch.Tensor | None = None,
    ) -> Any:
        """:meth:`SkipOnSpike.step` (which documents it): decide, step, undo if skipped."""
        saved = self.before_step(loss=loss, grad_norm=grad_norm)
        out = self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        self.after_step(saved)
        return out

    @torch.no_grad()
    def before_step(self, *, loss: Any = None, grad_norm: Any = None) -> Any:
        """Decide and snapshot: the first half of :meth:`step`.

        Returns what :meth:`after_step` needs. Both halves compile with
        ``torch.compile(fullgraph=True)``; torch's own ``Optimizer.step`` between them holds a
        deliberate graph break (``torch._dynamo.graph_break()``, not a host sync).
        """
        params = self._params()
        if grad_norm is not None and not isinstance(grad_norm, torch.Tensor):
            msg = (
                "`grad_norm` must be a tensor (the norm clip_grad_norm_ returned), got "
                f"{type(grad_norm).__name__}; a host number would be copied to the device at "
                "every step: pass torch.as_tensor(value, device=...) or leave it out"
            )
            raise TypeError(msg)
        if grad_norm is None:
            grad_norm = _norm(_grads(params), params, self.group)
        return self._save(params, self._decide(_local(grad_norm), loss))

    def _save(self, params: list[torch.Tensor], apply: torch.Tensor) -> Any:
        """Keep the decision and snapshot what the step may write (for :meth:`after_step`).

        Eagerly, into the :class:`_Plan` of the tensors (made again where they changed);
        under ``torch.compile``, tensor by tensor.
        """
        self.last_step_applied = apply
        skip = torch.logical_not(apply)
        if not torch.compiler.is_compiling():
            sources = _sources(self.optimizer)
            plan = self._plan
            if plan is None or not plan.holds(sources):
                plan = self._plan = None  # its buffers freed before new ones are made
                plan = self._plan = _Plan.make(self.optimizer, sources)
            if plan is not None:
                self._buffers = []  # the tensor-by-tensor snapshot's, if one was made
                plan.snapshot()
                return apply, skip, plan.live, plan.keys, plan.views, plan
        live = [p for p in params if p.grad is not None]
        state = self.optimizer.state
        keys = [
            [k for k, v in state.get(p, {}).items() if isinstance(v, torch.Tensor)] for p in live
        ]
        # local tensors: a DTensor's shard shares its storage, so writing it writes the DTensor
        sources = [_local(p.detach()) for p in live]
        sources += [_local(state[p][k]) for p, ks in zip(live, keys, strict=True) for k in ks]
        buffers = self._snapshot(sources)
        return apply, skip, live, keys, buffers, None

    def _snapshot(self, sources: list[torch.Tensor]) -> list[torch.Tensor]:
        """``sources`` copied into buffers, one ``_foreach_copy_`` a device and dtype.

        Eagerly, the buffers are kept between steps: allocated at the first step, again only
        where a shape, dtype or device changes. Under ``torch.compile`` they are allocated in
        the graph at each call (inductor plans them): buffers kept on ``self`` would be guarded
        on (their number), and the step at which the optimizer's state appears, which
        reallocates them, would cost a recompile.
        """
        if torch.compiler.is_compiling():
            buffers = [torch.empty_like(t) for t in sources]
        else:
            buffers = self._buffers
            if len(buffers) != len(sources):
                buffers = self._buffers = [torch.empty_like(t) for t in sources]
            for i, (b, t) in enumerate(zip(buffers, sources, strict=True)):
                if b.shape != t.shape or b.dtype != t.dtype or b.device != t.device:
                    buffers[i] = torch.empty_like(t)
        groups: dict[tuple[torch.device, torch.dtype], tuple[list[Any], list[Any]]] = {}
        for b, t in zip(buffers, sources, strict=True):
            dst, src = groups.setdefault((t.device, t.dtype), ([], []))
            dst.append(b)
            src.append(t)
        for dst, src in groups.values():
            torch._foreach_copy_(dst, src)
        return list(buffers)

    @torch.no_grad()
    def after_step(self, saved: Any) -> None:
        """Undo the optimizer's step where it is to be skipped: the second half of :meth:`step`.

        Where the step wrote the tensors that were snapshot (the same ones, no state
        created), a few operations for all of them (:meth:`_Plan.undo`); otherwise one
        ``torch.where`` per tensor (the decision moved once per device), and state the step
        created is reset to the values torch creates it with (:mod:`anyclip.torch._optim_state`).
        """
        apply, skip, live, keys, buffers, plan = saved
        conds: dict[torch.device, torch.Tensor] = {}

        def cond(t: torch.Tensor) -> torch.Tensor:
            c = conds.get(t.device)
            if c is None:
                c = conds[t.device] = _move(skip, t.device)
            return c

        if plan is not None and plan.holds(_sources(self.optimizer)):
            if not self._fresh:
                plan.undo(apply, skip)
                return
            # the snapshot of the parameters SGD's fresh step starts from, before the undo
            pairs = zip(live, buffers[: len(live)], strict=True)
            old = [b.clone() if p in self._fresh else b for p, b in pairs]
            plan.undo(apply, skip)
            groups = {id(p): g for g in self.optimizer.param_groups for p in g["params"]}
            self._fresh_steps(live, old, keys, cond, groups)
            return
        groups = {id(p): g for g in self.optimizer.param_groups for p in g["params"]}
        for p, old in zip(live, buffers[: len(live)], strict=True):
            v = _local(p.detach())
            torch.where(cond(v), old, v, out=v)
        pos = len(live)
        state = self.optimizer.state
        for p, ks in zip(live, keys, strict=True):
            st = state.get(p, {})
            for k in ks:
                v = _local(st[k])
                torch.where(cond(v), buffers[pos], v, out=v)
                pos += 1
            if len(st) != len(ks):  # state created by this step: as never created if skipped
                group = groups[id(p)]
                for k, t in st.items():
                    if k not in ks and isinstance(t, torch.Tensor):
                        v = _local(t)
                        _optim_state.reset(
                            v, cond(v), _optim_state.initial_value(self.optimizer, group, k, p)
                        )
                if _optim_state.needs_fresh_step(self.optimizer, group):
                    self._fresh[p] = cond(_local(p.detach())).clone()
        self._fresh_steps(live, buffers[: len(live)], keys, cond, groups)

    def _fresh_steps(
        self,
        live: list[torch.Tensor],
        old: list[torch.Tensor],
        keys: list[list[str]],
        cond: Callable[[torch.Tensor], torch.Tensor],
        groups: dict[int, dict[str, Any]],
    ) -> None:
        """Redo a taken step from a fresh start where SGD's momentum buffer was never created.

        Where a parameter's first step was skipped its buffer is a placeholder; a taken step
        there is recomputed with torch's functional SGD on the pre-step parameters (the
        snapshot) and selected on the device. Runs at every step for SGD with momentum and
        ``dampening != 0`` (the device flag cannot be read without a host sync).
        """
        by_group: dict[int, list[int]] = {}
        for i, (p, ks) in enumerate(zip(live, keys, strict=True)):
            if p in self._fresh and ks:  # flagged at an earlier step
                by_group.setdefault(id(groups[id(p)]), []).append(i)
        for idx in by_group.values():
            group = groups[id(live[idx[0]])]
            params = [old[i] for i in idx]  # the snapshot, free once the undo is done
            grads = [_local(live[i].grad) for i in idx]
            bufs = _optim_state.fresh_sgd_step(group, params, grads)
            for i, fresh_p, buf in zip(idx, params, bufs, strict=True):
                p = live[i]
                v = _local(p.detach())
                flag = self._fresh[p]
                take = torch.logical_and(flag, torch.logical_not(cond(v)))
                torch.where(take, fresh_p, v, out=v)
                b = _local(self.optimizer.state[p]["momentum_buffer"])
                torch.where(take, buf, b, out=b)
                flag.copy_(torch.logical_and(flag, cond(v)))

    def state_dict(self) -> dict[str, Any]:
        """``{"optimizer": the optimizer's state_dict, "skip": the histories and counters}``."""
        skip: dict[str, Any] = {"norms": _history_state(self.norms)}
        skip["losses"] = _history_state(self.losses)
        skip.update({k: v.clone() for k, v in self.counters.items()})
        # SGD's flags of a momentum buffer never created (by index in param_groups' order)
        skip["fresh"] = {
            i: self._fresh[p].clone() for i, p in enumerate(self._params()) if p in self._fresh
        }
        return {"optimizer": self.optimizer.state_dict(), "skip": skip}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` returned."""
        what = "what skip_on_spike(...).state_dict() returned"
        state_dict = check_mapping(state_dict, "state_dict", ("optimizer", "skip"), what)
        self.optimizer.load_state_dict(state_dict["optimizer"])
        skip = check_mapping(state_dict["skip"], "state_dict['skip']", ("norms", "losses"), what)
        self.norms = _load_history(dict(skip["norms"]), self.norms, "norms")
        self.losses = _load_history(dict(skip["losses"]), self.losses, "losses")
        names = ("notfinite_count", "total_notfinite", "skipped")
        if all(k in skip for k in names):
            self.counters = {k: torch.as_tensor(skip[k]).clone() for k in names}
        params = self._params()
        self._fresh = {
            params[int(i)]: torch.as_tensor(v).clone() for i, v in skip.get("fresh", {}).items()
        }


class _SkipperWrapper(_Wrapper):
    """The optimizer front of a :class:`_Skipper` (``self._skipper``): what both rules share.

    Attributes not found here are the skipper's (and through it the wrapped optimizer's);
    ``after_step``, ``state_dict`` and ``load_state_dict`` are the skipper's; ``zero_grad`` and
    ``add_param_group`` the wrapped optimizer's (torch.optim.Optimizer's own would act on this
    wrapper's absent state).
    """

    _skipper: _Skipper

    def __getattr__(self, name: str) -> Any:
        try:
            skipper = self.__dict__["_skipper"]
        except KeyError:  # while unpickling
            raise AttributeError(name) from None
        return getattr(skipper, name)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def after_step(self, saved: Any) -> None:
        """Undo the optimizer's step where it is to be skipped: the second half of ``step``.

        A few operations per device and element width however many tensors the step wrote
        (tensor by tensor at a step that created state, which is reset to the values torch
        creates it with).
        """
        self._skipper.after_step(saved)

    def state_dict(self) -> dict[str, Any]:
        """``{"optimizer": the optimizer's state_dict, <the rule's name>: its state}``."""
        return self._skipper.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` returned."""
        self._skipper.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The wrapped optimizer's ``zero_grad``."""
        self.optimizer.zero_grad(set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """The wrapped optimizer's ``add_param_group``."""
        self.optimizer.add_param_group(param_group)


class SkipOnSpike(_SkipperWrapper):
    """An optimizer that skips a step on a spike or a non-finite norm, with no host sync.

    Made by :func:`skip_on_spike`. A ``torch.optim.Optimizer`` (so LR schedulers,
    ``GradScaler.step``, Lightning and accelerate take it) with no state of its own there:
    ``param_groups``, ``state``, ``defaults``, ``zero_grad``, ``add_param_group`` and the hook
    registrations are the wrapped optimizer's (its hooks run around its own step, inside this
    one's); every other attribute is the skip rule's (``skipped``, ``last_step_applied``,
    ``optimizer``, ...) or else the wrapped optimizer's.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        rolling_interval_length: int,
        sigma_factor: float,
        on_loss: bool,
        max_consecutive_errors: int | None,
        group: Any,
    ) -> None:  # torch.optim.Optimizer.__init__ is not called: the state is the wrapped one's
        self._skipper = _Skipper(
            optimizer,
            rolling_interval_length,
            sigma_factor,
            on_loss,
            max_consecutive_errors,
            group,
        )

    def __repr__(self) -> str:
        s = self._skipper
        return (
            f"SkipOnSpike({s.optimizer!r}, rolling_interval_length="
            f"{s.rolling_interval_length}, sigma_factor={s.sigma_factor})"
        )

    @property
    def skipped(self) -> torch.Tensor:
        """How many steps were skipped so far (an int32 tensor on the device: no host sync)."""
        return self._skipper.skipped

    def step(
        self,
        closure: Callable[[], Any] | None = None,
        *,
        loss: Any = None,
        grad_norm: torch.Tensor | None = None,
    ) -> Any:
        """Take the wrapped optimizer's step unless the norm (or loss) spikes or is not finite.

        ``grad_norm``: the global gradient norm, if already computed (e.g. the value
        :func:`anyclip.torch.clip_grad_norm_` returned: its pre-clip norm); otherwise anyclip's
        global norm of all gradients is computed here. ``loss``: this step's loss (needed with
        ``on_loss=True``, ignored otherwise). A skipped step leaves the parameters and every
        tensor of the optimizer's state as they were, bit for bit (restored on the device;
        state the step created is left as never created: reset to torch's initial values, and
        SGD's momentum buffer flagged so that its next taken step starts afresh); it returns
        what the optimizer's ``step`` returned.
        """
        return self._skipper.step(closure, loss=loss, grad_norm=grad_norm)

    def before_step(self, *, loss: Any = None, grad_norm: torch.Tensor | None = None) -> Any:
        """Decide and snapshot: the first half of :meth:`step`.

        Returns what :meth:`after_step` needs. Both halves compile with
        ``torch.compile(fullgraph=True)``; torch's own ``Optimizer.step`` between them holds a
        deliberate graph break (``torch._dynamo.graph_break()``, not a host sync).
        """
        return self._skipper.before_step(loss=loss, grad_norm=grad_norm)


@hints_keywords
def skip_on_spike(
    optimizer: torch.optim.Optimizer,
    rolling_interval_length: int = 128,
    sigma_factor: float = 6,
    *,
    on_loss: bool = False,
    max_consecutive_errors: int | None = None,
    group: Any = None,
) -> SkipOnSpike:
    """Wrap ``optimizer`` to skip a step on a norm (or loss) spike or a non-finite norm.

    The rule is OLMo-core's ``SkipStepOptimizer.get_step_factor`` (a step is skipped when its
    value exceeds the mean of the previous ``rolling_interval_length`` values by more than
    ``sigma_factor`` unbiased standard deviations, once ``max(2, rolling_interval_length //
    2)`` values, this one included, are seen; one-sided: a dip is taken; on the gradient norm,
    and on the loss with ``on_loss=True``) and
    ``optax.apply_if_finite``'s (a step whose norm or loss is inf or NaN is skipped, unless
    more than ``max_consecutive_errors`` came in a row). Unlike OLMo-core, a non-finite value is
    not recorded (OLMo-core's window would then give NaN statistics and skip the next
    ``rolling_interval_length`` steps). The decision is a device tensor: a skipped step is
    undone on the device (parameters and optimizer state, bit for bit, NaN and inf included,
    for SGD, Adam, AdamW and any optimizer whose state is tensors), without a host sync.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        The optimizer to wrap.
    rolling_interval_length : int, optional
        How many past values the mean and standard deviation are taken over (OLMo-core's).
    sigma_factor : float, optional
        How many standard deviations from the mean a value may lie (OLMo-core's).
    on_loss : bool, optional
        Also test the loss (pass ``step(loss=loss)``), as OLMo-core does: the loss tensor
        itself (no copy) or a number (filled on the device); a CPU tensor is copied to the
        parameters' device at each step (a host sync on a GPU).
    max_consecutive_errors : int, optional
        After this many non-finite steps in a row, take the step anyway (optax's
        ``apply_if_finite``); ``None`` (default): never.
    group : ProcessGroup, DeviceMesh or sequence of them, optional
        The processes the gradient norm is reduced over (every process decides the same).

    Returns
    -------
    SkipOnSpike
        The wrapped optimizer; ``skipped`` counts the skipped steps (a device tensor).

    Notes
    -----
    The cost over the bare step: the snapshot, one copy of the parameters and of the
    optimizer's state tensors into one buffer per device and element width (kept between
    steps), and the undo, integer arithmetic over their bits (``live * taken + snapshot *
    skipped``, exact for every value): a few operations per step however many tensors
    (docs/porting.md gives measured times), plus the global norm unless ``grad_norm=`` is
    passed. Adam's ``step`` counter lives on the CPU unless ``capturable=True``: on CUDA,
    restoring it reads the decision on the host (a sync); use ``capturable=True`` (or
    ``fused=True``) to keep it on the device.

    See Also
    --------
    optax.apply_if_finite, anyclip.optax.skip_on_spike

    Examples
    --------
    >>> import torch
    >>> import anyclip.torch
    >>> p = torch.nn.Parameter(torch.ones(2))
    >>> opt = anyclip.torch.skip_on_spike(torch.optim.SGD([p], lr=0.1))
    >>> p.grad = torch.tensor([float("nan"), 1.0])
    >>> opt.step()
    >>> p.data, opt.skipped
    (tensor([1., 1.]), tensor(1, dtype=torch.int32))
    """
    return SkipOnSpike(
        optimizer,
        rolling_interval_length,
        sigma_factor,
        on_loss,
        max_consecutive_errors,
        group,
    )
