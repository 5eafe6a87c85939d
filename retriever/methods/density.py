"""density: the mean cosine of a sentence to its m nearest task sentences (with `tuned_model`,
in a task-tuned encoder's embedding of the candidates: `tuned.TunedCosine`)."""

from __future__ import annotations

from dataclasses import dataclass

from tapt.retriever.methods.base import ScanParams, SentenceScored, param
from tapt.retriever.methods.registry import register
from tapt.retriever.methods.tuned import TunedCosine, TunedParams
from tapt.retriever.scoring import arrays


@dataclass(frozen=True)
class PlainDensityParams(ScanParams):
    m: int = param(10, "Mean cosine to the m nearest task sentences (1 = best cosine to any).",
                   minimum=1)


@dataclass(frozen=True)
class DensityParams(TunedParams):
    m: int = param(10, "Mean cosine to the m nearest task sentences (1 = best cosine to any).",
                   minimum=1)


class PlainDensity(SentenceScored):
    """Density on the stored embeddings (`Density` without `tuned_model`)."""

    name = "density"
    summary = "Rank every sentence by its mean cosine to its m nearest task sentences."
    auto_candidate = True
    Params = PlainDensityParams

    def scorer(self, ctx, task, params, heldout=False):
        return arrays.TopMeanSimilarity(task, params.m), {"m": params.m}


@register
class Density(TunedCosine, PlainDensity):
    help = """A density estimate of the task around every corpus sentence; m = 1 is the best
    cosine to any task sentence (kNN-TAPT's score, over every row). With `tuned_model`, the
    best `candidates` by it are embedded again with that encoder, the task too, and ranked by
    the same score in the tuned embeddings.

    \b
    Examples:
      tapt select density idx --task task.jsonl --budget 20000sent --m 10 --out sel.jsonl
      tapt select density idx --task task.jsonl --budget 0.2 --m 1 --out best-cosine.jsonl
      tapt select density idx --task task.jsonl --budget 0.2 --scan codes --out sel.jsonl
      tapt select density idx --task task.jsonl --budget 20000sent \\
          --tuned-model ./tuned --out tuned.jsonl
    """
    order = 60
    Plain = PlainDensity
    Params = DensityParams
