"""Bytes the driver receives from a served index's actors per classifier and fused selection, with
the scores kept in the actors (`retriever.serving.remote_scores`) and, for comparison, with every
scan's scores gathered to the driver (what the served path did before: `arrays.score_holder`
made to answer None in this process), at several index sizes.

For each synthetic index (`WORK/index` of `benchmarks/synthetic_index.py`; the serve-bench ones)
a local Ray cluster serves it (`tapt.serve`, `--actors` actors, rows held in RAM); each method
ranks once per path (`Method.rank` on the opened `ServedIndex`, what `select` runs) at
`--budget` with the task of `benchmarks.driver_memory` (100 fresh rows of blob 0, 100 synthetic
sentences of blob 0 as its text). Recorded from `ShardServers.count_traffic` (pickled bytes of
every answer and request; the scorers put once per call as `scorer_bytes`): `received`, `sent`,
`requests`, the seconds, and whether the two paths selected the same segments.

    nice -n 10 .venv/bin/python -m benchmarks.served_bytes \\
        --indexes /tmp/serve_bench/w300k/index,/tmp/serve_bench/w1m/index \\
        --out benchmarks/results/scale/served_bytes
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.speed_encode import machine

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# internal: the report's time, as tapt's own files carry it
from tapt.util.versions import utc_now

RUNS = (("classifier", {}), ("fused", {"wording": "lm"}), ("fused", {}))


def _inputs(index, budget: str):
    from benchmarks.serve_scale import _task
    from benchmarks.synthetic_index import Sentences, Spec
    from tapt.extend import RankingInputs

    # internal: a method's inputs made over the served index, with its corpus cache
    from tapt.retriever.methods import CorpusCache, SegmentView
    from tapt.retriever.ranking.budget import parse_budget

    made = json.loads((Path(index.path).parent / "made.json").read_text())
    spec = Spec(**made["spec"])
    texts, _ = Sentences(spec).make(np.random.default_rng(spec.seed + 2),
                                    np.zeros(100, dtype=np.int64))
    view = SegmentView.of(index, None, "sentence")
    return RankingInputs(index, view, parse_budget(budget), 0, _task(Path(index.path)), texts,
                         CorpusCache(index))


def measure(path: Path, args) -> list[dict[str, Any]]:
    import ray

    import tapt

    # internal: the score holder swapped to gather every scan's scores, the old path, bytes counted
    from tapt.retriever.methods import get_method
    from tapt.retriever.scoring import arrays

    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="WARNING",
             log_to_driver=False)
    out = []
    try:
        with tapt.serve(path, actors=args.actors, cpus_per_actor=args.cpus / args.actors) as served:
            served.warmed()     # torch imported, rows and FAISS parts loaded: not timed below
            traffic = served.servers.count_traffic()
            holder = arrays.score_holder
            for name, params in RUNS:
                method = get_method(name)
                row: dict[str, Any] = {"rows": served.n_sentences, "method": name,
                                       "params": params, "budget": args.budget}
                chosen = {}
                for path_name in ("held", "gathered"):
                    if path_name == "gathered":
                        arrays.score_holder = lambda index: None
                    try:
                        for key in traffic:
                            traffic[key] = 0
                        t0 = time.perf_counter()
                        ranking = method.rank(_inputs(served, args.budget),
                                              method.make_params(params))
                        row[path_name] = {**traffic,
                                          "seconds": round(time.perf_counter() - t0, 2)}
                        chosen[path_name] = np.asarray(ranking.segments).tolist()
                    finally:
                        arrays.score_holder = holder
                row["same_selection"] = chosen["held"] == chosen["gathered"]
                out.append(row)
                print(json.dumps(row), flush=True)
    finally:
        ray.shutdown()
    return out


def report(rows: list[dict[str, Any]], args, host: dict[str, Any]) -> str:
    cmd = ("nice -n 10 .venv/bin/python -m benchmarks.served_bytes --indexes "
           f"{args.indexes} --budget {args.budget} --actors {args.actors} --cpus {args.cpus} "
           f"--out {args.out}")
    lines = [f"Measured {utc_now()[:10]} on {host.get('cpu', 'this machine')} "
             f"({host.get('cores')} cores, shared with other work: the seconds are loose), "
             f"`{cmd}`. *held*: the scores kept in the actors (`remote_scores`); *gathered*: "
             "every scan's scores gathered to the serving process, as before. Bytes are "
             "pickled answers (`ShardServers.count_traffic`); *scorers*: the fitted scorers "
             "and models, put once per call into Ray's object store and shared by the actors "
             "(held path). Seconds after the actors' warm-up (`ServedIndex.warmed`).", "",
             "| rows | method | received, held (bytes) | received, gathered (bytes) | "
             "scorers (bytes) | requests, held | seconds held / gathered | same selection |",
             "|---:|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        name = r["method"] + (f" ({', '.join(f'{k} {v}' for k, v in r['params'].items())})"
                              if r["params"] else "")
        lines.append(f"| {r['rows']:,} | {name} | {r['held']['received']:,} | "
                     f"{r['gathered']['received']:,} | {r['held']['scorer_bytes']:,} | "
                     f"{r['held']['requests']:,} | "
                     f"{r['held']['seconds']} / {r['gathered']['seconds']} | "
                     f"{'yes' if r['same_selection'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--indexes", required=True, help="index directories, comma-separated")
    parser.add_argument("--budget", default="10000sent")
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True, help="results path (no suffix)")
    args = parser.parse_args(argv)
    rows = []
    for path in args.indexes.split(","):
        rows += measure(Path(path), args)
    host = machine()
    write_json_atomic(args.out.with_suffix(".json"),
                      {"date": utc_now(), "machine": host, "budget": args.budget,
                       "actors": args.actors, "rows": rows})
    with atomic_write(args.out.with_suffix(".md")) as fh:
        fh.write(report(rows, args, host))


if __name__ == "__main__":
    main()
