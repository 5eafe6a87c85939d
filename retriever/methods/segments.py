"""What a selection ranks and returns: the `SegmentView` of an index at one segment size, the
`Ranking` a method returns, and the budget cuts over segment scores (a prefix of a ranking, or a
cut kept while sentence scores stream: `STREAM_SHARE`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from tapt.errors import InputError
from tapt.retriever.ranking import topcut
from tapt.retriever.ranking.budget import Budget, budget_target, cut
from tapt.retriever.ranking.document_pooling import CONTEXTS, DocumentPooling
from tapt.retriever.scoring import arrays
from tapt.util import spill

if TYPE_CHECKING:
    from tapt.indexer.index import Index

log = logging.getLogger(__name__)


@dataclass
class Ranking:
    """Selected segments in rank order with their scores and weights, plus what the method saw.

    Attributes:
        segments: Segment ids (at the context's segment size), best first.
        scores: Their scores, higher = more task-like.
        weights: Their training weights (1.0 unless the method weights segments).
        info: What the method reports (recorded in the selection manifest's `info`).
    """

    segments: np.ndarray
    scores: np.ndarray
    weights: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, chosen: topcut.Candidates, info: dict[str, Any]) -> "Ranking":
        """The ranking of a budget's cut (weights 1.0)."""
        return cls(chosen.ids, chosen.scores, np.ones(len(chosen), dtype=np.float32), info)


@dataclass
class SegmentView:
    """Segments of an index at one segment size, with their sentence and token counts, and how
    sentence scores are pooled before segments are ranked (`context`: "sentence" = not at all,
    "document" = each sentence scored by its document's shrunk mean, see
    `retriever.ranking.document_pooling`)."""

    offsets: np.ndarray
    lengths: np.ndarray
    tokens: np.ndarray
    context: str = "sentence"
    doc_offsets: np.ndarray | None = None

    @classmethod
    def of(cls, index: "Index", size: int | None, context: str = "sentence") -> "SegmentView":
        """The view of `index` at segment size `size` (default: the index's).

        Sentence and token counts are int32 (16 bytes a segment with the int64 offsets, not
        24: 8 GB less at 10^9 one-sentence segments); sums over them are taken in int64.
        `context` is the resolved one, "sentence" or "document" (`SelectConfig.resolve_context`
        decides what "auto" means for an index)."""
        if context not in CONTEXTS:
            raise ValueError(f"a segment view's context is one of {CONTEXTS}, not {context!r}")
        offsets = index.segments(size)
        lengths = segment_lengths(offsets)
        return cls(offsets, lengths, segment_tokens(index.tokens, offsets), context,
                   index.doc_offsets if context == "document" else None)

    def __len__(self) -> int:
        return len(self.lengths)


def segment_lengths(offsets: np.ndarray, block: int = 1 << 20) -> np.ndarray:
    """Sentences of every segment (int32), `np.diff(offsets)` taken `block` segments at a time
    (no int64 copy of every segment's length)."""
    out = spill.empty(max(len(offsets) - 1, 0), np.int32)
    for lo in range(0, len(out), block):
        hi = min(lo + block, len(out))
        out[lo:hi] = np.diff(offsets[lo:hi + 1])
    return out


def segment_tokens(tokens, offsets: np.ndarray) -> np.ndarray:
    """Tokens of every segment (int32), summed shard by shard of a `RowView` of per-sentence
    counts: segments never cross shards, so no whole-corpus copy of the counts is made."""
    out = spill.empty(len(offsets) - 1, np.int32)
    parts = list(tokens.parts()) if hasattr(tokens, "parts") else [(0, tokens)]
    for start, part in parts:
        lo, hi = np.searchsorted(offsets, [start, start + len(part)])
        if hi == lo:
            continue
        if int(offsets[lo]) != start or int(offsets[hi]) != start + len(part):  # across shards
            return np.add.reduceat(np.asarray(tokens, dtype=np.int64),
                                   offsets[:-1]).astype(np.int32)
        out[lo:hi] = np.add.reduceat(part, offsets[lo:hi] - start, dtype=np.int64)
    return out


# The largest budget, as a share of the corpus's sentences, whose cut streams. A streamed cut
# holds ~220 bytes per segment it keeps at the peak of a merge (measured, 400,000 kept), the
# whole-array path ~16 bytes per corpus sentence: above ~7% the whole arrays are the smaller.
STREAM_SHARE = 1 / 16


def small_budget(view: SegmentView, budget: Budget, factor: float = 1.0) -> bool:
    """Whether `budget` (times `factor`) is at most `STREAM_SHARE` of the sentences of `view`:
    a cut kept while scores stream is then smaller than the whole arrays."""
    return factor * budget_sentences(view, budget) <= STREAM_SHARE * float(view.lengths.sum())


def budget_cut(view: SegmentView, budget: Budget) -> topcut.Cut:
    """Where `budget` cuts a ranking of the segments of `view`."""
    return topcut.Cut.of(budget, budget_target(budget, view.lengths, view.tokens))


def cut_of_parts(view: SegmentView, parts: Iterable[tuple[int, np.ndarray]], cut: topcut.Cut,
                 progress: bool = False, total: int | None = None) -> topcut.Candidates:
    """The segments of `view` that `cut` keeps of the ranking by the mean of sentence scores
    given in consecutive parts (`topcut.parts_cut`), in rank order."""
    return topcut.parts_cut(parts, view.offsets, cut.measure(view.lengths, view.tokens), cut,
                            progress=progress, total=total)


def take(view: SegmentView, order: np.ndarray, scores: np.ndarray, budget: Budget | None,
         info: dict[str, Any], ranked: bool = False) -> Ranking:
    """The prefix of a segment ranking that fills `budget` (all of it without one).

    Args:
        view: The segments.
        order: Segment ids, best first.
        scores: Every segment's score, or (`ranked`) the scores of `order`, in its order (a
            ranking of a few candidates needs no score for every segment).
        budget: The budget (None: all of `order`).
        info: What the method reports (a budget's shortfall is added).
        ranked: Whether `scores` are in `order`'s order.
    """
    if budget is None:
        chosen = order
    else:
        target = budget_target(budget, view.lengths, view.tokens)
        chosen = cut(order, budget, target, view.lengths, view.tokens)
        note_shortfall(budget, target, view, chosen, info)
    kept = scores[:len(chosen)] if ranked else scores[chosen]
    return Ranking(chosen, kept, np.ones(len(chosen), dtype=np.float32), info)


def note_shortfall(budget: Budget, target: float, view: SegmentView, chosen: np.ndarray,
                   info: dict[str, Any]) -> None:
    """Record (and warn) when a budget got less than it asks for: fewer candidate segments
    than a segment count, or candidates holding fewer sentences or tokens than asked."""
    if budget.unit in ("fraction", "segments"):
        held, unit = len(chosen), "candidate segments"
    else:
        measure = view.tokens if budget.unit == "tokens" else view.lengths
        held, unit = int(np.asarray(measure)[chosen].sum()), f"{budget.unit} in the candidates"
    if held < target:
        info["budget_shortfall"] = f"only {held} {unit} for {int(target)}"
        info.setdefault("warnings", []).append(
            f"budget {budget.spec} got only {held} {unit}: the method's candidates hold no more")
        log.warning("%s", info["warnings"][-1])


def budget_sentences(view: SegmentView, budget: Budget) -> float:
    """About how many sentences a selection at `budget` holds (segments and tokens converted
    at the corpus's mean sentences per segment and tokens per sentence)."""
    target = budget_target(budget, view.lengths, view.tokens)
    sentences = float(view.lengths.sum())
    if budget.unit == "sentences":
        return target
    if budget.unit == "tokens":
        return target * sentences / max(float(view.tokens.sum()), 1.0)
    return target * sentences / max(len(view), 1)


def budget_order(view: SegmentView, seg_scores: np.ndarray, budget: Budget) -> np.ndarray:
    """The segments `budget` cuts of the ranking of `seg_scores`, in rank order
    (`topcut.ranked_prefix`, from a guess of the segments the budget holds): the same segments
    as a sort of every score."""
    where = topcut.Cut.of(budget, budget_target(budget, view.lengths, view.tokens))
    guess = int(np.ceil(budget_sentences(view, budget) * len(view)
                        / max(float(view.lengths.sum()), 1.0) * 1.25)) + 16
    return topcut.ranked_prefix(seg_scores, where, where.measure(view.lengths, view.tokens),
                                guess)


def by_sentence_scores(view: SegmentView, sentence_scores: np.ndarray, budget: Budget | None,
                       info: dict[str, Any], threshold: float | None = None) -> Ranking:
    """Segments ranked by the mean score of their sentences; without a budget, those whose mean
    is above `threshold` (a method without a threshold needs a budget)."""
    if view.context == "document":
        pooled = DocumentPooling(sentence_scores, view.doc_offsets)
        info["context"] = {"name": "document", **pooled.pooling.to_json()}
        if budget is not None and small_budget(view, budget):
            # the pooled scores stream into the cut: nothing more per sentence is held
            return Ranking.of(cut_of_parts(view, pooled.parts(), budget_cut(view, budget)), info)
        sentence_scores = pooled.all()
    seg_scores = arrays.segment_mean(sentence_scores, view.lengths)
    if budget is not None:
        return take(view, budget_order(view, seg_scores, budget), seg_scores, budget, info)
    if threshold is None:
        raise InputError("this method needs a budget", param="budget")
    # only the segments above the threshold are ranked (ascending ids, so ties keep the order
    # of a ranking of every segment)
    above = np.flatnonzero(seg_scores > threshold)
    return take(view, above[arrays.rank(seg_scores[above])], seg_scores, None, info)


@dataclass
class ScoreParts:
    """Every corpus sentence's score as consecutive parts (`SentenceScored.score_parts`).

    Attributes:
        parts: (first row, scores) of consecutive rows from row 0, in row order, each
            computed when it is reached.
        count: How many parts there are.
        info: What the method reports (as `sentence_scores` does).
        cut: Or, instead of `parts`: a function of the segment view and a `topcut.Cut` that
            makes the cut elsewhere (a served index's actors) and returns its candidates.
    """

    parts: Iterable[tuple[int, np.ndarray]]
    count: int
    info: dict[str, Any]
    cut: Callable[[SegmentView, topcut.Cut], topcut.Candidates] | None = None
