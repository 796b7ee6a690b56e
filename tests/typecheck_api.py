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
    import numpy as np
    import numpy.typing as npt
    import torch
    from typing_extensions import assert_type

    import anyclip
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

    def python_data_in_array_out() -> None:
        # a Python list is converted to an array: the result is not a list
        assert_type(anyclip.clip_by_value([1.0, 2.0], 0.0, 1.5), Array)
        assert_type(anyclip.clip_by_value(3, 0, 1), Array)

    def wrong_arguments(t: torch.Tensor) -> None:
        anyclip.clip_by_global_norm([t], 1.0, nonfinite="ignore")  # type: ignore[arg-type]
        anyclip.norm(t, ord="nuc")  # type: ignore[arg-type]
        anyclip.clip_by_norm("t", 1.0)  # type: ignore[type-var]
