"""classifier: positive-unlabeled logistic regression on the stored embeddings (`pu`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..scoring import arrays
from ..learned.pu import PUConfig, pu_classifier
from .base import ScanParams, SentenceScored, param, scan_rows, scans_codes
from .registry import register


@dataclass(frozen=True)
class ClassifierParams(ScanParams):
    rounds: int = param(2, "Self-training rounds (0 = positive only: trained on the task alone).",
                        minimum=0)


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
        scorer, _, info = self.fit(ctx, task, params, heldout)
        return scorer, info

    def fit(self, ctx, task, params, heldout=False):
        """The fitted scorer, its scores of every corpus row (the last round's, which the
        scorer would give again) and what the fit used. With `scan` codes every scan of the
        fit (the centroid pre-ranking, each round's scores) runs on the int8 codes.

        Args:
            ctx: The selection's context.
            task: The task's embeddings (the positives).
            params: The classifier's parameters.
            heldout: Positive only (no self-training rounds).

        Returns:
            (scorer, scores of every row, info).
        """
        scan = scan_rows(ctx, params)
        rounds = 0 if heldout else params.rounds
        n_positive = None if heldout else ctx.n_positive
        # the pre-ranking is handed over, not kept here: the fit frees it after round 0
        scores, scorer, info = pu_classifier(
            ctx.index.embeddings, task, scan(arrays.Linear(arrays.centroid(task), cosine=True)),
            n_positive, PUConfig(rounds=rounds, seed=ctx.seed), score_rows=scan)
        return scorer, scores, info

    def fitted_scores(self, ctx, params):
        return self.fit(ctx, ctx.need_task(self.name), params)

    def depends_on_budget(self, params):
        return params.rounds > 0 or scans_codes(params)
