"""Read a task's text with the corpus readers (any corpus format, "-" for standard input;
labels and other fields ignored) and split it as the index was split."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tapt.indexer.reading.reader import HubDataset, read_text


@dataclass(frozen=True)
class Task:
    """A task's sentences and where they came from.

    Attributes:
        files: The files read, in order.
        sha256: One SHA-256 over their bytes (a selection manifest records it).
        sentences: The task's sentences, documents one after another.
    """

    files: list[str]
    sha256: str
    sentences: list[str]


def load_task(paths: Iterable[str | Path | HubDataset] | str | Path, split: bool = True,
              text_field: str = "text", *, input_format: str | None = None,
              hf_split: str | None = None) -> Task:
    """The task's sentences; `split` follows the index's setting so units match the corpus.

    Args:
        paths: Task files, folders, URLs, HubDataset specs, or "-" (standard input: JSONL if its
            first non-blank line is a JSON object, else plain text). Repeated paths are read once.
        split: Split records into sentences (the index's `split_sentences`).
        text_field: Field/column holding the text.
        input_format: Read every file as this format instead of by its suffix.
        hf_split: The split of a DatasetDict folder or Hub dataset.

    Returns:
        The Task.
    """
    text = read_text(paths, split, text_field=text_field, input_format=input_format,
                     hf_split=hf_split, what="the task", choose_format=True)
    return Task(text.files, text.sha256, text.sentences)
