"""Every public torch entry point on a non-CPU device, with each host sync flagged.

Two uses:

* :data:`SCENARIOS`, every public function, adapter and stateful rule on torch tensors of a
  given device and dtype (float32, bfloat16), forward and ``backward()`` where differentiable:
  ``tests/test_host_sync.py`` runs them on CUDA under ``torch.cuda.set_sync_debug_mode("error")``
  (``Backend.host_syncs_raise``), and this script runs them on the CPU, without a GPU.
* ``python tests/_host_sync_worker.py OUT``: in a fresh process, each scenario (and each
  :data:`PROBES` case, which show that the detector flags each kind of sync and nothing else)
  is called twice on fake tensors of a device that is not the CPU, under :class:`Detector`;
  ``{name: {"first": ..., "second": ..., "error": ...}}`` is written as JSON to ``OUT``.

The device: ``torch._subclasses.fake_tensor.FakeTensorMode`` makes tensors that carry a device
and a dtype but no data, so a CPU-only torch can build tensors "on" an accelerator. CUDA itself
does not do there: a CPU-only torch has no CUDA device guard, and Python's indexing, ``copy_``
and ``nonzero`` on a fake CUDA tensor raise ("PyTorch is not linked with support for cuda
devices") before any operation is dispatched. torch's own API for a backend written in Python
(``torch.utils.backend_registration._setup_privateuseone_for_python_backend``) registers the
``privateuseone`` device with a guard; torch treats it as it treats CUDA where anyclip's path
could differ (``torch.utils._foreach_utils`` lists it among the foreach devices, ``is_cpu`` is
false), so the multi-tensor path that runs on a GPU runs here. The registration is for the whole
process (and cannot be undone), hence the fresh process.

What :class:`Detector` (a ``TorchDispatchMode`` above the fake mode: it sees every ATen operation
anyclip's call dispatches, forward and backward) flags, when an operand is on the device:

* ``value read``: ``aten._local_scalar_dense`` (``item()``, ``bool()``, ``float()``, ``int()``,
  a Python ``if``/``and``/``or`` on a tensor, ``tolist()``) and any other operation that returns
  a Python value computed from tensor data (``aten.equal``, ``aten.is_nonzero``);
* ``host copy``: ``aten._to_copy`` or ``aten.copy_`` between the CPU and the device, of any size:
  a tensor made on the device from host data (``torch.tensor(0.5, device=d)``, ``asarray``), a
  pageable host-to-device copy, or ``.cpu()``/``.numpy()``;
* ``dynamic shape``: operations whose output shape depends on values, which the host must wait
  for (``nonzero``, ``masked_select``, ``unique``, boolean-mask indexing, ``repeat_interleave``
  without ``output_size``, ``bincount``...).

First calls: anyclip's 0-d constants are filled on the device (``torch.full``: no host data)
and cached by device and dtype, so a first call is checked like any other. Fake tensors are
never cached (``anyclip._numerics._torch_shareable``), so here every call takes the path of a
first call; the CUDA test checks a second call (torch's own lazy initialisation, such as a
cuBLAS handle, may sync once).

What it does not flag: Python scalars (``x * 0.5``: the value is passed to the kernel), 0-d
CPU tensors as operands of a device operation (read on the host from host memory, passed by
value), ``torch.full``/``zeros``/``ones`` on the device (filled by a kernel, nothing copied),
and value reads or copies of CPU tensors. A sync made inside a CUDA kernel's own host code (an
ATen kernel that reads a value back internally) is invisible here: the CUDA test catches those.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The dtypes every scenario runs in.
DTYPES = ("float32", "bfloat16")

# ---------------------------------------------------------------------------- scenarios
Build = Callable[[Any, Any, Any], Callable[[], Any]]


@dataclass(frozen=True)
class Scenario:
    """``build(torch, device, dtype)`` makes the inputs and returns one call (a step).

    ``syncs``: why the call syncs by design (the user asked for it), or None (it must not).
    ``dtypes``: those it runs in (TF's ``clip_by_average_norm`` takes float32 only).
    """

    build: Build
    syncs: str | None = None
    dtypes: tuple[str, ...] = DTYPES


def _t(torch: Any, dev: Any, dtype: Any, values: Any) -> Any:
    """``values`` on ``dev``: a CPU tensor moved once, while building (not during a call)."""
    return torch.tensor(values, dtype=torch.float32).to(device=dev, dtype=dtype)


def _data(torch: Any, dev: Any, dtype: Any) -> tuple[Any, Any]:
    a = _t(torch, dev, dtype, [[3.0, 4.0, -1.0, 0.5], [6.0, -8.0, 2.0, 0.25]])
    b = _t(torch, dev, dtype, [12.0, -1.0, 0.5])
    return a, b


def _leaves(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return [x for v in node.values() for x in _leaves(v)]
    if isinstance(node, (list, tuple)):
        return [x for v in node for x in _leaves(v)]
    return [node]


def _differentiated(fn: Callable[..., Any], *inputs: Any) -> Callable[[], Any]:
    """A call of ``fn(*inputs)`` on leaves that require a gradient, then ``backward()``."""

    def call() -> Any:
        leaves = [x.detach().requires_grad_(True) for x in inputs]
        out = fn(*leaves)
        total = None
        for t in _leaves(out):
            if getattr(t, "requires_grad", False):
                s = t.sum()
                total = s if total is None else total + s
        if total is not None:
            total.backward()
        return out

    return call


def _functional(fn: Callable[..., Any], which: str = "a") -> Build:
    """A differentiable function of the data: ``fn(a)``, ``fn(a, b)`` or ``fn(a, a[:, :2])``."""

    def build(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
        a, b = _data(torch, dev, dtype)
        args = {"a": (a,), "ab": (a, b), "rows": (a, a[:, :2].contiguous())}[which]
        return _differentiated(fn, *args)

    return build


def _params(torch: Any, dev: Any, dtype: Any) -> list[Any]:
    """Two parameters with gradients (and one without, which the adapters skip)."""
    a, b = _data(torch, dev, dtype)
    ps = [torch.nn.Parameter(torch.ones_like(x)) for x in (a, b, b)]
    ps[0].grad, ps[1].grad = a * 10, b * 10
    return ps


def _in_place(fn: Callable[[Any, list[Any]], Any]) -> Build:
    """An ``anyclip.torch`` adapter on the parameters' gradients: ``fn(at, params)``."""

    def build(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
        import anyclip.torch as at

        ps = _params(torch, dev, dtype)
        return lambda: fn(at, ps)

    return build


def _optimizer_hook(attach: Callable[[Any, Any, list[Any]], Any]) -> Build:
    """``attach(at, optimizer, params)`` registers a hook; a call is ``optimizer.step()``."""

    def build(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
        import anyclip.torch as at

        ps = _params(torch, dev, dtype)
        opt = torch.optim.SGD(ps, lr=0.1, momentum=0.9)
        attach(at, opt, ps)
        return opt.step

    return build


def _zclip(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
    import anyclip.torch as at

    ps = _params(torch, dev, dtype)
    z = at.ZClip(warmup_steps=1)  # the second call is past the warm-up
    return lambda: z.step(ps)


def _zclip_in_place(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
    """``apply_in_place_clipping`` with the norm ``step`` returned (a device tensor)."""
    import anyclip.torch as at

    ps = _params(torch, dev, dtype)
    z = at.ZClip(warmup_steps=1)
    norm = z.step(ps)
    return lambda: z.apply_in_place_clipping(ps, norm, 0.5)


def _quantile_optimizer(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
    """``QuantileClip.as_optimizer(SGD)``: a call is the wrapper's ``step`` (clip, then SGD)."""
    import anyclip.torch as at

    ps = _params(torch, dev, dtype)
    opt = torch.optim.SGD(ps, lr=0.1, momentum=0.9)
    wrapped = at.QuantileClip.as_optimizer(opt, quantile=0.5, history_length=4)
    return wrapped.step


def _quantile(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
    import anyclip.torch as at

    q = at.QuantileClip(_params(torch, dev, dtype), history_length=4)
    return q.step


def _quantile_tensor(global_threshold: bool) -> Build:
    """``QuantileClip`` with a ``quantile`` tensor on the device (never read on the host)."""

    def build(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
        import anyclip.torch as at

        q = torch.full((), 0.5, dtype=dtype, device=dev)  # filled there: no host data
        params = _params(torch, dev, dtype)
        clip = at.QuantileClip(params, q, history_length=4, global_threshold=global_threshold)
        return clip.step

    return build


def _spike(on_loss: bool | str) -> Build:
    def build(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
        import anyclip.torch as at

        ps = _params(torch, dev, dtype)
        opt = at.skip_on_spike(torch.optim.SGD(ps, lr=0.1), 3, 1.0, on_loss=bool(on_loss))
        loss = torch.ones((), dtype=dtype, device=dev)
        if on_loss == "number":
            return lambda: opt.step(loss=1.5)
        return (lambda: opt.step(loss=loss)) if on_loss else opt.step

    return build


def _if_finite(nonfinite: bool) -> Build:
    """``apply_if_finite`` around Adam (state to snapshot and undo), finite or skipped steps."""

    def build(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
        import anyclip.torch as at

        ps = _params(torch, dev, dtype)
        if nonfinite:
            ps[0].grad[0] = float("nan")  # set here, on the device, before the checked calls
        return at.apply_if_finite(torch.optim.Adam(ps, lr=0.1, capturable=True), 1).step

    return build


def _embedding(max_norm: Any, shards: bool = False) -> Build:
    def build(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
        import anyclip

        table = _t(torch, dev, dtype, [[3.0, 4.0], [0.5, 0.0], [6.0, 8.0], [1.0, 1.0]])
        ids = torch.tensor([2, 0, 2, 3]).to(dev)
        if shards:  # two shards of two rows ("mod": ids 0 and 2 in the first)
            return _differentiated(
                lambda p, q: anyclip.embedding_lookup([p, q], ids, max_norm),
                table[:2].contiguous(),
                table[2:].contiguous(),
            )
        return _differentiated(lambda p: anyclip.embedding_lookup(p, ids, max_norm), table)

    return build


def _scenarios() -> dict[str, Scenario]:
    import anyclip
    from anyclip import constraints as C
    from anyclip import tree

    def with_tensor(fn: Callable[..., Any], value: float) -> Build:
        """``fn(a, v)`` with ``v`` a 0-d tensor on the device (a traced clip norm)."""

        def build(torch: Any, dev: Any, dtype: Any) -> Callable[[], Any]:
            a, _ = _data(torch, dev, dtype)
            v = torch.full((), value, dtype=dtype, device=dev)
            return _differentiated(lambda x: fn(x, v), a)

        return build

    def flushing(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            with anyclip.flush_subnormals():
                return fn(*args)

        return run

    raise_ = 'nonfinite="raise" (documented: it reads the norm)'
    error_if = "error_if_nonfinite=True (documented: it reads the norm)"
    s = Scenario
    return {
        # --- the eight TF functions
        "clip_by_value": s(_functional(lambda a: anyclip.clip_by_value(a, -0.5, 0.5))),
        "clip_by_value-tensor-bounds": s(
            with_tensor(lambda a, v: anyclip.clip_by_value(a, -v, v), 2.0)
        ),
        "clip_by_norm": s(_functional(lambda a: anyclip.clip_by_norm(a, 1.0))),
        "clip_by_norm-axes": s(_functional(lambda a: anyclip.clip_by_norm(a, 1.0, axes=1))),
        "clip_by_norm-tensor-clip": s(with_tensor(anyclip.clip_by_norm, 1.0)),
        "clip_by_average_norm": s(
            _functional(lambda a: anyclip.clip_by_average_norm(a, 0.1)), dtypes=("float32",)
        ),
        "global_norm": s(_functional(lambda a, b: anyclip.global_norm([a, b]), "ab")),
        "global_norm-widest": s(
            _functional(lambda a, b: anyclip.global_norm([a, b], accumulate_dtype="widest"), "ab")
        ),
        "clip_by_global_norm": s(
            _functional(lambda a, b: anyclip.clip_by_global_norm([a, b], 1.0), "ab")
        ),
        "clip_by_global_norm-skip": s(
            _functional(
                lambda a, b: anyclip.clip_by_global_norm([a, b], 1.0, nonfinite="skip"), "ab"
            )
        ),
        "clip_by_global_norm-raise": s(
            _functional(
                lambda a, b: anyclip.clip_by_global_norm([a, b], 1.0, nonfinite="raise"), "ab"
            ),
            syncs=raise_,
        ),
        "clip_by_global_norm-flush": s(
            _functional(flushing(lambda a, b: anyclip.clip_by_global_norm([a, b], 1.0)), "ab")
        ),
        "norm": s(_functional(lambda a: anyclip.norm(a))),
        "norm-axis": s(_functional(lambda a: anyclip.norm(a, axis=1))),
        "norm-ord-1": s(_functional(lambda a: anyclip.norm(a, ord=1))),
        "norm-ord-3": s(_functional(lambda a: anyclip.norm(a, ord=3, axis=1))),
        "norm-ord-inf": s(_functional(lambda a: anyclip.norm(a, ord=float("inf")))),
        "norm-matrix-1": s(_functional(lambda a: anyclip.norm(a, ord=1, axis=(0, 1)))),
        "l2_normalize": s(_functional(lambda a: anyclip.l2_normalize(a, axis=1))),
        "normalize": s(_functional(lambda a: anyclip.normalize(a, axis=1))),
        "embedding_lookup-max_norm": s(_embedding(1.0)),
        "embedding_lookup-shards": s(_embedding(1.0, shards=True)),
        # --- constraints
        "constraints.max_norm": s(_functional(lambda a: C.max_norm(a, 1.0))),
        "constraints.min_max_norm": s(_functional(lambda a: C.min_max_norm(a, 0.5, 1.0))),
        "constraints.unit_norm": s(_functional(lambda a: C.unit_norm(a))),
        "constraints.non_neg": s(_functional(lambda a: C.non_neg(a))),
        # --- anyclip.tree
        "tree.clip_by_value": s(
            _functional(lambda a, b: tree.clip_by_value({"a": a, "b": [b]}, -0.5, 0.5), "ab")
        ),
        "tree.clip_by_norm": s(
            _functional(lambda a, b: tree.clip_by_norm({"a": a, "b": [b]}, 1.0), "ab")
        ),
        "tree.clip_by_average_norm": s(
            _functional(lambda a, b: tree.clip_by_average_norm({"a": a, "b": [b]}, 0.1), "ab"),
            dtypes=("float32",),
        ),
        "tree.global_norm": s(_functional(lambda a, b: tree.global_norm({"a": a, "b": [b]}), "ab")),
        "tree.clip_by_global_norm": s(
            _functional(lambda a, b: tree.clip_by_global_norm({"a": a, "b": [b]}, 1.0), "ab")
        ),
        "tree.norm": s(_functional(lambda a, b: tree.norm({"a": a, "b": [b]}), "ab")),
        "tree.per_example_clip": s(
            _functional(lambda a, r: tree.per_example_clip([a, r], 1.0), "rows")
        ),
        "tree.per_example_clip-tf": s(
            _functional(lambda a, r: tree.per_example_clip([a, r], 1.0, style="tf"), "rows")
        ),
        "tree.per_example_layer_clip": s(
            _functional(lambda a, r: tree.per_example_layer_clip([a, r], 1.0), "rows")
        ),
        "tree.adaptive_clip": s(
            _functional(lambda a, b: tree.adaptive_clip([a, b], [a * 2, b * 2], 0.01), "ab")
        ),
        "tree.clip_by_block_rms": s(
            _functional(lambda a, b: tree.clip_by_block_rms([a, b], 0.5), "ab")
        ),
        # --- anyclip.torch adapters
        "torch.clip_grad_norm_": s(_in_place(lambda at, ps: at.clip_grad_norm_(ps, 1.0))),
        "torch.clip_grad_norm_-foreach-false": s(
            _in_place(lambda at, ps: at.clip_grad_norm_(ps, 1.0, foreach=False))
        ),
        "torch.clip_grad_norm_-skip": s(
            _in_place(lambda at, ps: at.clip_grad_norm_(ps, 1.0, nonfinite="skip"))
        ),
        "torch.clip_grad_norm_-p1": s(
            _in_place(lambda at, ps: at.clip_grad_norm_(ps, 1.0, norm_type=1))
        ),
        "torch.clip_grad_norm_-inf": s(
            _in_place(lambda at, ps: at.clip_grad_norm_(ps, 1.0, norm_type=float("inf")))
        ),
        "torch.clip_grad_norm_-groups": s(
            _in_place(
                lambda at, ps: at.clip_grad_norm_(
                    None, {"a": 1.0, "b": None}, groups={"a": ps[:1], "b": ps[1:]}
                )
            )
        ),
        "torch.clip_grad_norm_-error_if_nonfinite": s(
            _in_place(lambda at, ps: at.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)),
            syncs=error_if,
        ),
        "torch.clip_grad_norm_-raise": s(
            _in_place(lambda at, ps: at.clip_grad_norm_(ps, 1.0, nonfinite="raise")), syncs=raise_
        ),
        "torch.get_total_norm-error_if_nonfinite": s(
            _in_place(
                lambda at, ps: at.get_total_norm(
                    [p.grad for p in ps if p.grad is not None], error_if_nonfinite=True
                )
            ),
            syncs=error_if,
        ),
        "torch.clip_grads_with_norm_-raise": s(
            _in_place(
                lambda at, ps: at.clip_grads_with_norm_(
                    ps, 1.0, ps[0].grad.sum(), nonfinite="raise"
                )
            ),
            syncs=raise_,
        ),
        "torch.clip_grad_value_-tensor": s(
            _in_place(lambda at, ps: at.clip_grad_value_(ps, ps[0].grad.sum())),
            syncs="a tensor `clip_value` (documented: read with float(), as torch's own)",
        ),
        "torch.get_total_norm": s(
            _in_place(lambda at, ps: at.get_total_norm([p.grad for p in ps if p.grad is not None]))
        ),
        "torch.clip_grads_with_norm_": s(
            _in_place(lambda at, ps: at.clip_grads_with_norm_(ps, 1.0, ps[0].grad.sum()))
        ),
        "torch.clip_grad_value_": s(_in_place(lambda at, ps: at.clip_grad_value_(ps, 0.1))),
        "torch.clip_grad_by_value_": s(
            _in_place(lambda at, ps: at.clip_grad_by_value_(ps, -0.1, 0.1))
        ),
        "torch.clip_grad_by_value_-tensor-bounds": s(
            _in_place(lambda at, ps: at.clip_grad_by_value_(ps, -ps[1].grad[0], ps[1].grad[0]))
        ),
        "torch.clip_grad_by_norm_-tensor-clip": s(
            _in_place(lambda at, ps: at.clip_grad_by_norm_(ps, ps[1].grad[0].abs()))
        ),
        "torch.clip_grad_norm_-tensor-max_norm": s(
            _in_place(lambda at, ps: at.clip_grad_norm_(ps, ps[1].grad[0].abs()))
        ),
        "torch.clip_grad_by_norm_": s(_in_place(lambda at, ps: at.clip_grad_by_norm_(ps, 0.1))),
        "torch.adaptive_clip_grad_": s(_in_place(lambda at, ps: at.adaptive_clip_grad_(ps, 0.01))),
        "torch.constrain_": s(
            _in_place(lambda at, ps: at.constrain_(ps, {p: C.MaxNorm(1.0, axis=None) for p in ps}))
        ),
        "torch.constrain_after_step": s(
            _optimizer_hook(
                lambda at, opt, ps: at.constrain_after_step(opt, ps, {ps[0]: C.UnitNorm(axis=1)})
            )
        ),
        "torch.keras_clipping-clipnorm": s(
            _optimizer_hook(lambda at, opt, ps: at.keras_clipping(opt, clipnorm=1.0))
        ),
        "torch.keras_clipping-global_clipnorm": s(
            _optimizer_hook(lambda at, opt, ps: at.keras_clipping(opt, global_clipnorm=1.0))
        ),
        "torch.keras_clipping-clipvalue": s(
            _optimizer_hook(lambda at, opt, ps: at.keras_clipping(opt, clipvalue=0.1))
        ),
        "torch.keras_clipping-schedule": s(
            _optimizer_hook(
                lambda at, opt, ps: at.keras_clipping(opt, global_clipnorm=lambda n: n * 0.5 + 1.0)
            )
        ),
        "torch.keras_clipping-schedule-number": s(
            _optimizer_hook(lambda at, opt, ps: at.keras_clipping(opt, clipnorm=lambda n: 2.0))
        ),
        "torch.ZClip.step": s(_zclip),
        "torch.ZClip.apply_in_place_clipping": s(_zclip_in_place),
        "torch.QuantileClip.step": s(_quantile),
        "torch.QuantileClip.step-tensor_quantile": s(_quantile_tensor(global_threshold=False)),
        "torch.QuantileClip.step-tensor_quantile-global": s(_quantile_tensor(True)),
        "torch.OptimizerWithClipping.step": s(_quantile_optimizer),
        "torch.skip_on_spike.step": s(_spike(on_loss=False)),
        "torch.skip_on_spike.step-on_loss": s(_spike(on_loss=True)),
        "torch.skip_on_spike.step-on_loss-number": s(_spike(on_loss="number")),
        "torch.apply_if_finite.step": s(_if_finite(nonfinite=False)),
        "torch.apply_if_finite.step-nonfinite": s(_if_finite(nonfinite=True)),
    }


def scenarios() -> dict[str, Scenario]:
    """The scenarios by name (imports anyclip, which imports no framework)."""
    return _scenarios()


# ------------------------------------------------------------------------- the detector
#: Operations whose output shape depends on the values (the host waits for them).
DYNAMIC_SHAPE = frozenset(
    {
        "nonzero",
        "nonzero_numpy",
        "argwhere",
        "masked_select",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "unique_dim_consecutive",
        "bincount",
        "histc",
        "histogram",
        "_histogramdd_bin_edges",
    }
)

#: Operations that return a Python value but read only metadata (no data, no sync).
METADATA = frozenset(
    {"device", "layout", "dim", "is_same_size", "sym_size", "sym_stride", "sym_numel"}
    | {"sym_storage_offset", "is_contiguous", "sym_is_contiguous", "is_coalesced", "_nnz"}
    | {"sparse_dim", "dense_dim", "is_non_overlapping_and_dense"}
)


class HostSync(RuntimeError):
    """Raised by :class:`Detector` at the first host sync of a call."""


def _detector_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Detector(TorchDispatchMode):  # type: ignore[misc]
        """Flag each host sync (see the module docstring); raise :class:`HostSync` at the first.

        ``found`` keeps what was flagged (kind, operation, stack), in case a caller catches the
        exception.
        """

        def __init__(self) -> None:
            super().__init__()
            self.found: list[dict[str, str]] = []

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            why = _why(func, args, kwargs)
            if why is not None:
                stack = "".join(traceback.format_stack(limit=16)[:-2])
                self.found.append({"kind": why, "op": str(func), "stack": stack})
                raise HostSync(f"{why}: {func}")
            return func(*args, **kwargs)

    return Detector


def _on_device(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and x.device.type != "cpu"


def _why(func: Any, args: Any, kwargs: dict[str, Any]) -> str | None:
    """The kind of host sync ``func(*args, **kwargs)`` makes, or None."""
    import torch

    name = func.overloadpacket.__name__
    flat = [*args, *kwargs.values()]
    tensors = [t for a in flat for t in (a if isinstance(a, (list, tuple)) else [a])]
    device = any(_on_device(t) for t in tensors)
    if name in ("_to_copy", "copy_"):
        src, dst = (args[1], args[0].device) if name == "copy_" else (args[0], None)
        if dst is None:
            dst = torch.device(kwargs.get("device") or src.device)
        if isinstance(src, torch.Tensor) and (src.device.type == "cpu") != (dst.type == "cpu"):
            return "host copy"
        return None
    if not device:
        return None
    if name in DYNAMIC_SHAPE:
        return "dynamic shape"
    if (
        name == "repeat_interleave"
        and kwargs.get("output_size", args[-1] if len(args) > 2 else None) is None
    ):
        return "dynamic shape"
    if name in ("index", "index_put", "index_put_", "_index_put_impl_"):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(
            isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices
        ):
            return "dynamic shape"
        return None
    returns = func._schema.returns
    if name not in METADATA and any("Tensor" not in str(r.type) for r in returns):
        return "value read"
    return None


# --------------------------------------------------------------------- detector probes
def _probes() -> dict[str, tuple[Callable[[Any, Any], Any], str | None]]:
    """``{name: (fn(torch, x), the kind the detector must flag or None)}`` on a device ``x``."""

    def mask_index(torch: Any, x: Any) -> Any:
        return x[x > 0]

    def mask_assign(torch: Any, x: Any) -> Any:
        y = x.clone()
        y[y > 0] = 1.0
        return y

    return {
        "item": (lambda torch, x: x.sum().item(), "value read"),
        "bool": (lambda torch, x: bool(x.sum() > 0), "value read"),
        "float": (lambda torch, x: float(x.sum()), "value read"),
        "python-if": (lambda torch, x: 1 if (x > 0).all() else 0, "value read"),
        "tolist": (lambda torch, x: x.tolist(), "value read"),
        "equal": (lambda torch, x: torch.equal(x, x), "value read"),
        "tensor-from-python": (
            lambda torch, x: x * torch.tensor(0.5, device=x.device),
            "host copy",
        ),
        "asarray-0d": (
            lambda torch, x: torch.asarray(0.5, dtype=x.dtype, device=x.device),
            "host copy",
        ),
        "cpu-tensor-to": (lambda torch, x: torch.ones(3).to(x.device), "host copy"),
        "copy_-from-cpu": (
            lambda torch, x: x.clone().copy_(torch.ones(x.shape, dtype=x.dtype)),
            "host copy",
        ),
        "cpu": (lambda torch, x: x.cpu(), "host copy"),
        "nonzero": (lambda torch, x: x.nonzero(), "dynamic shape"),
        "where-1-arg": (lambda torch, x: torch.where(x > 0), "dynamic shape"),
        "masked_select": (lambda torch, x: torch.masked_select(x, x > 0), "dynamic shape"),
        "mask-index": (mask_index, "dynamic shape"),
        "mask-assign": (mask_assign, "dynamic shape"),
        "unique": (lambda torch, x: torch.unique(x), "dynamic shape"),
        "repeat_interleave": (
            lambda torch, x: torch.repeat_interleave(
                x[0], torch.ones(4, dtype=torch.int64, device=x.device)
            ),
            "dynamic shape",
        ),
        # not syncs
        "python-scalar": (lambda torch, x: x * 0.5 + 1.0, None),
        "cpu-0d-operand": (lambda torch, x: x * torch.tensor(0.5), None),
        "full": (lambda torch, x: torch.full((), 0.5, dtype=x.dtype, device=x.device) * x, None),
        "where-3-args": (lambda torch, x: torch.where(x > 0, x, torch.zeros_like(x)), None),
        "repeat_interleave-output_size": (
            lambda torch, x: torch.repeat_interleave(
                x[0], torch.ones(4, dtype=torch.int64, device=x.device), output_size=4
            ),
            None,
        ),
        "foreach_norm": (lambda torch, x: torch._foreach_norm([x, x[0]]), None),
    }


def probes() -> dict[str, str | None]:
    """The detector probes' names and the kind each must be flagged with (None: not flagged)."""
    return {name: kind for name, (_, kind) in _probes().items()}


# ----------------------------------------------------------------------------- main
#: The fake accelerator's name (see the module docstring) and the device the tensors report.
BACKEND = "fakegpu"
DEVICE = f"{BACKEND}:0"

#: What the fake accelerator's own kernels met: a tensor allocated on it for real. Only
#: ``torch.tensor(data, device=...)`` and ``torch.asarray`` reach them (they copy host data to
#: the device with torch's Python dispatch turned off, unseen by the fake mode and the
#: detector): a host copy.
_OUTSIDE: list[dict[str, str]] = []


def _register_device() -> Any:
    """The fake accelerator, with kernels that flag a real allocation on it."""
    import torch
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    # renamed: the autograd engine runs a device's backward only on a registered accelerator
    _setup_privateuseone_for_python_backend(BACKEND)

    def allocate(*args: Any, **kwargs: Any) -> Any:
        stack = "".join(traceback.format_stack(limit=16)[:-1])
        _OUTSIDE.append(
            {"kind": "host copy", "op": "torch.tensor/asarray on the device", "stack": stack}
        )
        raise HostSync("host copy: a tensor made on the device from host data")

    lib = torch.library.Library("aten", "IMPL")
    for op in ("empty_strided", "empty.memory_format"):
        lib.impl(op, allocate, "PrivateUse1")
    return lib


def _run(call: Callable[[], Any], detector: type) -> dict[str, Any]:
    """Two calls under the detector: what each flagged, and any other error."""
    out: dict[str, Any] = {"first": [], "second": [], "error": None}
    for which in ("first", "second"):
        d = detector()
        _OUTSIDE.clear()
        try:
            with d:
                call()
        except HostSync:
            pass
        except Exception:  # noqa: BLE001 - reported with the scenario
            if not _OUTSIDE:
                out["error"] = traceback.format_exc()[-3000:]
        out[which] = d.found + _OUTSIDE
        if out["error"] is not None or out[which]:
            break
    return out


def main(out_path: str) -> None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    lib = _register_device()
    dev = torch.device(DEVICE)
    detector = _detector_class()
    results: dict[str, Any] = {}
    with FakeTensorMode():
        x = torch.ones((2, 4), device=dev)
        for name, (fn, _) in _probes().items():
            results[f"probe:{name}"] = _run(lambda fn=fn: fn(torch, x), detector)
        for name, scenario in scenarios().items():
            for dtype in scenario.dtypes:
                key = f"{name}-{dtype}"
                try:
                    call = scenario.build(torch, dev, getattr(torch, dtype))
                except Exception:  # noqa: BLE001 - reported with the scenario
                    results[key] = {"first": [], "second": [], "error": traceback.format_exc()}
                    continue
                results[key] = _run(call, detector)
    del lib
    Path(out_path).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
