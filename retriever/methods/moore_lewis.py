"""moore-lewis: Moore & Lewis 2010, the bigram cross-entropy difference of task and corpus LMs."""

from __future__ import annotations

import numpy as np

from tapt.retriever.methods.base import RankingInputs, ScoreParts, SentenceScored
from tapt.retriever.methods.registry import register
from tapt.retriever.ranking.index_protocol import own_cuts
from tapt.retriever.scoring.arrays import HeldScores, score_holder
from tapt.retriever.scoring.ngram_lm import HashedLMs, general_sample_size, moore_lewis_lexicon


def lexical_scores(ctx: RankingInputs, method: str = "moore-lewis") -> np.ndarray:
    """Moore-Lewis scores of every stored sentence for the task, computed once per task from
    the index's stored lexical ids (the corpus is not read or tokenised per task; a served
    index's actors score their own shards)."""
    texts = ctx.need_texts(method)

    def compute() -> np.ndarray:
        corpus = ctx.corpus
        shared = corpus.extra_words if corpus.share_vocabulary else None
        scores, new = moore_lewis_lexicon(ctx.index.lexicon, texts, ctx.seed, shared,
                                          apply=ctx.index.lexicon_scores)
        if corpus.share_vocabulary:
            corpus.extra_words = new
        return scores

    return ctx.memo.get(("moore-lewis", ctx.seed), compute)


def lexical_held(ctx: RankingInputs, method: str = "moore-lewis") -> HeldScores | None:
    """`lexical_scores` kept by a served index's actors, each scoring its own shards (a handle,
    `arrays.HeldScores`; no score per sentence comes here), computed once per task; None on an
    index that is not served."""
    holder = score_holder(ctx.index)
    if holder is None:
        return None
    texts = ctx.need_texts(method)

    def compute() -> HeldScores:
        corpus = ctx.corpus
        models = HashedLMs(ctx.index.lexicon, texts, seed=ctx.seed,
                           extra_words=corpus.extra_words if corpus.share_vocabulary else None)
        if corpus.share_vocabulary:
            corpus.extra_words = models.new
        return holder.hold_lexicon(models.score_shard)

    return ctx.memo.get(("moore-lewis", "held", ctx.seed), compute)


def lexical_parts(ctx: RankingInputs, method: str, info: dict) -> ScoreParts:
    """`lexical_scores` in parts, computed run by run and not kept (`HashedLMs.parts`); on a
    served index, a cut its actors make from their own shards (`lexicon_cut`); the whole
    array as one part when this task has computed it already."""
    texts = ctx.need_texts(method)
    if ("moore-lewis", ctx.seed) in ctx.memo:
        return ScoreParts([(0, lexical_scores(ctx, method))], 1, info)
    corpus = ctx.corpus
    models = HashedLMs(ctx.index.lexicon, texts, seed=ctx.seed,
                       extra_words=corpus.extra_words if corpus.share_vocabulary else None)
    if corpus.share_vocabulary:
        corpus.extra_words = models.new
    served = own_cuts(ctx.index)
    if served is not None:
        return ScoreParts((), 0, info, cut=lambda view, cut: served.lexicon_cut(models, view, cut))
    return ScoreParts(models.parts(), models.part_count(), info)


@register
class MooreLewis(SentenceScored):
    name = "moore-lewis"
    summary = "Bigram cross-entropy difference, task LM vs a random-pool LM (Moore & Lewis 2010)."
    help = """An in-domain bigram LM fitted on the task's text and a general one fitted on as many
    random stored sentences; each sentence scores the difference of their cross-entropies.
    Reads the task's text, not its embeddings.

    \b
    Example:
      tapt select moore-lewis idx --task task.jsonl --budget 0.2 --out sel.jsonl
    """
    order = 80
    needs_text = True
    needs_embeddings = False
    warn_task_sentences = 3

    def sentence_scores(self, ctx, params):
        return lexical_scores(ctx, self.name), self._info(ctx)

    def score_parts(self, ctx, params):
        """Shard by shard, runs of 65,536 sentences at a time: no score per sentence is kept."""
        return lexical_parts(ctx, self.name, self._info(ctx))

    @staticmethod
    def _info(ctx: RankingInputs) -> dict:
        return {"general_lm_sentences": general_sample_size(len(ctx.texts),
                                                            ctx.index.n_sentences)}
