"""Peak memory of one prepare task (read, split, text store, document offsets and hashes,
lexical ids) against the rows of its shard, with this checkout's streamed lexical writer and
with a `--before` revision's in-memory one.

The shard: `rows` synthetic sentences (`benchmarks/synthetic_index.py`'s generator: Zipf words
with cluster topic words, one sentence a document), written once per size as one `.jsonl` under
`--work`. Each measurement is a fresh process (`--cell`) that imports tapt (from the checkout,
or from the revision extracted with `git archive`, first on its PYTHONPATH), scans the file and
runs `stages.prepare_shard` on it, the function a prepare task runs; it records its peak
resident set (`ru_maxrss`), its RssAnon after the imports, the seconds of the scan and of the
prepare, the distinct words and word pairs, and a digest of the files it wrote (the two
revisions must write the same bytes).

    nice -n 10 .venv/bin/python -m benchmarks.prepare_memory --rows 250000,1000000,2000000 \\
        --before HEAD~1 --work /tmp/prepare-memory --out benchmarks/results/scale
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _corpus(work: Path, rows: int) -> Path:
    from benchmarks.synthetic_index import CHUNK, Sentences, Spec

    path = work / f"corpus-{rows}.jsonl"
    if path.is_file():
        return path
    spec = Spec(rows=rows, shards=1)
    sentences, rng = Sentences(spec), np.random.default_rng(spec.seed + 100)
    temp = path.with_suffix(".tmp")
    with open(temp, "w", encoding="utf-8") as fh:
        for start in range(0, rows, CHUNK):
            labels = rng.integers(0, spec.clusters, size=min(CHUNK, rows - start))
            lines, _ = sentences.make(rng, labels)
            fh.write("".join(f'{{"text": "{line}"}}\n' for line in lines))
    os.replace(temp, path)
    return path


def cell(corpus: str, out: str) -> dict:
    """One prepare task in this process (the child)."""
    import tapt
    from benchmarks.driver_memory import MB, _anon_bytes

    # internal: one prepare task's function is what is traced, on a corpus scanned as a build scans
    #   it
    from tapt.indexer.building import stages
    from tapt.indexer.building.pipeline import BuildConfig, scan_corpus

    base = _anon_bytes() / MB
    config = BuildConfig(split=False, doc_field=None, progress=False)
    t0 = time.perf_counter()
    scan = scan_corpus([corpus], config)
    scan_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    record = stages.prepare_shard(stages.PrepareTask(out, "000000", tuple(scan.files),
                                                     scan.options, False, run="bench"))
    seconds = time.perf_counter() - t0
    shard = Path(out) / "shards" / "000000"
    digest = hashlib.sha256()
    for name in sorted(p.name for p in shard.glob("*.npy")):
        digest.update((shard / name).read_bytes())
    return {"tapt": str(Path(tapt.__file__).parent), "rows": record["rows"],
            "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "base_anon_mb": round(base, 1), "seconds": round(seconds, 1),
            "scan_seconds": round(scan_seconds, 1),
            "words": int(len(np.load(shard / "vocab.npy", mmap_mode="r")) - 2),
            "pairs": int(len(np.load(shard / "bigrams.npy", mmap_mode="r"))),
            "digest": digest.hexdigest()[:16]}


def _extract(revision: str, work: Path) -> Path:
    where = work / f"src-{revision.replace('/', '_')}"
    if not (where / "tapt").is_dir():
        (where / "tapt").mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(where / "tapt")], input=archive, check=True)
    return where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="250000,1000000,2000000")
    parser.add_argument("--before", help="a git revision to measure beside this checkout")
    parser.add_argument("--work", type=Path, default=Path("/tmp/prepare-memory"))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/scale")
    parser.add_argument("--cell", nargs=2, metavar=("CORPUS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(cell(*args.cell)))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    sources = {"after": None}
    if args.before:
        sources = {"before": _extract(args.before, args.work), **sources}
    records = []
    for rows in [int(r) for r in args.rows.split(",")]:
        corpus = _corpus(args.work, rows)
        for name, src in sources.items():
            out = args.work / f"prepared-{name}-{rows}"
            shutil.rmtree(out, ignore_errors=True)
            env = dict(os.environ)
            if src is not None:
                env["PYTHONPATH"] = f"{src}{os.pathsep}{ROOT}"
            found = subprocess.run([sys.executable, "-m", "benchmarks.prepare_memory",
                                    "--cell", str(corpus), str(out)], cwd=str(ROOT), env=env,
                                   check=True, capture_output=True, text=True)
            record = {"code": name, "revision": args.before if src else "checkout",
                      **json.loads(found.stdout.strip().splitlines()[-1]),
                      "load": os.getloadavg()[0]}
            records.append(record)
            print(json.dumps(record), flush=True)
            shutil.rmtree(out, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prepare_memory.json").write_text(json.dumps(records, indent=1) + "\n")
    lines = ["| rows | code | peak RSS (MB) | words | word pairs | scan s | prepare s | load | "
             "files |", "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        lines.append(f"| {r['rows']:,} | {r['code']} | {r['peak_mb']:,.0f} | {r['words']:,} | "
                     f"{r['pairs']:,} | {r['scan_seconds']:.0f} | {r['seconds']:.0f} | "
                     f"{r['load']:.1f} | {r['digest']} |")
    (args.out / "prepare_memory.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
