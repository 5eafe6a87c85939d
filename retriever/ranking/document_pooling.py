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
same ranking). Where the scores do not vary between documents more than chance allows, the
documents carry no information and the scores are returned unchanged: the one-way ANOVA's F
statistic (mean square between documents over mean square within them) must exceed the
1 - `ALPHA` point of its F(k - 1, N - k) distribution under "documents are random groups of
sentences" (k documents, N sentences). Without that test a corpus whose "documents" are random
mixes of topics would get a small positive s_b^2 by chance half the time, and every sentence
would be ranked by its document's mean, not its own score (`benchmarks/mixed_documents.py`).

`choose_context` decides what `context` "auto" (the default of `tapt select`) means for one
index, from its document offsets alone: "document" where at least half of the corpus's sentences
sit in documents of two or more sentences (`MULTI_SHARE`), "sentence" otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from tapt.retriever.scoring.arrays import RowRuns, pairwise_sum

CONTEXTS = ("sentence", "document")
# what a selection may ask for: "auto" is resolved per index by `choose_context`
CONTEXT_CHOICES = ("auto", *CONTEXTS)
# the level of the F test below which scores are pooled (documents vary more than chance allows)
ALPHA = 1e-3
# "auto" pools where at least this share of the sentences sit in multi-sentence documents
MULTI_SHARE = 0.5
# doc offsets per pass when they are counted (8 bytes each: 8 MB a pass)
OFFSET_RUN = 1 << 20
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
        f_statistic: The ANOVA's F (mean square between documents / within), None where
            there was nothing to test.
        p_value: Its upper tail under F(k - 1, N - k); pooled only below `ALPHA`.
    """

    between: float
    within: float
    reliability_1: float
    pooled: bool
    f_statistic: float | None = None
    p_value: float | None = None

    def to_json(self) -> dict[str, float | bool | None]:
        return {"between_variance": round(self.between, 6), "within_variance": round(self.within, 6),
                "one_sentence_reliability": round(self.reliability_1, 4), "pooled": self.pooled,
                "f_statistic": None if self.f_statistic is None else round(self.f_statistic, 4),
                "p_value": None if self.p_value is None else float(f"{self.p_value:.3g}")}


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
        f_stat = msb / within if within > 0 else None
        from scipy.special import fdtrc  # here: the command line starts without scipy

        p_value = float(fdtrc(k - 1, N - k, f_stat)) if f_stat is not None else None
        if not between > 0 or not within > 0 or not (p_value is not None and p_value < ALPHA):
            self.pooling = Pooling(max(between, 0.0), within, 1.0, False, f_stat, p_value)
            return
        shrink = np.zeros(len(starts))
        shrink[has] = between / (between + within / n[has])
        self.doc_score = mu + shrink * (means - mu)
        # within a document, its own score orders the sentences; the factor keeps that order
        # far below the smallest gap between documents that matters at float64
        self.spread = (high - low) or 1.0
        self.pooling, self._pooled = Pooling(between, within, between / (between + within),
                                             True, f_stat, p_value), True

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


@dataclass(frozen=True)
class DocumentShape:
    """How an index's sentences are grouped into documents (what `choose_context` reads).

    Attributes:
        documents: Documents holding at least one sentence.
        sentences: Sentences.
        in_multi: Sentences in documents of two or more sentences.
    """

    documents: int
    sentences: int
    in_multi: int

    @classmethod
    def of(cls, doc_offsets: np.ndarray) -> "DocumentShape":
        """The shape of documents given by CSR offsets (n_docs + 1 entries, or the starts
        only), counted a million offsets at a time (no per-sentence array)."""
        offsets = np.asarray(doc_offsets)
        documents, in_multi = 0, 0
        for lo in range(0, max(len(offsets) - 1, 0), OFFSET_RUN):
            sizes = np.diff(offsets[lo:lo + OFFSET_RUN + 1])
            documents += int(np.count_nonzero(sizes))
            in_multi += int(sizes[sizes > 1].sum())
        sentences = int(offsets[-1] - offsets[0]) if len(offsets) else 0
        return cls(documents, sentences, in_multi)

    @classmethod
    def of_parts(cls, parts: Iterable[np.ndarray]) -> "DocumentShape":
        """The shape of documents given shard by shard (each part CSR offsets of its own
        documents, as `of` takes): no global offsets are built."""
        shapes = [cls.of(p) for p in parts]
        return cls(sum(s.documents for s in shapes), sum(s.sentences for s in shapes),
                   sum(s.in_multi for s in shapes))

    @property
    def per_document(self) -> float:
        return self.sentences / self.documents if self.documents else 0.0

    @property
    def multi_share(self) -> float:
        return self.in_multi / self.sentences if self.sentences else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"documents": self.documents, "sentences": self.sentences,
                "sentences_per_document": round(self.per_document, 3),
                "share_in_multi_sentence_documents": round(self.multi_share, 4)}


@dataclass(frozen=True)
class ContextChoice:
    """The context a selection used and why (its manifest's `context`).

    Attributes:
        name: "sentence" or "document".
        requested: What was asked for: "auto", "sentence" or "document".
        reason: One line: what decided it.
        shape: The index's documents, where "auto" read them.
    """

    name: str
    requested: str
    reason: str
    shape: DocumentShape | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "requested": self.requested, "reason": self.reason,
                **({"rule": f"document where >= {MULTI_SHARE:.0%} of sentences are in "
                            "multi-sentence documents", **self.shape.to_json()}
                   if self.shape is not None else {})}

    def __str__(self) -> str:
        return f"{self.name} ({self.reason})"


def choose_context(requested: str, pools: bool, shape: DocumentShape | None = None,
                   method: str = "the method") -> ContextChoice:
    """What `context` `requested` means for one index: "auto" is "document" where the
    method pools documents and at least `MULTI_SHARE` of the sentences are in documents of
    two or more sentences, "sentence" otherwise; "sentence" and "document" are themselves.

    Args:
        requested: "auto", "sentence" or "document".
        pools: Whether the method ranks by sentence scores that can be pooled.
        shape: The index's documents (`DocumentShape.of_parts` of its shards' offsets); needed for
            "auto" on a method that pools.
        method: The method's name, for the reason.

    Returns:
        The choice, with a one-line reason.
    """
    if requested != "auto":
        return ContextChoice(requested, requested, "asked for")
    if not pools:
        return ContextChoice("sentence", "auto", f"auto: {method} does not pool sentence scores")
    if shape is None:
        raise ValueError("context auto needs the index's document shape")
    name = "document" if shape.sentences and shape.multi_share >= MULTI_SHARE else "sentence"
    reason = (f"auto: {shape.documents:,} documents, {shape.per_document:.1f} sentences each, "
              f"{shape.multi_share:.0%} of sentences in multi-sentence documents")
    return ContextChoice(name, "auto", reason, shape)
