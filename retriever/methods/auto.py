"""auto: pick the method with the best held-out score for the task, and run it.

One method, two named modes (`over`), each a table of candidates scored on held-out task text
against a random corpus sample, best first; the first row runs:

    embeddings  every embedding scorer of `auto_candidates()`, fitted on 90% of the task, by
                held-out F1 then AUC (TADPOLE's protocol, `retriever.learned.heldout`); the chosen
                method then runs through the registry on the whole task.
    all         every scorer, `fused` and `fused-learned` (and Domain-Finetune with
                `with_finetune`) on the cross-fitted folds of the learned fusion, by held-out AUC
                then F1 (`retriever.learned.auto_choice`); the chosen scores are the ones fitted
                there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from tapt.errors import InputError
from tapt.retriever.learned import auto_choice
from tapt.retriever.learned.detector_choice import corpus_rows
from tapt.retriever.learned.finetune_classifier import (
    FinetuneConfig,
    finetune_scores,
    fit_classifier,
)
from tapt.retriever.learned.fusion import fold_split
from tapt.retriever.learned.heldout import evaluate
from tapt.retriever.methods.base import (
    Method,
    Params,
    Ranking,
    RankingInputs,
    by_sentence_scores,
    param,
)
from tapt.retriever.methods.fused_learned import task_data
from tapt.retriever.methods.learned_scorers import TaskData, corpus_sample, learned_fusion
from tapt.retriever.methods.params import MAX_ROUNDS
from tapt.retriever.methods.registry import auto_candidates, get_method, register
from tapt.retriever.scoring import arrays

log = logging.getLogger(__name__)

# Scorers of the learned fusion's folds that `over=all` adds to its inputs as candidates.
AUTO_EXTRA = ("distance", "centroid")
FOLDS = 5
SAMPLE = 4000


@dataclass(frozen=True)
class AutoParams(Params):
    m: int = param(10, "`m` of density when it is a candidate.", minimum=1)
    rounds: int = param(2, "Self-training rounds of the classifier when it is chosen.",
                        minimum=0, maximum=MAX_ROUNDS)
    over: str = param("embeddings", "Candidates: the embedding scorers (held-out F1), or all: "
                      "every scorer, fused and fused-learned (held-out AUC on cross-fitted "
                      "folds; needs the task's text).", choices=("embeddings", "all"))
    with_finetune: bool = param(False, "With `over` all, Domain-Finetune is a candidate too (one "
                                "more fine-tuning).", requires=("over", "all"))


def choose_method(ctx: RankingInputs, task: np.ndarray, params: Params) -> list[dict]:
    """Held-out F1 and AUC of every `auto` candidate for this task, best first.

    Args:
        ctx: The selection's context.
        task: The task's embeddings.
        params: `auto`'s parameters (shared with the candidates).

    Returns:
        One row per candidate: name, f1, auc.
    """
    rng = np.random.default_rng(ctx.seed + 1)
    outliers = np.asarray(ctx.index.embeddings[corpus_rows(ctx.index, len(task) // 5 + 2, rng)])

    def fit_of(method):
        method_params = method.shared_params(params)
        return lambda train: method.scorer(ctx, train, method_params, heldout=True)[0]

    return evaluate({m.name: fit_of(m) for m in auto_candidates()}, task, outliers, ctx.seed)


def over_embeddings(ctx: RankingInputs, params: AutoParams) -> Ranking:
    """Mode `embeddings`: the embedding scorer with the best held-out F1, run on the task."""
    table = choose_method(ctx, ctx.need_task("auto"), params)
    best = get_method(table[0]["name"])
    log.info("auto: %s (held-out F1 %.3f)", best.name, table[0]["f1"])
    if ctx.budget is None and best.budget == "required":
        raise InputError(f"auto chose {best.name} (held-out F1 {table[0]['f1']:.3f}), which "
                         "needs a budget", param="budget")
    ranking = best.rank(ctx, best.shared_params(params))
    ranking.info.update({"chosen": best.name, "method_f1": {r["name"]: r["f1"] for r in table}})
    return ranking


def heldout_finetune(data: TaskData, prerank: np.ndarray, config: FinetuneConfig,
                     folds: int = FOLDS, sample: int = SAMPLE, progress: bool = True
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Domain-Finetune fitted without the first of the task's `folds` parts.

    Args:
        data: The task.
        prerank: The pre-ranking of every corpus row (`fused`).
        config: The fine-tuning's settings.
        folds: Parts the task is split into.
        sample: Random corpus sentences scored beside the held-out part.
        progress: Show progress bars.

    Returns:
        Its log-odds of the held-out part and of the corpus sample, and which of them are task.
    """
    part = fold_split(len(data.texts), folds)[0]
    train = np.setdiff1d(np.arange(len(data.texts)), part)
    fitted, _, _ = fit_classifier(data.index, [data.texts[i] for i in train], prerank,
                                  data.n_positive, config, progress)
    rows = corpus_sample(data.index, sample, data.seed)
    texts = [data.texts[i] for i in part] + data.index.store.texts(rows.tolist())
    scores = fitted.score(texts, progress)
    is_task = np.r_[np.ones(len(part), bool), np.zeros(len(rows), bool)]
    return scores, is_task


def over_all(ctx: RankingInputs, params: AutoParams) -> Ranking:
    """Mode `all`: every method by held-out AUC (`retriever.learned.auto_choice`), the table in the
    info."""
    if ctx.budget is None:
        raise InputError("auto over all methods needs a budget", param="budget")
    data = task_data(ctx, params, "auto")
    config = FinetuneConfig(seed=ctx.seed) if params.with_finetune else None
    got = learned_fusion(data, also=AUTO_EXTRA, folds=FOLDS, sample=SAMPLE)
    fused = arrays.fuse_zscores(got.parts["classifier"], got.parts["moore-lewis"])
    extra = {}
    if config is not None:
        extra["finetune"] = heldout_finetune(data, fused, config, progress=ctx.progress)
    f = got.features
    choice = auto_choice.choose(f.x, f.is_task, f.fold_of, f.names, extra=extra, seed=data.seed)
    log.info("auto: %s (%s)", choice.chosen, ", ".join(
        f"{r['name']} AUC {r['auc']:.3f}" for r in choice.table))
    info: dict[str, Any] = {"chosen": choice.chosen, "heldout": choice.table,
                            "fusion": got.weights.to_json()}
    if choice.chosen == "finetune":
        result = finetune_scores(ctx.index, data.texts, fused, data.n_positive, config,
                                 ctx.progress)
        scores = result.scores
        info["finetune"] = result.info
    else:
        scores = {"fused": fused, "fused-learned": got.scores}.get(choice.chosen)
        if scores is None:
            scores = got.parts[choice.chosen]
    return by_sentence_scores(ctx.view, scores, ctx.budget, info)


MODES = {"embeddings": over_embeddings, "all": over_all}


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

    def pools_documents(self, params):
        return True

    def rank(self, ctx, params):
        return MODES[params.over](ctx, params)
