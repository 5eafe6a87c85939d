"""iforest: TADPOLE, a novelty detector fitted on the task rescores pre-ranked candidates."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from tapt.errors import InputError
from tapt.indexer.store.integrity import check_unit_rows

from ..scoring import arrays
from ..ranking.budget import budget_target, cut_length
from ..learned.detector_choice import rank_detectors
from ..learned.detectors import DETECTORS, fit_detector
from .base import Method, Params, param, take
from .registry import get_method, prerank_choices, register

log = logging.getLogger(__name__)


def parse_candidates(spec: str) -> tuple[Literal["all", "times", "count"], float]:
    """'10x' -> ('times', 10.0), '500' -> ('count', 500.0), 'all' -> ('all', 0.0)."""
    spec = str(spec).strip().lower()
    try:
        if spec == "all":
            return "all", 0.0
        if spec.endswith("x"):
            value = float(spec[:-1])
            kind: Literal["times", "count"] = "times"
        else:
            value = float(int(spec))
            kind = "count"
    except ValueError as exc:
        raise InputError(f"{spec!r}: use 10x, a segment count, or all",
                         param="candidates") from exc
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{spec!r} must be positive", param="candidates")
    return kind, value


def candidate_pool(ctx, pre_method: Method | None, pre_params: Params | None,
                   spec: str) -> np.ndarray:
    """The candidate segments a rescoring method takes from a pre-ranking, best first.

    Args:
        ctx: The selection's `RankingInputs` (a `times` spec needs its budget).
        pre_method: The pre-ranking method (unused for `all`).
        pre_params: Its parameters.
        spec: `candidates`: a multiple of the budget ("10x"), a segment count, or "all".

    Returns:
        Segment ids: for a multiple, the pre-ranking's shortest prefix that holds it.
    """
    view, budget = ctx.view, ctx.budget
    kind, value = parse_candidates(spec)
    if kind == "all":
        return np.arange(len(view))
    if kind == "times":    # the segments the budget holds, counted in index order
        if budget is None:
            raise InputError("a candidates multiple needs a budget", param="candidates")
        wanted = cut_length(budget.unit, budget_target(budget, view.lengths, view.tokens),
                            view.tokens if budget.unit == "tokens" else view.lengths)
        return IForest._holding_budget(ctx, pre_method, pre_params,
                                       int(math.ceil(value * wanted)), value)
    return pre_method.top_segments(ctx, pre_params, int(value))


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
class IForest(Method):
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

    def _prerank(self, params: IForestParams):
        if parse_candidates(params.candidates)[0] == "all":
            return None
        return get_method(params.prerank)

    def uses_text(self, params):
        pre = self._prerank(params)
        return pre is not None and pre.uses_text(pre.shared_params(params))

    def pools_documents(self, params):
        pre = self._prerank(params)
        return (parse_candidates(params.candidates)[0] != "all" and pre is not None
                and pre.pools_documents(pre.shared_params(params)))

    def min_task(self, params):
        return 4 if params.detector == "auto" else self.min_task_sentences

    @staticmethod
    def _holding_budget(ctx, pre_method, pre_params, size: int, times: float) -> np.ndarray:
        """`times` x the budget of candidates from the pre-ranking: its first `size` segments
        for a budget in segments, else its shortest prefix that holds `times` x the budget's
        sentences or tokens (the pre-ranking's top segments are often shorter or longer than
        the index's average, which `size` assumes)."""
        view, budget = ctx.view, ctx.budget
        pool = pre_method.top_segments(ctx, pre_params, size)
        if budget.unit not in ("sentences", "tokens"):
            return pool
        measure = np.asarray(view.tokens if budget.unit == "tokens" else view.lengths)
        want = times * budget_target(budget, view.lengths, view.tokens)
        while len(pool) == size < len(view) and measure[pool].sum() < want:
            held = max(float(measure[pool].sum()), 1.0)
            size = min(len(view), max(size + 1, int(math.ceil(1.25 * size * want / held))))
            pool = pre_method.top_segments(ctx, pre_params, size)
        return pool[:cut_length(budget.unit, want, measure[pool])]

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
