"""The issue-14 methods on an open index, each returning a `Ranking` like every other method:
`fused_learned`, `finetune` and `auto_all` (the method registry wraps these).

    fused-learned  classifier + Moore-Lewis (task expanded by the classifier's top rows) + density,
                   z-scores weighted per task by the held-out protocol (`fusion`, `task_scorers`)
    finetune       Domain-Finetune: a fine-tuned encoder reranks the top candidates of `fused`
    auto           the best of every method by held-out AUC, finetune included when asked for
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from tapt.errors import InputError
from tapt.indexer.index import Index

from . import auto_all, scoring
from .budget import Budget
from .few_seeds import LexicalConfig, PoolText
from .finetune import FinetuneConfig, finetune_scores, fit_classifier
from .fusion import fold_split
from .methods import Ranking, SegmentView, by_sentence_scores
from .task_scorers import TaskData, corpus_sample, learned_fusion

log = logging.getLogger(__name__)

AUTO_EXTRA = ("distance", "centroid")


def _n_positive(budget: Budget | None) -> int | None:
    return int(budget.value) if budget is not None and budget.unit == "sentences" else None


def task_data(index: Index, task: np.ndarray, task_texts: list[str] | None,
              budget: Budget, *, seed: int = 0, rounds: int = 2, m: int = 10,
              expand: float = 0.5, order: int = 2, pool: PoolText | None = None) -> TaskData:
    """The task, on the index's stored lexical ids for the n-gram models (or `pool`).
    These methods rank by fitted scores with no natural threshold: they need a budget."""
    if budget is None:
        raise InputError("this method needs a budget", param="budget")
    if not task_texts:
        raise InputError("this method needs the task's text", param="task")
    if task is None or len(task) != len(task_texts):
        raise InputError("this method needs one embedding per task sentence", param="task")
    pool = pool or PoolText.of_index(index)
    return TaskData(index, pool, np.asarray(task), list(task_texts), _n_positive(budget),
                    seed=seed, m=m, rounds=rounds,
                    lexical=LexicalConfig(order=order, fraction=expand))


def fused_learned(index: Index, view: SegmentView, data: TaskData, budget: Budget,
                  folds: int = 5, sample: int = 4000) -> Ranking:
    """Learned fusion of classifier, Moore-Lewis and density over every stored sentence."""
    t0 = time.perf_counter()
    got = learned_fusion(data, folds=folds, sample=sample)
    info = {"fusion": got.weights.to_json(), "fusion_seconds": round(time.perf_counter() - t0, 2),
            "lm_order": data.lexical.order, "expansion_fraction": data.lexical.fraction}
    return by_sentence_scores(view, got.scores, budget, info)


def finetune(index: Index, view: SegmentView, data: TaskData, budget: Budget,
             config: FinetuneConfig = FinetuneConfig(), progress: bool = True) -> Ranking:
    """Domain-Finetune on the top candidates of `fused` (equal-weight, expanded Moore-Lewis)."""
    parts = fused_parts(data)
    prerank = scoring.fuse_zscores(parts["classifier"], parts["moore-lewis"])
    result = finetune_scores(index, data.texts, prerank, data.n_positive, config, progress)
    return by_sentence_scores(view, result.scores, budget,
                              {"finetune": result.info, "prerank": "fused"})


def fused_parts(data: TaskData) -> dict[str, np.ndarray]:
    """Classifier and Moore-Lewis scores of every corpus row, fitted on the whole task."""
    from .task_scorers import fit_scorers

    fitted = fit_scorers(("classifier", "moore-lewis"), data)
    return {name: f.corpus(None) for name, f in fitted.items()}


def heldout_finetune(data: TaskData, prerank: np.ndarray, config: FinetuneConfig,
                     folds: int = 5, sample: int = 4000, progress: bool = True
                     ) -> tuple[np.ndarray, np.ndarray, Any]:
    """Domain-Finetune fitted without the first of the task's `folds` parts: its log-odds of
    that held-out part and of the corpus sample (scores, is_task), and the fitted classifier."""
    part = fold_split(len(data.texts), folds)[0]
    train = np.setdiff1d(np.arange(len(data.texts)), part)
    fitted, _, _ = fit_classifier(data.index, [data.texts[i] for i in train], prerank,
                                  data.n_positive, config, progress)
    rows = corpus_sample(data.index, sample, data.seed)
    texts = [data.texts[i] for i in part] + data.index.store.texts(rows.tolist())
    scores = fitted.score(texts, progress)
    is_task = np.r_[np.ones(len(part), bool), np.zeros(len(rows), bool)]
    return scores, is_task, fitted


def auto(index: Index, view: SegmentView, data: TaskData, budget: Budget,
         finetune_config: FinetuneConfig | None = None, folds: int = 5, sample: int = 4000,
         progress: bool = True) -> Ranking:
    """The method with the best held-out AUC for this task (`auto_all`), run on the whole task;
    `finetune_config` adds Domain-Finetune to the candidates (one more fine-tuning)."""
    got = learned_fusion(data, also=AUTO_EXTRA, folds=folds, sample=sample)
    fused = scoring.fuse_zscores(got.parts["classifier"], got.parts["moore-lewis"])
    extra = {}
    if finetune_config is not None:
        s, is_task, _ = heldout_finetune(data, fused, finetune_config, folds, sample, progress)
        extra["finetune"] = (s, is_task)
    f = got.features
    choice = auto_all.choose(f.x, f.is_task, f.fold_of, f.names, extra=extra, seed=data.seed)
    log.info("auto: %s (%s)", choice.chosen, ", ".join(
        f"{r['name']} AUC {r['auc']:.3f}" for r in choice.table))
    info: dict[str, Any] = {"chosen": choice.chosen, "heldout": choice.table,
                            "fusion": got.weights.to_json()}
    if choice.chosen == "finetune":
        result = finetune_scores(index, data.texts, fused, data.n_positive, finetune_config,
                                 progress)
        scores = result.scores
        info["finetune"] = result.info
    else:
        scores = {"fused": fused, "fused-learned": got.scores}.get(choice.chosen)
        if scores is None:
            scores = got.parts[choice.chosen]
    return by_sentence_scores(view, scores, budget, info)
