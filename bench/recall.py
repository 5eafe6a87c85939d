"""`tapt bench recall`: precision, recall and F1 of every method against oracle selections.

For each domain of a labelled pool, the task is a seeded subset of the domain's seed sentences
(embedded once per domain; subsets of 100/500/... sentences, `repeats` times), the oracle is the
pool sentences labelled with the domain, and budgets are multiples of the oracle's size in
sentences (`oracle` = 1x, `0.5x`, `2x`). Every registered method is benchmarked under its own
name, beside the parameter settings in `VARIANTS` and the DSIR baseline. How each one runs follows
from the method's properties:
- it scores sentences and its scores ignore the budget: scored once per task, cut at every
  budget and segment size;
- it scores sentences with the budget (self-training aims at it): scored once per budget, cut at
  every segment size;
- it ranks segments another way (detector rescoring, auto): ranked once per budget at segment
  size 1.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from tapt.bench.labelled_pool import SeedSet, seed_subset
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.evaluation.metrics import selection_scores
from tapt.retriever.methods import CorpusCache, Memo, RankingInputs, get_method
from tapt.retriever.methods import methods as registered
from tapt.retriever.ranking.budget import parse_budget
from tapt.retriever.ranking.document_pooling import (
    CONTEXT_CHOICES,
    ContextChoice,
    choose_context,
    document_scores,
)
from tapt.retriever.scoring import arrays
from tapt.retriever.selections.make import SelectConfig, rank

log = logging.getLogger(__name__)

# Parameter settings benchmarked under their own names, besides every method at its defaults.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "maxsim": ("density", {"m": 1}),
    "classifier-0": ("classifier", {"rounds": 0}),
    "iforest-pca8": ("iforest", {"pca": 8}),
    "hybrid": ("iforest", {"prerank": "classifier", "candidates": "1.5x",
                           "detector": "knn-dist"}),
    # the detector path on fused candidates, as `tapt select iforest --prerank fused ...`
    "hybrid-fused": ("iforest", {"prerank": "fused", "candidates": "1.2x",
                                 "detector": "knn-dist"}),
    "iforest-fused": ("iforest", {"prerank": "fused", "candidates": "1.2x",
                                  "detector": "iforest"}),
    # the perplexity baseline at a CPU's cost: fewer candidates, masks and adaptation steps
    "perplexity-cpu": ("perplexity", {"candidates": "2x", "max_masks": 4, "adapt_steps": 50}),
    "perplexity-cpu-difference": ("perplexity", {"candidates": "2x", "max_masks": 4,
                                                 "adapt_steps": 50, "difference": True}),
}
# Baselines that are not tapt methods: DSIR (Xie et al. 2023), importance weights on hashed
# n-grams, through `dsir_baseline`.
BASELINES = ("dsir",)


def bench_methods() -> dict[str, tuple[str, dict[str, Any]]]:
    """Every benchmarked name -> (registered method, parameters)."""
    out = {m.name: (m.name, {}) for m in registered()
           if getattr(m, "benchmarked", True)}      # False: it needs a user's model
    clash = set(out) & (set(VARIANTS) | set(BASELINES))
    if clash:
        raise ValueError(f"benchmark variants named like registered methods: {sorted(clash)}")
    out.update(VARIANTS)
    return out


def all_methods() -> tuple[str, ...]:
    return tuple(bench_methods()) + BASELINES


def parse_budgets(spec: str) -> list[tuple[str, float]]:
    """'oracle,0.5x,2x' -> [('oracle', 1.0), ('0.5x', 0.5), ('2x', 2.0)]."""
    out = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        try:
            factor = 1.0 if part == "oracle" else float(part.rstrip("x"))
        except ValueError as exc:
            raise InputError(f"{part!r} is not 'oracle' or a multiple like 0.5x",
                             param="budgets") from exc
        if factor > 0 and not math.isfinite(factor):
            raise InputError(f"{part!r} is too large", param="budgets")
        if not factor > 0:
            raise InputError(f"{part!r} must be positive", param="budgets")
        out.append((part, factor))
    if not out:
        raise InputError("is empty", param="budgets")
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
    """What every task of one benchmark run reuses: the index, labels, corpus caches, DSIR.

    The corpus cache shares one vocabulary across tasks (see `CorpusCache`): the published
    results were computed that way.
    """

    index: Index
    labels: np.ndarray
    dsir: Any = None
    corpus: CorpusCache = field(init=False)

    def __post_init__(self) -> None:
        self.corpus = CorpusCache(self.index, share_vocabulary=True)

    @property
    def texts(self) -> list[str]:
        return self.corpus.texts()

    def view(self, size: int):
        return self.corpus.view(size)


def evaluate_fixed(scores: np.ndarray, shared: Shared, relevant: np.ndarray,
                   budgets: dict[str, int], sizes: list[int]) -> tuple[list[dict], dict]:
    """Rows per (segment size, budget) and the sentence-level PR curve."""
    rows = []
    curve = {}
    for size in sizes:
        view = shared.view(size)
        seg_scores = arrays.segment_mean(np.where(np.isfinite(scores), scores, -1e30),
                                          view.lengths)
        order = arrays.rank(seg_scores)
        order = order[seg_scores[order] > -1e29]          # knn: only the union can be selected
        if size == 1:
            curve = pr_curve(order, relevant)
        for budget_name, n in budgets.items():
            chosen = cut_sentences(order, view.lengths, n)
            sel = arrays.rows_of_segments(view.offsets, chosen)
            rows.append({"segment_size": size, "budget": budget_name, "budget_sentences": n,
                         **selection_scores(sel, relevant).to_json()})
    return rows, curve


def _timed(memo: Memo, compute: Callable[[], Any]) -> tuple[Any, float]:
    """A result and its cost: the wall time plus what the memo's reused values cost to make."""
    t0, before = time.perf_counter(), memo.reused_seconds
    value = compute()
    return value, time.perf_counter() - t0 + memo.reused_seconds - before


def context_name(method: str, context: str) -> str:
    """A method's row name in the results: `fused`, or `fused+document` with document context."""
    return method if context == "sentence" else f"{method}+{context}"


def resolve_contexts(shared: Shared, contexts: Sequence[str]
                     ) -> tuple[tuple[str, ...], ContextChoice | None]:
    """The contexts a run cuts sentence-scoring methods with, "auto" resolved for the index
    as `tapt select` resolves it (`document_pooling.choose_context`), in order, once each;
    and the auto choice (None when "auto" was not asked for)."""
    bad = [c for c in contexts if c not in CONTEXT_CHOICES]
    if bad or not contexts:
        raise InputError(f"{bad or 'none'}: use {', '.join(CONTEXT_CHOICES)}", param="contexts")
    auto = (choose_context("auto", True, shared.corpus.document_shape())
            if "auto" in contexts else None)
    names = [auto.name if c == "auto" and auto is not None else c for c in contexts]
    return tuple(dict.fromkeys(names)), auto


def run_task(shared: Shared, domain: str, task: np.ndarray, texts: list[str], names: list[str],
             budgets: dict[str, int], sizes: list[int], seed: int,
             contexts: Sequence[str] = ("sentence",)) -> tuple[list[dict], dict]:
    """Every method on one task: result rows and PR curves (segment size 1).

    Methods that score sentences are also cut with each of `contexts`
    (`retriever.ranking.document_pooling`): rows named `METHOD+document` for document context.
    """
    relevant = shared.labels == domain
    rows, curves = [], {}

    def emit(name: str, scores: np.ndarray, wanted: dict[str, int], seconds: float,
             keep_curve: bool = True, pools: bool = False) -> None:
        for ctx_name in contexts if pools else ("sentence",):
            values = scores
            if ctx_name == "document":
                values, _ = document_scores(scores, shared.index.doc_offsets)
            got, curve = evaluate_fixed(values, shared, relevant, wanted, sizes)
            label = context_name(name, ctx_name)
            rows.extend({"method": label, "seconds": round(seconds, 2), **r} for r in got)
            if keep_curve or label not in curves:
                curves[label] = curve
    memo = Memo()
    table = bench_methods()
    for name in names:
        if name == "dsir":
            scores, seconds = _timed(memo, lambda: shared.dsir.weights(texts).astype(np.float32))
            got, curves[name] = evaluate_fixed(scores, shared, relevant, budgets, sizes)
            rows += [{"method": name, "seconds": round(seconds, 2), **r} for r in got]
            continue
        method_name, params = table[name]
        method = get_method(method_name)
        method_params = method.make_params(params, explicit=())

        def context(n: int | None) -> RankingInputs:
            budget = parse_budget(f"{n}sent") if n is not None else None
            return RankingInputs(shared.index, shared.view(1), budget, seed, task, texts,
                           shared.corpus, memo)

        if method.scores_sentences and not method.depends_on_budget(method_params):
            (scores, _), seconds = _timed(
                memo, lambda: method.sentence_scores(context(None), method_params))
            emit(name, scores, budgets, seconds, pools=method.pools_documents(method_params))
            continue
        for budget_name, n in budgets.items():
            if method.scores_sentences:
                (scores, _), seconds = _timed(
                    memo, lambda: method.sentence_scores(context(n), method_params))
                emit(name, scores, {budget_name: n}, seconds, keep_curve=budget_name == "oracle",
                     pools=method.pools_documents(method_params))
                continue
            for ctx_name in contexts if method.pools_documents(method_params) else ("sentence",):
                config = SelectConfig(method_name, f"{n}sent", segment_size=1, seed=seed,
                                      context=ctx_name, explicit=(), **params)
                (ranking, _), seconds = _timed(memo, lambda: rank(
                    shared.index, config, task, texts, corpus=shared.corpus, memo=memo))
                extra = {k: ranking.info[k] for k in ("chosen", "detector") if k in ranking.info}
                rows.append({"method": context_name(name, ctx_name), "segment_size": 1,
                             "budget": budget_name, "budget_sentences": n,
                             "seconds": round(seconds, 2), **extra,
                             **selection_scores(ranking.segments, relevant).to_json()})
    return rows, curves


def run(shared: Shared, seed_sets: list[SeedSet], seed_embeddings: dict[str, np.ndarray],
        methods: list[str], seed_sizes: list[int], budgets: list[tuple[str, float]],
        repeats: int, sizes: list[int], progress: bool = True,
        on_task: Callable[[list[dict]], None] | None = None,
        contexts: Sequence[str] = ("auto",)) -> tuple[list[dict], dict]:
    """The whole grid. Seed sizes >= the seed file's size run once (the whole file); methods
    that pool sentence scores are cut with each of `contexts` ("auto": what `tapt select`
    uses by default on this index, see `resolve_contexts`; "sentence", "document")."""
    contexts, _ = resolve_contexts(shared, contexts)
    unknown = [m for m in methods if m not in all_methods()]
    if unknown:
        raise InputError(f"unknown methods {unknown}: use {', '.join(all_methods())} or all",
                         param="methods")
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
                                     seed=rep, contexts=contexts)
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
