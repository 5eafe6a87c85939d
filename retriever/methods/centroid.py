"""centroid: Domain-Cosine (Aharoni & Goldberg 2020), cosine to the task's mean embedding."""

from __future__ import annotations

from .. import scoring
from .base import SentenceScored
from .registry import register


@register
class Centroid(SentenceScored):
    name = "centroid"
    summary = "Rank segments by cosine to the task's mean embedding (Domain-Cosine)."
    help = """Each sentence scores its cosine to the unit mean of the task's embeddings; segments
    rank by their sentences' mean score. The cheapest method: one pass over the stored
    embeddings.

    \b
    Example:
      tapt select centroid idx --task task.jsonl --budget 0.2 --out sel.jsonl
    """
    order = 10
    auto_candidate = True

    def scorer(self, ctx, task, params, heldout=False):
        query = scoring.centroid(task)
        return (lambda rows: scoring.centroid_scores(rows, query)), {}
