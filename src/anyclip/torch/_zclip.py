"""ZClip for torch: :class:`ZClip`, zclip 1.0's signature, surface and numbers on the device.

Layer: public adapter over :func:`anyclip._history.zclip_step` (the formula) and the shared
helpers of :mod:`anyclip.torch._history`; :mod:`anyclip.torch` re-exports the names in
``__all__``. :meth:`ZClip.step` computes the norm, keeps the state tensors (on the gradients'
device, updated in place) and applies the factor the core returns: nothing is read back to the
host, so a training step with it compiles with ``torch.compile(fullgraph=True)``. zclip's
attributes (``mean``, ``var``, ``initialized``, ``buffer``) read the device state only when read.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from anyclip import _history
from anyclip._compat import namespace
from anyclip._history import History, check_choice, check_int, check_mapping, check_real
from anyclip.torch._common import _local
from anyclip.torch._history import (
    _FIELDS,
    _assign,
    _grads,
    _history_state,
    _load_history,
    _parameters,
    _state_dtype,
    _store,
    _view,
    _zclip_norms,
)
from anyclip.torch._scale import _mul_

__all__ = ["ZClip"]


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

    The numbers are zclip's, op for op: its norm (each gradient's ``norm(2)`` in the first
    parameter's dtype, then ``sqrt(sum(pow(norms, 2)))`` in it), the warm-up's
    ``clip_grad_norm_`` (torch's norm of the per-tensor norms and its factor
    ``(norm + 1e-6).reciprocal() * max_grad_norm``, each op in float32 rounded to the dtype
    for float16 and bfloat16), its sums of the warm-up norms (in order), its EMA and its
    product with a Python float (in float32 for halves). With ``dtype=torch.float64`` (zclip
    keeps Python floats) the gradients, norms and statistics are zclip's bit for bit on the
    CPU, but where zclip's ``(x - mean) ** 2`` (the C library's ``pow``, not always
    correctly rounded) is 1 ULP off the exact square anyclip takes; with the default float32
    statistics the norm and the warm-up are, and a clipped step after it can differ in the
    last bits of the threshold.

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
        (norm + 1e-6)`` where ``norm > limit`` (torch's ``clip_grad_norm_``, on its own norm,
        during warm-up);
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
        raw: Any  # an override of _compute_grad_norm may give a number
        warm_norm = None
        if self._own_norm():  # zclip's norm and clip_grad_norm_'s, from one pass
            raw, warm_norm = _zclip_norms(values, params, self.group)
        else:
            raw = self._compute_grad_norm(model_or_parameters)
            if self.max_grad_norm is not None and self.formula == "zclip":
                warm_norm = _zclip_norms(values, params, self.group)[1]
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
            warm_norm=warm_norm,
        )
        _assign(self._history, out.history)
        self.threshold = out.threshold
        # zclip multiplies by a Python float (clip_grad_norm_ by a tensor of the gradients'
        # dtype, whose value the factor holds exactly): torch's product in float32 for halves
        _mul_(values, out.factor, opmath=self.formula == "zclip")
        return norm

    def _own_norm(self) -> bool:
        """Whether :meth:`_compute_grad_norm` is this class's (not replaced nor overridden)."""
        return (
            "_compute_grad_norm" not in vars(self)
            and type(self)._compute_grad_norm is ZClip._compute_grad_norm
        )

    def _compute_grad_norm(self, model_or_parameters: Any) -> torch.Tensor:
        """The pre-clip global 2-norm of the gradients (a 0-d tensor), zclip's, op for op.

        zclip's hook of the same name: :meth:`step` calls it, so a subclass (or a test that
        replaces it on the instance, as zclip's own tests do) can supply the norm; a Python
        number returned there is filled on the gradients' device.
        """
        params = _parameters(model_or_parameters)
        return _zclip_norms(_grads(params), params, self.group)[0]

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
        _mul_(values, _history.zclip_factor(namespace(norm_t), limit_t, norm_t), opmath=True)

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
        """Load what :meth:`state_dict` returned (into the existing tensors, if any).

        Statistics set before the first step (``mean``, ``var``, ``initialized``) are replaced.
        """
        what = "what ZClip.state_dict() returned"
        state = check_mapping(state_dict, "state_dict", _FIELDS if state_dict else (), what)
        self._history = _load_history(state, self._history, "history")
        self._pending = {}
