"""auto: the embedding scorer with the best held-out F1 for the task (TADPOLE's protocol)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from tapt.errors import InputError

from ..choose_detector import corpus_rows
from ..heldout import evaluate
from .base import Context, Method, Params, param
from .registry import auto_candidates, get_method, register

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AutoParams(Params):
    m: int = param(10, "`m` of density when it is a candidate.", minimum=1)
    rounds: int = param(2, "Self-training rounds of the classifier when it is chosen.", minimum=0)
    over: str = param("embeddings", "Candidates: the embedding scorers (held-out F1), or all: "
                      "every scorer, fused and fused-learned (held-out AUC on cross-fitted "
                      "folds; needs the task's text).", choices=("embeddings", "all"))
    with_finetune: bool = param(False, "With `over` all, Domain-Finetune is a candidate too (one "
                                "more fine-tuning).", requires=("over", "all"))


def choose_method(ctx: Context, task: np.ndarray, params: Params) -> list[dict]:
    """Held-out F1 and AUC of every `auto` candidate for this task, best first."""
    rng = np.random.default_rng(ctx.seed + 1)
    outliers = np.asarray(ctx.index.embeddings[corpus_rows(ctx.index, len(task) // 5 + 2, rng)])

    def fit_of(method):
        method_params = method.shared_params(params)
        return lambda train: method.scorer(ctx, train, method_params, heldout=True)[0]

    return evaluate({m.name: fit_of(m) for m in auto_candidates()}, task, outliers, ctx.seed)


@register
class Auto(Method):
    name = "auto"
    summary = "Pick the method with the best held-out F1 for the task, and run it."
    help = """Every embedding scorer that auto may choose is fitted on 90% of the task and scores
    the held-out 10% against as many random corpus sentences; the best one (F1, then AUC) runs
    on the whole task. Needs at least 4 task sentences.

    \b
    Example:
      tapt select auto idx --task task.jsonl --budget 20000sent --out sel.jsonl
    """
    order = 95
    budget = "optional"
    budget_help = "allowed only when the chosen method needs none"
    min_task_sentences = 4
    warn_task_sentences = 20
    Params = AutoParams

    def uses_text(self, params):
        return params.over == "all"

    def rank(self, ctx, params):
        if params.over == "all":
            return self._rank_all(ctx, params)
        table = choose_method(ctx, ctx.need_task(self.name), params)
        best = get_method(table[0]["name"])
        log.info("auto: %s (held-out F1 %.3f)", best.name, table[0]["f1"])
        if ctx.budget is None and best.budget == "required":
            raise InputError(f"auto chose {best.name} (held-out F1 {table[0]['f1']:.3f}), which "
                             "needs a budget", param="budget")
        ranking = best.rank(ctx, best.shared_params(params))
        ranking.info.update({"chosen": best.name, "method_f1": {r["name"]: r["f1"] for r in table}})
        return ranking

    def _rank_all(self, ctx, params):
        """Every method by held-out AUC (`retriever.auto_all`); the table is in the info."""
        from ..finetune import FinetuneConfig
        from ..quality_select import auto
        from .fused_learned import task_data

        if ctx.budget is None:
            raise InputError("auto over all methods needs a budget", param="budget")
        data = task_data(ctx, params, self.name)
        config = FinetuneConfig(seed=ctx.seed) if params.with_finetune else None
        return auto(ctx.index, ctx.view, data, ctx.budget, finetune_config=config,
                    progress=ctx.progress)
