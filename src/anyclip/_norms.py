"""Public norm functions: ``norm``, ``l2_normalize`` and ``normalize``.

Layer: public, as :mod:`anyclip._clip`. Argument checks follow ``tf.norm``'s own validation
(which ``ord`` goes with which ``axis``); the kernels are chosen once per call; the arithmetic
lives in :mod:`anyclip._core`.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, cast

from anyclip import _core
from anyclip._compat import dtype_name, is_numpy_scalar, library, namespace
from anyclip._kernels import Kernels, kernels_for, plain_norm
from anyclip._kernels._dask import joined_call, unknown_broadcast
from anyclip._kernels._tforder_xp import rounded_cast
from anyclip._keywords import hints_keywords
from anyclip._numerics import quiet
from anyclip._policy import as_input, as_operand, check_compatible
from anyclip._policy_axes import axes_description, normalize_axes
from anyclip._policy_dtypes import (
    _UNSUPPORTED,
    cast_like,
    dtype_kind,
    require_kind,
    resolve_accumulate_dtype,
)
from anyclip._policy_words import (
    tf_attr,
    tf_broadcast,
    tf_cannot_convert,
    tf_expected,
    tf_incompatible,
    tf_words,
)
from anyclip._sparse import dense_operand, densified
from anyclip._subnormals import OPEN, flushing
from anyclip._typing import ArrayT, Axes, DTypeLike, Namespace, NormOrd, Operand

__all__ = ["l2_normalize", "norm", "normalize"]

_REAL_OF_COMPLEX = {"complex64": lambda xp: xp.float32, "complex128": lambda xp: xp.float64}
_MATRIX_ORDS = "['euclidean', 'fro', 1, 2, inf]"
_VECTOR_ORDS = "`ord` of a vector norm: 'euclidean', 1, 2, inf or a number p > 0"
#: The error texts start with TF's own words, so a ported ``assertRaisesRegex`` still matches.
_AXIS_MSG = (
    "'axis' must be None, an integer, or a tuple of 2 unique integers, got {} "
    "(`axis`: one axis for a vector norm, two for a matrix norm)"
)


def _canonical_ord(ord: Any, is_matrix: bool) -> Any:
    """``ord`` as ``'euclidean'``, ``'fro'``, ``1``, ``2``, ``math.inf`` or a float ``p > 0``.

    A complex ``ord`` follows TF 2.21's Python checks (measured): a matrix norm takes any
    ``ord`` equal to a supported one (``1+0j`` is 1); a vector norm takes a NumPy complex
    scalar with no imaginary part as its real part, refuses a Python complex with none
    (``TypeError``: TF compares it with 0) and any complex with one (``ValueError``).
    """
    if is_matrix:
        if isinstance(ord, str):
            if ord in ("euclidean", "fro"):
                return ord
        elif (_is_real_number(ord) or _is_complex_number(ord)) and ord in (1, 2, math.inf):
            return 1 if ord == 1 else 2 if ord == 2 else math.inf
        msg = (
            f"'ord' must be a supported matrix norm in {_MATRIX_ORDS}, got {ord} "
            "(`ord` of a matrix norm, with two axes)"
        )
        raise ValueError(msg)
    if isinstance(ord, str):
        if ord == "euclidean":
            return ord
        msg = f"'ord' must be a supported vector norm, got {ord} ({_VECTOR_ORDS})"
        raise ValueError(msg)
    shown = ord
    if _is_complex_number(ord):
        if ord.imag != 0:  # not np.isreal(ord): TF refuses it before comparing
            msg = f"'ord' must be a supported vector norm, got {ord} ({_VECTOR_ORDS})"
            raise ValueError(msg)
        if not is_numpy_scalar(ord):  # np.complex128 is a complex too, but compares
            msg = (
                f"`ord` of a vector norm must be a real number, got the Python complex {ord!r}; "
                f"pass its real part, {ord.real!r}"
                f"{tf_words(_TF_COMPLEX_ORD)}"
            )
            raise TypeError(msg)
        ord = float(ord.real)  # a NumPy complex: TF's checks and kernels use its real part
    if not _is_real_number(ord):
        msg = f"`ord` must be a string or a real number, got {ord!r} of type {type(ord).__name__}"
        raise TypeError(msg)
    if ord == 1:
        return 1
    if ord == 2:
        return 2
    if ord == math.inf:
        return math.inf
    if not ord > 0 and not math.isnan(ord):
        msg = f"'ord' must be a supported vector norm, got {shown} ({_VECTOR_ORDS})"
        raise ValueError(msg)
    return float(ord)


#: TF's words for a Python complex vector ``ord``: its Python check compares ``ord <= 0``.
_TF_COMPLEX_ORD = "'<=' not supported between instances of 'complex' and 'int'"


def _is_complex_number(value: Any) -> bool:
    """A Python complex or a NumPy complex scalar."""
    return isinstance(value, complex) or (is_numpy_scalar(value) and value.dtype.kind == "c")


def _is_real_number(value: Any) -> bool:
    if isinstance(value, numbers.Real):
        return True
    return is_numpy_scalar(value) and not isinstance(value, complex) and value.dtype.kind in "biuf"


def _canonical_axis(axis: Any, ndim: int) -> int | tuple[int, int] | None:
    """``tf.norm``'s axis rule: None, a Python int, or a pair of distinct Python ints.

    ``bool`` is an int here too, as in TF (``axis=True`` is axis 1); NumPy integers and arrays
    are refused, as TF's Python check refuses them. Then the axes go through the axes parser
    (:func:`~anyclip._policy_axes.normalize_axes`), as they go through TF's reduction: a pair
    mixing a bool with an int (``(True, 0)``) is refused there, as TF refuses to convert it.
    """
    if isinstance(axis, (tuple, list)) and len(axis) == 2:
        if not all(isinstance(a, int) for a in axis) or axis[0] == axis[1]:
            raise ValueError(_AXIS_MSG.format(tuple(axis)))  # TF shows a list as a tuple
        # Each axis on its own: ``(0, -1)`` on 1-D input names axis 0 twice, which TF's
        # Python check lets through (see :func:`_check_matrix_pair`).
        first, second = normalize_axes(axis, ndim, "axis", repeats=True) or ()
        return (first, second)
    if axis is None:
        return None
    if not isinstance(axis, int):
        raise ValueError(_AXIS_MSG.format(axes_description(axis)))
    (single,) = normalize_axes(axis, ndim, "axis") or ()
    return single


#: Dtypes TF's SVD (the matrix 2-norm) has a kernel for.
_SVD_DTYPES = ("float32", "float64", "complex64", "complex128")


#: TF 2.21's words for the matrix 2-norm of a float16 matrix: its CPU ``Svd`` has no kernel.
_TF_SVD_HALF = (
    "Could not find device for node: {{node Svd}} = Svd[T=DT_HALF, compute_uv=false, "
    "full_matrices=false]"
)


def _tf_norm_words(
    xp: Namespace, dtype: Any, kind: str, ord: Any, raw: Any, is_matrix: bool
) -> Any:
    """TF's words when ``tf.norm`` refuses ``dtype`` for this ``ord`` (None where unmeasured).

    The op that fails first decides: ``Svd`` (matrix 2-norm), the Euclidean path's
    ``conj``/``Sqrt``, ``Abs`` (every other ord), or, for a signed integer p-norm, the
    conversion of ``p`` (a Python float) or ``1 / p`` (a Python int) to the integer dtype.
    """
    if is_matrix and ord == 2:
        return _TF_SVD_HALF if dtype_name(dtype) == "float16" else tf_attr(dtype)
    euclidean = ord in ("euclidean", "fro") or (ord == 2 and not is_matrix)
    if kind == "bool":
        return (
            "Expected numeric or variant tensor, got dtype tf.bool."
            if euclidean
            else tf_attr(dtype)
        )
    if kind != "int":
        return None
    if euclidean or not xp.isdtype(dtype, "signed integer"):
        return tf_attr(dtype)  # Sqrt, or Abs for unsigned integers
    # Python numbers only: TF casts a NumPy scalar ``p`` (or ``1 / p``) to the integer dtype
    # without a word, and returns a meaningless norm (a declared difference).
    if type(raw) is float:
        return tf_cannot_convert(raw, dtype)
    if type(raw) is int:
        return tf_cannot_convert(1 / raw, dtype)
    return None


def _check_norm_dtype(
    xp: Namespace, x: Any, ord: Any, name: str, is_matrix: bool, raw_ord: Any = None
) -> None:
    kind = dtype_kind(xp, x.dtype)
    if is_matrix and ord == 2 and dtype_name(x.dtype) not in _SVD_DTYPES:
        msg = (
            f"`{name}` must have dtype float32, float64, complex64 or complex128 for the matrix "
            f"2-norm (TF has no SVD for others), got {dtype_name(x.dtype)}; cast it to float32"
        )
        if kind != "other":
            msg += tf_words(_tf_norm_words(xp, x.dtype, kind, ord, raw_ord, is_matrix))
        raise TypeError(msg)
    if kind in ("real", "complex"):
        return
    if kind == "int" and ord in (1, math.inf) and xp.isdtype(x.dtype, "signed integer"):
        return
    msg = (
        f"`{name}` must have a floating or complex dtype for ord={ord!r} "
        f"(signed integers only with ord 1 or inf: TF has no abs for unsigned ones), "
        f"got {dtype_name(x.dtype)}"
    )
    if kind == "other":
        msg += _UNSUPPORTED
    else:
        msg += "; cast it to a floating dtype"
        msg += tf_words(_tf_norm_words(xp, x.dtype, kind, ord, raw_ord, is_matrix))
    raise TypeError(msg)


def _prepare_norm(tensor: Any, ord: Any, axis: Any) -> tuple[Namespace, Any, Any, Any]:
    is_matrix = isinstance(axis, (tuple, list)) and len(axis) == 2
    canonical_ord = _canonical_ord(ord, is_matrix)
    xp = namespace(tensor)
    x = as_input(tensor, xp, "tensor")
    ax = _canonical_axis(axis, x.ndim)
    if isinstance(ax, tuple):
        _check_matrix_pair(ax, axis, canonical_ord)
    _check_norm_dtype(xp, x, canonical_ord, "tensor", isinstance(ax, tuple), ord)
    return xp, x, canonical_ord, ax


def _check_matrix_pair(pair: tuple[int, int], axis: Any, ord: Any) -> None:
    """A pair naming one axis twice (``(0, -1)`` on 1-D input): what TF does with it.

    TF refuses only literally equal ints in Python. For ``ord`` 1 and inf its two reductions
    (a sum, then a max) run over the same axis one after the other, which gives a value
    (``norm([3, 4], 1, (0, -1))`` is 7), so anyclip computes the same; the Euclidean and
    Frobenius norms reduce over both axes at once, which TF's kernel refuses.
    """
    if pair[0] != pair[1] or ord in (1, math.inf):
        return
    # TF's words: its Sum kernel's for these two; the matrix 2-norm fails in a transpose or a
    # shape check first, with words that name neither the axis nor the problem
    words = (
        f"Invalid reduction arguments: Axes contains duplicate dimension: {pair[0]} ("
        if ord != 2
        else ""
    )
    msg = (
        f"{words}`axis` {tuple(axis)} names axis {pair[0]} twice; ord={ord!r} needs two "
        "different axes: pass two distinct axes, or ord 1 or inf, which TF reduces one after "
        f"the other{')' if words else ''}"
    )
    raise ValueError(msg)


@hints_keywords
def norm(
    tensor: ArrayT,
    ord: NormOrd = "euclidean",
    axis: int | tuple[int, int] | list[int] | None = None,
    keepdims: bool | None = None,
    name: str | None = None,
    *,
    accumulate_dtype: DTypeLike = None,
) -> ArrayT:
    """Vector or matrix norm, as ``tf.norm``.

    Parameters
    ----------
    tensor : array
        Input of a floating or complex dtype (or integer, with ``ord`` 1 or inf).
        A sparse torch tensor or JAX ``BCOO`` array is made dense first (repeated indices
        summed), as TF converts an ``IndexedSlices``; the result is dense.
    ord : {'euclidean', 'fro', 1, 2, inf} or float, optional
        Vector norms (``axis`` None or an int): ``'euclidean'`` (default), 1, 2, inf or any
        ``p > 0``. Matrix norms (``axis`` a pair): ``'euclidean'``/``'fro'`` (Frobenius), 1
        (max column sum), 2 (largest singular value) and inf (max row sum).
    axis : None, int or pair of int, optional
        ``None`` flattens the input and takes a **vector** norm, whatever its rank. Axes must be
        Python ints (NumPy integers and one-element lists are refused, as in TF; a bool is an
        int, ``True`` is 1, but a pair may not mix one with an int, as TF cannot convert it).
    keepdims : bool, optional
        Keep the reduced axes with size 1.
    name : str, optional
        Accepted for compatibility with TF and ignored.
    accumulate_dtype : dtype or str, optional
        Not in TF. For real floating input: compute in this floating dtype (``"float32"`` for
        float16 input never overflows at 256) and cast the norm back to the input's dtype.
        ``None`` (default) computes in the input's dtype, as TF. ``"widest"`` is a
        ``ValueError``: of one array it could only mean the input's own dtype.

    Returns
    -------
    array
        The norm, of the input's dtype (complex input: complex for 'euclidean', 2 and 'fro'
        vector norms, real otherwise, as in TF), on the input's device.

    Raises
    ------
    ValueError
        For an ``ord`` TF refuses (``ord <= 0``, ``-inf``, ``'nuc'``, ``'fro'`` on a vector, a
        matrix ``ord`` outside the list above) or an ``axis`` that is not None, an int or a pair
        of distinct ints, or is out of range.
    TypeError
        For ``ord=None`` or a complex ``ord``, a bool input, an integer input with an ``ord``
        other than 1 or inf, or an ``accumulate_dtype`` that is not floating (or is given for
        a non-floating input).

    See Also
    --------
    tf.norm : The TensorFlow function this mirrors.

    Notes
    -----
    TF's behaviour is kept on purpose: ``axis=None`` on a matrix gives a vector norm (NumPy,
    JAX and ``torch.linalg.norm`` give a matrix norm); p-norms are
    ``sum(abs(x) ** p) ** (1 / p)`` without rescaling, so they overflow like TF's; the maximum
    of an empty input (``ord`` inf, matrix ``ord`` 2) is ``-inf``; squares are summed in the
    input's dtype (float16 overflows at 256). The gradient of the Euclidean norm at 0 is NaN,
    as in TF (``torch.linalg.vector_norm`` gives 0). The matrix 2-norm is TF's
    ``max(abs(svd(x)))``: a matrix holding inf or NaN gives NaN and an all-NaN gradient, an
    all-zero matrix the gradient 0, and tied largest singular values share the gradient.

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> m = np.array([[1.0, -2.0], [3.0, 4.0]], dtype=np.float32)
    >>> anyclip.norm(m)
    array(5.477226, dtype=float32)
    >>> anyclip.norm(m, ord=1)  # axis None: a vector norm, not the matrix 1-norm
    array(10., dtype=float32)
    >>> anyclip.norm(m, ord=1, axis=(0, 1))  # the matrix 1-norm: max column sum
    array(6., dtype=float32)
    """
    if isinstance(ord, str) and ord == "euclidean" and axis is None and not keepdims:
        plain = (
            None if accumulate_dtype is not None or (OPEN and flushing()) else plain_norm(tensor)
        )
        if plain is not None:
            return cast(ArrayT, plain)
    return cast(ArrayT, _norm(None, tensor, ord, axis, keepdims, accumulate_dtype=accumulate_dtype))


@densified("tensor")
def _norm(
    kernels: Kernels | None,
    tensor: Any,
    ord: Any = "euclidean",
    axis: Any = None,
    keepdims: bool | None = None,
    name: str | None = None,
    *,
    accumulate_dtype: Any = None,
) -> Any:
    """:func:`norm` with ``kernels`` (``None``: :func:`kernels_for` chooses)."""
    xp, x, canonical_ord, ax = _prepare_norm(tensor, ord, axis)
    if accumulate_dtype is not None and ax is None and canonical_ord in ("euclidean", 2):
        require_kind(
            xp, x, "tensor", ("real",), "a real floating dtype when `accumulate_dtype` is set"
        )
        acc = resolve_accumulate_dtype(xp, accumulate_dtype, [x.dtype], single="norm")
        if acc != x.dtype:  # no cast copy of all of x: the kernels cast a block at a time
            k = kernels_for(xp, [x], acc) if kernels is None else kernels
            # tf.norm's reduce_sum(x * x): no l2_loss half flushed (Kernels.unhalved)
            r = _cast_back(xp, _core.upcast_global_norm(xp, k.unhalved(), [x], acc), x.dtype)
            r = k.replicated(xp, r, x)
            return xp.reshape(r, (1,) * x.ndim) if keepdims else r
    if accumulate_dtype is not None and ax is None and canonical_ord not in ("euclidean", 2):
        # a vector p-norm over every axis: the core casts x a block at a time
        require_kind(
            xp, x, "tensor", ("real",), "a real floating dtype when `accumulate_dtype` is set"
        )
        acc = resolve_accumulate_dtype(xp, accumulate_dtype, [x.dtype], single="norm")
        k = kernels_for(xp, [x], acc) if kernels is None else kernels
        r = _core.norm(xp, k, x, canonical_ord, ax, bool(keepdims), acc=acc)
        return _cast_back(xp, r, x.dtype)
    work = _accumulating(xp, x, accumulate_dtype, "tensor", "norm")
    k = kernels_for(xp, (work,)) if kernels is None else kernels
    r = _core.norm(xp, k, work, canonical_ord, ax, bool(keepdims))
    return r if work is x else _cast_back(xp, r, x.dtype)


def _cast_back(xp: Namespace, r: Any, dtype: Any) -> Any:
    """A norm computed in ``accumulate_dtype``, cast to ``dtype``: inf where it overflows.

    Without NumPy's overflow warning: TF's cast does not warn either.
    """
    if r.dtype == dtype:
        return r
    with quiet(xp):
        return rounded_cast(xp, r, dtype)


def _accumulating(xp: Namespace, x: Any, accumulate_dtype: Any, name: str, single: str) -> Any:
    """``x`` cast to ``accumulate_dtype`` (itself when None or already that dtype)."""
    if accumulate_dtype is None:
        return x
    require_kind(xp, x, name, ("real",), "a real floating dtype when `accumulate_dtype` is set")
    acc = resolve_accumulate_dtype(xp, accumulate_dtype, [x.dtype], single=single)
    return x if acc == x.dtype else rounded_cast(xp, x, acc)


@hints_keywords
def l2_normalize(
    x: ArrayT,
    axis: Axes = None,
    epsilon: Operand = 1e-12,
    name: str | None = None,
    dim: Axes = None,
    *,
    accumulate_dtype: DTypeLike = None,
) -> ArrayT:
    """Divide ``x`` by its L2 norm over ``axis``, as ``tf.math.l2_normalize``.

    Computes ``x * rsqrt(maximum(sum(x * x, axis), epsilon))``.

    Parameters
    ----------
    x : array
        Input of a floating or complex dtype.
        A sparse torch tensor or JAX ``BCOO`` array is made dense first (repeated indices
        summed), as TF converts an ``IndexedSlices``; the result is dense.
    axis : int or sequence of int, optional
        Axes of the norm; ``None`` (default) normalizes over **all** elements.
        What TF's reductions take: Python ints (``True`` is 1), lists, tuples and ranges of
        them, NumPy integer scalars and arrays (and NumPy floats that hold whole numbers, as TF
        casts them). A torch, JAX or other library's array is refused (``TypeError``): reading
        an axis from it would be a host read; pass a Python int or tuple.
    epsilon : number or array, optional
        Lower bound of the **squared** norm (default 1e-12, that is a norm floor of 1e-6),
        converted to ``x``'s (real) dtype.
    name : str, optional
        Accepted for compatibility with TF and ignored.
    dim : int or sequence of int, optional
        Deprecated alias of ``axis``.
    accumulate_dtype : dtype or str, optional
        Not in TF. For real floating input: compute in this floating dtype and cast the result
        back (float16 in float32: no overflow at 256, and epsilon no longer rounds to 0).
        ``None`` (default) computes in the input's dtype, as TF. ``"widest"`` is a
        ``ValueError``: of one array it could only mean the input's own dtype.

    Returns
    -------
    array
        Same type, dtype, shape and device as ``x``.

    Raises
    ------
    TypeError
        If ``x`` is not floating or complex, ``epsilon`` is an array of another dtype,
        ``accumulate_dtype`` is not floating (or is given for complex ``x``), or ``axis``
        holds floats or strings or is an array of a library other than NumPy.
    ValueError
        If both ``axis`` and ``dim`` are given, an axis is repeated or out of range, ``axis``
        is a sequence TF cannot convert (``(True, 0)``, rows of different lengths), or an
        ``epsilon`` array cannot broadcast against ``x`` (a larger one enlarges the result,
        as in TF).

    See Also
    --------
    tf.math.l2_normalize : The TensorFlow function this mirrors.
    normalize : Divides by the norm itself, without epsilon.

    Notes
    -----
    As in TF: in float16 the default epsilon rounds to 0, so a zero vector gives NaN (and an
    infinite gradient); an element of magnitude 256 or more gives zeros in float16; the sign of
    zeros is kept. ``torch.nn.functional.normalize`` floors the norm (not its square) and uses
    ``dim=1``.

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> anyclip.l2_normalize(np.array([3.0, 4.0], dtype=np.float32))
    array([0.6, 0.8], dtype=float32)
    >>> anyclip.l2_normalize(np.array([1e-7, 0.0], dtype=np.float32))  # below the norm floor
    array([0.1, 0. ], dtype=float32)
    """
    return cast(
        ArrayT, _l2_normalize(None, x, axis, epsilon, dim=dim, accumulate_dtype=accumulate_dtype)
    )


@densified("x")
def _l2_normalize(
    kernels: Kernels | None,
    x: Any,
    axis: Any = None,
    epsilon: Any = 1e-12,
    name: str | None = None,
    dim: Any = None,
    *,
    accumulate_dtype: Any = None,
) -> Any:
    """:func:`l2_normalize`; the kernels only settle a sharded sum (:meth:`Kernels.settle`)."""
    if axis is not None and dim is not None:
        msg = (
            "`axis` and `dim` must not both be given (`dim` is the deprecated name of `axis`); "
            "pass `axis` only (TF: Cannot specify both 'dim' and 'axis'.)"
        )
        raise ValueError(msg)
    if axis is None:
        axis = dim
    epsilon = dense_operand(epsilon, "epsilon")
    xp = namespace(x, epsilon, names=("x", "epsilon"))
    x = as_input(x, xp, "x", beside=(epsilon,))
    kind = require_kind(
        xp, x, "x", ("real", "complex"), "a floating or complex dtype", _tf_l2_words(epsilon)
    )
    ax = normalize_axes(axis, x.ndim, "axis")
    if accumulate_dtype is not None and ax is None and kind == "real":
        acc = resolve_accumulate_dtype(xp, accumulate_dtype, [x.dtype], single="l2_normalize")
        eps = as_operand(epsilon, xp, cast_like(xp, x, acc), "epsilon", dtype=acc, tf=tf_expected)
        if acc != x.dtype and eps.ndim == 0:
            k = kernels_for(xp, [x], acc) if kernels is None else kernels
            return _core.upcast_l2_normalize(xp, k, x, eps, acc)  # no cast copy of all of x
    work = _accumulating(xp, x, accumulate_dtype, "x", "l2_normalize")
    real_dtype = work.dtype if kind == "real" else _REAL_OF_COMPLEX[dtype_name(x.dtype)](xp)
    eps = as_operand(epsilon, xp, work, "epsilon", dtype=real_dtype, tf=tf_expected)
    if library(xp) == "dask" and unknown_broadcast((x, eps)):  # shapes known when computed
        fn = functools.partial(_numpy_l2_normalize, axis=axis, accumulate_dtype=accumulate_dtype)
        return joined_call(fn, (x, eps), dtype=x.dtype)
    if eps.ndim:
        words = _tf_epsilon_shape(tuple(x.shape), ax, tuple(eps.shape))
        check_compatible(tuple(eps.shape), tuple(x.shape), "epsilon", "x", tf=words)
    k = kernels_for(xp, (work,)) if kernels is None else kernels
    out = _core.l2_normalize(xp, work, ax, eps, k)
    return out if work is x else rounded_cast(xp, out, x.dtype)


def _numpy_l2_normalize(x: Any, epsilon: Any, *, axis: Any, accumulate_dtype: Any) -> Any:
    """:func:`l2_normalize` of NumPy arrays, for :func:`~anyclip._kernels._dask.joined_call`."""
    return _l2_normalize(None, x, axis, epsilon, accumulate_dtype=accumulate_dtype)


def _tf_l2_words(epsilon: Any) -> Any:
    """TF's words when ``l2_normalize`` refuses a dtype: the first op that fails."""

    def words(dtype: Any) -> str:
        name = dtype_name(dtype)
        if "int" in name and isinstance(epsilon, float):  # maximum(sum, epsilon) converts it
            return tf_cannot_convert(epsilon, dtype)
        return tf_attr(dtype)  # Square (bool), Rsqrt (integers)

    return words


def _tf_epsilon_shape(x: tuple[int, ...], ax: tuple[int, ...] | None, eps: tuple[int, ...]) -> str:
    """TF's words for an ``epsilon`` that cannot broadcast: ``Maximum`` meets the sum first."""
    summed = tuple(1 if ax is None or i in ax else d for i, d in enumerate(x))
    both = tf_broadcast(summed, eps)
    return tf_incompatible(summed, eps) if both is None else tf_incompatible(x, both)


@hints_keywords
def normalize(
    tensor: ArrayT,
    ord: NormOrd = "euclidean",
    axis: int | tuple[int, int] | list[int] | None = None,
    name: str | None = None,
) -> tuple[ArrayT, ArrayT]:
    """Divide ``tensor`` by its norm and return both, as ``tf.linalg.normalize``.

    Parameters
    ----------
    tensor : array
        Input of a floating or complex dtype (or integer, with ``ord`` 1 or inf).
        A sparse torch tensor or JAX ``BCOO`` array is made dense first (repeated indices
        summed), as TF converts an ``IndexedSlices``; the result is dense.
    ord, axis
        As in :func:`norm`.
    name : str, optional
        Accepted for compatibility with TF and ignored.

    Returns
    -------
    normalized : array
        ``tensor / norm``. For integer input this is float64 (float32 for 8- and 16-bit
        integers), as TF's true division gives.
    norm : array
        The norm with the reduced axes kept (size 1), cast to ``tensor``'s dtype.

    Raises
    ------
    ValueError, TypeError
        As :func:`norm`.

    See Also
    --------
    tf.linalg.normalize : The TensorFlow function this mirrors.
    l2_normalize : Multiplies by ``rsqrt`` with an epsilon instead.

    Notes
    -----
    There is no epsilon: a zero vector gives NaN, as in TF.

    Examples
    --------
    >>> import numpy as np
    >>> import anyclip
    >>> normalized, n = anyclip.normalize(np.array([3.0, 4.0], dtype=np.float32))
    >>> normalized, n
    (array([0.6, 0.8], dtype=float32), array([5.], dtype=float32))
    """
    return cast("tuple[ArrayT, ArrayT]", _normalize(None, tensor, ord, axis))


@densified("tensor")
def _normalize(
    kernels: Kernels | None,
    tensor: Any,
    ord: Any = "euclidean",
    axis: Any = None,
    name: str | None = None,
) -> tuple[Any, Any]:
    """:func:`normalize` with ``kernels`` (``None``: :func:`kernels_for` chooses)."""
    xp, x, canonical_ord, ax = _prepare_norm(tensor, ord, axis)
    k = kernels_for(xp, (x,)) if kernels is None else kernels
    return _core.normalize(xp, k, x, canonical_ord, ax)
