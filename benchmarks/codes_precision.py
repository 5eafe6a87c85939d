#!/usr/bin/env python
"""`--scan codes` against exact scans on real text: precision against oracle labels.

For each domain of the labelled pool, the task is a seeded subset of the domain's seed sentences
(`--seed-sizes`, the first subset of `tapt bench recall`), the budget the oracle's size in
sentences, at segment size 1. Each method (`--methods`: centroid, distance, density,
classifier, fused) selects with an exact scan and with `scan` codes (`rescore` 4). Reported per
method and seed size, as means over the domains: the precision of both, the overlap of the codes
selection with the exact one, and the overlap of two exact selections with different seeds (how
much the selection moves with the seed alone; 1.0 for methods without random draws).

The index must have int8 codes; make them on a copy of the quality benchmark's index:

    cp -r .cache/pool-index .cache/pool-index-codes
    tapt index reindex .cache/pool-index-codes --codes int8
    nice -n 10 .venv/bin/python -m benchmarks.codes_precision --index .cache/pool-index-codes \\
        --seeds ../shared/data/multidomain/seeds --out benchmarks/results/quality
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from benchmarks.scale_select import overlap
from benchmarks.speed_encode import machine
from tapt import Index

# internal: tasks drawn from the seed sets as bench recall draws its first subset
from tapt.bench.labelled_pool import read_seed_sets, seed_subset

# internal: the seed sets embedded once, as bench recall does, for every method
from tapt.bench.recall_run import seed_embeddings

# internal: each row's domain, the oracle precision is counted against
from tapt.retriever.evaluation.oracle import sentence_labels

# internal: one corpus cache shared by every method, task and scan
from tapt.retriever.methods import CorpusCache

# internal: the ranked rows of exact and codes scans compared (Index.select writes files)
from tapt.retriever.selections.make import SelectConfig, rank

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

METHODS = ("centroid", "distance", "density", "classifier", "fused")


def selected_rows(index: Index, corpus: CorpusCache, method: str, budget: str, seed: int,
                  task: np.ndarray, texts: list[str], scan: str) -> tuple[np.ndarray, float]:
    """The sentence rows a selection keeps (segment size 1: segment id = row), and its seconds."""
    config = SelectConfig(method, budget, segment_size=1, seed=seed, scan=scan)
    t0 = time.perf_counter()
    ranking, _ = rank(index, config, task, texts, corpus=corpus)
    return np.sort(ranking.segments), time.perf_counter() - t0


def run(index: Index, seeds_dir: Path, methods: list[str], seed_sizes: list[int],
        domains: list[str] | None, progress: bool) -> list[dict[str, Any]]:
    """One row per (domain, seed size, method)."""
    labels = sentence_labels(index, "domain", progress=progress)
    seed_sets = read_seed_sets(seeds_dir, domains)
    embedded = seed_embeddings(index, seed_sets, Path("."))
    corpus = CorpusCache(index)
    rows = []
    grid = [(s, n, m) for s in seed_sets for n in seed_sizes for m in methods]
    for seed_set, size, method in tqdm(grid, desc="selections", disable=not progress):
        pick = seed_subset(len(seed_set.texts), size, 0)
        task, texts = embedded[seed_set.domain][pick], [seed_set.texts[i] for i in pick]
        relevant = labels == seed_set.domain
        budget = f"{int(relevant.sum())}sent"
        exact, t_exact = selected_rows(index, corpus, method, budget, 0, task, texts, "exact")
        codes, t_codes = selected_rows(index, corpus, method, budget, 0, task, texts, "codes")
        other, _ = selected_rows(index, corpus, method, budget, 1, task, texts, "exact")
        rows.append({"domain": seed_set.domain, "seeds": int(len(pick)), "method": method,
                     "budget": budget,
                     "precision_exact": round(float(relevant[exact].mean()), 4),
                     "precision_codes": round(float(relevant[codes].mean()), 4),
                     "overlap_codes_exact": round(overlap(exact, codes), 4),
                     "overlap_seed_1_exact": round(overlap(exact, other), 4),
                     "seconds_exact": round(t_exact, 2), "seconds_codes": round(t_codes, 2)})
    return rows


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Means over the domains per (method, seed size)."""
    keys = sorted({(r["method"], r["seeds"]) for r in rows},
                  key=lambda k: (METHODS.index(k[0]) if k[0] in METHODS else 99, k[1]))
    out = []
    for method, seeds in keys:
        group = [r for r in rows if r["method"] == method and r["seeds"] == seeds]
        mean = {f: round(float(np.mean([r[f] for r in group])), 4)
                for f in ("precision_exact", "precision_codes", "overlap_codes_exact",
                          "overlap_seed_1_exact")}
        out.append({"method": method, "seeds": seeds, "domains": len(group), **mean,
                    "min_overlap_codes_exact": min(r["overlap_codes_exact"] for r in group)})
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "## Measured: `--scan codes` against exact scans, precision on the labelled pool",
        "",
        f"Measured {report['created']} on {report['machine']}; index {report['index']} "
        f"({report['sentences']:,} sentences, int8 codes), segment size 1, budget = the "
        "oracle's size in sentences, `rescore` 4. Means over the domains; \"seed 1 vs 0\" is "
        "the overlap of two exact selections that differ only in `--seed`.",
        "",
        "| method | seed sentences | precision exact | precision codes | overlap codes vs "
        "exact (min) | overlap seed 1 vs 0 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in report["summary"]:
        lines.append(f"| {s['method']} | {s['seeds']:,} | {s['precision_exact']:.4f} | "
                     f"{s['precision_codes']:.4f} | {s['overlap_codes_exact']:.4f} "
                     f"({s['min_overlap_codes_exact']:.4f}) | {s['overlap_seed_1_exact']:.4f} |")
    lines += ["", "Regenerate:", "", "    nice -n 10 .venv/bin/python -m "
              "benchmarks.codes_precision " + " ".join(map(shlex.quote, report["argv"])), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, default=Path(".cache/pool-index-codes"))
    parser.add_argument("--seeds", type=Path,
                        default=Path("../shared/data/multidomain/seeds"))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--seed-sizes", default="100,2000")
    parser.add_argument("--domains", default=None, help="Only these domains (comma-separated).")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods or set(methods) - set(METHODS):
        parser.error(f"--methods: use some of {', '.join(METHODS)}")
    index = Index(args.index)
    if index.codes is None:
        parser.error(f"{args.index} has no int8 codes: run tapt index reindex {args.index} "
                     "--codes int8 (on a copy)")
    sizes = [int(s) for s in args.seed_sizes.split(",") if s.strip()]
    domains = [d.strip() for d in args.domains.split(",")] if args.domains else None
    rows = run(index, args.seeds, methods, sizes, domains, progress=not args.quiet)
    host = machine()
    report = {"created": utc_now(), "machine": f"{host.get('cpu', host['platform'])} "
              f"({host['cores']} cores)", "argv": sys.argv[1:] if argv is None else argv,
              "index": str(args.index), "sentences": index.n_sentences,
              "versions": library_versions(), "summary": summary(rows), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "codes_precision.json", report)
    with atomic_write(args.out / "codes_precision.md") as fh:
        fh.write(markdown(report))


if __name__ == "__main__":
    main()
