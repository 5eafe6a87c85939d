"""Corpus formats: one reader per format, each in its own module, chosen by file suffix.

To add a format, write a module here with a `Format` subclass (see `base.Format`) decorated
with `@register`, and import it at the bottom of this file; `--input-format`, the known-format
messages and folder walking pick it up from the registry.
"""

from __future__ import annotations

from typing import TypeVar

from tapt.errors import InputError

from .base import Format, InvalidUtf8, ReadOptions, Row, Scanned, TextDocs
from .sources import COMPRESSIONS, HubDataset, InputFile, Source, compression_of

_FORMATS: dict[str, Format] = {}
F = TypeVar("F", bound=type[Format])


def register(cls: F) -> F:
    """Class decorator: make a Format available by its name and suffixes."""
    fmt = cls()
    if fmt.name in _FORMATS:
        raise ValueError(f"format {fmt.name!r} registered twice")
    for other in _FORMATS.values():
        shared = set(fmt.suffixes) & set(other.suffixes)
        if shared:
            raise ValueError(f"{fmt.name} and {other.name} both claim {sorted(shared)}")
    _FORMATS[fmt.name] = fmt
    return cls


def names() -> list[str]:
    """Names of the registered formats that files can be forced to (`input_format`)."""
    return [name for name, fmt in _FORMATS.items() if fmt.suffixes or fmt.folder]


def get(name: str) -> Format:
    """The format called `name`; InputError listing the known ones otherwise."""
    try:
        return _FORMATS[name]
    except KeyError:
        raise InputError(f"unknown format {name!r} (known: {', '.join(names())})",
                         param="input_format") from None


def known() -> str:
    """The known formats with their suffixes, for messages."""
    parts = []
    for fmt in _FORMATS.values():
        if fmt.suffixes:
            parts.append(f"{fmt.name} ({'/'.join(fmt.suffixes)}"
                         + (", also compressed" if fmt.compressible else "") + ")")
        elif fmt.folder:
            parts.append(f"{fmt.name} (a folder)")
    return "; ".join(parts) + f"; compressions {'/'.join(COMPRESSIONS)}"


def by_name(filename: str) -> tuple[Format, str | None] | None:
    """(format, compression) a file name asks for, or None when its suffix is unknown."""
    base, compression = compression_of(filename)
    lower = base.lower()
    best: tuple[int, Format] | None = None
    for fmt in _FORMATS.values():
        if compression and not fmt.compressible:
            continue
        for suffix in fmt.suffixes:
            if lower.endswith(suffix) and (best is None or len(suffix) > best[0]):
                best = (len(suffix), fmt)
    return (best[1], compression) if best else None


def folder_format(source: Source) -> Format | None:
    """The folder format that recognises this directory (a saved HF dataset), if any."""
    for fmt in _FORMATS.values():
        if fmt.folder and fmt.detect(source):
            return fmt
    return None


# The formats, in the order messages list them.
from . import jsonl, text, table, parquet, arrow, hf  # noqa: E402,F401

__all__ = ["Format", "ReadOptions", "Row", "Scanned", "TextDocs", "InvalidUtf8", "InputFile",
           "Source", "HubDataset", "register", "names", "get", "known", "by_name", "folder_format"]
