"""Positive-unlabeled classification on stored embeddings (Aharoni & Goldberg's Domain-Finetune
at CPU cost): logistic regression, task = positive, negatives from the bottom of a pre-ranking.

Round 0 trains on the task sentences against corpus rows sampled from the bottom two-thirds of
the pre-ranking (the centroid ranking: their "pre-ranking"), so few true positives are sampled
as negatives. Each self-training round scores every corpus row, adds the top rows (a fraction of `n_positive`) as
extra positives and samples new negatives from below the top `2 * n_positive`. With no
`n_positive` (the "positive only" variant, no budget) the count is the number of rows the last
model puts above probability 0.5. Only the top `positive_fraction` of the n_positive rows
become pseudo-positives (the most confident), which keeps rounds from drifting.

Negatives are a uniform sample, without replacement, of the rows below a position of the
ranking. Up to `EXACT_DRAW_ROWS` rows they are the ranking's rows at uniformly drawn positions
(one 8-byte key per row while drawing); above it, the same number of rows drawn uniformly from
the same rows taken in row order (`ordering.rank_cut`: the round's scores and one block, not
a key per row). Both are uniform samples of one population; they are not the same sample.
Above `EXACT_DRAW_ROWS` rows the pre-ranking is not scored at all (`DrawnRanking`): round 0's
negatives are drawn from `2 x wanted + 64` uniformly drawn rows scored alone, those below the
same share of them (a third) as the cut holds of every row; the position of that cut is then
known to within a fraction of a percent of the rows, and a scan of every row is saved.

The scores may be held where the rows are (`arrays.HeldScores`: a served index's actors keep
them): the counts, the top rows and the sampled rows are then asked of their holders, the same
rows as from an array, and no score per row comes here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tapt.errors import InputError
from tapt.indexer.store.npy import as_float32
from tapt.retriever.scoring import arrays
from tapt.retriever.scoring.logistic import LogisticFit, fit_logistic
from tapt.util import ordering
from tapt.util.progress import report_step

log = logging.getLogger(__name__)

# Above this many rows the negatives are drawn without ranking keys (see the module's docstring):
# the fit's peak falls from ~13 to ~4 bytes a row, each draw from a sort of every row's key to
# three passes over the scores (measured at 10M rows: 0.72 s against 0.08 s, four draws a
# `fused` selection), and past 2^32 rows (where the packed keys stop) from a full `lexsort`.
EXACT_DRAW_ROWS = 1 << 20


@dataclass
class PUConfig:
    """rounds: self-training rounds; negatives: negatives per training positive (sampled)."""

    rounds: int = 2
    positive_fraction: float = 0.5
    negatives: float = 3.0
    max_train: int = 60_000
    C: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rounds < 0:
            raise InputError("must be 0 or more", param="rounds")
        if not 0 < self.positive_fraction <= 1:
            raise InputError("PU classifier: positive_fraction must be in (0, 1]")
        if self.negatives <= 0 or self.C <= 0 or self.max_train < 10:
            raise InputError("PU classifier: negatives and C must be positive, max_train >= 10")


@dataclass(frozen=True)
class DrawnRanking:
    """A pre-ranking scored only at the rows asked of it: `score(rows)` are its scores of
    those corpus rows (ascending), `rows` how many the corpus holds. Round 0 draws its
    negatives from one without a score of every row (module docstring)."""

    rows: int
    score: Callable[[np.ndarray], np.ndarray]

    def __len__(self) -> int:
        return self.rows


def _fit(positives: list[np.ndarray], negatives: np.ndarray, C: float) -> LogisticFit:
    """A class-balanced logistic regression of the rows of `positives` (one or more arrays)
    against `negatives` (`scoring.logistic`: the objective of scikit-learn's lbfgs solver, on
    float32 rows, converted once into the array the fit reads)."""
    n_pos = sum(len(part) for part in positives)
    report_step(f"fit the classifier ({n_pos:,} positives, {len(negatives):,} negatives)")
    x = np.empty((n_pos + len(negatives), np.shape(positives[0])[1]), dtype=np.float32)
    at = 0
    for part in (*positives, negatives):
        as_float32(part, out=x[at:at + len(part)])
        at += len(part)
    y = np.concatenate([np.ones(n_pos), np.zeros(len(negatives))])
    return fit_logistic(x, y, C)


def _log_odds(model: LogisticFit) -> arrays.Linear:
    """The fitted logistic regression's log-odds as a row scorer (its decision function, a
    linear score: one float32 pass over the rows, float16 ones cast block by block)."""
    return arrays.Linear(model.coef, model.intercept)


def _sample_ranks(rng: np.random.Generator, scores: np.ndarray | arrays.HeldScores,
                  start: int, wanted: int, most: int) -> np.ndarray:
    """Sorted rows drawn without replacement from the ranking of `scores` below position
    `start`: `rng.choice(rank(scores)[start:], ...)` (the same draws: `choice` picks positions
    from the population's size alone), without holding the ranking. Above `EXACT_DRAW_ROWS`
    float32 scores the drawn positions pick those rows in row order instead (no key per row).
    Scores held where the rows are (`arrays.HeldScores`) give the same rows."""
    population = len(scores) - start
    size = min(population, wanted, most)
    if isinstance(scores, DrawnRanking):
        return _drawn_below(rng, scores, start, size)
    positions = rng.choice(population, size=size, replace=False)
    held = isinstance(scores, arrays.HeldScores)
    if len(scores) > EXACT_DRAW_ROWS and scores.dtype == np.float32:
        if held:
            return scores.rows_below_cut(start, np.sort(positions))
        return ordering.rows_below_cut(scores, ordering.rank_cut(scores, start),
                                       np.sort(positions))
    if held:
        return np.sort(scores.rows_at_ranks(start + positions))
    return np.sort(arrays.rows_at_ranks(scores, start + positions))


def _drawn_below(rng: np.random.Generator, ranking: DrawnRanking, start: int, size: int
                 ) -> np.ndarray:
    """`size` sorted rows drawn without replacement from those below position `start` of a
    ranking scored only where asked: `2 x size + 64` rows drawn uniformly are scored, ranked
    (ties by row), and the draw is made from those below the same share of them as `start`
    is of every row."""
    n = len(ranking)
    if size <= 0:
        return np.empty(0, dtype=np.int64)
    drawn = np.sort(rng.choice(n, size=min(n, 2 * size + 64), replace=False))
    values = np.asarray(ranking.score(drawn), dtype=np.float32)
    order = np.lexsort((drawn, -values))
    below = drawn[order[int(round(start * len(drawn) / n)):]]
    return np.sort(rng.choice(below, size=min(size, len(below)), replace=False))


def pu_classifier(corpus: np.ndarray, task: np.ndarray,
                  prerank: np.ndarray | arrays.HeldScores | DrawnRanking,
                  n_positive: int | None, config: PUConfig,
                  score_rows: Callable[[Callable[[np.ndarray], np.ndarray]], np.ndarray]
                  | None = None
                  ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray], dict]:
    """Scores (log-odds) of every corpus row, the final scorer, and what each round used.

    `score_rows` applies a row scorer to every corpus row (default: to `corpus`; an index's
    `score_rows`, which a served index runs in its actors). It may return the scores held
    where the rows are (`arrays.HeldScores`, as may `prerank` be): every step of the fit then
    asks them for counts and rows only, and the scores returned are held too. A `prerank`
    scored only where asked (`DrawnRanking`, as above `EXACT_DRAW_ROWS` rows) is asked for the
    scores of round 0's drawn rows alone."""
    score_rows = score_rows or (lambda scorer: scorer(corpus))
    rng = np.random.default_rng(config.seed)
    n = len(corpus)
    pos_rows = np.empty(0, dtype=np.int64)
    neg_rows = _sample_ranks(rng, prerank, n // 3, int(config.negatives * len(task)),
                             config.max_train)
    del prerank     # freed here when the caller handed it over (4 bytes a row less per round)
    info: dict = {"rounds": []}
    for round_ in range(config.rounds + 1):
        pos = [task] if not len(pos_rows) else [task, np.asarray(corpus[pos_rows])]
        model = _fit(pos, np.asarray(corpus[neg_rows]), config.C)
        scores = score_rows(_log_odds(model))
        info["rounds"].append({"positives": sum(len(part) for part in pos),
                               "negatives": int(len(neg_rows))})
        if round_ == config.rounds:
            break
        k = int(n_positive) if n_positive else _count_positive(scores)
        pos_rows, neg_rows = pseudo_labels(scores, k, len(task), config, rng)
        scores = None   # freed: not held beside the next round's scores
        log.debug("PU round %d: %d pseudo-positives, %d negatives", round_ + 1, len(pos_rows),
                  len(neg_rows))
    info["positive_estimate"] = _count_positive(scores)
    return scores, _log_odds(model), info


def pseudo_labels(ranking: np.ndarray | arrays.HeldScores, k: int, n_task: int,
                  config: PUConfig, rng: np.random.Generator | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(positive rows, negative rows), both sorted, drawn from a ranking by the self-training
    rule (module docstring): a sample of the top `positive_fraction x k` rows, and `negatives`
    per positive (the task's sentences counted) drawn below the top `2 x k`.

    Args:
        ranking: One score per corpus row (higher = more task-like), or scores held by a
            served index's actors.
        k: The rows the selection wants (`n_positive`).
        n_task: The task's sentences.
        config: `positive_fraction`, `negatives`, `max_train` (and `seed` without `rng`).
        rng: The generator to draw with (default: a new one seeded by `config.seed`).

    Returns:
        The sampled pseudo-positive and negative rows.
    """
    rng = rng if rng is not None else np.random.default_rng(config.seed)
    n = len(ranking)
    k = max(1, min(int(k), n - 1))
    n_top = min(n, max(1, int(config.positive_fraction * k)))
    take = min(n_top, config.max_train // 2)
    positives = _top_sample(rng, ranking, n_top, take)
    negatives = _sample_ranks(rng, ranking, min(2 * k, n - 1),
                              int(config.negatives * (n_task + take)), config.max_train)
    return positives, negatives


def _top_sample(rng: np.random.Generator, scores: np.ndarray | arrays.HeldScores,
                n_top: int, take: int) -> np.ndarray:
    """Sorted rows drawn without replacement from the first `n_top` of the ranking:
    `np.sort(_top(scores, n_top)[rng.choice(n_top, take, replace=False)])`. Held scores give
    the drawn rows only (`HeldScores.rows_at_ranks`), not all `n_top` (which grow with the
    rows without a budget in sentences)."""
    if isinstance(scores, arrays.HeldScores):
        return np.sort(scores.rows_at_ranks(rng.choice(n_top, size=take, replace=False)))
    top = _top(scores, n_top)
    return np.sort(top[rng.choice(n_top, size=take, replace=False)])


def _top(scores: np.ndarray | arrays.HeldScores, k: int) -> np.ndarray:
    """`rank(scores)[:k]`: without a copy of every score (`ordering.top_rows`) where the
    scores are float32, else by a partition (`scoring.rank_top`); held scores by their
    holders (`HeldScores.top_rows`)."""
    if isinstance(scores, arrays.HeldScores):
        return scores.top_rows(k)
    if scores.dtype == np.float32:
        return ordering.top_rows(scores, k)
    return arrays.rank_top(scores, k)[:k]


def _count_positive(scores: np.ndarray | arrays.HeldScores) -> int:
    """How many scores are above 0 (a block at a time: no mask of every row; held scores by
    their holders)."""
    if isinstance(scores, arrays.HeldScores):
        return scores.count_above(0.0)
    return sum(int(np.count_nonzero(np.asarray(scores[lo:lo + ordering.BLOCK]) > 0))
               for lo in range(0, len(scores), ordering.BLOCK))
