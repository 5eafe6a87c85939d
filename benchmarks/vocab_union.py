"""Time and peak memory of merging the shards' vocabularies into the corpus vocabulary.

A sharded index stores each shard's word hashes (`vocab.npy`) and, at the top, their sorted
union, written when the index is published and merged again by every `index add`. This compares
the union by repeated `np.union1d` in memory (`lexical.union_vocabulary`, what publishing did)
with `lexical.write_union` both ways, each forced: one sort in memory (its path for small
inputs) and 256 buckets by the hashes' top bits on disk, each made distinct alone, on synthetic
shards: `--shards` arrays of `--words` hashes each, drawn from a universe of
`--universe` uniform 64-bit hashes with a Zipf-like skew (common words in every shard), seeded.
Peaks are `tracemalloc`'s (numpy's allocations included); both results are compared.

    python -m benchmarks.vocab_union --shards 100 --words 500000 --universe 20000000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.measure import traced, write_report

# internal: the vocabulary union itself, old and new path, is what is timed and traced
from tapt.indexer.reading import lexical
from tapt.indexer.reading.lexical import union_vocabulary, write_union

# internal: the report's time, as tapt's own files carry it
from tapt.util.versions import utc_now


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shards", type=int, default=100)
    p.add_argument("--words", type=int, default=500_000, help="distinct words per shard")
    p.add_argument("--universe", type=int, default=20_000_000)
    p.add_argument("--out", type=Path, default=None, help="write vocab_union.{json,md}")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    universe = rng.integers(0, 2**64 - 1, size=args.universe, dtype=np.uint64)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = []
        for s in range(args.shards):
            ranks = np.minimum(rng.zipf(1.2, size=args.words), args.universe) - 1
            words = np.unique(universe[ranks])
            path = folder / f"{s:06d}.npy"
            np.save(path, np.concatenate([np.array([0, 1], np.uint64), words]))
            paths.append(path)
        total = sum(len(np.load(p, mmap_mode="r")) - 2 for p in paths)

        def shards():
            return [np.load(p, mmap_mode="r") for p in paths]

        old, old_peak, old_s = traced(lambda: union_vocabulary(shards()))
        runs = {}
        for label, limit in (("one sort", 1 << 62), ("buckets", 0)):   # each path forced
            saved, lexical._UNION_IN_MEMORY = lexical._UNION_IN_MEMORY, limit
            try:
                written, peak, seconds = traced(
                    lambda: write_union(folder / "vocab.npy", (v[2:] for v in shards())))
            finally:
                lexical._UNION_IN_MEMORY = saved
            if not np.array_equal(np.load(folder / "vocab.npy"), old):
                raise SystemExit(f"write_union ({label}) differs from union_vocabulary")
            runs[label] = {"peak_bytes": peak, "seconds": round(seconds, 2)}
    report = {"date": utc_now(), "shards": args.shards, "words_per_shard_drawn": args.words,
              "universe": args.universe, "words_read": int(total), "union": int(written),
              "union_vocabulary": {"peak_bytes": old_peak, "seconds": round(old_s, 2)},
              "write_union": runs, "in_memory_up_to": lexical._UNION_IN_MEMORY,
              "command": "python -m benchmarks.vocab_union " + " ".join(argv or sys.argv[1:])}
    one, buckets = runs["one sort"], runs["buckets"]
    text = "\n".join([
        "## Measured: merging the shards' vocabularies",
        "",
        f"Measured {report['date']} with `benchmarks/vocab_union.py`: {args.shards} shards, "
        f"{total:,} word hashes read in all, a union of {written:,} (synthetic, seeded; "
        "the shards memory-mapped, as publishing reads them). Both give the same union.",
        "",
        "| merge | seconds | peak (tracemalloc) |",
        "|---|---:|---:|",
        f"| repeated `np.union1d` in memory (before) | {old_s:.2f} | {old_peak / 1e6:.0f} MB |",
        f"| `write_union`, one sort in memory (forced here; its path up to "
        f"{lexical._UNION_IN_MEMORY:,} words read) | {one['seconds']:.2f} | "
        f"{one['peak_bytes'] / 1e6:.0f} MB |",
        f"| `write_union`, 256 buckets on disk (forced here; its path above that) | "
        f"{buckets['seconds']:.2f} | {buckets['peak_bytes'] / 1e6:.0f} MB |",
        "",
        "Regenerate:",
        "",
        f"    {report['command']}",
        "",
    ])
    write_report(args.out, "vocab_union", report, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
