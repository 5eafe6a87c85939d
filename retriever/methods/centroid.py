"""centroid: Domain-Cosine (Aharoni & Goldberg 2020), cosine to the task's mean embedding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from tapt.errors import InputError

from .. import scoring
from .base import Params, SentenceScored, budget_sentences, param
from .registry import register


@dataclass(frozen=True)
class CentroidParams(Params):
    scan: Literal["exact", "codes"] = param(
        "exact", "exact: score every stored embedding; codes: rank on the index's int8 codes "
                 "(an index built or reindexed with `codes` int8) and rescore the best "
                 "`rescore` x budget sentences exactly.")
    rescore: float = param(4.0, "With `scan` codes: how many times the budget's sentences are "
                                "rescored from the stored embeddings.", minimum=1.0,
                           requires=("scan", "codes"))


@register
class Centroid(SentenceScored):
    name = "centroid"
    summary = "Rank segments by cosine to the task's mean embedding (Domain-Cosine)."
    help = """Each sentence scores its cosine to the unit mean of the task's embeddings; segments
    rank by their sentences' mean score. The cheapest method: one pass over the stored
    embeddings (or, with `scan` codes, over their int8 codes: half the bytes of float16).

    \b
    Examples:
      tapt select centroid idx --task task.jsonl --budget 0.2 --out sel.jsonl
      tapt select centroid idx --task task.jsonl --budget 0.2 --scan codes --out sel.jsonl
    """
    order = 10
    auto_candidate = True
    Params = CentroidParams

    def scorer(self, ctx, task, params, heldout=False):
        query = scoring.centroid(task)
        return (lambda rows: scoring.centroid_scores(rows, query)), {}

    def sentence_scores(self, ctx, params):
        if params.scan == "exact":
            return super().sentence_scores(ctx, params)
        index = ctx.index
        codes = index.manifest.get("codes")
        if index.codes is None or not codes:
            raise InputError(f"index {index.path} has no int8 codes: run tapt index reindex "
                             f"{index.path} --codes int8", param="scan")
        if ctx.budget is None:
            raise InputError("scanning codes needs a budget", param="budget")
        wanted = int(np.ceil(params.rescore * budget_sentences(ctx.view, ctx.budget)))
        scores, rescored = scoring.code_scan_scores(
            index.embeddings, index.codes, np.asarray(codes["scale"], dtype=np.float32),
            scoring.centroid(ctx.need_task(self.name)), wanted, score_codes=index.score_codes)
        return scores, {"scan": "codes", "rescored_sentences": int(len(rescored))}

    def row_scorer(self, ctx, params):
        if params.scan != "exact":
            return None
        return self.scorer(ctx, ctx.need_task(self.name), params)

    def depends_on_budget(self, params):
        return params.scan == "codes"
