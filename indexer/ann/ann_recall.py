"""Recall of an approximate FAISS index against exact search, and the default search parameter.

Exact neighbours come from one matrix product per block of the memory-mapped embeddings and
partial sorts (`ground_truth`); recall@k is `faiss.contrib.evaluation.knn_intersection_measure`
(the fraction of the exact top-k that a search returns in its top k). Queries are sampled corpus
rows moved off the corpus by Gaussian noise (norm 0.5, renormalised), so that, like task sentences,
they are not rows of the index themselves.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from tapt.indexer.ann.index_choice import RESCORE_FACTORS, IndexChoice, rescore_k
from tapt.indexer.ann.rescore import exact_topk
from tapt.indexer.store.integrity import check_cosines, check_unit_rows

log = logging.getLogger(__name__)

CALIBRATION_QUERIES = 200
CALIBRATION_K = 100
TARGET_RECALL = 0.95
CALIBRATION_MARGIN = 0.01    # calibrate to 0.96 so that task queries still reach 0.95
PLATEAU = 0.003              # a wider search that gains less than this: rescore more instead
QUERY_NOISE = 0.5
GROWTH_SHARE = 0.25          # `index add` recalibrates once the rows grow by more than this
_BLOCK = 65536


def sample_queries(embeddings: np.ndarray, count: int, seed: int = 0,
                   noise: float = QUERY_NOISE) -> np.ndarray:
    """`count` seeded corpus rows plus Gaussian noise of norm ~`noise`, L2-normalised."""
    n, dim = embeddings.shape
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, size=min(count, n), replace=False))
    queries = np.asarray(embeddings[rows], dtype=np.float32)
    check_unit_rows(queries, rows, dtype=embeddings.dtype)  # damaged rows: no recall from them
    shift = rng.normal(scale=noise / np.sqrt(dim), size=queries.shape).astype(np.float32)
    queries = queries + shift
    queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(queries, dtype=np.float32)


def ground_truth(embeddings: np.ndarray, queries: np.ndarray, k: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k (inner product) over the embeddings, read block by block (float16 is fine):
    one matrix product of each block with the queries, its best k per query kept by partial
    sorts (`np.argpartition`), best first, ties by ascending id. (2.2-3x less CPU than FAISS's
    `knn_ground_truth`, whose heaps of k = 100 cost more than the product itself, for the same
    ids: benchmarks/results/scale/calibration.md.)"""
    n = len(embeddings)
    q = np.ascontiguousarray(queries, dtype=np.float32)
    k = min(int(k), n)
    best_s = np.full((len(q), 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(q), 0), dtype=np.int64)
    for start in range(0, n, _BLOCK):
        block = np.asarray(embeddings[start:start + _BLOCK], dtype=np.float32)
        sims = np.concatenate([best_s, q @ block.T], axis=1)  # the best so far, then the block
        held = best_i.shape[1]
        keep = (np.argpartition(-sims, k - 1, axis=1)[:, :k] if sims.shape[1] > k else
                np.broadcast_to(np.arange(sims.shape[1]), sims.shape))
        ids = start + keep - held                             # a position in the block ...
        if held:                                              # ... or among the best so far
            ids = np.where(keep < held, np.take_along_axis(best_i, np.minimum(keep, held - 1),
                                                           1), ids)
        best_s, best_i = np.take_along_axis(sims, keep, 1), ids.astype(np.int64)
    order = np.lexsort((best_i, -best_s), axis=-1)
    sims, ids = np.take_along_axis(best_s, order, 1), np.take_along_axis(best_i, order, 1)
    check_cosines(sims[ids >= 0], ids[ids >= 0])  # a damaged row would be everyone's neighbour
    return sims, ids


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Fraction of the exact top-k ids found in the search's top k."""
    from faiss.contrib.evaluation import knn_intersection_measure

    return float(knn_intersection_measure(found, truth))


def measure(index, embeddings: np.ndarray, kind: str, queries: np.ndarray, truth: np.ndarray,
            param: str | None, value: int | None, factor: int | None = None) -> dict[str, Any]:
    """Recall@k after exact rescoring (and of the raw approximate ranking) and time per query."""
    from tapt.indexer.ann.faiss_index import set_search_param

    n = len(embeddings)
    k = truth.shape[1]
    if param is not None:
        set_search_param(index, param, value)
    t0 = time.perf_counter()
    _, candidates = index.search(queries, rescore_k(k, kind, n, factor))
    search_s = time.perf_counter() - t0
    _, ids = exact_topk(embeddings, queries, candidates, k)
    total_s = time.perf_counter() - t0
    return {"value": value, "recall": round(recall_at_k(ids, truth), 4),
            "raw_recall": round(recall_at_k(candidates[:, :k], truth), 4),
            "candidates": int(candidates.shape[1]),
            "ms_per_query": round(1000 * total_s / max(1, len(queries)), 3),
            "search_ms_per_query": round(1000 * search_s / max(1, len(queries)), 3)}


def calibration_queries(embeddings: np.ndarray, choice: IndexChoice,
                        queries: int = CALIBRATION_QUERIES) -> tuple[np.ndarray, int]:
    """The calibration's seeded query sample (`sample_queries`, seed = the choice's + 1) and
    its seed."""
    seed = choice.seed + 1
    return sample_queries(embeddings, queries, seed=seed), seed


def reusable(search: dict[str, Any] | None, choice: IndexChoice, rows: int) -> bool:
    """Whether a recorded calibration (`faiss.search` of a manifest) still holds for `choice`
    over `rows` rows: the same factory, and at most GROWTH_SHARE more rows than it was
    calibrated on (older manifests record no row count: never reused)."""
    if not search or search.get("param") != choice.search_param:
        return False
    sample = search.get("sample") or {}
    calibrated = sample.get("rows")
    return (sample.get("factory") == choice.factory and isinstance(calibrated, int)
            and 0 < calibrated and rows <= calibrated * (1 + GROWTH_SHARE))


def calibrate(index, embeddings: np.ndarray, choice: IndexChoice, progress: bool = False,
              queries: int = CALIBRATION_QUERIES, k: int = CALIBRATION_K,
              truth: tuple[np.ndarray, np.ndarray] | None = None,
              steps: Callable[[int, int], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The smallest nprobe/efSearch whose recall@k after rescoring reaches the target, with the
    smallest candidate factor that lets it (IVF-PQ tries 4, 8 and 16 x k candidates: coarse
    codes need more of them rescored, a wider search alone stops helping).

    Args:
        index: The (sharded) FAISS index.
        embeddings: Every row, in global row order (memory-mapped).
        choice: The index's type and search sweep.
        progress: Show a progress bar.
        queries: How many queries to sample; k: the recall's k.
        truth: (queries, exact top-k ids) computed elsewhere (shard by shard: see
            `ann_build.exact_truth`); default: computed here over `embeddings`.
        steps: `steps(factor, value)`: the `measure` row of one step of the sweep computed
            elsewhere (shard by shard: `ann_build.ShardSweep`); default: `measure` of `index`.

    Returns:
        The manifest's `faiss.search` section: the setting, its recall, the sweep, and the
        sample it was measured on (seed, queries, k, rows, factory, seconds).
    """
    t0 = time.perf_counter()
    if truth is None:
        q, seed = calibration_queries(embeddings, choice, queries)
        _, truth_ids = ground_truth(embeddings, q, k)
        how = "exact top-k over every row"
    else:
        (q, truth_ids), seed = truth, choice.seed + 1
        how = "exact top-k, shard by shard, merged"
    truth_seconds = time.perf_counter() - t0
    truth = truth_ids
    target = TARGET_RECALL + CALIBRATION_MARGIN
    rows: list[dict[str, Any]] = []
    chosen = None
    factors = RESCORE_FACTORS.get(choice.kind, (1,))
    bar = tqdm(total=len(factors) * len(choice.search_sweep), disable=not progress, leave=False,
               desc=f"calibrating {choice.search_param}")
    for factor in factors:
        previous = -1.0
        for value in choice.search_sweep:
            row = (steps(factor, value) if steps is not None else
                   measure(index, embeddings, choice.kind, q, truth, choice.search_param, value,
                           factor))
            row["factor"] = factor
            rows.append(row)
            bar.update()
            if row["recall"] >= target:
                chosen = row
                break
            if row["recall"] - previous < PLATEAU:
                break
            previous = row["recall"]
        if chosen is not None:
            break
    bar.close()
    if chosen is None:
        chosen = max(rows, key=lambda r: (r["recall"], -r["factor"], -r["value"]))
        log.warning("%s reaches recall@%d %.3f at most (%s %d, %d x k candidates): below the "
                    "%.2f target", choice.factory, truth.shape[1], chosen["recall"],
                    choice.search_param, chosen["value"], chosen["factor"], target)
    log.info("default %s = %d, %d x k candidates: recall@%d %.3f on %d sampled queries",
             choice.search_param, chosen["value"], chosen["factor"], truth.shape[1],
             chosen["recall"], len(q))
    return {"param": choice.search_param, "default": int(chosen["value"]),
            "rescore_factor": int(chosen["factor"]), "recall": chosen["recall"],
            "k": int(truth.shape[1]), "queries": len(q), "target": target,
            "query_noise": QUERY_NOISE,
            "sweep": [{"value": r["value"], "factor": r["factor"], "recall": r["recall"]}
                      for r in rows],
            "sample": {"seed": seed, "queries": len(q), "k": int(truth.shape[1]),
                       "rows": int(len(embeddings)), "factory": choice.factory,
                       "truth": how,
                       "truth_seconds": round(truth_seconds, 2),
                       "sweep_seconds": round(time.perf_counter() - t0 - truth_seconds, 2),
                       "reused": False}}


def recall_report(index, embeddings: np.ndarray, faiss_info: dict[str, Any], queries: int = 1000,
                  k: int = 100, values: list[int] | None = None, seed: int = 0,
                  progress: bool = False) -> dict[str, Any]:
    """Recall@k and time per query of an index for a sweep of its search parameter."""
    from tapt.indexer.ann.index_choice import choice_from_manifest

    n, dim = embeddings.shape
    choice = choice_from_manifest(faiss_info, n, dim)
    q = sample_queries(embeddings, queries, seed=seed)
    t0 = time.perf_counter()
    _, truth = ground_truth(embeddings, q, k)
    exact_ms = 1000 * (time.perf_counter() - t0) / len(q)
    default = (faiss_info.get("search") or {}).get("default")
    if choice.search_param is None:
        sweep_values: list[int | None] = [None]
    else:
        sweep_values = sorted(set(values or [v for v in choice.search_sweep])
                              | ({int(default)} if default else set()))
    factor = (faiss_info.get("rescore") or {}).get("factor")
    rows = [measure(index, embeddings, choice.kind, q, truth, choice.search_param, v, factor)
            for v in tqdm(sweep_values, desc="recall sweep", disable=not progress, leave=False)]
    if choice.search_param is not None and default:
        from tapt.indexer.ann.faiss_index import set_search_param

        set_search_param(index, choice.search_param, int(default))
    return {"factory": choice.factory, "kind": choice.kind, "param": choice.search_param,
            "default": default, "k": int(truth.shape[1]), "queries": len(q), "seed": seed,
            "query_noise": QUERY_NOISE, "exact_ms_per_query": round(exact_ms, 3), "sweep": rows}
