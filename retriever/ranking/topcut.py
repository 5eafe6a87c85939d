"""A budget's cut of a segment ranking, kept while sentence scores stream (bounded memory).

A selection with a budget needs only the segments its cut holds, not a score for every
sentence. `budget.cut` takes the prefix of the ranking (descending score, ties by ascending
segment id, NaN last: `scoring.rank`) whose running total of segments, sentences or tokens
first reaches the target. A segment in the cut of the whole ranking is in the cut of the
ranking of any subset that holds it (the running total before it can only be smaller in the
subset), so cutting every part and merging the parts' cuts, in any grouping, gives exactly the
global cut:

    cut = Cut.of(budget, target)
    kept = TopCut(cut)
    for ids, scores, measure in parts:      # blocks of a stream, shards, actors...
        kept.add(Candidates(ids, scores, measure))
    kept.result()                            # == the global cut, in rank order

`SegmentStream` turns consecutive sentence scores into segment means (`scoring.segment_mean`,
the same arithmetic as the whole-array path) as soon as a segment's last sentence is scored.
A stream over a range of rows that starts or ends inside a segment returns that segment's
scored rows as a `Piece`; `join_pieces` completes such segments from the pieces of the
neighbouring ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tapt.errors import IndexFormatError
from tapt.indexer.store.integrity import rows_from
from tapt.retriever.ranking.budget import Budget, cut_length
from tapt.retriever.ranking.index_protocol import Windowed
from tapt.retriever.scoring import arrays


@dataclass(frozen=True)
class Cut:
    """Where a budget cuts a ranking.

    Attributes:
        target: The budget in its unit (`budget.budget_target`).
        unit: The budget's unit: "fraction" or "segments" cut the first `target` segments;
            "sentences" and "tokens" the prefix whose running `measure` (the segments'
            sentences or tokens) first reaches `target`.
    """

    target: float
    unit: str

    @classmethod
    def of(cls, budget: Budget, target: float) -> "Cut":
        return cls(float(target), budget.unit)

    @property
    def by_count(self) -> bool:
        return self.unit in ("fraction", "segments")

    def measure(self, lengths: np.ndarray, tokens: np.ndarray) -> np.ndarray | None:
        """What this cut counts of each segment, given their sentences and tokens (None: a
        segment count)."""
        return None if self.by_count else lengths if self.unit == "sentences" else tokens

    def length(self, measure: np.ndarray) -> int:
        """How many of the candidates, in rank order with this `measure`, the cut keeps
        (`budget.cut_length`)."""
        return cut_length(self.unit, self.target, measure)

    def filled(self, measure: np.ndarray) -> bool:
        """Whether candidates with this `measure` (already cut) reach the target."""
        if self.by_count:
            return len(measure) >= int(self.target)
        return float(np.sum(measure)) >= self.target


@dataclass
class Candidates:
    """Segments with their mean scores and what the budget counts of each (sentences or
    tokens; ones for a segment budget)."""

    ids: np.ndarray
    scores: np.ndarray
    measure: np.ndarray

    @classmethod
    def empty(cls) -> "Candidates":
        return cls(np.empty(0, np.int64), np.empty(0, np.float32), np.empty(0, np.int64))

    @classmethod
    def concat(cls, parts: list["Candidates"]) -> "Candidates":
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(np.concatenate([p.ids for p in parts]),
                   np.concatenate([p.scores for p in parts]),
                   np.concatenate([p.measure for p in parts]))

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: np.ndarray | slice) -> "Candidates":
        return Candidates(self.ids[rows], self.scores[rows], self.measure[rows])

    def ordered(self) -> "Candidates":
        """In `scoring.rank`'s order: descending score, then ascending id, NaN last."""
        scores = self.scores if self.scores.dtype == np.float32 else \
            self.scores.astype(np.float64)
        order = np.lexsort((self.ids, -scores))   # float32 negates exactly, in half the bytes
        return self.take(order)

    def cut(self, cut: Cut) -> "Candidates":
        """The candidates `cut` keeps, in rank order."""
        ranked = self.ordered()
        return ranked.take(slice(0, cut.length(ranked.measure)))

    def before(self, score: float, id_: int) -> np.ndarray:
        """Which candidates rank before the segment (`score`, `id_`)."""
        return ranks_before(self.scores, self.ids, score, id_)


def ranks_before(scores: np.ndarray, ids: np.ndarray, score: float, id_: int) -> np.ndarray:
    """Which segments (`scores`, `ids`) rank before the segment (`score`, `id_`) in
    `scoring.rank`'s order: higher score, then lower id; NaN last."""
    if np.isnan(score):
        return ~np.isnan(scores) | (ids < id_)
    return (scores > score) | ((scores == score) & (ids < id_))


def ranked_prefix(scores: np.ndarray, cut: Cut, measure: np.ndarray | None = None,
                  k: int | None = None) -> np.ndarray:
    """Positions of the cut of consecutive segments' `scores` (ties by position), in rank
    order: `scoring.rank_top` (a partition, then a sort of the prefix) grown from `k`
    (default: the target + 1) until the cut fits in it, so a ranking costs no full sort."""
    n = len(scores)
    k = min(n, int(np.ceil(cut.target)) + 1 if k is None else max(int(k), 1))
    while True:
        order = arrays.rank_top(scores, k)
        ones = np.ones(len(order), np.int64) if measure is None else measure[order]
        keep = cut.length(ones)
        if keep < len(order) or len(order) == n:
            return order[:keep]
        k = min(n, 2 * k)


def merge(a: Candidates, b: Candidates, cut: Cut) -> Candidates:
    """The cut of two candidate sets together (each may be cut already or not)."""
    return Candidates.concat([a, b]).cut(cut)


class TopCut:
    """A running cut: candidates added in any order and grouping, the budget's prefix kept.

    Once the kept prefix fills the budget, a new candidate that ranks after its last one can
    never enter and is dropped at once; the others wait in a buffer merged when it holds as
    many as are kept (at least `batch`), so the sorting stays linear-logarithmic in what enters
    and memory stays within about twice the cut.
    """

    def __init__(self, cut: Cut, batch: int = 65536) -> None:
        self.cut = cut
        self.batch = batch
        self.kept = Candidates.empty()
        self._pending: list[Candidates] = []
        self._pending_n = 0
        self._full = False

    def bound(self) -> tuple[float, int] | None:
        """(score, id) of the last kept candidate once the cut is full: only candidates that
        rank before it can still enter; None before."""
        if not self._full:
            return None
        last = len(self.kept) - 1
        return float(self.kept.scores[last]), int(self.kept.ids[last])

    def add(self, more: Candidates) -> None:
        bound = self.bound()
        if bound is not None and len(more):
            more = more.take(more.before(*bound))
        if not len(more):
            return
        self._pending.append(more)
        self._pending_n += len(more)
        if self._pending_n >= max(self.batch, len(self.kept)):
            self._merge()

    def _merge(self) -> None:
        self.kept = Candidates.concat([self.kept, *self._pending]).cut(self.cut)
        self._pending, self._pending_n = [], 0
        self._full = len(self.kept) > 0 and self.cut.filled(self.kept.measure)

    def result(self) -> Candidates:
        """The cut of everything added, in rank order."""
        if self._pending:
            self._merge()
        return self.kept


@dataclass
class Piece:
    """The scored rows of a segment that a range of rows holds only part of."""

    segment: int
    start: int
    scores: np.ndarray


class SegmentStream:
    """Segment means of a range of rows scored block by block, cut as they come.

    Args:
        offsets: Row offsets of consecutive segments (`SegmentView.offsets` or a slice of it)
            covering the range: offsets[0] <= `start`, offsets[-1] >= the range's end.
        first: Segment id of the first of `offsets`.
        measure: Sentences or tokens of each of those segments (None for a segment budget).
        cut: The budget's cut.
        start: First row of the range (default: offsets[0]).
    """

    def __init__(self, offsets: np.ndarray, first: int, measure: np.ndarray | None, cut: Cut,
                 start: int | None = None) -> None:
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.first = int(first)
        self.measure = measure
        self.top = TopCut(cut)
        self.row = int(self.offsets[0] if start is None else start)
        self._seg = int(np.searchsorted(self.offsets, self.row, side="right")) - 1
        self._carry = np.empty(0, np.float32)      # scores of the rows of segment `_seg` so far
        self._carry_start = self.row
        self.pieces: list[Piece] = []

    def feed(self, scores: np.ndarray) -> None:
        """The scores of the next rows of the range."""
        scores = np.asarray(scores)
        buf = np.concatenate([self._carry, scores]) if len(self._carry) else scores
        base = self._carry_start
        end = self.row + len(scores)
        self.row = end
        done = int(np.searchsorted(self.offsets, end, side="right")) - 1  # segments < done end
        seg = self._seg
        if done > seg and self.offsets[seg] < base:   # the range began inside this segment
            cut_at = int(self.offsets[seg + 1]) - base
            self.pieces.append(Piece(self.first + seg, base, buf[:cut_at].copy()))
            buf, base, seg = buf[cut_at:], int(self.offsets[seg + 1]), seg + 1
        if done > seg:
            stop = int(self.offsets[done]) - base
            lengths = np.diff(self.offsets[seg:done + 1])
            means = arrays.segment_mean(buf[:stop], lengths)
            measure = None if self.measure is None else self.measure[seg:done]
            bound = self.top.bound()
            if bound is None:
                best = ranked_prefix(means, self.top.cut, measure)
            else:   # what ranks after the cut's last cannot enter: rank only the rest
                ids = np.arange(self.first + seg, self.first + done)
                live = np.flatnonzero(ranks_before(means, ids, *bound))
                best = live[ranked_prefix(means[live], self.top.cut,
                                          None if measure is None else measure[live])]
            self.top.add(Candidates(best + (self.first + seg), means[best],
                                    np.ones(len(best), np.int64) if measure is None
                                    else np.asarray(measure[best], dtype=np.int64)))
            buf, base, seg = buf[stop:], int(self.offsets[done]), done
        self._carry = np.array(buf)                # a copy, in the scores' own dtype
        self._carry_start, self._seg = base, seg

    def finish(self) -> tuple[Candidates, list[Piece]]:
        """(the cut of the range's whole segments, the pieces of the segments it cuts)."""
        if len(self._carry):
            self.pieces.append(Piece(self.first + self._seg, self._carry_start, self._carry))
        return self.top.result(), self.pieces


def join_pieces(pieces: list[Piece], offsets: np.ndarray,
                measure: np.ndarray | None) -> Candidates:
    """The segments that the pieces of neighbouring ranges complete, with their means.

    Raises:
        ValueError: the pieces of a segment do not cover its rows exactly once.
    """
    by_segment: dict[int, list[Piece]] = {}
    for piece in pieces:
        by_segment.setdefault(piece.segment, []).append(piece)
    ids, means, sizes = [], [], []
    for seg in sorted(by_segment):
        parts = sorted(by_segment[seg], key=lambda p: p.start)
        lo, hi = int(offsets[seg]), int(offsets[seg + 1])
        row = lo
        for p in parts:
            if p.start != row:
                raise ValueError(f"segment {seg}: rows {row}.. are missing or scored twice")
            row += len(p.scores)
        if row != hi:
            raise ValueError(f"segment {seg}: scored rows end at {row}, not {hi}")
        values = np.concatenate([p.scores for p in parts])
        ids.append(seg)
        means.append(arrays.segment_mean(values, np.array([hi - lo]))[0])
        sizes.append(1 if measure is None else int(measure[seg]))
    return Candidates(np.array(ids, np.int64), np.array(means, np.float32),
                      np.array(sizes, np.int64))


# rows per scorer call of a streamed scan: a multiple of `scoring.CHUNK` (so of every block size
# the scorers use); 8 of them keep a call's scores at 2 MB and its fixed costs (handing blocks
# to the scan threads, a partition of the block's segment means) small beside the scan
BLOCK = 8 * arrays.CHUNK


def scan_cut(rows, scorer, offsets: np.ndarray, first: int, measure: np.ndarray | None,
             cut: Cut, start: int = 0, block: int = BLOCK,
             progress: bool = False) -> tuple[Candidates, list[Piece]]:
    """Score `rows` (global rows `start`..) block by block and keep the budget's cut.

    Blocks are `block` rows of `rows`' own grid (as `scoring.blocks`): when `start` is a multiple
    of `block` (and `block` of every block size the scorer uses), each row is scored in a block
    of the shape it has in a scan of every row, so the scores are those of `scorer(every row)`
    bit for bit.

    Args:
        rows: The embedding rows (a memory map, a `RowView` or an array).
        scorer: A function from rows to one score each (a method's fitted scorer).
        offsets, first, measure, cut, start: As for `SegmentStream`.
        block: Rows per scorer call.
        progress: Show a progress bar.

    Returns:
        (the cut of the whole segments of the rows, the pieces of segments they hold part of).
    """
    from tqdm.auto import tqdm

    stream = SegmentStream(offsets, first, measure, cut, start)
    # a block that spans two shards stays a view of both (`RowView.window`), not a copy
    window = rows.window if isinstance(rows, Windowed) else (lambda lo, hi: rows[lo:hi])
    for lo in tqdm(range(0, len(rows), block), desc="score", unit="block", leave=False,
                   disable=not progress):
        try:
            scores = scorer(window(lo, min(lo + block, len(rows))))
        except IndexFormatError as exc:    # damaged rows, named by their place in the block
            raise rows_from(exc, start + lo) from exc
        stream.feed(scores)
    return stream.finish()


def parts_cut(parts, offsets: np.ndarray, measure: np.ndarray | None, cut: Cut,
              progress: bool = False, total: int | None = None) -> Candidates:
    """The budget's cut of the segments of `offsets` ranked by their mean score, from every
    row's score computed part by part (a method whose scores do not come from a row scorer:
    Moore-Lewis shard by shard, `fused`'s z-score sum block by block); only the running cut
    is kept. The segments and scores of the whole-array path, bit for bit.

    Args:
        parts: (first row, scores) of consecutive rows from row 0 to the last, in row order.
        offsets, measure, cut: As for `SegmentStream` (the whole view's).
        progress: Show a progress bar.
        total: How many parts there are (for the progress bar).

    Raises:
        ValueError: the parts are not consecutive or do not cover every row.
    """
    from tqdm.auto import tqdm

    stream = SegmentStream(offsets, 0, measure, cut, 0)
    for start, scores in tqdm(parts, desc="rank", unit="part", total=total, leave=False,
                              disable=not progress):
        if start != stream.row:
            raise ValueError(f"scores of rows {start}.. follow row {stream.row}")
        stream.feed(scores)
    if stream.row != int(offsets[-1]):
        raise ValueError(f"scores end at row {stream.row}, not {int(offsets[-1])}")
    kept, pieces = stream.finish()
    return merge(kept, join_pieces(pieces, offsets, measure), cut)

