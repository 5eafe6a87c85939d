"""Peak memory of a budgeted selection with `context` document, per corpus sentence.

`--context document` scores every sentence by its document's shrunk mean score
(`retriever.ranking.document_pooling`). This measures, with `tracemalloc` (numpy's allocations included), the
peak of ranking one float32 score per sentence (given, not counted) at segment size 1 with a
budget, three ways:

- *before*: `document_scores` of revision `--before` (loaded from git: whole float64 arrays of
  the scores, each sentence's document and their deviations), then the segment means and the
  budget's prefix of their ranking, as `by_sentence_scores` did;
- *whole*: this revision's `by_sentence_scores` on its whole-array path (a budget above 1/16 of
  the sentences): the per-document estimates in runs (`DocumentPooling`), the pooled score of
  every sentence, then the ranking;
- *streamed*: this revision's `by_sentence_scores` with a budget of at most 1/16 of the
  sentences: the pooled scores computed run by run into the budget's cut (`topcut.parts_cut`).

All three select the same sentences with the same scores (checked). Documents: lengths drawn
from a geometric distribution (mean `--doc-mean` sentences), scores a document effect plus
noise, seeded.

    python -m benchmarks.context_memory --rows 10000000 --out benchmarks/results/scale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from benchmarks.measure import module_at, traced, write_report

# internal: by_sentence_scores' peak is what is traced, on a segment view of synthetic documents,
#   with its streaming threshold forced
from tapt.retriever.methods import SegmentView, base, segments

# internal: the old path's budget cut, redone here as by_sentence_scores did it
from tapt.retriever.ranking.budget import budget_target, cut, parse_budget

# internal: the old path's segment means, redone here
from tapt.retriever.scoring import arrays

# internal: the report's time, as tapt's own files carry it
from tapt.util.versions import utc_now


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--doc-mean", type=float, default=20.0, help="mean sentences a document")
    p.add_argument("--budget", default="100000sent")
    p.add_argument("--before", default="15058d4", help="git revision of the 'before' pooling")
    p.add_argument("--out", type=Path, default=None, help="write context_memory.{json,md}")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    lengths = rng.geometric(1.0 / args.doc_mean, size=int(2 * args.rows / args.doc_mean) + 16)
    ends = np.cumsum(lengths)
    lengths = lengths[:int(np.searchsorted(ends, args.rows)) + 1]
    lengths[-1] -= int(lengths.sum()) - args.rows
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    n = args.rows
    scores = np.repeat(rng.normal(size=len(lengths)).astype(np.float32), lengths)
    scores += rng.normal(size=n).astype(np.float32)
    offsets = np.arange(n + 1, dtype=np.int64)
    ones = np.ones(n, dtype=np.int32)
    view = SegmentView(offsets, ones, ones * 20, "document", starts)
    budget = parse_budget(args.budget)
    old = module_at(args.before, "retriever/ranking/document_pooling.py", "context_before")

    def before():
        pooled, _ = old.document_scores(scores, starts)
        seg = arrays.segment_mean(pooled, ones)
        del pooled
        target = budget_target(budget, ones, view.tokens)
        chosen = cut(base.budget_order(view, seg, budget), budget, target, ones, view.tokens)
        return chosen, seg[chosen]

    def ours(share: float):
        def run():
            saved, segments.STREAM_SHARE = segments.STREAM_SHARE, share
            try:
                ranking = base.by_sentence_scores(view, scores, budget, {})
            finally:
                segments.STREAM_SHARE = saved
            return ranking.segments, ranking.scores
        return run

    ours(1.0)()                       # warm-up: imports and first-call allocations
    results = {}
    for label, fn in (("before", before), ("whole", ours(0.0)), ("streamed", ours(1.0))):
        (ids, chosen_scores), peak, seconds = traced(fn)
        results[label] = {"peak_bytes": peak, "bytes_per_row": round(peak / n, 2),
                          "seconds": round(seconds, 2), "selected": int(len(ids)),
                          "ids": ids, "scores": chosen_scores}
    for label in ("whole", "streamed"):
        if not (np.array_equal(results[label]["ids"], results["before"]["ids"])
                and np.array_equal(results[label]["scores"], results["before"]["scores"])):
            raise SystemExit(f"{label} selected differently from before")
    for r in results.values():
        del r["ids"], r["scores"]
    report = {"date": utc_now(), "rows": n, "documents": int(len(lengths)),
              "doc_mean": args.doc_mean, "budget": args.budget, "before": args.before,
              **results,
              "command": "python -m benchmarks.context_memory " + " ".join(argv or sys.argv[1:])}
    lines = [
        "## Measured: peak memory of a budgeted selection with `context` document",
        "",
        f"Measured {report['date']} with `benchmarks/context_memory.py`: {n:,} float32 "
        f"sentence scores (given, not counted) in {len(lengths):,} documents (geometric "
        f"lengths, mean {args.doc_mean:g} sentences), segment size 1, budget {args.budget}; "
        "peaks traced with `tracemalloc` (numpy's allocations included) after a warm-up. "
        f"*before* = revision {args.before}'s `document_scores` then the segment means and the "
        "budget's ranking; *whole* = this revision's whole-array path (per-document estimates "
        "in runs, every pooled score, then the ranking); *streamed* = the pooled scores "
        "computed run by run into the budget's cut (`Index.select` streams budgets of at most "
        "1/16 of the sentences). All three selected the same sentences with the same scores.",
        "",
        "| path | peak | per sentence | seconds |",
        "|---|---:|---:|---:|",
    ]
    for label in ("before", "whole", "streamed"):
        r = results[label]
        lines.append(f"| {label} | {r['peak_bytes'] / 1e6:.0f} MB | {r['bytes_per_row']} B | "
                     f"{r['seconds']} |")
    lines += ["", "Regenerate:", "", f"    {report['command']}", ""]
    text = "\n".join(lines)
    write_report(args.out, "context_memory", report, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
