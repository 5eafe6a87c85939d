"""Serving at scale: how long Ray actors take to start on a synthetic index, how many bytes a
selection request and its answers carry, and a served centroid selection's latency beside the
same selection in one process.

For each index (`benchmarks/synthetic_index.py`, built beforehand): a local Ray cluster of
`--ray-cpus` CPUs is started once (not timed), then

- start: `tapt.serve(index, actors=N, cpus_per_actor=C)` with an empty tapt cache (no hash
  stamp: every actor hashes its own shards' large files), then again with the stamps the first
  start wrote; the seconds of the driver's open and of the actors' start (each actor opening
  and verifying only its own shards) separately. With `--before MODULE`, the same start with the
  `ShardServers` of that file (the implementation before this change, where every actor opened
  and checked the whole index), in the same cluster, on the first index. The file measured as
  "before": `git show c881158:retriever/serving/actors.py` with its three relative imports
  (`from ..scoring`, `from ..ranking`) made absolute (`from tapt.retriever.scoring`, ...).
  With `--previous MODULE`, the same for a second file (its driver opening the index as
  `ServedIndex` does): the start before the warm-up, `git show d43b40a:retriever/serving/
  actors.py`, its relative imports made absolute. `--starts N`: N rounds of these starts,
  side by side, in the reverse order every other round; each start's load average recorded;
- warm-up: after a start, the seconds until every actor has made ready what only requests
  need (torch imported, rows copied into RAM, FAISS parts loaded: `ShardServers.warmed`), and
  the first request then; and the first request at once after another start;
- bytes: the pickled size of what the driver sends each actor for one centroid selection's
  cut (beside the scorer, put once and shared) and of what the actors return;
- latency: a centroid selection at `--budget` (the task: 100 fresh rows of blob 0), local
  (`Index`) and served, `--repeats` times each, alternating; first and best seconds, and whether
  the two select the same segments with the same scores.

Regenerate (2 shared cores: 8 actors of a quarter CPU each on a 2-CPU Ray cluster; each
WORK built beforehand by `synthetic_index.make_index(WORK, Spec(rows=..., shards=8))`):

    nice -n 10 .venv/bin/python -m benchmarks.serve_scale --index 1M=WORK1M/index \\
        --index 300k=WORK300k/index --index 3M=WORK3M/index --before BEFORE.py \\
        --previous PREVIOUS.py --starts 3 --out benchmarks/results/scale/serve
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("serve_scale")


def _task(index_dir: Path) -> np.ndarray:
    from benchmarks.synthetic_index import Spec, blob_rows, centres

    made = json.loads((index_dir.parent / "made.json").read_text())
    spec = Spec(**made["spec"])
    rng = np.random.default_rng(spec.seed + 1)
    return blob_rows(rng, centres(spec), np.zeros(100, dtype=np.int64), spec.noise)


def _select(index, task: np.ndarray, budget: str):
    from tapt.extend import RankingInputs

    # internal: centroid ranked on the served index's actors and in one process with the same task
    #   rows
    from tapt.retriever.methods import SegmentView, get_method
    from tapt.retriever.ranking.budget import parse_budget

    method = get_method("centroid")
    view = SegmentView.of(index, None, "sentence")
    ctx = RankingInputs(index, view, parse_budget(budget), 0, task)
    t0 = time.perf_counter()
    ranking = method.rank(ctx, method.make_params({}))
    return time.perf_counter() - t0, ranking


def _start(path: Path, args, cold: bool, module=None, driver_hashes: bool = True
           ) -> tuple[Any, dict[str, float]]:
    """A served index started (`cold`: with no hash stamp in the tapt cache); its seconds and
    the load average (1 minute) when it ended. With `module`, that file's `ShardServers`, its
    driver opening the index as `tapt.Index` does (`driver_hashes`) or as `ServedIndex` does
    (only the offsets and token counts hashed)."""
    import contextlib
    import shutil

    import tapt
    from tapt import Index

    # internal: the verified-files record cleared, so a start pays the hashing a new driver pays
    from tapt.indexer.store import integrity

    stamps = Path(os.environ["TAPT_CACHE_DIR"]) / integrity.STAMPS
    if cold and stamps.is_dir():
        shutil.rmtree(stamps)            # the benchmark's own cache directory
        stamps.mkdir()
    integrity._VERIFIED.clear()          # as a new driver process
    t0, wall = time.perf_counter(), time.time()
    if module is None:
        served = tapt.ServedIndex(path, actors=args.actors,
                                  cpus_per_actor=args.cpus_per_actor)
        total = time.perf_counter() - t0
        reports = served.actor_reports()
        return served, {"total_s": round(total, 2),
                        "actors_s": round(served.servers.start_seconds, 2),
                        "driver_open_s": round(total - served.servers.start_seconds, 2),
                        "slowest_actor_open_s": max(r["seconds"] for r in reports),
                        # seconds after the call when the actors' own starts began (all before
                        # is the driver's open, Ray's scheduling and its worker processes'
                        # start) and ended; how many worker processes had started before it
                        "actor_starts_began_s": [round(min(r["began_at"] for r in reports)
                                                       - wall, 2),
                                                 round(max(r["began_at"] for r in reports)
                                                       - wall, 2)],
                        "last_actor_done_s": round(max(r["began_at"] + r["seconds"]
                                                       for r in reports) - wall, 2),
                        "workers_started_before": sum(r["began_at"] - r["process_s"] < wall
                                                      for r in reports),
                        "worker_cpu_s": round(sum(r.get("cpu_before_s", 0) for r in reports), 2),
                        "actors_open_cpu_s": round(sum(r.get("cpu_s", 0) for r in reports), 2),
                        "load_average": round(os.getloadavg()[0], 1)}
    with contextlib.nullcontext() if driver_hashes else integrity.hashing(0, False):
        index = Index(path)
    opened = time.perf_counter()
    servers = module.ShardServers(index, None, args.actors, args.cpus_per_actor)
    done = time.perf_counter()
    return servers, {"total_s": round(done - t0, 2), "actors_s": round(done - opened, 2),
                     "driver_open_s": round(opened - t0, 2),
                     "load_average": round(os.getloadavg()[0], 1)}


def measure(name: str, path: Path, args, before, previous=None) -> dict[str, Any]:
    """Start, bytes and latency on one index."""
    from tapt import Index

    out: dict[str, Any] = {"index": name, "starts": []}
    # `--starts` rounds, each implementation's cold and warm start side by side in each round,
    # in the reverse order every other round (the machine's load changes from minute to minute)
    kinds = (("", None, False), ("previous_", previous, False), ("before_", before, True))
    for run in range(args.starts):
        for key, module, hashes in kinds if run % 2 == 0 else kinds[::-1]:
            if key and module is None:
                continue
            for cold in (True, False):
                kind = f"start_{key}{'cold' if cold else 'warm'}"
                served, figures = _start(path, args, cold, module, hashes)
                if run == 0:
                    out[kind] = figures
                    if kind == "start_cold":
                        out["actor_reports"] = served.actor_reports()
                out["starts"].append({"kind": kind[6:].replace("_", " "), "run": run + 1,
                                      **figures})
                served.close()
    task = _task(path)
    # the actors' warm-up (torch imported, rows copied, FAISS parts loaded) waited for, then
    # the first request
    served, _ = _start(path, args, False)
    began = time.perf_counter()
    steps = served.warmed()
    out["warm_up_s"] = round(time.perf_counter() - began, 2)
    out["warm_up_steps_max_s"] = {k: max(s.get(k, 0) for s in steps) for k in steps[0]}
    out["first_request_after_warm_up_s"] = round(_select(served, task, args.budget)[0], 2)
    out["warm_up_load_average"] = round(os.getloadavg()[0], 1)
    served.close()
    # the first request at once after the start (it waits for what it needs of the warm-up)
    served, _ = _start(path, args, False)
    local = Index(path)
    out["rows"], out["shards"] = local.n_sentences, len(local.shards)
    traffic = served.servers.count_traffic()
    out["first_request_s"] = round(_select(served, task, args.budget)[0], 2)
    out["first_request_load_average"] = round(os.getloadavg()[0], 1)
    out["bytes_per_request"] = {"sent_per_actor": traffic["sent"] // max(traffic["requests"],
                                                                         1),
                                "scorer_once": traffic["scorer_bytes"],
                                "received_all_actors": traffic["received"],
                                "actors_asked": traffic["requests"]}
    served.servers.traffic = None
    times: dict[str, list[float]] = {"local": [], "served": []}
    rankings: dict[str, Any] = {}
    for _ in range(args.repeats):
        for kind, index in (("local", local), ("served", served)):
            seconds, rankings[kind] = _select(index, task, args.budget)
            times[kind].append(seconds)
    served.close()
    same = (np.array_equal(rankings["local"].segments, rankings["served"].segments)
            and np.array_equal(rankings["local"].scores, rankings["served"].scores))
    out["latency"] = {kind: {"first_s": round(t[0], 3), "best_s": round(min(t), 3),
                             "median_s": round(statistics.median(t), 3)}
                      for kind, t in times.items()}
    out["served_over_local_best"] = round(min(times["served"]) / min(times["local"]), 2)
    out["same_selection"] = bool(same)
    out["selected_segments"] = int(len(rankings["served"].segments))
    out["load_average"] = round(os.getloadavg()[0], 1)
    return out


def _load_before(path: str, name: str):
    from ray import cloudpickle

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    return module


def run_meta(args) -> dict[str, Any]:
    """What a run was: its command, settings, machine and time."""
    from benchmarks.speed_encode import machine

    return {"machine": machine(), "command": " ".join(["python -m benchmarks.serve_scale"]
                                                      + sys.argv[1:]),
            "actors": args.actors, "cpus_per_actor": args.cpus_per_actor,
            "ray_cpus": args.ray_cpus, "budget": args.budget, "repeats": args.repeats,
            "starts": args.starts, "before": args.before, "previous": args.previous,
            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_report(results: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> None:
    """`out`.json (the results) and `out`.md (their tables)."""
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results},
                                                   indent=1) + "\n")
    args = argparse.Namespace(**{k: meta[k] for k in ("actors", "cpus_per_actor", "ray_cpus",
                                                      "budget", "repeats")})
    host = meta["machine"]
    where = (f"{host.get('cpu', '?')} ({host.get('cores', '?')} cores, shared with other "
             "developers' jobs: see the load average column)") if isinstance(host, dict) \
        else str(host)
    lines = ["## Measured: serving a synthetic index from Ray actors", "",
             f"Measured {meta['measured']} on {where}: a local Ray cluster of "
             f"{args.ray_cpus} CPUs, {args.actors} actors of {args.cpus_per_actor:g} CPU each "
             "(8 actors on 2 shared cores: each start is mostly process start-up, run "
             "side by side), the synthetic indexes of `benchmarks/synthetic_index.py` "
             "(8 shards, float16 rows, IVF-PQ parts).", "",
             "Regenerate (the indexes first, one per size: rows in 8 shards):", "",
             "    nice -n 10 .venv/bin/python -c \"from pathlib import Path; from "
             "benchmarks.synthetic_index import Spec, make_index; "
             "make_index(Path('WORK'), Spec(rows=1_000_000, shards=8))\"",
             f"    nice -n 10 .venv/bin/{meta['command']}", "",
             "Start (seconds, from the call to the last actor's answer; cold: an empty tapt "
             "cache, every file hashed; warm: the hash stamps of the cold start; the load "
             "average (1 minute) when the start ended beside each; own starts began: seconds "
             "after the call when the first and the last actor's own start (its `__init__`: "
             "opening and verifying its shards) began, all before being the driver's open, "
             "Ray's scheduling and its worker processes' start (how many of the 8 worker "
             "processes had started before the call: prestarted); CPU: the actors' processes' "
             "CPU seconds, all actors, before their own start (Ray worker start-up, imports) / "
             "in it"
             + ("; before: the implementation where every actor opened and checked the whole "
                "index, `git show c881158:retriever/serving/actors.py`, its relative imports "
                "made absolute, its driver opening the index as `tapt.Index` does"
                if meta.get("before") else "")
             + ("; previous: the start before the warm-up (each actor copying its rows, "
                "loading its FAISS parts at its start), `git show d43b40a:retriever/serving/"
                "actors.py`, its relative imports made absolute" if meta.get("previous")
                else "") + "):", "",
             "| index | rows | start | round | total (s) | driver open (s) | actors (s) | own "
             "starts began (s) | prestarted | CPU before / in own start (s) | load average |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    order = ["cold", "warm", "previous cold", "previous warm", "before cold", "before warm"]
    for r in results:
        starts = r.get("starts") or [{"kind": key[6:].replace("_", " "), "run": 1, **r[key]}
                                     for key in ("start_cold", "start_warm",
                                                 "start_previous_cold", "start_previous_warm",
                                                 "start_before_cold", "start_before_warm")
                                     if key in r]
        for s in sorted(starts, key=lambda s: (order.index(s["kind"]), s["run"])):
                cpu = (f"{s['worker_cpu_s']} / {s['actors_open_cpu_s']}"
                       if "worker_cpu_s" in s else "-")
                began = ("-" if "actor_starts_began_s" not in s else
                         "{} - {}".format(*s["actor_starts_began_s"]))
                lines.append(f"| {r['index']} | {r['rows']:,} | {s['kind']} | {s['run']} | "
                             f"{s['total_s']} | {s['driver_open_s']} | {s['actors_s']} | "
                             f"{began} | {s.get('workers_started_before', '-')} | {cpu} | "
                             f"{s.get('load_average', '-')} |")
    lines += ["", "Median total over the rounds (the load averages of its rounds): "
              + "; ".join(f"{r['index']} " + ", ".join(
                  f"{kind} {statistics.median(s['total_s'] for s in group)} s "
                  f"({min(s['load_average'] for s in group)}-"
                  f"{max(s['load_average'] for s in group)})"
                  for kind in order
                  if (group := [s for s in r.get("starts", []) if s["kind"] == kind]))
                  for r in results if r.get("starts")) + "."]
    lines += ["", f"Bytes of one centroid selection at {args.budget} (pickled): sent to each "
              "actor beside the scorer, the scorer (put once), and all actors' answers:", "",
              "| index | rows | sent per actor | scorer | received (all actors) |",
              "|---|---:|---:|---:|---:|"]
    for r in results:
        b = r["bytes_per_request"]
        lines.append(f"| {r['index']} | {r['rows']:,} | {b['sent_per_actor']:,} | "
                     f"{b['scorer_once']:,} | {b['received_all_actors']:,} |")
    lines += ["", "The first request (a centroid selection at the budget) after a start: at "
              "once (it waits for each actor's torch import, which the warm-up after the start "
              "began, and cuts its segments at the request's size, kept for later requests), "
              "and after waiting for the actors' warm-up (seconds from the start's end until "
              "every actor had imported torch, copied its rows into RAM and loaded its FAISS "
              "parts; the slowest actor's seconds of each step):", "",
              "| index | first request at once (s) | load average | warm-up (s) | torch / rows "
              "/ FAISS (s) | first request after it (s) | load average |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        steps = r.get("warm_up_steps_max_s", {})
        lines.append(f"| {r['index']} | {r['first_request_s']} | "
                     f"{r.get('first_request_load_average', '-')} | {r.get('warm_up_s', '-')} | "
                     f"{steps.get('torch', '-')} / {steps.get('held', '-')} / "
                     f"{steps.get('parts', '-')} | {r.get('first_request_after_warm_up_s', '-')} "
                     f"| {r.get('warm_up_load_average', '-')} |")
    lines += ["", f"Centroid at {args.budget}, {args.repeats} runs each, alternating (seconds):",
              "", "| index | local first / best | served first / best | served / local (best) "
              "| same selection | load average |", "|---|---:|---:|---:|---|---:|"]
    for r in results:
        lo, se = r["latency"]["local"], r["latency"]["served"]
        lines.append(f"| {r['index']} | {lo['first_s']} / {lo['best_s']} | {se['first_s']} / "
                     f"{se['best_s']} | {r['served_over_local_best']} | "
                     f"{'yes' if r['same_selection'] else 'NO'} | {r['load_average']} |")
    lines += ["", "What each actor opened (the first index, cold start): its own shards "
              "verified, the next shard's rows its last scoring block reaches mapped:", "",
              "| actor | shards | verified | reached | rows | open (s) | process age at its "
              "start (s) | CPU before / in open (s) |",
              "|---:|---|---|---|---|---:|---:|---:|"]
    for i, rep in enumerate(results[0]["actor_reports"]):
        lines.append(f"| {i} | {', '.join(rep['shards'])} | {', '.join(rep['verified'])} | "
                     f"{', '.join(rep['reached']) or '-'} | {rep['rows'][0]:,}-"
                     f"{rep['rows'][1]:,} | {rep['seconds']} | {rep.get('process_s', '-')} | "
                     f"{rep.get('cpu_before_s', '-')} / {rep.get('cpu_s', '-')} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", action="append", default=[],
                        help="NAME=PATH of a synthetic index (repeatable)")
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--cpus-per-actor", type=float, default=0.25)
    parser.add_argument("--ray-cpus", type=int, default=2)
    parser.add_argument("--budget", default="10000sent")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--starts", type=int, default=1,
                        help="rounds of starts (each: cold and warm of every implementation)")
    parser.add_argument("--before", help="a file with the ShardServers to compare with")
    parser.add_argument("--previous", help="a second such file (its driver opening the index "
                        "as ServedIndex does)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--render", action="store_true",
                        help="only write OUT.md again from OUT.json")
    args = parser.parse_args(argv)
    if args.render:
        data = json.loads(args.out.with_suffix(".json").read_text())
        write_report(data["results"], data["meta"], args.out)
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import ray

    cache = tempfile.mkdtemp(prefix="serve-scale-cache-")
    os.environ["TAPT_CACHE_DIR"] = cache        # before Ray starts: its workers inherit it
    ray.init(address="local", num_cpus=args.ray_cpus, include_dashboard=False,
             logging_level="WARNING", log_to_driver=False)
    before = _load_before(args.before, "serve_before") if args.before else None
    previous = _load_before(args.previous, "serve_previous") if args.previous else None
    meta, results = run_meta(args), []
    try:
        for spec in args.index:
            name, _, path = spec.partition("=")
            # the implementation before: on the first index only (every actor hashing the
            # whole index takes minutes at larger sizes on this machine)
            first = not results
            results.append(measure(name, Path(path), args, before if first else None,
                                   previous if first else None))
            log.info("%s", json.dumps(results[-1])[:2000])
            write_report(results, meta, args.out)
    finally:
        ray.shutdown()
        import shutil

        shutil.rmtree(cache, ignore_errors=True)     # the temporary cache made above


if __name__ == "__main__":
    main()
