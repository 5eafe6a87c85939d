"""centroid: Domain-Cosine (Aharoni & Goldberg 2020), cosine to the task's mean embedding."""

from __future__ import annotations

from ..scoring import arrays
from .base import ScanParams, SentenceScored
from .registry import register


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
    Params = ScanParams

    def scorer(self, ctx, task, params, heldout=False):
        return arrays.Linear(arrays.centroid(task), cosine=True), {}
