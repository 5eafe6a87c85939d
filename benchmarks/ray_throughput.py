"""Build throughput of `--executor local` vs `--executor ray` on the same input, on this machine.

The first N sentences of the bundled sample (`data/sample/pool.jsonl.gz`, real multi-domain
text) are written into F files (so the index has F shards) and indexed with the packaged model
(all-MiniLM-L6-v2, CPU, float32), without sentence splitting, in parts of W sentences, by:

    local, T torch threads    LocalExecutor in this process (torch's default thread count)
    local, 1 torch thread     the same with one thread: what each Ray actor of 1 CPU gets
    ray, K workers            RayExecutor on a local Ray cluster started here with C logical
                              CPUs, K embedding actors

Each config builds R times, in rotating order after one warm-up build (the load of a shared
machine drifts); reported: medians of the build's wall seconds and of each stage's (prepare,
embed, assemble, train, index; timed around each `Executor.map`), sentences/s over the build
and over the embed stage, the machine's load average before each build, and the seconds the Ray
cluster took to start (not in any build's time). Every build must hold the same rows; the
largest embedding difference between builds is reported. On a machine with few cores the point
is Ray's overhead, not a speed-up.

    nice -n 10 python benchmarks/ray_throughput.py     # 1,000 sentences, 2 files, R = 3
    python benchmarks/ray_throughput.py --sentences 20007 --files 4 --workers 1 2 3 \
        --ray-cpus 4 --out /tmp/ray-bench
"""

from __future__ import annotations

import argparse
import gzip
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.speed_encode import machine  # noqa: E402

SAMPLE = REPO / "data" / "sample" / "pool.jsonl.gz"
OUT = REPO / "benchmarks" / "results" / "ray"


class TimedExecutor:
    """Wraps an executor: wall seconds per stage (summed over the stage's `map` calls)."""

    def __init__(self, inner) -> None:
        from tapt.extend import Executor

        class _Timed(Executor):
            name = "timed"

            def map(_, stage, tasks, encoder=None):
                t0 = time.perf_counter()
                try:
                    return inner.map(stage, tasks, encoder)
                finally:
                    self.seconds[stage.name] = self.seconds.get(stage.name, 0.0) + \
                        time.perf_counter() - t0

            def close(_):
                inner.close()

        self.seconds: dict[str, float] = {}
        self.executor = _Timed()


def write_input(out: Path, sentences: int, files: int) -> list[Path]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as fh:
        rows = [line for line, _ in zip(fh, range(sentences))]
    paths = []
    for k, chunk in enumerate(np.array_split(np.arange(len(rows)), files)):
        path = out / f"part-{k}.jsonl"
        path.write_text("".join(rows[i] for i in chunk), encoding="utf-8")
        paths.append(path)
    return paths


def run(name: str, inputs: list[Path], out: Path, executor, window: int, shards: int,
        spec, encoder) -> dict[str, Any]:
    """One build into `out` (replaced); its wall and per-stage seconds."""
    # internal: each build run through a stage-timing wrapper of the executor, on one loaded
    #   encoder
    from tapt.indexer.building.pipeline import BuildConfig, build_index

    timed = TimedExecutor(executor)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    manifest = build_index([str(p) for p in inputs], out, encoder,
                           BuildConfig(split=False, progress=False, part_size=window,
                                       shards=shards, embedding_dtype="float32",
                                       overwrite=True),
                           executor=timed.executor, encoder_spec=spec)
    wall = time.perf_counter() - t0
    rows = manifest["counts"]["sentences"]
    return {"config": name, "sentences": rows, "shards": len(manifest["shards"]),
            "build_seconds": wall, "stage_seconds": dict(timed.seconds),
            "encoder_seconds_sum": manifest["build"]["embed_seconds"], "load_average": load}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over one config's repeats."""
    rows = runs[0]["sentences"]
    build = float(np.median([r["build_seconds"] for r in runs]))
    stages = {k: round(float(np.median([r["stage_seconds"].get(k, 0.0) for r in runs])), 2)
              for k in runs[0]["stage_seconds"]}
    embed = stages.get("embed", 0.0)
    return {"config": runs[0]["config"], "sentences": rows, "shards": runs[0]["shards"],
            "repeats": len(runs), "build_seconds": round(build, 2),
            "build_seconds_all": [round(r["build_seconds"], 2) for r in runs],
            "stage_seconds": stages, "sentences_per_second": round(rows / build, 1),
            "embed_sentences_per_second": round(rows / embed, 1) if embed else None,
            "load_average_before": round(float(np.median([r["load_average"] for r in runs])),
                                         2)}


def same_rows(a: Path, b: Path) -> float:
    """Largest embedding difference of two indexes of the same input (their rows must match)."""
    from tapt import Index

    x, y = Index(a), Index(b)
    assert x.n_sentences == y.n_sentences
    assert x.store.texts(range(x.n_sentences)) == y.store.texts(range(y.n_sentences))
    return float(np.abs(np.asarray(x.embeddings, np.float32) -
                        np.asarray(y.embeddings, np.float32)).max())


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "# Build throughput: local vs Ray executor",
        "",
        f"Measured {result['date']} on {m.get('cpu', '?')} ({m.get('cores')} cores, shared with "
        "other jobs: see the load average before each run), Ray "
        f"{result['ray_version']}, the packaged all-MiniLM-L6-v2 on CPU "
        f"({result['backend']} backend). Input: the first {result['sentences']:,} sentences "
        f"of the bundled sample in {result['files']} files, parts of {result['window']} "
        f"sentences, float32 embeddings. Medians of {result['repeats']} builds per config, "
        "run in rotating order after one warm-up build. The local Ray cluster "
        f"({result['ray_cpus']} logical CPUs) took {result['ray_start_seconds']} s to start "
        "(not counted below).",
        "",
        "| config | build s | sentences/s (build) | embed s | sentences/s (embed) | "
        "prepare s | index s | load avg |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        st = r["stage_seconds"]
        lines.append(f"| {r['config']} | {r['build_seconds']} | {r['sentences_per_second']} | "
                     f"{st.get('embed', 0)} | {r['embed_sentences_per_second']} | "
                     f"{st.get('prepare', 0)} | {st.get('index', 0)} | "
                     f"{r['load_average_before']} |")
    lines += [
        "",
        "Every index holds the same rows; largest embedding difference between any two "
        f"builds {result['max_embedding_difference']:.2e}.",
        "",
        "On this machine the Ray actors share its two cores with each other, the driver and "
        "other jobs (the load average is the machine's, before each build), so the table "
        "measures Ray's overhead, not a speed-up: compare `ray, 1 worker` with `local, 1 torch "
        "thread` (Ray gives an actor of 1 CPU one torch thread). On a cluster each actor has "
        "its own cores or GPU (docs/ray.md).",
        "",
        "Regenerate: `" + result["command"] + "`",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--window", type=int, default=125)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ray-cpus", type=int, default=3,
                        help="Logical CPUs of the local Ray cluster (K workers need K + 1).")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import ray
    import torch

    # internal: the executors compared, as objects, with the encoder spec the Ray actors load
    from tapt.indexer.building.executors import EncoderSpec, LocalExecutor
    from tapt.indexer.building.executors.ray_executor import RayExecutor

    spec = EncoderSpec(None, "cpu", args.backend)
    encoder = spec.load()
    threads = torch.get_num_threads()
    work = Path(tempfile.mkdtemp(prefix="tapt-ray-bench-"))
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        inputs = write_input(work, args.sentences, args.files)
        t0 = time.perf_counter()
        ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False,
                 logging_level="WARNING")
        started = round(time.perf_counter() - t0, 2)
        configs: list[tuple[str, Any, int]] = [
            (f"local, {threads} torch threads", LocalExecutor(progress=False), threads),
            ("local, 1 torch thread", LocalExecutor(progress=False), 1)]
        configs += [(f"ray, {k} worker{'s' if k > 1 else ''} (1 torch thread each)",
                     RayExecutor(ray_workers=k, progress=False), threads) for k in args.workers]
        run("warm-up", inputs, work / "warm", configs[0][1], args.window, args.files, spec,
            encoder)
        worst = 0.0
        try:
            for repeat in range(args.repeats):   # the order rotates: load drifts over time
                order = configs[repeat % len(configs):] + configs[:repeat % len(configs)]
                for i, (name, executor, n_threads) in enumerate(order):
                    torch.set_num_threads(n_threads)
                    out = work / f"run-{i}"
                    runs.setdefault(name, []).append(run(name, inputs, out, executor,
                                                         args.window, args.files, spec,
                                                         encoder))
                    worst = max(worst, same_rows(work / "warm", out))
                torch.set_num_threads(threads)
        finally:
            ray.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summaries = [summarise(runs[name]) for name, _, _ in configs]
    command = "nice -n 10 python benchmarks/ray_throughput.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    result = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": machine(),
              "ray_version": ray.__version__, "backend": args.backend,
              "sentences": summaries[0]["sentences"], "files": args.files,
              "window": args.window, "repeats": args.repeats, "ray_cpus": args.ray_cpus,
              "ray_start_seconds": started, "runs": summaries,
              "max_embedding_difference": worst, "command": command.strip()}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "throughput.json", result)
    with atomic_write(args.out / "throughput.md") as fh:
        fh.write(markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
