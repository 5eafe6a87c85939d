#!/usr/bin/env python
"""Document context on documents that mix topics: the control of `--context auto`.

`tapt select` pools sentence scores over documents by default where documents hold several
sentences (`retriever.ranking.document_pooling`). That helps where a document is about one
thing; this benchmark measures what it costs where it is not. The pool's rows are regrouped into
random "documents" (a seeded permutation of the rows cut at the pool's own document offsets: the
same document-size distribution, every document a random mix of the domains), and each task's
sentence scores (the registered methods' own `sentence_scores`) are ranked three ways at segment
size 1 and the oracle budget:

  sentence        each sentence's own score
  document        pooled over the pool's real documents (the published gain)
  mixed           pooled over the random documents (must not lose more than 0.01 to sentence)
  mixed-no-test   the same without the F test of `document_pooling` (pooled whenever the
                  estimated between-document variance is positive: the estimator before it)

Nothing is fitted to the labels; they only count precision.

    nice -n 10 .venv/bin/python -m benchmarks.mixed_documents --index /work/benchcache/pool-index \
        --seeds ../shared/data/multidomain/seeds --out benchmarks/results/quality
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from benchmarks.labelled_tasks import LabelledPool, add_arguments, result_header

# internal: tasks drawn from the seed sets as bench recall draws them
from tapt.bench.labelled_pool import seed_subset

# internal: the scores cut at the oracle budget with bench recall's own evaluation
from tapt.bench.recall import Shared, evaluate_fixed

# internal: the seed sets embedded once and cached, as bench recall does
from tapt.bench.recall_run import seed_embeddings
from tapt.extend import RankingInputs

# internal: each method's per-sentence scores, before any pooling, shared by the variants
from tapt.retriever.methods import Memo, get_method

# internal: document pooling's F test (ALPHA) switched off for the mixed-no-test variant
from tapt.retriever.ranking import document_pooling

# internal: the oracle budget as the methods take it
from tapt.retriever.ranking.budget import parse_budget

# internal: the pooling itself on real and shuffled documents, and their shape for the report
from tapt.retriever.ranking.document_pooling import DocumentShape, document_scores

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

CONTEXTS = ("sentence", "document", "mixed", "mixed-no-test")


def mixed_scores(scores: np.ndarray, perm: np.ndarray, offsets: np.ndarray,
                 test: bool = True) -> tuple[np.ndarray, dict[str, Any]]:
    """Scores pooled over the random documents `perm` cut at `offsets`, in row order."""
    saved = document_pooling.ALPHA
    if not test:
        document_pooling.ALPHA = 1.0            # pooled whenever s_b^2 > 0
    try:
        pooled, est = document_scores(scores[perm], offsets)
    finally:
        document_pooling.ALPHA = saved
    out = np.empty_like(pooled)
    out[perm] = pooled
    return out, est.to_json()


def task_scores(shared: Shared, name: str, task: np.ndarray, texts: list[str], n: int,
                memo: Memo, cache: Path | None, key: str) -> np.ndarray:
    """A registered method's sentence scores of one task (default parameters, budget `n`
    sentences, seed 0), kept in `cache` as KEY-METHOD.npy when it is given."""
    path = cache / f"{key}-{name}.npy" if cache is not None else None
    if path is not None and path.exists():
        return np.load(path)
    method = get_method(name)
    params = method.make_params({}, explicit=())
    ctx = RankingInputs(shared.index, shared.view(1), parse_budget(f"{n}sent"), 0, task, texts,
                        shared.corpus, memo)
    scores, _ = method.sentence_scores(ctx, params)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npy")
        np.save(tmp, np.asarray(scores))
        os.replace(tmp, path)
    return np.asarray(scores)


def run_task(shared: Shared, scores: np.ndarray, relevant: np.ndarray, perm: np.ndarray
             ) -> tuple[dict[str, float], dict[str, Any]]:
    """Oracle-budget precision at segment size 1 of the four rankings of one task's scores."""
    n = int(relevant.sum())
    offsets = shared.index.doc_offsets
    raw = np.asarray(scores, dtype=np.float64)
    real, real_est = document_scores(raw, offsets)
    mixed, mixed_est = mixed_scores(raw, perm, offsets)
    loose, loose_est = mixed_scores(raw, perm, offsets, test=False)
    got = {}
    for name, values in zip(CONTEXTS, (raw, real, mixed, loose)):
        rows, _ = evaluate_fixed(values, shared, relevant, {"oracle": n}, [1])
        got[name] = rows[0]["precision"]
    return got, {"document": real_est.to_json(), "mixed": mixed_est,
                 "mixed-no-test": loose_est}


def report(result: dict[str, Any]) -> str:
    """The markdown page of a run."""
    lines = [
        "# Document context on documents that mix topics",
        "",
        f"Regenerate: `{result['command']}`",
        "",
        "The pool's sentences regrouped into random documents (seeded permutation, the pool's "
        "own document sizes: every document a random mix of the domains), each task's sentence "
        "scores ranked by their own value (`sentence`), pooled over the real documents "
        "(`document`), pooled over the random ones (`mixed`), and pooled over the random ones "
        "without the F test (`mixed-no-test`: pooled whenever the estimated between-document "
        "variance is positive, the estimator before the test). Precision at the oracle budget, "
        "segment size 1, mean over the domains (one seed subset per size). Nothing was fitted to "
        "the labels.",
        "",
        "| seeds | method | sentence | document | mixed | mixed - sentence | mixed-no-test | "
        "mixed pooled (tasks) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["aggregate"]:
        lines.append(
            f"| {r['seeds']} | {r['method']} | {r['sentence']:.3f} | {r['document']:.3f} | "
            f"{r['mixed']:.3f} | {r['mixed'] - r['sentence']:+.3f} | {r['mixed-no-test']:.3f} | "
            f"{r['mixed_pooled']}/{r['tasks']} |")
    lines += ["", "## Per task", "",
              "| domain | seeds | method | sentence | document | mixed | mixed-no-test | "
              "F real | F mixed (p) |", "|---|---|---|---|---|---|---|---|---|"]
    for t in result["tasks"]:
        p = t["pooling"]
        lines.append(
            f"| {t['domain']} | {t['seeds']} | {t['method']} | {t['sentence']:.3f} | "
            f"{t['document']:.3f} | {t['mixed']:.3f} | {t['mixed-no-test']:.3f} | "
            f"{p['document']['f_statistic']} | {p['mixed']['f_statistic']} "
            f"({p['mixed']['p_value']}) |")
    lines += ["", f"{result['rows']:,} sentences, {result['documents']:,} documents; "
              f"run {result['created']} on {result['machine']} in {result['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def aggregate(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for t in tasks:
        groups[(t["seeds"], t["method"])].append(t)
    out = []
    for (seeds, method), rows in sorted(groups.items()):
        out.append({"seeds": seeds, "method": method, "tasks": len(rows),
                    **{c: round(float(np.mean([r[c] for r in rows])), 4) for c in CONTEXTS},
                    "mixed_pooled": sum(bool(r["pooling"]["mixed"]["pooled"]) for r in rows)})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--methods", default="centroid,fused")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random documents")
    parser.add_argument("--label-field", default="domain")
    parser.add_argument("--scores-cache", type=Path, default=None,
                        help="keep each task's sentence scores here (benchmarks/neighbour_context.py "
                             "reads them)")
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    pool = LabelledPool.open(args, args.label_field)
    index, labels, shared, seed_sets = pool.index, pool.labels, pool.shared, pool.seed_sets
    embeddings = seed_embeddings(index, seed_sets, args.out)
    perm = np.random.default_rng(args.seed).permutation(index.n_sentences)
    sizes = [int(s) for s in args.sizes.split(",")]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    tasks = []
    jobs = [(s, size) for size in sizes for s in seed_sets]
    for s, size in tqdm(jobs, desc="tasks", unit="task"):
        subset = seed_subset(len(s.texts), size, 0)
        task = embeddings[s.domain][subset]
        texts = [s.texts[i] for i in subset]
        relevant = labels == s.domain
        memo = Memo()
        for name in methods:
            n = int(relevant.sum())
            t0 = time.perf_counter()
            scores = task_scores(shared, name, task, texts, n, memo, args.scores_cache,
                                 f"{s.domain}-{len(subset)}")
            seconds = time.perf_counter() - t0
            got, pooling = run_task(shared, scores, relevant, perm)
            tasks.append({"domain": s.domain, "seeds": int(len(subset)), "method": name,
                          "score_seconds": round(seconds, 1), **got, "pooling": pooling})
    result = {
        **result_header("mixed_documents", argv, index),
        "documents": DocumentShape.of(index.doc_offsets).documents, "alpha": document_pooling.ALPHA,
        "seconds": round(time.perf_counter() - t_start, 1),
        "aggregate": aggregate(tasks), "tasks": tasks,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "mixed_documents.json", result)
    with atomic_write(args.out / "mixed_documents.md", "w") as fh:
        fh.write(report(result))


if __name__ == "__main__":
    main()
