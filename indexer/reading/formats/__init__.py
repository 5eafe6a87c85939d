"""Corpus formats: one reader per format, each in its own module, chosen by file suffix.

To add a format, write a module here with a `Format` subclass (see `base.Format`) decorated
with `@register` (`base.register`: the registry lives beside the interface, below the formats);
the registry imports every module of this package the first time it is asked, so
`--input-format`, the known-format messages (in the formats' `order`) and folder walking pick
it up. A format registered from any other module counts once that module is imported.
"""

from __future__ import annotations

from tapt.indexer.reading.formats.base import (
    FORMATS,
    Format,
    InputFile,
    InvalidUtf8,
    ReadOptions,
    Row,
    Scanned,
    TextDocs,
    by_name,
    folder_format,
    get,
    known,
    names,
    register,
)
from tapt.indexer.reading.formats.sources import HubDataset, Source

__all__ = ["FORMATS", "Format", "ReadOptions", "Row", "Scanned", "TextDocs", "InvalidUtf8", "InputFile",
           "Source", "HubDataset", "register", "names", "get", "known", "by_name", "folder_format"]
