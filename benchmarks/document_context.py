#!/usr/bin/env python
"""Document context (`select --context document`) against per-sentence scores, same scores.

Reads the per-task sentence scores that `benchmarks/quality_recall.py` stored (CACHE/scores/
DOMAIN-SEEDS-REPEAT.npz, one array per method), pools each with `retriever.ranking.document_pooling.
document_scores` over the index's documents, and cuts both versions at the budgets oracle / 0.5x
/ 2x at segment sizes 1 and 15 with the quality benchmark's own evaluation (`evaluate_fixed`).
Nothing is fitted here: the pooling estimates its two variances from each task's scores, and the
labels are only used to count precision and recall.

    nice -n 10 .venv/bin/python -m benchmarks.document_context --index .cache/pool-index \
        --cache .cache/quality --out benchmarks/results/quality
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from tapt import Index

# internal: the stored scores cut with the quality benchmark's own evaluation
from tapt.bench.recall import Shared, evaluate_fixed

# internal: each row's label, for the relevant rows of a task
from tapt.retriever.evaluation.oracle import sentence_labels

# internal: the document pooling itself, applied to the stored per-sentence scores
from tapt.retriever.ranking.document_pooling import document_scores

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

BUDGETS = (("oracle", 1.0), ("0.5x", 0.5), ("2x", 2.0))
SIZES = (1, 15)
METHODS = ("centroid", "classifier", "moore_lewis", "fused", "fused_learned", "fused_learned_x",
           "auto_x")
KEY = re.compile(r"^(?P<domain>.+)-(?P<seeds>\d+)-(?P<repeat>\d+)$")


def evaluate_task(shared: Shared, scores: dict[str, np.ndarray], relevant: np.ndarray,
                  methods: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Both contexts of every stored method of one task: result rows and pooling estimates."""
    n = int(relevant.sum())
    budgets = {name: max(1, int(round(f * n))) for name, f in BUDGETS}
    rows, pooling = [], {}
    for method in methods:
        if method not in scores:
            continue
        raw = np.asarray(scores[method], dtype=np.float64)
        t0 = time.perf_counter()
        pooled, estimate = document_scores(raw, shared.index.doc_offsets)
        seconds = time.perf_counter() - t0
        pooling[method] = {**estimate.to_json(), "seconds": round(seconds, 3)}
        for context, values in (("sentence", raw), ("document", pooled)):
            got, _ = evaluate_fixed(values, shared, relevant, budgets, list(SIZES))
            rows += [{"method": method, "context": context, **r} for r in got]
    return rows, pooling


def aggregate(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean precision/recall over domains per repeat, then mean and std over repeats."""
    per_repeat: dict[tuple, list[dict]] = defaultdict(list)
    for task in tasks:
        for r in task["rows"]:
            per_repeat[(task["seeds"], task["repeat"], r["method"], r["context"],
                        r["segment_size"], r["budget"])].append(r)
    by_setting: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for (seeds, _, method, context, size, budget), rows in per_repeat.items():
        by_setting[(seeds, method, context, size, budget)].append(
            (float(np.mean([r["precision"] for r in rows])),
             float(np.mean([r["recall"] for r in rows]))))
    out = []
    for (seeds, method, context, size, budget), values in sorted(by_setting.items()):
        p = np.array([v[0] for v in values])
        r = np.array([v[1] for v in values])
        out.append({"seeds": seeds, "method": method, "context": context, "segment_size": size,
                    "budget": budget, "precision": round(float(p.mean()), 4),
                    "precision_std": round(float(p.std(ddof=1)), 4) if len(p) > 1 else None,
                    "recall": round(float(r.mean()), 4), "repeats": len(values)})
    return out


def _fmt(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    std = row["precision_std"]
    return f"{row['precision']:.3f}" + (f" ± {std:.3f}" if std is not None else "")


def report(result: dict[str, Any]) -> str:
    """The markdown page of a run."""
    agg = {(r["seeds"], r["method"], r["context"], r["segment_size"], r["budget"]): r
           for r in result["aggregate"]}
    seeds_list = sorted({r["seeds"] for r in result["aggregate"]})
    methods = [m for m in METHODS if any(k[1] == m for k in agg)]
    lines = [
        "# Document context: pooled scores against per-sentence scores",
        "",
        f"Regenerate: `{result['command']}`",
        "",
        "Same stored scores, two rankings: each sentence by its own score (`sentence`), and each "
        "sentence by its document's empirical-Bayes mean score (`document`, "
        "`tapt select ... --context document`). Mean precision over the pool's domains at the "
        "oracle budget; ± is the standard deviation over the seed repeats (3 below 2,000 seeds, "
        "1 at 2,000). Nothing was fitted to the labels.",
        "",
    ]
    for size in SIZES:
        lines += [f"## Segment size {size}, oracle budget", "",
                  "| method | " + " | ".join(f"{s} seeds: sentence | {s}: document"
                                             for s in seeds_list) + " |",
                  "|---|" + "---|---|" * len(seeds_list)]
        for m in methods:
            cells = []
            for s in seeds_list:
                cells += [_fmt(agg.get((s, m, "sentence", size, "oracle"))),
                          _fmt(agg.get((s, m, "document", size, "oracle")))]
            lines.append(f"| {m.replace('_', '-')} | " + " | ".join(cells) + " |")
        lines.append("")
    top = max(seeds_list)
    lines += [f"## Per domain, {top} seeds, segment size 1, oracle budget, fused", "",
              "| domain | sentence | document | one-sentence reliability |", "|---|---|---|---|"]
    for task in sorted(result["tasks"], key=lambda t: t["domain"]):
        if task["seeds"] != top or task["repeat"] != 0:
            continue
        got = {(r["context"]): r["precision"] for r in task["rows"]
               if r["method"] == "fused" and r["segment_size"] == 1 and r["budget"] == "oracle"}
        rel = task["pooling"].get("fused", {}).get("one_sentence_reliability")
        lines.append(f"| {task['domain']} | {got.get('sentence', float('nan')):.3f} | "
                     f"{got.get('document', float('nan')):.3f} | {rel} |")
    lines += ["", f"Pooling cost: {result['pooling_seconds_median']:.3f} s per task "
              f"(median, {result['rows']:,} sentences, {result['documents']:,} documents).",
              "", f"Run {result['created']} on {result['machine']}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True,
                        help="benchmarks/quality_recall.py's cache (its scores/ folder is read)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--label-field", default="domain")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args(argv)
    index = Index(args.index)
    labels = sentence_labels(index, args.label_field, progress=True)
    shared = Shared(index=index, labels=labels)
    files = sorted((args.cache / "scores").glob("*.npz"))
    if not files:
        parser.error(f"no score files in {args.cache / 'scores'}: run benchmarks/quality_recall.py")
    methods = [m.strip().replace("-", "_") for m in args.methods.split(",") if m.strip()]
    tasks = []
    for path in tqdm(files, desc="tasks", unit="task"):
        match = KEY.match(path.stem)
        if match is None:
            continue
        with np.load(path) as data:
            scores = {k: data[k] for k in data.files}
        relevant = labels == match["domain"]
        rows, pooling = evaluate_task(shared, scores, relevant, methods)
        tasks.append({"domain": match["domain"], "seeds": int(match["seeds"]),
                      "repeat": int(match["repeat"]), "rows": rows, "pooling": pooling})
    seconds = [p["seconds"] for t in tasks for p in t["pooling"].values()]
    result = {
        "created": utc_now(),
        "command": "python -m benchmarks.document_context " + shlex.join(sys.argv[1:] if argv is None
                                                                         else argv),
        "machine": f"{platform.machine()} {platform.processor() or platform.system()}, "
                   f"{os.cpu_count()} CPUs",
        "versions": library_versions(),
        "rows": index.n_sentences, "documents": int(len(index.doc_offsets)),
        "pooling_seconds_median": float(np.median(seconds)) if seconds else 0.0,
        "aggregate": aggregate(tasks), "tasks": tasks,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "context.json", result)
    with atomic_write(args.out / "context.md", "w") as fh:
        fh.write(report(result))


if __name__ == "__main__":
    main()
