"""Corpus formats: one reader per format, each in its own module, chosen by file suffix.

To add a format, write a module here with a `Format` subclass (see `base.Format`) decorated
with `@register` (`base.register`: the registry lives beside the interface, below the formats),
and import it at the bottom of this file; `--input-format`, the known-format
messages and folder walking pick it up from the registry.
"""

from __future__ import annotations

from tapt.indexer.reading.formats.base import (
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

# The formats, registered as imported: in the order messages list them (not sorted).
# isort: off
from tapt.indexer.reading.formats import jsonl, text, table, parquet, arrow, hf  # noqa: F401
# isort: on

__all__ = ["Format", "ReadOptions", "Row", "Scanned", "TextDocs", "InvalidUtf8", "InputFile",
           "Source", "HubDataset", "register", "names", "get", "known", "by_name", "folder_format"]
