"""Document context: a sentence's score pooled with the other sentences of its document.

A corpus document (a web page, an article, a chapter: one record of the corpus, see
`docs/formats.md`) is usually about one thing, so whether a sentence is like the task is better
told by its whole document than by the sentence alone: one short or generic sentence says little,
twenty say a lot. `document_scores` replaces each sentence's score by the empirical-Bayes
estimate of its document's mean score under a one-way random-effects model

    score(sentence i of document d) = mu + b_d + e_i,   b_d ~ (0, s_b^2),   e_i ~ (0, s_w^2)

with the variance components estimated from the scores themselves (the method-of-moments ANOVA
estimator for unequal group sizes): nothing is fitted to labels and nothing is tuned. A document
of n sentences is shrunk towards the corpus mean by s_b^2 / (s_b^2 + s_w^2 / n): a one-sentence
document keeps little of its own score, a long one nearly all of its mean. Sentences of one
document are ordered among themselves by their own scores (a tie-break far below any gap between
documents), so a budget that cuts a document keeps its best sentences.

Where every document is one sentence the result is an increasing function of the scores (the
same ranking); where the scores do not vary between documents more than within them
(s_b^2 <= 0), documents carry no information and the scores are returned unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..scoring.arrays import RowRuns, pairwise_sum

CONTEXTS = ("sentence", "document")
# rows per run of the passes over the scores (their temporaries take ~50 bytes a row)
RUN = 1 << 16


@dataclass(frozen=True)
class Pooling:
    """What `document_scores` estimated (recorded in a selection's manifest).

    Attributes:
        between: Variance of the document means (s_b^2) on the scores' scale.
        within: Variance of sentences around their document's mean (s_w^2).
        reliability_1: Share of a one-sentence document's own deviation it keeps.
        pooled: Whether the scores were pooled (False: returned unchanged).
    """

    between: float
    within: float
    reliability_1: float
    pooled: bool

    def to_json(self) -> dict[str, float | bool]:
        return {"between_variance": round(self.between, 6), "within_variance": round(self.within, 6),
                "one_sentence_reliability": round(self.reliability_1, 4), "pooled": self.pooled}


class DocumentPooling(RowRuns):
    """`document_scores` block by block: the per-document estimates are taken once (one pass
    over the scores in runs of whole documents, and numpy's own pairwise order for the
    within-document spread), any run of rows' pooled scores when it is asked for. Beyond the
    scores it is given, it holds 8 bytes per document per estimate, nothing per sentence.
    `block(lo, hi)` is `document_scores(...)[0][lo:hi]` bit for bit.

    Args:
        scores: One score per corpus sentence, as for `document_scores`.
        doc_offsets: First sentence of every document, as for `document_scores`.

    Raises:
        ValueError: offsets that do not describe documents of `scores`.
    """

    def __init__(self, scores: np.ndarray, doc_offsets: np.ndarray) -> None:
        self.scores = np.asarray(scores)
        n_rows = len(self.scores)
        starts = np.asarray(doc_offsets, dtype=np.int64)
        if len(starts) and starts[-1] == n_rows:
            starts = starts[:-1]
        self.n_rows, self.starts = n_rows, starts
        self.pooling, self._pooled = Pooling(0.0, 0.0, 1.0, False), False
        if n_rows == 0:
            return
        if (len(starts) == 0 or starts[0] != 0 or np.any(np.diff(starts) <= 0)
                or starts[-1] >= n_rows):
            raise ValueError("document offsets do not match the scores")
        n = np.zeros(len(starts))
        sums = np.zeros(len(starts))
        low, high = np.inf, -np.inf
        for lo, hi in self._runs():
            first, doc = self._docs(lo, hi)
            s = self._float64(lo, hi)
            ok = np.isfinite(s)
            # a document's sentences are summed in one run, in order, as one bincount does
            n[first:first + int(doc[-1]) + 1] = np.bincount(doc, weights=ok)
            sums[first:first + int(doc[-1]) + 1] = np.bincount(doc, weights=np.where(ok, s, 0.0))
            if ok.any():
                low, high = min(low, float(s[ok].min())), max(high, float(s[ok].max()))
        has = n > 0
        N, k = float(n.sum()), int(has.sum())
        if k < 2 or N <= k:
            return
        means = np.zeros(len(starts))
        means[has] = sums[has] / n[has]
        mu = sums.sum() / N
        self.means = means

        def squares(lo: int, hi: int) -> float:
            first, doc = self._docs(lo, hi)
            s = self._float64(lo, hi)
            return np.add.reduce(np.where(np.isfinite(s), s - means[first + doc], 0.0) ** 2)

        within = float(pairwise_sum(n_rows, squares, RUN) / (N - k))
        msb = float(np.sum(n[has] * (means[has] - mu) ** 2) / (k - 1))
        n0 = (N - float(np.sum(n[has] ** 2)) / N) / (k - 1)
        between = (msb - within) / n0 if n0 > 0 else 0.0
        if not between > 0 or not within > 0:
            self.pooling = Pooling(max(between, 0.0), within, 1.0, False)
            return
        shrink = np.zeros(len(starts))
        shrink[has] = between / (between + within / n[has])
        self.doc_score = mu + shrink * (means - mu)
        # within a document, its own score orders the sentences; the factor keeps that order
        # far below the smallest gap between documents that matters at float64
        self.spread = (high - low) or 1.0
        self.pooling, self._pooled = Pooling(between, within, between / (between + within),
                                             True), True

    def __len__(self) -> int:
        return self.n_rows

    def _float64(self, lo: int, hi: int) -> np.ndarray:
        return np.asarray(self.scores[lo:hi], dtype=np.float64)

    def _docs(self, lo: int, hi: int) -> tuple[int, np.ndarray]:
        """(the first document meeting rows lo..hi, each row's document counted from it)."""
        starts = self.starts
        first = int(np.searchsorted(starts, lo, side="right")) - 1
        last = int(np.searchsorted(starts, hi, side="left"))
        edges = np.clip(np.append(starts[first:last], hi), lo, hi)
        return first, np.repeat(np.arange(last - first), np.diff(edges))

    def _runs(self) -> Iterator[tuple[int, int]]:
        """Consecutive runs of about `RUN` rows that end where a document ends."""
        size, lo = RUN, 0
        while lo < self.n_rows:
            at = int(np.searchsorted(self.starts, lo + size, side="left"))
            hi = int(self.starts[at]) if at < len(self.starts) else self.n_rows
            yield lo, hi
            lo = hi

    def block(self, lo: int, hi: int) -> np.ndarray:
        """The pooled scores of rows lo..hi (float64)."""
        s = self._float64(lo, hi)
        if not self._pooled:
            return s
        first, doc = self._docs(lo, hi)
        out = self.doc_score[first + doc] + 1e-9 / self.spread * (s - self.means[first + doc])
        bad = ~np.isfinite(s)
        out[bad] = s[bad]
        return out

    def run_size(self) -> int:
        return RUN


def document_scores(scores: np.ndarray, doc_offsets: np.ndarray) -> tuple[np.ndarray, Pooling]:
    """Every sentence scored by its document's shrunk mean score (see the module docstring).

    Args:
        scores: One score per corpus sentence (higher = more task-like); -inf or NaN marks a
            sentence the method cannot select (it stays unselectable and is left out of the
            estimates).
        doc_offsets: First sentence of every document, ascending, starting at 0 (the index's
            `doc_offsets`; a last entry equal to the number of sentences is allowed).

    Returns:
        (pooled scores as float64, the estimates).

    Raises:
        ValueError: offsets that do not describe documents of `scores`.
    """
    pooled = DocumentPooling(scores, doc_offsets)
    return pooled.all(), pooled.pooling
