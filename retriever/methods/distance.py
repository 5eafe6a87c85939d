"""distance: Wang et al. 2017, distance to a random-corpus centroid minus distance to the task's."""

from __future__ import annotations

import numpy as np

from tapt.retriever.learned.detector_choice import corpus_rows
from tapt.retriever.methods.base import ScanParams, SentenceScored
from tapt.retriever.methods.registry import register
from tapt.retriever.scoring import arrays


@register
class Distance(SentenceScored):
    name = "distance"
    summary = "Distance to a random-corpus centroid minus distance to the task centroid."
    help = """Euclidean distances to the mean embeddings of the task and of a seeded sample of
    the corpus (Wang et al. 2017); higher = closer to the task than to the corpus.

    \b
    Examples:
      tapt select distance idx --task task.jsonl --budget 0.2 --out sel.jsonl
      tapt select distance idx --task task.jsonl --budget 0.2 --scan codes --out sel.jsonl
    """
    order = 50
    auto_candidate = True
    Params = ScanParams

    def scorer(self, ctx, task, params, heldout=False):
        sample = corpus_rows(ctx.index, max(len(task), 1000), np.random.default_rng(ctx.seed))
        t_mean = np.asarray(task, np.float64).mean(axis=0)
        c_mean = np.asarray(ctx.index.embeddings[sample], np.float64).mean(axis=0)
        return arrays.DistanceDifference(t_mean, c_mean), {"corpus_sample": int(len(sample))}
