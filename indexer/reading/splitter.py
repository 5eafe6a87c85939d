"""Sentence splitting and segmenting.

Sentences come from pysbd (Sadvilkar & Neumann 2020), a rule-based splitter that passes the
"Golden Rules" boundary suite for English and needs no model download. Text with no inner
sentence-final punctuation skips pysbd entirely (most short records), which keeps splitting far
faster than embedding. Pathological input stays bounded (pysbd's time grows faster than linearly
with the length of its input): text longer than 10,000 characters goes to pysbd in blocks of at
most that length, cut after the last ". " (else the last space) before the limit, and a
"sentence" longer than 10,000 characters (far beyond any encoder's window) is cut the same way. Segments are runs of at most `size` consecutive sentences of one document:
they never cross a document boundary (TADPOLE, section 3.2).
"""

from __future__ import annotations

import re
from functools import cached_property

import numpy as np

_INNER_BOUNDARY = re.compile(r"[.!?\u2026][\"')\]\u201d\u2019]*\s+\S")
_SPACE = re.compile(r"\s+")
MAX_BLOCK_CHARS = 10_000
MAX_SENTENCE_CHARS = 10_000


def cut_long(text: str, limit: int) -> list[str]:
    """Pieces of at most `limit` characters, cut after the last ". " (else space) before it."""
    pieces = []
    start, n = 0, len(text)
    while n - start > limit:
        lo, hi = start + limit // 2, start + limit
        cut = text.rfind(". ", lo, hi) + 1 or text.rfind(" ", lo, hi + 1)
        cut = cut if cut > start else hi
        pieces.append(text[start:cut].strip())
        start = cut
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


class SentenceSplitter:
    """Split text into sentences; `split=False` keeps each text as one sentence."""

    def __init__(self, split: bool = True, language: str = "en") -> None:
        self.split = split
        self.language = language

    @cached_property
    def _segmenter(self):  # imported lazily: pysbd compiles many regexes on import
        import pysbd

        class Segmenter(pysbd.Segmenter):
            sentences_with_char_spans = _sentences_with_char_spans

        return Segmenter(language=self.language, clean=False)

    def __call__(self, text: str) -> list[str]:
        text = _SPACE.sub(" ", text).strip()
        if not text:
            return []
        if not self.split or not _INNER_BOUNDARY.search(text):
            sentences = [text]
        else:
            sentences = [p.strip() for block in cut_long(text, MAX_BLOCK_CHARS)
                         for p in self._segmenter.segment(block)]
        if any(len(s) > MAX_SENTENCE_CHARS for s in sentences):
            sentences = [p for s in sentences for p in cut_long(s, MAX_SENTENCE_CHARS)]
        return [s for s in sentences if s]


def _sentences_with_char_spans(self, sentences: list[str]) -> list:
    """pysbd's `Segmenter.sentences_with_char_spans`, span for span, with `str.find` instead of
    a regex compiled from every sentence's text (`re.escape(sent) + "\\s*"`): that compile
    was a third of the splitting time. Each sentence is looked up from the start of the text,
    match after non-overlapping match, and the first one ending past the previous sentence is
    kept with the whitespace after it (`str.isspace` is the regex's `\\s` for text)."""
    from pysbd.utils import TextSpan

    text = self.original_text
    spans = []
    prior_end = 0
    for sent in sentences:
        if not sent:                                   # the regex path, for the empty string
            spans.extend(_regex_span(sent, text, prior_end))
            prior_end = spans[-1].end if spans and spans[-1].end > prior_end else prior_end
            continue
        pos = 0
        while True:
            start = text.find(sent, pos)
            if start < 0:
                break
            end = start + len(sent)
            while end < len(text) and text[end].isspace():
                end += 1
            if end > prior_end:
                spans.append(TextSpan(text[start:end], start, end))
                prior_end = end
                break
            pos = end
    return spans


def _regex_span(sent: str, text: str, prior_end: int) -> list:
    from pysbd.utils import TextSpan

    for match in re.finditer(re.escape(sent) + r"\s*", text):
        if match.end() > prior_end:
            return [TextSpan(match.group(), match.start(), match.end())]
    return []


def segment_offsets(doc_offsets: np.ndarray, size: int) -> np.ndarray:
    """CSR offsets of segments: each document's sentence range cut into runs of at most `size`.

    `doc_offsets` are CSR offsets of documents over sentence rows (length n_docs + 1). The result
    has length n_segments + 1, and segment s covers rows [out[s], out[s+1]).
    """
    if size < 1:
        raise ValueError("segment size must be >= 1")
    doc_offsets = np.asarray(doc_offsets, dtype=np.int64)
    starts = doc_offsets[:-1]
    per_doc = np.maximum((np.diff(doc_offsets) + size - 1) // size, 0)
    n_segments = int(per_doc.sum())
    # segment s of document d starts at starts[d] - first_segment[d] * size + s * size: the
    # per-document base repeated (with one more entry for the end) straight into the result,
    # then s * size added in chunks; this runs over every segment of a corpus, so it holds
    # one int64 per segment and no more
    base = np.cumsum(per_doc)
    base -= per_doc
    base *= -size
    base += starts
    out = np.repeat(np.append(base, 0), np.append(per_doc, 1))
    del base, per_doc
    for lo in range(0, n_segments, 1 << 20):
        hi = min(n_segments, lo + (1 << 20))
        out[lo:hi] += np.arange(lo, hi, dtype=np.int64) * size
    out[-1] = int(doc_offsets[-1]) if len(doc_offsets) else 0
    return out


def segment_docs(doc_offsets: np.ndarray, seg_offsets: np.ndarray) -> np.ndarray:
    """Document index of every segment."""
    return docs_of_rows(doc_offsets, np.asarray(seg_offsets[:-1]))


def docs_of_rows(doc_offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Document index of each sentence row."""
    return np.searchsorted(np.asarray(doc_offsets), np.asarray(rows), side="right") - 1
