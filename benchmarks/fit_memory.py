"""Peak memory of the classifier's fit and of a ranking of every row, per corpus row.

The PU classifier (`classifier`, and the meaning half of `fused`) scores every corpus row once
per self-training round and samples its negatives from a stretch of the ranking of those
scores. This measures, with `tracemalloc` (numpy's allocations included), the peak of
`pu.pu_classifier` on synthetic unit rows (the corpus and its pre-ranking already in memory,
not counted), of `Classifier.fit` as a selection runs it (its centroid pre-ranking computed
inside and counted), and of `scoring.rank` of one float32 score per row, and prints a digest of the
fit's scores so that two revisions can be compared for equal results.

    python -m benchmarks.fit_memory --rows 4000000 --out benchmarks/results/scale
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

from benchmarks.measure import traced

# internal: the PU classifier's fit is what is traced, on synthetic rows, with its draw threshold
#   set per run
from tapt.retriever.learned import pu
from tapt.retriever.learned.pu import PUConfig, pu_classifier

# internal: the pre-ranking, the ranking of every row and the fusion traced apart
from tapt.retriever.scoring import arrays

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# internal: the report's time, as tapt's own files carry it
from tapt.util.versions import utc_now


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--dim", type=int, default=32, help="dimensions of the synthetic rows")
    p.add_argument("--task", type=int, default=200, help="task rows")
    p.add_argument("--positives", type=int, default=20_000, help="n_positive (the budget)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--exact-draw-rows", type=int, default=None,
                   help="pu.EXACT_DRAW_ROWS for this run (0: every fit draws its negatives "
                        "in row order, without ranking keys)")
    p.add_argument("--label", default="", help="what this run measures (e.g. a revision)")
    p.add_argument("--out", type=Path, default=None, help="write fit_memory[-LABEL].{json,md}")
    args = p.parse_args(argv)
    if args.exact_draw_rows is not None:
        pu.EXACT_DRAW_ROWS = args.exact_draw_rows
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((args.rows, args.dim), dtype=np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    task = corpus[: args.task] + np.float32(0.1)
    prerank = arrays.Linear(arrays.centroid(task), cosine=True)(corpus)
    config = PUConfig(rounds=args.rounds, seed=0)
    # warm-up on a slice: imports (scikit-learn) and first-call allocations are not per row
    pu_classifier(corpus[:5000], task, prerank[:5000], 200, config)
    (scores, _, _), fit_peak, fit_s = traced(
        lambda: pu_classifier(corpus, task, prerank, args.positives, config))
    # the fit as a selection runs it (`Classifier.fit`): the pre-ranking computed inside it,
    # counted, and handed over to the fit
    from types import SimpleNamespace

    # internal: the classifier method's own fit traced on the synthetic rows, with no index
    from tapt.retriever.methods import get_method

    classifier = get_method("classifier")
    rows = SimpleNamespace(embeddings=corpus, n_sentences=len(corpus),
                           score_rows=lambda scorer: scorer(corpus))
    ctx = SimpleNamespace(index=rows, n_positive=args.positives, seed=0)
    params = classifier.make_params({"rounds": args.rounds})
    (_, method_scores, _), method_peak, method_s = traced(
        lambda: classifier.fit(ctx, task, params))
    _, rank_peak, rank_s = traced(lambda: arrays.rank(prerank))
    fused_top, fuse_peak, fuse_s = traced(lambda: arrays.rank_top(
        arrays.fuse_zscores(scores, prerank), args.positives))
    n = args.rows
    report = {"date": utc_now(), "label": args.label, "rows": n, "dim": args.dim,
              "task": args.task, "n_positive": args.positives, "rounds": args.rounds,
              "exact_draw_rows": pu.EXACT_DRAW_ROWS,
              "fit_peak_bytes": fit_peak, "fit_bytes_per_row": round(fit_peak / n, 2),
              "fit_seconds": round(fit_s, 2),
              "method_fit_peak_bytes": method_peak,
              "method_fit_bytes_per_row": round(method_peak / n, 2),
              "method_fit_seconds": round(method_s, 2),
              "method_scores_sha256": hashlib.sha256(
                  np.ascontiguousarray(method_scores).tobytes()).hexdigest(),
              "rank_peak_bytes": rank_peak,
              "rank_bytes_per_row": round(rank_peak / n, 2), "rank_seconds": round(rank_s, 2),
              "fuse_peak_bytes": fuse_peak, "fuse_bytes_per_row": round(fuse_peak / n, 2),
              "fuse_seconds": round(fuse_s, 2),
              "fused_top_sha256": hashlib.sha256(fused_top.tobytes()).hexdigest(),
              "scores_sha256": hashlib.sha256(np.ascontiguousarray(scores).tobytes()).hexdigest(),
              "command": "python -m benchmarks.fit_memory " + " ".join(argv or sys.argv[1:])}
    line = (f"{args.label or 'this revision'}: {n:,} rows, fit peak {fit_peak / 1e6:.0f} MB "
            f"({report['fit_bytes_per_row']} B/row, {report['fit_seconds']} s), "
            f"Classifier.fit peak {method_peak / 1e6:.0f} MB "
            f"({report['method_fit_bytes_per_row']} B/row, pre-ranking included), rank peak "
            f"{rank_peak / 1e6:.0f} MB ({report['rank_bytes_per_row']} B/row), fuse + rank_top "
            f"peak {fuse_peak / 1e6:.0f} MB ({report['fuse_bytes_per_row']} B/row, "
            f"{report['fuse_seconds']} s), scores sha256 {report['scores_sha256'][:16]}, fused "
            f"top sha256 {report['fused_top_sha256'][:16]}")
    print(line)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = "fit_memory" + (f"-{args.label}" if args.label else "")
        write_json_atomic(args.out / f"{stem}.json", report)
        with atomic_write(args.out / f"{stem}.md") as fh:
            fh.write(f"{line}\n\nCommand: `{report['command']}` ({report['date']})\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
