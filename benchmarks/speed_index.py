"""Per-task latency at 100k-1M sentences for each FAISS index type `auto` picks, no text embedded.

A test index of N rows is made from a real index's embeddings (default: the bundled sample,
indexed with `tapt index build data/sample/pool.jsonl.gz --out .cache/sample-index --no-split`
if neither it nor `.cache/demo/index` exists): row i is source row i mod S plus seeded Gaussian
noise (sigma per coordinate, default 0.04), L2-renormalised; token counts, documents and text
records are repeated likewise, so the result is a complete tapt index (it verifies). Then, each
step in a fresh process (so its peak RSS is its own):

    make       write the N-row index files (embeddings, tokens, documents, LMDB, checksums)
    exact      exact top-100 of the task queries, brute force over the memory-mapped embeddings
               in blocks (faiss.contrib knn_ground_truth): the exact-flat comparison and the
               ground truth for recall
    centroid   Domain-Cosine over all N rows (chunked matrix-vector product over the memory
               map), timed after one warm-up pass so that the rows come from the page cache
    build      the FAISS index of each --configs entry, REQUEST@MEMORY (default: what `auto`
               chooses within 8G and within 64M, and HNSW32 for comparison up to 500k rows;
               HNSW is skipped above, where auto never picks it): train, add, calibrate
    knn        2,000 task queries, k = 50: approximate search + exact rescoring at the recorded
               default, and recall@100 of the same path against the exact top-100
    iforest    the repository's Isolation Forest (retriever.learned.detectors.fit_detector)
               fitted on the task (+10% corpus rows), scoring the 100k best centroid candidates

    python benchmarks/speed_index.py --sizes 100000 1000000
    python -m benchmarks.speed_index --sizes 20000 --memory 8G --out /tmp/speed
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import logging
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

log = logging.getLogger("speed_index")

SOURCES = (REPO / ".cache" / "sample-index", REPO / ".cache" / "demo" / "index")
SAMPLE_POOL = REPO / "data" / "sample" / "pool.jsonl.gz"
DEFAULT_TASK = REPO / "data" / "sample" / "seeds" / "medical.jsonl.gz"
GOALS = {"centroid_s_at_1m": 0.3, "knn_s": 3.0, "knn_recall_at_100": 0.95, "iforest_s": 10.0}
_CHUNK = 65536


# ----------------------------------------------------------------------------- steps (subprocess)


def _peak_rss_mb() -> float:
    """VmHWM of this process: its peak resident set, memory-mapped file pages included."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _in_subprocess(func: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run one step in a fresh process (spawned: nothing inherited) and return its result."""
    ctx = multiprocessing.get_context("spawn")
    busy0, own0, t0 = _busy_cpu_seconds(), _own_cpu_seconds(), time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        result = pool.submit(func, *args).result()
    wall = time.perf_counter() - t0
    other = (_busy_cpu_seconds() - busy0) - (_own_cpu_seconds() - own0)
    # Share of the machine's CPU time that other processes used while this step ran.
    result["other_cpu_share"] = round(max(0.0, other) / (wall * (os.cpu_count() or 1)), 2)
    return result


def _busy_cpu_seconds() -> float:
    """Non-idle CPU seconds of the whole machine since boot (/proc/stat)."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except OSError:
        return 0.0
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    import resource

    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def step_make(source: str, out: str, n: int, noise: float, seed: int) -> dict[str, Any]:
    """Write an n-row index (all files but index.faiss) from the source index's rows + noise."""
    from tapt import Index

    # internal: the written rows' segment count, as the index's own splitter counts it
    from tapt.indexer.reading.splitter import segment_offsets

    # internal: a test index of N rows written file by file from a real index's rows, as a build
    #   writes it
    from tapt.indexer.store.manifest import DOCS, EMBEDDINGS, STORE, TOKENS
    from tapt.indexer.store.text_store import TextStoreWriter
    from tapt.util.files import sha256_file, write_json_atomic

    t0 = time.perf_counter()
    src = Index(source)
    out_dir = Path(out)
    out_dir.mkdir(parents=True)
    s, dim = src.n_sentences, src.dim
    base = np.asarray(src.embeddings, dtype=np.float32)
    rng = np.random.default_rng(seed)
    emb = np.lib.format.open_memmap(out_dir / EMBEDDINGS, mode="w+", dtype=np.float32,
                                    shape=(n, dim))
    for start in tqdm(range(0, n, _CHUNK), desc=f"rows x{n:,}", leave=False):
        rows = np.arange(start, min(n, start + _CHUNK)) % s
        block = base[rows] + rng.normal(scale=noise, size=(len(rows), dim)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        emb[start:start + len(rows)] = block
    emb.flush()
    del emb
    gen_s = time.perf_counter() - t0
    np.save(out_dir / TOKENS, np.resize(np.asarray(src.tokens, dtype=np.int32), n))
    src_docs = np.asarray(src.doc_offsets, dtype=np.int64)
    copies = [src_docs[:-1] + c * s for c in range((n + s - 1) // s)]
    docs = np.concatenate(copies + [np.array([n], dtype=np.int64)])
    docs = np.concatenate([docs[docs < n], [n]])
    np.save(out_dir / DOCS, docs)
    records = src.store.records(range(s))
    n_src_docs = len(src_docs) - 1
    writer = TextStoreWriter(out_dir / STORE)
    for start in tqdm(range(0, n, _CHUNK), desc="text store", leave=False):
        batch = []
        for row in range(start, min(n, start + _CHUNK)):
            rec = dict(records[row % s])
            rec["doc"] = rec["doc"] + (row // s) * n_src_docs
            batch.append(rec)
        writer.put_many(start, batch)
    writer.close()
    manifest = json.loads(json.dumps(src.manifest))
    manifest["uuid"] = str(uuid.uuid4())
    manifest["counts"].update({
        "sentences": n, "documents": len(docs) - 1,
        "segments": len(segment_offsets(docs, manifest["segment_size"])) - 1,
        "tokens": int(np.load(out_dir / TOKENS).sum())})
    manifest["synthetic"] = {"source": str(source), "source_uuid": src.uuid, "rows": s,
                             "noise_sigma": noise, "seed": seed,
                             "how": "row i = source row (i mod rows) + N(0, sigma^2 I), "
                                    "L2-renormalised; texts, tokens, documents repeated"}
    manifest.pop("history", None)
    manifest["checksums"] = {name: sha256_file(out_dir / name) for name in
                             (EMBEDDINGS, TOKENS, DOCS, f"{STORE}/data.mdb")}
    write_json_atomic(out_dir / "manifest.json.pending", manifest)
    return {"seconds": round(time.perf_counter() - t0, 1), "generate_seconds": round(gen_s, 1),
            "bytes": int(os.path.getsize(out_dir / EMBEDDINGS)), "peak_rss_mb": _peak_rss_mb()}


def step_build(index_dir: str, request: str, memory: str) -> dict[str, Any]:
    """The FAISS index `request` picks within `memory`: first build, or `tapt index reindex`."""
    # internal: the FAISS index built alone from the written rows, or the index reindexed, timed
    from tapt.indexer.ann.index_choice import choose_index
    from tapt.indexer.building.ann_build import build_faiss_index
    from tapt.indexer.building.reindex import reindex
    from tapt.indexer.store.manifest import EMBEDDINGS, FAISS, MANIFEST_NAME
    from tapt.util.files import sha256_file, write_json_atomic

    path = Path(index_dir)
    t0 = time.perf_counter()
    pending = path / "manifest.json.pending"
    if pending.exists():
        manifest = json.loads(pending.read_text())
        embeddings = np.load(path / EMBEDDINGS, mmap_mode="r")
        choice = choose_index(len(embeddings), embeddings.shape[1], memory, request)
        manifest["faiss"] = build_faiss_index(embeddings, path / FAISS, choice, progress=False)
        manifest["checksums"][FAISS] = sha256_file(path / FAISS)
        write_json_atomic(path / MANIFEST_NAME, manifest)
        pending.unlink()
    else:
        manifest = reindex(path, request, memory, progress=False)
    info = manifest["faiss"]
    return {"seconds": round(time.perf_counter() - t0, 1), "faiss": info,
            "peak_rss_mb": _peak_rss_mb()}


def step_exact(index_dir: str, queries_path: str, truth_path: str, k: int) -> dict[str, Any]:
    """Exact top-k by brute force over the memory-mapped embeddings (after one warm-up read)."""
    # internal: the exact top-k each index type's recall is counted against
    from tapt.indexer.ann.ann_recall import ground_truth
    from tapt.indexer.store.manifest import EMBEDDINGS

    emb = np.load(Path(index_dir) / EMBEDDINGS, mmap_mode="r")
    queries = np.load(queries_path)
    for start in range(0, len(emb), _CHUNK):       # warm-up: page cache
        float(np.asarray(emb[start:start + _CHUNK]).sum())
    t0 = time.perf_counter()
    _, truth = ground_truth(emb, queries, k)
    seconds = time.perf_counter() - t0
    np.save(truth_path, truth)
    return {"seconds": round(seconds, 2), "k": k, "queries": len(queries),
            "peak_rss_mb": _peak_rss_mb()}


def step_centroid(index_dir: str, queries_path: str, repeats: int = 5) -> dict[str, Any]:
    """Domain-Cosine over every row: one warm-up pass, then `repeats` timed passes."""
    from tapt import Index

    # internal: the centroid scan itself timed over the memory-mapped rows
    from tapt.retriever.scoring import arrays

    ix = Index(index_dir)
    query = arrays.centroid(np.load(queries_path))
    arrays.centroid_scores(ix.embeddings, query)   # warm-up: rows now in the page cache
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        scores = arrays.centroid_scores(ix.embeddings, query)
        times.append(time.perf_counter() - t0)
    assert len(scores) == ix.n_sentences
    best, median = min(times), float(np.median(times))
    return {"seconds_min": round(best, 3), "seconds_median": round(median, 3),
            "gb_per_s": round(ix.embeddings.nbytes / median / 1e9, 2), "repeats": repeats,
            "bytes": int(ix.embeddings.nbytes), "peak_rss_mb": _peak_rss_mb()}


def step_knn(index_dir: str, queries_path: str, truth_path: str, k: int) -> dict[str, Any]:
    """Task queries through `Index.search` (approximate + exact rescoring) at the default."""
    from tapt import Index

    # internal: each search setting applied, rescored and its recall counted, per index type
    from tapt.indexer.ann.ann_recall import recall_at_k
    from tapt.indexer.ann.faiss_index import search_setting, set_search_param
    from tapt.indexer.ann.index_choice import rescore_k
    from tapt.indexer.ann.rescore import exact_topk

    ix = Index(index_dir)
    queries = np.load(queries_path)
    truth = np.load(truth_path)
    info = ix.manifest["faiss"]
    ix.search(queries[:8], k)                        # loads the index, warms the code paths
    t0 = time.perf_counter()
    _, ids = ix.search(queries, k)
    total = time.perf_counter() - t0
    kind, name, value = search_setting(info, ix.n_sentences, ix.dim)
    split: dict[str, Any] = {}
    if kind != "flat":
        set_search_param(ix.faiss, name, value)
        t0 = time.perf_counter()
        factor = (info.get("rescore") or {}).get("factor")
        _, cand = ix.faiss.search(np.ascontiguousarray(queries),
                                  rescore_k(k, kind, ix.n_sentences, factor))
        split["ann_seconds"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        exact_topk(ix.embeddings, queries, cand, k)
        split["rescore_seconds"] = round(time.perf_counter() - t0, 3)
        split["candidates_per_query"] = int(cand.shape[1])
    t0 = time.perf_counter()
    _, ids100 = ix.search(queries, truth.shape[1])
    recall_s = time.perf_counter() - t0
    return {"seconds": round(total, 3), "k": k, "queries": len(queries), "param": name,
            "value": value, "recall_at_100": round(recall_at_k(ids100, truth), 4),
            "k100_seconds": round(recall_s, 3), **split, "peak_rss_mb": _peak_rss_mb()}


def step_iforest(index_dir: str, queries_path: str, candidates: int, seed: int) -> dict[str, Any]:
    """Isolation Forest (200 trees) on the task + 10% corpus rows; score the top centroid rows."""
    from tapt import Index

    # internal: the Isolation Forest's fit and scan timed alone on a sample
    from tapt.retriever.learned.detectors import fit_detector
    from tapt.retriever.scoring import arrays

    ix = Index(index_dir)
    task = np.load(queries_path)
    sims = arrays.centroid_scores(ix.embeddings, arrays.centroid(task))
    count = min(candidates, ix.n_sentences)
    rows = np.sort(np.argpartition(-sims, count - 1)[:count])
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(ix.n_sentences, size=max(1, len(task) // 10), replace=False))
    t0 = time.perf_counter()
    anomaly_of = fit_detector("iforest", task, np.asarray(ix.embeddings[sample]), seed=seed)
    fit_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    anomaly = anomaly_of(ix.embeddings[rows])
    score_s = time.perf_counter() - t1
    assert len(anomaly) == count
    return {"seconds": round(fit_s + score_s, 2), "fit_seconds": round(fit_s, 2),
            "score_seconds": round(score_s, 2), "candidates": int(count),
            "peak_rss_mb": _peak_rss_mb()}


# ----------------------------------------------------------------------------- orchestration


def find_source(explicit: str | None, allow_build: bool = True) -> Path:
    """The real index whose embeddings are repeated: given, cached, or built from the sample."""
    if explicit:
        return Path(explicit)
    for path in SOURCES:
        if (path / "manifest.json").is_file():
            return path
    if not allow_build:
        raise SystemExit("no source index: pass --source IDX")
    target = SOURCES[0]
    log.info("no sample index yet: building %s (embeds 20,007 sentences once, minutes)", target)
    subprocess.run([sys.executable, "-c", "from cli import main; main()", "-q", "index", "build",
                    str(SAMPLE_POOL), "--out", str(target), "--no-split"], check=True, cwd=REPO)
    return target


def task_queries(source: Path, task_file: Path, count: int, noise: float, seed: int,
                 work: Path) -> tuple[Path, str]:
    """The task's embeddings (the real seed sentences, embedded with the index's model and
    cached), or, if the model cannot be loaded, perturbed source rows; and a description."""
    from tapt import Index

    ix = Index(source)
    tag = hashlib.sha256(f"{task_file}:{count}".encode()).hexdigest()[:8]
    path = work / f"task-{ix.uuid[:8]}-{tag}.npy"
    if path.exists():
        return path, json.loads(path.with_suffix(".json").read_text())["how"]
    try:
        # internal: a task file read and embedded as select does, without selecting
        from tapt.retriever.tasks.embedding import encode_cached
        from tapt.retriever.tasks.reading import load_task

        encoder = ix.load_encoder()
        sentences = load_task([task_file], split=ix.manifest["ingest"]["split_sentences"])
        emb, _ = encode_cached(encoder, sentences.sentences[:count])
        name = task_file.relative_to(REPO) if task_file.is_relative_to(REPO) else task_file
        how = (f"{len(emb)} real task sentences ({name}), embedded with the index's model "
               f"({getattr(encoder, 'backend', 'torch')})")
    except Exception as exc:  # noqa: BLE001 - fall back, and say so in the report
        log.warning("cannot embed the task (%s): using perturbed source rows", exc)
        rng = np.random.default_rng(seed + 99)
        rows = rng.choice(ix.n_sentences, size=min(count, ix.n_sentences), replace=False)
        emb = np.asarray(ix.embeddings[rows], dtype=np.float32)
        emb = emb + rng.normal(scale=noise, size=emb.shape).astype(np.float32)
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        how = (f"{len(emb)} source rows + Gaussian noise (sigma {noise}), renormalised "
               f"(the model could not be loaded: {str(exc).splitlines()[0][:120]})")
    np.save(path, np.ascontiguousarray(emb, dtype=np.float32))
    path.with_suffix(".json").write_text(json.dumps({"how": how}))
    return path, how


def run_size(n: int, args: argparse.Namespace, source: Path, queries: Path, work: Path
             ) -> dict[str, Any]:
    index_dir = work / f"n{n}"
    if index_dir.exists():
        shutil.rmtree(index_dir)
    truth = work / f"truth-n{n}.npy"
    result: dict[str, Any] = {"n": n}
    log.info("n = %s: making the index", f"{n:,}")
    result["make"] = _in_subprocess(step_make, str(source), str(index_dir), n, args.noise,
                                    args.seed)
    result["configs"] = []
    result["skipped"] = []
    # internal: the row count above which auto never picks HNSW
    from tapt.indexer.ann.index_choice import MEDIUM_MAX

    for i, spec in enumerate(args.configs):
        request, memory = spec.split("@", 1)
        if request == "hnsw" and n > MEDIUM_MAX and i > 0:
            result["skipped"].append(f"{spec}: n > {MEDIUM_MAX:,} (auto never picks HNSW there)")
            continue
        log.info("n = %s: building %s", f"{n:,}", spec)
        built = _in_subprocess(step_build, str(index_dir), request, memory)
        if i == 0:
            log.info("n = %s: exact search and centroid", f"{n:,}")
            result["exact"] = _in_subprocess(step_exact, str(index_dir), str(queries), str(truth),
                                             100)
            result["centroid"] = _in_subprocess(step_centroid, str(index_dir), str(queries))
        log.info("n = %s: knn through %s", f"{n:,}", built["faiss"]["factory"])
        knn = _in_subprocess(step_knn, str(index_dir), str(queries), str(truth), args.k)
        result["configs"].append({"memory": memory, "request": request, "build": built,
                                  "knn": knn})
    log.info("n = %s: iforest", f"{n:,}")
    result["iforest"] = _in_subprocess(step_iforest, str(index_dir), str(queries),
                                       args.candidates, args.seed)
    if not args.keep:
        shutil.rmtree(index_dir, ignore_errors=True)
        truth.unlink(missing_ok=True)
    return result


def _versions() -> dict[str, str]:
    # internal: the results' version stamps, as tapt's own files carry them
    from tapt.util.versions import library_versions

    return library_versions()


def write_markdown(report: dict[str, Any], path: Path) -> None:
    lines = [
        "# Per-task latency by FAISS index type (`benchmarks/speed_index.py`)",
        "",
        f"Measured {report['created']} on {report['machine']['cpus']} CPU cores "
        f"({report['machine']['platform']}), no GPU; faiss-cpu "
        f"{report['versions'].get('faiss-cpu', '?')}, "
        f"numpy {report['versions'].get('numpy', '?')}. "
        "Command: `" + report["command"] + "`.",
        "",
        "**Test data, not text.** No sentence was embedded for these indexes: row i is row "
        f"(i mod {report['source']['rows']:,}) of a real index (`{report['source']['path']}`, "
        f"{report['source']['model']}) plus Gaussian noise of sigma {report['noise_sigma']} per "
        "coordinate (seeded), L2-renormalised (cosine to the source row ~"
        f"{report['noise_cosine']:.2f}). At N rows every source sentence has ~N/"
        f"{report['source']['rows']:,} perturbed copies, so neighbourhoods are clumpier than in a "
        "real corpus of that size; recall and timings are for this data.",
        f"**Task queries:** {report['queries']['how']}.",
        "",
        "Each step ran in a fresh process; *peak RSS* is that process's VmHWM, which includes "
        "the pages of the memory-mapped embeddings it touched (file-backed, from the page cache). "
        "knn = `Index.search`: FAISS candidates at the recorded default (calibrated at build "
        "time for recall@100 >= 0.95 on sampled rows), rescored exactly from the memory-mapped "
        "embeddings; recall@100 is of that whole path against the exact top-100. Exact flat = "
        "brute force over the memory map in blocks (faiss.contrib `knn_ground_truth`, k = 100). "
        "The knn time is the first full batch in a fresh process; its split (ann + rescore) was "
        "timed after it, with the rescored rows already mapped, so the parts can add up to less. "
        "The `default` column gives the search parameter and how many candidates per query "
        "(k = 50) are rescored. Centroid is timed after one warm-up pass (rows in the page "
        "cache), median of "
        f"{report['sizes'][0]['centroid']['repeats'] if report['sizes'] else 5}.",
        "",
        "| N | --index @ --memory | index | why | build s (train) | index MB | default "
        "| recall@100 "
        "| knn 2000x50 s (ann + rescore) | exact flat s | peak RSS MB build / knn |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in report["sizes"]:
        for c in size["configs"]:
            f, k = c["build"]["faiss"], c["knn"]
            split = (f" ({k['ann_seconds']} + {k['rescore_seconds']})" if "ann_seconds" in k
                     else " (exact)")
            default = f"{k['param']} {k['value']}" if k["param"] else "exact"
            if "candidates_per_query" in k:
                default += f", {k['candidates_per_query']} candidates"
            lines.append(
                f"| {size['n']:,} | {c['request']} @ {c['memory']} | `{f['factory']}` | "
                f"{f['reason']} | "
                f"{f['build_seconds']} ({f['train']['seconds']}) | {f['bytes'] / 2**20:.1f} | "
                f"{default} | {k['recall_at_100']:.3f} | {k['seconds']:.2f}{split} | "
                f"{size['exact']['seconds']:.2f} | "
                f"{c['build']['peak_rss_mb']:.0f} / {k['peak_rss_mb']:.0f} |")
    lines += ["", "| N | embeddings GB | centroid s (min / median) | GB/s | "
              "iforest s (fit + score 100k) | peak RSS MB centroid / iforest / make |",
              "|---|---|---|---|---|---|"]
    for size in report["sizes"]:
        c, i = size["centroid"], size["iforest"]
        lines.append(
            f"| {size['n']:,} | {c['bytes'] / 1e9:.2f} | {c['seconds_min']:.3f} / "
            f"{c['seconds_median']:.3f} | {c['gb_per_s']} | {i['seconds']} "
            f"({i['fit_seconds']} + {i['score_seconds']}, {i['candidates']:,} rows) | "
            f"{c['peak_rss_mb']:.0f} / {i['peak_rss_mb']:.0f} / "
            f"{size['make']['peak_rss_mb']:.0f} |")
    skipped = [f"{s['n']:,}: {x}" for s in report["sizes"] for x in s.get("skipped", [])]
    if skipped:
        lines += ["", "Not run: " + "; ".join(skipped) + "."]
    lines += ["", "Making the test index (rows, LMDB, checksums): " + ", ".join(
        f"{s['n']:,} rows {s['make']['seconds']} s" for s in report["sizes"]) + ".",
        "Calibration sweeps (recall@100 on the sampled calibration queries per value; `(8k)`: "
        "8 x k candidates rescored):"]
    for size in report["sizes"]:
        for c in size["configs"]:
            search = c["build"]["faiss"].get("search")
            if search:
                sweep = ", ".join(f"{r['value']}" + (f" ({r['factor']}k)" if "factor" in r
                                                       and r["factor"] > 1 else "")
                                  + f": {r['recall']:.3f}" for r in search["sweep"])
                lines.append(f"- {size['n']:,} `{c['build']['faiss']['factory']}` "
                             f"{search['param']} -> {sweep}")
    shares = [r.get("other_cpu_share", 0.0) for s in report["sizes"] for r in
              [s["make"], s["exact"], s["centroid"], s["iforest"]]
              + [x for c in s["configs"] for x in (c["build"], c["knn"])]]
    lines += ["", f"CPU used by other processes while the steps ran: {min(shares):.0%} to "
              f"{max(shares):.0%} of the machine (per step in the JSON, `other_cpu_share`); "
              "where it is high, treat the seconds as upper bounds.", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--configs", nargs="+", default=["auto@8G", "auto@64M", "hnsw@8G"],
                        help="REQUEST@MEMORY: --index and --memory of `tapt index build`")
    parser.add_argument("--source", default=None, help="real index whose rows are repeated")
    parser.add_argument("--task", type=Path, default=DEFAULT_TASK)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--noise", type=float, default=0.04, help="sigma per coordinate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "speed-index")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--keep", action="store_true", help="keep the test indexes")
    parser.add_argument("--markdown-only", action="store_true",
                        help="measure nothing: rewrite OUT/speed_index.md from OUT/speed_index.json")
    args = parser.parse_args(argv)
    if args.markdown_only:
        write_markdown(json.loads((args.out / "speed_index.json").read_text()),
                       args.out / "speed_index.md")
        return 0
    for spec in args.configs:
        request, _, memory = spec.partition("@")
        if request not in ("auto", "flat", "hnsw", "ivfpq") or not memory:
            parser.error(f"--configs {spec!r}: use REQUEST@MEMORY, e.g. auto@8G or hnsw@2G")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    for noisy in ("faiss", "tapt", "sentence_transformers", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    source = find_source(args.source)
    queries, how = task_queries(source, args.task, args.queries, args.noise, args.seed, args.work)
    from tapt import Index

    src = Index(source)
    dim = src.dim
    report: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
        "command": "python benchmarks/speed_index.py " + " ".join(argv if argv is not None
                                                                   else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "versions": _versions(),
        "source": {"path": str(source.relative_to(REPO) if source.is_relative_to(REPO)
                               else source), "rows": src.n_sentences, "dim": dim,
                   "model": src.manifest["model"]["name"],
                   "backend": src.manifest.get("build", {}).get("backend", "torch")},
        "noise_sigma": args.noise,
        "noise_cosine": round(1 / float(np.sqrt(1 + args.noise ** 2 * dim)), 3),
        "queries": {"count": int(len(np.load(queries))), "how": how, "k": args.k},
        "goals": GOALS,
        "sizes": [],
    }
    del src
    for n in args.sizes:
        report["sizes"].append(run_size(n, args, source, queries, args.work))
        (args.out / "speed_index.json").write_text(json.dumps(report, indent=2) + "\n")
        write_markdown(report, args.out / "speed_index.md")
    log.info("wrote %s and %s", args.out / "speed_index.json", args.out / "speed_index.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
