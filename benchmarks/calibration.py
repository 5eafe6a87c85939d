"""The search calibration of a built index, timed: the calibration a build runs (exact top-k of
the seeded query sample shard by shard through an executor, merged, then the nprobe/efSearch
sweep) against the one before it (exact top-k over all rows in one pass on the driver, then the
same sweep), on the same index, embeddings read once first so both find them in the page cache.

    python -m benchmarks.calibration --index WORK/index [--old OLD_ANN_RECALL.py] [--json OUT]

`--old`: a copy of the earlier `tapt/indexer/ann/ann_recall.py` whose relative imports are made
absolute (see benchmarks/results/scale/calibration.md), timed as it was. The index is only read.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

# internal: the calibration's own query sample, timed apart for its exact top-k
from tapt.indexer.ann.ann_recall import CALIBRATION_K, calibration_queries

# internal: the built shards' FAISS files reopened for the old calibration to sweep
from tapt.indexer.ann.faiss_index import ShardedFaiss, ids_are_global, read_faiss_index

# internal: the index type the build chose, read back from its manifest
from tapt.indexer.ann.index_choice import choice_from_manifest

# internal: each shard's folder, to read its embeddings and FAISS file
from tapt.indexer.building import stages

# internal: the build's calibration step and its exact top-k are what is timed
from tapt.indexer.building.ann_build import calibrated_faiss, exact_truth

# internal: the executor the calibration's top-k runs through, as in a build
from tapt.indexer.building.executors import LocalExecutor

# internal: the embeddings' file name in a shard
from tapt.indexer.store.manifest import EMBEDDINGS

# internal: the float16 cast loaded before timing (a build loaded it already)
from tapt.indexer.store.npy import as_float32

# internal: the shards' embeddings as one row view, as the old calibration took them
from tapt.indexer.store.shards import RowView


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("old_ann_recall", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(index: Path, old: Path | None = None) -> dict[str, Any]:
    """Seconds of the calibration now (and before, with `old`) on the index at `index`."""
    manifest = json.loads((index / "manifest.json").read_text())
    names = [s["name"] for s in manifest["shards"]]
    offsets = [int(s["row_offset"]) for s in manifest["shards"]]
    rows = int(manifest["counts"]["sentences"])
    view = RowView([np.load(stages.shard_path(index, n) / EMBEDDINGS, mmap_mode="r")
                    for n in names])
    dim = int(manifest["files"]["embeddings"]["shape"][1])
    choice = choice_from_manifest(manifest["faiss"], rows, dim)
    t0 = time.perf_counter()
    as_float32(np.zeros((1, dim), dtype=np.float16))  # its imports, which a build made already
    for n in names:   # into the page cache, so neither timing pays the first read
        emb = np.load(stages.shard_path(index, n) / EMBEDDINGS, mmap_mode="r")
        for start in range(0, len(emb), 1 << 18):
            float(np.asarray(emb[start:start + (1 << 18)], dtype=np.float32)[:, 0].sum())
    out: dict[str, Any] = {"index": str(index), "rows": rows, "shards": len(names), "dim": dim,
                           "load_average": [round(x, 1) for x in os.getloadavg()],
                           "factory": choice.factory, "warm_read_seconds":
                           round(time.perf_counter() - t0, 2)}
    t0, c0 = time.perf_counter(), time.process_time()
    info = calibrated_faiss(index, names, offsets, choice, rows, 0.0, False,
                            LocalExecutor(progress=False))
    out["after"] = {"seconds": round(time.perf_counter() - t0, 2),
                    "cpu_seconds": round(time.process_time() - c0, 2),
                    "truth_seconds": info["search"]["sample"]["truth_seconds"],
                    "sweep_seconds": info["search"]["sample"]["sweep_seconds"],
                    "default": info["search"]["default"],
                    "rescore_factor": info["search"]["rescore_factor"],
                    "recall": info["search"]["recall"],
                    "queries": info["search"]["queries"]}
    t0, c0 = time.perf_counter(), time.process_time()
    queries, _ = calibration_queries(view, choice)
    exact_truth(index, names, offsets, queries, CALIBRATION_K, LocalExecutor(progress=False))
    out["after"]["truth_alone_seconds"] = round(time.perf_counter() - t0, 2)
    out["after"]["truth_cpu_seconds"] = round(time.process_time() - c0, 2)
    out["after"]["truth_cpu_us_per_row"] = round(1e6 * out["after"]["truth_cpu_seconds"] / rows,
                                                 4)
    out["after"]["truth_us_per_row"] = round(1e6 * out["after"]["truth_seconds"] / rows, 4)
    out["after"]["us_per_row"] = round(1e6 * out["after"]["seconds"] / rows, 4)
    out["after"]["cpu_us_per_row"] = round(1e6 * out["after"]["cpu_seconds"] / rows, 4)
    if old is not None:
        module = _load(old)
        parts = [read_faiss_index(stages.shard_path(index, n) / "index.faiss") for n in names]
        sharded = ShardedFaiss(parts, offsets, ids_are_global(choice))
        t0, c0 = time.perf_counter(), time.process_time()
        search = module.calibrate(sharded, view, choice)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        q = module.sample_queries(view, module.CALIBRATION_QUERIES, seed=choice.seed + 1)
        _, truth_old = module.ground_truth(view, q, module.CALIBRATION_K)
        truth_seconds, truth_cpu = time.perf_counter() - t0, time.process_time() - c0
        out["before"] = {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
                         "truth_seconds": round(truth_seconds, 2),
                         "truth_cpu_seconds": round(truth_cpu, 2),
                         "default": search["default"], "rescore_factor": search["rescore_factor"],
                         "recall": search["recall"], "queries": search["queries"],
                         "us_per_row": round(1e6 * seconds / rows, 4),
                         "cpu_us_per_row": round(1e6 * cpu / rows, 4)}
        truth_new = exact_truth(index, names, offsets, q, module.CALIBRATION_K)
        out["same_truth_ids"] = float((np.sort(truth_new, axis=1)
                                       == np.sort(truth_old, axis=1)).mean())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--old", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = measure(args.index, args.old)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
