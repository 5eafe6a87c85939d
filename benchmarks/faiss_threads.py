"""FAISS training and adding with 1 and 2 OpenMP threads: what a whole-node task gains.

A build's `train` and per-shard `index` stages run FAISS, which parallelises k-means and the
rows' assignment over OpenMP threads. Run as Ray tasks with one CPU they got one thread; they now
get a node's cores (docs/ray.md). This times tapt's own `train_template` and `build_part` on
seeded random unit vectors (`--rows` x `--dim`, float32) for the index type tapt chooses for
that many rows (`auto`; HNSW needs no training) and for IVF-PQ (`--index ivfpq`, what large
indexes get: training and the coarse assignment of every added row), once per thread count
(`faiss.omp_set_num_threads`), and checks that every thread count builds the same index bytes.

    .venv/bin/python -m benchmarks.faiss_threads --rows 200000 --out benchmarks/results/scale
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.measure import write_report
from benchmarks.speed_encode import machine

# internal: the results' version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now


def unit_rows(rows: int, dim: int, seed: int) -> np.ndarray:
    """`rows` seeded random unit vectors of `dim` float32s."""
    x = np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def time_build(x: np.ndarray, requested: str, threads: int, seed: int) -> dict[str, Any]:
    """Train (where the type needs it) and add every row with `threads` FAISS threads."""
    import faiss

    # internal: the build's FAISS train and add steps timed per thread count
    from tapt.indexer.ann.faiss_index import build_part, faiss_threads, train_template

    # internal: the index type a build would choose for these rows
    from tapt.indexer.ann.index_choice import choose_index

    choice = choose_index(len(x), x.shape[1], requested=requested, seed=seed)
    with faiss_threads(threads):      # what a whole-node Ray task runs within
        template, train_seconds = train_template(x, choice)
        t0 = time.perf_counter()
        part = build_part(x, choice, template, 0)
        add_seconds = time.perf_counter() - t0
    digest = hashlib.sha256(faiss.serialize_index(part).tobytes()).hexdigest()
    return {"factory": choice.factory, "threads": threads, "train_s": round(train_seconds, 3),
            "add_s": round(add_seconds, 3), "total_s": round(train_seconds + add_seconds, 3),
            "train_sample": choice.train_size if template is not None else 0,
            "sha256": digest}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--index", default="auto,ivfpq", help="index requests, comma-separated")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    x = unit_rows(args.rows, args.dim, args.seed)
    runs = []
    for requested in args.index.split(","):
        for n in threads:
            run = {"index": requested, **time_build(x, requested, n, args.seed)}
            print(f"{requested} {run['factory']} threads={n}: train {run['train_s']} s, "
                  f"add {run['add_s']} s", flush=True)
            runs.append(run)
    lines = [f"# FAISS training and adding with {' and '.join(map(str, threads))} threads", "",
             f"{args.rows:,} seeded random unit vectors of {args.dim} float32s; "
             f"{machine().get('cpu', '?')}, {os.cpu_count()} cores. Seconds of tapt's "
             "`train_template` and `build_part` (FAISS OpenMP threads set per run); speed-up "
             f"against {threads[0]} thread(s).", "",
             "| index | factory | threads | train s | add s | total s | speed-up | same bytes |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for run in runs:
        base = next(r for r in runs if r["index"] == run["index"] and r["threads"] == threads[0])
        run["speedup"] = round(base["total_s"] / run["total_s"], 2) if run["total_s"] else None
        run["same_bytes_as_first"] = run["sha256"] == base["sha256"]
        lines.append(f"| {run['index']} | {run['factory']} | {run['threads']} | {run['train_s']} "
                     f"| {run['add_s']} | {run['total_s']} | {run['speedup']} | "
                     f"{'yes' if run['same_bytes_as_first'] else 'no'} |")
    report = {"benchmark": "faiss_threads", "when": utc_now(), "machine": machine(),
              "versions": library_versions(), "rows": args.rows, "dim": args.dim,
              "seed": args.seed, "runs": runs}
    write_report(args.out, "faiss_threads", report, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
