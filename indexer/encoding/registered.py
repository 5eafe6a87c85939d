"""Encoders registered under a model name (`tapt.extend.register_encoder`): a model argument
naming one makes that encoder instead of loading a sentence-transformers model, wherever a
model is loaded (a build, an add, a selection embedding its task), and an index built with it
records the name and loads it by that name again."""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

from tapt.errors import InputError
from tapt.util.registry import Registry

T = TypeVar("T", bound=type)

ENCODERS: Registry[type] = Registry("encoder", None)
REQUIRED = ("encode", "token_counts", "dim", "max_length", "weights_sha256", "device")


def register(cls: T) -> T:
    """Class decorator: `model=cls.name` (`--model NAME`) makes this encoder.

    The class is made with the keywords `device` and `backend` as the caller gave them ("auto"
    unless chosen), where its constructor takes them, and must have the members of the `Encoder` protocol (`encode`,
    `token_counts`, `dim`, `max_length`, `weights_sha256`): an index records its `name`, and
    refuses another encoder by its weights' digest, dimension and maximum length.

    Returns:
        The class, unchanged.
    """
    ENCODERS.add(cls.name, cls)
    return cls


def registered(spec: Any) -> bool:
    """Whether a model argument names a registered encoder."""
    if not isinstance(spec, str):
        return False
    ENCODERS.load()
    return spec in ENCODERS.by_name


def load_registered(spec: str, device: str, backend: str) -> Any:
    """The registered encoder called `spec`, made for `device` and `backend`.

    Raises:
        InputError: what it made lacks a member of the `Encoder` protocol.
    """
    cls = ENCODERS[spec]
    accepted = inspect.signature(cls).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    encoder = cls(**{name: value for name, value in (("device", device), ("backend", backend))
                     if takes_any or name in accepted})
    missing = [member for member in REQUIRED if not hasattr(encoder, member)]
    if missing:
        raise InputError(f"{type(encoder).__name__} is not an encoder: it has no "
                         f"{', '.join(missing)} (see tapt.indexer.encoding.encoder.Encoder)",
                         param="model")
    encoder.spec = None         # the index records the name, which makes it again
    return encoder
