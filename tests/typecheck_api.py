"""What a type checker infers from anyclip's public signatures (mypy checks this file).

Not a test module: ``make test`` runs mypy over it (``[tool.mypy] files``). Each
``assert_type`` fails the type check when a signature stops keeping the array type; each
``# type: ignore[...]`` fails it (strict mode warns about unused ignores) when a wrong argument
stops being an error. At run time the module defines nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__: list[str] = []

if TYPE_CHECKING:
    from collections.abc import Hashable
    from typing import Any

    import jax
    import numpy as np
    import numpy.typing as npt
    import torch
    from typing_extensions import assert_type

    import anyclip
    import anyclip.optax
    import anyclip.torch
    from anyclip._typing import Array

    def numpy_in_numpy_out(a: npt.NDArray[np.float32]) -> None:
        assert_type(anyclip.clip_by_value(a, -1.0, 1.0), npt.NDArray[np.float32])
        assert_type(anyclip.clip_by_norm(a, 1.0, axes=[0]), npt.NDArray[np.float32])
        assert_type(anyclip.clip_by_average_norm(a, 1.0), npt.NDArray[np.float32])
        assert_type(anyclip.norm(a, ord="fro", axis=(0, 1)), npt.NDArray[np.float32])
        assert_type(anyclip.norm(a, ord=3), npt.NDArray[np.float32])
        assert_type(anyclip.l2_normalize(a, axis=1), npt.NDArray[np.float32])
        normalized, n = anyclip.normalize(a, ord=1)
        assert_type(normalized, npt.NDArray[np.float32])
        assert_type(n, npt.NDArray[np.float32])
        assert_type(anyclip.global_norm([a, None, a]), npt.NDArray[np.float32])
        assert_type(anyclip.embedding_lookup(a, [0, 1], 1.0), npt.NDArray[np.float32])
        assert_type(anyclip.constraints.max_norm(a, 3.0, axis=1), npt.NDArray[np.float32])
        assert_type(anyclip.constraints.MinMaxNorm(0.5, 1.0)(a), npt.NDArray[np.float32])
        assert_type(anyclip.constraints.non_neg(a, legacy=True), npt.NDArray[np.float32])

    def torch_in_torch_out(t: torch.Tensor) -> None:
        assert_type(anyclip.clip_by_norm(t, 1.0), torch.Tensor)
        assert_type(anyclip.global_norm([t, None]), torch.Tensor)
        clipped, norm = anyclip.clip_by_global_norm([t, None], 1.0, nonfinite="skip")
        assert_type(clipped, list[torch.Tensor | None])
        assert_type(norm, torch.Tensor)
        assert_type(anyclip.constraints.unit_norm(t, axis=[1, 2]), torch.Tensor)
        assert_type(anyclip.embedding_lookup(t, t, sparse=True), torch.Tensor)

    def a_training_step_on_torch(model: torch.nn.Module) -> None:
        # the README's first call: a list in, a list of the same type out (no None in, none out)
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert_type(grads, list[torch.Tensor])
        clipped, norm = anyclip.clip_by_global_norm(grads, 1.0)
        assert_type(clipped, list[torch.Tensor])
        assert_type(norm, torch.Tensor)
        for p, g in zip(model.parameters(), clipped, strict=False):
            p.grad = g  # no Optional to narrow first
        assert_type(anyclip.global_norm(grads), torch.Tensor)
        # a tuple of gradients, as torch.autograd.grad returns
        grads_tuple = torch.autograd.grad(torch.zeros(()), list(model.parameters()))
        assert_type(anyclip.clip_by_global_norm(grads_tuple, 1.0)[0], list[torch.Tensor])
        # only None in gives None out
        with_none: list[torch.Tensor | None] = [p.grad for p in model.parameters()]
        assert_type(anyclip.clip_by_global_norm(with_none, 1.0)[0], list[torch.Tensor | None])
        # use_norm keeps the type too
        assert_type(anyclip.clip_by_global_norm(grads, 1.0, use_norm=norm)[1], torch.Tensor)
        # the tree functions: a dict of named gradients keeps its keys and the array type
        named = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        assert_type(named, dict[str, torch.Tensor])
        assert_type(anyclip.tree.global_norm(named), torch.Tensor)
        clipped_named, tree_norm = anyclip.tree.clip_by_global_norm(named, 1.0)
        assert_type(clipped_named, dict[str, torch.Tensor])
        assert_type(tree_norm, torch.Tensor)
        assert_type(anyclip.tree.clip_by_global_norm(grads, 1.0)[0], list[torch.Tensor])
        assert_type(anyclip.tree.global_norm(grads), torch.Tensor)
        assert_type(anyclip.tree.clip_by_norm(named, 1.0, axes=[0]), dict[str, torch.Tensor])
        assert_type(anyclip.tree.clip_by_value(named, -1.0, 1.0), dict[str, torch.Tensor])
        # anyclip.torch: torch's own signatures
        assert_type(anyclip.torch.clip_grad_norm_(model.parameters(), 1.0), torch.Tensor)
        # per-group norms and limits: a dict of norms
        by_group = {"body": list(model.parameters())}
        per_group = anyclip.torch.clip_grad_norm_(None, {"body": None}, groups=by_group)
        assert_type(per_group, dict[Hashable, torch.Tensor])
        assert_type(
            anyclip.torch.get_total_norm(None, groups=by_group), dict[Hashable, torch.Tensor]
        )
        assert_type(anyclip.tree.global_norm(named, groups={"w": "body"}), dict[Any, Any])

    def a_training_step_on_numpy(grads: list[npt.NDArray[np.float32]]) -> None:
        clipped, norm = anyclip.clip_by_global_norm(grads, 1.0)
        assert_type(clipped, list[npt.NDArray[np.float32]])
        assert_type(norm, npt.NDArray[np.float32])
        nested = {"layer": {"w": grads[0]}}  # any other tree: the structure is kept
        assert_type(
            anyclip.tree.clip_by_global_norm(nested, 1.0)[0],
            dict[str, dict[str, npt.NDArray[np.float32]]],
        )

    def an_optax_chain(max_norm: jax.Array) -> None:
        tx = anyclip.optax.clip_by_global_norm(1.0)
        tx = anyclip.optax.clip_by_global_norm(max_norm)
        tx = anyclip.optax.clip_by_global_norm(clip_norm=1.0)
        tx = anyclip.optax.clip_by_global_norm(np.float32(1.0))
        tx = anyclip.optax.clip_by_global_norm(lambda count: 0.5 * count)  # a schedule
        tx = anyclip.optax.clip_by_norm(lambda count: 0.5 * count)
        del tx

    def python_data_in_array_out() -> None:
        # a Python list is converted to an array: the result is not a list
        assert_type(anyclip.clip_by_value([1.0, 2.0], 0.0, 1.5), Array)
        assert_type(anyclip.clip_by_value(3, 0, 1), Array)

    def wrong_arguments(t: torch.Tensor) -> None:
        anyclip.clip_by_global_norm([t], 1.0, nonfinite="ignore")  # type: ignore[call-overload]
        anyclip.norm(t, ord="nuc")  # type: ignore[arg-type]
        anyclip.clip_by_norm("t", 1.0)  # type: ignore[type-var]
        anyclip.optax.clip_by_global_norm("1.0")  # type: ignore[arg-type]
        anyclip.tree.clip_by_norm({"w": t}, 1.0, accumulate_dtype="widest", axes={0})  # type: ignore[arg-type]
        # a list of gradients that may be None does not give a list without None
        maybe: list[torch.Tensor | None] = [t, None]
        clipped: list[torch.Tensor] = anyclip.clip_by_global_norm(maybe, 1.0)[0]  # type: ignore[assignment]
        del clipped
