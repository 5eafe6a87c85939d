"""Checks of argument values shared by the Python API's entry points."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapt.errors import InputError


def whole_number(value: Any, param: str, minimum: int = 1) -> int:
    """`value` as an int, refused unless it is a whole number (not a bool) of at least `minimum`.

    Args:
        value: What the caller passed.
        param: The parameter's name, for the message.
        minimum: The smallest value allowed.

    Returns:
        The value as a Python int.

    Raises:
        InputError: not an integer, or below `minimum`.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InputError(f"must be a whole number of at least {minimum}, got {value!r}",
                         param=param)
    return int(value)
