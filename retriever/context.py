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

import numpy as np

CONTEXTS = ("sentence", "document")


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
    s = np.asarray(scores, dtype=np.float64)
    n_rows = len(s)
    starts = np.asarray(doc_offsets, dtype=np.int64)
    if len(starts) and starts[-1] == n_rows:
        starts = starts[:-1]
    if n_rows == 0:
        return s.copy(), Pooling(0.0, 0.0, 1.0, False)
    if len(starts) == 0 or starts[0] != 0 or np.any(np.diff(starts) <= 0) or starts[-1] >= n_rows:
        raise ValueError("document offsets do not match the scores")
    doc = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n_rows)))
    ok = np.isfinite(s)
    n = np.bincount(doc, weights=ok, minlength=len(starts))
    sums = np.bincount(doc, weights=np.where(ok, s, 0.0), minlength=len(starts))
    has = n > 0
    N, k = float(n.sum()), int(has.sum())
    if k < 2 or N <= k:
        return s.copy(), Pooling(0.0, 0.0, 1.0, False)
    means = np.zeros(len(starts))
    means[has] = sums[has] / n[has]
    mu = sums.sum() / N
    within = float(np.sum(np.where(ok, s - means[doc], 0.0) ** 2) / (N - k))
    msb = float(np.sum(n[has] * (means[has] - mu) ** 2) / (k - 1))
    n0 = (N - float(np.sum(n[has] ** 2)) / N) / (k - 1)
    between = (msb - within) / n0 if n0 > 0 else 0.0
    if not between > 0 or not within > 0:
        return s.copy(), Pooling(max(between, 0.0), within, 1.0, False)
    shrink = np.zeros(len(starts))
    shrink[has] = between / (between + within / n[has])
    doc_score = mu + shrink * (means - mu)
    # within a document, its own score orders the sentences; the factor keeps that order far
    # below the smallest gap between documents that matters at float64
    spread = float(np.ptp(s[ok])) or 1.0
    out = doc_score[doc] + 1e-9 / spread * (s - means[doc])
    out[~ok] = s[~ok]
    return out, Pooling(between, within, between / (between + within), True)
