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

from typing import NamedTuple

__all__ = [
    "BUDGETS",
    "GPU_BACKENDS",
    "GPU_DIFFERENCES",
    "REAL_GRADIENT_BUDGETS",
    "SVD_BUDGET",
    "GpuDifference",
    "budget",
    "budget_table_markdown",
    "gpu_budget",
    "gpu_differs",
]

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


# ---------------------------------------------------------------------------- GPU numerics
#: The backends on a GPU: their reductions, math functions and compiled kernels are the
#: device's, where TF 2.21's reference data come from its CPU kernels.
GPU_BACKENDS = frozenset({"torch-cuda", "jax-gpu", "cupy"})


class GpuDifference(NamedTuple):
    """A way in which GPU backends round otherwise than TF's CPU kernels, and cannot help it.

    ``ulps``: backend (or ``backend/dtype`` where only that dtype was measured) -> ulps added
    to the CPU budget of a check that meets it (a backend not listed has none); ``reason``:
    the cause and what was measured (docs/conformance-gpu.md).
    """

    ulps: dict[str, float]
    reason: str


#: Every GPU difference that anyclip's tests allow, in one place: the tests ask
#: :func:`gpu_budget` or :func:`gpu_differs` by name, so a CPU backend's budget never changes.
GPU_DIFFERENCES: dict[str, GpuDifference] = {
    "xla-gpu-float32": GpuDifference(
        {"jax-gpu/float32": 1},
        "XLA:GPU divides float32 with PTX div.full.f32, which is not correctly rounded (1 ULP "
        "off on about a quarter of random pairs: openxla/xla#37181, a / a != 1), and its float32 "
        "sqrt and rsqrt are not correctly rounded either; TF's CPU kernels are. Run 3 (an H200, "
        "JAX 0.11.2): 1 ULP beyond the CPU budget: per_example_clip's weights, TF-style norms "
        "of 20 leaves, the optax adapters under jit (1 > 0); clip_by_average_norm 2-D, "
        "l2_normalize under jit, the optax clip_by_norm schedule (3 > 2)",
    ),
    "xla-gpu-float32-products": GpuDifference(
        {"jax-gpu/float32": 2},
        "xla-gpu-float32's factors (1 ULP off through XLA:GPU's float32 division and sqrt), "
        "each multiplied into a value and the products summed: the sums carry up to 2 ULP. Run "
        "4 (an H200, JAX 0.11.2): per_example_clip's tf-style bias sums 2 ULP from TF's",
    ),
    "device-sum-order": GpuDifference(
        {"torch-cuda": 1, "jax-gpu": 1, "cupy": 1},
        "a GPU reduction adds in its own order (blocks of threads), not Eigen's CPU tree: a "
        "sum 1 ULP from TF's carries into every scaled value. Run 3 (an H200): 1 ULP beyond the "
        "CPU budget: the clipped gradients of the PTB LSTM (ptb_lstm/step2, clip_by_global_norm, "
        "4 > 3, all three backends, the sparse embedding route on torch-cuda too), timm's "
        "adaptive clip of a float64 3x2x2x3x2 leaf with norm_type 1 on CuPy (5 > 4)",
    ),
    "float64-long-sums": GpuDifference(
        {"torch-cuda": 3, "jax-gpu": 3, "cupy": 3},
        "float64 sums of squares are the device's reductions (torch's vector_norm rows, "
        "XLA:GPU's tree, CuPy's), not TF's CPU order, which the CPU kernels reproduce on the "
        "host; they land near the exact sum, so a long sum may be as far from TF as the exact "
        "value is, plus these ulps for the route's own roundings (tests/test_long_sums.py). "
        "Measured at 1.7/1000: torch-cuda 4 ULP from TF (run 1), CuPy 5 (run 3)",
    ),
    "float32-global-norm-order": GpuDifference(
        {"torch-cuda": 0, "jax-gpu": 0, "cupy": 0},
        "TF's order of the float32 global norm (Eigen's tree, which the CPU kernels follow) is "
        "not taken on a GPU: the device's sum lands near the exact value instead. Run 3 (an "
        "H200): 1e5 values of +-1.7 gave 537.5872 (torch-cuda, CuPy) and 537.58716 (jax-gpu), "
        "11 and 12 ULP from TF 2.21's 537.5879, within 1 ULP of the exact 537.58722",
    ),
    "inductor-cuda-float32": GpuDifference(
        {"torch-cuda/float32": 1},
        "under torch.compile, Inductor generates Triton kernels for CUDA, whose float32 "
        "division and square root are not the correctly rounded ones TF's CPU kernels use "
        "(Triton's default precision). Run 3 (an H200, torch 2.11): per_example_clip's "
        "weights under fullgraph compile 1 ULP from TF's (1 > 0); eager torch-cuda gave TF's",
    ),
    "device-rsqrt": GpuDifference(
        {"jax-gpu/float32": 0},
        "the gradient of a one-element l2_normalize (and clip_by_average_norm) is the "
        "difference of two terms that TF's CPU rsqrt makes cancel exactly; the device's rsqrt "
        "(CUDA's rsqrtf/rsqrt, XLA:GPU's) rounds otherwise, and the terms leave a residue of "
        "one ULP of the terms. Run 3 (an H200): residues of 2**-37 .. 2**-18 in float32 on "
        "torch-cuda and jax-gpu, 2**-65 .. 2**-46 in float64 on torch-cuda, where TF gives "
        "exactly 0 (jax-gpu's float64 gave TF's zeros). torch-cuda no longer: anyclip takes "
        "sqrt then reciprocal off the CPU (anyclip._numerics.torch_rsqrt), both correctly "
        "rounded on CUDA; XLA:GPU's float32 division is not (xla-gpu-float32)",
    ),
}


def _declared(difference: str, backend: str, dtype: str | None) -> float | None:
    ulps = GPU_DIFFERENCES[difference].ulps
    if backend in ulps:
        return ulps[backend]
    return None if dtype is None else ulps.get(f"{backend}/{dtype}")


def gpu_budget(difference: str, backend: str, ulp: float, dtype: str | None = None) -> float:
    """``ulp``, plus what :data:`GPU_DIFFERENCES` allows ``backend`` (and ``dtype``).

    >>> gpu_budget("xla-gpu-float32", "jax-gpu", 2, "float32")
    3
    >>> gpu_budget("xla-gpu-float32", "jax-gpu", 2, "float64")
    2
    >>> gpu_budget("device-sum-order", "jax", 3)
    3
    """
    return ulp + (_declared(difference, backend, dtype) or 0)


def gpu_differs(difference: str, backend: str, dtype: str | None = None) -> bool:
    """Whether :data:`GPU_DIFFERENCES` declares ``difference`` for ``backend`` (and ``dtype``).

    >>> gpu_differs("device-rsqrt", "jax-gpu", "float32")
    True
    >>> gpu_differs("device-rsqrt", "jax-gpu", "float64"), gpu_differs("device-rsqrt", "torch")
    (False, False)
    """
    return _declared(difference, backend, dtype) is not None
