"""Driver CPU seconds and peak memory of `tapt index build` and `tapt index add` on Ray, at
1M and 10M synthetic sentences: what the process that runs the command spends while the
cluster does the work.

The corpus: synthetic sentences (`benchmarks/synthetic_index.py`'s generator: Zipf words with
cluster topic words; one JSON Lines record = one sentence = one document), in `.jsonl` files of
`FILE_ROWS` rows each, so a file is scanned and prepared in byte ranges (`--piece-size`) by
tasks. The model: `SyntheticEncoder` (384 dimensions: each sentence's cluster centre, read from
its first word, plus noise from its hash; no model, so the build's own work is measured), sent
to the Ray workers by value. The add: `rows` / 10 new sentences (another seed) into the built
index.

Each command runs in a fresh process (`--cell`) that starts a local Ray cluster of `--cpus`
logical CPUs, runs `tapt.Index.build` / `Index.add` through the public API with
`executor="ray", ray_workers=CPUS - 1`, shards of `rows` / 20 records (the files read in byte
ranges of about half a shard), and records:

- `driver_cpu_s`: the process's own user + system CPU seconds over the command
  (`resource.getrusage(RUSAGE_SELF)`: Ray's workers and daemons are other processes), less
  the CPU of this benchmark's own samplers (`sampler_cpu_s`: a thread reading
  /proc/self/status every 10 ms and one reading every thread's CPU every 0.25 s, whose CPU
  grows with the command's wall time);
- `driver_main_cpu_s`: the main thread's CPU seconds (tapt's own work on the driver, with the
  Ray client calls it makes), `driver_threads_cpu_s`: every thread's, by name, those that
  ended during the command included (Ray's core worker threads: `worker.io`, `client.poll0`,
  ...; Ray Data's executor), and `driver_ended_threads_cpu_s` those that ended;
- `idle_cpu_ms_per_s`: the CPU milliseconds per wall second of the same process connected to
  Ray and idle, measured before the command (what Ray's threads in a driver spend whatever
  the driver does: over a command it grows with the wall time, not with the rows); the table
  also gives the driver's CPU less that rate times the command's wall seconds;
- `driver_peak_mb`: the peak of its RssAnon (its own memory; mapped index files are not),
  sampled every 10 ms from the start of the command to its end; `base_mb`, before it;
- `driver_maxrss_mb` (`ru_maxrss`, mapped pages included), the command's wall seconds, its
  stage seconds (from the manifest), and the load average at its start and end.

    nice -n 10 .venv/bin/python -m benchmarks.driver_build --rows 1000000,10000000 \\
        --work /tmp/driver-build --out benchmarks/results/scale
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import logging
import os
import pstats
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.driver_memory import MB, SAMPLER, AnonPeak, _anon_bytes
from tapt.extend import register_encoder

ROOT = Path(__file__).resolve().parents[1]
FILE_ROWS = 2_000_000
# a connected driver's idle CPU is measured over IDLE_SECONDS, after IDLE_SETTLE_SECONDS
IDLE_SETTLE_SECONDS, IDLE_SECONDS = 5.0, 20.0
DIM = 384
CLUSTERS = 200


@register_encoder
class SyntheticEncoder:
    """384-dim unit rows of synthetic sentences: the centre of the sentence's cluster (from
    its first word) plus noise seeded by its hash. No model: the build's own work is what a
    run measures."""

    name = "synthetic-driver-build"
    spec = None
    max_length = 64
    device = "cpu"
    dim = DIM

    @property
    def weights_sha256(self) -> str:
        return hashlib.sha256(self.name.encode()).hexdigest()

    def encode(self, texts, batch_size: int = 64) -> np.ndarray:
        centres = np.random.default_rng(0).normal(size=(CLUSTERS, DIM)).astype(np.float32)
        first = np.array([hash_of(t.split(" ", 1)[0]) % CLUSTERS for t in texts], dtype=np.int64)
        noise = np.random.default_rng(hash_of(texts[0]) if texts else 0).normal(
            scale=0.6, size=(len(texts), DIM)).astype(np.float32)
        rows = centres[first] + noise
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        return rows

    def token_counts(self, texts) -> np.ndarray:
        return np.fromiter((t.count(" ") + 3 for t in texts), dtype=np.int32, count=len(texts))


def hash_of(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def write_corpus(folder: Path, rows: int, seed: int) -> list[str]:
    """`rows` synthetic sentences in files of FILE_ROWS rows (kept between runs)."""
    from benchmarks.synthetic_index import CHUNK, Sentences, Spec

    folder.mkdir(parents=True, exist_ok=True)
    done = folder / "done.json"
    if done.is_file() and json.loads(done.read_text()) == {"rows": rows, "seed": seed}:
        return sorted(str(p) for p in folder.glob("*.jsonl"))
    for p in folder.glob("*.jsonl"):
        p.unlink()
    spec = Spec(rows=rows, shards=1, seed=seed)
    sentences, rng = Sentences(spec), np.random.default_rng(seed + 100)
    files = []
    for f, first in enumerate(range(0, rows, FILE_ROWS)):
        path = folder / f"part-{f:04d}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for start in range(first, min(rows, first + FILE_ROWS), CHUNK):
                labels = rng.integers(0, spec.clusters, size=min(CHUNK, rows - start,
                                                                 first + FILE_ROWS - start))
                lines, _ = sentences.make(rng, labels)
                fh.write("".join(f'{{"text": "{line}"}}\n' for line in lines))
        files.append(str(path))
    done.write_text(json.dumps({"rows": rows, "seed": seed}))
    return files


class ThreadLedger:
    """Each thread's CPU seconds (user + system) over the block, by thread name, the threads
    that ended during it included: every thread's CPU is read (`/proc/self/task/*/stat`) every
    `interval` seconds and at the end, so a thread that ended is counted up to its last reading
    (at most `interval` of its CPU is missed). Python threads are named by their `threading`
    name, the main thread `main`; `cpu_s` is the ledger's own thread's CPU."""

    NAME = "thread-ledger"

    def __init__(self, interval: float = 0.25) -> None:
        import threading

        self.interval, self._stop, self.cpu_s = interval, threading.Event(), 0.0
        self._start: dict[str, tuple[str, float]] = {}
        self._seen: dict[str, tuple[str, float]] = {}
        self._ended: set[str] = set()
        self._python: dict[str, str] = {}   # a Python thread's name, kept once seen

    def _read(self) -> dict[str, tuple[str, float]]:
        import threading

        tick, main, found = os.sysconf("SC_CLK_TCK"), str(os.getpid()), {}
        self._python.update({str(t.native_id): t.name for t in threading.enumerate()})
        for tid in os.listdir("/proc/self/task"):
            try:
                stat = Path(f"/proc/self/task/{tid}/stat").read_text()
                name = "main" if tid == main else self._python.get(tid) or Path(
                    f"/proc/self/task/{tid}/comm").read_text()
            except OSError:         # the thread ended between the listing and the read
                continue
            fields = stat.rsplit(")", 1)[1].split()
            found[tid] = (name.strip(), (int(fields[11]) + int(fields[12])) / tick)
        return found

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._seen.update(self._read())
        self.cpu_s = time.thread_time()

    def __enter__(self) -> "ThreadLedger":
        import threading

        self._start = self._read()
        self._seen = dict(self._start)
        self._thread = threading.Thread(target=self._run, daemon=True, name=self.NAME)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        last = self._read()
        self._seen.update(last)
        self._ended = set(self._seen) - set(last)

    def by_name(self, ended: bool = False) -> dict[str, float]:
        """CPU seconds over the block by thread name (`ended`: of the threads that ended
        during it only), this ledger's and `SAMPLER`'s left out (counted apart)."""
        out: dict[str, float] = {}
        for tid, (name, cpu) in self._seen.items():
            if name in (self.NAME, SAMPLER) or (ended and tid not in self._ended):
                continue
            was = self._start.get(tid, (name, 0.0))[1]
            out[name] = out.get(name, 0.0) + cpu - was
        return {k: round(v, 2) for k, v in sorted(out.items(), key=lambda t: -t[1])}


def idle_driver_cpu(seconds: float) -> float:
    """CPU milliseconds per second of this process while it waits, connected to Ray and
    doing nothing (the rate at which Ray's own threads in a driver spend CPU)."""
    start, t0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    return (time.process_time() - start) / (time.perf_counter() - t0) * 1e3


def cell(command: str, rows: int, work: str, cpus: int, piece_size: str,
         profile: int = 0) -> dict[str, Any]:
    """One command in this process (the child): build `rows` rows, or add `rows` / 10; with
    `profile`, the driver's `profile` functions of most CPU seconds (`driver_profile`)."""
    import ray
    from ray import cloudpickle

    import tapt

    logging.basicConfig(level=logging.WARNING)
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    work_dir = Path(work)
    out = work_dir / f"index-{rows}"
    options = dict(model=SyntheticEncoder.name, progress=False, shard_size=max(1, rows // 20),
                   piece_size=piece_size, executor="ray", ray_workers=max(1, cpus - 1))
    if command == "build":
        inputs = write_corpus(work_dir / f"corpus-{rows}", rows, seed=0)
        shutil.rmtree(out, ignore_errors=True)
    else:
        inputs = write_corpus(work_dir / f"corpus-{rows}-add", rows // 10, seed=1)
    if piece_size == "auto":      # about two pieces a shard
        options["piece_size"] = max(1 << 20, sum(os.path.getsize(p) for p in inputs) // 40)
    load = os.getloadavg()[0]
    base = _anon_bytes() / MB
    time.sleep(IDLE_SETTLE_SECONDS)       # the cluster's start behind it
    idle_ms = idle_driver_cpu(IDLE_SECONDS)
    profiler = cProfile.Profile(time.thread_time) if profile else None
    with AnonPeak(interval=0.01) as peak, ThreadLedger() as ledger:
        before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        if command == "build":
            manifest = tapt.Index.build(inputs, out, embedding_dtype="float16", codes="int8",
                                        split=False, doc_field=None, **options).manifest
        else:
            index = tapt.Index.open(out)
            index.add(inputs, **options)
            manifest = index.manifest
        if profiler is not None:
            profiler.disable()
        seconds, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    peak_mb = peak.peak / MB
    build = manifest.get("build", {}) if command == "build" else manifest["history"][-1]
    by_thread, ended = ledger.by_name(), ledger.by_name(ended=True)
    return {"command": command, "rows": rows,
            "driver_cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime
                                  - before.ru_stime - peak.cpu_s - ledger.cpu_s, 1),
            "sampler_cpu_s": round(peak.cpu_s + ledger.cpu_s, 2),
            "driver_main_cpu_s": by_thread.get("main"),
            "driver_threads_cpu_s": {k: v for k, v in by_thread.items() if v >= 0.05},
            "driver_ended_threads_cpu_s": {k: v for k, v in ended.items() if v >= 0.05},
            "idle_cpu_ms_per_s": round(idle_ms, 2),
            "driver_peak_mb": round(peak_mb, 1), "base_mb": round(base, 1),
            "driver_maxrss_mb": round(after.ru_maxrss / 1024, 1),
            "seconds": round(seconds, 1), "index_rows": manifest["counts"]["sentences"],
            "shards": len(manifest["shards"]), "factory": manifest["faiss"]["factory"],
            "calibrate_seconds": build.get("calibrate_seconds"),
            "calibration": calibration(manifest),
            "load_start": round(load, 2), "load_end": round(os.getloadavg()[0], 2),
            "cpus": cpus, "piece_size": piece_size, "tapt": str(Path(tapt.__file__).parent),
            **({"driver_profile": top_functions(profiler, profile)} if profiler else {})}


def top_functions(profiler: cProfile.Profile, n: int) -> dict[str, list[dict[str, Any]]]:
    """The `n` functions of most CPU seconds in the main thread of the driver, by their own
    time and with what they call (cProfile on `time.thread_time`: the main thread's CPU only;
    Ray's threads are in `driver_threads_cpu_s`)."""
    stats = pstats.Stats(profiler).stats
    rows = [{"function": f"{Path(file).name}:{line}({name})", "calls": calls,
             "own_s": round(own, 2), "cumulative_s": round(cum, 2)}
            for (file, line, name), (_, calls, own, cum, _) in stats.items()]
    by_own = sorted(rows, key=lambda r: -r["own_s"])[:n]
    by_cum = sorted(rows, key=lambda r: -r["cumulative_s"])[:n]
    return {"by_own": by_own, "by_cumulative": by_cum}


def calibration(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the index's search calibration took: its truth and sweep seconds (the recorded
    ones: an add that kept them says `reused`), the candidate factors its sweep tried (one
    round of tasks each) and what it chose."""
    search = manifest["faiss"].get("search") or {}
    sample = search.get("sample") or {}
    return {**{k: sample.get(k) for k in ("truth_seconds", "sweep_seconds", "reused")},
            "factors": sorted({r["factor"] for r in search.get("sweep", [])}),
            "default": search.get("default"), "rescore_factor": search.get("rescore_factor"),
            "recall": search.get("recall")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000,10000000")
    parser.add_argument("--commands", default="build,add")
    parser.add_argument("--work", type=Path, default=Path("/tmp/driver-build"))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/scale")
    parser.add_argument("--cpus", type=int, default=3,
                        help="logical CPUs of the local Ray cluster")
    parser.add_argument("--piece-size", default="auto",
                        help="byte ranges of the corpus files (auto: about two a shard)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="Record the driver's N functions of most CPU seconds.")
    parser.add_argument("--cell", nargs=3, metavar=("COMMAND", "ROWS", "WORK"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        command, rows, work = args.cell
        print(json.dumps(cell(command, int(rows), work, args.cpus, args.piece_size,
                              args.profile)))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    path = args.out / "driver_build.json"
    records = json.loads(path.read_text()) if path.is_file() else []
    for rows in [int(r) for r in args.rows.split(",")]:
        for command in args.commands.split(","):
            # the corpus is written here, not in the cell: what generating it leaves in a
            # process's memory is not counted in the command's base and peak
            if command == "build":
                write_corpus(args.work / f"corpus-{rows}", rows, seed=0)
            else:
                write_corpus(args.work / f"corpus-{rows}-add", rows // 10, seed=1)
            found = subprocess.run([sys.executable, "-m", "benchmarks.driver_build", "--cell",
                                    command, str(rows), str(args.work), "--cpus",
                                    str(args.cpus), "--piece-size", args.piece_size,
                                    "--profile", str(args.profile)],
                                   cwd=str(ROOT), capture_output=True, text=True)
            if found.returncode != 0:
                sys.exit(f"Error: {command} of {rows} rows failed:\n{found.stderr[-3000:]}")
            record = json.loads(found.stdout.strip().splitlines()[-1])
            print(json.dumps(record), flush=True)
            records = [r for r in records if (r["command"], r["rows"]) != (command, rows)]
            records.append(record)
            args.out.mkdir(parents=True, exist_ok=True)
            records.sort(key=lambda r: (r["command"], r["rows"]))
            path.write_text(json.dumps(records, indent=1) + "\n")
            (args.out / "driver_build.md").write_text(table(records))
            if any("driver_profile" in r for r in records):
                (args.out / "driver_build_profile.md").write_text(profile_table(records))


def profile_table(records: list[dict[str, Any]], top: int = 8) -> str:
    """The profiled records' functions of most CPU seconds, cumulative (what a step costs with
    everything it calls) and own, as a markdown table."""
    lines = ["| command | rows | driver CPU s | wall s | load | function | calls | cumulative "
             "CPU s | own CPU s |", "|---|---:|---:|---:|---|---|---:|---:|---:|"]
    for r in records:
        if "driver_profile" not in r:
            continue
        shown = {f["function"]: f for f in r["driver_profile"]["by_cumulative"][:top]}
        shown.update({f["function"]: f for f in r["driver_profile"]["by_own"][:top]})
        for f in sorted(shown.values(), key=lambda f: -f["cumulative_s"]):
            lines.append(f"| {r['command']} | {r['rows']:,} | {r['driver_cpu_s']:.1f} | "
                         f"{r['seconds']:.0f} | {r['load_start']:.1f}-{r['load_end']:.1f} | "
                         f"`{f['function']}` | {f['calls']:,} | {f['cumulative_s']:.2f} | "
                         f"{f['own_s']:.2f} |")
    return "\n".join(lines) + "\n"


def table(records: list[dict[str, Any]]) -> str:
    """The records as a markdown table, each command's growth from its smallest run."""
    lines = ["| command | rows | driver CPU s | main thread CPU s | other threads CPU s "
             "(ended) | idle connection ms/s (x wall s) | driver CPU less idle connection s "
             "| driver peak MB (RssAnon) | peak over base MB | x smallest (CPU, main thread, "
             "CPU less idle, peak) | ru_maxrss MB | wall s | shards | FAISS | load (start-end) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|"]

    def busy(r: dict[str, Any]) -> float:
        """The driver's CPU less what a connected, idle driver spends over the same wall time
        (Ray's threads: it grows with the wall time, not with the rows)."""
        return r["driver_cpu_s"] - r.get("idle_cpu_ms_per_s", 0.0) * r["seconds"] / 1e3

    for r in records:
        first = min((x for x in records if x["command"] == r["command"]),
                    key=lambda x: x["rows"])
        # every other thread: Ray's core worker and gRPC threads, Ray Data's executor
        ray = sum(v for k, v in r["driver_threads_cpu_s"].items() if k != "main")
        ended = sum(r.get("driver_ended_threads_cpu_s", {}).values())
        idle = (f"{r['idle_cpu_ms_per_s']:.2f} ({r['idle_cpu_ms_per_s'] * r['seconds'] / 1e3:.1f}"
                " s)" if "idle_cpu_ms_per_s" in r else "")
        lines.append(f"| {r['command']} | {r['rows']:,} | {r['driver_cpu_s']:.1f} | "
                     f"{r['driver_main_cpu_s']:.1f} | {ray:.1f} ({ended:.1f}) | {idle} | "
                     f"{busy(r):.1f} | {r['driver_peak_mb']:.0f} | "
                     f"{r['driver_peak_mb'] - r['base_mb']:.0f} | "
                     f"{r['driver_cpu_s'] / first['driver_cpu_s']:.2f}, "
                     f"{r['driver_main_cpu_s'] / first['driver_main_cpu_s']:.2f}, "
                     f"{busy(r) / busy(first):.2f}, "
                     f"{r['driver_peak_mb'] / first['driver_peak_mb']:.2f} | "
                     f"{r['driver_maxrss_mb']:.0f} | {r['seconds']:.0f} | {r['shards']} | "
                     f"{r['factory']} | {r['load_start']:.1f}-{r['load_end']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
