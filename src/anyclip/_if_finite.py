"""``optax.apply_if_finite``'s rule: skip a non-finite step, give up after too many in a row.

Layer: array-API core, beside :mod:`anyclip._history`. Pure functions of device arrays (no
Python ``if`` on a value, no host read), so that a step runs under ``jax.jit`` and
``torch.compile``. The adapters (:func:`anyclip.optax.apply_if_finite`,
:func:`anyclip.torch.apply_if_finite`) keep the counters and undo or zero the step.

The rule, as optax 0.2.8's ``apply_if_finite`` (``optax/transforms/_conditionality.py``):
a step is finite when every element of every update is (integer updates always are);
``notfinite_count`` counts the non-finite steps in a row (0 after a finite one),
``total_notfinite`` all of them; both saturate at ``2**31 - 1`` (``optax.safe_increment``).
The step is taken when finite, or when ``notfinite_count`` (this step included) exceeds
``max_consecutive_errors``: with 0 or less, every step is taken.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

from anyclip._numerics import constant
from anyclip._typing import Namespace

__all__ = [
    "INT_MAX",
    "IfFiniteDecision",
    "all_finite",
    "check_max_errors",
    "if_finite_step",
    "saturating_increment",
]

#: The largest count: counters saturate there instead of wrapping (``optax.safe_increment``).
INT_MAX = 2**31 - 1


def check_max_errors(value: Any) -> int:
    """``max_consecutive_errors`` checked: an integer (any sign, as optax takes it).

    Returned clamped to ``[-1, INT_MAX]``, which decides alike (the count never exceeds
    ``INT_MAX``; every value below 0 lets every step through, as 0 does).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        msg = (
            "`max_consecutive_errors` must be an integer (how many non-finite steps in a row "
            f"are skipped), got {type(value).__name__} {value!r}; pass e.g. 5"
        )
        raise TypeError(msg)
    return max(-1, min(int(value), INT_MAX))


class IfFiniteDecision(NamedTuple):
    """What :func:`if_finite_step` returns (optax's ``ApplyIfFiniteState`` counters).

    ``apply`` (bool): take the step. ``finite`` (bool): the step was finite (optax's
    ``last_finite``). ``notfinite_count``, ``total_notfinite`` (int32): the new counters.
    """

    apply: Any
    finite: Any
    notfinite_count: Any
    total_notfinite: Any


def all_finite(xp: Namespace, leaves: Sequence[Any], like: Any = None) -> Any:
    """A 0-d bool array: every element of every array of ``leaves`` is finite.

    ``like``: an array whose device holds the result when ``leaves`` is empty (then True).
    All of ``leaves`` must be on one device.
    """
    flags = [xp.all(xp.isfinite(leaf)) for leaf in leaves]
    if not flags:
        return constant(xp, True, xp.bool, like)
    if len(flags) == 1:
        return flags[0]
    return xp.all(xp.stack(flags))


def saturating_increment(xp: Namespace, count: Any) -> Any:
    """``count + 1`` that stays at :data:`INT_MAX` (optax's counters), in ``count``'s dtype."""
    top = constant(xp, INT_MAX, count.dtype, count)
    return xp.where(count < top, count + constant(xp, 1, count.dtype, count), count)


def if_finite_step(
    xp: Namespace,
    finite: Any,
    notfinite_count: Any,
    total_notfinite: Any,
    max_consecutive_errors: int,
) -> IfFiniteDecision:
    """Decide a step from its finiteness and the counters (``max_consecutive_errors`` checked)."""
    zero = constant(xp, 0, notfinite_count.dtype, notfinite_count)
    consecutive = xp.where(finite, zero, saturating_increment(xp, notfinite_count))
    limit = constant(xp, max_consecutive_errors, consecutive.dtype, consecutive)
    return IfFiniteDecision(
        apply=xp.logical_or(finite, consecutive > limit),
        finite=finite,
        notfinite_count=consecutive,
        total_notfinite=xp.where(
            finite, total_notfinite, saturating_increment(xp, total_notfinite)
        ),
    )
