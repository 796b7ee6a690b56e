"""AutoClip for torch: :class:`QuantileClip` (autoclip 0.2's) and its optimizer wrapper.

Layer: public adapter over :func:`anyclip._history.quantile_step` (the formula) and the shared
helpers of :mod:`anyclip.torch._history`; :mod:`anyclip.torch` re-exports the names in
``__all__``. The history is a fixed-size device buffer per parameter (or one, global), updated
in place; :class:`OptimizerWithClipping` (from :meth:`QuantileClip.as_optimizer`) clips before
each step. Nothing is read back to the host in a step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import pairwise
from typing import Any

import torch

from anyclip import _history
from anyclip._compat import namespace
from anyclip._history import History, check_choice, check_mapping
from anyclip._numerics import torch_readable
from anyclip.torch._common import _PLAIN_TYPES, _local, _tensors
from anyclip.torch._history import (
    _assign,
    _grads,
    _history_state,
    _load_history,
    _norm,
    _store,
    _tensor_norm,
    _view,
    _Wrapper,
)
from anyclip.torch._scale import _mul_

__all__ = ["OptimizerWithClipping", "QuantileClip"]


def _on_device(flags: list[bool], device: torch.device) -> torch.Tensor:
    """``torch.tensor(flags, device=device)`` made on the device: no copy from the host.

    Two filled 0-d tensors stacked (three kernels); ``torch.tensor`` of host data would copy it
    from pageable memory, a host sync at every step on a GPU.
    """
    yes = torch.ones((), dtype=torch.bool, device=device)
    no = torch.zeros((), dtype=torch.bool, device=device)
    return torch.stack([yes if f else no for f in flags])


def _aliased(values: list[torch.Tensor]) -> bool:
    """Whether two of ``values`` may share memory (one tensor twice, overlapping views).

    Read from the tensors' storages and strides on the host (no device access): tensors on
    distinct storages never alias; on one storage, those whose byte ranges meet may (strided
    views that interleave count too, where clipping them one at a time changes nothing).
    Never while ``torch.compile`` traces (no storage there): the batched step; tensors of a
    subclass (torch's ``FakeTensor``) and meta tensors are not compared.
    """
    if len(values) < 2 or torch.compiler.is_compiling():
        return False
    spans: dict[Any, list[tuple[int, int]]] = {}
    for v in values:
        local = _local(v)
        if type(local) not in _PLAIN_TYPES or local.is_meta or local.layout != torch.strided:
            continue  # a fake or meta tensor has no storage to compare
        if not local.numel():
            continue
        size = local.element_size()
        start = local.storage_offset() * size
        extent = sum((n - 1) * abs(st) for n, st in zip(local.shape, local.stride(), strict=True))
        spans.setdefault((local.device, local.untyped_storage().data_ptr()), []).append(
            (start, start + (extent + 1) * size)
        )
    for ranges in spans.values():
        ranges.sort()
        if any(b[0] < a[1] for a, b in pairwise(ranges)):
            return True
    return False


def _widened(stored: History, dtype: torch.dtype) -> History:
    """The stored history ``stored`` with its floating tensors cast to the wider ``dtype``.

    New tensors (their values exact): the caller stores them in place of ``stored``.
    """
    return History(*(t.to(dtype) if t.is_floating_point() else t for t in stored))


def _quantile_value(quantile: Any) -> float | torch.Tensor:
    """A checked ``quantile`` as the rule takes it: a float, or a device tensor itself.

    A tensor on an accelerator is never read (a host sync at every step), nor a fake one (no
    data): the rule casts it to the norms' dtype on their device. A CPU tensor or a number
    is read as a float.
    """
    if isinstance(quantile, torch.Tensor) and not torch_readable(quantile):
        return quantile
    return float(quantile)


def _check_quantile(quantile: Any, history_length: Any) -> None:
    """Autoclip 0.2's checks (a tensor quantile accepted, as there), with anyclip's messages."""
    _history.check_quantile_arguments(quantile, history_length, torch.Tensor)


class QuantileClip:
    """AutoClip (``autoclip`` 0.2's ``QuantileClip``) with its signature and numbers, on device.

    Each parameter's gradient is clipped (torch's ``clip_grad_norm_`` factor) to the
    ``quantile`` of its own last ``history_length`` pre-clip norms (``torch.quantile``'s
    linear interpolation; no clipping at the first step); with ``global_threshold=True`` the
    global norm of all gradients is clipped to the quantile of its history instead. The history
    is a fixed-size device buffer per parameter (a ring, not a growing ``hstack``), and no value
    is read on the host. As autoclip, which clips one parameter after the other, gradients
    that share memory (one tensor for two parameters, overlapping views) are each measured
    after the earlier ones' clips (eagerly; under ``torch.compile``, all at once). The global
    history is float32 until a float64 norm is recorded, then float64, as autoclip's.

    Parameters
    ----------
    parameters : iterable of tensors or of dicts
        The parameters, or parameter groups (dicts with ``"params"`` and optionally their own
        ``"quantile"`` and ``"history_length"``), as autoclip takes them.
    quantile : float or Tensor, optional
        The quantile of the history the norm is clipped to (0 to 1). A one-element tensor
        too, as autoclip takes: on an accelerator it is never read on the host (no sync, so
        its range is not checked), and is cast to the norms' dtype on their device.
    history_length : int, optional
        How many past norms are kept.
    global_threshold : bool, optional
        Clip the global norm instead of each parameter's.
    formula : {"torch", "tf"}, optional
        ``"torch"`` (default, autoclip's): ``clamp(limit / (norm + 1e-6), max=1)``, with
        torch's ``clip_grad_norm_`` norm and arithmetic (torch's own ``get_total_norm`` for
        plain dense gradients of any dtypes; each parameter's threshold in its own history's
        dtype and its factor in its norm's, as autoclip clips each alone): for float16 and
        bfloat16 gradients
        each tensor's squares are summed in float32 and its norm rounded to the gradients'
        dtype (a float16 norm above 256 stays finite, as autoclip's), and the factor is
        computed in the gradients' dtype as torch does it (``(norm + 1e-6).reciprocal() *
        limit``, each op in float32 and rounded): autoclip's bits. ``"tf"``: TF's
        ``clip_by_global_norm`` factor and norm (float16 squares summed in float16: inf from
        256, and the gradients NaN, as TF's).
    group : ProcessGroup, DeviceMesh or sequence of them, optional
        With ``global_threshold=True``: the processes the global norm is reduced over.

    See Also
    --------
    autoclip.torch.QuantileClip : the reference (``pip install autoclip``).
    anyclip.optax.quantile_clip : the same rule for optax.

    Examples
    --------
    >>> import torch
    >>> from anyclip.torch import QuantileClip
    >>> p = torch.nn.Parameter(torch.zeros(2))
    >>> clipper = QuantileClip([p], quantile=0.5, history_length=10)
    >>> for g in ([3.0, 4.0], [6.0, 8.0], [30.0, 40.0]):
    ...     p.grad = torch.tensor(g)
    ...     clipper.step()
    >>> p.grad  # clipped to the median of 5 and 10
    tensor([4.5000, 6.0000])
    """

    def __init__(
        self,
        parameters: Iterable[Any] | Iterator[Any],
        quantile: float = 0.9,
        history_length: int = 1000,
        global_threshold: bool = False,
        *,
        formula: str = "torch",
        group: Any = None,
    ) -> None:
        _check_quantile(quantile, history_length)
        self.global_threshold = bool(global_threshold)
        self.quantile = _quantile_value(quantile)
        self.history_length = history_length
        self.formula = check_choice(formula, "formula", ("torch", "tf"))
        self.group = group
        self.defaults: dict[str, Any] = {"quantile": quantile, "history_length": history_length}
        if isinstance(parameters, torch.nn.Module) or not isinstance(parameters, Iterable):
            msg = (
                "`parameters` must be an iterable of tensors or of dicts (parameter groups), "
                f"got {type(parameters).__module__}.{type(parameters).__qualname__}; pass "
                "model.parameters()"
            )
            raise TypeError(msg)
        groups = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        if not groups:
            msg = "`parameters` is empty; pass the model's parameters (or parameter groups)"
            raise ValueError(msg)
        if not isinstance(groups[0], Mapping):
            groups = [{"params": groups}]
        self.param_groups: list[dict[str, Any]] = []
        self.histories: list[History | None] = []
        self.global_history: History | None = None
        for g in groups:
            self.add_param_group(g)

    @property
    def parameter_groups(self) -> list[dict[str, Any]]:
        """:attr:`param_groups` under autoclip's name."""
        return self.param_groups

    def add_param_group(
        self,
        parameter_group: Any,
        quantile: float | None = None,
        history_length: int | None = None,
    ) -> None:
        """Add a parameter group (autoclip's ``add_param_group``, with its checks).

        ``parameter_group``: a dict with ``"params"`` (and optionally its own ``"quantile"``
        and ``"history_length"``), or the parameters themselves; ``quantile`` and
        ``history_length`` override the group's (default: the constructor's). Refused, as by
        autoclip: a set of parameters (its order changes between runs), a non-tensor, a
        non-leaf tensor, a parameter twice or already in another group, bad settings.
        """
        group = dict(parameter_group) if isinstance(parameter_group, Mapping) else None
        if group is None:
            group = {"params": parameter_group}
        if "params" not in group:
            msg = (
                "`parameter_group` must hold the key 'params' (the group's tensors), its keys: "
                f"{list(group)}; pass {{'params': [...], 'quantile': ...}}"
            )
            raise KeyError(msg)
        if isinstance(group["params"], set):
            msg = (
                "`parameter_group['params']` must be an ordered collection of tensors, got a "
                "set (the order of tensors in a set changes between runs); pass a list"
            )
            raise TypeError(msg)
        params = _tensors(group["params"], "parameter_group['params']")
        for i, p in enumerate(params):
            if not p.is_leaf:
                msg = (
                    f"`parameter_group['params'][{i}]` must be a leaf tensor (gradients to clip "
                    "accumulate on leaf tensors only), got a non-leaf tensor; pass the model's "
                    "parameters"
                )
                raise ValueError(msg)
        group["params"] = params
        for name, default in self.defaults.items():
            group.setdefault(name, default)
        if quantile is not None:
            group["quantile"] = quantile
        if history_length is not None:
            group["history_length"] = history_length
        _check_quantile(group["quantile"], group["history_length"])
        if len({id(p) for p in params}) != len(params):
            msg = (
                "`parameter_group['params']` holds a parameter more than once; pass each "
                "parameter once"
            )
            raise ValueError(msg)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            msg = (
                "`parameter_group['params']` holds parameters already in another group of "
                "this clipper; put each parameter in one group"
            )
            raise ValueError(msg)
        self.param_groups.append(group)
        self.histories.append(None)

    @classmethod
    def as_optimizer(
        cls,
        optimizer: torch.optim.Optimizer,
        quantile: float = 0.9,
        history_length: int = 1000,
        global_threshold: bool = False,
        *,
        formula: str = "torch",
        group: Any = None,
    ) -> OptimizerWithClipping:
        """``optimizer`` wrapped to clip its parameters' gradients before each step (autoclip's).

        The clipper is made on every parameter of ``optimizer``'s groups with these arguments;
        see :class:`OptimizerWithClipping`.
        """
        given: Any = optimizer  # checked at run time, whatever the annotation says
        if not isinstance(given, torch.optim.Optimizer):
            msg = (
                f"`optimizer` must be a torch.optim.Optimizer, got {type(given).__name__}; "
                "pass e.g. torch.optim.AdamW(model.parameters())"
            )
            raise TypeError(msg)
        params = [p for g in optimizer.param_groups for p in g["params"]]
        clipper = cls(
            params,
            quantile=quantile,
            history_length=history_length,
            global_threshold=global_threshold,
            formula=formula,
            group=group,
        )
        return OptimizerWithClipping(optimizer, clipper)

    @torch.no_grad()
    def step(self) -> None:
        """Clip the gradients in place (autoclip's ``step``: returns nothing)."""
        if self.global_threshold:
            self._step_global()
        else:
            for i, g in enumerate(self.param_groups):
                self._step_local(i, g)

    def _step_global(self) -> None:
        params = [p for g in self.param_groups for p in g["params"]]
        values = _grads(params)
        norm = _norm(values, params, self.group, torch_half=self.formula == "torch")
        xp = namespace(norm)
        # autoclip's history (float32 at first) takes the dtype of each norm recorded
        # (torch.hstack promotes): its quantile is in float32 until a float64 norm has been
        # recorded (a float64 parameter without a gradient does not widen it), then in float64
        dt = torch.promote_types(norm.dtype, torch.float32)
        if self.global_history is None:
            h = _history.init_history(xp, self.history_length, dt, norm.device)
            self.global_history = _store(h)
        kept = self.global_history.window.dtype
        factor, new = _history.quantile_step(
            xp, _view(self.global_history), norm, quantile=self.quantile, formula=self.formula
        )
        if torch.promote_types(dt, kept) != kept:  # the recorded norms kept exactly
            self.global_history = _widened(self.global_history, dt)
            wide, new = _history.quantile_step(
                xp, _view(self.global_history), norm, quantile=self.quantile, formula=self.formula
            )
            if self.formula != "torch":  # TF's factor: in the history's (new) dtype
                factor = wide
        _assign(self.global_history, new)
        # torch's clip_grads_with_norm_ multiplies float16 and bfloat16 gradients by its
        # factor in float32 (a factor of a wider norm, for mixed dtypes, is not rounded first)
        _mul_(values, factor, opmath=self.formula == "torch")

    def _step_local(self, i: int, g: dict[str, Any]) -> None:
        params = g["params"]
        present = [p.grad is not None for p in params]
        if not any(present):
            return
        if _aliased(_grads(params)):
            # autoclip clips one parameter after the other: a gradient that shares memory
            # with an earlier one (one tensor for two parameters, overlapping views) is
            # measured, and recorded, after that one's clip
            for j, has in enumerate(present):
                if has:
                    self._clip_rows(i, g, [k == j for k in range(len(params))])
            return
        self._clip_rows(i, g, present)

    def _clip_rows(self, i: int, g: dict[str, Any], present: list[bool]) -> None:
        """One step of group ``i``'s histories for the parameters flagged in ``present``."""
        params = g["params"]
        values = _grads([p for p, has in zip(params, present, strict=True) if has])
        # a DTensor's norm is a Replicate DTensor: its local tensor is the whole norm
        torch_half = self.formula == "torch"
        norms = [_tensor_norm(v, torch_half=torch_half) for v in values]
        ndt = norms[0].dtype  # the widest of the norms' dtypes (each factor is in its own)
        for n in norms[1:]:
            ndt = torch.promote_types(ndt, n.dtype)
        # the history's: wide enough for every parameter's norm, those without a gradient
        # at this first step included
        dt = torch.promote_types(ndt, torch.float32)
        for p in params:
            dt = torch.promote_types(dt, p.dtype) if p.dtype.is_floating_point else dt
        device = norms[0].device
        it = iter(norms)
        full = torch.stack(
            [
                next(it).to(ndt) if has else torch.zeros((), dtype=ndt, device=device)
                for has in present
            ]
        )
        h = self.histories[i]
        xp = namespace(full)
        if h is None:
            batch = (len(params),)
            h = _store(_history.init_history(xp, int(g["history_length"]), dt, device, batch))
            self.histories[i] = h
        where = None if all(present) else _on_device(present, device)
        quantile = _quantile_value(g["quantile"])
        view = _view(h)
        factors, new = _history.quantile_step(
            xp, view, full, quantile=quantile, formula=self.formula, where=where
        )
        # autoclip clips each parameter alone: its quantile in its own history's dtype
        # (float32, or float64 for float64 norms) and its factor in its norm's dtype. Where
        # these are not the batch's, that dtype's rows are taken from the batch computed in
        # it (the window holds every norm exactly, in the widest dtype)
        by_dtype = {}
        for d in {n.dtype for n in norms}:
            own = torch.promote_types(d, torch.float32)
            if d != ndt or own != view.window.dtype:
                by_dtype[d] = _history.quantile_step(
                    xp,
                    view._replace(window=view.window.to(own)),
                    full.to(d),
                    quantile=quantile,
                    formula=self.formula,
                )[0]
        _assign(h, new)
        k = 0
        for j, has in enumerate(present):
            if has:
                # torch's product of a float16 or bfloat16 gradient is in float32 (the same
                # for a factor of its dtype)
                factor = by_dtype.get(norms[k].dtype, factors)[j]
                _mul_([values[k]], factor, opmath=torch_half)
                k += 1

    def state_dict(self) -> dict[str, Any]:
        """The histories as tensors: ``{"groups": [...], "global": {...}}`` (copies)."""
        return {
            "groups": [_history_state(h) for h in self.histories],
            "global": _history_state(self.global_history),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` returned."""
        what = (
            "what anyclip's QuantileClip.state_dict() returned; autoclip's own, with 'state' "
            "and 'param_groups', holds a growing history per parameter and is not loadable"
        )
        state_dict = check_mapping(state_dict, "state_dict", ("groups", "global"), what)
        groups = list(state_dict["groups"])
        if len(groups) != len(self.param_groups):
            msg = (
                f"`state_dict` holds {len(groups)} parameter groups, this clipper has "
                f"{len(self.param_groups)}; build it with the same parameter groups"
            )
            raise ValueError(msg)
        self.histories = [
            _load_history(dict(s), h, "groups") for s, h in zip(groups, self.histories, strict=True)
        ]
        self.global_history = _load_history(
            dict(state_dict["global"]), self.global_history, "global"
        )


class OptimizerWithClipping(_Wrapper):
    """An optimizer that clips the gradients before each step (autoclip's wrapper).

    Made by :meth:`QuantileClip.as_optimizer`. ``step(closure)`` runs the clipper's
    :meth:`~QuantileClip.step`, then the wrapped optimizer's ``step(closure)``, as autoclip's
    ``OptimizerWithClipping`` (a closure that recomputes the gradients, as LBFGS's, gets them
    unclipped, as there). A ``torch.optim.Optimizer`` (LR schedulers take it) with no state
    of its own: ``param_groups``, ``state``, ``defaults`` and the hook registrations are the
    wrapped optimizer's; ``clipper`` is the :class:`QuantileClip`.

    Examples
    --------
    >>> import torch
    >>> from anyclip.torch import QuantileClip
    >>> p = torch.nn.Parameter(torch.zeros(2))
    >>> sgd = torch.optim.SGD([p], lr=1.0)
    >>> opt = QuantileClip.as_optimizer(sgd, quantile=0.5, history_length=10)
    >>> for g in ([3.0, 4.0], [6.0, 8.0], [30.0, 40.0]):
    ...     p.grad = torch.tensor(g)
    ...     opt.step()  # clip (to the median of the past norms), then SGD's step
    >>> p.detach()
    tensor([-10.5000, -14.0000])
    """

    def __init__(self, optimizer: torch.optim.Optimizer, clipper: QuantileClip) -> None:
        # torch.optim.Optimizer.__init__ is not called: the state is the wrapped one's
        self.optimizer = optimizer
        self.clipper = clipper

    def __getattr__(self, name: str) -> Any:
        try:
            optimizer = self.__dict__["optimizer"]
        except KeyError:  # while unpickling
            raise AttributeError(name) from None
        return getattr(optimizer, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer, "clipper": self.clipper}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"OptimizerWithClipping({self.optimizer!r}, {self.clipper!r})"

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Clip the gradients (the clipper's ``step``), then take the optimizer's step."""
        self.clipper.step()
        return self.optimizer.step(closure) if closure is not None else self.optimizer.step()

    def add_param_group(
        self,
        param_group: dict[str, Any],
        quantile: float | None = None,
        history_length: int | None = None,
    ) -> None:
        """Add the group to the optimizer, then to the clipper (with ``quantile``, ...)."""
        self.optimizer.add_param_group(param_group)
        added = self.optimizer.param_groups[-1]
        keys = ("params", "quantile", "history_length")  # the clipper's settings, if given
        self.clipper.add_param_group(
            {k: added[k] for k in keys if k in added},
            quantile=quantile,
            history_length=history_length,
        )

    def zero_grad(self, set_to_none: bool = False) -> None:
        """The wrapped optimizer's ``zero_grad``; ``set_to_none`` False by default, as autoclip's.

        A gradient of zeros is clipped and recorded (its norm 0 enters the history), a
        ``None`` one is not.
        """
        self.optimizer.zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """``{"optimizer": the optimizer's state_dict, "clipper": the clipper's}``."""
        return {"optimizer": self.optimizer.state_dict(), "clipper": self.clipper.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` returned."""
        what = "what QuantileClip.as_optimizer(...).state_dict() returned"
        state = check_mapping(state_dict, "state_dict", ("optimizer", "clipper"), what)
        self.optimizer.load_state_dict(state["optimizer"])
        self.clipper.load_state_dict(state["clipper"])
