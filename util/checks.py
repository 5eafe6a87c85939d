"""Checks of argument values shared by the Python API's entry points."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapt.errors import InputError


def whole_number(value: Any, param: str, minimum: int = 1, maximum: int | None = None) -> int:
    """`value` as an int, refused unless it is a whole number (not a bool) of at least `minimum`
    (and at most `maximum`).

    Args:
        value: What the caller passed.
        param: The parameter's name, for the message.
        minimum: The smallest value allowed.
        maximum: The largest value allowed, or None.

    Returns:
        The value as a Python int.

    Raises:
        InputError: not an integer, or below `minimum` or above `maximum`.
    """
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:24] + "..."
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InputError(f"must be a whole number of at least {minimum}, got {shown}",
                         param=param)
    if maximum is not None and value > maximum:
        raise InputError(f"is too large: at most {maximum:,}, got {shown}", param=param)
    return int(value)
