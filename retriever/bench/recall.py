"""`tapt bench recall`: precision, recall and F1 of every method against oracle selections.

For each domain of a labelled pool, the task is a seeded subset of the domain's seed sentences
(embedded once per domain; subsets of 100/500/... sentences, `repeats` times), the oracle is the
pool sentences labelled with the domain, and budgets are multiples of the oracle's size in
sentences (`oracle` = 1x, `0.5x`, `2x`). A method whose ranking does not depend on the budget is
run once per task and cut at every budget and segment size; the others (self-trained classifier,
detector rescoring) run once per budget at segment size 1.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever import scoring
from tapt.retriever.budget import parse_budget
from tapt.retriever.methods import iforest
from tapt.retriever.metrics import selection_scores
from tapt.retriever.ngram_lm import Vocabulary
from tapt.retriever.scored import (by_sentence_scores, fit_scorer, fused_sentence_scores,
                               moore_lewis_scores)
from tapt.retriever.select import SelectConfig, rank

from .labelled_pool import SeedSet, seed_subset

log = logging.getLogger(__name__)

# Ranking methods: fixed for a task, cut at every budget (name -> scores of every sentence).
FIXED = ("random", "centroid", "distance", "knn", "maxsim", "density", "moore-lewis", "dsir",
         "classifier-0")
# Methods that use the budget: run per budget through `retriever.select.rank` (segment size 1).
PER_BUDGET: dict[str, dict[str, Any]] = {
    "classifier": {"method": "classifier", "rounds": 2},
    "iforest": {"method": "iforest"},
    "iforest-pca8": {"method": "iforest", "pca": 8},
    "hybrid": {"method": "iforest", "prerank": "classifier", "candidates": "1.5x",
               "detector": "knn-dist", "rounds": 2},
    "auto": {"method": "auto", "rounds": 2},
}
# Classifier (per budget) + Moore-Lewis (per task), fused by z-score: `retriever.scored.fused_scores`.
FUSED = ("fused",)
# The mission's detector path on fused candidates (1.2x the budget), the same as
# `tapt select iforest --prerank fused --candidates 1.2x --detector ...`.
FUSED_HYBRID: dict[str, dict[str, Any]] = {
    "hybrid-fused": {"candidates": "1.2x", "detector": "knn-dist"},
    "iforest-fused": {"candidates": "1.2x", "detector": "iforest"},
}
ALL_METHODS = FIXED + tuple(PER_BUDGET) + FUSED + tuple(FUSED_HYBRID)


def parse_budgets(spec: str) -> list[tuple[str, float]]:
    """'oracle,0.5x,2x' -> [('oracle', 1.0), ('0.5x', 0.5), ('2x', 2.0)]."""
    out = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        try:
            factor = 1.0 if part == "oracle" else float(part.rstrip("x"))
        except ValueError as exc:
            raise InputError(f"--budgets: {part!r} is not 'oracle' or a multiple like 0.5x") from exc
        if not factor > 0:
            raise InputError(f"--budgets: {part!r} must be positive")
        out.append((part, factor))
    if not out:
        raise InputError("--budgets is empty")
    return out


def cut_sentences(order: np.ndarray, lengths: np.ndarray, budget: int) -> np.ndarray:
    """The prefix of a segment ranking that first reaches `budget` sentences."""
    running = np.cumsum(lengths[order])
    return order[: min(int(np.searchsorted(running, budget, side="left")) + 1, len(order))]


def pr_curve(order_rows: np.ndarray, relevant: np.ndarray, points: int = 60) -> dict:
    """Precision and recall after each prefix of a sentence ranking (sampled at `points`)."""
    hits = np.cumsum(relevant[order_rows])
    k = np.unique(np.linspace(1, len(order_rows), points).astype(int))
    total = max(1, int(relevant.sum()))
    return {"k": k.tolist(), "precision": np.round(hits[k - 1] / k, 4).tolist(),
            "recall": np.round(hits[k - 1] / total, 4).tolist()}


@dataclass
class Shared:
    """What every task of one benchmark run reuses: the index, labels, texts, caches."""

    index: Index
    labels: np.ndarray
    texts: list[str] | None = None
    dsir: Any = None
    vocab: Vocabulary | None = None
    encoded: tuple[np.ndarray, np.ndarray] | None = None
    views: dict[int, Any] = field(default_factory=dict)

    def view(self, size: int):
        from tapt.retriever.methods import SegmentView

        if size not in self.views:
            self.views[size] = SegmentView.of(self.index, size)
        return self.views[size]

    def pool_encoded(self):
        if self.encoded is None:
            self.vocab = Vocabulary()
            self.encoded = self.vocab.encode(self.texts)
        return self.vocab, self.encoded


def fixed_scores(name: str, shared: Shared, task: np.ndarray, texts: list[str], seed: int
                 ) -> np.ndarray:
    """Scores of every sentence for a budget-independent method (higher = selected first)."""
    index = shared.index
    if name == "random":
        return np.random.default_rng(seed).random(index.n_sentences).astype(np.float32)
    if name == "knn":
        distances, ids = index.search(task, 50)  # exact ranking of candidates on any index type
        union, best = scoring.knn_union(distances, ids)
        out = np.full(index.n_sentences, -np.inf, dtype=np.float32)
        out[union] = best
        return out
    if name == "moore-lewis":
        vocab, encoded = shared.pool_encoded()
        return moore_lewis_scores([], texts, seed, vocab=vocab, pool_encoded=encoded)
    if name == "dsir":
        return shared.dsir.weights(texts).astype(np.float32)
    scorer_name, extra = {"maxsim": ("density", {"m": 1}), "density": ("density", {"m": 10}),
                          "classifier-0": ("classifier", {"rounds": 0})}.get(name, (name, {}))
    scorer, _ = fit_scorer(scorer_name, index, task, seed=seed, **extra)
    return scorer(index.embeddings)


def evaluate_fixed(scores: np.ndarray, shared: Shared, relevant: np.ndarray,
                   budgets: dict[str, int], sizes: list[int]) -> tuple[list[dict], dict]:
    """Rows per (segment size, budget) and the sentence-level PR curve."""
    rows = []
    curve = {}
    for size in sizes:
        view = shared.view(size)
        seg_scores = scoring.segment_mean(np.where(np.isfinite(scores), scores, -1e30),
                                          view.lengths)
        order = scoring.rank(seg_scores)
        order = order[seg_scores[order] > -1e29]          # knn: only the union can be selected
        if size == 1:
            curve = pr_curve(order, relevant)
        for budget_name, n in budgets.items():
            chosen = cut_sentences(order, view.lengths, n)
            sel = scoring.rows_of_segments(view.offsets, chosen)
            rows.append({"segment_size": size, "budget": budget_name, "budget_sentences": n,
                         **selection_scores(sel, relevant).to_json()})
    return rows, curve


class TaskScores:
    """Scores several methods of one task share: Moore-Lewis once per task, fused once per budget."""

    def __init__(self, shared: Shared, task: np.ndarray, texts: list[str], seed: int) -> None:
        self.shared, self.task, self.texts, self.seed = shared, task, texts, seed
        self._lexical: tuple[np.ndarray, float] | None = None
        self._fused: dict[int, tuple[np.ndarray, float]] = {}

    def moore_lewis(self) -> tuple[np.ndarray, float]:
        if self._lexical is None:
            t0 = time.perf_counter()
            scores = fixed_scores("moore-lewis", self.shared, self.task, self.texts, self.seed)
            self._lexical = scores, time.perf_counter() - t0
        return self._lexical

    def fused(self, n_positive: int) -> tuple[np.ndarray, float]:
        """Fused scores with the classifier self-trained for a budget of `n_positive` sentences."""
        if n_positive not in self._fused:
            ml, ml_seconds = self.moore_lewis()
            t0 = time.perf_counter()
            scores, _ = fused_sentence_scores(self.shared.index, self.task, ml, n_positive,
                                              seed=self.seed)
            self._fused[n_positive] = scores, time.perf_counter() - t0 + ml_seconds
        return self._fused[n_positive]


def fused_hybrid(shared: Shared, task: np.ndarray, scores: np.ndarray, n: int, seed: int,
                 params: dict[str, Any]) -> Any:
    """Detector rescoring of candidates pre-ranked by fused scores (segment size 1)."""
    view = shared.view(1)
    pre = by_sentence_scores(view, scores, None, {}, threshold=-np.inf)
    return iforest(shared.index, view, task, parse_budget(f"{n}sent"), pre=pre, seed=seed,
                   **params)


def run_task(shared: Shared, domain: str, task: np.ndarray, texts: list[str], methods: list[str],
             budgets: dict[str, int], sizes: list[int], seed: int) -> tuple[list[dict], dict]:
    """Every method on one task: result rows and PR curves (segment size 1)."""
    relevant = shared.labels == domain
    rows, curves = [], {}
    cache = TaskScores(shared, task, texts, seed)
    for name in methods:
        if name in FUSED:
            for budget_name, n in budgets.items():
                scores, seconds = cache.fused(n)
                got, curve = evaluate_fixed(scores, shared, relevant, {budget_name: n}, sizes)
                rows += [{"method": name, "seconds": round(seconds, 2), **r} for r in got]
                if budget_name == "oracle" or name not in curves:
                    curves[name] = curve
            continue
        if name in FUSED_HYBRID:
            for budget_name, n in budgets.items():
                scores, seconds = cache.fused(n)
                t0 = time.perf_counter()
                ranking = fused_hybrid(shared, task, scores, n, seed, FUSED_HYBRID[name])
                seconds += time.perf_counter() - t0
                rows.append({"method": name, "segment_size": 1, "budget": budget_name,
                             "budget_sentences": n, "seconds": round(seconds, 2),
                             "detector": ranking.info["detector"],
                             **selection_scores(ranking.segments, relevant).to_json()})
            continue
        if name in PER_BUDGET:
            for budget_name, n in budgets.items():
                config = SelectConfig(budget=f"{n}sent", segment_size=1, seed=seed,
                                      **PER_BUDGET[name])
                t0 = time.perf_counter()
                ranking, _ = rank(shared.index, config, task, texts)
                seconds = time.perf_counter() - t0
                extra = {k: ranking.info[k] for k in ("chosen", "detector") if k in ranking.info}
                rows.append({"method": name, "segment_size": 1, "budget": budget_name,
                             "budget_sentences": n, "seconds": round(seconds, 2), **extra,
                             **selection_scores(ranking.segments, relevant).to_json()})
            continue
        if name == "moore-lewis":
            scores, seconds = cache.moore_lewis()
        else:
            t0 = time.perf_counter()
            scores = fixed_scores(name, shared, task, texts, seed)
            seconds = time.perf_counter() - t0
        got, curves[name] = evaluate_fixed(scores, shared, relevant, budgets, sizes)
        rows += [{"method": name, "seconds": round(seconds, 2), **r} for r in got]
    return rows, curves


def run(shared: Shared, seed_sets: list[SeedSet], seed_embeddings: dict[str, np.ndarray],
        methods: list[str], seed_sizes: list[int], budgets: list[tuple[str, float]],
        repeats: int, sizes: list[int], progress: bool = True,
        on_task: Callable[[list[dict]], None] | None = None) -> tuple[list[dict], dict]:
    """The whole grid. Seed sizes >= the seed file's size run once (the whole file)."""
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise InputError(f"unknown methods {unknown}: use {', '.join(ALL_METHODS)} or all")
    jobs = []
    for s in seed_sets:
        for size in seed_sizes:
            for rep in range(1 if size >= len(s.texts) else repeats):
                jobs.append((s, size, rep))
    results, curves = [], {}
    for s, size, rep in tqdm(jobs, desc="tasks", disable=not progress):
        n_oracle = int((shared.labels == s.domain).sum())
        if n_oracle == 0:
            raise InputError(f"no pool sentence is labelled {s.domain!r}")
        budget_sent = {name: max(1, int(round(f * n_oracle))) for name, f in budgets}
        subset = seed_subset(len(s.texts), size, rep)
        task = seed_embeddings[s.domain][subset]
        texts = [s.texts[i] for i in subset]
        rows, task_curves = run_task(shared, s.domain, task, texts, methods, budget_sent, sizes,
                                     seed=rep)
        for r in rows:
            r.update({"domain": s.domain, "seeds": int(len(subset)), "repeat": rep})
        results += rows
        if rep == 0 and size == max(seed_sizes):
            curves[s.domain] = task_curves
        if on_task:
            on_task(rows)
        log.info("%s seeds=%d repeat=%d: %s", s.domain, len(subset), rep, ", ".join(
            f"{r['method']} {r['precision']:.3f}" for r in rows
            if r["budget"] == budgets[0][0] and r["segment_size"] == 1))
    return results, curves
