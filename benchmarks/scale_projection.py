"""The 10^8 / 10^9 / 10^10-sentence projection, computed from the measured per-row costs.

Nothing is run: each input is a per-row cost read from a committed JSON file under
`benchmarks/results/` (named beside it); each projected figure (p) is such a cost times the rows
(FAISS lists, shards, actors) under `ASSUME`, with its formula; (m) marks a figure measured at
that size. `--measure-index` first records a built index's bytes per row; driver-memory rows
of any size in `scale/driver_memory.json` (a 10M index's, say) join that fit.

    python -m benchmarks.scale_projection [--measure-index /work/benchcache/pool-index]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tapt import InputError

# internal: a build's own index-type rules (nlist, training rows, rescore factors, the
#   quantizer it takes) projected to 10^10 rows
from tapt.indexer.ann.index_choice import (
    HNSW_QUANTIZER_LISTS,
    QUANTIZER_EF,
    RESCORE_FACTORS,
    choose_index,
    ivf_nlist,
    ivf_quantizer,
    ivf_train_size,
    quantizer_ef,
)

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = (10**8, 10**9, 10**10)
DIM, GB = 384, 1e9
ASSUME = {
    "shard_rows": 2_000_000,       # --shard-size 2M: shards (and FAISS parts) of 2M sentences
    "actor_rows": 10_000_000,      # a serving actor holds 10M rows (what one process measured)
    "nodes": 64,                   # the larger cluster: 64 nodes of 16 cores and one GPU each
    "small_nodes": 8,              # the smaller one: 8 such nodes
    "node_cores": 16,
    "piece_bytes": 256 << 20,      # --piece-size 256M: the scan's and prepare's byte ranges
    "corpus_bytes_row": 150,       # a sentence in a .jsonl corpus (text, keys, quotes)
    "node_ram_gb": 128,            # like the lent H100/H200 machines
    "measured_cores": 2,           # the machine every CPU figure was taken on
    "segment_sentences": 15,       # the default segment size
    "doc_sentences": 20,           # sentences a document
}


def inputs(results: Path) -> dict[str, dict[str, Any]]:
    """Every per-row cost the projection uses: {name: {value, unit, source, note}}."""
    load = lambda rel: json.loads((results / rel).read_text())  # noqa: E731
    out: dict[str, dict[str, Any]] = {}

    def put(name: str, value: float, unit: str, source: str, note: str) -> None:
        out[name] = {"value": value, "unit": unit, "source": source, "note": note}

    sl, sel = "scale/select_latency.json", load("scale/select_latency.json")
    n10, sec = sel["synthetic"]["rows"], sel["index"]["seconds"]
    put("prepare_us_row_synthetic", sec["prepare"] / n10 * 1e6, "us/row", sl,
        f"prepare of the {n10:,}-row synthetic build (one process)")
    b = (gpu := load("gpu_build.json")["runs"]["4096"])["build"]
    put("prepare_us_row_real", (b["seconds"] - b["embed_seconds"] - b["faiss_seconds"])
        / gpu["counts"]["sentences"] * 1e6, "us/row", "gpu_build.json", "a real-text build's "
        "CPU stages (read, split, text store, assemble, checksums; one process, a Xeon)")
    put("embed_cpu_rows_s", load("speed_encode.json")["builds"]["onnx"]["embed_sentences_per_s"],
        "sentences/s", "speed_encode.json", "a build's embed stage, ONNX fp32, 2 cores")
    gf = "gpu_faiss_embed.json"
    if (results / gf).is_file():     # one H200: the embed stage end to end, IVF train + add
        g = load(gf)
        e, f = g["runs"]["embed"], g["runs"]["faiss"]
        put("embed_gpu_rows_s_low", e["local"]["sentences_per_second"], "sentences/s", gf,
            f"a build's embed stage in one process (the local executor), one H200, "
            f"{e['sentences']:,} sentences read from a text store to parts written")
        put("embed_gpu_rows_s_high", e["pipeline"]["sentences_per_second"], "sentences/s", gf,
            f"the embed stage split as the Ray executor splits it ({e['workers']} tokenising "
            f"processes, the model apart), one H200, without Ray, the same sentences")
        for r in f["runs"]:
            if not r["path"].startswith("torch on cuda"):
                continue
            lists = int(re.search(r"IVF(\d+)", r.get("factory", f["factory"])).group(1))
            trained = r.get("train_rows", f["train_rows"])
            put(f"gpu_add_us_row_{lists}", r["add_us_per_row"], "us/row", gf,
                f"the add of {f['rows']:,} rows at {lists:,} lists through torch on one H200 "
                "(the assignment on the GPU, the codes on the host's 16 cores)")
            put(f"gpu_train_ns_row_list_{lists}", r["train_s"] / (trained * lists) * 1e9,
                "ns/(training row x list)", gf, f"k-means of {trained:,} rows into {lists:,} "
                "lists through torch on one H200, and the codebooks on the host")
    else:
        put("embed_gpu_rows_s_low", b["sentences_per_second"], "sentences/s", "gpu_build.json",
            "a whole build's embed stage, one H200")
        put("embed_gpu_rows_s_high", load("ray/gpu_embed_pipeline_h100.json")["pipeline"][
            "sentences_per_second"], "sentences/s", "ray/gpu_embed_pipeline_h100.json",
            "the embed stage's split (12 tokenising processes), one H100, without Ray")
    fts = load("scale/faiss_threads.json")
    ft = next(r for r in fts["runs"] if r["index"] == "ivfpq" and r["threads"] == 2)
    lists = int(re.search(r"IVF(\d+)", ft["factory"]).group(1))
    c_train = ft["train_s"] / (ft["train_sample"] * lists)
    put("train_ns_row_list", c_train * 1e9, "ns/(training row x list)",
        "scale/faiss_threads.json", f"IVF-PQ training, {ft['factory']}, 2 threads")
    nl = ivf_nlist(n10)
    put("add_ns_row_list", (sec["train_and_index"] - c_train * ivf_train_size(n10, nl) * nl)
        / (n10 * nl) * 1e9, "ns/(row x list)", sl, f"the build's train and index "
        f"({sec['train_and_index']:.0f} s) less its training as above, over rows x {nl:,} "
        f"lists (faiss_threads.json's add: {ft['add_s'] / (fts['rows'] * lists) * 1e9:.1f})")
    us = sorted(r["after"]["truth_cpu_us_per_row"]
                for r in load("scale/calibration.json")["calibration_runs"])
    put("calibrate_cpu_us_row_low", us[0], "CPU us/row", "scale/calibration.json",
        "the exact top-100 of 200 queries, 3M rows")
    put("calibrate_cpu_us_row_high", us[-1], "CPU us/row", "scale/calibration.json", "1M rows")
    if (results / "scale/prepare_memory.json").is_file():
        pm = [r for r in load("scale/prepare_memory.json") if r["code"] == "after"]
        big = max(pm, key=lambda r: r["rows"])
        put("scan_us_row", big["scan_seconds"] / big["rows"] * 1e6, "us/row",
            "scale/prepare_memory.json", f"the scan (parse and count) of {big['rows']:,} "
            "synthetic JSON Lines sentences, one process")
    if (results / "scale/driver_build.json").is_file():
        db = sorted((r for r in load("scale/driver_build.json") if r["command"] == "build"
                     and (r.get("calibration") or {}).get("factors")),
                    key=lambda r: r["rows"])
        if len(db) > 1:   # a sweep task: a shard's part, every value of one factor
            (x0, y0), (x1, y1) = [(r["rows"] / r["shards"], r["calibration"]["sweep_seconds"]
                                   * ASSUME["measured_cores"]
                                   / (r["shards"] * len(r["calibration"]["factors"])))
                                  for r in (db[0], db[-1])]
            slope = (y1 - y0) / (x1 - x0)
            put("sweep_core_s_task", y0 + slope * (ASSUME["shard_rows"] - x0), "core s/task",
                "scale/driver_build.json", f"a sweep task (one shard, one candidate factor, "
                f"every nprobe): {y0:.2f} core s at {x0:,.0f} rows a shard, {y1:.2f} at "
                f"{x1:,.0f} (wall seconds x the 2 cores over shards x factors), linear in the "
                f"shard's rows, at {ASSUME['shard_rows']:,}")
    vu = load("scale/vocab_union.json")
    put("vocab_us_word", vu["write_union"]["buckets"]["seconds"] / vu["words_read"] * 1e6,
        "us/word read", "scale/vocab_union.json", "the union in 256 buckets on disk")
    syn = {k: v / n10 for k, v in sel["index"]["bytes"].items()}
    put("faiss_b_row", syn["index.faiss"], "B/row", sl, sel["index"]["factory"])
    cq = "scale/coarse_quantizer.json"
    if (results / cq).is_file():      # what a part and a quantizer take written, per size
        written, lists = load(cq)["written"], {m["lists"]: m for m in load(cq)["at_more_lists"]}
        for n in SIZES:
            per_list = ASSUME["shard_rows"] / ivf_nlist(n)
            part = min(written["parts"], key=lambda p: abs(p["rows_per_list"] - per_list))
            if abs(part["rows_per_list"] - per_list) <= 0.02 * per_list:
                put(f"faiss_part_b_row_{n}", part["bytes_per_row"], "B/row", cq,
                    f"a part written without its quantizer at {part['rows_per_list']} rows per "
                    f"list (2M-row shards, {ivf_nlist(n):,} lists)")
            if ivf_nlist(n) in lists:
                kind = ivf_quantizer(ivf_nlist(n))
                put(f"quantizer_b_{n}", lists[ivf_nlist(n)]["quantizer_bytes"][kind], "B", cq,
                    f"the one {kind} quantizer of {ivf_nlist(n):,} lists, written")
        report = load(cq)
        hnsw = report["variants"].get("hnsw")
        own = report["assignment"].get(str(quantizer_ef(report["lists"])))
        if hnsw and own:     # an add with the HNSW quantizer: codes + a graph walk per row
            put("add_encode_us_row", hnsw["add_us_per_row"] - own["us_per_row"], "us/row", cq,
                f"the {report['rows']:,}-row index's add with its HNSW quantizer "
                f"({hnsw['add_us_per_row']} us a row) less its assignment ({own['us_per_row']} "
                f"us a row at {report['lists']:,} lists)")
            points = [(report["lists"], own["us_per_row"])] + [
                (m["lists"], graph_walk(m)) for m in report["at_more_lists"]]
            for lists, us in points:
                put(f"hnsw_assign_us_row_{lists}", us, "us/row", cq, f"assignment through the "
                    f"HNSW graph at {lists:,} lists, efSearch {quantizer_ef(lists)}")
            flat = report["variants"].get("flat")
            if flat:     # every centroid compared: the add less its codes, per row and list
                put("add_ns_row_list", (flat["add_us_per_row"] - out["add_encode_us_row"]
                                        ["value"]) * 1e3 / report["lists"], "ns/(row x list)",
                    cq, f"the add of {report['rows']:,} rows with a flat quantizer "
                    f"({flat['add_us_per_row']} us a row at {report['lists']:,} lists) less the "
                    "codes' cost, over the lists")
    put("embed_b_row", sel["embedding_bytes_per_row"], "B/row", sl, "float16")
    put("codes_b_row", sel["code_bytes_per_row"], "B/row", sl, "int8")
    src, per, what = sl, syn, "the synthetic index"
    if (results / "scale/projection_index_bytes.json").is_file():
        rb = load("scale/projection_index_bytes.json")
        src, per = "scale/projection_index_bytes.json", rb["bytes_per_row"]
        what = f"a real-text index of {rb['rows']:,} sentences"
    for name, files, unit, note in (
            ("text_b_row", ("text.lmdb/data.mdb",), "B/row", "text store"),
            ("lexical_b_row", ("lexical.npy", "lexical_offsets.npy", "bigrams.npy", "vocab.npy"),
             "B/row", "lexical ids and the shard vocabulary"),
            ("vocab_words_row", ("vocab.npy",), "8 B words/row",
             "a shard's distinct words (fewer per row in larger shards)"),
            ("small_b_row", ("docs.npy", "dochash.npy", "tokens.npy"), "B/row",
             "document offsets and hashes, token counts")):
        put(name, sum(per.get(k, 0) for k in files) / (8 if "words" in unit else 1),
            unit.replace("8 B ", ""), src, f"{note}, {what}")
    fm = {n: load(f"scale/fit_memory-{n}.json") for n in ("after", "row-order-4m",
                                                             "row-order-16m")}
    put("fit_b_row_exact", fm["after"]["fit_bytes_per_row"], "B/row",
        "scale/fit_memory-after.json", "the classifier's fit up to 2^27 rows (at 16M)")
    lo, hi = fm["row-order-4m"], fm["row-order-16m"]
    put("fit_b_row_row_order", (hi["fit_peak_bytes"] - lo["fit_peak_bytes"])
        / (hi["rows"] - lo["rows"]), "B/row", "scale/fit_memory-row-order-{4m,16m}.json",
        "the fit above 2^27 rows (slope 4M -> 16M)")
    put("fuse_b_row", fm["after"]["fuse_bytes_per_row"], "B/row",
        "scale/fit_memory-after.json", "fused's z-score sum and ranking, whole arrays")
    w = sorted((p["rows"], p["whole"]["traced_peak"])
               for p in load("scale/driver_memory.json")["earlier"]["paths"]
               if p.get("segment_size") == 1 and p["budget"] == "10000sent")
    put("whole_rank_b_row", (w[-1][1] - w[0][1]) / (w[-1][0] - w[0][0]), "B/row",
        "scale/driver_memory.json (earlier)", "a whole-array ranking (centroid, traced, slope)")
    put("context_whole_b_row", load("scale/context_memory.json")["whole"]["bytes_per_row"],
        "B/row", "scale/context_memory.json", "context document, whole-array path")
    return out


def row(name: str, f: Callable[[int], Any], unit: str, how: str, measured: str = "",
        tag: Callable[[int], str] = lambda n: "projected") -> dict[str, Any]:
    """One table row: `f(rows)` (a number, a (low, high) range or a text) at every size."""
    return {"name": name, "how": how, "measured": measured,
            "cells": {str(n): {"value": f(n), "unit": unit, "tag": tag(n)} for n in SIZES}}


def build_rows(v: dict[str, float]) -> list[dict[str, Any]]:
    """Build hours per stage: one 2-core node (one task at a time) and clusters of
    `small_nodes` and `nodes` nodes. On a cluster a stage's tasks run one per core, as many at
    once as it has tasks (shards, or byte ranges of the corpus for the scan), the FAISS add one
    whole-node task per node, training one task on one node, the embed stage on every GPU."""
    a = ASSUME
    pr = (v["prepare_us_row_synthetic"], v["prepare_us_row_real"])
    gpu = (v["embed_gpu_rows_s_high"], v["embed_gpu_rows_s_low"])
    cal = (v["calibrate_cpu_us_row_low"], v["calibrate_cpu_us_row_high"])
    vocab = v["vocab_words_row"] * v["vocab_us_word"] / 1e6
    shards = lambda n: max(1, n // a["shard_rows"])                            # noqa: E731
    pieces = lambda n: max(1, n * a["corpus_bytes_row"] // a["piece_bytes"])   # noqa: E731
    pairs = lambda n: ivf_nlist(n) * ivf_train_size(n, ivf_nlist(n))   # noqa: E731 (rows x lists)
    train_s = lambda n: v["train_ns_row_list"] * 1e-9 * pairs(n)       # noqa: E731
    # a cluster trains and adds on its GPUs too where they were measured (the lower figure)
    gpu_train, gpu_add = bool(gpu_points(v, "train")), bool(gpu_points(v, "add"))
    # (stage, seconds on one 2-core node, seconds on a cluster of `nodes`, how)
    stages = [
        ("prepare + assemble", lambda n: [n * u / 1e6 for u in pr],
         lambda n, k: [n * u / 1e6 / min(k * a["node_cores"], shards(n)) for u in pr],
         f"rows x {pr[0]:.0f}-{pr[1]:.0f} us, one process; a cluster: one task per shard, "
         "as many at once as cores")]
    if "scan_us_row" in v:
        stages.insert(0, (
            "scan (parse and count the inputs)", lambda n: [n * v["scan_us_row"] / 1e6],
            lambda n, k: [n * v["scan_us_row"] / 1e6 / min(k * a["node_cores"], pieces(n))],
            f"rows x {v['scan_us_row']:.1f} us, one process; a cluster: one task per byte range "
            f"of {a['piece_bytes'] >> 20} MB ({a['corpus_bytes_row']} B a sentence)"))
    stages += [
        ("embed", lambda n: [n / v["embed_cpu_rows_s"]],
         lambda n, k: [n / r / k for r in gpu],
         f"rows / {v['embed_cpu_rows_s']:.0f} per s (CPU); a cluster: rows / "
         f"({gpu[1]:,.0f}-{gpu[0]:,.0f} per s x its GPUs)"),
        ("train (one task)", lambda n: [train_s(n)],
         lambda n, k: [train_s(n) * a["measured_cores"] / a["node_cores"]]
         + ([gpu_train_ns(v, ivf_nlist(n)) * 1e-9 * pairs(n)] if gpu_train else []),
         f"training rows x lists x {v['train_ns_row_list']:.1f} ns; a cluster: one node"
         + gpu_how(v, "train")),
        ("index (FAISS add)", lambda n: [add_seconds(v, n)],
         lambda n, k: [add_seconds(v, n) * a["measured_cores"]
                       / (min(k, shards(n)) * a["node_cores"])]
         + ([n * gpu_add_us(v, ivf_nlist(n)) * 1e-6 / min(k, shards(n))] if gpu_add else []),
         add_how(v) + "; a cluster: one whole-node task per node at a time" + gpu_how(v, "add")),
        ("calibrate (exact top-100)", lambda n: [n * u / 1e6 / a["measured_cores"] for u in cal],
         lambda n, k: [n * u / 1e6 / min(k * a["node_cores"], shards(n)) for u in cal],
         f"rows x {cal[0]}-{cal[1]} CPU us; a cluster: one task per shard")]
    if "sweep_core_s_task" in v:
        tasks = lambda n: shards(n) * len(RESCORE_FACTORS["ivfpq"])   # noqa: E731
        stages.append((
            "calibrate (the sweep, each part loaded once a factor)",
            lambda n: [tasks(n) * v["sweep_core_s_task"] / a["measured_cores"]],
            lambda n, k: [tasks(n) * v["sweep_core_s_task"]
                          / min(k * a["node_cores"], shards(n))],
            f"shards x {len(RESCORE_FACTORS['ivfpq'])} factors (at most) x "
            f"{v['sweep_core_s_task']:.1f} core s a task; a cluster: a factor's tasks at once"))
    stages.append(("publish (vocabulary union, one task)", lambda n: [n * vocab],
                   lambda n, k: [n * vocab],
                   f"rows x {v['vocab_words_row']:.2f} words x {v['vocab_us_word']:.2f} us (an "
                   "upper bound: larger shards repeat words)"))
    hours = lambda xs: (min(xs) / 3600, max(xs) / 3600)  # noqa: E731
    rows = [row(f"{s[0]}, one 2-core node", lambda n, s=s: hours(s[1](n)), "h", s[3])
            for s in stages]
    rows.append(row("total, one 2-core node", lambda n: tuple(
        sum(hours(s[1](n))[j] for s in stages) for j in (0, 1)), "h", "the sum"))
    for k in (a["small_nodes"], a["nodes"]):
        rows += [row(f"{s[0]}, {k} nodes", lambda n, s=s, k=k: hours(s[2](n, k)), "h", s[3])
                 for s in stages]
        rows.append(row(f"total, {k} nodes", lambda n, k=k: tuple(
            sum(hours(s[2](n, k))[j] for s in stages) for j in (0, 1)), "h", "the sum"))
    return rows + [row("GPU-hours to embed", lambda n: tuple(n / r / 3600 for r in gpu), "GPU-h",
                       f"rows / {gpu[1]:,.0f}-{gpu[0]:,.0f} per s")]


def graph_walk(measured: dict[str, Any]) -> float:
    """us a row of the HNSW assignment `coarse_quantizer.json` measured at a list count, at the
    efSearch a build takes there (`quantizer_ef`)."""
    ef = str(quantizer_ef(measured["lists"]))
    if ef in measured.get("efs", {}):
        return measured["efs"][ef]["us_per_row"]
    # a report from before the efSearch grew with the lists measured the graph at QUANTIZER_EF
    if measured.get("hnsw_ef", QUANTIZER_EF) != int(ef):
        raise InputError(f"coarse_quantizer.json has no assignment at {measured['lists']:,} "
                         f"lists and efSearch {ef}: run it again with --lists-only")
    return measured["hnsw_us_per_row"]


def hnsw_walks(v: dict[str, float]) -> list[tuple[int, float]]:
    """(lists, us a row) of the HNSW assignments `coarse_quantizer.json` measured, by lists."""
    return sorted((int(k.rsplit("_", 1)[1]), x) for k, x in v.items()
                  if k.startswith("hnsw_assign_us_row_"))


def add_seconds(v: dict[str, float], n: int) -> float:
    """The FAISS add of `n` rows on the measured machine: below HNSW_QUANTIZER_LISTS lists,
    rows x lists x the brute-force cost; from there, with an HNSW quantizer, rows x (the codes'
    cost + the graph walk at that many lists, as `coarse_quantizer.json` measured it there, or
    between the two nearest list counts it measured, linear in log2(lists))."""
    lists = ivf_nlist(n)
    walks = hnsw_walks(v)
    if ivf_quantizer(lists) != "hnsw" or "add_encode_us_row" not in v or not walks:
        return v["add_ns_row_list"] * 1e-9 * n * lists
    below = [w for w in walks if w[0] <= lists] or walks[:1]
    above = [w for w in walks if w[0] >= lists] or walks[-1:]
    (l0, a0), (l1, a1) = below[-1], above[0]
    walk = a0 if l1 == l0 else a0 + (a1 - a0) * np.log2(lists / l0) / np.log2(l1 / l0)
    return n * (v["add_encode_us_row"] + walk) * 1e-6


def gpu_points(v: dict[str, float], kind: str) -> list[tuple[int, float]]:
    """(lists, cost) of the IVF steps measured through torch on one GPU (`kind`: add or
    train), by lists."""
    prefix = {"add": "gpu_add_us_row_", "train": "gpu_train_ns_row_list_"}[kind]
    return sorted((int(k.rsplit("_", 1)[1]), x) for k, x in v.items() if k.startswith(prefix))


def gpu_add_us(v: dict[str, float], lists: int) -> float:
    """us a row of an add through torch on one GPU at `lists` lists: linear in the lists
    through the two list counts measured (the assignment compares every centroid; the codes'
    cost does not change), or the one measured."""
    points = gpu_points(v, "add")
    if len(points) == 1:
        return points[0][1]
    (l0, a0), (l1, a1) = points[0], points[-1]
    return a0 + (a1 - a0) * (lists - l0) / (l1 - l0)


def gpu_train_ns(v: dict[str, float], lists: int) -> float:
    """ns per training row and list of k-means through torch on one GPU: the list count
    measured nearest to `lists` (in log2); fewer lists use the GPU less well."""
    return min(gpu_points(v, "train"), key=lambda p: abs(np.log2(p[0] / lists)))[1]


def gpu_how(v: dict[str, float], kind: str) -> str:
    """The formula of a cluster's training (`kind` train) or add (add) on its GPUs, with the
    costs measured; "" where none was."""
    points = gpu_points(v, kind)
    unit, what = {"train": ("ns", "that node's GPU through torch (the lower figure): training "
                            "rows x lists x the cost measured at the nearest list count"),
                  "add": ("us", "the nodes' GPUs through torch (the lower figure): rows x the "
                          "cost linear in the lists between and beyond those measured, / the "
                          "nodes")}[kind]
    measured = ", ".join(f"{x:.2f} {unit} at {lists:,}" for lists, x in points)
    return f"; or on {what} ({measured} lists, one H200)" if points else ""


def add_how(v: dict[str, float]) -> str:
    walks = hnsw_walks(v)
    brute = f"rows x lists x {v['add_ns_row_list']:.1f} ns (every centroid compared)"
    if "add_encode_us_row" not in v or not walks:
        return brute
    measured = ", ".join(f"{x:.0f} us at {lists:,}" for lists, x in walks)
    return (f"below {HNSW_QUANTIZER_LISTS:,} lists {brute}; from there (HNSW quantizer) rows x "
            f"({v['add_encode_us_row']:.1f} us for the codes + the graph walk: {measured} "
            "lists, measured)")


def memory_rows(v: dict[str, float], results: Path) -> list[dict[str, Any]]:
    """The driver's peaks and per-row structures, a serving actor's, a build plan's."""
    a, r, rows = ASSUME, ASSUME["actor_rows"], []
    recs = [x for x in json.loads((results / "scale/driver_memory.json").read_text())["records"]
            if "peak_mb" in x and x.get("code", "after") != "before"]
    sizes = lambda m: {x["rows"] for x in recs if x["method"] == m}  # noqa: E731
    for method in [m for m in dict.fromkeys(x["method"] for x in recs) if len(sizes(m)) > 1]:
        pts = {x["rows"]: x["peak_mb"] for x in recs if x["method"] == method}
        mx, my = sum(pts) / len(pts), sum(pts.values()) / len(pts)
        slope = sum((x - mx) * (y - my) for x, y in pts.items()) / sum((x - mx) ** 2 for x in pts)
        top = max(pts)
        grow = max(slope, 0.0)      # a falling fit projects no growth, never a negative peak
        rows.append(row(f"driver peak, {method} (budget 10000sent)",
                        lambda n, top=top, grow=grow: pts.get(n, pts[top] + grow * (n - top))
                        / 1e3, "GB",
                        f"the {top / 1e6:.0f}M peak + {grow * 1e6:.1f} MB per 1M rows more (the "
                        f"least-squares slope over the sizes measured, {slope * 1e6:.1f} MB per 1M "
                        "rows, floored at 0: linear, an upper bound; one sentence a document, "
                        "the worst case)", f"{top / 1e6:.0f}M: {pts[top]:.0f} MB (m), "
                        "scale/driver_memory.json", lambda n: ("projected", "measured")[n in pts]))
    fit = lambda n: n * (v["fit_b_row_exact"] if n <= 2**27 else v["fit_b_row_row_order"])  # noqa
    rows += [
        row("segment view, 15-sentence segments (scratch file, not RAM)",
            lambda n: n * 16 / a["segment_sentences"] / GB,
            "GB", "16 B a segment (int64 offset, int32 sentences and tokens), on an unlinked "
            "scratch file from 16 MiB up (`tapt.util.spill`: page cache, not the driver's RAM)"),
        row("document offsets (document context only; scratch file)",
            lambda n: n * 8 / a["doc_sentences"] / GB, "GB", "8 B a document, on a scratch file "
            "from 16 MiB up"),
        row("classifier fit, per-row arrays (scratch files, not RAM)", lambda n: fit(n) / GB,
            "GB", f"{v['fit_b_row_exact']:.1f} B/row up to 2^27 rows, "
            f"{v['fit_b_row_row_order']:.1f} above (row-order draws), measured in memory before "
            "its scores and ranking keys went to scratch files (`tapt.util.spill`): an upper "
            "bound of their disk; the driver peaks above include the fit and do not grow"),
        row("fused, per-row arrays, streamed cut (scratch files, not RAM)",
            lambda n: (fit(n) + 4 * n) / GB, "GB", "the fit + 4 B/row (Moore-Lewis scores)"),
        row("fused, no budget or one above 1/16", lambda n: (v["fuse_b_row"] + 8) * n / GB, "GB",
            f"{v['fuse_b_row']:.0f} B/row (z-score sum, partition) + 8 B/row (both halves), "
            "measured before the scratch files: an upper bound of the RAM"),
        row("any method, whole-array ranking", lambda n: v["whole_rank_b_row"] * n / GB, "GB",
            f"{v['whole_rank_b_row']:.1f} B/row, measured before the scores and ranking keys "
            "went to scratch files: an upper bound of the RAM"),
        row("context document, whole-array path", lambda n: v["context_whole_b_row"] * n / GB,
            "GB", f"{v['context_whole_b_row']:.1f} B/row, measured before the scratch files: an "
            "upper bound of the RAM"),
    ]
    for what, key in (("float16 rows resident", "embed_b_row"), ("or int8 codes resident",
                      "codes_b_row"), ("FAISS part (read in: not mapped)", "faiss_b_row"),
                      ("lexical ids (mapped)", "lexical_b_row")):
        rows.append(row(f"actor of {r / 1e6:.0f}M rows: {what}", lambda n, k=key: r * v[k] / GB,
                        "GB", f"{r:,} x {v[key]:.0f} B, at every size"))
    rows.append(row("serving actors", lambda n: n / r, "actors", f"rows / {r:,}"))
    budget = a["node_ram_gb"] * GB / 2

    def auto(n: int) -> str:
        try:
            c = choose_index(n, DIM, int(budget), part_rows=min(n, a["shard_rows"]))
            return (f"{c.factory}, {c.estimated_bytes / GB:.0f} GB, "
                    f"{c.held_bytes / GB:.2f} GB a part")
        except InputError as exc:
            return "refused: needs " + re.search(r"needs about ([\d.]+ \w+)", exc.message)[1]
    rows.append(row(f"`auto` FAISS choice at a {budget / GB:.0f} GB budget (half of a "
                    f"{a['node_ram_gb']} GB node)", auto, "",
                    f"index_choice.choose_index: its largest part's estimated RAM (shards of "
                    f"{a['shard_rows']:,} rows) vs the budget"))
    rows.append(row("IVF training RAM (one task)",
                    lambda n: ivf_train_size(n, ivf_nlist(n)) * DIM * 8 / GB, "GB",
                    "training rows x 384 x 4 B x 2 copies (build_plan.train_bytes)"))
    return rows


def faiss_bytes(v: dict[str, float], n: int) -> float:
    """The FAISS files of an index of `n` rows: its parts at the bytes a row a part takes at
    that size's rows per list, and its one quantizer (`coarse_quantizer.json`); else the 10M
    index's bytes a row, at every size."""
    if f"faiss_part_b_row_{n}" in v:
        return n * v[f"faiss_part_b_row_{n}"] + v.get(f"quantizer_b_{n}", 0)
    return n * v["faiss_b_row"]


def disk_rows(i: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    v = {k: x["value"] for k, x in i.items()}
    parts = [("float16 embeddings", "embed_b_row"), ("int8 codes", "codes_b_row"),
             ("text store", "text_b_row"), ("lexical ids", "lexical_b_row"),
             ("offsets, hashes, token counts", "small_b_row")]
    total = sum(v[k] for _, k in parts)
    per_size = f"faiss_part_b_row_{SIZES[-1]}" in v
    faiss_how = ("parts: " + ", ".join(
        f"{v.get(f'faiss_part_b_row_{n}', v['faiss_b_row']):.0f}" for n in SIZES)
                 + " B/row at the sizes' rows per list (measured for 2M-row shards at 10^9 and "
                 "10^10; the 10M index's at 10^8), + one quantizer ("
                 + i[f"faiss_part_b_row_{SIZES[-1]}"]["source"] + ")" if per_size else
                 f"{v['faiss_b_row']:.0f} B/row ({i['faiss_b_row']['source']})")
    return [row(name, lambda n, b=b: n * b / 1e12, "TB", f"{b:.0f} B/row{src}")
            for name, b, src in [(name, v[k], f" ({i[k]['source']})") for name, k in parts]] + [
        row("FAISS parts and quantizer", lambda n: faiss_bytes(v, n) / 1e12, "TB", faiss_how),
        row("total with codes", lambda n: (n * total + faiss_bytes(v, n)) / 1e12, "TB", ""),
        row("total without codes",
            lambda n: (n * (total - v["codes_b_row"]) + faiss_bytes(v, n)) / 1e12, "TB", "")]


def classifier_seconds(parts: dict[str, float]) -> float:
    """The meaning classifier's fit, scoring and the fusion within a fused record (records
    from before the classifier was timed apart hold them as one figure)."""
    if "classifier_s" in parts:
        return round(parts["classifier_s"] + parts["fusion_s"], 3)
    return parts["classifier_and_fusion_s"]


def latency_rows(v: dict[str, float], results: Path) -> list[dict[str, Any]]:
    """Per task: one process on resident rows, and served by actors of `actor_rows`."""
    load = lambda rel: json.loads((results / rel).read_text())  # noqa: E731
    sl, ra = "scale/select_latency.json", ASSUME["actor_rows"]
    sel = load(sl)
    n10, k, sv = sel["synthetic"]["rows"], sel["knn"], load("scale/serve.json")["results"]
    cp = {(x["method"], x["seeds"]): x["overlap_codes_exact"]
          for x in load("quality/codes_precision.json")["summary"]}
    parts = {"exact": sel["fused"]["best_parts_s"], "codes": sel["fused_codes"]["best_parts_s"]}
    held = load("scale/served_bytes.json")
    biggest = max(r["rows"] for r in held["rows"])
    held_fit = {r["method"]: r["held"]["received"] for r in held["rows"]
                if r["rows"] == biggest and not r["params"]}
    per_actor = max(x["bytes_per_request"]["received_all_actors"]
                    / x["bytes_per_request"]["actors_asked"] for x in sv)
    # gathered: whether the method's fit asks a served index's actors for counts and rows
    tasks = [(f"centroid {x['budget']}", "centroid", False, {s: x[s]["best_s"] for s in parts})
             for x in sel["results"] if x["rows"] == n10]
    tasks += [("classifier (within fused: fit, scoring, fusion)", "classifier", True,
               {s: classifier_seconds(p) for s, p in parts.items()}),
              ("moore-lewis (within fused)", "-", False,
               {"exact": parts["exact"]["moore_lewis_s"]}),
              ("fused", "fused", True, {s: sel[key]["best_s"] for s, key in
                                        (("exact", "fused"), ("codes", "fused_codes"))})]
    rows = []
    for name, method, gathered, times in tasks:
        for scan, t in times.items():
            over = f"; overlap with exact {cp[(method, 2000)]} (real pool, 2,000 seeds)" \
                if scan == "codes" else ""
            rows.append(row(f"{name}, {scan}, one process", lambda n: t * n / n10, "s",
                            f"{t} s x rows / {n10:,} (rows resident){over}",
                            f"10M: {t} s (m), {sl}"))
            fit = held_fit.get(method, 0) - per_actor * held["actors"]
            rows.append(row(f"{name}, {scan}, served: bytes the driver receives",
                            lambda n, fit=fit: (fit + per_actor * n / ra) / 1e6, "MB",
                            f"{fit / 1e6:.1f} MB for the fit (its counts, moments, sampled rows "
                            f"and position search: scale/served_bytes.json at {biggest:,} rows, "
                            f"{held['actors']} actors, less their cuts) + {per_actor / 1e3:.0f} KB "
                            "per actor for the cut; the per-row scores stay in the actors",
                            f"{biggest / 1e6:g}M: {held_fit.get(method, 0) / 1e6:.1f} MB (m)")
                        if gathered else
                        row(f"{name}, {scan}, served (per actor; + the merge)",
                            lambda n: t * ra / n10, "s", f"each actor of {ra:,} rows as one "
                            "process; the merge of the actors' cuts not measured"))
    rows.append(row("knn (2,000 queries, k 100), one process",
                    lambda n: k["best_s"] / k["shards"] * n / ASSUME["shard_rows"], "s",
                    f"{k['best_s']} s / {k['shards']} parts x parts (nprobe and rows a list as "
                    "at 10M: the calibration decides them)", f"10M: {k['best_s']} s (m), {sl}"))
    rows.append(row("knn, served (per actor; + the merge)", lambda n: k["best_s"], "s",
                    f"each actor of {ra:,} rows as the one process at 10M; the driver merges "
                    "8 x k candidates per query per actor (not measured)"))
    got = max(x["bytes_per_request"]["received_all_actors"]
              / x["bytes_per_request"]["actors_asked"] for x in sv)
    rows.append(row("served: bytes the driver receives per streamed request (10000sent)",
                    lambda n: got * n / ra / 1e6, "MB", f"{got / 1e3:.0f} KB per actor "
                    "(scale/serve.json) x actors"))
    for key, name in (("start_cold", "serve start, cold"), ("first_request_s", "first request")):
        (x0, y0), (x1, y1) = sorted((x["rows"], x[key]["actors_s"] if key == "start_cold"
                                     else x[key]) for x in sv)[::len(sv) - 1]
        slope = (y1 - y0) / (x1 - x0)
        rows.append(row(f"{name}, an actor of {ra / 1e6:.0f}M rows", lambda n: y0 + slope
                        * (ra - x0), "s", f"{y0} s + {slope * 1e6:.2f} s per 1M rows (8 actors "
                        "on 2 cores at a load of ~18: an upper bound for one actor's own cores)",
                        f"{x1 / 1e6:.0f}M: {y1} s (m), scale/serve.json"))
    return rows + [row(f"bytes read per {scan} scan (rows not resident)",
                       lambda n: n * v[key] / GB, "GB", f"{v[key]:.0f} B/row")
                   for scan, key in (("exact", "embed_b_row"), ("codes", "codes_b_row"))]


def limits(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Where each size crosses a limit: a node's RAM, a day, the per-task goals, `auto`."""
    ram = ASSUME["node_ram_gb"]
    checks = [("driver, budgeted selection (worst method and shape)", "driver peak", ram, "GB"),
              ("driver, a whole-array ranking", "any method", ram, "GB"),
              ("driver, fused served: bytes received a request", "fused, exact, served",
               ram * 1e3, "MB"),
              ("IVF training, one task on one 16-core node", "train (one task), 64", 24, "h"),
              ("index (FAISS add) on 8 nodes", "index (FAISS add), 8 nodes", 24, "h"),
              ("index (FAISS add) on 64 nodes", "index (FAISS add), 64 nodes", 24, "h"),
              ("centroid, one process", "centroid 10000sent, exact, one", 1, "s"),
              ("knn, one process", "knn (2,000", 3, "s"),
              ("fused, one process", "fused, exact, one", 30, "s"),
              ("float16 rows resident in one node's RAM", "float16", ram / 1e3, "TB"),
              ("`auto` FAISS choice, half a node's RAM", "`auto`", None, "")]
    every = [r for key in ("build", "memory", "disk", "latency") for r in report[key]]
    top = lambda x: max(x) if isinstance(x, (list, tuple)) else x  # noqa: E731
    over = lambda x, lim: x.startswith("refused") if isinstance(x, str) else x > lim  # noqa
    vals = lambda p, n: max(top(r["cells"][str(n)]["value"]) for r in every  # noqa: E731
                            if r["name"].startswith(p))
    return [{"what": what, "limit": lim, "unit": unit, "cells": {
        str(n): {"value": vals(p, n), "over": over(vals(p, n), lim)} for n in SIZES}}
        for what, p, lim, unit in checks if any(r["name"].startswith(p) for r in every)]


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:.2g}"


def fmt(c: dict[str, Any]) -> str:
    """A cell as text: its value or range, its unit, (m) or (p)."""
    val, unit, mark = c["value"], c["unit"], {"measured": "(m)", "projected": "(p)"}[c["tag"]]
    if isinstance(val, str):
        return f"{val} {mark}"
    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    for small, scale in (("min", 60), ("s", 60)):     # hours under 1 read better in min or s
        if unit in ("h", "min") and max(vals) < 1:
            vals, unit = [x * scale for x in vals], small
    return f"{'-'.join(dict.fromkeys(_num(x) for x in vals))} {unit} {mark}"


def markdown(report: dict[str, Any]) -> str:
    heads = " | ".join(f"10^{len(str(n)) - 1}" for n in SIZES)
    out = ["### All projected figures (computed)", "",
           "Computed by `python -m benchmarks.scale_projection` from the committed measurements "
           "(nothing run). (m): measured at that size; (p): projected, a measured per-row cost "
           "times the rows, as the *how* column says. Assumptions: "
           + ", ".join(f"{k} {v:,}" for k, v in ASSUME.items()) + ".", "",
           "#### Measured inputs", "", "| input | value | source | what |", "|---|---:|---|---|"]
    out += [f"| {k} | {x['value']:,.4g} {x['unit']} | {x['source']} | {x['note']} |"
            for k, x in report["inputs"].items()]
    for title, key in (("Build hours per stage", "build"), ("Memory", "memory"),
                       ("Disk", "disk"), ("Per-task latency", "latency")):
        out += ["", f"#### {title}", "", f"| | measured | {heads} | how |",
                "|---|---|" + "---:|" * len(SIZES) + "---|"]
        out += [f"| {r['name']} | {r['measured'] or '-'} | "
                + " | ".join(fmt(r["cells"][str(n)]) for n in SIZES) + f" | {r['how']} |"
                for r in report[key]]
    out += ["", "#### Limits reached (projected)", "", f"| what | limit | {heads} |",
            "|---|---:|" + "---:|" * len(SIZES)]
    for lim in report["limits"]:
        cells = [("**over**: " if c["over"] else "within: ") + (
            c["value"] if isinstance(c["value"], str) else f"{_num(c['value'])} {lim['unit']}")
            for c in lim["cells"].values()]
        limit = "-" if lim["limit"] is None else f"{lim['limit']:g} {lim['unit']}"
        out.append(f"| {lim['what']} | {limit} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def measure_index(path: Path) -> dict[str, Any]:
    """Bytes per sentence of each file of a built index's shards (summed over the shards)."""
    rows = int(json.loads((path / "manifest.json").read_text())["counts"]["sentences"])
    sizes: dict[str, int] = {}
    for f in sorted((path / "shards").rglob("*")):
        if f.is_file() and f.name != "lock.mdb":
            rel = f"{f.parent.name}/{f.name}" if f.parent.name.endswith(".lmdb") else f.name
            sizes[rel] = sizes.get(rel, 0) + f.stat().st_size
    return {"index": str(path), "rows": rows, "bytes": sizes,
            "bytes_per_row": {k: round(b / rows, 2) for k, b in sizes.items()},
            "command": f"python -m benchmarks.scale_projection --measure-index {path}"}


def project(results: Path = RESULTS) -> dict[str, Any]:
    """The whole projection from the measurements under `results`."""
    i = inputs(results)
    v = {k: x["value"] for k, x in i.items()}
    report = {"sizes": list(SIZES), "assume": ASSUME, "inputs": i, "build": build_rows(v),
              "memory": memory_rows(v, results), "disk": disk_rows(i),
              "latency": latency_rows(v, results)}
    return {**report, "limits": limits(report)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="the measurements' folder")
    p.add_argument("--out", type=Path, help="folder of projection.{json,md} (RESULTS/scale)")
    p.add_argument("--measure-index", type=Path, help="record this index's bytes per row first")
    args = p.parse_args(argv)
    if args.measure_index:
        (args.results / "scale/projection_index_bytes.json").write_text(
            json.dumps(measure_index(args.measure_index), indent=1) + "\n")
    report = project(args.results)
    out = args.out or args.results / "scale"
    out.mkdir(parents=True, exist_ok=True)
    (out / "projection.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "projection.md").write_text(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
