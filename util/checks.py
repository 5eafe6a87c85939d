"""Checks of argument values shared by the Python API's entry points: each returns the value in
the type tapt uses, or raises an InputError naming the parameter."""

from __future__ import annotations

import functools
import logging
import math
import os
from typing import Any, Callable, Iterable, TypeVar

import numpy as np

from tapt.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])


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


def whole_numbers(value: Any, param: str, minimum: int = 1) -> tuple[int, ...]:
    """Whole numbers given as a comma-separated string ("0,1,2"), one number, or a list or
    tuple of them, as a tuple in the order given.

    Raises:
        InputError: something else, or a number below `minimum`.
    """
    if isinstance(value, str):
        try:
            value = [int(s) for s in value.split(",") if s.strip()]
        except ValueError as exc:
            raise InputError(f"must be whole numbers such as 0,1,2, got {value!r}",
                             param=param) from exc
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = [int(value)]
    if not isinstance(value, (list, tuple)):
        raise InputError(f"must be whole numbers such as 0,1,2, got {shown(value)}",
                         param=param)
    return tuple(whole_number(s, param, minimum=minimum) for s in value)


def shown(value: Any) -> str:
    """`repr(value)` for a message, cut short (a 400-digit integer, a long list)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:40] + "..." + text[-12:]


def real_number(value: Any, param: str, *, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False, what: str = "") -> float:
    """`value` as a float, refused unless it is a finite number (not a bool or a string) in the
    range given.

    Args:
        value: What the caller passed.
        param: The parameter's name, for the message.
        low: The smallest value allowed (excluded when `low_open`), or None.
        high: The largest value allowed (excluded when `high_open`), or None.
        low_open: Exclude `low` itself.
        high_open: Exclude `high` itself.
        what: How the range reads in the message ("a positive number"), by default the bounds.

    Returns:
        The value as a Python float.

    Raises:
        InputError: not a number, not finite, or out of range.
    """
    if not what:
        left = "" if low is None else ("(" if low_open else "[") + f"{low:g}"
        right = "" if high is None else f"{high:g}" + (")" if high_open else "]")
        what = (f"a number in {left or '(-inf'}, {right or 'inf)'}" if left or right
                else "a finite number")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                      np.floating)):
        raise InputError(f"must be {what}, got {shown(value)}", param=param)
    try:
        number = float(value)
    except OverflowError:       # an int with hundreds of digits
        number = math.inf
    ok = math.isfinite(number)
    if ok and low is not None:
        ok = number > low if low_open else number >= low
    if ok and high is not None:
        ok = number < high if high_open else number <= high
    if not ok:
        raise InputError(f"must be {what}, got {shown(value)}", param=param)
    return number


def flag(value: Any, param: str) -> bool:
    """`value` as a bool, refused unless it is True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(f"must be True or False, got {shown(value)}", param=param)
    return bool(value)


def choice(value: Any, param: str, choices: tuple[str, ...]) -> str:
    """`value`, refused unless it is one of the strings `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"must be one of {', '.join(choices)}, got {shown(value)}", param=param)
    return value


def did_you_mean(name: str, known: Iterable[str], value: bool = False) -> str:
    """`: did you mean `budget`?` for the known name closest to a misspelt one (difflib), or
    "" when none is close: what an error about an unknown keyword appends to its first part.

    Args:
        name: The name given.
        known: The names that exist.
        value: They are values, not parameter names: quoted as values (`'medical'`).

    Returns:
        The suggestion, or "".
    """
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if not close:
        return ""
    return f": did you mean {close[0]!r}?" if value else f": did you mean `{close[0]}`?"


def renamed(given: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """Keywords with the old spelling of each renamed setting taken under its new name, for one
    release, with a warning.

    Args:
        given: The keywords given.
        names: The new name by the old.

    Returns:
        A copy of `given` under the new names.

    Raises:
        InputError: a setting given under both its old and its new name.
    """
    out = dict(given)
    for old, new in names.items():
        if old in out:
            if new in out:
                raise InputError(f"give `{new}` only (`{old}` is its old name)", param=old)
            logging.getLogger("tapt").warning("`%s` is now `%s`; the old name goes in the next "
                                              "release", old, new)
            out[new] = out.pop(old)
    return out


def renamed_keywords(**names: str) -> Callable[[F], F]:
    """Decorator: the function takes the old keyword of each renamed setting (`address=
    "ray_address"`) under its new name, for one release, with a warning (`renamed`)."""
    def decorate(func: F) -> F:
        @functools.wraps(func)
        def taking_old_names(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **renamed(kwargs, names))
        return taking_old_names  # type: ignore[return-value]
    return decorate


def path_text(value: Any, param: str | None) -> str:
    """A path as a string, refused unless it is a non-empty str or os.PathLike. An empty string
    is refused by name: to the system it is the current directory (what an unset shell variable
    gives, `--task "$TASK"`), never what was meant."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) and not value.strip():
        raise InputError(f"{value!r} is an empty path (an unset shell variable?); give a file, "
                         "folder or URL", param=param)
    if not isinstance(value, str) or "\x00" in value:
        raise InputError(f"must be a path, got {shown(value)}", param=param)
    return value


def path_list(value: Any, param: str) -> tuple[str, ...]:
    """One path, or a list or tuple of paths, as a tuple of strings; None is no paths."""
    if value is None:
        return ()
    if isinstance(value, (str, os.PathLike)):
        return (path_text(value, param),)
    if not isinstance(value, (list, tuple)):
        raise InputError(f"must be a path or a list of paths, got {shown(value)}", param=param)
    return tuple(path_text(v, param) for v in value)
