"""fused: the PU classifier (meaning) and Moore-Lewis (wording), the sum of their z-scores."""

from __future__ import annotations

from dataclasses import dataclass

from ..scoring import arrays
from ..scoring.ngram_lm import general_sample_size
from .base import ScanParams, ScoreParts, SentenceScored, param, rescored_rows, scans_codes
from .moore_lewis import lexical_scores
from .registry import get_method, register


@dataclass(frozen=True)
class FusedParams(ScanParams):
    rounds: int = param(2, "Self-training rounds of the classifier half.", minimum=0)


@register
class Fused(SentenceScored):
    name = "fused"
    summary = "Classifier (meaning) + Moore-Lewis (wording): the sum of their z-scores."
    help = """The most precise method on the benchmark: the two disagree usefully (the classifier
    sees meaning, Moore-Lewis the domain's words) and their errors overlap little. It reads
    every stored sentence's text, so it costs a few seconds more than the classifier alone.
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
        return fused.all(), info

    def score_parts(self, ctx, params):
        """The z-score sum block by block: beside its two halves' scores (4 bytes a sentence
        each), no score per sentence is kept."""
        fused, info = self._fused(ctx, params)
        return ScoreParts(fused.parts(), fused.part_count(), info)

    def _fused(self, ctx, params) -> tuple[arrays.ZSum, dict]:
        """The z-score sum of the two halves (`scoring.ZSum`, computed once per task and
        setting) and what the fit saw."""
        texts = ctx.need_texts(self.name)          # before any fitting
        task = ctx.need_task(self.name)
        classifier = get_method("classifier")
        wanted = rescored_rows(ctx, params) if scans_codes(params) else 0   # 0: exact

        def compute():
            ctx.index.lexicon       # noqa: B018 - its lexical ids checked before any fitting
            # the fit first, the Moore-Lewis half after it: the fit's peak (every row's score
            # and the ranks its negatives are drawn from) is not held beside 4 more bytes a row
            scorer, meaning, info = classifier.fit(ctx, task, classifier.shared_params(params))
            lexical = lexical_scores(ctx, self.name)
            if wanted:
                meaning, rescored = arrays.rescore_best(
                    ctx.index.embeddings, scorer, meaning, wanted,
                    by=arrays.fuse_zscores(meaning, lexical))
                info = {**info, "scan": "codes", "rescored_sentences": int(len(rescored))}
            return arrays.ZSum(meaning, lexical), info

        key = ("fused", ctx.n_positive, params.rounds, ctx.seed, wanted)
        fused, info = ctx.memo.get(key, compute)
        return fused, {**info, "general_lm_sentences": general_sample_size(
            len(texts), ctx.index.n_sentences)}

    def depends_on_budget(self, params):
        return params.rounds > 0 or scans_codes(params)
