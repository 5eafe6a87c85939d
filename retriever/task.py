"""Read a task's text (files like the corpus; labels ignored) and split it as the index was."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tapt.errors import InputError
from tapt.util.files import sha256_files
from tapt.indexer.reader import expand_paths, read_texts
from tapt.indexer.splitter import SentenceSplitter


@dataclass(frozen=True)
class Task:
    files: list[str]
    sha256: str
    sentences: list[str]


def load_task(paths: Sequence[str | Path], split: bool = True, text_field: str = "text") -> Task:
    """The task's sentences; `split` follows the index's setting so units match the corpus."""
    files = expand_paths(paths)
    splitter = SentenceSplitter(split=split)
    sentences = [s for text in read_texts(files, text_field=text_field) for s in splitter(text)]
    if not sentences:
        raise InputError("the task holds no sentences")
    return Task([str(p) for p in files], sha256_files(files), sentences)
