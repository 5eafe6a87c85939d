"""A selection method's parameters: `param` fields of a frozen `Params` dataclass, checked when
made; their metadata (help, choices, bounds, `requires`) also drives the CLI options and the API
docs (`param_choices`, `param_type`)."""

from __future__ import annotations

import dataclasses
import numbers
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

import numpy as np

from tapt.errors import InputError


class _Given:
    """`requires=(name, GIVEN)`: the parameter applies only when `name` is given (not None)."""

    def __repr__(self) -> str:
        return "GIVEN"


GIVEN: Any = _Given()


# self-training rounds of a classifier: a few suffice; more only hold a selection for hours
MAX_ROUNDS = 100


def param(default: Any, help: str, *, choices: Sequence[str] | Callable[[], Sequence[str]] | None
          = None, minimum: float | None = None, maximum: float | None = None,
          short: str | None = None, requires: tuple[str, Any] | None = None) -> Any:
    """A method parameter: a dataclass field whose metadata drives validation and the CLI option.

    Args:
        default: The default value (its field's type annotation gives the type).
        help: One sentence for `--help` and the API docs; name other parameters in backticks.
        choices: The allowed values (or a function returning them, for lists known only once
            every method is registered). A `Literal[...]` annotation gives them too.
        minimum: The smallest allowed number.
        maximum: The largest allowed number.
        short: A one-letter CLI alias such as "-k".
        requires: (other parameter, value): the parameter only applies when the other one has
            that value (`GIVEN`: any value but None); giving it explicitly otherwise is an
            error.

    Returns:
        A `dataclasses.field`.
    """
    return field(default=default, metadata={"help": help, "choices": choices, "minimum": minimum,
                                            "maximum": maximum, "short": short,
                                            "requires": requires})


@dataclass(frozen=True)
class Params:
    """Base of every method's parameters. Subclasses are frozen dataclasses of `param` fields;
    creating one checks every value (type, choices, minimum) and then `validate`.

    Raises:
        InputError: naming the parameter (`param=`) whose value cannot work.
    """

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = _checked(f.name, getattr(self, f.name), hints[f.name])
            object.__setattr__(self, f.name, value)
            choices = param_choices(f, hints[f.name])
            if choices is not None and value is not None and value not in choices:
                raise InputError(f"{value!r} is not one of {', '.join(map(str, choices))}",
                                 param=f.name)
            minimum = f.metadata.get("minimum")
            if minimum is not None and value is not None and value < minimum:
                raise InputError(f"must be at least {minimum:g}, got {value!r}", param=f.name)
            maximum = f.metadata.get("maximum")
            if maximum is not None and value is not None and value > maximum:
                raise InputError(f"must be at most {maximum:g}, got {value!r}", param=f.name)
            if f.name.endswith("_model") and isinstance(value, str):
                _refuse_missing_model(f.name, value)    # before the index is read or scored
        self.validate()

    def validate(self) -> None:
        """Checks that involve several fields or parsing (override; raise InputError)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _refuse_missing_model(name: str, value: str) -> None:
    """A model parameter (`tuned_model`, `lm_model`, ...) that can name no model, found from
    the file system alone (`missing_model`), refused as that parameter's mistake."""
    from tapt.indexer.encoding.models import missing_model

    missing = missing_model(value)
    if missing is not None:
        raise InputError(missing, param=name)


def param_choices(f: dataclasses.Field, hint: Any) -> tuple[Any, ...] | None:
    """The allowed values of a parameter field, if it has a fixed set."""
    choices = f.metadata.get("choices")
    if callable(choices):
        choices = choices()
    if choices is not None:
        return tuple(choices)
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    return None


def param_type(hint: Any) -> tuple[type, bool]:
    """(int, float, str or bool; whether None is allowed) of a field's annotation."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        hint = args[0]
    if typing.get_origin(hint) is Literal:
        return type(typing.get_args(hint)[0]), optional
    return hint, optional


def _checked(name: str, value: Any, hint: Any) -> Any:
    kind, optional = param_type(hint)
    if value is None:
        if optional:
            return None
        raise InputError("needs a value", param=name)
    if kind is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
    elif kind is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
            return int(value)
    elif kind is float:
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            value = float(value)
            if np.isfinite(value):
                return value
            raise InputError(f"must be a finite number, got {value!r}", param=name)
    elif kind is str:
        if isinstance(value, str):
            return value
    else:
        return value
    raise InputError(f"must be {'an integer' if kind is int else 'a ' + kind.__name__}, got "
                     f"{value!r}", param=name)


@dataclass(frozen=True)
class NoParams(Params):
    """A method without parameters of its own."""


@dataclass(frozen=True)
class ScanParams(Params):
    """Parameters of a `SentenceScored` method whose scorer can run on an index's int8 codes
    (its `scorer` returns an object with `for_codes`, such as `scoring.Linear`)."""

    scan: Literal["exact", "codes"] = param(
        "exact", "exact: score every stored embedding; codes: score every row on the index's "
                 "int8 codes (an index built or reindexed with `codes` int8; a method that "
                 "fits a classifier fits on them too), then rescore the best `rescore` x "
                 "budget exactly.")
    rescore: float = param(4.0, "With `scan` codes: how many times the budget is rescored from "
                                "the stored embeddings (the best segments by their code "
                                "scores, or sentences where a fit ranks every row).",
                           minimum=1.0, maximum=1e6, requires=("scan", "codes"))


def requirement_met(params: Params, requires: tuple[str, Any]) -> bool:
    """Whether `params` meets a parameter's `requires` (other parameter, value or `GIVEN`)."""
    other, value = requires
    have = getattr(params, other)
    return have is not None if value is GIVEN else have == value


def scans_codes(params: Params) -> bool:
    """Whether a method's parameters ask it to scan the int8 codes (`ScanParams`)."""
    return getattr(params, "scan", "exact") == "codes"
