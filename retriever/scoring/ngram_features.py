"""A linear classifier over hashed word unigrams and bigrams, fitted and applied through an
index's stored lexical ids (`tapt.indexer.reading.lexical`): the corpus is never re-read or
re-tokenised per task.

Every predicted token of a sentence (each word and `</s>`, as the Moore-Lewis models count them)
adds two features: its word and its (previous word, word) pair, each hashed into `FEATURES`
buckets. A sentence's vector is those counts divided by sqrt(2 x its predicted tokens), the
L2 norm of the vector when no feature repeats, so long sentences do not score higher for their
length. Being linear in per-token features, a sentence's score is the sum over its tokens of one
weight per stored bigram type: each shard is scored by one gather per token, as Moore-Lewis is.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from tapt.retriever.scoring.logistic import fit_logistic
from tapt.retriever.scoring.ngram_lm import (
    TYPE_RUN,
    HashedLMs,
    ShardScorer,
    sentence_sums,
    type_runs,
)

FEATURES = 1 << 20     # a power of two: a hash's bucket is its low bits
_LOW = np.uint64(FEATURES - 1)
_MIX = np.uint64(0x9E3779B97F4A7C15)       # odd 64-bit constant (golden ratio): mixes the history


def _parts(hist: np.ndarray, word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The low bits of (hist + 1) x `_MIX` and of word: a bigram's bucket is their sum's low
    bits (the product wraps modulo 2^64, which `FEATURES` divides), a word's the second."""
    hist = np.asarray(hist, dtype=np.uint64)
    with np.errstate(over="ignore"):
        # hist + 1 so that (<s>, w), whose history hash is 0, is not the word feature of w
        mixed = (hist + np.uint64(1)) * _MIX
    return ((mixed & _LOW).astype(np.int64),
            (np.asarray(word, dtype=np.uint64) & _LOW).astype(np.int64))


def feature_ids(hist: np.ndarray, word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(word feature, bigram feature) of each predicted token, from 64-bit word hashes."""
    mixed, low = _parts(hist, word)
    return low, (mixed + low) & (FEATURES - 1)


def sentence_matrix(hist: np.ndarray, word: np.ndarray, lengths: np.ndarray):
    """The sentences' feature vectors as a scipy CSR matrix (float32, rows = sentences).

    Args:
        hist: History word hash of every predicted token, sentence after sentence.
        word: Word hash of every predicted token.
        lengths: Predicted tokens per sentence.

    Returns:
        A (sentences x FEATURES) `scipy.sparse.csr_matrix`.
    """
    import scipy.sparse as sp

    lengths = np.asarray(lengths, dtype=np.int64)
    uni, bi = feature_ids(hist, word)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    scale = 1.0 / np.sqrt(2.0 * np.maximum(lengths, 1))
    values = np.repeat(scale, lengths).astype(np.float32)
    matrix = sp.csr_matrix((np.concatenate([values, values]),
                            (np.concatenate([rows, rows]), np.concatenate([uni, bi]))),
                           shape=(len(lengths), FEATURES), dtype=np.float32)
    matrix.sum_duplicates()
    return matrix


class NgramClassifier(ShardScorer):
    """Hashed n-gram logistic regression: `fit` from corpus rows and texts, `score_all` /
    `score_shard` every stored sentence (its log-odds, higher = more like the positives).

    Args:
        lexicon: The corpus's lexicon (`tapt.indexer.reading.lexical.Lexicon`).
        weights: float32 weight per feature bucket.
        intercept: The model's intercept.
    """

    def __init__(self, lexicon, weights: np.ndarray, intercept: float) -> None:
        self.lexicon = lexicon
        self.weights = np.asarray(weights, dtype=np.float32)
        self.intercept = float(intercept)

    @classmethod
    def fit(cls, lexicon, positive_texts: Sequence[str], positive_rows: np.ndarray,
            negative_rows: np.ndarray, C: float = 1.0) -> "NgramClassifier":
        """A class-balanced logistic regression: `positive_texts` and the corpus rows
        `positive_rows` against the corpus rows `negative_rows`.

        Args:
            lexicon: The corpus's lexicon.
            positive_texts: Positive sentences given as text (the task).
            positive_rows: Positive corpus rows (sorted).
            negative_rows: Negative corpus rows (sorted).
            C: Inverse regularisation strength.

        Returns:
            The fitted classifier.
        """
        import scipy.sparse as sp

        parts = [sentence_matrix(*HashedLMs.text_pairs(list(positive_texts)))]
        for rows in (positive_rows, negative_rows):
            parts.append(sentence_matrix(*lexicon.pairs(np.asarray(rows, dtype=np.int64))))
        x = sp.vstack(parts).tocsr()
        n_pos = len(positive_texts) + len(positive_rows)
        y = np.concatenate([np.ones(n_pos), np.zeros(len(negative_rows))])
        # liblinear's objective (the intercept in the penalty), which this classifier was
        # first fitted by, solved as liblinear does (Newton steps by conjugate gradients) on
        # the float32 features, without scikit-learn
        model = fit_logistic(x, y, C, penalize_intercept=True)
        return cls(lexicon, model.coef, model.intercept)

    def shard_parts(self, shard) -> Iterator[tuple[int, np.ndarray]]:
        """(first local row, float32 log-odds) of runs of up to 2^16 of a shard's sentences."""
        # the hash arithmetic once per word of the shard, not per bigram type (~3x more): a
        # type's buckets are sums of its two words' parts (`_parts`)
        mixed, low = (part.astype(np.int32) for part in _parts(shard.vocab, shard.vocab))
        word_weight = self.weights[low].astype(np.float64)
        per_type = np.empty(len(shard.bigrams), dtype=np.float64)
        bucket, low_w = np.empty(TYPE_RUN, np.int32), np.empty(TYPE_RUN, np.int32)
        weight = np.empty(TYPE_RUN, np.float32)
        for lo, hist, word in type_runs(shard.bigrams, TYPE_RUN):    # ids checked on open
            n = len(hist)
            out = per_type[lo:lo + n]
            np.take(word_weight, word, out=out, mode="clip")
            b = np.take(mixed, hist, out=bucket[:n], mode="clip")
            b += np.take(low, word, out=low_w[:n], mode="clip")
            b &= FEATURES - 1
            out += np.take(self.weights, b, out=weight[:n], mode="clip")
        for lo, sums, lengths in sentence_sums(shard, per_type):
            yield lo, (sums / np.sqrt(2.0 * np.maximum(lengths, 1))
                       + self.intercept).astype(np.float32)
