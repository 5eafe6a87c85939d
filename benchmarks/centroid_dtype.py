"""Centroid scoring over 1M stored embeddings, float32 vs float16 storage, from the page cache.

Writes N random unit rows (dim 384) as float32 and float16 `.npy` files, memory-maps them as an
index does, and times `retriever.scoring.arrays.centroid_scores` (one warm-up pass, then min and median
of `--repeats`); float16 is timed through the vectorised torch cast and through numpy's cast.

    python -m benchmarks.centroid_dtype --n 1000000 --out benchmarks/results/centroid_dtype.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# internal: centroid_scores itself is timed over memory-mapped float32 and float16 rows
from tapt.retriever.scoring import arrays

# internal: the results' version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now


def timed(embeddings: np.ndarray, query: np.ndarray, repeats: int) -> dict[str, float]:
    arrays.centroid_scores(embeddings, query)  # warm-up: rows now in the page cache
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        arrays.centroid_scores(embeddings, query)
        runs.append(time.perf_counter() - t0)
    gb = embeddings.nbytes / 1e9
    return {"seconds_min": round(min(runs), 4), "seconds_median": round(statistics.median(runs), 4),
            "gb": round(gb, 3), "gb_per_s": round(gb / min(runs), 2)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/centroid_dtype.json"))
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        rows = np.empty((args.n, args.dim), dtype=np.float32)
        for start in range(0, args.n, 65536):
            block = rng.standard_normal((min(65536, args.n - start), args.dim), dtype=np.float32)
            rows[start:start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
        query = arrays.centroid(rows[:2000])
        for dtype in ("float32", "float16"):
            np.save(Path(tmp) / f"{dtype}.npy", rows.astype(dtype))
        del rows
        mapped = {d: np.load(Path(tmp) / f"{d}.npy", mmap_mode="r") for d in ("float32", "float16")}
        results["float32"] = timed(mapped["float32"], query, args.repeats)
        results["float16 (torch cast)"] = timed(mapped["float16"], query, args.repeats)
        torch = sys.modules.pop("torch", None)
        sys.modules["torch"] = None  # type: ignore[assignment]  # forces numpy's cast
        try:
            results["float16 (numpy cast)"] = timed(mapped["float16"], query, args.repeats)
        finally:
            sys.modules["torch"] = torch  # type: ignore[assignment]
            if torch is None:
                del sys.modules["torch"]
    report = {"created": utc_now(), "n": args.n, "dim": args.dim, "repeats": args.repeats,
              "results": results, "versions": library_versions()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for name, r in results.items():
        print(f"{name:22s} {r['seconds_min']:.3f} s min, {r['seconds_median']:.3f} s median, "
              f"{r['gb_per_s']} GB/s")


if __name__ == "__main__":
    main()
