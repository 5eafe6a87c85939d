"""Why the 10M-row synthetic build of `benchmarks/driver_build.py` calibrates to recall@100 0.67
(target 0.95): IVF-PQ recall on that benchmark's rows at the density of its 1M and 10M builds,
with a flat and an HNSW coarse quantizer, at several nprobe and candidate factors.

`driver_build.py`'s `SyntheticEncoder` gives every sentence its cluster's centre (200 clusters
in 384 dimensions) plus isotropic Gaussian noise (0.6 a dimension), L2-normalised. Within a
cluster every row is about as similar to a query as every other: the 100th and the 1,600th
neighbours differ by about 0.015 in cosine, far less than 4-bit product quantisation resolves,
so the codes cannot order a cluster's rows, whatever lists are probed.

This script rebuilds that geometry at the two densities of the benchmark's builds, without a
10M-row index: `--clusters` clusters of `rows-per-cluster` rows (5,000: the 1M build, 1,000,000
rows over 200 clusters; 50,000: the 10M build), IVF lists in the same number per cluster as the
build's plan gave (2,048 lists / 200 clusters ~ 10; 8,192 / 200 ~ 41), PQ192x4fs as the build.
Queries: `--queries` seeded rows (a row's own id left out of its neighbours, as the calibration
draws its queries from the rows). Recall@100: the exact top 100 of the `factor` x 100
candidates FAISS returns, against brute force (tapt's rescoring). Also: the mean cosine of the
1st, 100th and 1,600th true neighbours (how tied the rows are).

    nice -n 10 .venv/bin/python -m benchmarks.calibration_ties --out benchmarks/results/scale
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.measure import write_report

# internal: the results' version stamps and times, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

DIM, NOISE, K = 384, 0.6, 100
DENSITIES = ((5_000, 10, "the 1M build"), (50_000, 41, "the 10M build"))


def rows_of(clusters: int, per_cluster: int, seed: int) -> np.ndarray:
    """Unit rows as `driver_build.SyntheticEncoder` makes them, `per_cluster` in each of the
    first `clusters` of its 200 centres."""
    centres = np.random.default_rng(0).normal(size=(200, DIM)).astype(np.float32)[:clusters]
    rng = np.random.default_rng(seed)
    out = np.empty((clusters * per_cluster, DIM), np.float32)
    for c in range(clusters):
        block = centres[c] + rng.normal(scale=NOISE, size=(per_cluster, DIM)).astype(np.float32)
        out[c * per_cluster:(c + 1) * per_cluster] = block / np.linalg.norm(
            block, axis=1, keepdims=True)
    return out


def measure(clusters: int, per_cluster: int, lists_per_cluster: int, queries: int,
            nprobes: list[int], factors: list[int], seed: int) -> dict[str, Any]:
    """Recall@100 of IVF-PQ with each quantizer on one density (module docstring)."""
    import faiss

    x = rows_of(clusters, per_cluster, seed)
    ids = np.random.default_rng(seed + 1).choice(len(x), queries, replace=False)
    q = x[ids]
    sims = q @ x.T
    sims[np.arange(queries), ids] = -np.inf          # a query is not its own neighbour
    order = np.argsort(-sims, axis=1)
    truth = [set(row[:K].tolist()) for row in order]
    ranked = np.take_along_axis(sims, order[:, :1600], axis=1)
    lists = clusters * lists_per_cluster
    out: dict[str, Any] = {
        "rows": len(x), "clusters": clusters, "rows_per_cluster": per_cluster, "lists": lists,
        "neighbour_cosine": {str(r + 1): round(float(ranked[:, r].mean()), 4)
                             for r in (0, K - 1, 1599)},
        "quantizers": []}
    train = x[np.random.default_rng(seed + 2).choice(len(x), min(len(x), 40 * lists),
                                                     replace=False)]
    for factory in (f"IVF{lists},PQ192x4fs", f"IVF{lists}_HNSW32,PQ192x4fs"):
        index = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
        t0 = time.perf_counter()
        index.train(train)
        ivf = faiss.extract_index_ivf(index)
        hnsw = "HNSW" in factory
        if hnsw:
            faiss.downcast_index(ivf.quantizer).hnsw.efSearch = 64
        t1 = time.perf_counter()
        index.add(x)
        t2 = time.perf_counter()
        runs = []
        for nprobe in nprobes:
            ivf.nprobe = nprobe
            if hnsw:
                faiss.downcast_index(ivf.quantizer).hnsw.efSearch = max(64, 2 * nprobe)
            for factor in factors:
                _, cand = index.search(q, factor * K + 1)
                recall = []
                for i in range(queries):
                    c = cand[i][(cand[i] >= 0) & (cand[i] != ids[i])]
                    best = c[np.argsort(-(x[c] @ q[i]), kind="stable")[:K]]
                    recall.append(len(truth[i] & set(best.tolist())) / K)
                runs.append({"nprobe": nprobe, "factor": factor,
                             "recall": round(float(np.mean(recall)), 4)})
        out["quantizers"].append({"factory": factory, "train_s": round(t1 - t0, 1),
                                  "add_s": round(t2 - t1, 1), "runs": runs})
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"IVF-PQ recall on near-tied synthetic rows, measured {report['created']} on {report['machine']} (load average "
        f"{report['load_start']}-{report['load_end']}); `python -m benchmarks.calibration_ties`"
        " (see its docstring). Rows: `driver_build.py`'s synthetic rows (cluster centre + "
        f"noise {NOISE}/dimension, 384 dimensions), {report['queries']} queries drawn from the "
        "rows, recall@100 after exact rescoring of factor x 100 candidates.", "",
        "| density | rows | lists | cosine of neighbour 1 / 100 / 1,600 | quantizer | add (s) "
        "| nprobe | recall@100 at factor " + " / ".join(str(f) for f in report["factors"]) + " |",
        "|---|---:|---:|---|---|---:|---:|---|"]
    for d in report["densities"]:
        cos = d["neighbour_cosine"]
        for qz in d["quantizers"]:
            for nprobe in report["nprobes"]:
                rec = [r["recall"] for r in qz["runs"] if r["nprobe"] == nprobe]
                lines.append(
                    f"| {d['what']} ({d['rows_per_cluster']:,} rows a cluster) | {d['rows']:,} | "
                    f"{d['lists']:,} | {cos['1']:.3f} / {cos['100']:.3f} / {cos['1600']:.3f} | "
                    f"{'HNSW32' if 'HNSW' in qz['factory'] else 'flat'} | {qz['add_s']} | "
                    f"{nprobe} | " + " / ".join(f"{r:.3f}" for r in rec) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--nprobes", default="64,512")
    parser.add_argument("--factors", default="4,8,16")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import faiss

    faiss.omp_set_num_threads(1)
    nprobes = [int(v) for v in args.nprobes.split(",")]
    factors = [int(v) for v in args.factors.split(",")]
    load = round(os.getloadavg()[0], 1)
    densities = []
    for per_cluster, lists_per_cluster, what in DENSITIES:
        d = measure(args.clusters, per_cluster, lists_per_cluster, args.queries, nprobes,
                    factors, args.seed)
        densities.append({"what": what, **d})
    report = {"created": utc_now(), "machine": f"{platform.machine()} {platform.system()}, "
              f"{os.cpu_count()} CPUs, FAISS on 1 thread", "queries": args.queries,
              "nprobes": nprobes, "factors": factors, "densities": densities,
              "load_start": load, "load_end": round(os.getloadavg()[0], 1),
              "versions": library_versions()}
    write_report(args.out, "calibration_ties", report, markdown(report))


if __name__ == "__main__":
    main()
