"""The coarse quantizer of an IVF build: every centroid compared (Flat, tapt's quantizer before)
against an HNSW graph over the centroids (IVF{n}_HNSW32, what the plan takes from
`HNSW_QUANTIZER_LISTS` lists on), on the rows of a built IVF index.

Both quantizers hold the index's own trained centroids, and both builds start from its trained
template (the same product quantizer), so only the coarse assignment differs:

    add       every shard's rows added to a copy of the template, as `build_part` adds them
              (FAISS's add: coarse assignment, then the 4-bit codes), timed part by part; the
              parts are searched, then dropped (nothing is written)
    recall    `CALIBRATION_QUERIES` seeded queries (`calibration_queries`, as the build's
              calibration draws them): recall@100 against brute force after tapt's exact
              rescoring, at the index's calibrated nprobe and rescore factor, and at twice that
              nprobe
    assigned  for a seeded sample of rows: the share the HNSW quantizer assigns to the list
              brute force assigns them to, at several efSearch (the add uses `quantizer_ef`)
    lists     the time to assign rows at more lists than the index has (65,536 and 262,144:
              the lists `ivf_nlist` takes at 10^9 and 10^10 rows), centroids being a seeded
              sample of rows, and the bytes each quantizer takes written (`quantizer.faiss`)
    written   the bytes of a part written as a build writes it (without its quantizer) when its
              rows per list are those of a 2M-row shard at 10^9 and 10^10 rows (30.5 and 7.6:
              a fast-scan list is padded to blocks of 32 codes, so a part's bytes per row
              depend on its rows per list): `--part-rows-per-list` x the index's lists rows,
              added to the template and written to a temporary file

    searched  (`--searched-lists`, into an existing report) at other list counts: a template
              trained with that many lists on the same shards' rows, both quantizers over its
              centroids, the shards added with each and searched at the report's share of
              lists probed; recall@100 after rescoring and the add's time; the HNSW one at
              each of `--searched-efs` (variants measured before on the same centroids kept)

    nice -n 10 .venv/bin/python -m benchmarks.coarse_quantizer --index .cache/scale10m/index \
        --out benchmarks/results/scale
    .venv/bin/python -m benchmarks.coarse_quantizer --index .cache/scale10m/index \
        --out benchmarks/results/scale --shards 2 --searched-lists 32768
    .venv/bin/python -m benchmarks.coarse_quantizer --index .cache/scale10m/index \
        --out benchmarks/results/scale --shards 2 --searched-lists 65536 --searched-efs 128 \
        --variants hnsw
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.measure import write_report
from tapt import Index

# internal: the IVF parts' quantizer, template, add and search are what is measured; no public
# call exposes them
from tapt.indexer.ann import coarse
from tapt.indexer.ann.ann_recall import (
    CALIBRATION_K,
    calibration_queries,
    ground_truth,
    recall_at_k,
)
from tapt.indexer.ann.faiss_index import (
    build_part,
    search_part,
    set_search_param,
    template_of,
    train_template,
    write_faiss,
)
from tapt.indexer.ann.index_choice import (
    HNSW_EF_CONSTRUCTION,
    QUANTIZER_EF,
    QUANTIZER_EF_LARGE,
    QUANTIZER_EF_LARGE_LISTS,
    QUANTIZER_M,
    choice_from_manifest,
    quantizer_ef,
    rescore_k,
)
from tapt.indexer.ann.rescore import exact_topk
from tapt.indexer.ann.topk_merge import merge_in_groups
from tapt.indexer.store.shards import RowView

# internal: the results' version stamps and times, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger("coarse_quantizer")


def quantizers(centroids: np.ndarray) -> dict[str, Any]:
    """A Flat and an HNSW32 quantizer over the same centroids, and the graph's build time."""
    import faiss

    flat = faiss.IndexFlatIP(centroids.shape[1])
    flat.add(centroids)
    graph = faiss.IndexHNSWFlat(centroids.shape[1], QUANTIZER_M, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    t0 = time.perf_counter()
    graph.add(centroids)
    graph.hnsw.efSearch = quantizer_ef(len(centroids))
    return {"flat": flat, "hnsw": graph, "graph_seconds": time.perf_counter() - t0}


def with_quantizer(template, quantizer):
    """A copy of an IVF template whose quantizer is `quantizer` (which it does not own)."""
    import faiss

    out = faiss.clone_index(template)
    coarse.attach(out, quantizer)
    return out


def add_and_search(index: Index, shards: list, rows, template, choice, queries: np.ndarray,
                   nprobes: list[int], factor: int) -> dict[str, Any]:
    """Every one of `shards`' parts built from `template` (timed), searched at each nprobe
    (candidates kept), dropped; then the candidates merged and rescored exactly against
    `rows` (those shards' rows)."""
    k = CALIBRATION_K
    width = rescore_k(k, "ivfpq", index.n_sentences, factor)
    found: dict[int, list] = {p: [] for p in nprobes}
    seconds = []
    for shard in shards:
        t0 = time.perf_counter()
        part = build_part(shard.embeddings, choice, template, shard.row_offset)
        seconds.append(time.perf_counter() - t0)
        log.info("shard %s: %d rows added in %.1f s", shard.name, shard.rows, seconds[-1])
        for p in nprobes:
            set_search_param(part, "nprobe", p)
            found[p].append(search_part(part, queries, width))
        del part
    out = {"add_seconds": round(sum(seconds), 1), "add_seconds_per_part": [round(s, 1)
                                                                            for s in seconds]}
    for p in nprobes:
        _, candidates = merge_in_groups(found[p], width)
        _, ids = exact_topk(rows, queries, candidates, k)
        out[f"candidates_nprobe_{p}"] = ids
    return out


def assignment_agreement(rows: np.ndarray, quantizer: dict[str, Any],
                         efs: list[int]) -> dict[str, float]:
    """Share of `rows` the HNSW quantizer assigns to their brute-force list, per efSearch."""
    _, exact = quantizer["flat"].search(rows, 1)
    out = {}
    for ef in efs:
        quantizer["hnsw"].hnsw.efSearch = ef
        t0 = time.perf_counter()
        _, approx = quantizer["hnsw"].search(rows, 1)
        out[str(ef)] = {"agreement": round(float(np.mean(approx[:, 0] == exact[:, 0])), 4),
                        "us_per_row": round((time.perf_counter() - t0) / len(rows) * 1e6, 2)}
    quantizer["hnsw"].hnsw.efSearch = quantizer_ef(quantizer["flat"].ntotal)
    return out


def assignment_at(lists: int, sample: np.ndarray, rows: np.ndarray,
                  seed: int, efs: list[int]) -> dict[str, Any]:
    """Per-row assignment time at `lists` centroids (a seeded sample of rows standing in for
    trained centroids): brute force, and the HNSW graph at the build's efSearch
    (`quantizer_ef`) and at each of `efs` (with the share of rows it assigns to their
    brute-force list); and the bytes each quantizer is written in."""
    rng = np.random.default_rng(seed)
    centroids = np.ascontiguousarray(sample[rng.choice(len(sample), lists, replace=False)])
    made = quantizers(centroids)
    timed, written = {}, {}
    for name in ("flat", "hnsw"):
        t0 = time.perf_counter()
        made[name].search(rows, 1)
        timed[name] = round((time.perf_counter() - t0) / len(rows) * 1e6, 2)
        written[name] = written_bytes(made[name])
    _, exact = made["flat"].search(rows, 1)
    _, approx = made["hnsw"].search(rows, 1)
    return {"lists": lists, "flat_us_per_row": timed["flat"], "hnsw_us_per_row": timed["hnsw"],
            "hnsw_ef": made["hnsw"].hnsw.efSearch,
            "hnsw_agreement": round(float(np.mean(exact[:, 0] == approx[:, 0])), 4),
            "graph_seconds": round(made["graph_seconds"], 1), "rows_timed": len(rows),
            "quantizer_bytes": written, "efs": assignment_agreement(rows, made, efs)}


def written_bytes(index, without_quantizer: bool = False) -> int:
    """The size of `index` written as tapt writes it (`write_faiss`), to a temporary file."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return write_faiss(index, Path(tmp) / "part.faiss", without_quantizer)


def part_bytes(index: Index, template, choice, per_list: float, lists: int) -> dict[str, Any]:
    """A part of `per_list` x `lists` rows (the index's first rows) written without its
    quantizer: its bytes, per row."""
    rows = min(index.n_sentences, int(round(per_list * lists)))
    part = build_part(index.embeddings[:rows], choice, template, 0)
    size = written_bytes(part, without_quantizer=True)
    return {"rows_per_list": per_list, "rows": rows, "bytes": size,
            "bytes_per_row": round(size / rows, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True, help="a built IVF index")
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--sample", type=int, default=200_000,
                        help="rows whose assignment is compared")
    parser.add_argument("--efs", default="16,32,64,128", help="efSearch values compared")
    parser.add_argument("--lists", default="65536,262144",
                        help="list counts whose per-row assignment time is measured")
    parser.add_argument("--timed-rows", type=int, default=20_000,
                        help="rows assigned per list count")
    parser.add_argument("--variants", default="flat,hnsw", help="quantizers whose add is timed")
    parser.add_argument("--part-rows-per-list", default="30.52,7.63",
                        help="rows per list of the parts written (2M-row shards at 10^9 and "
                             "10^10 rows: 2M / 65,536 and 2M / 262,144)")
    parser.add_argument("--shards", type=int, default=0,
                        help="Add, search and take the truth over the index's first N shards "
                             "only (0: all): brute force at 8,192 lists takes ~25 min a 10M add "
                             "on 2 cores.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--searched-lists", default="",
                        help="List counts at which both quantizers are compared on a searched "
                             "index: a template with that many lists trained on --train-per-list "
                             "rows a list of the shards' rows, the shards added with each "
                             "quantizer, recall at the index's share of lists probed; into the "
                             "report in --out (nothing else is measured again).")
    parser.add_argument("--searched-efs", default="",
                        help="efSearch values of the HNSW quantizer's adds with "
                             "--searched-lists, one add each (default: the build's own, "
                             "`quantizer_ef`); variants measured before at that list count "
                             "on the same template are kept beside them.")
    parser.add_argument("--train-per-list", type=int, default=8,
                        help="training rows a list for --searched-lists")
    parser.add_argument("--lists-only", action="store_true",
                        help="Measure the assignment at --lists only, into the report in --out "
                             "(the same index, shards and sample; nothing is added).")
    args = parser.parse_args(argv)
    if (args.lists_only or args.searched_lists) and args.out is None:
        parser.error("--lists-only and --searched-lists need --out (the report they update)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import faiss

    index = Index(args.index)
    recorded = index.manifest["faiss"]
    choice = choice_from_manifest(recorded, index.n_sentences, index.dim)
    if choice.kind != "ivfpq":
        raise SystemExit(f"{args.index} is not an IVF index ({choice.factory})")
    efs = [int(e) for e in args.efs.split(",")]
    if args.lists_only:
        lists_only(index, args, efs)
        return
    if args.searched_lists:
        searched_lists(index, choice, args)
        return
    part = index.faiss_part(0)
    ivf = coarse.ivf_of(part)
    centroids, lists = coarse.centroids(ivf.quantizer), int(ivf.nlist)
    template = template_of(part)
    del part, ivf
    made = quantizers(centroids)
    default = int(recorded["search"]["default"])
    factor = int(recorded["search"].get("rescore_factor") or 8)
    nprobes = [default, 2 * default]
    shards = index.shards[:args.shards] if args.shards else index.shards
    n_rows = sum(s.rows for s in shards)
    rows = index.embeddings if n_rows == index.n_sentences else RowView(
        [s.embeddings for s in shards])
    queries, _ = calibration_queries(rows, choice)
    t0 = time.perf_counter()
    _, truth = ground_truth(rows, queries, CALIBRATION_K)
    truth_seconds = time.perf_counter() - t0
    sample = sampled_rows(rows, n_rows, args)
    report: dict[str, Any] = {
        "created": utc_now(), "machine": f"{platform.processor() or platform.machine()}, "
                                         f"{os.cpu_count()} CPUs",
        "versions": library_versions(),
        "argv": sys.argv[1:] if argv is None else argv, "index": str(args.index),
        "rows": n_rows, "index_rows": index.n_sentences, "shards": len(shards),
        "index_shards": len(index.shards), "lists": lists,
        "factory": recorded["factory"], "nprobe": nprobes, "rescore_factor": factor,
        "queries": len(queries), "k": CALIBRATION_K, "threads": faiss.omp_get_max_threads(),
        "graph_seconds": round(made["graph_seconds"], 2), "truth_seconds": round(truth_seconds, 1),
        "assignment": assignment_agreement(sample, made, efs),
        "variants": {}}
    for name in args.variants.split(","):
        result = add_and_search(index, shards, rows, with_quantizer(template, made[name]),
                                choice, queries, nprobes, factor)
        entry = {"add_seconds": result["add_seconds"],
                 "add_seconds_per_part": result["add_seconds_per_part"],
                 "add_us_per_row": round(result["add_seconds"] / n_rows * 1e6, 2),
                 "load_after": round(os.getloadavg()[0], 1)}
        for p in nprobes:
            entry[f"recall@{CALIBRATION_K}_nprobe_{p}"] = round(
                recall_at_k(result[f"candidates_nprobe_{p}"], truth), 4)
        report["variants"][name] = entry
        log.info("%s: %s", name, json.dumps(entry))
    report["written"] = {
        "quantizer_bytes": {name: written_bytes(made[name]) for name in ("flat", "hnsw")},
        "parts": [part_bytes(index, with_quantizer(template, made["hnsw"]), choice, float(p),
                             lists) for p in args.part_rows_per_list.split(",") if p],
        "index_parts_bytes": int(sum((s.directory / "index.faiss").stat().st_size
                                     for s in index.shards)),
        "index_quantizer_bytes": int((recorded.get("quantizer") or {}).get("bytes") or 0)}
    report["at_more_lists"] = at_more_lists(sample, args, efs)
    report["load_end"] = round(os.getloadavg()[0], 1)
    write_report(args.out, "coarse_quantizer", report, markdown(report))


def searched_lists(index: Index, choice, args: argparse.Namespace) -> None:
    """`--searched-lists`: for each list count, a template trained with that many lists (the
    index's factory otherwise) on the report's shards, both quantizers over its centroids, the
    shards added with each and searched at the same share of lists as the index's calibrated
    nprobe (and twice it); recall@k after exact rescoring, into the report in `--out`."""
    import dataclasses
    import hashlib
    import re

    report, shards, rows = reported_rows(index, args)
    queries, _ = calibration_queries(rows, choice)
    _, truth = ground_truth(rows, queries, CALIBRATION_K)
    factor = report["rescore_factor"]
    found = []
    before = {e["lists"]: e for e in report.get("searched_at_more_lists", [])}
    for lists in (int(n) for n in args.searched_lists.split(",") if n):
        own = dataclasses.replace(choice, factory=re.sub(r"IVF\d+", f"IVF{lists}",
                                                         choice.factory),
                                  train_size=lists * args.train_per_list)
        template, train_seconds = train_template(rows, own)
        centroids = coarse.centroids(coarse.ivf_of(template).quantizer)
        made = quantizers(centroids)
        first = max(1, report["nprobe"][0] * lists // report["lists"])
        nprobes = [first, 2 * first]
        entry: dict[str, Any] = {"lists": lists, "created": utc_now(),
                                 "argv": sys.argv[1:], "factory": own.factory,
                                 "train_rows": own.train_size,
                                 "train_seconds": round(train_seconds, 1), "nprobe": nprobes,
                                 "centroids_sha256": hashlib.sha256(
                                     np.ascontiguousarray(centroids).tobytes()).hexdigest(),
                                 "variants": {}}
        for name, ef in searched_variants(args, lists):
            # the add walks the graph at the choice's efSearch (`coarse.configure`)
            walked = dataclasses.replace(own, params={**own.params,
                                                      "quantizer_efSearch": ef}) if ef else own
            result = add_and_search(index, shards, rows, with_quantizer(template, made[name]),
                                    walked, queries, nprobes, factor)
            entry["variants"][name if not ef else f"hnsw_ef{ef}"] = {
                **({"ef": ef} if ef else {}), "created": utc_now(),
                "add_us_per_row": round(result["add_seconds"] / len(rows) * 1e6, 2),
                **{f"recall@{CALIBRATION_K}_nprobe_{p}": round(
                    recall_at_k(result[f"candidates_nprobe_{p}"], truth), 4) for p in nprobes},
                "load_end": round(os.getloadavg()[0], 1)}
            log.info("%s lists, %s (efSearch %s): %s", lists, name, ef, entry["variants"])
        found.append(merged_entry(before.get(lists), entry))
    # list counts measured before (another run) are kept beside these
    kept = [e for e in before.values() if e["lists"] not in {f["lists"] for f in found}]
    report["searched_at_more_lists"] = sorted(kept + found, key=lambda e: e["lists"])
    write_report(args.out, "coarse_quantizer", report, markdown(report))


def searched_variants(args: argparse.Namespace, lists: int) -> list[tuple[str, int]]:
    """(quantizer, efSearch: 0 for the flat one) of each add `--searched-lists` measures: the
    `--variants`, the HNSW one at each of `--searched-efs` (default the build's
    `quantizer_ef`)."""
    efs = [int(e) for e in args.searched_efs.split(",") if e] or [quantizer_ef(lists)]
    out: list[tuple[str, int]] = []
    for name in args.variants.split(","):
        out += [("flat", 0)] if name == "flat" else [("hnsw", ef) for ef in efs]
    return out


def merged_entry(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """A list count's entry measured again: the variants measured now beside those of the
    earlier run that this one left out, when both trained the same template (the same
    centroids; an entry from before they were recorded: the same factory and training rows,
    the seeded training); otherwise the new entry alone. A variant keeps its own date and
    load."""
    same = (old is not None and (old["factory"], old["train_rows"]) == (new["factory"],
                                                                       new["train_rows"])
            and old.get("centroids_sha256", new["centroids_sha256"]) == new["centroids_sha256"])
    if not same:
        return new
    stamp = {"created": old["created"], "load_end": old.get("load_end")}
    variants = {}
    for name, v in old["variants"].items():
        if name == "hnsw" and "hnsw_ef" in old:     # an entry from before --searched-efs
            name, v = f"hnsw_ef{old['hnsw_ef']}", {"ef": old["hnsw_ef"], **v}
        variants[name] = {**stamp, **v}
    variants.update(new["variants"])
    earlier = [*old.get("earlier_runs", []),
               {k: old[k] for k in ("created", "argv", "train_seconds") if k in old}]
    return {**{k: v for k, v in new.items() if k != "variants"}, "variants": variants,
            "earlier_runs": earlier}


def reported_rows(index: Index, args: argparse.Namespace) -> tuple[dict[str, Any], list, Any]:
    """The report in `--out`, the shards it measured (`--shards` overrides) and their rows."""
    report = json.loads((args.out / "coarse_quantizer.json").read_text())
    shards = index.shards[:args.shards or report["shards"]]
    return report, shards, RowView([s.embeddings for s in shards])


def sampled_rows(rows, n_rows: int, args: argparse.Namespace) -> np.ndarray:
    """The seeded sample of `--sample` rows whose assignment is compared, as float32."""
    rng = np.random.default_rng(args.seed)
    picked = np.sort(rng.choice(n_rows, min(args.sample, n_rows), replace=False))
    return np.ascontiguousarray(rows[picked], dtype=np.float32)


def at_more_lists(sample: np.ndarray, args: argparse.Namespace,
                  efs: list[int]) -> list[dict[str, Any]]:
    """`assignment_at` each of `--lists` (at most the sample's rows)."""
    timed = sample[:args.timed_rows]
    return [assignment_at(int(n), sample, timed, args.seed, efs)
            for n in args.lists.split(",") if n and int(n) <= len(sample)]


def lists_only(index: Index, args: argparse.Namespace, efs: list[int]) -> None:
    """`--lists-only`: the report in `--out` with its assignment at more lists measured again,
    on the same shards' rows and seeded sample."""
    report, shards, rows = reported_rows(index, args)
    n_rows = sum(s.rows for s in shards)
    sample = sampled_rows(rows, n_rows, args)
    report["at_more_lists"] = at_more_lists(sample, args, efs)
    report["lists_measured"] = {"created": utc_now(), "argv": sys.argv[1:], "rows": n_rows,
                                "shards": len(shards), "load_end": round(os.getloadavg()[0], 1)}
    write_report(args.out, "coarse_quantizer", report, markdown(report))


def markdown(r: dict[str, Any]) -> str:
    head = (f"## Measured: the coarse quantizer of an IVF build (Flat vs HNSW{QUANTIZER_M})\n\n"
            f"Measured {r['created']} on {r['machine']} (shared with other developers' jobs: "
            "the load column is the machine's 1-minute load average when each add ended), "
            f"{r['threads']} FAISS threads. Index: {r['rows']:,} rows in {r['shards']} shards"
            + (f" (the first of the index's {r['index_shards']}, {r['index_rows']:,} rows)"
               if r.get("index_rows", r["rows"]) != r["rows"] else "")
            + f", `{r['factory']}`; both quantizers hold its {r['lists']:,} trained centroids and "
            "start from its trained template, so only the coarse assignment differs "
            f"(`benchmarks/coarse_quantizer.py`). Recall@{r['k']}: {r['queries']} calibration "
            f"queries against brute force, after exact rescoring of {r['rescore_factor']} x k "
            "candidates.\n\n")
    (p0, p1), k = r["nprobe"], r["k"]
    rows = ["| quantizer | add, every part (s) | add per row (us) | "
            f"recall@{k} at nprobe {p0} | at nprobe {p1} | load |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, v in r["variants"].items():
        label = "Flat (every centroid)" if name == "flat" else \
            f"HNSW{QUANTIZER_M} (efSearch {quantizer_ef(r['lists'])})"
        rows.append(f"| {label} | {v['add_seconds']:,.0f} | {v['add_us_per_row']} | "
                    f"{v[f'recall@{k}_nprobe_{p0}']:.4f} | "
                    f"{v[f'recall@{k}_nprobe_{p1}']:.4f} | {v['load_after']} |")
    agree = ["", f"Rows the HNSW graph assigns to their brute-force list ({r['lists']:,} lists; "
                 f"the graph over the centroids built in {r['graph_seconds']} s):", "",
             "| efSearch | same list | us per row |", "|---:|---:|---:|"]
    agree += [f"| {ef} | {v['agreement']:.4f} | {v['us_per_row']} |"
              for ef, v in r["assignment"].items()]
    sampled = r.get("lists_measured", {}).get("shards", r["shards"])
    more = ["", "Assignment alone at other list counts (centroids: a seeded sample of the rows of "
                f"the first {sampled} shards), and each quantizer written "
                "(`quantizer.faiss`):", "",
            "| lists | brute force (us per row) | HNSW (us per row, at efSearch) | same list | "
            "graph built (s) | Flat written | HNSW written |",
            "|---:|---:|---:|---:|---:|---:|---:|"]
    # a report from before the efSearch grew with the lists measured the graph at QUANTIZER_EF
    more += [f"| {m['lists']:,} | {m['flat_us_per_row']} | {m['hnsw_us_per_row']} "
             f"({m.get('hnsw_ef', QUANTIZER_EF)}) | "
             f"{m['hnsw_agreement']:.4f} | {m['graph_seconds']} | "
             f"{m['quantizer_bytes']['flat'] / 2**20:,.1f} MB | "
             f"{m['quantizer_bytes']['hnsw'] / 2**20:,.1f} MB |" for m in r["at_more_lists"]]
    if not r["at_more_lists"]:
        more = []
    tuned = [m for m in r["at_more_lists"] if "efs" in m]
    if tuned:
        when = r.get("lists_measured", {}).get("created", r["created"])
        more += ["", f"The HNSW graph's efSearch at those list counts (measured {when}; "
                     f"a build's is {QUANTIZER_EF} below {QUANTIZER_EF_LARGE_LISTS:,} lists, "
                     f"{QUANTIZER_EF_LARGE} from there): the share of rows it assigns to their "
                     "brute-force list, and its time:", "",
                 "| lists | efSearch | same list | us per row |", "|---:|---:|---:|---:|"]
        more += [f"| {m['lists']:,} | {ef} | {v['agreement']:.4f} | {v['us_per_row']} |"
                 for m in tuned for ef, v in m["efs"].items()]
    w = r["written"]
    whole = r.get("index_rows", r["rows"])
    written = ["", f"Written: this index's {r.get('index_shards', r['shards'])} parts "
                   f"{w['index_parts_bytes']:,} bytes ({w['index_parts_bytes'] / whole:.1f} a row) "
                   "and its one quantizer "
                   f"{w['index_quantizer_bytes']:,}. A part written without its quantizer, at "
                   "the rows per list of 2M-row shards at 10^9 and 10^10 rows:", "",
               "| rows per list | rows | bytes | bytes per row |", "|---:|---:|---:|---:|"]
    written += [f"| {p['rows_per_list']} | {p['rows']:,} | {p['bytes']:,} | "
                f"{p['bytes_per_row']} |" for p in w["parts"]]
    searched = []
    if r.get("searched_at_more_lists"):
        searched = ["", "On a searched index at more lists: a template trained with that many "
                        "lists on the same shards' rows (`--searched-lists`, its training rows "
                        "below), both quantizers over its centroids, every shard added with each "
                        f"and searched at the same share of lists as above; recall@{k} after "
                        "exact rescoring:", "",
                    "| lists | measured | training rows | quantizer | add per row (us) | nprobe | "
                    f"recall@{k} | at twice the nprobe |",
                    "|---:|---|---:|---|---:|---:|---:|---:|"]
        for e in r["searched_at_more_lists"]:
            q0, q1 = e["nprobe"]
            for name, v in e["variants"].items():
                ef = v.get("ef", e.get("hnsw_ef"))
                label = "Flat" if name == "flat" else f"HNSW{QUANTIZER_M}, efSearch {ef}"
                searched.append(f"| {e['lists']:,} | {v.get('created', e['created'])[:10]} | "
                                f"{e['train_rows']:,} | "
                                f"{label} | "
                                f"{v['add_us_per_row']} | {q0} | "
                                f"{v[f'recall@{k}_nprobe_{q0}']:.4f} | "
                                f"{v[f'recall@{k}_nprobe_{q1}']:.4f} |")
    return head + "\n".join(rows + agree + more + written + searched) + "\n"


if __name__ == "__main__":
    main()
