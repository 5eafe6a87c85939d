"""centroid: Domain-Cosine (Aharoni & Goldberg 2020), cosine to the task's mean embedding; with
`tuned_model`, the cosine of a task-tuned encoder on the candidates of the stored embeddings'
ranking (`tuned.TunedCosine`)."""

from __future__ import annotations

from tapt.retriever.methods.base import ScanParams, SentenceScored
from tapt.retriever.methods.registry import register
from tapt.retriever.methods.tuned import TunedCosine, TunedParams
from tapt.retriever.scoring import arrays


class PlainCentroid(SentenceScored):
    """Centroid on the stored embeddings (`Centroid` without `tuned_model`)."""

    name = "centroid"
    summary = "Rank segments by cosine to the task's mean embedding (Domain-Cosine)."
    auto_candidate = True
    Params = ScanParams

    def scorer(self, ctx, task, params, heldout=False):
        return arrays.Linear(arrays.centroid(task), cosine=True), {}


@register
class Centroid(TunedCosine, PlainCentroid):
    help = """Each sentence scores its cosine to the unit mean of the task's embeddings; segments
    rank by their sentences' mean score. The cheapest method: one pass over the stored
    embeddings (or, with `scan` codes, over their int8 codes: half the bytes of float16).
    With `tuned_model` (a task-tuned encoder, such as `tapt train`'s output), the best
    `candidates` by that pass are embedded again with it, the task too, and ranked by the cosine
    to the tuned centroid: no corpus re-embedding.

    \b
    Examples:
      tapt select centroid idx --task task.jsonl --budget 0.2 --out sel.jsonl
      tapt select centroid idx --task task.jsonl --budget 0.2 --scan codes --out sel.jsonl
      tapt select centroid idx --task task.jsonl --budget 20000sent \\
          --tuned-model ./tuned --candidates 3x --out tuned.jsonl
    """
    order = 10
    Plain = PlainCentroid
    Params = TunedParams
