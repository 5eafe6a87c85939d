"""fused: the PU classifier (meaning), Moore-Lewis and the wording classifier (words), the sum
of their z-scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tapt.retriever.learned.pu import PUConfig
from tapt.retriever.learned.wording import wording_scores
from tapt.retriever.methods.base import (
    ScanParams,
    ScoreParts,
    SentenceScored,
    param,
    rescored_rows,
    scans_codes,
)
from tapt.retriever.methods.moore_lewis import lexical_held, lexical_scores
from tapt.retriever.methods.params import MAX_ROUNDS
from tapt.retriever.methods.registry import get_method, register
from tapt.retriever.scoring import arrays
from tapt.retriever.scoring.ngram_lm import general_sample_size


@dataclass(frozen=True)
class FusedParams(ScanParams):
    rounds: int = param(2, "Self-training rounds of the classifier half.",
                        minimum=0, maximum=MAX_ROUNDS)
    wording: str = param("lm+classifier", "The word scorers beside the meaning classifier: "
                         "Moore-Lewis alone (`lm`), or Moore-Lewis and a hashed n-gram "
                         "classifier fitted on the first two's pseudo-labels.",
                         choices=("lm", "lm+classifier"))


@register
class Fused(SentenceScored):
    name = "fused"
    summary = "Classifier (meaning) + Moore-Lewis and an n-gram classifier (words): z-score sum."
    help = """The most precise method on the benchmark: its scorers disagree usefully (the
    classifier sees meaning, Moore-Lewis and the n-gram classifier the domain's words) and their
    errors overlap little. The n-gram classifier learns from the first two's ranking
    (pseudo-labels, no label beyond the task); `wording` lm leaves it out. It reads every
    stored sentence's words, so it costs a few seconds more than the classifier alone.
    With `scan` codes the classifier half fits and scores on the int8 codes, and the meaning
    scores of the best `rescore` x budget sentences by the fused score are rescored exactly.

    \b
    Examples:
      tapt select fused idx --task task.jsonl --budget 20000sent --out sel.jsonl
      tapt select fused idx --task task.jsonl --budget 20000sent --scan codes --out sel.jsonl
    """
    order = 90
    needs_text = True
    min_task_sentences = 2
    warn_task_sentences = 3
    Params = FusedParams

    def sentence_scores(self, ctx, params):
        fused, info = self._fused(ctx, params)
        return (fused.values() if isinstance(fused, arrays.HeldScores) else fused.all()), info

    def score_parts(self, ctx, params):
        """The z-score sum block by block: beside its scorers' scores (4 bytes a sentence
        each), no score per sentence is kept. On a served index the sum is held by the
        actors (`held_fused`), which make the budget's cut."""
        fused, info = self._fused(ctx, params)
        if isinstance(fused, arrays.HeldScores):
            return ScoreParts((), 0, info, cut=lambda view, cut: fused.cut(view, cut))
        return ScoreParts(fused.parts(), fused.part_count(), info)

    def _fused(self, ctx, params) -> tuple[arrays.ZSum, dict]:
        """The z-score sum of the scorers (`scoring.ZSum`, computed once per task and
        setting) and what the fits saw."""
        texts = ctx.need_texts(self.name)          # before any fitting
        task = ctx.need_task(self.name)
        classifier = get_method("classifier")
        wanted = rescored_rows(ctx, params) if scans_codes(params) else 0   # 0: exact

        def compute():
            ctx.index.lexicon       # noqa: B018 - its lexical ids checked before any fitting
            if arrays.score_holder(ctx.index) is not None:
                return held_fused(self, ctx, params, task, texts, wanted)
            # the fit first, the Moore-Lewis half after it: the fit's peak (every row's score
            # and the ranks its negatives are drawn from) is not held beside 4 more bytes a row
            # (and side by side on two threads they took longer: both wait on memory)
            scorer, meaning, info = classifier.fit(ctx, task, classifier.shared_params(params))
            lexical = lexical_scores(ctx, self.name)
            if wanted:
                meaning, rescored = arrays.rescore_best(
                    ctx.index.embeddings, scorer, meaning, wanted,
                    by=arrays.fuse_zscores(meaning, lexical))
                info = {**info, "scan": "codes", "rescored_sentences": int(len(rescored))}
            return self._summed(ctx, params, texts, info, meaning, lexical, arrays.ZSum,
                                lambda zsum: zsum.all(np.float32))

        key = ("fused", ctx.n_positive, params.rounds, ctx.seed, wanted, params.wording)
        fused, info = ctx.memo.get(key, compute)
        return fused, {**info, "general_lm_sentences": general_sample_size(
            len(texts), ctx.index.n_sentences)}

    def _summed(self, ctx, params, texts, info: dict, meaning, lexical, zsum,
                ranking_of) -> tuple[Any, dict]:
        """The z-score sum of meaning, Moore-Lewis and, unless `wording` is lm, the wording
        classifier fitted on the first two's ranking. `zsum` sums score arrays (`arrays.ZSum`,
        or a served index's `ScoreHolder.zsum`); `ranking_of` makes float32 scores of a sum."""
        if params.wording == "lm":
            return zsum(meaning, lexical), info
        words, fit = self._wording(ctx, task_texts=texts,
                                   ranking=ranking_of(zsum(meaning, lexical)), info=info)
        return zsum(meaning, lexical, words), {**info, "wording_classifier": fit}

    @staticmethod
    def _wording(ctx, task_texts, ranking: np.ndarray, info: dict) -> tuple[np.ndarray, dict]:
        """The wording classifier's scores from the meaning + Moore-Lewis ranking; without a
        budget its pseudo-positives count what the meaning classifier puts above 0.5."""
        k = ctx.n_positive or max(1, int(info.get("positive_estimate", 1)))
        holder = arrays.score_holder(ctx.index)     # served: the scores stay in the actors
        return wording_scores(ctx.index.lexicon, task_texts, ranking, k,
                              PUConfig(seed=ctx.seed),
                              apply=ctx.index.lexicon_scores if holder is None
                              else holder.hold_lexicon)

    def explain(self, ctx, params, rows):
        """Each scorer's z-score at `rows` (`meaning`, `lm`, `words`): their sum is the
        fused score (on a served index, gathered from the actors for these rows only)."""
        fused, _ = self._fused(ctx, params)
        if not hasattr(fused, "zscores_at"):
            return {}
        names = ("meaning", "lm", "words")
        return {name: part for name, part in zip(names, fused.zscores_at(rows))
                if part is not None}

    def depends_on_budget(self, params):
        return params.rounds > 0 or scans_codes(params) or params.wording != "lm"


def held_fused(method: Fused, ctx, params, task, texts, wanted: int) -> tuple[Any, dict]:
    """`Fused._fused`'s sum on a served index: every scorer's scores held by the actors
    (`arrays.HeldScores`), the sum of their z-scores too (`ScoreHolder.zsum`, the moments bit
    for bit those of one process); the rows rescored with `scan` codes and the wording
    classifier's pseudo-labels are asked of them. No score per sentence comes here.

    Args:
        method: The fused method.
        ctx: The selection's context (its index served).
        params: fused's parameters.
        task: The task's embeddings.
        texts: The task's sentences.
        wanted: Rows rescored exactly with `scan` codes (0: none).

    Returns:
        (the held z-score sum, what the fits saw).
    """
    holder = arrays.score_holder(ctx.index)
    classifier = get_method("classifier")
    scorer, meaning, info = classifier.fit(ctx, task, classifier.shared_params(params),
                                           held=True)
    lexical = lexical_held(ctx, method.name)
    if wanted:      # `arrays.rescore_best` by the fused score (ties at the last place: the
        # lowest rows, where its partition takes any), the best rows found by the actors
        best = np.sort(holder.zsum(meaning, lexical).top_rows(min(max(wanted, 1), len(meaning))))
        meaning.set_rows(best, arrays.exact_scores(ctx.index.embeddings, scorer, best))
        info = {**info, "scan": "codes", "rescored_sentences": int(len(best))}
    return method._summed(ctx, params, texts, info, meaning, lexical, holder.zsum,
                          lambda zsum: zsum.astype(np.float32))
