"""perplexity: a masked LM adapted to the task rescores a pre-ranking's top candidates by their
per-token loss (the perplexity baseline; `retriever.learned.task_lm`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from tapt.retriever.learned.finetune_classifier import parse_candidates
from tapt.retriever.methods.base import Params, SentenceScored, param
from tapt.retriever.methods.registry import get_method, prerank_choices, register


@dataclass(frozen=True)
class PerplexityParams(Params):
    prerank: str = param("fused", "How candidates are pre-ranked (any method that scores "
                         "sentences).",
                         choices=lambda: tuple(c for c in prerank_choices() if c != "perplexity"))
    candidates: str = param("3x", "Rows rescored: a multiple of the budget, a count, or all.")
    lm_model: str | None = param(None, "Masked LM adapted to the task (default: the index's "
                                 "encoder; one without head weights gets a new head).")
    adapt_steps: int = param(100, "Masked-LM steps on the task before scoring (0 = none).",
                             minimum=0)
    lm_lr: float = param(1e-4, "Learning rate of the adaptation.", minimum=0.0)
    max_masks: int = param(8, "Masked copies scored per sentence at most (positions spread "
                           "over the sentence).", minimum=1)
    difference: bool = param(False, "Subtract a general model's per-token loss (the same base "
                             "adapted on as many random corpus sentences): the cross-entropy "
                             "difference.")
    lm_device: str = param("cpu", "Where to adapt and score.", choices=("cpu", "cuda"))

    def validate(self) -> None:
        from tapt.errors import InputError

        if not self.lm_lr > 0:
            raise InputError(f"must be a positive number, got {self.lm_lr}", param="lm_lr")
        parse_candidates(self.candidates)
        self.config(0)

    def config(self, seed: int):
        """The scorer's configuration (`task_lm.PerplexityConfig`) for a selection's seed."""
        from tapt.retriever.learned.task_lm import PerplexityConfig

        return PerplexityConfig(model=self.lm_model, candidates=self.candidates,
                                adapt_steps=self.adapt_steps, lr=self.lm_lr,
                                max_masks=self.max_masks, difference=self.difference,
                                seed=seed, device=self.lm_device)


@register
class Perplexity(SentenceScored):
    name = "perplexity"
    summary = "A masked LM adapted to the task reranks the top candidates by per-token loss."
    help = """The perplexity baseline of data selection (Moore & Lewis 2010; for NER, Dai et al.
    2019): the index's encoder (or `lm_model`) as a masked LM is adapted to the task for
    `adapt_steps` steps, then scores the pre-ranking's top `candidates` rows (read from the text
    store) by their pseudo-log-likelihood per token, from at most `max_masks` masked copies of
    each sentence; `difference` subtracts a general model's loss (a cross-entropy difference).
    Minutes per task on a CPU; the adapted model is cached per task, model and parameters.

    \b
    Examples:
      tapt select perplexity idx --task task.jsonl --budget 20000sent --out sel.jsonl
      tapt select perplexity idx --task task.jsonl --budget 20000sent --candidates 1.5x \\
          --difference --out sel.jsonl
    """
    order = 93
    needs_text = True
    min_task_sentences = 2
    warn_task_sentences = 50
    Params = PerplexityParams

    def _prerank(self, params):
        pre = get_method(params.prerank)
        return pre, pre.shared_params(params)

    def uses_embeddings(self, params):
        pre, pre_params = self._prerank(params)
        return pre.uses_embeddings(pre_params)

    def sentence_scores(self, ctx, params):
        from tapt.errors import InputError
        from tapt.retriever.learned.task_lm import fit_models, perplexity_scores

        texts = ctx.need_texts(self.name)           # before any fitting
        pre, pre_params = self._prerank(params)
        got = pre.sentence_scores(ctx, pre_params)
        if got is None:
            raise InputError(f"{pre.name} does not score sentences", param="prerank")
        prerank, _ = got
        config = params.config(ctx.seed)
        t0, before = time.perf_counter(), ctx.memo.reused_seconds
        key = ("perplexity-lm", json.dumps(config.fingerprint_fields(), sort_keys=True),
               config.difference, config.device)
        models = ctx.memo.get(key, lambda: fit_models(ctx.index, texts, config, ctx.progress))
        result = perplexity_scores(ctx.index, prerank, ctx.n_positive, models, config,
                                   ctx.progress)
        seconds = time.perf_counter() - t0 + ctx.memo.reused_seconds - before
        info = {**result.info, "total_seconds": round(seconds, 1)}
        return result.scores, {"perplexity": info, "prerank": pre.name}

    def depends_on_budget(self, params):
        pre, pre_params = self._prerank(params)
        return (parse_candidates(params.candidates)[0] == "times"
                or pre.depends_on_budget(pre_params))
