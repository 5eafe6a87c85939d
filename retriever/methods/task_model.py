"""task-model: a user's task classifier (a NER tagger, a sentence classifier) rescores the
candidates of a cheap pre-ranking (`retriever.learned.task_classifier`): NER-Selected,
generalised."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tapt.errors import InputError
from tapt.retriever.learned.task_classifier import (
    SEQUENCE_SCORES,
    TOKEN_SCORES,
    load_task_model,
    score_texts,
)
from tapt.retriever.methods.base import Params, param, take
from tapt.retriever.methods.candidates import RescoresCandidates, candidate_pool, parse_candidates
from tapt.retriever.methods.registry import prerank_choices, register
from tapt.retriever.scoring import arrays


@dataclass(frozen=True)
class TaskModelParams(Params):
    task_model: str | None = param(None, "The task's classifier (required): a Hugging Face "
                                   "token- or sequence-classification model directory or hub "
                                   "name.")
    score: str = param("auto", "Token classification: `count` entity spans or `density` "
                       "(entity word pieces per piece); sequence classification: `probability` "
                       "of `label`; auto: count or probability.",
                       choices=("auto",) + TOKEN_SCORES + SEQUENCE_SCORES)
    label: str | None = param(None, "Sequence classification: the class scored [default: id 1 "
                              "of two]; token classification: the outside label [default: "
                              "\"O\", else id 0]. A name or an id.")
    candidates: str = param("10x", "Candidates to rescore: 10x the budget, a segment count, or "
                            "all.")
    prerank: str = param("centroid", "How candidates are pre-ranked.", choices=prerank_choices)
    task_batch_size: int = param(32, "Sentences per forward pass of the task model.", minimum=1)
    task_model_device: str = param("cpu", "Where the task model runs.", choices=("cpu", "cuda"))

    def validate(self) -> None:
        parse_candidates(self.candidates)


@register
class TaskModel(RescoresCandidates):
    name = "task-model"
    summary = "A task classifier (NER tagger, sentence classifier) rescores pre-ranked candidates."
    help = """A Hugging Face token-classification model (such as a NER tagger trained on the
    task) scores the pre-ranking's candidates by the entities it tags in each sentence (`score`
    count: spans; density: entity word pieces per piece); a sequence-classification model by
    the probability of `label`. Which kind the model is comes from its config. Only the
    candidates' texts are read and scored; ties keep the pre-ranking's order.

    \b
    Examples:
      tapt select task-model idx --task task.jsonl --budget 20000sent \\
          --task-model ./ner-model --out sel.jsonl
      tapt select task-model idx --task task.jsonl --budget 0.1 --task-model ./clf \\
          --label relevant --candidates 5x --prerank fused --out sel.jsonl
    """
    order = 94
    benchmarked = False      # needs the user's model: not in `tapt bench recall`
    Params = TaskModelParams

    def uses_embeddings(self, params):
        pre = self._prerank(params)
        return pre is not None and pre.uses_embeddings(pre.shared_params(params))

    def min_task(self, params):
        pre = self._prerank(params)
        return 0 if pre is None else pre.min_task(pre.shared_params(params))

    def rank(self, ctx, params):
        """The pre-ranking's candidates ranked by the task model's mean score of their
        sentences (ties keep the pre-ranking's order), cut at the budget."""
        if not params.task_model:
            raise InputError("give the task's classifier: a token- or sequence-classification "
                             "model", param="task_model")
        model = load_task_model(params.task_model, params.task_model_device)
        score = params.score
        if score == "auto":
            score = "count" if model.kind == "token" else "probability"
        allowed = TOKEN_SCORES if model.kind == "token" else SEQUENCE_SCORES
        if score not in allowed:
            raise InputError(f"{model.name} is a {model.kind}-classification model: use "
                             f"{' or '.join(allowed)}", param="score")
        label = model.label_id(params.label)
        view = ctx.view
        pre = self._prerank(params)
        pool = candidate_pool(ctx, pre, pre and pre.shared_params(params), params.candidates)
        rows = arrays.rows_of_segments(view.offsets, pool)
        texts = ctx.index.store.texts(rows.tolist())
        row_scores, info = score_texts(model, texts, score, label, params.task_batch_size,
                                       progress=ctx.progress)
        seg_scores = arrays.segment_mean(row_scores, view.lengths[pool])
        order = arrays.rank(seg_scores)             # ties: the pre-ranking's order
        out: dict[str, Any] = {"task_model": model.name, "task_model_kind": model.kind,
                               "score": score, "label": model.labels[label],
                               "prerank": pre.name if pre is not None else None,
                               "candidate_segments": int(len(pool)), **info}
        return take(view, pool[order], seg_scores[order].astype(np.float32), ctx.budget, out,
                    ranked=True)
