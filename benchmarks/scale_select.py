"""Selection latency on a large sharded index: exact float16 scan vs `scan="codes"` (int8).

The rows are synthetic (no encoder could embed 10M sentences on this machine in a session): a
seeded mixture of `--clusters` Gaussian blobs on the unit sphere in `--dim` dimensions (each row
= its cluster's random unit centre + isotropic noise of norm ~`--noise`, renormalised), stored as
a build stores them: one directory per shard with `embeddings.npy` (float16) and `codes.npy`
(int8, with the scale and rounding rule of `tapt index build --codes int8`: `stages.code_scale`
on a seeded sample across shards, `stages.encode_codes`). The task is 100 fresh rows of cluster
0. Selection runs the registered `centroid` method itself (`Method.rank` on a `Context`) over the
shards' memory maps seen as one (`shards.RowView`), at sentence-level segments; what it does not
time: opening an index (checks and hashing, once per process) and reading the selected text.

Each configuration runs `--repeats` times; the first run of the exact scan after the codes runs
finds the embeddings partly evicted from the page cache by other work on the machine, so both
the first and the best time are reported. The codes selection is compared with the exact one
(overlap of the selected rows).

    nice -n 10 .venv/bin/python -m benchmarks.scale_select --rows 10000000 --shards 10 \\
        --work .cache/scale --out benchmarks/results/scale
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tapt.indexer.npy import NpyAppender
from tapt.indexer.shards import RowView
from tapt.indexer.stages import code_scale, encode_codes
from tapt.retriever.budget import parse_budget
from tapt.retriever.methods import Context, SegmentView, get_method
from tapt.util.versions import library_versions, utc_now
from tapt.util.files import atomic_write, write_json_atomic

from .speed_encode import machine

log = logging.getLogger("scale_select")
CHUNK = 1 << 18


def blob_rows(rng: np.random.Generator, centres: np.ndarray, labels: np.ndarray,
              noise: float) -> np.ndarray:
    """Unit rows near the centres of `labels`."""
    dim = centres.shape[1]
    x = centres[labels] + rng.standard_normal((len(labels), dim), dtype=np.float32) * (
        noise / np.sqrt(dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def make_shards(work: Path, rows: int, shards: int, dim: int, clusters: int, noise: float,
                seed: int) -> dict[str, Any]:
    """Write the synthetic shards (skipped when `work/made.json` says they exist)."""
    record = {"rows": rows, "shards": shards, "dim": dim, "clusters": clusters, "noise": noise,
              "seed": seed}
    done = work / "made.json"
    if done.is_file() and json.loads(done.read_text()).get("spec") == record:
        return json.loads(done.read_text())
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    per = -(-rows // shards)
    t0 = time.perf_counter()
    for s in range(shards):
        n = min(per, rows - s * per)
        directory = work / f"{s:06d}"
        directory.mkdir(exist_ok=True)
        with NpyAppender(directory / "embeddings.npy", np.float16, (dim,)) as out:
            for start in range(0, n, CHUNK):
                labels = rng.integers(0, clusters, size=min(CHUNK, n - start))
                out.append(blob_rows(rng, centres, labels, noise).astype(np.float16))
        log.info("shard %d: %d rows (%.0f s)", s, n, time.perf_counter() - t0)
    view = RowView([np.load(work / f"{s:06d}" / "embeddings.npy", mmap_mode="r")
                    for s in range(shards)])
    scale = code_scale(view, seed)
    for s, (_, part) in enumerate(view.parts()):
        with NpyAppender(work / f"{s:06d}" / "codes.npy", np.int8, (dim,)) as out:
            for start in range(0, len(part), CHUNK):
                out.append(encode_codes(part[start:start + CHUNK], scale))
    made = {"spec": record, "scale": scale.tolist(), "seconds": round(time.perf_counter() - t0)}
    write_json_atomic(done, made)
    return made


class SyntheticIndex:
    """What the centroid method reads from an index: embeddings, codes and the codes' scale."""

    def __init__(self, work: Path, shards: int, scale: list[float]) -> None:
        self.path = work
        self.embeddings = RowView([np.load(work / f"{s:06d}" / "embeddings.npy", mmap_mode="r")
                                   for s in range(shards)])
        self.codes = RowView([np.load(work / f"{s:06d}" / "codes.npy", mmap_mode="r")
                              for s in range(shards)])
        self.manifest = {"codes": {"dtype": "int8", "scale": scale}}
        self.n_sentences = len(self.embeddings)


def sentence_view(n: int) -> SegmentView:
    """Segments of one sentence each (20 tokens a sentence, for token budgets)."""
    return SegmentView(np.arange(n + 1, dtype=np.int64), np.ones(n, dtype=np.int64),
                       np.full(n, 20, dtype=np.int64))


def timed_select(index: SyntheticIndex, view: SegmentView, task: np.ndarray, budget: str,
                 params: dict[str, Any]) -> tuple[float, np.ndarray, dict[str, Any]]:
    method = get_method("centroid")
    ctx = Context(index, view, parse_budget(budget), 0, task)
    t0 = time.perf_counter()
    ranking = method.rank(ctx, method.make_params(params))
    return time.perf_counter() - t0, ranking.segments, ranking.info


def parts_of_a_selection(index: SyntheticIndex, view: SegmentView, task: np.ndarray,
                         budget: str, repeats: int) -> dict[str, Any]:
    """Best seconds of each step of a selection at the largest size: the scan of every row
    (float16 embeddings, int8 codes) and the global ranking and cut of the sentence scores."""
    from tapt.retriever import scoring
    from tapt.retriever.methods.base import by_sentence_scores

    query = scoring.centroid(task)
    scale = np.asarray(index.manifest["codes"]["scale"], dtype=np.float32)
    steps = {"scan_float16_s": lambda: scoring.centroid_scores(index.embeddings, query),
             "scan_int8_codes_s": lambda: scoring.centroid_scores(index.codes, query,
                                                                  scale=scale)}
    out: dict[str, Any] = {"rows": index.n_sentences, "budget": budget}
    scores = None
    for name, step in steps.items():
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            scores = step()
            times.append(time.perf_counter() - t0)
        out[name] = round(min(times), 3)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        by_sentence_scores(view, scores, parse_budget(budget), {})
        times.append(time.perf_counter() - t0)
    out["rank_and_cut_s"] = round(min(times), 3)
    out["load_average"] = round(os.getloadavg()[0], 1)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=2000)
    parser.add_argument("--noise", type=float, default=1.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sizes", default="1,3,10", help="Shard counts to measure (prefixes).")
    parser.add_argument("--budgets", default="10000sent,100000sent")
    parser.add_argument("--rescore", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(".cache/scale"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scale"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    made = make_shards(args.work, args.rows, args.shards, args.dim, args.clusters, args.noise,
                       args.seed)
    rng = np.random.default_rng(args.seed + 1)
    centre = np.load(args.work / "000000" / "embeddings.npy", mmap_mode="r")  # for the dtype
    centres = np.random.default_rng(args.seed).standard_normal((args.clusters, args.dim),
                                                               dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    task = blob_rows(rng, centres, np.zeros(100, dtype=np.int64), args.noise)
    import torch  # imported once before timing: the CLI's select imports it to embed the task

    torch.mv(torch.ones(4, 4), torch.ones(4))
    results = []
    sizes = [int(x) for x in args.sizes.split(",")]
    for k in sizes:
        index = SyntheticIndex(args.work, min(k, args.shards), made["scale"])
        n = index.n_sentences
        view = sentence_view(n)
        for budget in args.budgets.split(","):
            row: dict[str, Any] = {"rows": n, "shards": min(k, args.shards), "budget": budget}
            picks = {}
            for name, params in (("exact", {}), ("codes", {"scan": "codes",
                                                           "rescore": args.rescore})):
                times = []
                for _ in range(args.repeats):
                    seconds, segments, info = timed_select(index, view, task, budget, params)
                    times.append(seconds)
                picks[name] = segments
                row[name] = {"first_s": round(times[0], 3), "best_s": round(min(times), 3),
                             **({"rescored": info.get("rescored_sentences")}
                                if name == "codes" else {})}
                log.info("%s rows, %s, %s: %s", f"{n:,}", budget, name, row[name])
            row["load_average"] = round(os.getloadavg()[0], 1)
            row["overlap"] = round(len(np.intersect1d(picks["exact"], picks["codes"]))
                                   / len(picks["exact"]), 5)
            results.append(row)
    breakdown = []
    for k in sorted({sizes[0], sizes[-1]}):   # the smallest (in the page cache) and the largest
        index = SyntheticIndex(args.work, min(k, args.shards), made["scale"])
        n = index.n_sentences
        view = sentence_view(n)
        breakdown.append(parts_of_a_selection(index, view, task, args.budgets.split(",")[-1],
                                              args.repeats))
        log.info("breakdown at %s rows: %s", f"{n:,}", breakdown[-1])
    report = {"created": utc_now(), "machine": machine(), "versions": library_versions(),
              "argv": sys.argv[1:] if argv is None else argv, "synthetic": made["spec"],
              "embedding_bytes_per_row": int(centre.dtype.itemsize * args.dim),
              "code_bytes_per_row": args.dim, "make_seconds": made["seconds"],
              "results": results, "breakdown": breakdown}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "select_latency.json", report)
    with atomic_write(args.out / "select_latency.md") as fh:
        fh.write(markdown(report))
    print(markdown(report))


def markdown(report: dict[str, Any]) -> str:
    spec = report["synthetic"]
    lines = [
        "## Measured: selection latency on a sharded index (synthetic rows)",
        "",
        f"Measured {report['created']} on {report['machine'].get('cpu', '?')} "
        f"({report['machine'].get('cores')} cores, shared with other developers' test suites: "
        "the load average column is the machine's 1-minute load when each row finished); "
        "centroid, "
        "sentence-level segments, one process (local executor); torch imported before timing.",
        "",
        f"Rows: {spec['rows']:,} synthetic unit vectors in {spec['dim']} dimensions, "
        f"{spec['clusters']:,} Gaussian blobs (noise {spec['noise']}), seed {spec['seed']}, "
        f"{spec['shards']} shards; float16 embeddings ({report['embedding_bytes_per_row']} "
        f"bytes a row) and int8 codes ({report['code_bytes_per_row']} bytes a row). The task: "
        "100 fresh rows of blob 0. Not timed: opening the index, reading the selected text.",
        "",
        "Regenerate:",
        "",
        "    nice -n 10 .venv/bin/python -m benchmarks.scale_select "
        + " ".join(report["argv"]),
        "",
        "| rows | shards | budget | exact first / best (s) | codes first / best (s) | "
        "rescored rows | overlap with exact | load average |",
        "|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        lines.append(f"| {r['rows']:,} | {r['shards']} | {r['budget']} | "
                     f"{r['exact']['first_s']:.2f} / {r['exact']['best_s']:.2f} | "
                     f"{r['codes']['first_s']:.2f} / {r['codes']['best_s']:.2f} | "
                     f"{r['codes']['rescored']:,} | {r['overlap']:.4f} | "
                     f"{r.get('load_average', '?')} |")
    lines += ["", "Where the time goes (best of the repeats; each step alone):", "",
              "| rows | scan every float16 row (s) | scan every int8 code (s) | "
              "rank and cut (s) | budget | load average |", "|---:|---:|---:|---:|---|---:|"]
    for b in report["breakdown"]:
        lines.append(f"| {b['rows']:,} | {b['scan_float16_s']:.2f} | "
                     f"{b['scan_int8_codes_s']:.2f} | {b['rank_and_cut_s']:.2f} | "
                     f"{b['budget']} | {b.get('load_average', '?')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
