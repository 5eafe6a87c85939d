"""The registry of selection methods: `register` once, look up by name, list in order.

Every module of this package other than the infrastructure (`base`, `params`, `segments`,
`ranking_inputs`, `registry`, `learned_scorers`, `candidates` and `tuned`) holds one method and
is imported the first time the registry is asked for anything, so adding a method is adding one
file (`tapt.util.registry`: formats and executors register the same way).
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from tapt.errors import InputError
from tapt.retriever.methods.base import Method
from tapt.util.registry import Registry

# Names the selection itself uses (the CLI's options and `Index.select`'s arguments).
RESERVED = ("method", "idx", "index", "task", "text_field", "budget", "out", "overwrite",
            "as_json", "segment_size", "seed", "model", "device", "backend", "batch_size",
            "progress", "encoder", "params")

_INFRASTRUCTURE = {"base", "params", "segments", "ranking_inputs", "registry",
                   "learned_scorers", "candidates", "tuned"}
METHODS: Registry[Method] = Registry("method", __name__.rpartition(".")[0], _INFRASTRUCTURE)

M = TypeVar("M", bound=type)


def register(cls: M) -> M:
    """Class decorator: register one instance of a `Method` subclass under its `name`.

    Args:
        cls: The `Method` subclass.

    Returns:
        The class, unchanged.

    Raises:
        ValueError: the class lacks a name or summary, or the name is taken.
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or not getattr(cls, "summary", ""):
        raise ValueError(f"{cls.__name__}: a method needs a `name` and a one-line `summary`")
    if cls.budget not in ("required", "optional", "none"):
        raise ValueError(f"{name}: budget must be required, optional or none")
    clash = [f.name for f in dataclasses.fields(cls.Params) if f.name in RESERVED]
    if clash:
        raise ValueError(f"{name}: parameter names {clash} are taken by every selection")
    METHODS.add(name, cls())
    return cls


def methods() -> list[Method]:
    """Every registered method, in listing order.

    Returns:
        The registered `Method` objects.
    """
    return list(METHODS)


def method_names() -> tuple[str, ...]:
    """The names of every registered method, in listing order.

    Returns:
        The names.
    """
    return METHODS.names()


def get_method(name: str) -> Method:
    """The registered method called `name`.

    Args:
        name: A method name, e.g. "fused".

    Returns:
        The registered `Method`.

    Raises:
        InputError: no method has that name (the message lists them).
    """
    try:
        return METHODS[name]
    except KeyError:
        raise InputError(f"unknown method {name!r}: use one of {', '.join(method_names())}",
                         param="method") from None


def prerank_choices() -> tuple[str, ...]:
    """Methods whose full ranking can supply candidates for detector rescoring.

    Returns:
        Their names: the choices of `iforest`'s `prerank`.
    """
    return tuple(m.name for m in methods() if m.can_prerank)


def auto_candidates() -> tuple[Method, ...]:
    """Methods `auto` chooses from (each has an embedding `scorer`).

    Returns:
        The `Method` objects.
    """
    return tuple(m for m in methods() if m.auto_candidate)
