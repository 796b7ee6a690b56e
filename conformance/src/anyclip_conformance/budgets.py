"""How far each function may be from TensorFlow: one table of ulp budgets.

A budget is counted in ulps of the reference dtype: at each reference value for outputs, at
the gradient scale for gradients (``compare.ulp_distance``). :data:`BUDGETS` maps
``(function, dtype)`` to ``(outputs, gradients)``; ``None`` as the dtype is the function's
default. Why these numbers (docs/tf-reference.md §11 measured a faithful float32 port at
2 / 3 / 3 / 5 ulp):

* ``clip_by_value`` is min/max only: bit-exact everywhere, gradients 0 or ``w`` exactly.
* Integer results (norm ord 1 / inf of ints, clip_by_value) are exact.
* ``clip_by_norm``: one reduction, a sqrt and a division; summation order differs between TF
  (Eigen tree reductions) and each backend by ~1 ulp of the norm, which reaches the output
  through ``t * c / max(n, c)``: 2 ulp measured, 4 allowed.
* ``l2_normalize``: TF's vectorised ``rsqrt`` is itself up to 3 ulp from the correctly rounded
  value (section 0.5), plus the sum: 4 allowed.
* ``global_norm`` / ``clip_by_global_norm`` / ``clip_by_average_norm``: a sum over all tensors,
  sqrt, and (for the clipped list) a scale ``c * min(1/n, 1/c)``: 3 ulp measured, 4 allowed.
* ``norm`` / ``normalize``: p-norms go through ``pow`` twice (TF's pow differs from
  NumPy/torch/JAX by up to 2 ulp, section 0.5): 6.
* float16: TF accumulates half-precision sums partly in float16 while the backends
  accumulate in float32 (or pairwise), so the sum of n squares can be off by up to ~n/2
  half-ulps for the sizes in the catalogue; the rounding of the final result then dominates.
  16 ulp bounds what we observed with a margin.
* bfloat16: TF's ``reduce_sum`` sums in float32 and rounds once, its ``l2_loss`` stays within
  2 ulp of that (docs/index.md, half-precision sums), and anyclip sums bfloat16 in float32 on
  every backend: 2 ulp measured over the whole catalogue (torch, JAX eager and jit), 3
  allowed for outputs. (It was 8 while JAX summed in bfloat16, which hid errors of 4 ulp on
  1,001 elements.) Gradients keep 16.
* float64: the same op counts as float32; differences are the same few ulps.
* Gradients are sums of products whose terms cancel (``(c/n)(w - x (x.w)/n^2)`` for
  clip_by_norm), so they are counted in ulps of the largest magnitude in the reference gradient
  and are a little larger than for outputs.
* The matrix 2-norm (``norm``/``normalize`` with ``ord=2`` and a pair of axes) is the largest
  singular value; TF's SVD (Eigen) and LAPACK/torch/JAX's differ in the last bits: singular
  values are accurate to a few ulp times the matrix size, 7 ulp observed in float64, so
  :data:`SVD_BUDGET` is a floor for those cases.
* Gradients of real models (``data/real_gradients.npz``), :data:`REAL_GRADIENT_BUDGETS`:
  tighter than the catalogue's, because that is where a port is judged. The global norm may be
  1 ulp from TF's (a sum over many arrays in another order), the clipped gradients 3 (the scale
  ``c / n`` carries the norm's ulp into every element, plus the product's own rounding).
"""

from __future__ import annotations

__all__ = ["BUDGETS", "REAL_GRADIENT_BUDGETS", "SVD_BUDGET", "budget", "budget_table_markdown"]

#: ``(function, dtype or None) -> (outputs, gradients)`` in ulps.
BUDGETS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("clip_by_value", None): (0, 0),
    ("clip_by_norm", None): (4, 8),
    ("clip_by_norm", "float16"): (16, 32),
    ("clip_by_norm", "bfloat16"): (3, 16),
    ("global_norm", None): (4, 8),
    ("global_norm", "float16"): (16, 32),
    ("global_norm", "bfloat16"): (3, 16),
    ("clip_by_global_norm", None): (4, 8),
    ("clip_by_global_norm", "float16"): (16, 32),
    ("clip_by_global_norm", "bfloat16"): (3, 16),
    ("clip_by_average_norm", None): (4, 8),
    ("norm", None): (6, 8),
    ("norm", "float16"): (16, 32),
    ("norm", "bfloat16"): (3, 16),
    ("l2_normalize", None): (4, 8),
    ("l2_normalize", "float16"): (16, 32),
    ("l2_normalize", "bfloat16"): (3, 16),
    ("normalize", None): (6, 8),
    ("normalize", "float16"): (16, 32),
    ("normalize", "bfloat16"): (3, 16),
}

#: The floor of every budget for a matrix 2-norm (an SVD), outputs and gradients.
SVD_BUDGET = 16

#: Budgets on the gradients of real models, every dtype: ``function -> ulps``.
REAL_GRADIENT_BUDGETS = {"global_norm": 1, "clip_by_global_norm": 3}


def budget(function: str, dtype: str, *, grad: bool = False, svd: bool = False) -> float:
    """The ulp budget for ``function`` results (or gradients) of ``dtype``.

    >>> budget("clip_by_norm", "float32"), budget("norm", "float16", grad=True)
    (4, 32)
    """
    if dtype.startswith(("int", "uint", "bool")):
        return 0
    base = {"complex64": "float32", "complex128": "float64"}.get(dtype, dtype)
    pair = BUDGETS.get((function, base), BUDGETS[(function, None)])
    value = pair[1] if grad else pair[0]
    return max(SVD_BUDGET, value) if svd else value


def budget_table_markdown() -> str:
    """The output and gradient budgets as a Markdown table."""
    funcs = list(dict.fromkeys(f for f, _ in BUDGETS))
    lines = [
        "| function | dtype | outputs (ulp) | gradients (ulp of max) |",
        "| --- | --- | ---: | ---: |",
    ]
    for f in funcs:
        for dt in ("float16", "bfloat16", "float32", "float64"):
            lines.append(f"| `{f}` | {dt} | {budget(f, dt):g} | {budget(f, dt, grad=True):g} |")
    for f, ulps in REAL_GRADIENT_BUDGETS.items():
        lines.append(f"| `{f}`, gradients of real models | every | {ulps} | - |")
    return "\n".join(lines) + "\n"
