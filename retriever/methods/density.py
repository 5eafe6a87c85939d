"""density: the mean cosine of a sentence to its m nearest task sentences."""

from __future__ import annotations

from dataclasses import dataclass

from ..scoring import arrays
from .base import ScanParams, SentenceScored, param
from .registry import register


@dataclass(frozen=True)
class DensityParams(ScanParams):
    m: int = param(10, "Mean cosine to the m nearest task sentences (1 = best cosine to any).",
                   minimum=1)


@register
class Density(SentenceScored):
    name = "density"
    summary = "Rank every sentence by its mean cosine to its m nearest task sentences."
    help = """A density estimate of the task around every corpus sentence; m = 1 is the best
    cosine to any task sentence (kNN-TAPT's score, over every row).

    \b
    Examples:
      tapt select density idx --task task.jsonl --budget 20000sent --m 10 --out sel.jsonl
      tapt select density idx --task task.jsonl --budget 0.2 --m 1 --out best-cosine.jsonl
      tapt select density idx --task task.jsonl --budget 0.2 --scan codes --out sel.jsonl
    """
    order = 60
    auto_candidate = True
    Params = DensityParams

    def scorer(self, ctx, task, params, heldout=False):
        return arrays.TopMeanSimilarity(task, params.m), {"m": params.m}
