"""iforest: TADPOLE, a novelty detector fitted on the task rescores pre-ranked candidates."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from tapt.errors import InputError
from tapt.indexer.store.integrity import check_unit_rows
from tapt.retriever.learned.detector_choice import rank_detectors
from tapt.retriever.learned.detectors import DETECTORS, fit_detector
from tapt.retriever.methods.base import Params, param, take
from tapt.retriever.methods.candidates import RescoresCandidates, candidate_pool, parse_candidates
from tapt.retriever.methods.registry import prerank_choices, register
from tapt.retriever.scoring import arrays

log = logging.getLogger(__name__)


# The most driver memory the candidates' rows may take as the detector reads them (float32):
# the rescoring gathers every candidate row, so its memory grows with `candidates` x the budget,
# not with the corpus; a selection that would need more is refused before it gathers any.
CANDIDATE_MEMORY = 8 << 30


def check_candidate_memory(rows: int, dim: int, spec: str) -> None:
    """Refuse candidates whose rows would take more than `CANDIDATE_MEMORY` (float32).

    Args:
        rows: Sentences the candidate segments hold.
        dim: The embeddings' dimension.
        spec: The `candidates` value asked for (named in the message).

    Raises:
        InputError: naming `candidates`, with the memory it would take and the limit.
    """
    need = rows * dim * 4
    if need > CANDIDATE_MEMORY:
        raise InputError(
            f"{spec} gives {rows:,} candidate sentences, {need / (1 << 30):.1f} GiB of rows "
            f"to rescore in memory (the limit is {CANDIDATE_MEMORY / (1 << 30):.0f} GiB, "
            f"{CANDIDATE_MEMORY // (dim * 4):,} sentences): give fewer candidates or a "
            "smaller budget", param="candidates")


@dataclass(frozen=True)
class IForestParams(Params):
    candidates: str = param("10x", "Candidates to rescore: 10x the budget, a segment count, or "
                            "all.")
    prerank: str = param("centroid", "How candidates are pre-ranked (fused: classifier + "
                         "Moore-Lewis).", choices=prerank_choices)
    detector: str = param("iforest", "Rescoring detector; auto = best held-out F1 (see tapt "
                          "detectors rank).", choices=lambda: DETECTORS + ("auto",))
    k: int = param(50, "Neighbours per task sentence for `prerank` knn.", minimum=1, short="-k")
    weights: Literal["discrete", "continuous"] = param(
        "discrete", "continuous: weight = sigmoid(C * (alpha - z)), z the standardised anomaly.")
    C: float = param(4.0, "Steepness of the continuous weights.",
                     requires=("weights", "continuous"))
    alpha: float = param(0.0, "Centre of the continuous weights, in standardised anomaly.",
                         requires=("weights", "continuous"))
    pca: int = param(0, "Fit the detector in a PCA projection of this many dimensions (0 = off).",
                     minimum=0)
    nprobe: int | None = param(None, "IVF indexes, `prerank` knn: inverted lists searched per "
                               "query [default: the index's calibrated one].", minimum=1)
    ef_search: int | None = param(None, "HNSW indexes, `prerank` knn: efSearch [default: the "
                                  "index's calibrated one].", minimum=1)

    def validate(self) -> None:
        parse_candidates(self.candidates)


@register
class IForest(RescoresCandidates):
    name = "iforest"
    summary = "Rescore candidates with an Isolation Forest fitted on the task (TADPOLE)."
    help = """A detector (Isolation Forest by default, or LOF, one-class SVM, robust covariance,
    PCA reconstruction, kNN distance, or auto = the best held-out F1 for the task) is fitted on
    the task plus random corpus sentences (10% as many as the task's), and rescores the
    pre-ranked candidates by their mean anomaly; --weights continuous turns the anomaly into
    TADPOLE's lambda weights. The candidates' rows are rescored in memory: more than 8 GiB of
    them (as float32) is refused.

    \b
    Examples:
      tapt select iforest idx --task task.jsonl --budget 0.2 --out sel.jsonl
      tapt select iforest idx --task task.jsonl --budget 1.0 --candidates all \\
          --weights continuous --C 4 --alpha 0 --out weighted.jsonl
    """
    order = 30
    min_task_sentences = 2
    warn_task_sentences = 5
    Params = IForestParams

    def pools_documents(self, params):
        pre = self._prerank(params)
        return (parse_candidates(params.candidates)[0] != "all" and pre is not None
                and pre.pools_documents(pre.shared_params(params)))

    def min_task(self, params):
        return 4 if params.detector == "auto" else self.min_task_sentences

    def rank(self, ctx, params):
        index, view, budget = ctx.index, ctx.view, ctx.budget
        task = ctx.need_task(self.name)
        pre_method = self._prerank(params)
        pool = candidate_pool(ctx, pre_method, pre_method and pre_method.shared_params(params),
                              params.candidates)
        rng = np.random.default_rng(ctx.seed)
        n_sample = min(max(1, int(math.ceil(0.1 * len(task)))), index.n_sentences)
        sample_rows = np.sort(rng.choice(index.n_sentences, size=n_sample, replace=False))
        background = None
        if params.pca:
            bg_rows = np.sort(rng.choice(index.n_sentences,
                                         size=min(len(task), index.n_sentences), replace=False))
            background = np.asarray(index.embeddings[bg_rows])
        detector, extra = params.detector, {}
        if detector == "auto":
            table = rank_detectors(index, task, seed=ctx.seed, pca_dims=params.pca)
            detector = table[0]["name"]
            extra = {"detector_f1": {r["name"]: r["f1"] for r in table}}
        anomaly_of = fit_detector(detector, task, np.asarray(index.embeddings[sample_rows]),
                                  seed=ctx.seed, pca_dims=params.pca, background=background)
        check_candidate_memory(int(np.sum(view.lengths[pool], dtype=np.int64)), index.dim,
                               params.candidates)
        rows = arrays.rows_of_segments(view.offsets, pool)
        candidate_rows = index.embeddings[rows]
        check_unit_rows(candidate_rows, rows)  # damaged rows fail here instead of ranking
        seg_anomaly = arrays.segment_mean(anomaly_of(candidate_rows), view.lengths[pool])
        order_in_pool = arrays.rank(-seg_anomaly)
        scores = np.full(len(view), -np.inf, dtype=np.float32)
        scores[pool] = -seg_anomaly
        info: dict[str, Any] = {"candidate_segments": int(len(pool)),
                                "corpus_sample": int(len(sample_rows)), "detector": detector,
                                **extra}
        if len(pool) > 1 and np.ptp(seg_anomaly) == 0:
            info["warnings"] = [f"the {detector} detector gave every candidate the same "
                                "anomaly score: the order is the pre-ranking's"]
            log.warning("%s", info["warnings"][0])
        ranking = take(view, pool[order_in_pool], scores, budget, info)
        if params.weights == "continuous":
            lam = np.zeros(len(view), dtype=np.float32)
            lam[pool] = arrays.lambda_weights(seg_anomaly, params.C, params.alpha)
            ranking.weights = lam[ranking.segments]
        return ranking
