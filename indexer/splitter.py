"""Sentence splitting and segmenting.

Sentences come from pysbd (Sadvilkar & Neumann 2020), a rule-based splitter that passes the
"Golden Rules" boundary suite for English and needs no model download. Text with no inner
sentence-final punctuation skips pysbd entirely (most short records), which keeps splitting far
faster than embedding. Segments are runs of at most `size` consecutive sentences of one document:
they never cross a document boundary (TADPOLE, section 3.2).
"""

from __future__ import annotations

import re
from functools import cached_property

import numpy as np

_INNER_BOUNDARY = re.compile(r"[.!?\u2026][\"')\]\u201d\u2019]*\s+\S")
_SPACE = re.compile(r"\s+")


class SentenceSplitter:
    """Split text into sentences; `split=False` keeps each text as one sentence."""

    def __init__(self, split: bool = True, language: str = "en") -> None:
        self.split = split
        self.language = language

    @cached_property
    def _segmenter(self):  # imported lazily: pysbd compiles many regexes on import
        import pysbd

        return pysbd.Segmenter(language=self.language, clean=False)

    def __call__(self, text: str) -> list[str]:
        text = _SPACE.sub(" ", text).strip()
        if not text:
            return []
        if not self.split or not _INNER_BOUNDARY.search(text):
            return [text]
        parts = (p.strip() for p in self._segmenter.segment(text))
        return [p for p in parts if p]


def segment_offsets(doc_offsets: np.ndarray, size: int) -> np.ndarray:
    """CSR offsets of segments: each document's sentence range cut into runs of at most `size`.

    `doc_offsets` are CSR offsets of documents over sentence rows (length n_docs + 1). The result
    has length n_segments + 1, and segment s covers rows [out[s], out[s+1]).
    """
    if size < 1:
        raise ValueError("segment size must be >= 1")
    doc_offsets = np.asarray(doc_offsets, dtype=np.int64)
    starts, ends = doc_offsets[:-1], doc_offsets[1:]
    lengths = ends - starts
    per_doc = np.maximum((lengths + size - 1) // size, 0)
    n_segments = int(per_doc.sum())
    doc_of_segment = np.repeat(np.arange(len(starts)), per_doc)
    first_segment = np.concatenate(([0], np.cumsum(per_doc)[:-1])) if len(per_doc) else per_doc
    within = np.arange(n_segments) - np.repeat(first_segment, per_doc)
    seg_starts = starts[doc_of_segment] + within * size
    total = int(doc_offsets[-1]) if len(doc_offsets) else 0
    return np.concatenate((seg_starts, [total])).astype(np.int64)


def segment_docs(doc_offsets: np.ndarray, seg_offsets: np.ndarray) -> np.ndarray:
    """Document index of every segment."""
    return np.searchsorted(np.asarray(doc_offsets), np.asarray(seg_offsets[:-1]), side="right") - 1
