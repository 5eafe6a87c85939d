"""Selection latency on a large sharded index: centroid (exact float16 scan vs `scan="codes"`),
knn and fused, each the registered method itself on a real tapt index of synthetic rows.

The rows are synthetic (no encoder could embed 10M sentences on this machine in a session): a
seeded mixture of `--clusters` Gaussian blobs on the unit sphere in `--dim` dimensions (each row
= its cluster's random unit centre + isotropic noise of norm ~`--noise`, renormalised), each
with a seeded synthetic sentence (Zipf-distributed made-up words, a share of them from its
cluster's topic words). `benchmarks.synthetic_index` builds them into a real index with tapt's
own build stages, the embed stage replaced by the rows: prepare (text store, lexical ids), train
and index (the FAISS part `index_choice` picks for the row count and `--memory`, one coarse
quantizer trained on a seeded sample across shards; int8 codes as `--codes int8` stores them),
publish (the search calibration of `tapt index build`). Selections run `Method.rank` on a
`RankingInputs` over the opened `Index` (its shards seen as one), at sentence-level segments; what is
not timed: opening the index, its FAISS parts and lexical ids (checks, once per process), and
reading the selected text.

- centroid: the task is 100 fresh rows of cluster 0; measured on prefixes of the shards
  (`--sizes`); the codes selection is compared with the exact one (overlap of the selected
  rows).
- knn: `--knn-queries` fresh rows from `--knn-clusters` clusters, `k` = `--knn-k`, the index's
  calibrated nprobe, no budget (the whole union); recall@k of the index's search after rescoring
  against an exact brute-force top-k for a seeded subsample of `--recall-queries` queries, and
  the selection for that subsample compared with the selection from the exact top-k.
- fused: `--fused-task` fresh rows of one cluster with their sentences as the task texts, a
  budget of half the cluster's corpus rows (`--fused-budget`); Moore-Lewis reads the stored
  lexical ids. Its time is split into Moore-Lewis, the meaning classifier, the wording
  classifier (its fit on the first two's ranking and its scores), the fusion and the ranking; the
  precision of the selection against the task's cluster is a sanity check. With `--pool-index`
  (a real-text index of a labelled pool, such as the 187,168-sentence multi-domain pool) and
  `--pool-seeds`, fused is also timed there per domain at `--pool-seed-sizes` seeds, at the
  oracle budget (the domain's sentences), with its precision.

`--before` takes the report of the same command run with an earlier revision of tapt
(`--before-revision`), minutes apart on the same machine: its fused records are kept beside
the new ones, labelled with that revision.

Each configuration runs `--repeats` times; the first run finds data partly evicted from the
page cache by other work on the machine, so both the first and the best time are reported.

    nice -n 10 .venv/bin/python -m benchmarks.scale_select --rows 10000000 --shards 10 \\
        --work .cache/scale10m --out benchmarks/results/scale

builds a 10M-row index of about 17 GB under `--work` first (skipped when it exists; see
docs/scale.md for the build's time), then measures centroid, knn and fused (`--methods`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.speed_encode import machine
from benchmarks.synthetic_index import Sentences, Spec, blob_rows, centres, make_index
from tapt import Index
from tapt.extend import RankingInputs

# internal: knn's recall against an exact brute-force search of the same rows
from tapt.indexer.ann.ann_recall import ground_truth, recall_at_k

# internal: the search setting the index's calibration chose, reported with the latency
from tapt.indexer.ann.faiss_index import search_setting

# internal: the index's first shards as a smaller index, each size timed on the same files
from tapt.indexer.store.shards import RowView

# internal: each registered method timed itself, on a sentence view, the task given as rows
from tapt.retriever.methods import SegmentView, get_method

# internal: a task's memo that also times each intermediate result, to split a method's time
from tapt.retriever.methods.base import Memo

# internal: the budget as the methods take it
from tapt.retriever.ranking.budget import parse_budget

# internal: the selected rows, for the overlap of the exact and codes scans
from tapt.retriever.scoring.arrays import rows_of_segments

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger("scale_select")
METHODS = ("centroid", "knn", "fused")


class ShardPrefix:
    """The first shards of an index, as the centroid, classifier, Moore-Lewis and fused methods
    read an index: embeddings, codes, the codes' scale and the lexical ids (for latency and
    memory at fewer rows without building another index)."""

    def __init__(self, index: Index, shards: int) -> None:
        self.path = index.path
        self.embeddings = RowView([s.embeddings for s in index.shards[:shards]])
        self.codes = RowView([s.codes for s in index.shards[:shards]])
        self.manifest = {"codes": index.manifest["codes"]}
        self.n_sentences = len(self.embeddings)
        self._index, self._shards = index, shards

    @cached_property
    def lexicon(self):
        """The first shards' stored lexical ids (the corpus vocabulary of the whole index)."""
        # internal: the first shards' lexical ids, for fused on the smaller index
        from tapt.indexer.reading.lexical import Lexicon

        whole = self._index.lexicon
        return Lexicon(whole.shards[:self._shards], whole.row_offsets[:self._shards + 1],
                       whole.vocabulary)

    def lexicon_scores(self, score_shard):
        return self.lexicon.map_shards(score_shard)

    def score_rows(self, scorer):
        return Index.score_rows(self, scorer)

    def score_codes(self, scorer):
        return Index.score_codes(self, scorer)


def overlap(reference: np.ndarray, other: np.ndarray) -> float:
    """The share of `reference`'s selected ids that `other` selects too."""
    return len(np.intersect1d(reference, other)) / max(len(reference), 1)


def sentence_view(n: int) -> SegmentView:
    """Segments of one sentence each (20 tokens a sentence, for token budgets)."""
    return SegmentView(np.arange(n + 1, dtype=np.int64), np.ones(n, dtype=np.int64),
                       np.full(n, 20, dtype=np.int64))


def timed_select(index: Index | ShardPrefix, view: SegmentView, task: np.ndarray, budget: str,
                 params: dict[str, Any]) -> tuple[float, np.ndarray, dict[str, Any]]:
    method = get_method("centroid")
    ctx = RankingInputs(index, view, parse_budget(budget), 0, task)
    t0 = time.perf_counter()
    ranking = method.rank(ctx, method.make_params(params))
    return time.perf_counter() - t0, ranking.segments, ranking.info


def parts_of_a_selection(index: Index | ShardPrefix, view: SegmentView, task: np.ndarray,
                         budget: str, repeats: int) -> dict[str, Any]:
    """Best seconds of each step of a selection at the largest size: the scan of every row
    (float16 embeddings, int8 codes) and the global ranking and cut of the sentence scores."""
    # internal: a selection's steps timed apart: each scan, then the ranking and cut
    from tapt.retriever.methods.base import by_sentence_scores
    from tapt.retriever.scoring import arrays

    query = arrays.centroid(task)
    scale = np.asarray(index.manifest["codes"]["scale"], dtype=np.float32)
    on_codes = arrays.Linear(query, cosine=True).for_codes(scale)
    steps = {"scan_float16_s": lambda: arrays.centroid_scores(index.embeddings, query),
             "scan_int8_codes_s": lambda: on_codes(index.codes)}
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


def measure_centroid(index: Index, args: argparse.Namespace, spec: Spec
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Exact vs codes centroid selections on prefixes of the shards, and where the time goes."""
    rng = np.random.default_rng(args.seed + 1)
    task = blob_rows(rng, centres(spec), np.zeros(100, dtype=np.int64), spec.noise)
    results = []
    sizes = [min(int(x), len(index.shards)) for x in args.sizes.split(",")]
    for k in sizes:
        part = index if k == len(index.shards) else ShardPrefix(index, k)
        n = part.n_sentences
        view = sentence_view(n)
        for budget in args.budgets.split(","):
            row: dict[str, Any] = {"rows": n, "shards": k, "budget": budget}
            picks = {}
            for name, params in (("exact", {}), ("codes", {"scan": "codes",
                                                           "rescore": args.rescore})):
                times = []
                for _ in range(args.repeats):
                    seconds, segments, info = timed_select(part, view, task, budget, params)
                    times.append(seconds)
                picks[name] = segments
                row[name] = {"first_s": round(times[0], 3), "best_s": round(min(times), 3),
                             **({"rescored": info.get("rescored_sentences")}
                                if name == "codes" else {})}
                log.info("centroid, %s rows, %s, %s: %s", f"{n:,}", budget, name, row[name])
            row["load_average"] = round(os.getloadavg()[0], 1)
            row["overlap"] = round(overlap(picks["exact"], picks["codes"]), 5)
            results.append(row)
    breakdown = []
    for k in sorted({sizes[0], sizes[-1]}):   # the smallest (in the page cache) and the largest
        part = index if k == len(index.shards) else ShardPrefix(index, k)
        breakdown.append(parts_of_a_selection(part, sentence_view(part.n_sentences), task,
                                              args.budgets.split(",")[-1], args.repeats))
        log.info("breakdown at %s rows: %s", f"{part.n_sentences:,}", breakdown[-1])
    return results, breakdown


class ExactSearch:
    """An index whose search is exact brute force (`ann_recall.ground_truth`): the reference a
    knn selection is compared with. Everything else is the index's own."""

    def __init__(self, index: Index) -> None:
        self.embeddings, self.n_sentences, self.dim = index.embeddings, index.n_sentences, \
            index.dim
        self.manifest = {"faiss": {"factory": "exact brute force"}}
        self.path = index.path
        self._last: tuple[bytes, int, tuple[np.ndarray, np.ndarray]] | None = None

    def search(self, queries: np.ndarray, k: int, nprobe: int | None = None,
               ef_search: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The exact top-k (the last answer is kept: a scan of every row per call)."""
        key = np.ascontiguousarray(queries, dtype=np.float32).tobytes()
        if self._last is None or self._last[:2] != (key, k):
            self._last = (key, k, ground_truth(self.embeddings, queries, k))
        return self._last[2]


def measure_knn(index: Index, args: argparse.Namespace, spec: Spec) -> dict[str, Any]:
    """Latency, recall after rescoring and agreement with exact search of the knn method."""
    rng = np.random.default_rng([args.seed, 2])
    clusters = np.sort(rng.choice(spec.clusters, size=min(args.knn_clusters, spec.clusters),
                                  replace=False))
    labels = clusters[np.arange(args.knn_queries) % len(clusters)]
    task = blob_rows(rng, centres(spec), labels, spec.noise)
    method = get_method("knn")
    params = method.make_params({"k": args.knn_k})
    view = sentence_view(index.n_sentences)
    runs = []
    for _ in range(args.repeats):
        ctx = RankingInputs(index, view, None, args.seed, task)
        t0 = time.perf_counter()
        ranking = method.rank(ctx, params)
        runs.append((time.perf_counter() - t0, ranking.info))
        log.info("knn, %s rows: %.3f s (search and rescoring %.3f s)", f"{index.n_sentences:,}",
                 runs[-1][0], ranking.info["search_seconds"])
    best, info = min(runs, key=lambda r: r[0])
    faiss_info = index.manifest.get("faiss", {})
    kind, param, value = search_setting(faiss_info, index.n_sentences, index.dim)
    sub = np.sort(rng.choice(len(task), size=min(args.recall_queries, len(task)),
                             replace=False))
    t0 = time.perf_counter()
    reference = ExactSearch(index)
    _, truth = reference.search(task[sub], params.k)
    exact_s = time.perf_counter() - t0
    _, found = index.search(task[sub], params.k)
    recall = recall_at_k(found, truth)
    ours = method.rank(RankingInputs(index, view, None, args.seed, task[sub]), params).segments
    exact = method.rank(RankingInputs(reference, view, None, args.seed, task[sub]), params).segments
    out = {"rows": index.n_sentences, "shards": len(index.shards), "queries": len(task),
           "query_clusters": len(clusters), "k": params.k, "factory": faiss_info.get("factory"),
           "kind": kind, "search_param": param, "search_value": value,
           "rescore_factor": (faiss_info.get("rescore") or {}).get("factor"),
           "calibrated_recall": (faiss_info.get("search") or {}).get("recall"),
           "first_s": round(runs[0][0], 3), "best_s": round(best, 3),
           "best_search_and_rescore_s": info["search_seconds"],
           "union_sentences": info["union_sentences"],
           "recall_queries": len(sub), "recall_at_k": round(recall, 4),
           "exact_seconds_for_recall_queries": round(exact_s, 1),
           "selection_vs_exact": {"selected": int(len(ours)), "exact": int(len(exact)),
                                  "overlap": round(overlap(exact, ours), 5),
                                  "same_order": bool(np.array_equal(ours, exact))},
           "load_average": round(os.getloadavg()[0], 1)}
    log.info("knn: %s", out)
    return out


class TimedMemo(Memo):
    """A task's memo that also keeps the seconds each intermediate result took to compute
    (Moore-Lewis's scores, the fused scores), to split a method's time."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[Any, float] = {}

    def get(self, key: Any, compute):
        def timed():
            t0 = time.perf_counter()
            value = compute()
            self.seconds[key] = time.perf_counter() - t0
            return value

        return super().get(key, timed)


class SecondsIn:
    """Within: the seconds spent in `owner.name` (a module's function or an object's method,
    wrapped in place for the block and restored after it), summed."""

    def __init__(self, owner: Any, name: str) -> None:
        self.owner, self.name, self.seconds = owner, name, 0.0

    def __enter__(self) -> "SecondsIn":
        self._own = vars(self.owner).get(self.name)     # None: a method of the object's class
        original = getattr(self.owner, self.name)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0

        setattr(self.owner, self.name, timed)
        return self

    def __exit__(self, *exc) -> None:
        if self._own is None:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self._own)


def fused_parts(parts: dict[str, float]) -> list[str]:
    """A fused record's split as table cells: Moore-Lewis, the meaning classifier, the wording
    classifier, the fusion, the ranking and cut. A record from before the classifier was
    timed apart has no `classifier_s`: its classifier cell holds the fusion too."""
    if "classifier_s" in parts:
        middle = [f"{parts['classifier_s']:.2f}", f"{parts['wording_s']:.2f}",
                  f"{parts['fusion_s']:.2f}"]
    else:
        middle = [f"{parts['classifier_and_fusion_s']:.2f} (with fusion)",
                  f"{parts.get('wording_s', 0):.2f}", "-"]
    return [f"{parts['moore_lewis_s']:.2f}", *middle, f"{parts['rank_and_cut_s']:.2f}"]


FUSED_PARTS_HEADER = ("Moore-Lewis (s) | meaning classifier (s) | wording classifier (s) | "
                      "fusion (s) | rank and cut (s)")


def timed_fused(index: Index, view: SegmentView, budget: str, seed: int, task: np.ndarray,
                texts: list[str], params) -> tuple[Any, dict[str, float]]:
    """One fused ranking and its time split into Moore-Lewis, the meaning classifier, the
    wording classifier, the fusion (what is left of the fused scores' time) and the ranking
    and cut; and the CPU seconds of this process's threads over it (`cpu_s`: what the
    machine's load does not stretch, unlike the wall time)."""
    memo = TimedMemo()
    ctx = RankingInputs(index, view, parse_budget(budget), seed, task, texts, memo=memo)
    # internal: fused's wording classifier timed apart, by wrapping it in its module
    from tapt.retriever.methods import fused as fused_module

    with SecondsIn(fused_module, "wording_scores") as wording, \
            SecondsIn(get_method("classifier"), "fit") as classifier:
        t0, c0 = time.perf_counter(), time.process_time()
        ranking = get_method("fused").rank(ctx, params)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
    ml = next(v for k, v in memo.seconds.items() if k[0] == "moore-lewis")
    fused = next(v for k, v in memo.seconds.items() if k[0] == "fused")
    return ranking, {"total_s": total, "cpu_s": cpu, "moore_lewis_s": ml,
                     "classifier_s": classifier.seconds, "wording_s": wording.seconds,
                     "fusion_s": fused - wording.seconds - ml - classifier.seconds,
                     "rank_and_cut_s": total - fused}


def measure_fused(index: Index, args: argparse.Namespace, spec: Spec, labels: np.ndarray,
                  scan: str = "exact") -> tuple[dict[str, Any], np.ndarray]:
    """Latency of fused (`scan` exact or codes), split into its parts, and its precision
    against the task's cluster; with the selected rows."""
    rng = np.random.default_rng([args.seed, 3])
    cluster = int(rng.integers(spec.clusters))
    task_labels = np.full(args.fused_task, cluster, dtype=np.int64)
    task = blob_rows(rng, centres(spec), task_labels, spec.noise)
    texts, _ = Sentences(spec).make(rng, task_labels)
    members = int((labels == cluster).sum())
    budget = args.fused_budget or f"{max(1, members // 2)}sent"
    method = get_method("fused")
    params = method.make_params({"scan": scan})
    view = sentence_view(index.n_sentences)
    runs = []
    for _ in range(args.repeats):
        ranking, parts = timed_fused(index, view, budget, args.seed, task, texts, params)
        runs.append(parts)
        log.info("fused, %s rows: %s", f"{index.n_sentences:,}",
                 {k: round(v, 3) for k, v in runs[-1].items()})
    rows = rows_of_segments(view.offsets, ranking.segments)
    best = min(runs, key=lambda r: r["total_s"])
    out = {"scan": scan, "rows": index.n_sentences, "shards": len(index.shards),
           "task_rows": len(task),
           "cluster": cluster, "cluster_rows": members, "budget": budget,
           "first_s": round(runs[0]["total_s"], 3), "best_s": round(best["total_s"], 3),
           "best_cpu_s": round(min(r["cpu_s"] for r in runs), 3),
           "best_parts_s": {k: round(v, 3) for k, v in best.items()
                            if k not in ("total_s", "cpu_s")},
           "selected_sentences": int(len(rows)),
           "precision": round(float((labels[rows] == cluster).mean()) if len(rows) else 0.0, 4),
           "classifier_rounds": len(ranking.info.get("rounds", [])),
           "load_average": round(os.getloadavg()[0], 1)}
    log.info("fused, scan %s: %s", scan, out)
    return out, rows


def measure_fused_pool(args: argparse.Namespace) -> dict[str, Any]:
    """fused on a real-text labelled pool, per domain and seed count: the task is the domain's
    seed subset (`labelled_pool.seed_subset`, repeat 0), embedded by the index's model; the
    budget is the oracle's (the domain's sentences); sentence context."""
    # internal: the benchmark's seed sets and subsets and the pool's labels, as bench recall
    # reads them (the public bench_recall runs the whole grid, not one timed task)
    from tapt.bench.labelled_pool import read_seed_sets, seed_subset
    from tapt.retriever.evaluation.oracle import sentence_labels

    index = Index(args.pool_index)
    index.lexicon  # noqa: B018 - opened (and checked) before timing
    labels = sentence_labels(index, "domain", progress=False)
    encoder = index.load_encoder()
    params = get_method("fused").make_params({})
    view = sentence_view(index.n_sentences)
    rows = []
    for seeds in read_seed_sets(args.pool_seeds):
        members = int((labels == seeds.domain).sum())
        for size in [int(s) for s in args.pool_seed_sizes.split(",")]:
            subset = seed_subset(len(seeds.texts), size, 0)
            texts = [seeds.texts[i] for i in subset]
            task = encoder.encode(texts)
            runs = []
            for _ in range(args.repeats):
                ranking, parts = timed_fused(index, view, f"{members}sent", 0, task, texts,
                                             params)
                runs.append(parts)
            chosen = rows_of_segments(view.offsets, ranking.segments)
            best = min(runs, key=lambda r: r["total_s"])
            rows.append({"domain": seeds.domain, "seeds": len(subset), "budget": members,
                         "first_s": round(runs[0]["total_s"], 3),
                         "best_s": round(best["total_s"], 3),
                         "best_cpu_s": round(min(r["cpu_s"] for r in runs), 3),
                         "best_parts_s": {k: round(v, 3) for k, v in best.items()
                                          if k not in ("total_s", "cpu_s")},
                         "precision": round(float((labels[chosen] == seeds.domain).mean()), 4),
                         "load_average": round(os.getloadavg()[0], 1)})
            log.info("fused, pool: %s", rows[-1])
    return {"created": utc_now(), "index": str(args.pool_index), "rows": index.n_sentences,
            "argv": sys.argv[1:], "runs": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=2000)
    parser.add_argument("--noise", type=float, default=1.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory", default=Spec.memory,
                        help="FAISS memory budget of the build (as `tapt index build --memory`).")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"Comma-separated, of {', '.join(METHODS)}.")
    parser.add_argument("--sizes", default="1,3,10",
                        help="Shard counts to measure centroid at (prefixes).")
    parser.add_argument("--budgets", default="10000sent,100000sent")
    parser.add_argument("--rescore", type=float, default=4.0)
    parser.add_argument("--knn-queries", type=int, default=2000)
    parser.add_argument("--knn-clusters", type=int, default=8)
    parser.add_argument("--knn-k", type=int, default=100)
    parser.add_argument("--recall-queries", type=int, default=200)
    parser.add_argument("--fused-task", type=int, default=1000)
    parser.add_argument("--fused-budget", default=None,
                        help="Default: half the task cluster's rows, in sentences.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pool-index", type=Path, default=None,
                        help="A real-text index of a labelled pool: fused is timed there too.")
    parser.add_argument("--pool-seeds", type=Path, default=None,
                        help="The pool's seed folder (<domain>.jsonl.gz).")
    parser.add_argument("--pool-seed-sizes", default="100,2000")
    parser.add_argument("--only-pool", action="store_true",
                        help="Measure fused on --pool-index only, into the existing report "
                             "(the synthetic index is neither built nor measured).")
    parser.add_argument("--before", type=Path, default=None,
                        help="select_latency.json of the same command with an earlier tapt: "
                             "its fused records are kept beside the new ones.")
    parser.add_argument("--before-revision", default=None,
                        help="The revision --before was measured with (shown with its rows).")
    parser.add_argument("--work", type=Path, default=Path(".cache/scale10m"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scale"))
    parser.add_argument("-q", "--quiet", action="store_true", help="No progress bars.")
    args = parser.parse_args(argv)
    if (args.before is None) != (args.before_revision is None):
        parser.error("--before and --before-revision go together")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown or not methods:
        parser.error(f"--methods: use some of {', '.join(METHODS)}")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    previous = args.out / "select_latency.json"
    if args.only_pool:
        if args.pool_index is None or args.pool_seeds is None:
            parser.error("--only-pool needs --pool-index and --pool-seeds")
        report = json.loads(previous.read_text())
        report["fused_pool"] = measure_fused_pool(args)
        write_reports(args.out, with_before(report, args))
        return
    spec = Spec(rows=args.rows, shards=args.shards, dim=args.dim, clusters=args.clusters,
                noise=args.noise, seed=args.seed, memory=args.memory)
    made = make_index(args.work, spec, progress=not args.quiet)
    index = Index(args.work / "index")
    index.faiss, index.lexicon  # noqa: B018 - opened (and checked) before timing
    import torch  # imported once before timing: the CLI's select imports it to embed the task

    torch.mv(torch.ones(4, 4), torch.ones(4))
    report: dict[str, Any] = {
        "created": utc_now(), "machine": machine(), "versions": library_versions(),
        "argv": sys.argv[1:] if argv is None else argv, "synthetic": made["spec"],
        "index": {k: made[k] for k in ("factory", "reason", "seconds", "bytes")},
        "embedding_bytes_per_row": int(index.embeddings.dtype.itemsize * args.dim),
        "code_bytes_per_row": args.dim, "methods": methods}
    keep_measured(report, json.loads(previous.read_text()) if previous.is_file() else {},
                  methods)
    if "centroid" in methods:
        report["results"], report["breakdown"] = measure_centroid(index, args, spec)
    if "knn" in methods:
        report["knn"] = measure_knn(index, args, spec)
    if "fused" in methods and args.pool_index is not None:
        report["fused_pool"] = measure_fused_pool(args)
    elif previous.is_file() and "fused_pool" in json.loads(previous.read_text()):
        report["fused_pool"] = json.loads(previous.read_text())["fused_pool"]   # kept
    if "fused" in methods:
        labels = np.load(args.work / "labels.npy")
        report["fused"], exact = measure_fused(index, args, spec, labels)
        report["fused_codes"], coded = measure_fused(index, args, spec, labels, scan="codes")
        report["fused_codes"]["overlap_with_exact"] = round(overlap(exact, coded), 4)
    write_reports(args.out, with_before(report, args))


SECTIONS = {"centroid": ("results", "breakdown"), "knn": ("knn",),
            "fused": ("fused", "fused_codes")}


def with_before(report: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """`report` with the fused records of `--before` as `<key>_before`, each labelled with
    `--before-revision`."""
    if args.before is None:
        return report
    old = json.loads(args.before.read_text())
    for key in ("fused", "fused_codes", "fused_pool"):
        if key in old:
            report[f"{key}_before"] = {**old[key], "revision": args.before_revision}
    return report


def keep_measured(report: dict[str, Any], old: dict[str, Any], methods: list[str]) -> None:
    """Into `report`, the sections of the methods not measured now from `old` (the report in
    `--out`), where it measured the same synthetic index (the same spec and build record);
    `report["measured"]` gives each method's measurement time."""
    same = old.get("synthetic") == report["synthetic"] and old.get("index") == report["index"]
    report["measured"] = {}
    for method, keys in SECTIONS.items():
        if method in methods:
            report["measured"][method] = report["created"]
        elif same and all(k in old for k in keys):
            report.update({k: old[k] for k in keys})
            report["measured"][method] = old.get("measured", {}).get(method, old["created"])
    report["methods"] = [m for m in METHODS if m in report["measured"]]


def write_reports(out: Path, report: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "select_latency.json", report)
    with atomic_write(out / "select_latency.md") as fh:
        fh.write(markdown(report))
    print(markdown(report))


def pool_table(p: dict[str, Any]) -> list[str]:
    """The markdown lines of one `measure_fused_pool` record (`revision`: the code measured,
    where it is not this script's)."""
    code = f" with tapt at revision {p['revision']}" if p.get("revision") else ""
    lines = [
        f"fused on a real-text index (measured {p['created']}{code}): {p['rows']:,} sentences "
        "of the labelled multi-domain pool (one sentence a record); the task: a domain's seed "
        "sentences (the seeded subset `tapt bench recall` uses, repeat 0), embedded by the "
        "index's model (not timed); the budget: the domain's sentences (the oracle's); "
        "sentence context. Best of the repeats, split as above; CPU: this process's threads.",
        "",
        f"| domain | seeds | budget | first / best (s) | CPU, best (s) | {FUSED_PARTS_HEADER} | "
        "precision | load average |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in p["runs"]:
        parts = r["best_parts_s"]
        lines.append(
            f"| {r['domain']} | {r['seeds']:,} | {r['budget']:,} | {r['first_s']:.2f} / "
            f"{r['best_s']:.2f} | {r['best_cpu_s']:.2f} | {' | '.join(fused_parts(parts))} | "
            f"{r['precision']:.4f} | {r['load_average']} |")
    means = {k: sum(r[k] for r in p["runs"]) / len(p["runs"])
             for k in ("best_s", "best_cpu_s", "precision")}
    lines += [f"| mean | | | {means['best_s']:.2f} | {means['best_cpu_s']:.2f} | | | | | | "
              f"{means['precision']:.4f} | |", ""]
    return lines


def measured_when(report: dict[str, Any]) -> str:
    """When the report's sections were measured: one time, or each method's."""
    times = report.get("measured") or {}
    if len(set(times.values())) <= 1:
        return report["created"]
    return "; ".join(f"{m} {t}" for m, t in times.items())


def markdown(report: dict[str, Any]) -> str:
    spec = report["synthetic"]
    built = report["index"]
    lines = [
        "## Measured: selection latency on a sharded index (synthetic rows)",
        "",
        f"Measured {measured_when(report)} on {report['machine'].get('cpu', '?')} "
        f"({report['machine'].get('cores')} cores, shared with other developers' test suites: "
        "the load average column is the machine's 1-minute load when each row finished); "
        f"{', '.join(report['methods'])}, "
        "sentence-level segments, one process (local executor); torch imported before timing.",
        "",
        f"Rows: {spec['rows']:,} synthetic unit vectors in {spec['dim']} dimensions, "
        f"{spec['clusters']:,} Gaussian blobs (noise {spec['noise']}), seed {spec['seed']}, "
        f"{spec['shards']} shards; float16 embeddings ({report['embedding_bytes_per_row']} "
        f"bytes a row) and int8 codes ({report['code_bytes_per_row']} bytes a row). Each row "
        f"has a synthetic sentence of {spec['min_words']}-{spec['max_words']} words: Zipf "
        f"({spec['zipf']}) over {spec['vocab']:,} made-up words, {spec['topic_share']:.0%} of "
        f"them from its blob's {spec['topic_words']} topic words. Built into a real index by "
        "tapt's build stages, the embed stage replaced by the rows "
        f"(`benchmarks/synthetic_index.py`): FAISS part {built['factory']} "
        f"({built['reason'].split(';')[0]}). Not timed: opening the index, its FAISS parts and "
        "lexical ids, reading the selected text.",
        "",
        "Regenerate:",
        "",
        "    nice -n 10 .venv/bin/python -m benchmarks.scale_select "
        + " ".join(report["argv"]),
        "",
    ]
    if "results" in report:
        lines += [
            "Centroid; the task: 100 fresh rows of blob 0.",
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
        lines.append("")
    if "knn" in report:
        k = report["knn"]
        sel = k["selection_vs_exact"]
        setting = (f"{k['search_param']} {k['search_value']}, {k['rescore_factor']} x k "
                   "candidates" if k["search_param"] else "exact")
        lines += [
            f"knn; the task: {k['queries']:,} fresh rows of {k['query_clusters']} blobs, "
            f"k = {k['k']}, no budget (the whole union); the search setting is the one the "
            "build calibrated. Recall@k: the index's search after exact rescoring against "
            f"brute force, for {k['recall_queries']} of the queries (seeded); the selection for "
            "those queries against the selection from the brute-force neighbours.",
            "",
            "| rows | shards | FAISS part | search setting | first / best (s) | "
            "search + rescoring in the best (s) | union sentences | recall@k | "
            "selection overlap with exact (same order) | load average |",
            "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|",
            f"| {k['rows']:,} | {k['shards']} | {k['factory']} | {setting} | "
            f"{k['first_s']:.2f} / {k['best_s']:.2f} | {k['best_search_and_rescore_s']:.2f} | "
            f"{k['union_sentences']:,} | {k['recall_at_k']:.4f} | "
            f"{sel['overlap']:.4f} ({'yes' if sel['same_order'] else 'no'}) | "
            f"{k['load_average']} |",
            "",
        ]
    if "fused" in report:
        f = report["fused"]
        lines += [
            "fused (the PU classifier, Moore-Lewis and the wording classifier); the task: "
            f"{f['task_rows']:,} fresh rows of blob {f['cluster']} with their synthetic sentences as the task texts "
            f"({f['cluster_rows']:,} corpus rows in that blob); precision = the share of "
            "selected sentences from that blob. `scan` codes: the classifier half fits and "
            "scores on the int8 codes, the best 4 x budget sentences rescored exactly.",
            "",
            f"| rows | shards | scan | budget | first / best (s) | CPU, best (s) | "
            f"{FUSED_PARTS_HEADER} | precision | overlap with exact | load average |",
            "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for key in ("fused", "fused_codes", "fused_before", "fused_codes_before"):
            f = report.get(key)
            if f is None:
                continue
            parts = f["best_parts_s"]
            cpu = f"{f['best_cpu_s']:.2f}" if "best_cpu_s" in f else ""
            # a record of other code (`revision`, measured the same way minutes apart) says so
            scan = f.get("scan", "exact") + (f", tapt at {f['revision']}" if "revision" in f
                                            else "")
            lines.append(
                f"| {f['rows']:,} | {f['shards']} | {scan} | {f['budget']} | "
                f"{f['first_s']:.2f} / {f['best_s']:.2f} | {cpu} | "
                f"{' | '.join(fused_parts(parts))} | {f['precision']:.4f} | "
                f"{f.get('overlap_with_exact', 1.0):.4f} | {f['load_average']} |")
        lines.append("")
    for key in ("fused_pool", "fused_pool_before"):
        if key in report:
            lines += pool_table(report[key])
    seconds = built["seconds"]
    gb = sum(built["bytes"].values()) / 1e9
    lines += [
        "The synthetic index's build (seconds, this machine): "
        + ", ".join(f"{k.replace('_', ' ')} {v:,.0f}" for k, v in seconds.items())
        + f"; {gb:.1f} GB on disk.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
