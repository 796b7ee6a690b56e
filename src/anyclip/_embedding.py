"""``tf.nn.embedding_lookup`` with ``max_norm``: rows of a table, each clipped by TF's rule.

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
from anyclip._clip import _clip_norm_operand
from anyclip._compat import dtype_name, library, namespace
from anyclip._kernels import kernels_for
from anyclip._keywords import hints_keywords
from anyclip._policy import FLOATS, as_input, require_kind, tf_attr, tf_type, tf_words
from anyclip._typing import ArrayT, Namespace, Operand, PythonData

__all__ = ["embedding_lookup"]

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

    Parameters
    ----------
    params : array
        The table, with at least one axis; its rows are ``params[i]``. Any dtype without
        ``max_norm``; a real floating one with it.
    ids : array or int or list of int
        Row indices of dtype int16, int32 or int64 (TF's), of any shape (a 0-d id gives one
        row). Python ints convert to int32.
    max_norm : number or array, optional
        Clip each looked-up row to this L2 norm (``tf.clip_by_norm``'s ``clip_norm``: a
        negative value is 0, giving zero rows). ``None`` (default): no clipping.
    name : str, optional
        Accepted for compatibility with TF and ignored.
    sparse : bool, default False
        Not in TF; torch only, for a 2-D ``params``: its gradient is a sparse COO tensor with
        one row per looked-up id, uncoalesced, as TF's ``IndexedSlices`` gradient
        (``torch.nn.functional.embedding(..., sparse=True)``). JAX has no sparse gradients:
        see the porting guide for TF's gradient norm there.

    Returns
    -------
    array
        Of ``params``'s type, dtype and device, shape ``ids.shape + params.shape[1:]``.

    Raises
    ------
    TypeError
        If ``ids`` is not int16, int32 or int64, ``params`` is not floating with ``max_norm``,
        or ``sparse=True`` on a backend other than torch.
    ValueError
        If ``params`` is 0-d, or ``sparse=True`` for a ``params`` that is not 2-D.
    IndexError
        If an id is negative or not below ``params.shape[0]`` (TF's CPU error), on NumPy and
        array-api-strict (host arrays) and on torch (its own check; a device-side assert on
        CUDA). JAX cannot raise from inside ``jit``: an out-of-range id gives a row of NaN
        (floating ``params``) or of the dtype's lowest value, never another row.

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
    """
    xp = namespace(params, ids, names=("params", "ids"))
    table = as_input(params, xp, "params")
    index = as_input(ids, xp, "ids")
    if dtype_name(index.dtype) not in _ID_DTYPES:
        allowed = ", ".join(_ID_DTYPES)
        words = f"Value for attr 'Tindices' of {tf_type(index.dtype)} is not in the list of "
        msg = (
            f"`ids` must have an integer dtype ({allowed}, as TF's gather), got "
            f"{dtype_name(index.dtype)}; cast it with astype(ids, int32)"
            f"{tf_words(words + 'allowed values: ' + allowed)}"
        )
        raise TypeError(msg)
    if table.ndim == 0:
        msg = "`params` must have at least one axis (its rows are params[i]), got a 0-d array"
        raise ValueError(msg)
    if max_norm is not None:
        require_kind(xp, table, "params", ("real",), FLOATS, tf_attr)
    rows = _take_rows(xp, table, index, sparse)
    if max_norm is not None:
        c = _clip_norm_operand(xp, max_norm, rows)
        axes = tuple(range(1, table.ndim))
        rows = _core.clip_by_norm(xp, kernels_for(xp, (rows,)), rows, c, axes)
    return cast(ArrayT, xp.reshape(rows, (*tuple(index.shape), *tuple(table.shape)[1:])))


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


def _check_range(xp: Namespace, ids: Any, flat: Any, n: int) -> None:
    """``IndexError`` with TF's words at the first id outside ``[0, n)`` (host arrays only)."""
    bad = (flat < 0) | (flat >= n)
    if not bool(xp.any(bad)):
        return
    pos = int(xp.argmax(xp.astype(bad, xp.int8)))
    value = int(flat[pos])
    where, rest = [], pos
    for size in reversed(tuple(ids.shape)):
        where.append(rest % size)
        rest //= size
    at = "[" + ",".join(str(i) for i in reversed(where)) + "]" if where else ""
    msg = (
        f"`ids` must be in [0, {n}) (the rows of `params`), got ids{at} = {value}; "
        f"drop or remap the id{tf_words(f'indices{at} = {value} is not in [0, {n})')}"
    )
    raise IndexError(msg)
