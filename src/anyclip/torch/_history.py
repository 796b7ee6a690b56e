"""Norm-history rules for torch: :class:`ZClip`, :class:`QuantileClip`, :func:`skip_on_spike`.

Layer: public adapter over :mod:`anyclip._history` (the formulas) and anyclip's global norm;
:mod:`anyclip.torch` re-exports the names in ``__all__``. The objects here only compute the
norm, keep the state tensors (on the gradients' device, updated in place with ``copy_``) and
apply the factor the core returns: nothing is read back to the host, so a training step with
them compiles with ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

from anyclip import _clip, _history
from anyclip._compat import namespace
from anyclip._history import History, check_choice, check_int, check_mapping, check_real
from anyclip._keywords import hints_keywords
from anyclip._sparse import values_of
from anyclip.torch import _optim_state
from anyclip.torch._clip_grad import _join_group, _local, _mul_, _tensors, _total_norm

__all__ = ["OptimizerWithClipping", "QuantileClip", "SkipOnSpike", "ZClip", "skip_on_spike"]

_FIELDS = History._fields


def _parameters(model_or_parameters: Any) -> list[torch.Tensor]:
    if isinstance(model_or_parameters, torch.nn.Module):
        return list(model_or_parameters.parameters())
    return _tensors(model_or_parameters, "model_or_parameters")


def _grads(params: list[torch.Tensor]) -> list[torch.Tensor]:
    return [values_of(p.grad) for p in params if p.grad is not None]


def _norm(values: list[torch.Tensor], params: list[torch.Tensor], group: Any) -> torch.Tensor:
    """Anyclip's global 2-norm of ``values`` (reduced over ``group``); 0 without gradients."""
    if not values and group is not None:
        return _join_group(2.0, "widest", group)
    if not values:
        return torch.zeros((), device=params[0].device if params else None)
    norm: torch.Tensor = _local(_total_norm(values, 2.0, None, "widest", group, name="parameters"))
    return norm


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


class ZClip:
    """ZClip (``zclip`` 1.0) with its signature and numbers, as device tensors.

    A drop-in for ``zclip.ZClip``: call :meth:`step` after ``loss.backward()`` and before
    ``optimizer.step()``. During ``warmup_steps`` steps the gradients are clipped to
    ``max_grad_norm`` (torch's ``clip_grad_norm_``) and their norms collected; then the
    exponential moving mean and variance of the norm give the threshold: a norm whose z-score
    exceeds ``z_thresh`` is clipped to ``mean + z_thresh * std / (z / z_thresh)`` (times
    ``clip_factor``, ``clip_option="adaptive_scaling"``) or to the mean
    (``clip_option="mean"``); ``mode="percentile"`` clips every norm above
    ``mean + z_thresh * std``; ``max_grad_norm`` caps the limit. Unlike zclip nothing is read
    back to the host (zclip calls ``.item()`` and branches in Python every step): the state is
    four tensors on the gradients' device and the decision a ``torch.where``.

    zclip's attributes that user code reads are here, each a host read only when read:
    ``initialized``, ``mean`` and ``var`` (Python floats, ``None`` during the warm-up; settable,
    as in zclip), ``buffer`` (the warm-up norms so far); with zclip's
    :meth:`apply_in_place_clipping` and its ``_compute_grad_norm`` hook (which :meth:`step`
    calls). A bad ``mode`` or ``clip_option`` raises zclip's sentence in an error that is both a
    ``ValueError`` and an ``AssertionError`` (zclip raises one for each).

    Parameters
    ----------
    alpha, z_thresh, max_grad_norm, eps, warmup_steps, mode, clip_option, clip_factor, \
skip_update_on_spike
        zclip 1.0's arguments, with its defaults and meaning.
    formula : {"zclip", "tf"}, optional
        The factor that scales the gradients: ``"zclip"`` (default) zclip's own, ``limit /
        (norm + 1e-6)`` where ``norm > limit`` (torch's ``clip_grad_norm_`` during warm-up);
        ``"tf"`` TF's ``clip_by_global_norm`` factor ``limit * min(1 / norm, 1 / limit)``.
    group : ProcessGroup, DeviceMesh or sequence of them, optional
        The processes whose gradients form the global norm (one all-reduce of a scalar); every
        process then holds the same statistics. Sharded gradients (``DTensor``) need none.
    dtype : torch.dtype, optional
        The statistics' dtype; default the norm's, at least float32.

    See Also
    --------
    zclip.ZClip : the reference (``pip install zclip``).
    anyclip.optax.zclip : the same rule for optax.

    Examples
    --------
    >>> import torch
    >>> from anyclip.torch import ZClip
    >>> p = torch.nn.Parameter(torch.zeros(2))
    >>> zc = ZClip(warmup_steps=2, max_grad_norm=None)
    >>> for g in ([3.0, 4.0], [0.6, 0.8], [30.0, 40.0]):
    ...     p.grad = torch.tensor(g)
    ...     norm = zc.step([p])
    >>> norm  # the pre-clip norm, as zclip returns it
    tensor(50.)
    >>> p.grad  # clipped to the adaptive threshold, as zclip.ZClip does
    tensor([2.1191, 2.8255])
    """

    def __init__(
        self,
        alpha: float = 0.97,
        z_thresh: float = 2.5,
        max_grad_norm: float | None = 1.0,
        eps: float = 1e-6,
        warmup_steps: int = 25,
        mode: str = "zscore",
        clip_option: str = "adaptive_scaling",
        clip_factor: float = 1.0,
        skip_update_on_spike: bool = False,
        *,
        formula: str = "zclip",
        group: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.alpha = check_real(alpha, "alpha")
        self.z_thresh = check_real(z_thresh, "z_thresh")
        self.max_grad_norm = check_real(max_grad_norm, "max_grad_norm", none=True)
        self.eps = check_real(eps, "eps")
        self.warmup_steps = check_int(warmup_steps, "warmup_steps", minimum=0)
        self.mode, self.clip_option = _history.check_zclip_options(mode, clip_option)
        self.clip_factor = check_real(clip_factor, "clip_factor")
        self.skip_update_on_spike = bool(skip_update_on_spike)
        self.formula = check_choice(formula, "formula", ("zclip", "tf"))
        self.group = group
        self.dtype = dtype
        self._history: History | None = None
        self.threshold: torch.Tensor | None = None  # the last limit, for logging
        #: values set (``mean``, ``var``, ``initialized``) before the first step made the state
        self._pending: dict[str, Any] = {}

    @torch.no_grad()
    def step(self, model_or_parameters: Any) -> torch.Tensor:
        """Clip the gradients in place; return their pre-clip global norm (a 0-d tensor).

        ``model_or_parameters``: a module (its ``parameters()``), a tensor or an iterable of
        tensors; those without a gradient are skipped.
        """
        params = _parameters(model_or_parameters)
        values = _grads(params)
        raw: Any = self._compute_grad_norm(model_or_parameters)  # an override may give a number
        if isinstance(raw, torch.Tensor):
            norm = raw
        else:  # filled on the device: no host copy
            device = values[0].device if values else params[0].device if params else None
            norm = torch.full((), float(raw), device=device)
        xp = namespace(norm)
        self._state(norm)
        assert self._history is not None
        out = _history.zclip_step(
            xp,
            _view(self._history),
            norm,
            alpha=self.alpha,
            z_thresh=self.z_thresh,
            max_grad_norm=self.max_grad_norm,
            eps=self.eps,
            warmup_steps=self.warmup_steps,
            mode=self.mode,
            clip_option=self.clip_option,
            clip_factor=self.clip_factor,
            skip_update_on_spike=self.skip_update_on_spike,
            formula=self.formula,
        )
        _assign(self._history, out.history)
        self.threshold = out.threshold
        _mul_(values, out.factor)
        return norm

    def _compute_grad_norm(self, model_or_parameters: Any) -> torch.Tensor:
        """The pre-clip global 2-norm of the gradients (a 0-d tensor), as :meth:`step` reads it.

        zclip's hook of the same name: :meth:`step` calls it, so a subclass (or a test that
        replaces it on the instance, as zclip's own tests do) can supply the norm; a Python
        number returned there is filled on the gradients' device.
        """
        params = _parameters(model_or_parameters)
        return _norm(_grads(params), params, self.group)

    def _state(self, norm: torch.Tensor) -> History:
        """The stored statistics, made at the first step (norm's device, :attr:`dtype`)."""
        if self._history is None:
            dt = _state_dtype(norm, self.dtype)
            h = _history.init_history(namespace(norm), self.warmup_steps, dt, norm.device)
            self._history = _store(h)
            pending, self._pending = self._pending, {}
            for name, value in pending.items():
                setattr(self, name, value)
        return self._history

    def _compute_clip_val(self, grad_norm: Any) -> float | None:
        """Zclip's threshold for ``grad_norm`` from the current statistics, or None (no clip).

        zclip's method of the same name (mode, ``clip_option``, ``clip_factor``; not capped by
        ``max_grad_norm``), for code that calls it: a host read. :meth:`step` does not call it
        (its decision stays on the device), so replacing it does not change :meth:`step`.
        """
        if not self.initialized:
            return None
        if self._history is None:  # statistics set before the first step: on the CPU
            dt = self.dtype or torch.float32
            h = _history.init_history(namespace(torch.zeros(())), self.warmup_steps, dt)
            count = torch.full((), h.window.shape[-1], dtype=h.count.dtype)
            stats = {k: torch.as_tensor(self._pending.get(k, 0.0), dtype=dt) for k in _FIELDS[1:3]}
            h = History(count, stats["mean"], stats["var"], h.window)
        else:
            h = _view(self._history)
        norm = torch.as_tensor(grad_norm, dtype=h.mean.dtype, device=h.mean.device)
        out = _history.zclip_step(
            namespace(norm),
            h,
            norm,
            alpha=self.alpha,
            z_thresh=self.z_thresh,
            max_grad_norm=None,
            eps=self.eps,
            warmup_steps=self.warmup_steps,
            mode=self.mode,
            clip_option=self.clip_option,
            clip_factor=self.clip_factor,
            skip_update_on_spike=self.skip_update_on_spike,
        )
        return float(out.threshold) if bool(out.spike) else None

    @torch.no_grad()
    def apply_in_place_clipping(
        self, model_or_parameters: Any, global_norm: Any, max_global_norm: Any
    ) -> None:
        """Scale the gradients in place by zclip's ``max_global_norm / (global_norm + 1e-6)``.

        zclip's method: the factor applies where ``global_norm > max_global_norm`` (else the
        gradients are left as they are). ``global_norm`` and ``max_global_norm``: numbers (the
        factor is computed on the host, as zclip does) or tensors (on the device, with
        ``torch.where``: no host sync).
        """
        values = _grads(_parameters(model_or_parameters))
        if not values:
            return
        numbers_given = all(
            isinstance(v, numbers.Real) and not isinstance(v, bool)
            for v in (global_norm, max_global_norm)
        )
        if numbers_given:
            norm, limit = float(global_norm), float(max_global_norm)
            coef = limit / (norm + 1e-6) if norm > limit else 1.0
            if coef < 1.0:
                for v in values:
                    _local(v).mul_(coef)
            return
        for name, v in (("global_norm", global_norm), ("max_global_norm", max_global_norm)):
            if isinstance(v, bool) or not isinstance(v, (torch.Tensor, numbers.Real)):
                msg = (
                    f"`{name}` must be a number or a 0-d tensor, got {type(v).__name__}; pass "
                    "the norm step() returned and the limit"
                )
                raise TypeError(msg)
        if isinstance(global_norm, torch.Tensor):
            norm_t = _local(global_norm)
        else:  # filled on the device: no host copy
            norm_t = torch.full((), float(global_norm), device=values[0].device)
        if isinstance(max_global_norm, torch.Tensor):
            limit_t = _local(max_global_norm).to(device=norm_t.device, dtype=norm_t.dtype)
        else:
            limit_t = torch.full(
                (), float(max_global_norm), dtype=norm_t.dtype, device=norm_t.device
            )
        _mul_(values, _history.zclip_factor(namespace(norm_t), limit_t, norm_t))

    @property
    def initialized(self) -> bool:
        """Whether the warm-up is over (zclip's attribute): a host read of the step count.

        Settable, as in zclip: ``True`` ends the warm-up now (the EMA then starts from
        :attr:`mean` and :attr:`var`), ``False`` starts it again.
        """
        if self._history is None:
            return bool(self._pending.get("initialized", False))
        return bool(self._history.count[0] >= self._history.window.shape[-1])

    @initialized.setter
    def initialized(self, value: bool) -> None:
        if self._history is None:
            self._pending["initialized"] = bool(value)
            return
        self._history.count.fill_(self._history.window.shape[-1] if value else 0)

    def _statistic(self, name: str) -> float | None:
        if not self.initialized:
            return None
        if self._history is None:
            return float(self._pending[name]) if name in self._pending else None
        return float(getattr(self._history, name)[0])

    def _set_statistic(self, name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, torch.Tensor)):
            msg = (
                f"`{name}` must be a real number or a 0-d tensor, got {type(value).__name__}; "
                f"set e.g. zclip.{name} = 1.0"
            )
            raise TypeError(msg)
        if self._history is None:
            self._pending[name] = value
            return
        target = getattr(self._history, name)
        if isinstance(value, torch.Tensor):
            target.copy_(value.reshape(target.shape))
        else:
            target.fill_(float(value))

    @property
    def mean(self) -> float | None:
        """The EMA mean of the norm as a Python float (zclip's attribute), None in warm-up.

        A host read of the device value, made only when read; settable (a number or a
        tensor, written on the device). :attr:`history` holds the device tensor.
        """
        return self._statistic("mean")

    @mean.setter
    def mean(self, value: Any) -> None:
        self._set_statistic("mean", value)

    @property
    def var(self) -> float | None:
        """The EMA variance of the norm as a Python float (zclip's attribute), None in warm-up.

        A host read, as :attr:`mean`; settable.
        """
        return self._statistic("var")

    @var.setter
    def var(self, value: Any) -> None:
        self._set_statistic("var", value)

    @property
    def buffer(self) -> list[float]:
        """The warm-up norms recorded so far (zclip's attribute): a host read, a new list.

        Empty once :attr:`initialized` (as zclip's); changing the list changes nothing.
        """
        if self._history is None or self.initialized:
            return []
        h = _view(self._history)
        return [float(v) for v in h.window[: int(h.count)]]

    @property
    def history(self) -> History | None:
        """The statistics: ``count`` of steps, EMA ``mean`` and ``var``, warm-up ``window``.

        Device tensors, updated in place at each step; ``None`` before the first.
        """
        return None if self._history is None else _view(self._history)

    def state_dict(self) -> dict[str, Any]:
        """The statistics (``count``, ``mean``, ``var``, ``window``) as tensors (copies)."""
        return _history_state(self._history)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` returned (into the existing tensors, if any)."""
        what = "what ZClip.state_dict() returned"
        state = check_mapping(state_dict, "state_dict", _FIELDS if state_dict else (), what)
        self._history = _load_history(state, self._history, "history")


def _on_device(flags: list[bool], device: torch.device) -> torch.Tensor:
    """``torch.tensor(flags, device=device)`` made on the device: no copy from the host.

    Two filled 0-d tensors stacked (three kernels); ``torch.tensor`` of host data would copy it
    from pageable memory, a host sync at every step on a GPU.
    """
    yes = torch.ones((), dtype=torch.bool, device=device)
    no = torch.zeros((), dtype=torch.bool, device=device)
    return torch.stack([yes if f else no for f in flags])


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
    is read on the host.

    Parameters
    ----------
    parameters : iterable of tensors or of dicts
        The parameters, or parameter groups (dicts with ``"params"`` and optionally their own
        ``"quantile"`` and ``"history_length"``), as autoclip takes them.
    quantile : float, optional
        The quantile of the history the norm is clipped to (0 to 1).
    history_length : int, optional
        How many past norms are kept.
    global_threshold : bool, optional
        Clip the global norm instead of each parameter's.
    formula : {"torch", "tf"}, optional
        ``"torch"`` (default, autoclip's): ``clamp(limit / (norm + 1e-6), max=1)``; ``"tf"``:
        TF's ``clip_by_global_norm`` factor.
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
        self.quantile = float(quantile)
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
        norm = _norm(values, params, self.group)
        xp = namespace(norm)
        if self.global_history is None:
            dt = torch.promote_types(norm.dtype, torch.float32)
            h = _history.init_history(xp, self.history_length, dt, norm.device)
            self.global_history = _store(h)
        factor, new = _history.quantile_step(
            xp, _view(self.global_history), norm, quantile=self.quantile, formula=self.formula
        )
        _assign(self.global_history, new)
        _mul_(values, factor)

    def _step_local(self, i: int, g: dict[str, Any]) -> None:
        params = g["params"]
        present = [p.grad is not None for p in params]
        if not any(present):
            return
        values = _grads(params)
        # a DTensor's norm is a Replicate DTensor: its local tensor is the whole norm
        norms = [_local(_clip.global_norm([v])) for v in values]
        dt = torch.float32
        for n in norms:
            dt = torch.promote_types(dt, n.dtype)
        device = norms[0].device
        it = iter(norms)
        full = torch.stack(
            [
                next(it).to(dt) if has else torch.zeros((), dtype=dt, device=device)
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
        factors, new = _history.quantile_step(
            xp, _view(h), full, quantile=float(g["quantile"]), formula=self.formula, where=where
        )
        _assign(h, new)
        k = 0
        for j, has in enumerate(present):
            if has:
                _mul_([values[k]], factors[j])
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
        #: SGD parameters whose momentum buffer may be a placeholder (its first step skipped)
        self._fresh: dict[torch.Tensor, torch.Tensor] = {}
        #: the last step's decision (a bool tensor: the step was taken), for logging
        self.last_step_applied: torch.Tensor | None = None

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
        apply = self._decide(_local(grad_norm), loss)
        self.last_step_applied = apply
        live = [p for p in params if p.grad is not None]
        state = self.optimizer.state
        keys = [
            [k for k, v in state.get(p, {}).items() if isinstance(v, torch.Tensor)] for p in live
        ]
        # local tensors: a DTensor's shard shares its storage, so writing it writes the DTensor
        sources = [_local(p.detach()) for p in live]
        sources += [_local(state[p][k]) for p, ks in zip(live, keys, strict=True) for k in ks]
        buffers = self._snapshot(sources)
        return torch.logical_not(apply), live, keys, buffers

    def _snapshot(self, sources: list[torch.Tensor]) -> list[torch.Tensor]:
        """``sources`` copied into buffers kept between steps, one ``_foreach_copy_`` a device.

        The buffers are allocated at the first step, again only where a shape, dtype or
        device changes.
        """
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

        One ``torch.where`` per tensor the step wrote (the decision moved once per device);
        state the step created is reset to the values torch creates it with
        (:mod:`anyclip.torch._optim_state`).
        """
        skip, live, keys, buffers = saved
        conds: dict[torch.device, torch.Tensor] = {}

        def cond(t: torch.Tensor) -> torch.Tensor:
            c = conds.get(t.device)
            if c is None:
                c = conds[t.device] = skip.to(t.device, non_blocking=True)
            return c

        for p, old in zip(live, buffers[: len(live)], strict=True):
            v = _local(p.detach())
            torch.where(cond(v), old, v, out=v)
        pos = len(live)
        state = self.optimizer.state
        groups = {id(p): g for g in self.optimizer.param_groups for p in g["params"]}
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


class SkipOnSpike(_Wrapper):
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
        tensor of the optimizer's state as they were (selected with ``torch.where``; state the
        step created is left as never created: reset to torch's initial values, and SGD's
        momentum buffer flagged so that its next taken step starts afresh); it returns what
        the optimizer's ``step`` returned.
        """
        return self._skipper.step(closure, loss=loss, grad_norm=grad_norm)

    def before_step(self, *, loss: Any = None, grad_norm: torch.Tensor | None = None) -> Any:
        """Decide and snapshot: the first half of :meth:`step`.

        Returns what :meth:`after_step` needs. Both halves compile with
        ``torch.compile(fullgraph=True)``; torch's own ``Optimizer.step`` between them holds a
        deliberate graph break (``torch._dynamo.graph_break()``, not a host sync).
        """
        return self._skipper.before_step(loss=loss, grad_norm=grad_norm)

    def after_step(self, saved: Any) -> None:
        """Undo the optimizer's step where it is to be skipped: the second half of :meth:`step`.

        One ``torch.where`` per tensor the step wrote (the decision moved once per device);
        state the step created is reset to the values torch creates it with.
        """
        self._skipper.after_step(saved)

    def state_dict(self) -> dict[str, Any]:
        """``{"optimizer": the optimizer's state_dict, "skip": the histories and counters}``."""
        return self._skipper.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` returned."""
        self._skipper.load_state_dict(state_dict)

    # torch.optim.Optimizer's own methods, which would act on this wrapper's (absent) state
    def zero_grad(self, set_to_none: bool = True) -> None:
        """The wrapped optimizer's ``zero_grad``."""
        self.optimizer.zero_grad(set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """The wrapped optimizer's ``add_param_group``."""
        self.optimizer.add_param_group(param_group)


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
    undone with ``torch.where`` (parameters and optimizer state, bit for bit, for SGD, Adam,
    AdamW and any optimizer whose state is tensors), without a host sync.

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
    The cost over the bare step is one copy of the parameters and of the optimizer's state
    tensors, and a ``torch.where`` over each (docs/porting.md gives measured times). Adam's
    ``step`` counter lives on the CPU unless ``capturable=True``: on CUDA, use
    ``capturable=True`` (or ``fused=True``) to keep the decision on the device.

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
