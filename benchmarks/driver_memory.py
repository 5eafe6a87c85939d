"""Peak driver memory of a budgeted `centroid` selection: the whole-array path vs the streamed cut.

Rows: the synthetic float16 shards of `benchmarks/scale_select.py` (its shard writer, same
seeded blobs, same task of 100 fresh rows of blob 0), seen as one `RowView` over memory maps.
Each measurement runs in a fresh process (`--one`) that selects once:

- `whole`: what every budgeted selection did before: one float32 score per sentence
  (`Method.sentence_scores`), then segment means, ranking and cut (`by_sentence_scores`);
- `streamed`: `Method.rank`, which now streams the budget's cut (`retriever.topcut`).

What is recorded, in that process:

- `ru_maxrss`: `resource.getrusage(RUSAGE_SELF).ru_maxrss`, the peak resident set. It counts
  the pages of the memory-mapped embeddings the scan touched (file-backed, shared with the page
  cache, 768 bytes a row), so both paths include them;
- `anon_peak`: the peak of `RssAnon` in /proc/self/status (the process's own memory, without
  the mapped files), sampled every millisecond by a thread;
- `numpy_peak`: the peak of the memory `tracemalloc` traces during the selection (numpy's
  array allocations; not torch's, which here only casts 2,048 rows at a time);
- the same before the selection (`*_before`: imports, the segment view, the task), the
  selection's seconds, and a digest of the selected segment ids and scores (both paths must
  give the same).

    nice -n 10 .venv/bin/python -m benchmarks.driver_memory --rows 2000000 --shards 2 \\
        --work /tmp/topcut-scale --out benchmarks/results/scale
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from tapt.util.files import atomic_write, write_json_atomic
from tapt.util.versions import library_versions, utc_now

from .scale_select import SyntheticIndex, blob_rows, make_shards
from .speed_encode import machine

log = logging.getLogger("driver_memory")
MB = 1 << 20


def _anon_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


class AnonPeak:
    """The peak of RssAnon while the block runs (sampled every `interval` seconds)."""

    def __init__(self, interval: float = 0.001) -> None:
        self.interval, self.peak, self._stop = interval, 0, threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _anon_bytes())
            time.sleep(self.interval)

    def __enter__(self) -> "AnonPeak":
        self.peak = _anon_bytes()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _anon_bytes())


def segment_view(n: int, size: int):
    """Segments of `size` consecutive sentences (20 tokens a sentence)."""
    from tapt.retriever.methods import SegmentView

    offsets = np.append(np.arange(0, n, size, dtype=np.int64), n)
    lengths = np.diff(offsets)
    return SegmentView(offsets, lengths, lengths * 20)


def one(args: argparse.Namespace) -> dict[str, Any]:
    """One selection in this process; what it measured."""
    import torch

    from tapt.retriever.budget import parse_budget
    from tapt.retriever.methods import Context, get_method
    from tapt.retriever.methods.base import by_sentence_scores

    torch.mv(torch.ones(4, 4), torch.ones(4))
    made = json.loads((args.work / "made.json").read_text())
    index = SyntheticIndex(args.work, args.prefix, made["scale"])
    rng = np.random.default_rng(args.seed + 1)
    centres = np.random.default_rng(args.seed).standard_normal((args.clusters, args.dim),
                                                               dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    task = blob_rows(rng, centres, np.zeros(100, dtype=np.int64), args.noise)
    view = segment_view(index.n_sentences, args.size)
    method = get_method("centroid")
    params = method.make_params({})
    ctx = Context(index, view, parse_budget(args.budget), 0, task)
    before = {"ru_maxrss_before": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
              "anon_before": _anon_bytes()}
    tracemalloc.start()
    t0 = time.perf_counter()
    with AnonPeak() as anon:
        if args.path == "whole":
            scores, info = method.sentence_scores(ctx, params)
            ranking = by_sentence_scores(view, scores, ctx.budget, dict(info))
            del scores
        else:
            ranking = method.rank(ctx, params)
    seconds = time.perf_counter() - t0
    numpy_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    digest = hashlib.sha256(np.asarray(ranking.segments, np.int64).tobytes()
                            + np.asarray(ranking.scores, np.float32).tobytes()).hexdigest()
    return {"path": args.path, "rows": index.n_sentences, "segment_size": args.size,
            "segments": len(view), "budget": args.budget, "selected": int(len(ranking.segments)),
            "seconds": round(seconds, 3), **before, "anon_peak": anon.peak,
            "numpy_peak": numpy_peak,
            "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "view_bytes": int(view.offsets.nbytes + view.lengths.nbytes + view.tokens.nbytes),
            "digest": digest[:16]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=2000)
    parser.add_argument("--noise", type=float, default=1.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefixes", default="1,2",
                        help="Shard counts to select from (the first k shards: 1M rows each "
                             "by default), to show what grows with the rows.")
    parser.add_argument("--sizes", default="1,4", help="Segment sizes (sentences).")
    parser.add_argument("--budgets", default="10000sent,100000sent,0.2")
    parser.add_argument("--work", type=Path, default=Path(".cache/scale-memory"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scale"))
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", choices=("whole", "streamed"), help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--budget", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args)))
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    made = make_shards(args.work, args.rows, args.shards, args.dim, args.clusters, args.noise,
                       args.seed)
    common = ["--rows", str(args.rows), "--shards", str(args.shards), "--dim", str(args.dim),
              "--clusters", str(args.clusters), "--noise", str(args.noise), "--seed",
              str(args.seed), "--work", str(args.work)]
    results = []
    cells = [(k, size, budget) for k in [int(x) for x in args.prefixes.split(",")]
             for size in [int(x) for x in args.sizes.split(",")]
             for budget in args.budgets.split(",")]
    for k, size, budget in cells:
        pair = {}
        for path in ("whole", "streamed"):
            out = subprocess.run([sys.executable, "-m", "benchmarks.driver_memory", "--one",
                                  "--path", path, "--size", str(size), "--budget", budget,
                                  "--prefix", str(min(k, args.shards)), *common],
                                 capture_output=True, text=True, check=True)
            pair[path] = json.loads(out.stdout.strip().splitlines()[-1])
            log.info("%s", pair[path])
        if pair["whole"]["digest"] != pair["streamed"]["digest"]:
            raise SystemExit(f"{k} shard(s), size {size}, {budget}: the two paths selected "
                             "differently")
        results.append({"rows": pair["whole"]["rows"], "segment_size": size, "budget": budget,
                        **pair, "load_average": round(os.getloadavg()[0], 1)})
    report = {"created": utc_now(), "machine": machine(), "versions": library_versions(),
              "argv": sys.argv[1:] if argv is None else argv, "synthetic": made["spec"],
              "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "driver_memory.json", report)
    with atomic_write(args.out / "driver_memory.md") as fh:
        fh.write(markdown(report))
    print(markdown(report))


def markdown(report: dict[str, Any]) -> str:
    spec = report["synthetic"]
    lines = [
        "## Measured: peak driver memory of a budgeted centroid selection",
        "",
        f"Measured {report['created']} on {report['machine'].get('cpu', '?')} "
        f"({report['machine'].get('cores')} cores, shared). Rows: {spec['rows']:,} synthetic "
        f"float16 unit vectors in {spec['dim']} dimensions ({spec['shards']} shards; the "
        "1M-row rows select from the first shard alone; "
        "`benchmarks/scale_select.py`'s shard writer, seed "
        f"{spec['seed']}), memory-mapped; segments of 1 or 4 consecutive sentences; the task "
        "100 fresh rows of blob 0. Each cell is one fresh process that selects once "
        "(`benchmarks/driver_memory.py --one`). *whole*: one score per sentence, then "
        "`by_sentence_scores` (every budgeted selection before this change); *streamed*: "
        "`Method.rank`, the budget's cut kept while the rows are scored (`retriever.topcut`). "
        "Both selected the same segments and scores (digest compared) in every row.",
        "",
        "*anon*: the peak of the process's own resident memory (RssAnon, sampled every ms) "
        "minus its value before the selection (imports, segment view, task); *numpy*: the peak "
        "of numpy's allocations during the selection (tracemalloc); *ru_maxrss*: the process's "
        "peak resident set, which also counts the pages of the memory-mapped embeddings the "
        "scan touched (the same in both paths).",
        "",
        "Regenerate:",
        "",
        "    nice -n 10 .venv/bin/python -m benchmarks.driver_memory " + " ".join(report["argv"]),
        "",
        "| rows | segment size | budget | selected | anon whole / streamed (MB) | numpy whole / "
        "streamed (MB) | ru_maxrss whole / streamed (MB) | seconds whole / streamed | "
        "segment view (MB) |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        w, s = r["whole"], r["streamed"]
        lines.append(
            f"| {r['rows']:,} | {r['segment_size']} | {r['budget']} | {s['selected']:,} | "
            f"{(w['anon_peak'] - w['anon_before']) / MB:.0f} / "
            f"{(s['anon_peak'] - s['anon_before']) / MB:.0f} | "
            f"{w['numpy_peak'] / MB:.0f} / {s['numpy_peak'] / MB:.0f} | "
            f"{w['ru_maxrss'] / MB:.0f} / {s['ru_maxrss'] / MB:.0f} | "
            f"{w['seconds']:.2f} / {s['seconds']:.2f} | {s['view_bytes'] / MB:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
