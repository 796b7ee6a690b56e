"""``tf.nn.embedding_lookup`` with ``max_norm``: rows of a table, each clipped by TF's rule.

A list ``params`` is a sharded table, read by TF's "div" partition strategy
(:func:`_partitioned`: each shard gathered once for all ids, the rows selected with ``where``);
a tuple is one table, its items stacked (:func:`_stacked`), as TF converts it.

Layer: public. :func:`embedding_lookup` checks and converts its arguments with
:mod:`anyclip._policy`, gathers the rows with :func:`_take_rows` (the one backend branch:
torch's ``embedding`` for its sparse gradient and its index check, JAX's ``take`` with a fill
for out-of-range ids, the standard ``take`` elsewhere) and clips them with
:func:`anyclip._core.clip_by_norm`, the formula of :func:`anyclip.clip_by_norm`, over each row's
axes, as TF 2.21's ``embedding_ops._clip`` does.
"""

from __future__ import annotations

import math
from typing import Any, cast

from anyclip import _core
from anyclip._clip_tensor import _clip_norm_operand
from anyclip._compat import dtype_name, is_array, library, namespace
from anyclip._kernels import kernels_for
from anyclip._keywords import hints_keywords
from anyclip._numerics import constant
from anyclip._policy import as_input
from anyclip._policy_dtypes import dtype_kind, require_kind
from anyclip._policy_words import FLOATS, tf_attr, tf_expected, tf_type, tf_words
from anyclip._sparse import dense_operand
from anyclip._typing import ArrayT, Namespace, Operand, PythonData

__all__ = ["embedding_lookup"]

#: TF's words for an empty list of shards, and for shards of different row shapes.
TF_EMPTY = "Length of params is currently 0. Need at least one param."
TF_STITCH = "Need data[0].shape[1:] = data[1].shape[1:]"
#: TF's words for a tuple of arrays of different shapes (its ``Pack`` of the tuple).
TF_PACK = (
    "Shapes of all inputs must match: values[0].shape = {first} != values[{i}].shape = {other}"
)

#: The ids dtypes TF's ``GatherV2`` takes (``Tindices``).
_ID_DTYPES = ("int16", "int32", "int64")


@hints_keywords
def embedding_lookup(
    params: ArrayT | PythonData,
    ids: Any,
    max_norm: Operand | None = None,
    name: str | None = None,
    *,
    sparse: bool = False,
) -> ArrayT:
    """Look up rows of ``params`` by ``ids``, as ``tf.nn.embedding_lookup``.

    Returns ``params[ids]`` of shape ``ids.shape + params.shape[1:]``; with ``max_norm``, each
    looked-up row is clipped with ``tf.clip_by_norm(row, max_norm)`` over the row's axes. The
    table itself is never changed (``torch.nn.Embedding(max_norm=)`` renormalises its weight in
    place, with another formula).

    ``params`` may be a list of arrays, the shards of one table split along its first axis,
    as TF 2's "div" partition strategy reads them: with ``V`` rows in ``S`` shards and
    ``q, r = divmod(V, S)``, id ``i`` is row ``i`` of the concatenation when the first ``r``
    shards hold ``q + 1`` rows and the others ``q``. TF assumes those sizes whatever the
    actual ones, and so does this function: id ``i`` goes to shard
    ``p = max(i // (q + 1), (i - r) // q)``, row ``i % (q + 1)`` there if ``p < r``, else
    ``(i - r) % q``.

    Parameters
    ----------
    params : array or list of arrays
        The table, with at least one axis; its rows are ``params[i]``. Any dtype without
        ``max_norm``; a real floating one with it. A list: the table's shards (one dtype and
        one row shape ``shape[1:]``; a list of one is the table). A tuple of arrays is one
        table whose rows are its items (TF converts a tuple to one tensor): items of one dtype
        and one shape.
    ids : array or int or list of int
        Row indices of dtype int16, int32 or int64 (TF's), of any shape (a 0-d id gives one
        row). Python ints convert to int32.
    max_norm : number or array, optional
        Clip each looked-up row to this L2 norm (``tf.clip_by_norm``'s ``clip_norm``: a
        negative value is 0, giving zero rows). ``None`` (default): no clipping.
    name : str, optional
        Accepted for compatibility with TF and ignored.
    sparse : bool, default False
        Not in TF; torch only, for a 2-D ``params`` (or 2-D shards): its gradient is a sparse
        COO tensor with one row per looked-up id, uncoalesced, as TF's ``IndexedSlices``
        gradient (``torch.nn.functional.embedding(..., sparse=True)``). Each shard's gradient
        has a row per id, zero for the ids of other shards (TF's holds its own ids only): its
        norm and dense form are TF's. JAX has no sparse gradients: see the porting guide for
        TF's gradient norm there.

    Returns
    -------
    array
        Of ``params``'s type, dtype and device, shape ``ids.shape + params.shape[1:]``.

    Raises
    ------
    TypeError
        If ``ids`` is not int16, int32 or int64, ``params`` is not floating with ``max_norm``,
        ``sparse=True`` on a backend other than torch, or shards (or a tuple's items) differ
        in dtype.
    ValueError
        If ``params`` (or a shard) is 0-d, ``sparse=True`` for a ``params`` (or shards) not
        2-D, ``params`` is an empty list or tuple, shards differ in ``shape[1:]``
        (a tuple's items: in shape), or there are fewer rows than shards.
    IndexError
        If an id is negative or not below ``params.shape[0]`` (TF's CPU error), on NumPy and
        array-api-strict (host arrays) and on torch (its own check; a device-side assert on
        CUDA). JAX cannot raise from inside ``jit``, nor Dask without computing: an
        out-of-range id gives a row of NaN (floating ``params``) or of the dtype's lowest
        value, never another row. With shards,
        also if an id lands past the rows of its shard (shards not of the "div" sizes), with
        TF's words, on NumPy and array-api-strict; torch and JAX give such ids (and ids out
        of range) NaN rows (or the lowest value), never another row.

    See Also
    --------
    tf.nn.embedding_lookup : The TensorFlow function this mirrors.
    anyclip.clip_by_norm : The clipping applied to each row.

    Notes
    -----
    Gradients with respect to ``params`` are dense (a scatter-add of the rows' gradients),
    except on torch with ``sparse=True``. TF's gradient is an ``IndexedSlices`` whose values
    hold one row per id, so ``tf.linalg.global_norm`` counts a repeated id once per
    occurrence; the dense gradient's norm sums the repeated rows first and differs.

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> table = np.array([[3.0, 4.0], [0.3, 0.4], [1.0, 0.0]], dtype=np.float32)
    >>> anyclip.embedding_lookup(table, [[0, 1], [0, 2]], max_norm=1.0)
    array([[[0.6, 0.8],
            [0.3, 0.4]],
    <BLANKLINE>
           [[0.6, 0.8],
            [1. , 0. ]]], dtype=float32)

    The same table in two shards (TF's "div" sizes: 2 rows, then 1):

    >>> anyclip.embedding_lookup([table[:2], table[2:]], [2, 0, 1], max_norm=1.0)
    array([[1. , 0. ],
           [0.6, 0.8],
           [0.3, 0.4]], dtype=float32)
    """
    if isinstance(params, (list, tuple)) and not params:
        msg = (
            "`params` must be an array or a non-empty list of arrays (the shards of a "
            f"table), got an empty {type(params).__name__}{tf_words(TF_EMPTY)}"
        )
        raise ValueError(msg)
    if isinstance(params, tuple) and any(is_array(p) for p in params):
        params = _stacked(params, ids)  # TF converts a tuple to one tensor: not shards
    if isinstance(params, list):
        if len(params) > 1:
            return cast(ArrayT, _partitioned(params, ids, max_norm, sparse))
        params = params[0]  # TF: one shard is the table
    if max_norm is not None:
        max_norm = dense_operand(max_norm, "max_norm")
    xp = namespace(params, ids, max_norm, names=("params", "ids", "max_norm"))
    table = as_input(params, xp, "params", beside=(ids,))
    index = _ids(xp, ids, table)
    if table.ndim == 0:
        msg = "`params` must have at least one axis (its rows are params[i]), got a 0-d array"
        raise ValueError(msg)
    if max_norm is not None:
        require_kind(xp, table, "params", ("real",), FLOATS, tf_attr)
    rows = _take_rows(xp, table, index, sparse)
    if max_norm is not None:
        c = _clip_norm_operand(xp, max_norm, rows, "max_norm")
        axes = tuple(range(1, table.ndim))
        rows = _core.clip_by_norm(xp, kernels_for(xp, (rows,)), rows, c, axes)
    return cast(ArrayT, xp.reshape(rows, (*tuple(index.shape), *tuple(table.shape)[1:])))


def _stacked(params: tuple[Any, ...], ids: Any) -> Any:
    """A tuple ``params`` as TF 2.21 converts it: one table, the items stacked on a new axis 0.

    ``tf.nn.embedding_lookup`` takes a list as shards but converts any other sequence with
    ``convert_to_tensor`` (a ``Pack`` of its items), so row ``i`` is ``params[i]``. The items
    must share one dtype and one shape, as ``Pack``'s inputs.
    """
    names = [f"params[{i}]" for i in range(len(params))]
    xp = namespace(*params, ids, names=(*names, "ids"))
    home = (*params, ids)
    items = [as_input(p, xp, n, beside=home) for p, n in zip(params, names, strict=True)]
    first = items[0]
    for i, t in enumerate(items):
        if t.dtype != first.dtype:
            msg = (
                "`params` as a tuple is one table, its items stacked as its rows (as TF "
                f"converts it), so they must share one dtype, got {dtype_name(first.dtype)} "
                f"for params[0] and {dtype_name(t.dtype)} for params[{i}]; cast them with "
                f"astype, or pass a list for the shards of a table"
                f"{tf_words(tf_expected(first.dtype, t.dtype))}"
            )
            raise TypeError(msg)
        if tuple(t.shape) != tuple(first.shape):
            msg = (
                "`params` as a tuple is one table, its items stacked as its rows (as TF "
                f"converts it), so they must share one shape, got {tuple(first.shape)} for "
                f"params[0] and {tuple(t.shape)} for params[{i}]; pass a list for the shards "
                f"of a table{tf_words(TF_PACK.format(first=_dims(first), other=_dims(t), i=i))}"
            )
            raise ValueError(msg)
    return xp.stack(items)


def _dims(t: Any) -> str:
    """``t``'s shape as TF writes it: ``[3,2]``."""
    return "[" + ",".join(str(int(d)) for d in t.shape) + "]"


def _ids(xp: Namespace, ids: Any, table: Any) -> Any:
    """``ids`` as an array of ``xp``, Python data on ``table``'s device.

    Refuses a dtype TF's gather does not take.
    """
    index = as_input(ids, xp, "ids", beside=(table,))
    if dtype_name(index.dtype) not in _ID_DTYPES:
        allowed = ", ".join(_ID_DTYPES)
        words = f"Value for attr 'Tindices' of {tf_type(index.dtype)} is not in the list of "
        msg = (
            f"`ids` must have an integer dtype ({allowed}, as TF's gather), got "
            f"{dtype_name(index.dtype)}; cast it with astype(ids, int32)"
            f"{tf_words(words + 'allowed values: ' + allowed)}"
        )
        raise TypeError(msg)
    return index


def _partitioned(params: list[Any], ids: Any, max_norm: Any, sparse: bool) -> Any:
    """TF's lookup in a table split into ``len(params)`` shards, by its "div" strategy.

    TF 2.21 (``embedding_ops._embedding_lookup_and_transform``) assigns id ``i`` of a table of
    ``V`` rows in ``S`` shards to shard ``p = max(i // (q + 1), (i - r) // q)`` with
    ``q, r = divmod(V, S)``, row ``i % (q + 1)`` there if ``p < r``, else ``(i - r) % q``:
    the first ``r`` shards are taken to hold ``q + 1`` rows, the others ``q``, whatever
    their actual sizes (``V`` is their sum). Each shard's rows are gathered and clipped
    (``max_norm``) and put back in the order of ``ids``; the values are those of one table,
    the concatenation of the shards, when the sizes are the "div" ones.

    With ``sparse`` (torch), each shard's gradient is a sparse tensor with one row per id,
    zero for the ids of other shards (selecting a shard's own ids would be a host sync).
    """
    names = [f"params[{i}]" for i in range(len(params))]
    if max_norm is not None:
        max_norm = dense_operand(max_norm, "max_norm")
    xp = namespace(*params, ids, max_norm, names=(*names, "ids", "max_norm"))
    home = (*params, ids)
    shards = [as_input(p, xp, n, beside=home) for p, n in zip(params, names, strict=True)]
    index = _ids(xp, ids, shards[0])
    first = shards[0]
    for i, t in enumerate(shards):
        if t.ndim == 0:
            msg = (
                f"`params` shards must have at least one axis (their rows), got a 0-d array "
                f"at params[{i}]"
            )
            raise ValueError(msg)
        if t.dtype != first.dtype:
            msg = (
                f"`params` shards must share one dtype, got {dtype_name(first.dtype)} for "
                f"params[0] and {dtype_name(t.dtype)} for params[{i}]; cast them with astype"
                f"{tf_words(tf_expected(first.dtype, t.dtype))}"
            )
            raise TypeError(msg)
        if tuple(t.shape[1:]) != tuple(first.shape[1:]):
            msg = (
                f"`params` shards must share their row shape (shape[1:]), got "
                f"{tuple(first.shape)} for params[0] and {tuple(t.shape)} for params[{i}]; "
                f"split the table along its first axis only{tf_words(TF_STITCH)}"
            )
            raise ValueError(msg)
    if max_norm is not None:
        require_kind(xp, first, "params", ("real",), FLOATS, tf_attr)
    sizes = [int(t.shape[0]) for t in shards]
    count = len(shards)
    q, r = divmod(sum(sizes), count)
    flat = xp.reshape(index, (-1,))
    row = tuple(first.shape)[1:]
    if q == 0 and int(flat.shape[0]) > 0:
        msg = (
            f"`params` must have at least as many rows in all as shards, got {sum(sizes)} "
            f'rows in {count} shards (TF\'s "div" strategy gives each shard '
            f"{sum(sizes)} // {count} = 0 rows); use fewer shards"
            f"{tf_words('Integer division by zero')}"
        )
        raise ValueError(msg)
    # 0-d constants on the ids' device (cached there: no host data sent per call)
    one = constant(xp, 1, flat.dtype, flat)
    q_ = constant(xp, max(q, 1), flat.dtype, flat)
    r_ = constant(xp, r, flat.dtype, flat)
    shard = xp.maximum(flat // (q_ + one), (flat - r_) // q_)
    local = xp.where(shard < r_, flat % (q_ + one), (flat - r_) % q_)
    lib = library(xp)
    if lib in ("numpy", "array_api_strict"):  # host arrays: TF's CPU check costs no sync
        _check_shards(xp, index, flat, shard, local, sizes)
    n = int(flat.shape[0])
    out = shards[0][:0, ...] if n == 0 else None  # no id: (0, *row)
    for s, t in enumerate(shards):
        if sizes[s] == 0 or n == 0:
            continue
        size = constant(xp, sizes[s], flat.dtype, flat)
        ok = (shard == constant(xp, s, flat.dtype, flat)) & (local < size)
        rows = _take_rows(xp, t, xp.where(ok, local, xp.zeros_like(local)), sparse)
        mask = xp.reshape(ok, (n,) + (1,) * len(row))
        out = xp.where(mask, rows, _fill(xp, rows) if out is None else out)
    assert out is not None  # n > 0 gives q > 0: some shard has rows
    if max_norm is not None:
        c = _clip_norm_operand(xp, max_norm, out, "max_norm")
        axes = tuple(range(1, out.ndim))
        out = _core.clip_by_norm(xp, kernels_for(xp, (out,)), out, c, axes)
    return xp.reshape(out, (*tuple(index.shape), *row))


def _fill(xp: Namespace, rows: Any) -> Any:
    """What a row no shard holds reads as: NaN (floating), else the dtype's lowest value.

    Only met where an out-of-range id cannot raise (JAX, torch): as JAX's own lookup.
    """
    if dtype_kind(xp, rows.dtype) in ("real", "complex"):
        return xp.full_like(rows, math.nan)
    if rows.dtype == xp.bool:
        return xp.zeros_like(rows)
    return xp.full_like(rows, xp.iinfo(rows.dtype).min)


def _check_shards(
    xp: Namespace, ids: Any, flat: Any, shard: Any, local: Any, sizes: list[int]
) -> None:
    """TF's errors for an id outside every shard, or past its shard's rows (host arrays)."""
    count = len(sizes)
    bad = (shard < 0) | (shard >= count)
    if bool(xp.any(bad)):
        pos = int(xp.argmax(xp.astype(bad, xp.int8)))
        at = _position(ids, pos)
        value, p = int(flat[pos]), int(shard[pos])
        msg = (
            f"`ids` must be in [0, {sum(sizes)}) (the rows of all shards of `params`), got "
            f"ids{at} = {value}; drop or remap the id"
            f"{tf_words(f'partitions[{pos}] = {p} is not in [0, {count})')}"
        )
        raise IndexError(msg)
    for s, size in enumerate(sizes):
        mine = shard == constant(xp, s, shard.dtype, shard)
        over = mine & (local >= constant(xp, size, local.dtype, local))
        if not bool(xp.any(over)):
            continue
        pos = int(xp.argmax(xp.astype(over, xp.int8)))
        k = int(xp.sum(xp.astype(mine[:pos], xp.int32)))  # its place among shard s's ids
        value, row = int(flat[pos]), int(local[pos])
        msg = (
            f'`params` shards must have TF\'s "div" sizes (the first {sum(sizes) % count} '
            f"of {sum(sizes) // count + 1} rows, the others of {sum(sizes) // count}), got "
            f"sizes {sizes}: ids{_position(ids, pos)} = {value} is row {row} of "
            f"params[{s}], which has {size}; split the table with those sizes"
            f"{tf_words(f'indices[{k}] = {row} is not in [0, {size})')}"
        )
        raise IndexError(msg)


def _position(ids: Any, pos: int) -> str:
    """``"[i,j]"``: the index into ``ids`` of its flat position ``pos``."""
    where, rest = [], pos
    for size in reversed(tuple(ids.shape)):
        where.append(rest % size)
        rest //= size
    return "[" + ",".join(str(i) for i in reversed(where)) + "]" if where else ""


def _take_rows(xp: Namespace, table: Any, ids: Any, sparse: bool) -> Any:
    """``table[i]`` for each ``i`` of the flattened ``ids``, shape ``(ids.size, *row)``."""
    lib = library(xp)
    flat = xp.reshape(ids, (-1,))
    n = int(table.shape[0])
    if sparse and (lib != "torch" or table.ndim != 2):
        msg = (
            "`sparse=True` needs a torch `params` with 2 axes (torch's sparse embedding "
            f"gradient), got a {lib} array with {table.ndim}; leave it False (dense gradient)"
        )
        raise (TypeError if lib != "torch" else ValueError)(msg)
    if lib == "torch":
        import torch

        row = math.prod(tuple(table.shape)[1:])
        table2d = table if table.ndim == 2 else xp.reshape(table, (n, row))
        if flat.dtype == torch.int16:  # embedding takes int32 and int64 only
            flat = flat.to(torch.int32)
        out = torch.nn.functional.embedding(flat, table2d, sparse=sparse)
        return out if table.ndim == 2 else xp.reshape(out, (-1, *tuple(table.shape)[1:]))
    if lib == "jax":
        import jax.numpy as jnp

        # ``take`` wraps negative ids; send them past the end, where the fill applies
        flat = jnp.where(flat < 0, n, flat)
        fill = math.nan if jnp.issubdtype(table.dtype, jnp.inexact) else None
        return jnp.take(table, flat, axis=0, mode="fill", fill_value=fill)
    if lib in ("numpy", "array_api_strict"):  # host arrays: TF's CPU check costs no sync
        _check_range(xp, ids, flat, n)
        return xp.take(table, flat, axis=0)
    if n == 0:  # no row to read: the backend's own error
        return xp.take(table, flat, axis=0)
    # No check without a host read (Dask is lazy): an id outside [0, n) reads as a NaN row
    # (the lowest value for integers), as on JAX, never as another row (Dask's take wraps
    # negative ids around and reads row 0 for ids past the end)
    ok = (flat >= constant(xp, 0, flat.dtype, flat)) & (flat < constant(xp, n, flat.dtype, flat))
    rows = xp.take(table, xp.where(ok, flat, xp.zeros_like(flat)), axis=0)
    return xp.where(xp.reshape(ok, (-1,) + (1,) * (table.ndim - 1)), rows, _fill(xp, rows))


def _check_range(xp: Namespace, ids: Any, flat: Any, n: int) -> None:
    """``IndexError`` with TF's words at the first id outside ``[0, n)`` (host arrays only)."""
    bad = (flat < 0) | (flat >= n)
    if not bool(xp.any(bad)):
        return
    pos = int(xp.argmax(xp.astype(bad, xp.int8)))
    value = int(flat[pos])
    at = _position(ids, pos)
    msg = (
        f"`ids` must be in [0, {n}) (the rows of `params`), got ids{at} = {value}; "
        f"drop or remap the id{tf_words(f'indices{at} = {value} is not in [0, {n})')}"
    )
    raise IndexError(msg)
