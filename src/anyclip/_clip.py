"""The list functions: ``global_norm`` and ``clip_by_global_norm`` over a list of arrays.

Layer: rules (public functions; :mod:`anyclip` re-exports them). Each function resolves its
namespace once, converts and checks its arguments with :mod:`anyclip._policy`, chooses its
kernels once (:func:`anyclip._kernels.kernels_for`) and runs the formula of
:mod:`anyclip._core`. The work is done by a private twin
(``_clip_by_global_norm(kernels, ...)``) that :func:`anyclip._api.bind` also exposes with
fixed kernels; the public function adds the plain-call fast paths in front of it. The
per-array clippers are in :mod:`anyclip._clip_tensor`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast, overload

from anyclip import _core
from anyclip._compat import (
    dtype_name,
    is_array,
    is_numpy_scalar,
    library,
    namespace,
)
from anyclip._gradients import uses
from anyclip._kernels import (
    GENERIC,
    Kernels,
    kernels_for,
)
from anyclip._kernels._dist import GroupKernels, check_group, group_namespace, zero_partial
from anyclip._keywords import hints_keywords
from anyclip._numerics import quiet
from anyclip._policy import (
    as_operand,
    check_compatible,
    check_meta,
    check_nonfinite,
    finite_number,
    native_order,
)
from anyclip._policy_dtypes import require_kind, resolve_accumulate_dtype
from anyclip._policy_lists import ListNames, as_list, floating_list, real_list
from anyclip._policy_words import (
    FLOATS,
    tf_broadcast,
    tf_cannot_convert,
    tf_incompatible,
    tf_same_dtype,
    tf_words,
)
from anyclip._sparse import (
    dense_operand,
    refuse_sparse_norm,
    values_list,
)
from anyclip._typing import (
    ArrayT,
    DTypeLike,
    Namespace,
    Nonfinite,
    Operand,
)

__all__ = [
    "clip_by_global_norm",
    "global_norm",
    "keras_clip_by_global_norm",
    "keras_global_norm",
]


@hints_keywords
def global_norm(
    t_list: Sequence[ArrayT | None],
    name: str | None = None,
    *,
    accumulate_dtype: DTypeLike = None,
    group: Any = None,
) -> ArrayT:
    """The L2 norm of all arrays in ``t_list`` together, as ``tf.linalg.global_norm``.

    Computes ``sqrt(sum(sum(t * t) / 2 for t in t_list) * 2)``.

    Parameters
    ----------
    t_list : list or tuple of arrays
        Arrays of one real floating dtype; ``None`` entries are skipped. A sparse torch tensor
        or JAX ``BCOO`` array counts through its stored values (a repeated index once per
        copy), as TF counts an ``IndexedSlices``.
    name : str, optional
        Accepted for compatibility with TF and ignored.
    accumulate_dtype : dtype, str or "widest", optional
        Not in TF. Cast every array to this floating dtype before squaring and summing, which
        also lets arrays of different dtypes be mixed; ``"widest"`` picks the widest dtype of
        the arrays (float32 for float16 with bfloat16). ``None`` (default) is TF's behaviour:
        sum in the arrays' own dtype and refuse mixed dtypes.
    group : ProcessGroup, DeviceMesh, sequence of them, axis name or tuple of names, optional
        Not in TF. The devices whose arrays form the global norm together with these, beyond
        what the arrays themselves say: each process sums its own squares, one all-reduce of
        that 0-d partial sum over ``group`` follows (``torch.distributed.all_reduce`` for a
        torch ``ProcessGroup`` or ``DeviceMesh``, over each in turn for a sequence, such as
        pipeline and expert groups; ``jax.lax.psum`` for JAX axis names, inside ``shard_map``
        or ``pmap``). Every process of the group must call. Sharded torch tensors (``DTensor``)
        need no ``group``: they are reduced over their own mesh. See the distributed guide.

    Returns
    -------
    array
        A 0-d array of the arrays' dtype (or ``accumulate_dtype``), on their device. For an
        empty list (or only ``None`` entries) a float32 zero, as TF returns; without any array
        to take a library from, it is a NumPy array.

    Raises
    ------
    TypeError
        If ``t_list`` is not a list or tuple (a lone array, a generator or a dict), its arrays
        are not floating or (without ``accumulate_dtype``) do not share one dtype,
        ``accumulate_dtype`` is not a floating dtype, or ``group`` is not a group of the
        arrays' library.

    See Also
    --------
    tf.linalg.global_norm : The TensorFlow function this mirrors.

    Notes
    -----
    As in TF, squares are summed in the arrays' own dtype (a float16 element of magnitude 256
    or more gives inf), and the gradient at an all-zero input is NaN (the derivative of the
    square root at 0).

    Not in TF: torch tensors may sit on several devices. Each device sums its own squares;
    the partial sums (0-d tensors, never the data) meet on the first array's device, where
    the result is. torch ``DTensor`` inputs (FSDP2, tensor parallel) give a ``Replicate``
    DTensor, equal on every rank, after one all-reduce of a scalar per mesh, never a gather.

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> a = np.array([3.0, 4.0], dtype=np.float32)
    >>> b = np.array([[12.0]], dtype=np.float32)
    >>> anyclip.global_norm([a, None, b])
    array(13., dtype=float32)
    """
    return cast(ArrayT, _global_norm(None, t_list, accumulate_dtype=accumulate_dtype, group=group))


def _global_norm(
    kernels: Kernels | None,
    t_list: Any,
    name: str | None = None,
    *,
    accumulate_dtype: Any = None,
    group: Any = None,
) -> Any:
    """:func:`global_norm` with ``kernels`` (``None``: :func:`kernels_for` chooses)."""
    items, _ = values_list(as_list(t_list))
    xp = namespace(*items, names=ListNames(len(items)))
    if group is not None and all(v is None for v in items):  # joins its group's all-reduce
        xp = group_namespace(group) or xp
    groups = check_group(xp, group)
    values = floating_list(xp, items, mixed_ok=accumulate_dtype is not None)
    return _global_norm_of(kernels, xp, values, accumulate_dtype, groups)[0]


def _global_norm_of(
    kernels: Kernels | None,
    xp: Namespace,
    values: list[Any],
    accumulate_dtype: Any,
    groups: tuple[Any, ...] = (),
    *,
    unhalved: bool = False,
) -> tuple[Any, Kernels]:
    """The global norm of checked ``values`` (arrays or None), and the kernels that took it.

    With ``groups``, the kernels are wrapped in :class:`GroupKernels`, which add one
    all-reduce of the partial sum over them; a process without any array still joins it.
    ``unhalved``: the norm of the summed squares, no ``l2_loss`` half flushed
    (:meth:`Kernels.unhalved`: Keras's).
    """
    arrays = [v for v in values if v is not None]
    dtypes = [] if accumulate_dtype is None else [v.dtype for v in arrays]  # None: not read
    acc = resolve_accumulate_dtype(xp, accumulate_dtype, dtypes)
    if acc is not None and any(v.dtype != acc for v in arrays):
        # no cast copy of every array: the kernels cast one block at a time, where it lives
        k = kernels if kernels is not None else kernels_for(xp, arrays, acc)
        k = k.unhalved() if unhalved else k
        if groups:
            k = GroupKernels(k, library(xp), groups)
        norm = _core.upcast_global_norm(xp, k, arrays, acc)
        return k.replicated(xp, norm, arrays[0]), k
    if not arrays:
        dtype = xp.float32 if acc is None else acc
        k0 = GENERIC if kernels is None else kernels
        if groups:  # every process of the group must join the all-reduce
            grouped = GroupKernels(k0, library(xp), groups)
            total = grouped.reduce(xp, zero_partial(xp, dtype, groups))
            return _core.norm_from_total(xp, grouped, total), grouped
        norm = _core.global_norm(xp, GENERIC, [], dtype, None)
        return norm, k0
    k = kernels_for(xp, arrays) if kernels is None else kernels
    k = k.unhalved() if unhalved else k
    if groups:
        k = GroupKernels(k, library(xp), groups)
    norm = _core.global_norm(xp, k, arrays, arrays[0].dtype, arrays[0])
    return k.replicated(xp, norm, arrays[0]), k


@overload
def clip_by_global_norm(
    t_list: Sequence[ArrayT],
    clip_norm: Operand,
    use_norm: ArrayT | None = None,
    name: str | None = None,
    *,
    accumulate_dtype: DTypeLike = None,
    nonfinite: Nonfinite = "tf",
    group: Any = None,
) -> tuple[list[ArrayT], ArrayT]: ...


@overload
def clip_by_global_norm(
    t_list: Sequence[ArrayT | None],
    clip_norm: Operand,
    use_norm: ArrayT | None = None,
    name: str | None = None,
    *,
    accumulate_dtype: DTypeLike = None,
    nonfinite: Nonfinite = "tf",
    group: Any = None,
) -> tuple[list[ArrayT | None], ArrayT]: ...


@hints_keywords
def clip_by_global_norm(
    t_list: Sequence[ArrayT | None],
    clip_norm: Operand,
    use_norm: ArrayT | None = None,
    name: str | None = None,
    *,
    accumulate_dtype: DTypeLike = None,
    nonfinite: Nonfinite = "tf",
    group: Any = None,
) -> tuple[list[Any], Any]:
    """Scale every array in ``t_list`` by one factor so their global norm is at most ``clip_norm``.

    Mirrors ``tf.clip_by_global_norm``: every array is multiplied by
    ``clip_norm * minimum(1 / use_norm, 1 / clip_norm)``, where ``use_norm`` defaults to
    :func:`global_norm` of ``t_list``.

    Parameters
    ----------
    t_list : list or tuple of arrays
        Arrays of one real floating dtype; ``None`` entries are kept as ``None``. A sparse
        torch tensor or JAX ``BCOO`` array counts and is scaled through its stored values, as
        TF treats an ``IndexedSlices``, and keeps its layout and index arrays.
    clip_norm : number or array
        The largest global norm. An array must have ``use_norm``'s dtype.
    use_norm : array or NumPy scalar, optional
        A precomputed global norm (a 0-d floating array). Its dtype is the dtype of the scale,
        which is then cast to each array's dtype. A NumPy scalar is a value, as in TF: cast
        to the arrays' dtype, and returned as passed.
    name : str, optional
        Accepted for compatibility with TF and ignored.
    accumulate_dtype : dtype, str or "widest", optional
        Not in TF. As in :func:`global_norm`: the dtype the global norm (and so the scale) is
        computed in; with it the arrays may have different floating dtypes, each of which is
        kept. ``None`` (default) is TF's behaviour.
    nonfinite : {"tf", "torch", "skip", "raise"}, optional
        Not in TF. What a non-finite global norm does. ``"tf"`` (default): every output is NaN.
        ``"torch"``: what ``torch.nn.utils.clip_grad_norm_`` gives, the bare factor
        ``c * minimum(1 / norm, 1 / c)``: 0 for an inf norm (finite entries become 0, infinite
        ones NaN), NaN for a NaN norm. ``"skip"``: the arrays are returned unchanged
        (multiplied by exactly 1; on a CUDA GPU a NaN entry comes back as the GPU's
        canonical NaN, with other bits); the returned norm, inf or NaN, is the report
        (``isfinite(norm)`` tells, with no host sync). ``"raise"``: raise
        ``FloatingPointError``; this reads the norm on the host (a device sync; not usable
        under ``jax.jit``).
    group : ProcessGroup, DeviceMesh, sequence of them, axis name or tuple of names, optional
        Not in TF. As in :func:`global_norm`: the processes whose arrays form the global norm
        with these (one all-reduce of a scalar). Unused with ``use_norm``.

    Returns
    -------
    list_clipped : list
        The scaled arrays (always a list, even for a tuple input), ``None`` entries kept.
    global_norm : array
        ``use_norm``, or the computed global norm, unchanged.

    Raises
    ------
    TypeError
        If ``t_list`` is not a list or tuple, its arrays are not floating or (without
        ``accumulate_dtype``) do not share one dtype, ``use_norm`` is neither an array nor a
        NumPy scalar, ``clip_norm`` is an array of another dtype, or ``accumulate_dtype`` is
        not floating.
    ValueError
        If ``clip_norm`` is None, ``clip_norm`` or ``use_norm`` cannot broadcast against each
        other or against every array (a larger one enlarges the outputs, as in TF), or
        ``nonfinite`` is not one of the policies.
    FloatingPointError
        With ``nonfinite="raise"``, if the global norm is inf or NaN.

    See Also
    --------
    tf.clip_by_global_norm : The TensorFlow function this mirrors.

    Notes
    -----
    TF's behaviour is kept on purpose:

    * If the global norm is inf or NaN, **every** output is NaN, finite entries included.
    * There is no shortcut below the threshold: the factor is ``c * (1 / c)``, which is not
      exactly 1 for some ``c`` (41 gives ``0.99999994`` in float32).
    * A negative ``clip_norm`` leaves the arrays unchanged; a negative ``use_norm`` flips their
      signs; ``clip_norm`` 0 on an all-zero input gives NaN.
    * The gradient flows through the global norm; at an all-zero input it is NaN even though
      nothing is clipped. At a norm exactly equal to ``clip_norm`` it is the clipping branch's.

    Not in TF: torch tensors may sit on several devices (the norm as in :func:`global_norm`);
    the factor is sent to each array's device. Sharded torch tensors (``DTensor``) are scaled
    shard by shard and keep their placements.

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> a = np.array([3.0, 4.0], dtype=np.float32)
    >>> b = np.array([[12.0]], dtype=np.float32)
    >>> clipped, norm = anyclip.clip_by_global_norm([a, None, b], 6.5)
    >>> clipped
    [array([1.5, 2. ], dtype=float32), None, array([[6.]], dtype=float32)]
    >>> norm
    array(13., dtype=float32)
    """
    return _clip_by_global_norm(
        None,
        t_list,
        clip_norm,
        use_norm,
        accumulate_dtype=accumulate_dtype,
        nonfinite=nonfinite,
        group=group,
    )


def _clip_by_global_norm(
    kernels: Kernels | None,
    t_list: Any,
    clip_norm: Any,
    use_norm: Any = None,
    name: str | None = None,
    *,
    accumulate_dtype: Any = None,
    nonfinite: Any = "tf",
    group: Any = None,
) -> tuple[list[Any], Any]:
    """:func:`clip_by_global_norm` with ``kernels`` (``None``: :func:`kernels_for` chooses)."""
    return _clip_global(kernels, t_list, clip_norm, use_norm, accumulate_dtype, nonfinite, group)


def _clip_global(
    kernels: Kernels | None,
    t_list: Any,
    clip_norm: Any,
    use_norm: Any,
    accumulate_dtype: Any,
    nonfinite: Any,
    group: Any,
    *,
    unclipped_at_inf: bool = False,
    clip_name: str = "clip_norm",
    cast_clip: bool = False,
) -> tuple[list[Any], Any]:
    """:func:`_clip_by_global_norm`, and for the drop-ins ``unclipped_at_inf``.

    ``clip_name``: the name the caller gave ``clip_norm`` (optax's ``max_norm``), for the
    error messages. ``cast_clip``: an array ``clip_norm`` of another dtype is cast to the
    norm's (optax's drop-in: optax promotes it), not refused as TF does.

    ``unclipped_at_inf``: a ``clip_norm`` of ``+inf`` leaves the arrays unchanged (the optax
    drop-in, as optax's own; see :func:`anyclip._core.global_scale`).
    """
    policy = check_nonfinite(nonfinite)
    items, back = values_list(as_list(t_list))
    clip_norm = dense_operand(clip_norm, clip_name)
    refuse_sparse_norm(use_norm, "use_norm")
    xp = namespace(
        *items, clip_norm, use_norm, names=ListNames(len(items), (clip_name, "use_norm"))
    )
    if group is not None and all(v is None for v in items) and use_norm is None:
        xp = group_namespace(group) or xp  # no array here: still joins the all-reduce
    groups = check_group(xp, group)
    bools: list[int] = []
    given = use_norm  # a NumPy scalar is returned as passed, as TF returns it
    if use_norm is None:
        mixed_ok = accumulate_dtype is not None
        values = floating_list(xp, items, mixed_ok=mixed_ok, beside=(clip_norm,))
        # each array's two uses (scaled, squared) in the order eager torch's backward adds
        # their gradients (under torch.compile each sum rounded as eager's)
        pairs = [(None, None) if v is None else uses(xp, v, 2) for v in values]
        values = [scaled for scaled, _ in pairs]
        squared = [s for _, s in pairs]
        use_norm, k = _global_norm_of(kernels, xp, squared, accumulate_dtype, groups)
    elif not is_array(use_norm) and not is_numpy_scalar(use_norm):
        kind = type(use_norm).__name__
        msg = (
            "`use_norm` must be a 0-d floating array (the precomputed global norm), "
            f"got {kind}; wrap it in an array of the lists' dtype"
            f"{tf_words(f'{kind!r} object has no attribute ' + repr('dtype'))}"  # TF's
        )
        raise TypeError(msg)
    elif is_numpy_scalar(use_norm):  # a value in TF: cast to the lists' dtype, returned as is
        values, bools = real_list(xp, items, beside=(clip_norm,))
        present = [v for v in values if v is not None]
        if not present:
            return back([None] * len(values)), use_norm
        given, use_norm = use_norm, as_operand(use_norm, xp, present[0], "use_norm")
        k = kernels if kernels is not None else kernels_for(xp, present)
    else:
        values, bools = real_list(xp, items, beside=(use_norm, clip_norm))
        use_norm = native_order(use_norm)
        for i, v in enumerate(values):
            if v is not None:
                check_meta(use_norm, v, "use_norm", f"t_list[{i}]")
        require_kind(xp, use_norm, "use_norm", ("real",), FLOATS, _tf_use_norm_kind)
        present = [v for v in values if v is not None]
        k = kernels if kernels is not None else kernels_for(xp, present or [use_norm])
    # the norm's uses (returned; the two sides of TF's ``norm - norm`` and the reciprocal's),
    # their gradients added in the order eager torch's backward adds them
    use_norm, *others = uses(xp, use_norm, 4)
    norm_uses = (k.local(xp, others[0]), k.local(xp, others[1]), k.local(xp, others[2]))
    norm = k.local(xp, others[2])  # a replicated DTensor's value on this rank
    c = as_operand(clip_norm, xp, norm, clip_name, tf=tf_same_dtype, cast_arrays=cast_clip)
    if is_array(c):
        c = k.local(xp, c)
    _check_scale_shapes(values, tuple(c.shape), tuple(norm.shape), clip_name)
    if policy == "raise":
        with quiet(xp):  # a lazy backend (dask) computes the norm here: no inf/NaN warnings
            finite = bool(xp.all(xp.isfinite(norm)))  # host sync
            shown = None if finite else float(norm)
        if not finite:
            msg = f"the global norm is not finite ({shown}); `nonfinite` is 'raise'"
            raise FloatingPointError(msg)
    # a Python number that converts to a finite value needs no `where` (checked here, no sync)
    at_inf = unclipped_at_inf and not finite_number(clip_norm, xp, norm.dtype)
    clipped = _core.clip_by_global_norm(
        xp, k, values, c, norm, policy, unclipped_at_inf=at_inf, bools=bools, norm_uses=norm_uses
    )
    return back(clipped), given if is_numpy_scalar(given) else use_norm


def keras_global_norm(t_list: Any, accumulate_dtype: Any = "widest") -> Any:
    """Keras 3's global norm of ``t_list`` (:func:`anyclip._core.keras_global_norm`).

    The norm of the Keras adapters' ``global_clipnorm``: arrays of one float16 or bfloat16
    dtype sum their squares unhalved, as Keras's ``sum(square(v))``; every other list is
    :func:`global_norm`'s (the same bits in float32 and float64), with its
    ``accumulate_dtype``, of the kernels' :meth:`~anyclip._kernels.Kernels.unhalved` (no
    square left out where TF's ``l2_loss`` would flush its half).
    """
    items, _ = values_list(as_list(t_list))
    xp = namespace(*items, names=ListNames(len(items)))
    values = floating_list(xp, items, mixed_ok=accumulate_dtype is not None)
    return _keras_norm_of(xp, values, accumulate_dtype)[0]


def _keras_norm_of(xp: Namespace, values: list[Any], accumulate_dtype: Any) -> tuple[Any, Kernels]:
    """:func:`keras_global_norm` of checked ``values``, and the kernels that took it."""
    arrays = [v for v in values if v is not None]
    dtype = arrays[0].dtype if arrays else None
    acc = resolve_accumulate_dtype(xp, accumulate_dtype, [v.dtype for v in arrays])
    if (
        dtype is None
        or dtype_name(dtype) not in _core.KERAS_UNHALVED
        or any(v.dtype != dtype for v in arrays)
        or (acc is not None and acc != dtype)
    ):
        # Keras's sum(square(v)): TF's l2_loss would flush the halves of some squares
        return _global_norm_of(None, xp, values, accumulate_dtype, unhalved=True)
    k = kernels_for(xp, arrays)
    return _core.keras_global_norm(xp, k, arrays), k


def keras_clip_by_global_norm(t_list: Any, clip_norm: Any) -> list[Any]:
    """Keras 3's ``clip_by_global_norm`` of ``t_list`` (arrays or None) at ``clip_norm``.

    The norm of :func:`keras_global_norm` (``accumulate_dtype="widest"``, as the adapters'),
    the factor of :func:`anyclip._core.keras_global_scale` (``clip_norm`` a Python number, or
    an array of the norm's dtype), every array multiplied by it in its own dtype.
    """
    items, back = values_list(as_list(t_list))
    xp = namespace(*items, names=ListNames(len(items)))
    values = floating_list(xp, items, mixed_ok=True)
    norm, k = _keras_norm_of(xp, values, "widest")
    norm = k.local(xp, norm)
    scale = _core.keras_global_scale(xp, clip_norm, norm, kernels=k)
    return back(k.scale(xp, values, scale))


def _tf_use_norm_kind(dtype: Any) -> str | None:
    """TF's words for a ``use_norm`` array of a refused dtype (TF computes ``1.0 / use_norm``)."""
    return tf_cannot_convert(1.0, dtype) if "int" in dtype_name(dtype) else None


def _check_scale_shapes(
    values: list[Any], c: tuple[int, ...], n: tuple[int, ...], clip_name: str = "clip_norm"
) -> None:
    """``ValueError`` unless TF's scale ``c * minimum(1 / n, 1 / c)`` can multiply each array.

    TF multiplies each array by the scale, of any shape (a larger one enlarges the outputs);
    what cannot broadcast fails here, with TF's words for the op that meets it: ``Minimum``
    (``use_norm`` against ``clip_norm``), then ``Mul`` (each array against the scale).
    """
    scale = tf_broadcast(n, c)
    if scale is None:
        msg = (
            f"`{clip_name}` of shape {c} must broadcast against the shape {n} of `use_norm`; "
            f"reshape one of them (a size-1 axis broadcasts){tf_words(tf_incompatible(n, c))}"
        )
        raise ValueError(msg)
    if not scale:  # the usual 0-d scale multiplies anything
        return
    for i, v in enumerate(values):
        if v is None or tf_broadcast(tuple(v.shape), scale) is not None:
            continue
        shape = tuple(v.shape)
        words = tf_incompatible(shape, scale)
        # One of them cannot broadcast against the array (if both could, so could the scale).
        check_compatible(c, shape, clip_name, f"t_list[{i}]", tf=words)
        check_compatible(n, shape, "use_norm", f"t_list[{i}]", tf=words)
