"""classifier: positive-unlabeled logistic regression on the stored embeddings (`pu`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tapt.retriever.learned import pu
from tapt.retriever.learned.pu import DrawnRanking, PUConfig, pu_classifier
from tapt.retriever.methods.base import (
    ScanParams,
    ScoreParts,
    SentenceScored,
    code_scale,
    param,
    rescored_rows,
    scan_rows,
    scans_codes,
)
from tapt.retriever.methods.params import MAX_ROUNDS
from tapt.retriever.methods.registry import register
from tapt.retriever.scoring import arrays


@dataclass(frozen=True)
class ClassifierParams(ScanParams):
    rounds: int = param(2, "Self-training rounds (0 = positive only: trained on the task alone).",
                        minimum=0, maximum=MAX_ROUNDS)


@register
class Classifier(SentenceScored):
    name = "classifier"
    summary = "Positive-unlabeled logistic regression on the stored embeddings, self-trained."
    help = """The task is the positive class, negatives come from the bottom of the centroid
    ranking; each self-training round adds the most confident corpus rows as positives (aiming
    at the budget when it is given in sentences).

    \b
    Examples:
      tapt select classifier idx --task task.jsonl --budget 20000sent --out sel.jsonl
      tapt select classifier idx --task task.jsonl --rounds 0 --out probable.jsonl
      tapt select classifier idx --task task.jsonl --budget 0.1 --scan codes --out sel.jsonl
    """
    order = 70
    budget = "optional"
    budget_help = "every segment with probability > 0.5"
    threshold = 0.0
    auto_candidate = True
    min_task_sentences = 2
    warn_task_sentences = 3
    Params = ClassifierParams

    def scorer(self, ctx, task, params, heldout=False):
        """`heldout`: positive only (no self-training), as `auto` fits it on 90% of the task."""
        scorer, _, info = self.fit(ctx, task, params, heldout, held=True)
        return scorer, info

    def fit(self, ctx, task, params, heldout=False, held=False):
        """The fitted scorer, its scores of every corpus row (the last round's, which the
        scorer would give again) and what the fit used. With `scan` codes every scan of the
        fit (the centroid pre-ranking, each round's scores) runs on the int8 codes. Above
        `pu.EXACT_DRAW_ROWS` rows the pre-ranking is not scanned: the rows round 0 draws from
        are scored exactly (`pu.DrawnRanking`). On a
        served index every scan's scores stay in its actors (`held_scan`): the fit asks them
        for counts and rows only.

        Args:
            ctx: The selection's context.
            task: The task's embeddings (the positives).
            params: The classifier's parameters.
            heldout: Positive only (no self-training rounds).
            held: On a served index, return the scores held by its actors
                (`arrays.HeldScores`) rather than gathered here.

        Returns:
            (scorer, scores of every row, info).
        """
        scan = held_scan(ctx, params)
        rounds = 0 if heldout else params.rounds
        n_positive = None if heldout else ctx.n_positive
        centroid = arrays.Linear(arrays.centroid(task), cosine=True)
        n = ctx.index.n_sentences
        # the pre-ranking is handed over, not kept here: the fit frees it after round 0;
        # above `EXACT_DRAW_ROWS` rows only round 0's drawn rows are scored (exactly)
        prerank = (DrawnRanking(n, lambda rows: arrays.exact_scores(ctx.index.embeddings,
                                                                    centroid, rows))
                   if n > pu.EXACT_DRAW_ROWS else scan(centroid))
        scores, scorer, info = pu_classifier(
            ctx.index.embeddings, task, prerank, n_positive,
            PUConfig(rounds=rounds, seed=ctx.seed), score_rows=scan)
        return scorer, (scores if held else arrays.as_array(scores)), info

    def fitted_scores(self, ctx, params):
        return self.fit(ctx, ctx.need_task(self.name), params)

    def score_parts(self, ctx, params):
        """On a served index with `scan` codes: the fit's last scores (of the codes) held by
        the actors, the best `rescore` x budget rows rescored exactly here (as
        `arrays.rescore_best`; rows tied at the last place: the lowest, where its partition
        takes any), the budget's cut made by the actors; no score per sentence comes here.
        None elsewhere (the whole-array path)."""
        if not scans_codes(params) or arrays.score_holder(ctx.index) is None:
            return None
        wanted = rescored_rows(ctx, params)
        scorer, approx, info = self.fit(ctx, ctx.need_task(self.name), params, held=True)
        best = np.sort(approx.top_rows(min(max(wanted, 1), len(approx))))
        approx.set_rows(best, arrays.exact_scores(ctx.index.embeddings, scorer, best))
        info = {**info, "scan": "codes", "rescored_sentences": int(len(best))}
        return ScoreParts((), 0, info, cut=lambda view, cut: approx.cut(view, cut))

    def depends_on_budget(self, params):
        return params.rounds > 0 or scans_codes(params)


def held_scan(ctx, params):
    """`base.scan_rows`, but on a served index the scores stay in its actors: each scan
    returns a handle on them (`arrays.HeldScores`), not the scores.

    Args:
        ctx: The selection's context.
        params: The method's parameters (`scan`).

    Returns:
        A function of a row scorer: its scores of every row (held on a served index).
    """
    holder = arrays.score_holder(ctx.index)
    if holder is None:
        return scan_rows(ctx, params)
    if not scans_codes(params):
        return holder.hold_scores
    scale = code_scale(ctx.index)
    return lambda scorer: holder.hold_scores(scorer.for_codes(scale), on="codes")
