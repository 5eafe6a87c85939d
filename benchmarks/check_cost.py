#!/usr/bin/env python
"""What the damage checks cost (docs/reference/reliability.md quotes this).

- centroid scoring over N stored rows (float32 and float16, memory-mapped, from the page cache)
  with the cosine-range check and without it (`retriever/scoring/arrays.py` before the checks, loaded from git);
- the unit-length check of gathered candidate rows (a knn union of 40 x 50 rows);
- reading every text record with its CRC32 check against the reader of a format-1 store before the checks;
- SHA-256 throughput (the once-per-version hash of large files, and every open of small ones);
- opening a small index (every file hashed) and the same open with hashing off.

    python -m benchmarks.check_cost --n 1000000 --out benchmarks/results/check_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "support"))

from benchmarks.measure import module_at  # noqa: E402

# internal: the damage checks themselves are what is timed, alone (no public call runs one)
from tapt.indexer.store.integrity import check_cosines, check_unit_rows  # noqa: E402

# internal: centroid scoring over stored rows timed with its check against the same module
#   before the checks (loaded from git), below Index.select's own work
from tapt.retriever.scoring import arrays  # noqa: E402

# internal: the results' version stamps and creation time, as tapt's own result files carry them
from tapt.util.versions import library_versions, utc_now  # noqa: E402


def _timed(fn, repeats: int) -> dict[str, float]:
    fn()  # warm-up: rows in the page cache
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return {"min_s": round(min(runs), 5), "median_s": round(statistics.median(runs), 5)}


# the revision before the checks were added (what "without the checks" measures)
BEFORE = "8b8cc4a^"


def _main_module(rel: str, name: str):
    """A module of this repository as it was before the checks (`BEFORE`), loaded from git."""
    return module_at(BEFORE, rel, name)


def centroid(n: int, dim: int, repeats: int, tmp: Path) -> dict:
    rng = np.random.default_rng(0)
    rows = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 65536):
        block = rng.standard_normal((min(65536, n - start), dim), dtype=np.float32)
        rows[start:start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    query = arrays.centroid(rows[:2000])
    for dtype in ("float32", "float16"):
        np.save(tmp / f"{dtype}.npy", rows.astype(dtype))
    del rows
    old = _main_module("retriever/scoring/arrays.py", "scoring_main")
    out = {}
    for dtype in ("float32", "float16"):
        mapped = np.load(tmp / f"{dtype}.npy", mmap_mode="r")
        before, after = [], []
        for _ in range(3):  # interleaved, so load on the shared machine hits both alike
            before.append(_timed(lambda: old.centroid_scores(mapped, query), repeats)["min_s"])
            after.append(_timed(lambda: arrays.centroid_scores(mapped, query), repeats)["min_s"])
        scores = arrays.centroid_scores(mapped, query)
        out[dtype] = {"without_check_s": min(before), "with_check_s": min(after),
                      "overhead_pct": round(100 * (min(after) / min(before) - 1), 1),
                      "range_check_alone_s": _timed(lambda: check_cosines(scores),
                                                    repeats)["min_s"]}
        gathered = np.sort(np.random.default_rng(1).choice(n, 2000, replace=False))
        rows_read = np.asarray(mapped[gathered], dtype=np.float32)
        out[dtype]["unit_check_2000_rows_s"] = _timed(
            lambda: check_unit_rows(rows_read, gathered), repeats)["min_s"]
    return out


def records(n: int, repeats: int, tmp: Path) -> dict:
    """All texts of a store: the reader before the checks on a format-1 store, this one (CRC per
    record)."""
    # internal: the text store's reader with its CRC check is what is timed, against the reader
    #   of a format-1 store; no public call writes or reads a store alone
    from tapt.indexer.store.text_store import TextStore, TextStoreWriter

    rng = np.random.default_rng(2)
    words = ["patient", "court", "ship", "the", "a", "of", "dose", "clause", "storm", "and"]
    new, old = TextStoreWriter(tmp / "store"), TextStoreWriter(tmp / "store1", checksummed=False)
    for start in range(0, n, 50_000):
        batch = [{"text": " ".join(rng.choice(words, 14)), "doc": i // 10, "pos": i % 10,
                  "source": "pool.jsonl", "doc_key": str(i // 10), "meta": {"domain": "x"}}
                 for i in range(start, min(n, start + 50_000))]
        new.put_many(start, batch)
        old.put_many(start, batch)
    new.close()
    old.close()
    main_store = _main_module("indexer/store.py", "store_main").TextStore(tmp / "store1")
    store = TextStore(tmp / "store")
    before, after = [], []
    for _ in range(repeats):  # interleaved
        before.append(_timed(lambda: main_store.texts(range(n)), 1)["min_s"])
        after.append(_timed(lambda: store.texts(range(n)), 1)["min_s"])
    out = {"records": n, "main_s": min(before), "with_crc_s": min(after)}
    out["overhead_pct"] = round(100 * (out["with_crc_s"] / out["main_s"] - 1), 1)
    return out


def sha256_speed(tmp: Path) -> dict:
    # internal: tapt's own file hash is what is timed (the SHA-256 an index's open pays)
    from tapt.util.files import sha256_file

    path = tmp / "blob"
    path.write_bytes(os.urandom(256 << 20))
    sha256_file(path)
    t0 = time.perf_counter()
    sha256_file(path)
    seconds = time.perf_counter() - t0
    return {"mb": 256, "seconds": round(seconds, 3), "gb_per_s": round(0.256 * 1.048576 /
                                                                       seconds, 2)}


def small_open(repeats: int, tmp: Path) -> dict:
    from conftest import HashingEncoder, write_labelled_corpus
    from tapt import Index

    # internal: built with the tests' hashing encoder object, which Index.build (models by name)
    #   does not take; the open is timed with the record of verified files cleared each time
    from tapt.indexer.building.pipeline import BuildConfig, build_index
    from tapt.indexer.store import integrity

    write_labelled_corpus(tmp / "pool.jsonl", docs_per_topic=200)
    build_index([tmp / "pool.jsonl"], tmp / "idx", HashingEncoder(dim=384),
                BuildConfig(split=False, progress=False))
    size = sum(p.stat().st_size for p in (tmp / "idx").rglob("*") if p.is_file())

    def fresh_open():
        integrity._VERIFIED.clear()
        Index(tmp / "idx")

    hashed = _timed(fresh_open, repeats)["min_s"]
    os.environ["TAPT_HASH_ON_OPEN"] = "0"
    try:
        structural = _timed(fresh_open, repeats)["min_s"]
    finally:
        del os.environ["TAPT_HASH_ON_OPEN"]
    return {"sentences": Index(tmp / "idx").n_sentences, "bytes": size,
            "open_hashing_every_file_s": hashed, "open_structural_only_s": structural}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" /
                   "check_cost.json")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TAPT_CACHE_DIR"] = str(Path(tmp) / "cache")
        report = {"created": utc_now(), "n": args.n, "dim": args.dim,
                  "centroid": centroid(args.n, args.dim, args.repeats, Path(tmp)),
                  "text_records": records(args.records, args.repeats, Path(tmp)),
                  "sha256": sha256_speed(Path(tmp)),
                  "small_index_open": small_open(args.repeats, Path(tmp)),
                  "cpu": os.cpu_count(), "load_avg": os.getloadavg(),
                  "versions": library_versions()}
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
