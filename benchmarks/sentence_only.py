#!/usr/bin/env python
"""Sentence-only quality: the best selection where a corpus has no documents.

Every task is ranked with documents ignored (`--context sentence`, segment size 1) by the
meaning classifier, Moore-Lewis, `fused` without its wording classifier (`wording lm`, the
method before it) and `fused` as it is (default parameters: `lm+classifier`), and by document
context and 15-sentence segments for the two `fused` rows, to show the change does not cost
elsewhere. Budget = the oracle's size, seed 0, seed subset 0; precision at that budget, mean over
the domains; the labels only count precision.

`--ceiling` adds a reference that is NOT a selection method: one-vs-rest logistic regressions
trained on the pool's TRUE domain labels (two folds over the rows, cross-fitted: every row scored
by the model that did not see it; at most 60,000 training rows per fold), on the embeddings, on
the wording classifier's hashed n-grams, and the z-sum of both. It says how far linear models of
these two representations can go on this pool when every label is known.

    nice -n 10 .venv/bin/python -m benchmarks.sentence_only --index /work/benchcache/pool-index \
        --seeds ../shared/data/multidomain/seeds --out benchmarks/results/quality --ceiling
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from benchmarks.labelled_tasks import LabelledPool, add_arguments, result_header
from tapt import Index

# internal: tasks drawn from the seed sets as bench recall draws them
from tapt.bench.labelled_pool import seed_subset

# internal: the scores cut at the oracle budget with bench recall's own evaluation
from tapt.bench.recall import Shared, evaluate_fixed

# internal: the seed sets embedded once and cached, as bench recall does
from tapt.bench.recall_run import seed_embeddings
from tapt.extend import RankingInputs

# internal: each method's per-sentence scores with documents ignored
from tapt.retriever.methods import Memo, get_method

# internal: the oracle budget as the methods take it
from tapt.retriever.ranking.budget import parse_budget

# internal: the same scores pooled over documents, for comparison
from tapt.retriever.ranking.document_pooling import document_scores

# internal: scores ranked and fused directly for the variants
from tapt.retriever.scoring import arrays

# internal: the stored lexical ids as a sentence-by-word matrix, the wording features
from tapt.retriever.scoring.ngram_features import sentence_matrix

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# (row name, method, parameters)
ROWS = [("classifier", "classifier", {}), ("moore-lewis", "moore-lewis", {}),
        ("fused (wording lm)", "fused", {"wording": "lm"}), ("fused", "fused", {})]
WITH_CONTEXTS = ("fused (wording lm)", "fused")
COLUMNS = ("sentence", "document", "segments-15")


def method_scores(shared: Shared, method_name: str, params: dict, task: np.ndarray,
                  texts: list[str], n: int, memo: Memo) -> tuple[np.ndarray, float]:
    """A registered method's sentence scores for one task and its seconds."""
    method = get_method(method_name)
    made = method.make_params(params, explicit=tuple(params))
    ctx = RankingInputs(shared.index, shared.view(1), parse_budget(f"{n}sent"), 0, task, texts,
                        shared.corpus, memo)
    t0 = time.perf_counter()
    scores, _ = method.sentence_scores(ctx, made)
    return np.asarray(scores, dtype=np.float64), time.perf_counter() - t0


def precision(scores: np.ndarray, relevant: np.ndarray, n: int) -> float:
    return float(relevant[arrays.rank(scores)[:n]].mean())


def ceiling(index: Index, labels: np.ndarray, domains: list[str]) -> list[dict[str, Any]]:
    """Cross-fitted supervised one-vs-rest precision per domain (see the module docstring)."""
    from sklearn.linear_model import LogisticRegression

    n = index.n_sentences
    emb = np.asarray(index.embeddings[:n], dtype=np.float32)
    words = sentence_matrix(*index.lexicon.pairs(np.arange(n))).tocsr()
    rng = np.random.default_rng(0)
    fold = rng.integers(0, 2, n)
    out = []
    for domain in tqdm(domains, desc="ceiling", unit="domain"):
        relevant = labels == domain
        k = int(relevant.sum())
        s_emb, s_words = np.zeros(n), np.zeros(n)
        for f in (0, 1):
            train = np.flatnonzero(fold != f)
            train = np.sort(rng.choice(train, size=min(len(train), 60_000), replace=False))
            test = fold == f
            lr = LogisticRegression(C=1.0, class_weight="balanced", max_iter=500)
            s_emb[test] = lr.fit(emb[train], relevant[train]).decision_function(emb[test])
            lr = LogisticRegression(C=1.0, class_weight="balanced", solver="liblinear",
                                    max_iter=1000)
            s_words[test] = lr.fit(words[train], relevant[train]).decision_function(words[test])
        both = arrays.fuse_zscores(s_emb, s_words)
        out.append({"domain": domain, "embeddings": precision(s_emb, relevant, k),
                    "n-grams": precision(s_words, relevant, k),
                    "both": precision(both, relevant, k)})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--ceiling", action="store_true",
                        help="add the supervised reference (uses the labels; not a method)")
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    pool = LabelledPool.open(args)
    index, labels, shared, seed_sets = pool.index, pool.labels, pool.shared, pool.seed_sets
    embeddings = seed_embeddings(index, seed_sets, args.out)
    tasks = []
    for size in [int(x) for x in args.sizes.split(",")]:
        for s in tqdm(seed_sets, desc=f"{size} seeds", unit="task"):
            subset = seed_subset(len(s.texts), size, 0)
            relevant = labels == s.domain
            n = int(relevant.sum())
            for row, name, params in ROWS:      # a fresh memo each: nothing shared, timed whole
                scores, seconds = method_scores(shared, name, params, embeddings[s.domain][subset],
                                                [s.texts[i] for i in subset], n, Memo())
                got = {"sentence": precision(scores, relevant, n)}
                if row in WITH_CONTEXTS:
                    got["document"] = precision(document_scores(scores, index.doc_offsets)[0],
                                                relevant, n)
                    segs, _ = evaluate_fixed(scores, shared, relevant, {"oracle": n}, [15])
                    got["segments-15"] = segs[0]["precision"]
                tasks.append({"domain": s.domain, "seeds": int(len(subset)), "row": row,
                              "seconds": round(seconds, 2), **got})
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for t in tasks:
        groups[(t["seeds"], t["row"])].append(t)
    order = [r[0] for r in ROWS]
    aggregate = [{"seeds": seeds, "row": row, "tasks": len(rows),
                  "seconds": round(float(np.mean([r["seconds"] for r in rows])), 2),
                  **{c: round(float(np.mean([r[c] for r in rows])), 4)
                     for c in COLUMNS if c in rows[0]}}
                 for (seeds, row), rows in sorted(groups.items(),
                                                  key=lambda kv: (kv[0][0], order.index(kv[0][1])))]
    result = {**result_header("sentence_only", argv, index),
              "aggregate": aggregate, "tasks": tasks}
    if args.ceiling:
        result["ceiling"] = ceiling(index, labels, [s.domain for s in seed_sets])
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    result["load_average"] = [round(x, 1) for x in os.getloadavg()]
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "sentence_only.json", result)
    with atomic_write(args.out / "sentence_only.md", "w") as fh:
        fh.write(report(result))


def report(result: dict[str, Any]) -> str:
    """The Markdown page of a result."""
    lines = ["# Sentence-only quality: corpora without documents", "",
             f"Regenerate: `{result['command']}`", "",
             f"Measured {result['created']} on {result['machine']}; the labelled pool "
             f"({result['rows']:,} sentences), budget = the oracle's size, seed 0, seed subset 0, "
             "precision at that budget, mean over the domains. `sentence` ranks sentences with "
             "documents ignored (what a corpus without documents gets); `document` and "
             "`segments-15` show the same scores where the pool's documents are used. "
             "`fused (wording lm)` is `fused` without its wording classifier; `s / task` is the "
             "method's own time per task on this machine, nothing shared between rows. No setting was chosen from the "
             "labels.", "",
             "| seeds | method | sentence | document | segments-15 | s / task |",
             "|---|---|---|---|---|---|"]
    for a in result["aggregate"]:
        cells = [f"{a[c]:.3f}" if c in a else "" for c in COLUMNS]
        lines.append(f"| {a['seeds']} | {a['row']} | " + " | ".join(cells)
                     + f" | {a['seconds']} |")
    lines += ["", "## Per task (sentence context)", "",
              "| domain | seeds | " + " | ".join(r[0] for r in ROWS) + " |",
              "|---|---|" + "---|" * len(ROWS)]
    by_task: dict[tuple, dict] = defaultdict(dict)
    for t in result["tasks"]:
        by_task[(t["seeds"], t["domain"])][t["row"]] = t["sentence"]
    for (seeds, domain), got in sorted(by_task.items()):
        lines.append(f"| {domain} | {seeds} | "
                     + " | ".join(f"{got[r[0]]:.3f}" for r in ROWS) + " |")
    if "ceiling" in result:
        rows = result["ceiling"]
        lines += ["", "## Reference: linear models trained on every true label (not a method)",
                  "", "One-vs-rest logistic regressions on the pool's true domain labels, "
                  "two folds over the rows, cross-fitted (each row scored by the model that did "
                  "not see it, at most 60,000 training rows a fold). It bounds what linear "
                  "models of these representations reach on this pool at sentence level.", "",
                  "| domain | embeddings | n-grams | both (z-sum) |", "|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['domain']} | {r['embeddings']:.3f} | {r['n-grams']:.3f} | "
                         f"{r['both']:.3f} |")
        mean = {k: float(np.mean([r[k] for r in rows])) for k in ("embeddings", "n-grams", "both")}
        lines.append(f"| **mean** | **{mean['embeddings']:.3f}** | **{mean['n-grams']:.3f}** | "
                     f"**{mean['both']:.3f}** |")
    lines += ["", f"Whole run: {result['seconds']} s; load average at the end (1, 5, 15 min): "
              f"{result.get('load_average')} on {result['machine'].split(', ')[-1]} (other jobs "
              "ran beside it: the seconds are an upper bound)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
