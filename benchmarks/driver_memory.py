"""Peak driver memory of budgeted selections: every method at 1M, 3M and 10M rows (`--indexes`),
and centroid before and after the streamed cut.

`--indexes DIR,DIR,..` (the headline, issue 29): for each synthetic index (`WORK/index` of
`benchmarks/synthetic_index.py`, its spec read from `WORK/made.json`) and each of `--methods`
(centroid, knn, classifier, fused, iforest), one fresh process (`--cell`) imports tapt, opens
the index and ranks once (`Method.rank` on a `RankingInputs` of the opened `Index`, what
`Index.select` runs; the segment view built in the process) at `--cell-budget` (10000sent).
The task: 100 fresh rows of blob 0 as embeddings, with 100 fresh synthetic sentences of blob 0
as its text (fused's Moore-Lewis half). Recorded: `peak_mb`, the peak of the process's RssAnon
(its own memory: mapped embedding, code, FAISS and lexical pages not counted; sampled every
millisecond) from the start to the end of the selection; `base_mb` its RssAnon after the imports,
before the index is opened; `open_mb` after opening; `seconds`; a digest of the selection.

    nice -n 10 .venv/bin/python -m benchmarks.driver_memory --indexes \\
        /work/benchcache/synthetic-1m,/work/benchcache/synthetic-3m --out benchmarks/results/scale

The older comparison (no `--indexes`; kept in the JSON's `select` and `paths`):

The index: `benchmarks/synthetic_index.py`'s real tapt index of synthetic rows (Gaussian blobs
on the unit sphere, float16, one sentence per document, built by tapt's own stages), the task
100 fresh rows of blob 0 given as embeddings. Each measurement runs in a fresh process
(`--one`) that opens the index and selects once. Two comparisons:

- `Index.select("centroid", task, budget)` with the code of `--before` (a git revision of this
  repository, extracted with `git archive` and put first on the child's PYTHONPATH; the child
  records where `tapt` was imported from) and with this checkout (*after*);
- `Method.rank` on the first 1 or 2 shards (`scale_select.ShardPrefix`), segments of 1 or 4
  rows, by this checkout: *whole* (one score per sentence, then `by_sentence_scores`, as every
  budgeted selection did before) against *streamed* (the budget's cut kept while the rows are
  scored), to show what grows with the rows.

Recorded in the child, around the selection only:

- `ru_maxrss`: `resource.getrusage(RUSAGE_SELF).ru_maxrss`, the process's peak resident set.
  It counts the pages of the memory-mapped embeddings the scan touched (file-backed, shared
  with the page cache: 768 bytes a row), the same in both;
- `anon`: the peak of `RssAnon` (/proc/self/status: the process's own memory, not the mapped
  files), sampled every millisecond, minus its value before the selection;
- `traced`: the peak of what `tracemalloc` traces during the selection (numpy arrays and
  Python objects; not torch's buffers, which here only cast 2,048 rows at a time);
- the selection's seconds and a digest of the selected segment ids and scores (before and
  after, whole and streamed, must select the same).

    nice -n 10 .venv/bin/python -m benchmarks.driver_memory --rows 2000000 --shards 2 \\
        --work .cache/driver-memory --before 9e17213 --out benchmarks/results/scale
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

from benchmarks.speed_encode import machine
from benchmarks.synthetic_index import Spec, blob_rows, centres, make_index

# internal: tapt's atomic writes (a temporary name, then a rename) of the results, reused; the
#   results' version stamps and times, as tapt's own files carry them
from tapt.util.files import atomic_write, write_json_atomic
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger("driver_memory")
MB = 1 << 20


def _anon_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


SAMPLER = "anon-peak-sampler"      # AnonPeak's thread


class AnonPeak:
    """The peak of RssAnon while the block runs (sampled every `interval` seconds), and the
    CPU seconds the sampling itself took (`cpu_s`, its thread's: part of the process's CPU
    that is not the measured work)."""

    def __init__(self, interval: float = 0.001) -> None:
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self.cpu_s = 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _anon_bytes())
            time.sleep(self.interval)
        self.cpu_s = time.thread_time()

    def __enter__(self) -> "AnonPeak":
        self.peak = _anon_bytes()
        self._thread = threading.Thread(target=self._run, daemon=True, name=SAMPLER)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _anon_bytes())


def segment_view(n: int, size: int):
    """Segments of `size` consecutive sentences (20 tokens a sentence)."""
    # internal: the segment view over the synthetic rows, made here for `Method.rank` (Index.select
    #   makes its own from the index's documents)
    from tapt.retriever.methods import SegmentView

    offsets = np.append(np.arange(0, n, size, dtype=np.int64), n)
    lengths = np.diff(offsets)
    return SegmentView(offsets, lengths, lengths * 20)


def _spec(args: argparse.Namespace) -> Spec:
    return Spec(rows=args.rows, shards=args.shards, dim=args.dim, clusters=args.clusters,
                noise=args.noise, seed=args.seed)


def one(args: argparse.Namespace) -> dict[str, Any]:
    """One selection in this process; what it measured."""
    import torch

    import tapt
    from tapt import Index

    torch.mv(torch.ones(4, 4), torch.ones(4))
    spec = _spec(args)
    rng = np.random.default_rng(args.seed + 1)
    task = blob_rows(rng, centres(spec), np.zeros(100, dtype=np.int64), spec.noise)
    if args.path in ("before", "after"):
        index = tapt.Index.open(args.work / "index")

        def select():
            sel = index.select("centroid", task=task, budget=args.budget)
            return sel.ids, sel.scores.astype(np.float32), index.n_sentences, len(sel)
    else:
        from benchmarks.scale_select import ShardPrefix
        from benchmarks.synthetic_index import Sentences
        from tapt.extend import RankingInputs

        # internal: methods run on prepared inputs below Index.select (many tasks over one corpus
        #   cache); budgets and document pooling applied to scores made here, below Index.select
        from tapt.retriever.methods import CorpusCache, get_method
        from tapt.retriever.methods.base import by_sentence_scores
        from tapt.retriever.ranking.budget import parse_budget

        index = Index(args.work / "index")
        part = index if args.prefix == len(index.shards) else ShardPrefix(index, args.prefix)
        view = segment_view(part.n_sentences, args.size)
        method = get_method(args.method)
        params = method.make_params({})
        texts = None
        if method.needs_text:    # 100 synthetic sentences of blob 0, as its rows are the task's
            texts, _ = Sentences(spec).make(np.random.default_rng(args.seed + 2),
                                            np.zeros(100, dtype=np.int64))
        ctx = RankingInputs(part, view, parse_budget(args.budget), 0, task, texts, CorpusCache(part))
        if args.path == "streamed":   # also above the share where `rank` would not stream
            # internal: the streamed cut forced through the methods' STREAM_SHARE, a threshold
            #   with no public setting
            from tapt.retriever.methods import segments

            segments.STREAM_SHARE = 1.0

        def select():
            if args.path == "whole":
                scores, info = method.sentence_scores(ctx, params)
                ranking = by_sentence_scores(view, scores, ctx.budget, dict(info))
            else:
                ranking = method.rank(ctx, params)
            return ranking.segments, ranking.scores, part.n_sentences, len(ranking.segments)

    if args.warm:      # a first selection builds the segment view the second one reuses
        select()
    before = {"ru_maxrss_before": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
              "anon_before": _anon_bytes()}
    tracemalloc.start()
    t0 = time.perf_counter()
    with AnonPeak() as anon:
        ids, scores, rows, selected = select()
    seconds = time.perf_counter() - t0
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    digest = hashlib.sha256(np.asarray(ids, np.int64).tobytes()
                            + np.asarray(scores, np.float32).tobytes()).hexdigest()
    return {"path": args.path, "method": args.method, "warm": args.warm,
            "code": str(Path(tapt.__file__).parent),
            "rows": int(rows),
            "segment_size": args.size, "budget": args.budget, "selected": int(selected),
            "seconds": round(seconds, 3), **before, "anon_peak": anon.peak, "traced_peak": traced,
            "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "digest": digest[:16]}


CELL_METHODS = "centroid,knn,classifier,fused,iforest"


def cell(args: argparse.Namespace) -> dict[str, Any]:
    """One method's selection on one synthetic index, in this fresh process: its RssAnon peak
    from before the index is opened to the end of the ranking."""
    import torch

    torch.mv(torch.ones(4, 4), torch.ones(4))
    import tapt
    from benchmarks.synthetic_index import Sentences
    from tapt import Index
    from tapt.extend import RankingInputs

    # internal: methods run on prepared inputs below Index.select (many tasks over one corpus
    #   cache); budgets and document pooling applied to scores made here, below Index.select
    from tapt.retriever.methods import CorpusCache, get_method
    from tapt.retriever.ranking.budget import parse_budget

    work = Path(args.cell_index)
    made = json.loads((work / "made.json").read_text())
    spec = Spec(**made["spec"])
    rng = np.random.default_rng(spec.seed + 1)
    task = blob_rows(rng, centres(spec), np.zeros(100, dtype=np.int64), spec.noise)
    texts, _ = Sentences(spec).make(np.random.default_rng(spec.seed + 2),
                                    np.zeros(100, dtype=np.int64))
    method = get_method(args.cell)
    params = method.make_params({})
    base = _anon_bytes()
    t0 = time.perf_counter()
    with AnonPeak() as anon:
        index = Index(work / "index")
        opened = _anon_bytes()
        corpus = CorpusCache(index)
        ctx = RankingInputs(index, corpus.view(None), parse_budget(args.cell_budget), 0, task,
                            texts if method.needs_text else None, corpus)
        ranking = method.rank(ctx, params)
    seconds = time.perf_counter() - t0
    digest = hashlib.sha256(np.asarray(ranking.segments, np.int64).tobytes()
                            + np.asarray(ranking.scores, np.float32).tobytes()).hexdigest()
    return {"method": args.cell, "rows": index.n_sentences, "tapt": str(Path(tapt.__file__).parent), "shards": len(index.shards),
            "budget": args.cell_budget, "selected": int(len(ranking.segments)),
            "peak_mb": round(anon.peak / MB, 1), "base_mb": round(base / MB, 1),
            "open_mb": round(opened / MB, 1), "seconds": round(seconds, 2),
            "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "faiss": index.manifest.get("faiss", {}).get("factory"),
            "spilled_mb": round(_spilled() / MB, 1), "digest": digest[:16]}


def _spilled() -> int:
    """Bytes the selection put on scratch files (`tapt.util.spill`; 0 with a revision's code
    from before it)."""
    try:
        # internal: tapt's own count of the bytes spilled to scratch files; no public call
        #   reports it
        from tapt.util.spill import spilled_total
    except ImportError:
        return 0
    return spilled_total()


def cells(args: argparse.Namespace) -> list[dict[str, Any]]:
    """`cell` for every index of `--indexes` and method of `--methods`, each in a fresh
    process, smallest index first."""
    codes: list[tuple[str, Path | None]] = [("after", None)]
    if args.cell_before:       # the same cells with a revision's code first
        codes.insert(0, ("before", _before_tree(args.cell_before, args.work.parent
                                                / (args.work.name + "-code"))))
    out = []
    for work in args.indexes.split(","):
        for method in args.methods.split(","):
            for code, tree in codes:
                env = dict(os.environ)
                if tree is not None:
                    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(Path.cwd())])
                run = subprocess.run([sys.executable, "-m", "benchmarks.driver_memory", "--cell",
                                      method, "--cell-index", work, "--cell-budget",
                                      args.cell_budget], capture_output=True, text=True, env=env)
                if run.returncode:
                    log.error("%s on %s failed:\n%s", method, work, run.stderr[-3000:])
                    out.append({"method": method, "index": work, "code": code, "error":
                                run.stderr.strip().splitlines()[-1] if run.stderr.strip()
                                else "?"})
                    continue
                got = json.loads(run.stdout.strip().splitlines()[-1])
                got["code"], got["index"] = code, work
                got["load_average"] = round(os.getloadavg()[0], 1)
                log.info("%s", got)
                out.append(got)
    return out


def _base_range(records: list[dict[str, Any]]) -> str:
    """The RssAnon after the imports, by code (a revision's and this checkout's differ by the
    modules they import)."""
    parts = []
    for code in ("after", "before"):
        values = [r["base_mb"] for r in records if r.get("code", "after") == code]
        if values:
            parts.append(f"{min(values):.0f}-{max(values):.0f} MB"
                         + (" with the revision's code" if code == "before" else ""))
    return ", ".join(parts)


def cells_markdown(report: dict[str, Any]) -> str:
    """The headline table (peak RssAnon per method and row count, and its growth) and, with
    `--cell-before`, the same cells with that revision's code."""
    records = [r for r in report["records"] if "peak_mb" in r]
    rows = sorted({r["rows"] for r in records})
    methods = [m for m in report["methods"] if any(r["method"] == m for r in records)]
    by = {(r.get("code", "after"), r["method"], r["rows"]): r for r in records}
    lines = [
        "## Measured: the driver's peak memory by method and corpus size",
        "",
        f"Measured {report['created']} on {report['machine'].get('cpu', '?')} "
        f"({report['machine'].get('cores')} cores, shared with other developers' work). Each "
        "index is a real tapt index of synthetic float16 rows in 384 dimensions, one sentence "
        "per document, 500,000 rows a shard (`benchmarks/synthetic_index.py`, seed 0; the FAISS "
        "index `index_choice` picks for 8G: IVF-PQ fast-scan); the "
        "task 100 fresh rows of blob 0 as embeddings, with 100 fresh synthetic sentences of "
        f"blob 0 as its text; budget {report['budget']}, sentence context, default parameters "
        "(knn: k 50, its union smaller than the budget here; iforest: 10x candidates "
        "pre-ranked by centroid). Every cell is one fresh process that imports tapt, opens the index and "
        "ranks once (`Method.rank`, what `Index.select` runs, its segment view built in the "
        "process).",
        "",
        "*peak*: the peak of the process's RssAnon (its own memory; the memory-mapped "
        "embeddings, codes, FAISS lists and lexical ids are not counted), sampled every ms, "
        "from before the index is opened to the end of the ranking, imports (torch, faiss) "
        "included; *base*: RssAnon after the imports ("
        + _base_range(records) + "); *growth*: peak at the largest size / "
        "peak at the smallest; *above base*: peak - base at each size; *scratch*: what the "
        "selection kept on scratch files instead (`tapt.util.spill`: its segment view and per-row "
        "scores from 16 MiB up, in the page cache while used, written back under memory pressure; "
        "counted in RssFile, not RssAnon, like the embeddings).",
        "",
        "| method | " + " | ".join(f"peak at {n / 1e6:g}M (MB)" for n in rows)
        + " | growth | above base (MB) | scratch (MB) | seconds |",
        "|---|" + "---:|" * len(rows) + "---:|---:|---:|---:|",
    ]
    for m in methods:
        got = [by.get(("after", m, n)) for n in rows]
        have = [g for g in got if g]
        if not have:
            continue
        peaks = [f"{g['peak_mb']:.0f}" if g else "–" for g in got]
        growth = (f"{have[-1]['peak_mb'] / have[0]['peak_mb']:.2f}x" if len(have) > 1 else "–")
        above = " / ".join(f"{g['peak_mb'] - g['base_mb']:.0f}" for g in have)
        secs = " / ".join(f"{g['seconds']:.0f}" for g in have)
        spilled = " / ".join(f"{g.get('spilled_mb', 0):.0f}" for g in have)
        lines.append(f"| {m} | " + " | ".join(peaks)
                     + f" | {growth} | {above} | {spilled} | {secs} |")
    if any(r.get("code") == "before" for r in records):
        lines += ["", f"The same cells with the code of revision {report.get('before')} "
                  "(*before*) and of this checkout (*after*); the selections' digests compared:",
                  "", "| method | rows | peak before / after (MB) | above base before / after "
                  "(MB) | same selection |", "|---|---:|---:|---:|---|"]
        for m in methods:
            for n in rows:
                b, a = by.get(("before", m, n)), by.get(("after", m, n))
                if not (a and b):
                    continue
                lines.append(f"| {m} | {n:,} | {b['peak_mb']:.0f} / {a['peak_mb']:.0f} | "
                             f"{b['peak_mb'] - b['base_mb']:.0f} / "
                             f"{a['peak_mb'] - a['base_mb']:.0f} | "
                             f"{'yes' if a['digest'] == b['digest'] else 'NO'} |")
    for r in report["records"]:
        if "error" in r:
            lines.append(f"\n{r['method']} on {r['index']} ({r.get('code')}) failed: "
                         f"{r['error']}")
    runs = " ".join(report["argv"]).split(" + ")
    lines += ["", "Regenerate (one run per line, each after the one before):", ""]
    lines += ["    nice -n 10 .venv/bin/python -m benchmarks.driver_memory " + run for run in runs]
    return "\n".join(lines) + "\n"


def _before_tree(rev: str, where: Path) -> Path:
    """The repository at `rev`, importable as `tapt` from the returned directory."""
    root = where / rev
    if not (root / "tapt" / "api.py").is_file():
        (root / "tapt").mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root / "tapt")], input=archive, check=True)
    return root


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=2000)
    parser.add_argument("--noise", type=float, default=1.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", default="9e17213",
                        help="Git revision whose Index.select is the 'before'.")
    parser.add_argument("--budgets", default="1000sent,10000sent,100000sent")
    parser.add_argument("--path-budgets", default="10000sent,100000sent,0.2",
                        help="Budgets of the whole / streamed comparison.")
    parser.add_argument("--sizes", default="1,4", help="Segment sizes of that comparison.")
    parser.add_argument("--methods", default="centroid",
                        help="Methods of that comparison.")
    parser.add_argument("--no-select", dest="select", action="store_false",
                        help="Skip the Index.select before / after comparison.")
    parser.add_argument("--name", default="driver_memory",
                        help="Base name of the result files under --out.")
    parser.add_argument("--method", default="centroid", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, default=Path(".cache/driver-memory"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scale"))
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", choices=("before", "after", "whole", "streamed"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--budget", help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--indexes", help="Synthetic index work directories (comma-separated): "
                        "measure every --methods there (default methods: " + CELL_METHODS + ").")
    parser.add_argument("--cell-budget", default="10000sent",
                        help="The budget of the --indexes measurement.")
    parser.add_argument("--cell-before", default=None,
                        help="Also measure the --indexes cells with this git revision's code "
                        "(`code`: before), for a before / after table.")
    parser.add_argument("--keep-other-indexes", action="store_true",
                        help="Keep the records of indexes not in --indexes from the existing "
                        "report under --out (measure one size at a time).")
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    parser.add_argument("--cell-index", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args)))
        return
    if args.cell:
        print(json.dumps(cell(args)))
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.indexes:
        if args.methods == "centroid":
            args.methods = CELL_METHODS
        report = {"created": utc_now(), "machine": machine(), "versions": library_versions(),
                  "argv": sys.argv[1:] if argv is None else argv, "budget": args.cell_budget,
                  "before": args.cell_before,
                  "methods": args.methods.split(","), "records": cells(args)}
        earlier = args.out / f"{args.name}.json"
        if earlier.is_file():      # the older before/after comparison, kept beside
            old = json.loads(earlier.read_text())
            if args.keep_other_indexes:     # and the cells of the indexes not measured now
                measured = set(args.indexes.split(","))
                kept = [r for r in old.get("records", []) if r.get("index") not in measured]
                report["records"] = kept + report["records"]
                report["argv"] = [*old.get("argv", []), "+", *report["argv"]]
            old = old.get("earlier", old)
            if old.get("select") is not None or old.get("paths"):
                report["earlier"] = {k: v for k, v in old.items() if k != "earlier"}
        args.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.out / f"{args.name}.json", report)
        text = cells_markdown(report)
        if "earlier" in report:
            text += "\n" + markdown(report["earlier"])
        with atomic_write(args.out / f"{args.name}.md") as fh:
            fh.write(text)
        print(text)
        return
    made = make_index(args.work, _spec(args))
    old = _before_tree(args.before, args.work.parent / (args.work.name + "-code"))
    common = ["--rows", str(args.rows), "--shards", str(args.shards), "--dim", str(args.dim),
              "--clusters", str(args.clusters), "--noise", str(args.noise), "--seed",
              str(args.seed), "--work", str(args.work)]

    def run(path: str, budget: str, *extra: str) -> dict[str, Any]:
        env = dict(os.environ)
        if path == "before":
            env["PYTHONPATH"] = os.pathsep.join([str(old), str(Path.cwd())])
        out = subprocess.run([sys.executable, "-m", "benchmarks.driver_memory", "--one",
                              "--path", path, "--budget", budget, *extra, *common],
                             capture_output=True, text=True, check=True, env=env)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        log.info("%s", got)
        if path == "before" and not got["code"].startswith(str(old)):
            raise SystemExit(f"the 'before' run imported tapt from {got['code']}")
        return got

    def pair(a: str, b: str, budget: str, *extra: str) -> dict[str, Any]:
        got = {a: run(a, budget, *extra), b: run(b, budget, *extra)}
        if got[a]["digest"] != got[b]["digest"]:
            raise SystemExit(f"{a} and {b} selected differently at {budget} {extra}")
        return {"rows": got[a]["rows"], "budget": budget, **got,
                "load_average": round(os.getloadavg()[0], 1)}

    selects = [{**pair("before", "after", budget, *(["--warm"] if warm else [])), "warm": warm}
               for warm in (False, True) for budget in args.budgets.split(",")
               if args.select]
    paths = [{**pair("whole", "streamed", budget, "--prefix", str(k), "--size", str(size),
                     "--method", method),
              "segment_size": size, "method": method}
             for method in args.methods.split(",")
             for k in sorted({1, args.shards})
             for size in [int(x) for x in args.sizes.split(",")]
             for budget in args.path_budgets.split(",")]
    report = {"created": utc_now(), "machine": machine(), "versions": library_versions(),
              "argv": sys.argv[1:] if argv is None else argv, "synthetic": made["spec"],
              "before": args.before, "select": selects, "paths": paths}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / f"{args.name}.json", report)
    with atomic_write(args.out / f"{args.name}.md") as fh:
        fh.write(markdown(report))
    print(markdown(report))


def _mb(r: dict[str, Any], key: str) -> str:
    value = r[key + "_peak"] - (r[key + "_before"] if key == "anon" else 0)
    return f"{value / MB:.0f}"


def markdown(report: dict[str, Any]) -> str:
    spec = report["synthetic"]
    methods = sorted({r.get("method", "centroid") for r in report["paths"]})
    lines = [
        "## Measured: peak driver memory of budgeted selections",
        "",
        f"Measured {report['created']} on {report['machine'].get('cpu', '?')} "
        f"({report['machine'].get('cores')} cores, shared with other developers' work). The "
        f"index: {spec['rows']:,} synthetic float16 rows in {spec['dim']} dimensions, "
        f"{spec['shards']} shards, one sentence per document (`benchmarks/synthetic_index.py`, "
        f"seed {spec['seed']}); the task 100 fresh rows of blob 0, as embeddings"
        + (", and 100 fresh synthetic sentences of blob 0 for the methods that read text"
           if methods != ["centroid"] else "") + ". Every cell "
        "is one fresh process that opens the index and selects once "
        "(`benchmarks/driver_memory.py`); the two sides of each cell selected the same "
        "segments and scores (digest compared).",
        "",
        "*anon*: the peak of the process's own resident memory (RssAnon, sampled every ms) "
        "minus its value before the selection; *traced*: the peak of numpy's and Python's "
        "allocations during the selection (tracemalloc); *ru_maxrss*: the process's peak "
        "resident set, which also counts the pages of the memory-mapped embeddings the scan "
        "touched (768 bytes a row, the same on both sides).",
    ]
    if report["select"]:
        lines += [
            "",
            f"`Index.select(\"centroid\", ...)`, ranking and reading the chosen text included: "
            f"*before* = revision {report['before']} (whole arrays), *after* = the streamed cut. "
            "*first*: the process's first selection, which also builds the index's segment view "
            "(one entry per segment, kept for later selections); *again*: a second selection "
            "in the same process (the view reused, as in a served index):",
            "",
            "| rows | selection | budget | selected | anon before / after (MB) | "
            "traced before / after (MB) | ru_maxrss before / after (MB) | "
            "seconds before / after |",
            "|---:|---|---|---:|---:|---:|---:|---:|",
        ]
    for r in report["select"]:
        b, a = r["before"], r["after"]
        lines.append(f"| {r['rows']:,} | {'again' if r['warm'] else 'first'} | {r['budget']} | {a['selected']:,} | "
                     f"{_mb(b, 'anon')} / {_mb(a, 'anon')} | "
                     f"{_mb(b, 'traced')} / {_mb(a, 'traced')} | "
                     f"{b['ru_maxrss'] / MB:.0f} / {a['ru_maxrss'] / MB:.0f} | "
                     f"{b['seconds']:.2f} / {a['seconds']:.2f} |")
    sizes = " or ".join(str(x) for x in sorted({r["segment_size"] for r in report["paths"]}))
    lines += ["", f"The ranking alone (`Method.rank` on the first shard or both; segments of "
              f"{sizes} rows), *whole* = a score "
              "per sentence then `by_sentence_scores`, *streamed* = the cut kept while the "
              "scores are computed (the rows' scores block by block; Moore-Lewis's shard by "
              "shard, fused's z-score sum block by block; forced here for every budget; "
              "`Index.select` streams only a budget of at most 1/16 of the sentences, "
              "`methods.segments.STREAM_SHARE`), same code otherwise:", "",
              "| method | rows | segment size | budget | selected | anon whole / streamed (MB) | "
              "traced whole / streamed (MB) | seconds whole / streamed |",
              "|---|---:|---:|---|---:|---:|---:|---:|"]
    for r in report["paths"]:
        w, s = r["whole"], r["streamed"]
        lines.append(f"| {r.get('method', 'centroid')} | {r['rows']:,} | {r['segment_size']} | "
                     f"{r['budget']} | {s['selected']:,} | {_mb(w, 'anon')} / {_mb(s, 'anon')} | "
                     f"{_mb(w, 'traced')} / {_mb(s, 'traced')} | "
                     f"{w['seconds']:.2f} / {s['seconds']:.2f} |")
    runs = " ".join(report["argv"]).split(" + ")
    lines += ["", "Regenerate (one run per line, each after the one before):", ""]
    lines += ["    nice -n 10 .venv/bin/python -m benchmarks.driver_memory " + run for run in runs]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
