"""TF's clippers and Keras's optimizer clipping options as optax ``GradientTransformation``s.

Layer: public adapter; :mod:`anyclip.optax` re-exports the names in ``__all__``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike

from anyclip import _clip, _clip_tensor, tree
from anyclip._compat import imported, is_array, namespace
from anyclip._kernels._dist import check_group
from anyclip._keywords import hints_keywords
from anyclip._policy import check_nonfinite, check_operand, keras_option
from anyclip._policy_axes import normalize_axes
from anyclip._policy_dtypes import resolve_accumulate_dtype
from anyclip._typing import DTypeLike, Nonfinite
from anyclip.optax._common import _norm_dtype
from anyclip.optax._scheduled import (
    keras_on_device,
    scheduled_clip_by_norm,
    scheduled_global_norm,
    scheduled_keras,
)

__all__ = [
    "ClipByGlobalNormState",
    "clip_by_global_norm",
    "clip_by_norm",
    "clip",
    "clip_by_value",
    "keras_clipping",
]


class ClipByGlobalNormState(NamedTuple):
    """State of ``clip_by_global_norm(..., norm_in_state=True)``: the last pre-clip norm.

    Its dtype is fixed at ``init`` (a state's dtypes must not change between steps under
    ``jax.jit`` and ``lax.scan``): float32, or float64 when the parameters' norm dtype is
    float64. A float16 or bfloat16 norm is held exactly, and a float32 norm too, whatever
    dtype the parameters had at ``init`` (float16 parameters do not turn a norm of 1e6 into
    inf).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from anyclip.optax import ClipByGlobalNormState
    >>> ClipByGlobalNormState(jnp.float32(5.0)).global_norm
    Array(5., dtype=float32)
    """

    global_norm: jax.Array


def _accumulate_dtype(value: Any, single: str | None = None) -> None:
    """``accumulate_dtype`` checked at construction, as the functions check it at the update."""
    resolve_accumulate_dtype(namespace(jnp.zeros(0)), value, [jnp.float32], single=single)


def _check_axes(axes: Any) -> None:
    """``axes``' type checked at construction (their range needs the updates' rank)."""
    if axes is not None:
        normalize_axes(axes, 1 << 30, "axes")  # any rank: types only


def _max_norm(max_norm: Any, clip_norm: Any) -> tuple[Any, str]:
    """The largest norm and the name the caller gave it (``max_norm`` or ``clip_norm``)."""
    if max_norm is not None and clip_norm is not None:
        msg = (
            "`max_norm` (optax's name) and `clip_norm` (TF's) are the same argument; pass one, "
            f"got max_norm={max_norm!r} and clip_norm={clip_norm!r}"
        )
        raise TypeError(msg)
    if max_norm is None and clip_norm is None:
        msg = "clip_by_global_norm() needs the largest norm: pass `max_norm` (or `clip_norm`)"
        raise TypeError(msg)
    name = "max_norm" if clip_norm is None else "clip_norm"
    value = max_norm if clip_norm is None else clip_norm
    if not callable(value):  # a schedule is called at each update
        check_operand(value, name)
    return value, name


@hints_keywords
def clip_by_global_norm(
    max_norm: ArrayLike | Callable[[jax.Array], Any] | None = None,
    *,
    clip_norm: ArrayLike | Callable[[jax.Array], Any] | None = None,
    accumulate_dtype: DTypeLike = "widest",
    nonfinite: Nonfinite = "tf",
    norm_in_state: bool = False,
    group: str | tuple[str, ...] | None = None,
) -> optax.GradientTransformation:
    """Clip the updates by their global norm with TF's formula; optax's signature and state.

    Every update is multiplied by ``max_norm * minimum(1 / norm, 1 / max_norm)``
    (:func:`anyclip.tree.clip_by_global_norm`), except for ``max_norm=inf``: then the updates
    are returned unchanged, bit for bit, as optax's (TF's formula gives ``inf * 0 = NaN``),
    whether ``max_norm`` is a Python float or an array, under ``jax.jit`` too (a ``where``, no
    Python ``if`` on the array). A non-finite global norm makes every update NaN (TF's rule)
    unless ``nonfinite="skip"``; optax's division gives NaN only where an update is inf or NaN
    and zeros elsewhere when the norm is inf (float16 updates whose norm overflows become
    zeros), NaN everywhere when it is NaN, and so does ``nonfinite="torch"``.

    Parameters
    ----------
    max_norm : float, array or callable
        The largest global norm (optax's name, first positional as in
        ``optax.clip_by_global_norm``). ``inf`` leaves the updates unchanged, as optax's. An
        array of another dtype is cast to the norm's, as optax takes it (TF would refuse it).
        A callable is a schedule (an optax schedule, or any function of the step count
        returning a 0-d value): the state then holds the count
        (:class:`ScheduledClipState`) and the value is taken on device at each update, cast
        to the norm's dtype; at 0 the factor is TF's, 0 for a finite non-zero norm (the
        updates become zeros) and NaN for a zero norm.
    clip_norm : float, array or callable, optional
        TF's name for ``max_norm``; pass one of the two.
    accumulate_dtype : dtype, str, "widest" or None, optional
        As in :func:`anyclip.tree.global_norm`.
    nonfinite : {"tf", "torch", "skip"}, optional
        What an inf or NaN global norm does (see :func:`anyclip.clip_by_global_norm`);
        ``"raise"`` reads the norm on the host and does not work under ``jax.jit``.
    norm_in_state : bool, optional
        ``False`` (default): the state is ``optax.EmptyState()``, the state
        ``optax.clip_by_global_norm`` has, so a chain keeps its checkpoint structure when one
        replaces the other. ``True``: the state is a :class:`ClipByGlobalNormState` holding
        the last pre-clip norm, for logging (a different structure: old checkpoints of the
        chain no longer load into it).
    group : str or tuple of str, optional
        Inside ``shard_map`` or ``pmap``: the axis name(s) over which the updates are split;
        the norm is then the global one (one ``jax.lax.psum`` of a scalar). Under ``jit``
        with sharded arrays no ``group`` is needed.

    Returns
    -------
    optax.GradientTransformation
        Its state is ``optax.EmptyState()``, or with ``norm_in_state=True`` a
        :class:`ClipByGlobalNormState` holding the last pre-clip norm, in float32 (float64
        for float64 parameters), whatever the updates' dtype. With a schedule, a
        :class:`ScheduledClipState` (the count, and the norm with ``norm_in_state=True``).

    Raises
    ------
    TypeError
        If neither or both of ``max_norm`` and ``clip_norm`` are given, if the one given is
        not a real number, a list of them or an array, if ``accumulate_dtype`` is not a
        floating dtype, or ``group`` not axis names (all checked here, not at the first
        update; the message names the argument as the caller wrote it).
    ValueError
        If ``max_norm`` is None, or ``nonfinite`` is not one of the policies.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> tx = anyclip.optax.clip_by_global_norm(max_norm=6.5)
    >>> f32 = jnp.float32
    >>> updates = [jnp.array([3.0, 4.0], dtype=f32), jnp.array([[12.0]], dtype=f32)]
    >>> clipped, state = tx.update(updates, tx.init(updates))
    >>> clipped
    [Array([1.5, 2. ], dtype=float32), Array([[6.]], dtype=float32)]

    A warm-up of the threshold, from 0 to 6.5 over two steps (an optax schedule):

    >>> import optax
    >>> tx = anyclip.optax.clip_by_global_norm(optax.linear_schedule(0.0, 6.5, 2))
    >>> state = tx.init(updates)
    >>> clipped, state = tx.update(updates, state)  # max_norm 0: zeros, as TF
    >>> clipped[0], state.count
    (Array([0., 0.], dtype=float32), Array(1, dtype=int32))
    >>> tx.update(updates, state)[0][0]  # max_norm 3.25
    Array([0.75, 1.  ], dtype=float32)
    """
    c, c_name = _max_norm(max_norm, clip_norm)
    c = _host_to_jax(c)
    policy = check_nonfinite(nonfinite)
    _accumulate_dtype(accumulate_dtype)
    check_group(namespace(jnp.zeros(0)), group)  # axis names, checked before any update
    if callable(c):  # a schedule: a count in the state
        return scheduled_global_norm(c, accumulate_dtype, policy, norm_in_state, group)

    def clip(updates: Any) -> tuple[Any, Any]:
        leaves, unflatten = tree.flatten(updates)
        clipped, norm = _clip._clip_global(
            None,
            leaves,
            c,
            None,
            accumulate_dtype,
            policy,
            group,
            unclipped_at_inf=True,  # max_norm=inf: unchanged, as optax's
            clip_name=c_name,
            cast_clip=True,  # an array of another dtype, as optax takes it
        )
        return unflatten(clipped), norm

    if not norm_in_state:
        return _stateless(lambda u: clip(u)[0])

    def init_fn(params: Any) -> ClipByGlobalNormState:
        # at least float32: the updates may be wider than the parameters seen here
        dtype = jnp.promote_types(_norm_dtype(params, accumulate_dtype), jnp.float32)
        return ClipByGlobalNormState(jnp.zeros((), dtype))

    def update_fn(
        updates: Any, state: ClipByGlobalNormState, params: Any = None
    ) -> tuple[Any, ClipByGlobalNormState]:
        del params
        clipped, norm = clip(updates)
        return clipped, ClipByGlobalNormState(norm.astype(state.global_norm.dtype))

    return optax.GradientTransformation(init_fn, update_fn)


def _stateless(fn: Any) -> optax.GradientTransformation:
    def update_fn(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        del params
        return fn(updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


@hints_keywords
def clip_by_norm(
    clip_norm: float | Callable[[jax.Array], Any], axes: Any = None, *, accumulate_dtype: Any = None
) -> optax.GradientTransformation:
    """Clip every update leaf to norm ``clip_norm`` over ``axes`` (TF's ``clip_by_norm``).

    ``clip_norm`` may be a schedule (a function of the step count, as optax's schedules):
    the state is then a :class:`ScheduledClipState` holding the count, and the value is
    taken on device at each update (TF's formula at every value: 0 gives zeros for a
    non-zero leaf); with a number the state is ``optax.EmptyState()``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> tx = anyclip.optax.clip_by_norm(1.0)
    >>> tx.update([jnp.array([3.0, 4.0], dtype=jnp.float32)], tx.init(None))[0]
    [Array([0.6, 0.8], dtype=float32)]
    """
    _check_axes(axes)
    _accumulate_dtype(accumulate_dtype, single="clip_by_norm")
    if callable(clip_norm):  # a schedule: a count in the state
        return scheduled_clip_by_norm(clip_norm, axes, accumulate_dtype)
    check_operand(clip_norm, "clip_norm")
    return _stateless(
        lambda u: tree.clip_by_norm(u, clip_norm, axes, accumulate_dtype=accumulate_dtype)
    )


@hints_keywords
def clip_by_value(clip_value_min: float, clip_value_max: float) -> optax.GradientTransformation:
    """Clip every update leaf to ``[clip_value_min, clip_value_max]`` (TF's ``clip_by_value``).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> tx = anyclip.optax.clip_by_value(6.0, 4.0)  # min > max: min wins, as in TF
    >>> tx.update([jnp.array([0.0, 5.0, 10.0], dtype=jnp.float32)], tx.init(None))[0]
    [Array([6., 6., 6.], dtype=float32)]
    """
    check_operand(clip_value_min, "clip_value_min")
    check_operand(clip_value_max, "clip_value_max")
    return _stateless(lambda u: tree.clip_by_value(u, clip_value_min, clip_value_max))


@hints_keywords
def clip(max_delta: float) -> optax.GradientTransformation:
    """``optax.clip``'s signature: every update leaf to ``[-max_delta, max_delta]``, as TF.

    TF's ``clip_by_value(u, -max_delta, max_delta)`` (the upper bound first); the same values
    as ``optax.clip`` for ``max_delta >= 0``. As ``optax.clip``, it takes a number or an array
    (an array of another dtype is cast to each update's, where TF would refuse it); anything
    else (a string, None, a list, a complex number) is refused here, not at the first update.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> tx = anyclip.optax.clip(0.5)
    >>> tx.update([jnp.array([-2.0, 0.25, 3.0], dtype=jnp.float32)], tx.init(None))[0]
    [Array([-0.5 ,  0.25,  0.5 ], dtype=float32)]
    """
    check_operand(max_delta, "max_delta", scalar=True)
    max_delta = _host_to_jax(max_delta)

    def clip_leaf(g: Any) -> Any:
        d = _like(max_delta, g)
        return _clip_tensor.clip_by_value(g, -d, d)

    return _stateless(lambda u: tree.map_leaves(clip_leaf, u))


def _host_to_jax(value: Any) -> Any:
    """A NumPy array threshold as a JAX array (optax takes one: ``jnp`` converts it), else as is.

    Converted once, when the transformation is made; the updates' library is JAX, and
    anyclip's functions take arguments of the input's own library only.
    """
    np = imported("numpy")
    if np is not None and isinstance(value, np.ndarray):
        return jnp.asarray(value)
    return value


def _like(value: Any, leaf: Any) -> Any:
    """An array ``value`` in ``leaf``'s dtype, as optax's drop-ins promote it (TF refuses)."""
    if is_array(value) and value.dtype != leaf.dtype:
        return value.astype(leaf.dtype)
    return value


def _is_jax_array(value: Any) -> bool:
    """Whether ``value`` is a JAX array or tracer (read on device, not with ``float()``)."""
    return isinstance(value, jax.Array)


def _keras_array(name: str, value: Any) -> Any:
    """A Keras option given as a JAX array, checked: a real 0-d array (ints as float32)."""
    if value.ndim != 0 or not jnp.issubdtype(value.dtype, jnp.number):
        msg = (
            f"`{name}` must be a number, a 0-d real array or None (as in Keras), got an array "
            f"of shape {tuple(value.shape)} and dtype {value.dtype}; pass one real value"
        )
        raise TypeError(msg)
    if jnp.issubdtype(value.dtype, jnp.complexfloating):
        msg = f"`{name}` must be real (as in Keras), got an array of dtype {value.dtype}"
        raise TypeError(msg)
    if not jnp.issubdtype(value.dtype, jnp.floating):
        return value.astype(jnp.float32)
    return value


def _keras_global(updates: Any, clip_norm: float) -> Any:
    """Keras 3's ``clip_by_global_norm`` of the updates' leaves (a pytree) at ``clip_norm``."""
    leaves, unflatten = tree.flatten(updates)
    return unflatten(_clip.keras_clip_by_global_norm(leaves, clip_norm))


@hints_keywords
def keras_clipping(
    *,
    clipnorm: float | jax.Array | Callable[[jax.Array], Any] | None = None,
    clipvalue: float | jax.Array | None = None,
    global_clipnorm: float | jax.Array | Callable[[jax.Array], Any] | None = None,
) -> optax.GradientTransformation:
    """Keras's optimizer clipping (``clipnorm``, ``clipvalue``, ``global_clipnorm``) for optax.

    Put it first in the chain: ``optax.chain(keras_clipping(clipnorm=1.0), optax.adam(1e-3))``
    is Keras's ``Adam(1e-3, clipnorm=1.0)``. As ``keras.optimizers.Optimizer`` (Keras 3,
    TF 2.21) clips before its update: ``clipnorm`` is ``tf.clip_by_norm`` on each leaf,
    ``global_clipnorm`` is Keras's own ``clip_by_global_norm`` over all leaves (not
    ``tf.clip_by_global_norm``: the norm ``sqrt(sum(stack([sum(square(u))])))``, without
    ``l2_loss``'s halved float16 squares, and ``1.0 / global_clipnorm`` computed in Python,
    rounded to the updates' dtype, so an unclipped step is multiplied by
    ``float32(c) * float32(1 / c)``, 0.99999994 for ``c = 2.3``, as Keras's; a scheduled
    value is divided in the norm's dtype), ``clipvalue`` is ``clip(u, -clipvalue, clipvalue)``.

    Parameters
    ----------
    clipnorm, clipvalue, global_clipnorm : float, 0-d array or callable, optional
        Keras's options, with its meaning: at most one may be set, and one that is 0 or
        negative clips nothing. ``clipnorm=inf`` or ``global_clipnorm=inf`` makes every
        update NaN, as Keras 3 (TF 2.21) does (TF's factor ``inf * 0``), unlike
        :func:`clip_by_global_norm` with ``max_norm=inf``, which follows optax.
        ``clipnorm`` and ``global_clipnorm`` may be schedules (functions of the step
        count): Keras's rule is then applied to the value at each step, on device (0 or
        less clips nothing). A JAX 0-d array (as ``optax.inject_hyperparams`` passes the
        option, a tracer under ``jax.jit``) is taken on device too, as a scheduled value,
        with a stateless transformation (``optax.EmptyState()``).

    Returns
    -------
    optax.GradientTransformation
        Stateless (``optax.EmptyState()``); with a schedule, a :class:`ScheduledClipState`.

    Raises
    ------
    ValueError
        If more than one option is set (Keras's message).
    TypeError
        If an option is not a number, a real 0-d array or (``clipnorm``,
        ``global_clipnorm``) a callable.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import anyclip.optax
    >>> tx = anyclip.optax.keras_clipping(global_clipnorm=6.5)
    >>> f32 = jnp.float32
    >>> updates = [jnp.array([3.0, 4.0], dtype=f32), jnp.array([[12.0]], dtype=f32)]
    >>> tx.update(updates, tx.init(updates))[0]
    [Array([1.5, 2. ], dtype=float32), Array([[6.]], dtype=float32)]
    """
    scheduled = [
        (name, v)
        for name, v in (("clipnorm", clipnorm), ("global_clipnorm", global_clipnorm))
        if callable(v)
    ]
    options = (clipnorm, clipvalue, global_clipnorm)
    on_device = [
        (name, _keras_array(name, v))
        for name, v in zip(("clipnorm", "clipvalue", "global_clipnorm"), options, strict=True)
        if _is_jax_array(v)
    ]
    if scheduled or on_device:  # Keras's checks (one option only), a number in their place
        stand_ins = (1.0 if callable(v) or _is_jax_array(v) else v for v in options)
        keras_option(*stand_ins, shown=options)
        if scheduled:
            return scheduled_keras(*scheduled[0])
        name, c = on_device[0]
        return _stateless(lambda u: keras_on_device(name, c, u))
    option = keras_option(clipnorm, clipvalue, global_clipnorm)
    if option is None:
        return _stateless(lambda u: u)
    name, value = option
    if name == "clipnorm":
        return clip_by_norm(value)
    if name == "global_clipnorm":
        return _stateless(lambda u: _keras_global(u, value))
    return clip(value)
