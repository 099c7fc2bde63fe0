"""Checks of one value's type and range, for :mod:`optimus_eq.validate` and the option records that check
their own fields (:class:`optimus_eq.egraph.Limits`). Kept apart from ``validate`` so that the e-graph module,
which ``validate`` reads ``Limits`` from, can use them without an import cycle."""

from __future__ import annotations

import numbers


def check_int(name: str, value, minimum: int) -> None:
    """``value`` is an int (not a bool) >= ``minimum``; TypeError or ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")


def check_seconds(name: str, value, *, positive: bool) -> None:
    """``value`` is a real number of seconds (not a bool, not NaN), > 0 (``positive``) or >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    if value != value or (value <= 0 if positive else value < 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'} seconds, got {value}")
