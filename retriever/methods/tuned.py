"""The `tuned_model` option of `centroid` and `density`: a task-tuned encoder (such as the output
of `tapt train` on the task; the B1/B2 baselines of NER data selection) embeds the candidates of
the stored embeddings' ranking and the task again, and the method's own score ranks them.

`TunedCosine` is that option: without `tuned_model` every call goes to the plain method
(`Plain`), so the plain selections are those of the method without the option, bit for bit;
with it, only the candidates and the task are embedded again.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tapt.errors import InputError
from tapt.retriever.methods.base import Method, Params, ScanParams, SentenceScored, param, take
from tapt.retriever.methods.candidates import candidate_pool, parse_candidates
from tapt.retriever.methods.params import GIVEN
from tapt.retriever.methods.registry import get_method, prerank_choices
from tapt.retriever.scoring import arrays


@dataclass(frozen=True)
class TunedParams(ScanParams):
    """`ScanParams` and the task-tuned encoder's rescoring (`TunedCosine`)."""

    tuned_model: str | None = param(
        None, "A task-tuned encoder (a sentence-transformers or Hugging Face model directory, "
              "such as the output of `tapt train` on the task, or a hub name): the task and the "
              "`candidates` are embedded with it and rescored by this method's score.")
    candidates: str = param("3x", "With `tuned_model`: the candidates embedded again: a "
                            "multiple of the budget, a segment count, or all.",
                            requires=("tuned_model", GIVEN))
    prerank: str | None = param(None, "With `tuned_model`: how candidates are pre-ranked "
                                "[default: this method on the stored embeddings].",
                                choices=prerank_choices, requires=("tuned_model", GIVEN))
    tuned_device: str = param("auto", "With `tuned_model`: where it embeds.",
                              choices=("auto", "cpu", "cuda"), requires=("tuned_model", GIVEN))

    def validate(self) -> None:
        parse_candidates(self.candidates)


def load_tuned_encoder(spec: str, device: str) -> Any:
    """The tuned encoder (`indexer.encoding.encoder.load_encoder`: any local sentence-transformers
    or Hugging Face directory); a failure names `tuned_model`."""
    from tapt.indexer.encoding.encoder import load_encoder

    try:
        return load_encoder(spec, device=device, backend="torch")
    except InputError as exc:
        raise InputError(exc.message, param="tuned_model") from exc


class TunedCosine(SentenceScored):
    """A `SentenceScored` method with the `tuned_model` option (`TunedParams`). Subclasses set
    `Plain`, the method without it, whose `scorer` rescores the re-embedded candidates."""

    Plain: ClassVar[type[SentenceScored]]

    def __init__(self) -> None:
        self.plain = self.Plain()

    def _prerank(self, params: TunedParams) -> tuple[Method | None, Params | None]:
        """The pre-ranking and its parameters (never tuned again): this method on the stored
        embeddings, or `prerank`; none for candidates `all`."""
        if parse_candidates(params.candidates)[0] == "all":
            return None, None
        untuned = dataclasses.replace(params, tuned_model=None)
        if params.prerank is None:
            return self.plain, untuned
        pre = get_method(params.prerank)
        return pre, pre.shared_params(untuned)

    def uses_text(self, params):
        if params.tuned_model is None:
            return self.plain.uses_text(params)
        return True

    def uses_embeddings(self, params):
        if params.tuned_model is None:
            return self.plain.uses_embeddings(params)
        pre, pre_params = self._prerank(params)
        return pre is not None and pre.uses_embeddings(pre_params)

    def depends_on_budget(self, params):
        return True if params.tuned_model is not None else self.plain.depends_on_budget(params)

    def row_scorer(self, ctx, params):
        return None if params.tuned_model is not None else self.plain.row_scorer(ctx, params)

    def top_segments(self, ctx, params, count):
        if params.tuned_model is None:
            return self.plain.top_segments(ctx, params, count)
        return super().top_segments(ctx, params, count)

    def full_ranking(self, ctx, params):
        if params.tuned_model is None:
            return self.plain.full_ranking(ctx, params)
        return super().full_ranking(ctx, params)

    def tuned_scores(self, ctx, params: TunedParams
                     ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """The candidate segments (best first by the pre-ranking), their sentences' scores by
        the tuned encoder (in `rows_of_segments` order) and what the rescoring reports."""
        pre, pre_params = self._prerank(params)
        view = ctx.view
        pool = candidate_pool(ctx, pre, pre_params, params.candidates)
        rows = arrays.rows_of_segments(view.offsets, pool)
        task_texts = ctx.need_texts(self.name)
        t0 = time.perf_counter()
        encoder = ctx.memo.get(("tuned-encoder", params.tuned_model, params.tuned_device),
                               lambda: load_tuned_encoder(params.tuned_model,
                                                          params.tuned_device))
        load_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        texts = ctx.index.store.texts(rows.tolist())
        task = encoder.encode(task_texts)
        candidates = encoder.encode(texts)
        scorer, fit = self.scorer(ctx, task, params)
        row_scores = np.asarray(scorer(candidates), dtype=np.float32)
        info = {**fit, "tuned_model": getattr(encoder, "name", str(params.tuned_model)),
                "prerank": pre.name if pre is not None else None,
                "candidate_segments": int(len(pool)), "reembedded_rows": int(len(rows)),
                "reembedded_task": int(len(task_texts)),
                "tuned_load_seconds": round(load_seconds, 3),
                "tuned_seconds": round(time.perf_counter() - t0, 3)}
        return pool, row_scores, info

    def sentence_scores(self, ctx, params):
        """With `tuned_model`: the tuned scores of the candidates' sentences, -inf elsewhere
        (never selected)."""
        if params.tuned_model is None:
            return self.plain.sentence_scores(ctx, params)
        pool, row_scores, info = self.tuned_scores(ctx, params)
        scores = np.full(ctx.index.n_sentences, -np.inf, dtype=np.float32)
        scores[arrays.rows_of_segments(ctx.view.offsets, pool)] = row_scores
        return scores, info

    def rank(self, ctx, params):
        """With `tuned_model`: the candidates ranked by their sentences' mean tuned score (ties
        keep the pre-ranking's order), cut at the budget."""
        if params.tuned_model is None:
            return self.plain.rank(ctx, params)
        pool, row_scores, info = self.tuned_scores(ctx, params)
        seg_scores = arrays.segment_mean(row_scores, ctx.view.lengths[pool])
        order = arrays.rank(seg_scores)
        return take(ctx.view, pool[order], seg_scores[order], ctx.budget, info, ranked=True)
