"""classifier: positive-unlabeled logistic regression on the stored embeddings (`pu`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from .. import scoring
from ..pu import PUConfig, pu_classifier
from .base import Params, SentenceScored, param
from .registry import register


@dataclass(frozen=True)
class ClassifierParams(Params):
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
        scorer would give again) and what the fit used.

        Args:
            ctx: The selection's context.
            task: The task's embeddings (the positives).
            params: The classifier's parameters.
            heldout: Positive only (no self-training rounds).

        Returns:
            (scorer, scores of every row, info).
        """
        index = ctx.index
        prerank = index.score_rows(partial(scoring.centroid_scores, query=scoring.centroid(task)))
        rounds = 0 if heldout else params.rounds
        n_positive = None if heldout else ctx.n_positive
        scores, scorer, info = pu_classifier(index.embeddings, task, prerank, n_positive,
                                             PUConfig(rounds=rounds, seed=ctx.seed),
                                             score_rows=index.score_rows)
        return scorer, scores, info

    def depends_on_budget(self, params):
        return params.rounds > 0
