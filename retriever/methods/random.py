"""random: uniformly random segments, the baseline every method must beat."""

from __future__ import annotations

import numpy as np

from tapt.retriever.methods.base import Method, take
from tapt.retriever.methods.registry import register


@register
class Random(Method):
    name = "random"
    summary = "Uniformly random segments: the baseline every method must beat."
    help = """A seeded permutation of every segment, cut at the budget. Needs no task.

    \b
    Example:
      tapt select random idx --budget 0.2 --seed 1 --out random.jsonl
    """
    order = 40
    needs_embeddings = False

    def rank(self, ctx, params):
        order = np.random.default_rng(ctx.seed).permutation(len(ctx.view))
        return take(ctx.view, order, np.zeros(len(ctx.view), dtype=np.float32), ctx.budget, {})

    def sentence_scores(self, ctx, params):
        """A seeded uniform score per sentence (a random ranking at any segment size)."""
        return np.random.default_rng(ctx.seed).random(ctx.index.n_sentences).astype(np.float32), {}

    def depends_on_budget(self, params):
        return False
