"""Precision of every selection method against the oracle on the multi-domain benchmark.

For each domain: the task is the domain's seed file (held out by document from the pool), the
budget is the domain's size in the pool in sentences, so precision ~= recall. Methods run on one
index through `retriever.selections.make.rank` with the task embedded once per domain.

    python -m benchmarks.precision --index .cache/pool-index \
        --seeds ../shared/data/multidomain/seeds --out benchmarks/results/precision
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from tapt import Index

# internal: precision counted against each row's domain label, the oracle
from tapt.retriever.evaluation.metrics import selection_scores
from tapt.retriever.evaluation.oracle import sentence_labels

# internal: every method ranked with the task embedded once per domain, its rows counted
#   (Index.select writes files)
from tapt.retriever.scoring.arrays import rows_of_segments
from tapt.retriever.selections.make import SelectConfig, rank

# internal: the seed file read as a task is read, split as the index was
from tapt.retriever.tasks.reading import load_task

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

METHODS: dict[str, dict] = {
    "random": {"method": "random"},
    "centroid": {"method": "centroid"},
    "knn": {"method": "knn", "k": 50},
    "iforest": {"method": "iforest"},
    "iforest-pca8": {"method": "iforest", "pca": 8},
}


def run(index_dir: Path, seeds_dir: Path, segment_sizes: list[int], methods: list[str],
        limit_seeds: int | None) -> dict:
    index = Index(index_dir)
    encoder = index.load_encoder()
    labels = sentence_labels(index, "domain")
    results = []
    for seed_file in sorted(seeds_dir.glob("*.jsonl.gz")):
        domain = seed_file.name.split(".")[0]
        relevant = labels == domain
        if not relevant.any():
            logging.warning("%s: no pool sentences in this index, skipped", domain)
            continue
        task = load_task([seed_file], split=index.manifest["ingest"]["split_sentences"])
        sentences = task.sentences[:limit_seeds] if limit_seeds else task.sentences
        t0 = time.perf_counter()
        task_emb = encoder.encode(sentences)
        embed_s = time.perf_counter() - t0
        for size in segment_sizes:
            for name in methods:
                config = SelectConfig(budget=f"{int(relevant.sum())}sent", segment_size=size,
                                      **METHODS[name])
                t0 = time.perf_counter()
                ranking, view = rank(index, config, task_emb)
                seconds = time.perf_counter() - t0
                rows = rows_of_segments(view.offsets, ranking.segments)
                scores = selection_scores(rows, relevant)
                results.append({"domain": domain, "segment_size": size, "method": name,
                                "seeds": len(sentences), **scores.to_json(),
                                "select_seconds": round(seconds, 2),
                                "embed_task_seconds": round(embed_s, 2)})
                logging.info("%s size=%d %s precision=%.3f recall=%.3f (%.1fs)", domain, size,
                             name, scores.precision, scores.recall, seconds)
    return {"created": utc_now(), "index": str(index_dir), "index_counts": index.manifest["counts"],
            "model": index.manifest["model"]["name"], "versions": library_versions(),
            "results": results}


def markdown(report: dict) -> str:
    rows = report["results"]
    domains = sorted({r["domain"] for r in rows})
    lines = []
    for size in sorted({r["segment_size"] for r in rows}):
        methods = list(dict.fromkeys(r["method"] for r in rows if r["segment_size"] == size))
        lines += [f"### Segment size {size}: precision (recall) per domain", "",
                  "| method | " + " | ".join(domains) + " | **mean** | select s (mean) |",
                  "|---" * (len(domains) + 3) + "|"]
        for m in methods:
            cells = {r["domain"]: r for r in rows if r["segment_size"] == size and r["method"] == m}
            mean_p = np.mean([cells[d]["precision"] for d in domains])
            mean_s = np.mean([cells[d]["select_seconds"] for d in domains])
            lines.append(f"| {m} | " + " | ".join(
                f"{cells[d]['precision']:.3f} ({cells[d]['recall']:.3f})" for d in domains)
                + f" | **{mean_p:.3f}** | {mean_s:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--seeds", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    parser.add_argument("--segment-sizes", default="1,15")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--limit-seeds", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report = run(args.index, args.seeds, [int(s) for s in args.segment_sizes.split(",")],
                 args.methods.split(","), args.limit_seeds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report) + "\n")


if __name__ == "__main__":
    main()
