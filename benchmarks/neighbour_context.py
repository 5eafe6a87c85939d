#!/usr/bin/env python
"""Neighbour context: a sentence's score pooled with its nearest corpus neighbours' scores.

Document context's idea where there are no documents: each sentence is ranked by the mean score
of itself and its k nearest corpus sentences (inner product of the stored embeddings, through
the index's own `search`), shrunk towards the corpus mean by the empirical-Bayes factor
s_b^2 / (s_b^2 + s_w^2 / (k + 1)) estimated from the scores (one shared factor: the ranking is
that of the neighbourhood mean, its own score breaking ties). k = 10 was fixed before any
measurement; k = 5 and 20 are shown for sensitivity only, never to choose. The pool's
neighbours are often sentences of the same document, which a corpus without documents would not
have: `neighbours-10-other-docs` takes the first 10 of the 20 nearest from other documents only
(the row itself filling in where fewer are found), the honest figure for such a corpus.

Scores are the registered methods' own `sentence_scores` (default parameters, budget = the
oracle's size, seed 0, seed subset 0), read from `benchmarks/mixed_documents.py`'s
`--scores-cache` when they are there. Precision at the oracle budget, segment size 1, mean over
the domains; the labels only count precision.

    nice -n 10 .venv/bin/python -m benchmarks.neighbour_context --index /work/benchcache/pool-index \
        --seeds ../shared/data/multidomain/seeds --cache .cache/context-bench \
        --out benchmarks/results/quality
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from benchmarks.labelled_tasks import LabelledPool, add_arguments, result_header
from benchmarks.mixed_documents import task_scores
from tapt import Index

# internal: tasks drawn from the seed sets as bench recall draws them
from tapt.bench.labelled_pool import seed_subset

# internal: the pooled scores cut at the oracle budget with bench recall's own evaluation
from tapt.bench.recall import evaluate_fixed

# internal: the seed sets embedded once and cached, as bench recall does
from tapt.bench.recall_run import seed_embeddings

# internal: one memo per task shared by the methods' per-sentence scores
from tapt.retriever.methods import Memo

# internal: document pooling of the same scores, the baseline neighbour pooling is compared with
from tapt.retriever.ranking.document_pooling import document_scores

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# internal: the report's time, as tapt's own files carry it
from tapt.util.versions import utc_now

K = 10
SENSITIVITY = (5, 20)
BLOCK = 4096


def neighbours(index: Index, k: int, cache: Path) -> np.ndarray:
    """Every row's `k` nearest other rows (int32, N x k), kept in `cache` by index uuid."""
    path = cache / f"neighbours-{index.uuid}-{k}.npy"
    if path.exists():
        return np.load(path)
    t0 = time.perf_counter()
    n = index.n_sentences
    out = np.empty((n, k), dtype=np.int32)
    for lo in tqdm(range(0, n, BLOCK), desc="neighbours", unit="block"):
        hi = min(lo + BLOCK, n)
        queries = np.asarray(index.embeddings[lo:hi], dtype=np.float32)
        _, ids = index.search(queries, k + 1)
        for j in range(hi - lo):
            row = ids[j][(ids[j] != lo + j) & (ids[j] >= 0)][:k]
            out[lo + j, :len(row)] = row
            out[lo + j, len(row):] = lo + j          # too few: the row itself
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, out)
    os.replace(tmp, path)
    write_json_atomic(path.with_suffix(".json"), {"seconds": round(time.perf_counter() - t0, 1),
                                                  "k": k, "created": utc_now()})
    return out


def other_documents(nbrs: np.ndarray, doc_offsets: np.ndarray, k: int) -> np.ndarray:
    """The first `k` neighbours of each row from other documents than its own (the row itself
    where fewer are among the searched ones): what neighbours are in a corpus whose records
    share no document, without the pool's own documents helping."""
    n = len(nbrs)
    doc = np.repeat(np.arange(len(doc_offsets) - 1), np.diff(doc_offsets))[:n]
    keep = doc[nbrs] != doc[:, None]
    rank = np.cumsum(keep, axis=1) - 1
    out = np.repeat(np.arange(n, dtype=nbrs.dtype)[:, None], k, axis=1)
    rows, cols = np.nonzero(keep & (rank < k))
    out[rows, rank[rows, cols]] = nbrs[rows, cols]
    return out


def neighbour_scores(scores: np.ndarray, nbrs: np.ndarray, k: int
                     ) -> tuple[np.ndarray, dict[str, float]]:
    """Scores pooled with the first `k` neighbours (the empirical-Bayes mean, see above)."""
    s = np.asarray(scores, dtype=np.float64)
    group = np.concatenate([s[:, None], s[nbrs[:, :k]]], axis=1)
    ok = np.isfinite(group)
    cnt = ok.sum(axis=1)
    mean = np.where(ok, group, 0.0).sum(axis=1) / np.maximum(cnt, 1)
    dev = np.where(ok, group - mean[:, None], 0.0)
    within = float((dev ** 2).sum() / max(int((cnt - 1).clip(min=0).sum()), 1))
    finite = np.isfinite(s)
    mu = float(mean[finite].mean())
    between = float(mean[finite].var()) - within / (k + 1)
    if not between > 0:
        return s.copy(), {"between": between, "within": within, "pooled": False}
    shrink = between / (between + within / (k + 1))
    spread = float(np.ptp(s[finite])) or 1.0
    out = mu + shrink * (mean - mu) + 1e-9 / spread * (s - mean)
    out[~finite] = s[~finite]
    return out, {"between": round(between, 6), "within": round(within, 6),
                 "shrink": round(shrink, 4), "pooled": True}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--cache", type=Path, required=True,
                        help="neighbour lists and task scores (shared with mixed_documents)")
    parser.add_argument("--methods", default="centroid,fused")
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    pool = LabelledPool.open(args)
    index, labels, shared, seed_sets = pool.index, pool.labels, pool.shared, pool.seed_sets
    embeddings = seed_embeddings(index, seed_sets, args.cache)
    nbrs = neighbours(index, max(K, *SENSITIVITY), args.cache)
    graph = args.cache / f"neighbours-{index.uuid}-{max(K, *SENSITIVITY)}.json"
    graph_seconds = json.loads(graph.read_text())["seconds"] if graph.exists() else None
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    other = other_documents(nbrs, index.doc_offsets, K)
    variants = ("sentence", f"neighbours-{K}", *(f"neighbours-{k}" for k in SENSITIVITY),
                f"neighbours-{K}-other-docs", "document")
    tasks = []
    for size in [int(x) for x in args.sizes.split(",")]:
        for s in tqdm(seed_sets, desc=f"{size} seeds", unit="task"):
            subset = seed_subset(len(s.texts), size, 0)
            relevant = labels == s.domain
            n = int(relevant.sum())
            memo = Memo()
            for name in methods:
                scores = task_scores(shared, name, embeddings[s.domain][subset],
                                     [s.texts[i] for i in subset], n, memo,
                                     args.cache / "scores", f"{s.domain}-{len(subset)}")
                got, est = {}, {}
                for v in variants:
                    if v == "sentence":
                        values = np.asarray(scores, dtype=np.float64)
                    elif v == "document":
                        values, _ = document_scores(scores, index.doc_offsets)
                    elif v.endswith("-other-docs"):
                        values, est[v] = neighbour_scores(scores, other, K)
                    else:
                        values, est[v] = neighbour_scores(scores, nbrs, int(v.split("-")[1]))
                    rows, _ = evaluate_fixed(values, shared, relevant, {"oracle": n}, [1])
                    got[v] = rows[0]["precision"]
                tasks.append({"domain": s.domain, "seeds": int(len(subset)), "method": name,
                              **got, "estimates": est})
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for t in tasks:
        groups[(t["seeds"], t["method"])].append(t)
    aggregate = [{"seeds": seeds, "method": m, "tasks": len(rows),
                  **{v: round(float(np.mean([r[v] for r in rows])), 4) for v in variants}}
                 for (seeds, m), rows in sorted(groups.items())]
    result = {
        **result_header("neighbour_context", argv, index), "k": K,
        "neighbour_graph_seconds": graph_seconds,
        "seconds": round(time.perf_counter() - t_start, 1),
        "aggregate": aggregate, "tasks": tasks,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "neighbour_context.json", result)
    with atomic_write(args.out / "neighbour_context.md", "w") as fh:
        fh.write(report(result, variants))


def report(result: dict[str, Any], variants: tuple[str, ...]) -> str:
    lines = ["# Neighbour context: sentence scores pooled with their nearest corpus sentences",
             "", f"Regenerate: `{result['command']}`", "",
             f"Each sentence ranked by the empirical-Bayes mean score of itself and its "
             f"k = {result['k']} nearest corpus sentences (k fixed beforehand; other k for "
             "sensitivity only; `-other-docs`: neighbours from other documents only, as in a corpus without documents), beside its own score and document context. Precision at the "
             "oracle budget, segment size 1, mean over the domains, seed subset 0. Nothing was "
             "fitted to the labels.", "",
             "| seeds | method | " + " | ".join(variants) + " |",
             "|---|---|" + "---|" * len(variants)]
    for r in result["aggregate"]:
        lines.append(f"| {r['seeds']} | {r['method']} | "
                     + " | ".join(f"{r[v]:.3f}" for v in variants) + " |")
    lines += ["", "## Per task", "", "| domain | seeds | method | " + " | ".join(variants) + " |",
              "|---|---|---|" + "---|" * len(variants)]
    for t in result["tasks"]:
        lines.append(f"| {t['domain']} | {t['seeds']} | {t['method']} | "
                     + " | ".join(f"{t[v]:.3f}" for v in variants) + " |")
    lines += ["", f"Neighbour graph (20 nearest of every sentence, the index's HNSW search "
              f"rescored from the stored embeddings, computed once): "
              f"{result['neighbour_graph_seconds']} s ({result['rows']:,} sentences); run {result['created']} on {result['machine']} "
              f"in {result['seconds']:.0f} s.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
