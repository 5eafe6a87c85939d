#!/usr/bin/env python
"""Kill index builds at random moments, resume them, compare with an uninterrupted build.

Each trial SIGKILLs a child `build_index` process KILLS times (each after a random number of its
window commits plus a random delay, so kills land mid-write as well as between writes), then lets
it finish, and compares the result row for row (embeddings, token counts, document offsets, every
LMDB record, FAISS row count, checksums) with a build that was never interrupted. The encoder is
tests/conftest.py's deterministic hashing encoder, so the check is bit-exact and fast; the text is
real (the bundled sample pool by default).

    python benchmarks/fault_injection.py --corpus data/sample/pool.jsonl.gz --trials 5 --kills 8
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO))

from build_worker import assert_same_index, kill_and_resume  # noqa: E402
from tapt import Index  # noqa: E402

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=REPO / "data" / "sample" / "pool.jsonl.gz")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--kills", type=int, default=8)
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--delay", type=float, default=0.05, help="seconds of sleep per window")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "fault_injection")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tapt-faults-"))
    try:
        t0 = time.perf_counter()
        reference = work / "reference"
        kill_and_resume(args.corpus, reference, random.Random(0), 0, args.delay, args.window)
        total = Index(reference).n_sentences
        ref_seconds = time.perf_counter() - t0
        trials = []
        for seed in range(args.trials):
            out = work / f"trial-{seed}"
            t0 = time.perf_counter()
            seen = kill_and_resume(args.corpus, out, random.Random(seed), args.kills, args.delay,
                                   args.window)
            try:
                assert_same_index(out, reference)
                verdict = "identical"
            except AssertionError as exc:
                verdict = f"DIFFERENT: {str(exc).splitlines()[0]}"
            trials.append({"seed": seed, "kills": args.kills, "committed_rows_at_kills": seen,
                           "seconds": round(time.perf_counter() - t0, 1), "result": verdict})
            print(f"trial {seed}: {args.kills} kills at {seen} -> {verdict}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {"created": utc_now(), "corpus": str(args.corpus), "sentences": total,
              "window": args.window, "reference_seconds": round(ref_seconds, 1),
              "trials": trials, "versions": library_versions()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    ok = sum(t["result"] == "identical" for t in trials)
    lines = [
        "# Fault injection: killed builds resume row for row (`benchmarks/fault_injection.py`)", "",
        f"Corpus `{args.corpus.relative_to(REPO) if args.corpus.is_relative_to(REPO) else args.corpus}` "
        f"({total:,} sentences, `--no-split`), windows of {args.window} sentences, hashing encoder "
        f"(bit-exact), SIGKILL from the parent process. {ok} of {len(trials)} trials identical to "
        "the uninterrupted build.", "",
        "| trial | kills | committed sentences seen before each kill | seconds | result |",
        "|---|---:|---|---:|---|"]
    lines += [f"| {t['seed']} | {t['kills']} | {', '.join(map(str, t['committed_rows_at_kills']))} "
              f"| {t['seconds']} | {t['result']} |" for t in trials]
    lines += ["", "Command:", "", "```",
              f"python benchmarks/fault_injection.py --trials {args.trials} --kills {args.kills} "
              f"--window {args.window} --delay {args.delay}", "```", ""]
    args.out.with_suffix(".md").write_text("\n".join(lines))
    if ok != len(trials):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
