"""`tapt select`: embed a task with the index's model, rank segments, write the selection file."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tapt.indexer.encoder import Encoder
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.util.versions import library_versions, utc_now

from . import methods
from .budget import parse_budget
from .selection_file import SelectedSegment, write_selection
from .task import Task, load_task
from .task_cache import encode_cached

log = logging.getLogger(__name__)

Method = Literal["centroid", "knn", "iforest", "random", "distance", "density", "classifier",
                 "moore-lewis", "fused", "auto"]
METHODS = ("centroid", "knn", "iforest", "random", "distance", "density", "classifier",
           "moore-lewis", "fused", "auto")
NO_BUDGET = ("knn", "classifier", "auto")  # knn: the union; classifier/auto: probability > 0.5


@dataclass
class SelectConfig:
    """Parameters of one selection, validated on creation (they are recorded in the manifest)."""

    method: Method
    budget: str | None = None
    k: int = 50
    candidates: str = "10x"
    prerank: Literal["centroid", "knn", "density", "classifier", "fused"] = "centroid"
    weights: Literal["discrete", "continuous"] = "discrete"
    C: float = 4.0
    alpha: float = 0.0
    pca: int = 0
    seed: int = 0
    segment_size: int | None = None
    detector: str = "iforest"
    m: int = 10
    rounds: int = 2
    nprobe: int | None = None
    ef_search: int | None = None

    def __post_init__(self) -> None:
        from .detector_registry import DETECTORS

        if self.method not in METHODS:
            raise InputError(f"unknown method {self.method!r}")
        if self.budget is None and self.method not in NO_BUDGET:
            raise InputError(f"{self.method} needs a --budget")
        if self.budget is not None:
            parse_budget(self.budget)
        if self.k < 1:
            raise InputError("--k must be at least 1")
        if self.segment_size is not None and self.segment_size < 1:
            raise InputError("--segment-size must be at least 1")
        if self.pca < 0:
            raise InputError("--pca must be 0 (off) or a number of dimensions")
        if self.method == "iforest":
            methods.parse_candidates(self.candidates)
        if self.detector not in DETECTORS + ("auto",):
            raise InputError(f"unknown detector {self.detector!r}: use one of "
                             f"{', '.join(DETECTORS)} or auto")
        if self.prerank not in ("centroid", "knn", "density", "classifier", "fused"):
            raise InputError(f"unknown --prerank {self.prerank!r}")
        if self.m < 1:
            raise InputError("--m must be at least 1")
        if self.rounds < 0:
            raise InputError("--rounds must be 0 or more")
        for flag, value in (("--nprobe", self.nprobe), ("--ef-search", self.ef_search)):
            if value is not None and value < 1:
                raise InputError(f"{flag} must be at least 1")


def rank(index: Index, config: SelectConfig, task_embeddings: np.ndarray | None,
         task_texts: list[str] | None = None) -> tuple[methods.Ranking, methods.SegmentView]:
    """Run the configured method on embeddings already computed (no I/O beyond the index);
    moore-lewis reads `task_texts` instead, fused both."""
    from . import scored

    view = methods.SegmentView.of(index, config.segment_size)
    budget = parse_budget(config.budget) if config.budget is not None else None
    if config.method == "random":
        return methods.random(index, view, budget, config.seed), view
    if config.method == "moore-lewis":
        return scored.moore_lewis_method(index, view, task_texts or [], budget, config.seed), view
    if task_embeddings is None or len(task_embeddings) == 0:
        raise InputError(f"{config.method} needs task sentences")
    if config.method == "centroid":
        return methods.centroid(index, view, task_embeddings, budget), view
    if config.method == "knn":
        return methods.knn(index, view, task_embeddings, budget, config.k, nprobe=config.nprobe,
                           ef_search=config.ef_search), view
    if config.method == "fused":
        return scored.fused_method(index, view, task_embeddings, task_texts, budget,
                                   rounds=config.rounds, seed=config.seed), view
    extra = {"m": config.m, "rounds": config.rounds, "seed": config.seed}
    if config.method in ("distance", "density", "classifier"):
        return scored.embedding_method(config.method, index, view, task_embeddings, budget,
                                       **extra), view
    if config.method == "auto":
        return scored.auto(index, view, task_embeddings, budget, **extra), view
    pre = None
    if config.prerank == "fused":
        pre = scored.fused_method(index, view, task_embeddings, task_texts, budget,
                                  rounds=config.rounds, seed=config.seed, cut=False)
    elif config.prerank in ("density", "classifier"):
        pre = scored.pre_ranking(config.prerank, index, view, task_embeddings, budget, **extra)
    return methods.iforest(
        index, view, task_embeddings, budget, candidates=config.candidates, prerank=config.prerank,
        k=config.k, weights=config.weights, C=config.C, alpha=config.alpha, seed=config.seed,
        pca_dims=config.pca, detector=config.detector, pre=pre, nprobe=config.nprobe,
        ef_search=config.ef_search,
    ), view


def run_selection(index: Index, config: SelectConfig, out: str | Path,
                  task_files: list[str] | None = None, encoder: Encoder | None = None,
                  batch_size: int = 64) -> dict[str, Any]:
    """Embed the task, rank, and write `out` plus its manifest; returns the manifest."""
    timings: dict[str, float] = {}
    start = time.perf_counter()
    task: Task | None = None
    task_emb = None
    if config.method != "random":
        if not task_files:
            raise InputError(f"{config.method} needs --task")
        task = load_task(task_files, split=index.manifest["ingest"]["split_sentences"])
        if encoder is None:
            encoder = index.load_encoder()
        else:
            index.check_encoder(encoder)
        t0 = time.perf_counter()
        task_emb, cached = encode_cached(encoder, task.sentences, batch_size=batch_size)
        timings["embed_task_seconds"] = round(time.perf_counter() - t0, 3)
        timings["task_embeddings_cached"] = cached
    t0 = time.perf_counter()
    ranking, view = rank(index, config, task_emb, task.sentences if task else None)
    timings["score_seconds"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    segments = _materialise(index, view, ranking, config.method)
    timings["read_text_seconds"] = round(time.perf_counter() - t0, 3)
    sentences = int(view.lengths[ranking.segments].sum())
    manifest = {
        "method": config.method,
        "params": {k: v for k, v in asdict(config).items() if k not in ("method",)},
        "budget": parse_budget(config.budget).to_json() if config.budget else None,
        "segment_size": int(config.segment_size or index.segment_size),
        "seed": config.seed,
        "task": None if task is None else {"files": task.files, "sha256": task.sha256,
                                           "sentences": len(task.sentences)},
        "index": index.identity(),
        "counts": {"segments": len(segments), "sentences": sentences,
                   "tokens": int(view.tokens[ranking.segments].sum()),
                   "corpus_segments": len(view), "corpus_sentences": index.n_sentences},
        "info": ranking.info,
        "created": utc_now(),
        "versions": library_versions(),
    }
    timings["total_seconds"] = round(time.perf_counter() - start, 3)
    manifest["timings"] = timings
    write_selection(out, segments, manifest)
    return manifest


def _materialise(index: Index, view: methods.SegmentView, ranking: methods.Ranking,
                 method: str) -> list[SelectedSegment]:
    docs = index.segment_docs(view.offsets)
    out = []
    for rank_, seg in enumerate(ranking.segments.tolist()):
        lo, hi = int(view.offsets[seg]), int(view.offsets[seg + 1])
        sentences = index.store.texts(range(lo, hi))
        out.append(SelectedSegment(
            id=seg, rank=rank_, score=float(ranking.scores[rank_]),
            weight=float(ranking.weights[rank_]), method=method, doc=int(docs[seg]), rows=(lo, hi),
            text=" ".join(sentences), sentences=sentences,
        ))
    return out
