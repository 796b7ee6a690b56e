"""``optax.apply_if_finite`` for a torch optimizer: :func:`apply_if_finite`, no host sync.

Layer: public adapter over :mod:`anyclip._if_finite` (the rule); the undo of a skipped step
is :class:`~anyclip.torch._skip_on_spike.SkipOnSpike`'s (a snapshot, then an undo on the
device, with state that a skipped first step created left as never created).
:mod:`anyclip.torch` re-exports the names in ``__all__``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from anyclip import _if_finite
from anyclip._compat import namespace, torch_to
from anyclip._history import check_mapping
from anyclip._keywords import hints_keywords
from anyclip._sparse import values_of
from anyclip.torch._common import _local
from anyclip.torch._skip_on_spike import _Skipper, _SkipperWrapper

__all__ = ["ApplyIfFinite", "apply_if_finite"]

_COUNTERS = ("notfinite_count", "last_finite", "total_notfinite")


class _FiniteSkipper(_Skipper):
    """:class:`_Skipper`'s snapshot and undo, with ``apply_if_finite``'s decision."""

    def __init__(self, optimizer: Any, max_consecutive_errors: Any) -> None:
        errors = _if_finite.check_max_errors(max_consecutive_errors)
        # the window and sigma are unused: the decision is _decide_finite's
        super().__init__(optimizer, 2, 0.0, False, None, None)
        self.max_consecutive_errors = self.errors = errors

    @property
    def skipped(self) -> torch.Tensor:
        """Not kept (optax's state has no such count): ``total_notfinite`` counts the skips."""
        msg = "'ApplyIfFinite' has no attribute 'skipped'; read `total_notfinite`"
        raise AttributeError(msg)

    def _counters(self, device: torch.device) -> dict[str, torch.Tensor]:
        if not self.counters:
            zero = torch.zeros((), dtype=torch.int32, device=device)
            self.counters = {
                "notfinite_count": zero,
                "last_finite": torch.ones((), dtype=torch.bool, device=device),
                "total_notfinite": zero.clone(),
            }
        return self.counters

    def _finite(self, params: list[torch.Tensor]) -> torch.Tensor:
        """Whether every element of every gradient is finite (one device flag, no host read).

        Real gradients by ``torch._foreach_norm(..., inf)`` per device and dtype (a NaN
        propagates through the maximum, an inf is the maximum; exact in every dtype, so a
        finite gradient never reads as inf): a few operations whatever their number. Complex
        ones (whose modulus may overflow) by the core's ``isfinite``.
        """
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for p in params:
            g = p.grad
            if g is None:
                continue
            if type(g) is not torch.Tensor or g.layout != torch.strided:
                g = _local(values_of(g))  # a DTensor's shard, a sparse tensor's values
            groups.setdefault((g.device, g.dtype), []).append(g)
        if not groups:
            device = params[0].device if params else torch.device("cpu")
            return torch.ones((), dtype=torch.bool, device=device)
        flags = []
        for (_, dtype), gs in groups.items():
            xp = namespace(gs[0])
            if dtype.is_complex:
                flags.append(_if_finite.all_finite(xp, gs))
                continue
            gs = [g for g in gs if g.numel()]  # the norm of an empty tensor is refused
            if gs:
                flags.append(torch.stack(torch._foreach_norm(gs, float("inf"))).isfinite().all())
        if not flags:
            return torch.ones((), dtype=torch.bool, device=next(iter(groups))[0])
        out: torch.Tensor = flags[0]
        if len(flags) == 1:
            return out
        first = out.device
        return torch.stack([torch_to(f, first) for f in flags]).all()

    @torch.no_grad()
    def before_step(self, *, loss: Any = None, grad_norm: Any = None) -> Any:
        """Decide from the gradients and snapshot: the first half of :meth:`step`."""
        del loss, grad_norm  # skip_on_spike's; not part of apply_if_finite's rule
        params = self._params()
        finite = self._finite(params)
        c = self._counters(finite.device)
        d = _if_finite.if_finite_step(
            namespace(finite),
            finite,
            c["notfinite_count"],
            c["total_notfinite"],
            self.errors,
        )
        c["notfinite_count"].copy_(d.notfinite_count)
        c["last_finite"].copy_(d.finite)
        c["total_notfinite"].copy_(d.total_notfinite)
        return self._save(params, d.apply)

    def state_dict(self) -> dict[str, Any]:
        """``{"optimizer": the optimizer's state_dict, "if_finite": the counters}``."""
        state: dict[str, Any] = {k: v.clone() for k, v in self.counters.items()}
        state["fresh"] = {
            i: self._fresh[p].clone() for i, p in enumerate(self._params()) if p in self._fresh
        }
        return {"optimizer": self.optimizer.state_dict(), "if_finite": state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` returned."""
        what = "what apply_if_finite(...).state_dict() returned"
        state_dict = check_mapping(state_dict, "state_dict", ("optimizer", "if_finite"), what)
        state = check_mapping(state_dict["if_finite"], "state_dict['if_finite']", _COUNTERS, what)
        self.optimizer.load_state_dict(state_dict["optimizer"])
        self.counters = {k: torch.as_tensor(state[k]).clone() for k in _COUNTERS}
        params = self._params()
        self._fresh = {
            params[int(i)]: torch.as_tensor(v).clone() for i, v in state.get("fresh", {}).items()
        }


class ApplyIfFinite(_SkipperWrapper):
    """An optimizer that skips a step whose gradients hold an inf or a NaN, with no host sync.

    Made by :func:`apply_if_finite`. A ``torch.optim.Optimizer`` (so LR schedulers,
    ``GradScaler.step``, Lightning and accelerate take it) with no state of its own there:
    ``param_groups``, ``state``, ``defaults``, ``zero_grad``, ``add_param_group`` and the hook
    registrations are the wrapped optimizer's; ``notfinite_count``, ``last_finite`` and
    ``total_notfinite`` are optax's ``ApplyIfFiniteState`` counters (device tensors); every
    other attribute is the wrapped optimizer's.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, max_consecutive_errors: int) -> None:
        # torch.optim.Optimizer.__init__ is not called: the state is the wrapped one's
        self._skipper = _FiniteSkipper(optimizer, max_consecutive_errors)

    def __repr__(self) -> str:
        s = self._skipper
        return f"ApplyIfFinite({s.optimizer!r}, max_consecutive_errors={s.max_consecutive_errors})"

    def _counter(self, name: str) -> torch.Tensor:
        c = self._skipper.counters
        if not c:  # before the first step: optax's initial state
            if name == "last_finite":
                return torch.ones((), dtype=torch.bool)
            return torch.zeros((), dtype=torch.int32)
        return c[name]

    @property
    def notfinite_count(self) -> torch.Tensor:
        """Non-finite steps in a row (an int32 tensor on the device; 0 after a finite step)."""
        return self._counter("notfinite_count")

    @property
    def last_finite(self) -> torch.Tensor:
        """Whether the last step's gradients were all finite (a bool tensor on the device)."""
        return self._counter("last_finite")

    @property
    def total_notfinite(self) -> torch.Tensor:
        """All non-finite steps so far (an int32 tensor on the device)."""
        return self._counter("total_notfinite")

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Take the wrapped optimizer's step unless a gradient holds an inf or a NaN.

        The decision is read from the gradients as they are when ``step`` is called. A
        skipped step leaves the parameters and every tensor of the optimizer's state as they
        were, bit for bit (restored on the device; state the step created is left as never
        created); it returns what the optimizer's ``step`` returned.
        """
        return self._skipper.step(closure)

    def before_step(self) -> Any:
        """Decide and snapshot: the first half of :meth:`step` (what ``after_step`` takes).

        Both halves compile with ``torch.compile(fullgraph=True)``, with the optimizer's own
        ``step`` between them, as :meth:`SkipOnSpike.before_step`'s.
        """
        return self._skipper.before_step()


@hints_keywords
def apply_if_finite(optimizer: torch.optim.Optimizer, max_consecutive_errors: int) -> ApplyIfFinite:
    """Wrap ``optimizer`` to skip a step whose gradients hold an inf or a NaN, as optax does.

    ``optax.apply_if_finite``'s rule around a torch optimizer: a step is skipped when an
    element of a gradient is inf or NaN, unless more than ``max_consecutive_errors`` such steps
    came in a row (then it is taken, inf and NaN included); the counters are optax's. As
    Keras's ``LossScaleOptimizer`` skips a non-finite step (without its loss scale: see
    ``torch.amp.GradScaler``). The decision is a device tensor: a skipped step is undone
    on the device (parameters and optimizer state, bit for bit), without a host sync.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        The optimizer to wrap.
    max_consecutive_errors : int
        How many non-finite steps in a row are skipped; the next one is taken. 0 or a negative
        number: every step is taken (as in optax).

    Returns
    -------
    ApplyIfFinite
        The wrapped optimizer, with optax's counters ``notfinite_count``, ``last_finite`` and
        ``total_notfinite`` (device tensors; both counts saturate at ``2**31 - 1``).

    Raises
    ------
    TypeError
        If ``optimizer`` is not a ``torch.optim.Optimizer`` or ``max_consecutive_errors`` not an
        integer.

    Notes
    -----
    The finiteness is read from each process's own gradients: with DDP (gradients
    all-reduced) every process decides alike; with sharded gradients (FSDP's DTensors) a
    non-finite shard is seen by its own process only, so use
    ``skip_on_spike(..., group=...)``, whose decision is reduced over the group. The cost
    over the bare step is ``skip_on_spike``'s: one copy of the parameters and of the
    optimizer's state tensors, and their undo, a few operations per step however many tensors;
    the decision is one ``torch._foreach_norm(grads, inf)`` per device and dtype.

    See Also
    --------
    optax.apply_if_finite : the reference.
    anyclip.optax.apply_if_finite : the same rule for optax.
    skip_on_spike : also skips a step whose norm (or loss) spikes.

    Examples
    --------
    >>> import torch
    >>> import anyclip.torch
    >>> p = torch.nn.Parameter(torch.ones(2))
    >>> opt = anyclip.torch.apply_if_finite(torch.optim.SGD([p], lr=0.1), 2)
    >>> p.grad = torch.tensor([float("nan"), 1.0])
    >>> opt.step()
    >>> p.data, opt.notfinite_count, opt.last_finite
    (tensor([1., 1.]), tensor(1, dtype=torch.int32), tensor(False))
    """
    return ApplyIfFinite(optimizer, max_consecutive_errors)
