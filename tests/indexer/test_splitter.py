import numpy as np
import pytest

from tapt.indexer.reading.splitter import SentenceSplitter, segment_docs, segment_offsets


def test_pysbd_splits_and_respects_abbreviations():
    split = SentenceSplitter()
    assert split("Dr. Smith went to Washington. He arrived at 5 p.m. on Monday! Was it fun?") == [
        "Dr. Smith went to Washington.", "He arrived at 5 p.m. on Monday!", "Was it fun?"]
    assert split("  One   sentence only  ") == ["One sentence only"]
    assert split("   ") == []
    assert SentenceSplitter(split=False)("A. B. C.") == ["A. B. C."]


def test_segments_cut_documents_and_never_cross_them():
    docs = np.array([0, 3, 4, 20, 20 + 15, 20 + 16])
    offsets = segment_offsets(docs, 5)
    assert offsets.tolist() == [0, 3, 4, 9, 14, 19, 20, 25, 30, 35, 36]
    assert segment_docs(docs, offsets).tolist() == [0, 1, 2, 2, 2, 2, 3, 3, 3, 4]


def test_segments_of_empty_documents_and_of_none():
    docs = np.array([0, 0, 3, 3, 3, 10, 10])
    assert segment_offsets(docs, 3).tolist() == [0, 3, 6, 9, 10]
    assert segment_offsets(np.array([0]), 4).tolist() == [0]
    assert segment_offsets(np.array([0, 0]), 4).tolist() == [0]


@pytest.mark.parametrize("seed", range(5))
def test_segment_property_random_documents(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=50)
    docs = np.concatenate(([0], np.cumsum(lengths)))
    for size in (1, 7, 15, 100):
        offsets = segment_offsets(docs, size)
        seg_len = np.diff(offsets)
        assert (seg_len >= 1).all() and (seg_len <= size).all()
        assert offsets[-1] == docs[-1]
        owner = segment_docs(docs, offsets)
        # the last row of every segment lies in the same document as its first row
        assert (np.searchsorted(docs, offsets[1:] - 1, side="right") - 1 == owner).all()
        assert len(offsets) - 1 == int(np.ceil(lengths / size).sum())


def test_char_spans_by_find_equal_pysbds_regex_spans():
    """The splitter finds each sentence's span with `str.find` instead of compiling a regex of
    it: the same sentences, span for span, as pysbd's own `sentences_with_char_spans`."""
    import random

    import pysbd

    from tapt.indexer.reading.splitter import SentenceSplitter

    ours = SentenceSplitter()._segmenter
    theirs = pysbd.Segmenter(language="en", clean=False)
    pieces = ["Dr. Smith went to Washington.", "He said: \"Stop!\"", "It cost $3.50 a day.",
              "Repeat.", "Repeat.", "See e.g. the U.S.A. report (p. 7).", "Why?\u00a0Because.",
              "Tabs\tand\nnewlines...", "Ellipsis\u2026 then more.", "1. First item.",
              "Mr. and Mrs. Jones arrived at 5 p.m. yesterday.", "«Quoted.» Next one!"]
    rng = random.Random(0)
    texts = [" ".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
             for _ in range(300)]
    texts += ["Repeat. Repeat. Repeat.", "  Leading space. And trailing.  ", "x. " * 50]
    for text in texts:
        want = [(s.sent, s.start, s.end) for s in theirs.sentences_with_char_spans(
            (setattr(theirs, "original_text", text), theirs.processor(text).process())[1])]
        ours.original_text = text
        got = [(s.sent, s.start, s.end)
               for s in ours.sentences_with_char_spans(ours.processor(text).process())]
        assert got == want, text
        assert ours.segment(text) == theirs.segment(text)
