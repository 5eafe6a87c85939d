"""The speed suite in one command: encoder backends, FAISS index types and per-task latency, DSIR.

Runs `benchmarks.speed_encode` (backends side by side, agreement of their selections) and
`benchmarks.speed_index` (index types, recall@100, per-method task latency at 100k and 1M rows),
then times DSIR per task on the same pool, and writes `benchmarks/results/speed.{json,md}` with
all three. `--reuse` skips the first two and takes their latest result files as they are (their
own dates and commands are kept in the report), for re-running only the DSIR part.

    python -m benchmarks.speed                 # everything (~15 min on 2 cores)
    python -m benchmarks.speed --reuse         # DSIR timing + assemble the existing results
    python -m benchmarks.speed --markdown-only # only rewrite speed.md from speed.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

# internal: the DSIR baseline's features and library run timed, not a recall grid
from tapt.bench.dsir_baseline import PoolFeatures, read_texts, run_library

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

RESULTS = Path(__file__).resolve().parent / "results"
log = logging.getLogger("speed")


def dsir_per_task(pool: Path, seeds: Path, domains: list[str] | None) -> dict[str, Any]:
    """DSIR's seconds per task: the package end to end, and with the pool's n-grams cached."""
    pool_texts = read_texts(pool)
    t0 = time.perf_counter()
    features = PoolFeatures(pool_texts, progress=False)
    featurise = time.perf_counter() - t0
    rows = []
    for seed_file in sorted(seeds.glob("*.jsonl.gz")):
        domain = seed_file.name.split(".")[0]
        if domains and domain not in domains:
            continue
        target = read_texts(seed_file)
        _, library_s = run_library(pool_texts, target)
        t0 = time.perf_counter()
        features.weights(target)
        cached_s = time.perf_counter() - t0
        rows.append({"domain": domain, "task_sentences": len(target),
                     "library_s": round(library_s, 2), "cached_features_s": round(cached_s, 3)})
        log.info("DSIR %s: library %.1f s, cached features %.2f s", domain, library_s, cached_s)
    return {"pool": str(pool), "pool_sentences": len(pool_texts),
            "pool_featurise_s": round(featurise, 1), "tasks": rows,
            "library_s_mean": round(statistics.fmean(r["library_s"] for r in rows), 2),
            "cached_features_s_mean": round(statistics.fmean(r["cached_features_s"] for r in rows), 3)}


def _body(md: str) -> str:
    """A result file's markdown without its title line."""
    lines = md.splitlines()
    return "\n".join(lines[1:] if lines and lines[0].startswith("# ") else lines).strip()


def markdown(report: dict[str, Any], encode_md: str, index_md: str) -> str:
    d = report["dsir"]
    lines = [f"# Speed suite (`python -m benchmarks.speed{' --reuse' if report['reused'] else ''}`), "
             f"{report['created']}", "",
             "Three parts, each with its own machine line, date and command. On a 2-core CPU without "
             "a GPU; the GPU figures are in [gpu_runs.md](gpu_runs.md).", "",
             "## 1. Encoder backends (`benchmarks/speed_encode.py`)", "", _body(encode_md), "",
             "## 2. Index types and per-task latency (`benchmarks/speed_index.py`)", "",
             _body(index_md), "",
             "## 3. DSIR per task on the same pool, for comparison", "",
             f"Pool {d['pool']} ({d['pool_sentences']:,} sentences); each task = one domain's seed "
             "file (2,000 sentences). DSIR needs no embedding, but its package re-reads and "
             "re-featurises the pool for every task; with the pool's hashed n-grams computed once "
             f"({d['pool_featurise_s']} s) a task costs only a sparse matrix-vector product.", "",
             "| domain | DSIR package end to end, s | cached pool features, s |", "|---|---:|---:|"]
    for r in d["tasks"]:
        lines.append(f"| {r['domain']} | {r['library_s']} | {r['cached_features_s']} |")
    lines += [f"| **mean** | **{d['library_s_mean']}** | **{d['cached_features_s_mean']}** |", "",
              "tapt's per-task costs on its side: embedding the task (2,000 sentences at the "
              "encoder rates of part 1, i.e. ~9 s with the default fp32 ONNX backend here, once per "
              "task thanks to the task cache) plus the selection itself (part 2).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reuse", action="store_true",
                   help="do not rerun speed_encode / speed_index; use their latest results")
    p.add_argument("--pool", type=Path, default=Path("data/sample/pool.jsonl.gz"))
    p.add_argument("--seeds", type=Path, default=Path("data/sample/seeds"))
    p.add_argument("--dsir-domains", nargs="*", default=None, help="[default: every seed file]")
    p.add_argument("--out", type=Path, default=RESULTS / "speed")
    p.add_argument("--markdown-only", action="store_true",
                   help="measure nothing: rewrite OUT.md from OUT.json and the two results files")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.markdown_only:
        report = json.loads(args.out.with_suffix(".json").read_text())
        args.out.with_suffix(".md").write_text(
            markdown(report, (RESULTS / "speed_encode.md").read_text(),
                     (RESULTS / "speed_index.md").read_text()), encoding="utf-8")
        return
    if not args.reuse:
        from benchmarks import speed_encode, speed_index

        speed_encode.main(["--pool", str(args.pool), "--n", "4000", "--seeds", str(args.seeds),
                           "--seed-sentences", "300", "--threads", "1", "2",
                           "--out", str(RESULTS / "speed_encode")])
        speed_index.main(["--sizes", "100000", "1000000", "--out", str(RESULTS)])
    encode = json.loads((RESULTS / "speed_encode.json").read_text())
    index = json.loads((RESULTS / "speed_index.json").read_text())
    report = {"created": utc_now(), "reused": args.reuse, "versions": library_versions(),
              "speed_encode": {"created": encode["created"], "invocation": encode.get("invocation")},
              "speed_index": {"created": index["created"], "command": index.get("command")},
              "dsir": dsir_per_task(args.pool, args.seeds, args.dsir_domains)}
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md = markdown(report, (RESULTS / "speed_encode.md").read_text(),
                  (RESULTS / "speed_index.md").read_text())
    args.out.with_suffix(".md").write_text(md, encoding="utf-8")
    print(md)


if __name__ == "__main__":
    main()
