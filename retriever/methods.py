"""The selection methods: each ranks segments for a task and returns a `Ranking`.

They work on an open `Index` and task embeddings; the pure arithmetic lives in `scoring`.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.indexer.integrity import check_unit_rows

from . import scoring
from .budget import Budget, budget_target, cut
from .choose_detector import rank_detectors
from .detector_registry import fit_detector

log = logging.getLogger(__name__)


@dataclass
class Ranking:
    """Selected segments in rank order with their scores and weights, plus what the method saw."""

    segments: np.ndarray
    scores: np.ndarray
    weights: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class SegmentView:
    """Segments of an index at one segment size, with their sentence and token counts."""

    offsets: np.ndarray
    lengths: np.ndarray
    tokens: np.ndarray

    @classmethod
    def of(cls, index: Index, size: int | None) -> "SegmentView":
        offsets = index.segments(size)
        lengths = np.diff(offsets)
        tok = np.add.reduceat(np.asarray(index.tokens, dtype=np.int64), offsets[:-1])
        return cls(offsets, lengths, tok)

    def __len__(self) -> int:
        return len(self.lengths)


def _take(view: SegmentView, order: np.ndarray, scores: np.ndarray, budget: Budget | None,
          info: dict[str, Any]) -> Ranking:
    if budget is None:
        chosen = order
    else:
        target = budget_target(budget, view.lengths, view.tokens)
        chosen = cut(order, budget, target, view.lengths, view.tokens)
        if budget.unit in ("fraction", "segments") and len(chosen) < target:
            info["budget_shortfall"] = f"only {len(chosen)} candidate segments for {int(target)}"
            log.warning("budget %s asks for more than the %d candidates", budget.spec, len(chosen))
    return Ranking(chosen, scores[chosen], np.ones(len(chosen), dtype=np.float32), info)


def centroid(index: Index, view: SegmentView, task: np.ndarray, budget: Budget | None) -> Ranking:
    """Domain-Cosine: segments ranked by the mean cosine of their sentences to the task centroid."""
    sims = scoring.centroid_scores(index.embeddings, scoring.centroid(task))
    seg_scores = scoring.segment_mean(sims, view.lengths)
    return _take(view, scoring.rank(seg_scores), seg_scores, budget, {})


def knn(index: Index, view: SegmentView, task: np.ndarray, budget: Budget | None, k: int,
        nprobe: int | None = None, ef_search: int | None = None) -> Ranking:
    """kNN-TAPT: the union of every task sentence's k nearest corpus sentences.

    Segments touched by the union are ranked by the mean, over their sentences, of each sentence's
    exact best cosine to any task sentence; without a budget the whole union is selected. On an
    approximate FAISS index the neighbours are candidates rescored exactly (`Index.search`);
    `nprobe` / `ef_search` override the index's recorded default.
    """
    k = min(k, index.n_sentences)
    t0 = time.perf_counter()
    distances, ids = index.search(task, k, nprobe=nprobe, ef_search=ef_search)
    search_s = time.perf_counter() - t0
    union, _ = scoring.knn_union(distances, ids)
    candidates = np.unique(scoring.segment_of_rows(view.offsets, union))
    rows = scoring.rows_of_segments(view.offsets, candidates)
    best = scoring.max_similarity(index.embeddings[rows] if len(rows) else rows, task, ids=rows)
    cand_scores = scoring.segment_mean(best, view.lengths[candidates])
    scores = np.full(len(view), -np.inf, dtype=np.float32)
    scores[candidates] = cand_scores
    order = candidates[scoring.rank(cand_scores)]
    info = {"union_sentences": int(len(union)), "candidate_segments": int(len(candidates)),
            "search_seconds": round(search_s, 3), "faiss": _faiss_label(index, nprobe, ef_search)}
    log.info("knn union: %d distinct sentences in %d segments", len(union), len(candidates))
    return _take(view, order, scores, budget, info)


def _faiss_label(index: Index, nprobe: int | None, ef_search: int | None) -> str:
    """The FAISS index and search parameter a knn search used, e.g. `HNSW32 efSearch 128`."""
    from tapt.indexer.faiss_index import search_setting

    info = index.manifest.get("faiss", {})
    _, name, value = search_setting(info, index.n_sentences, index.dim, nprobe, ef_search)
    return f"{info.get('factory', 'Flat')}" + (f" {name} {value}" if name else "")


def parse_candidates(spec: str) -> tuple[Literal["all", "times", "count"], float]:
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
        raise InputError(f"--candidates {spec!r}: use 10x, a segment count, or all") from exc
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"--candidates {spec!r} must be positive")
    return kind, value


def iforest(index: Index, view: SegmentView, task: np.ndarray, budget: Budget, *,
            candidates: str = "10x", prerank: str = "centroid", k: int = 50,
            weights: str = "discrete", C: float = 4.0, alpha: float = 0.0, seed: int = 0,
            pca_dims: int = 0, detector: str = "iforest", pre: Ranking | None = None,
            nprobe: int | None = None, ef_search: int | None = None) -> Ranking:
    """TADPOLE: a detector (Isolation Forest by default) fitted on the task rescores candidate
    segments by their mean anomaly. `pre` is a full pre-ranking (else centroid or knn);
    `detector="auto"` picks the detector with the best held-out F1 for the task."""
    kind, value = parse_candidates(candidates)
    if kind == "all":
        pool = np.arange(len(view))
    else:
        if pre is None:
            pre = (centroid(index, view, task, None) if prerank == "centroid"
                   else knn(index, view, task, None, k, nprobe=nprobe, ef_search=ef_search))
        if kind == "times":
            wanted = len(_take(view, np.arange(len(view)), np.zeros(len(view)), budget, {}).segments)
            size = int(math.ceil(value * wanted))
        else:
            size = int(value)
        pool = pre.segments[:size]
    rng = np.random.default_rng(seed)
    n_sample = min(max(1, int(math.ceil(0.1 * len(task)))), index.n_sentences)
    sample_rows = np.sort(rng.choice(index.n_sentences, size=n_sample, replace=False))
    background = None
    if pca_dims:
        bg_rows = np.sort(rng.choice(index.n_sentences, size=min(len(task), index.n_sentences),
                                     replace=False))
        background = np.asarray(index.embeddings[bg_rows])
    extra: dict[str, Any] = {}
    if detector == "auto":
        table = rank_detectors(index, task, seed=seed, pca_dims=pca_dims)
        detector = table[0]["name"]
        extra = {"detector_f1": {r["name"]: r["f1"] for r in table}}
    anomaly_of = fit_detector(detector, task, np.asarray(index.embeddings[sample_rows]),
                              seed=seed, pca_dims=pca_dims, background=background)
    rows = scoring.rows_of_segments(view.offsets, pool)
    candidate_rows = index.embeddings[rows]
    check_unit_rows(candidate_rows, rows)  # damaged rows fail here instead of ranking
    seg_anomaly = scoring.segment_mean(anomaly_of(candidate_rows), view.lengths[pool])
    order_in_pool = scoring.rank(-seg_anomaly)
    scores = np.full(len(view), -np.inf, dtype=np.float32)
    scores[pool] = -seg_anomaly
    ranking = _take(view, pool[order_in_pool], scores, budget,
                    {"candidate_segments": int(len(pool)), "corpus_sample": int(len(sample_rows)),
                     "detector": detector, **extra})
    if weights == "continuous":
        lam = np.zeros(len(view), dtype=np.float32)
        lam[pool] = scoring.lambda_weights(seg_anomaly, C, alpha)
        ranking.weights = lam[ranking.segments]
    return ranking


def random(index: Index, view: SegmentView, budget: Budget, seed: int) -> Ranking:
    """Uniformly random segments (the baseline), seeded."""
    order = np.random.default_rng(seed).permutation(len(view))
    return _take(view, order, np.zeros(len(view), dtype=np.float32), budget, {})
