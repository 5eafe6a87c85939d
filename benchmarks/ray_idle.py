"""The CPU a Ray driver's own threads spend per wall second while it waits, and whether any Ray or
gRPC setting lowers it: the part of a driver's CPU over a build that grows with the build's wall
time, not with its rows (`driver_build.py`'s `idle_cpu_ms_per_s`).

Each condition runs in a fresh process that starts a local Ray cluster of `--cpus` logical
CPUs as `driver_build.py`'s cells do (no dashboard, no worker logs on the driver), with its
settings in the process's environment before `ray` is imported (Ray reads a `RAY_<name>`
variable of its own configuration in every process it starts, the driver's core worker
included). After `SETTLE_SECONDS` it either sleeps (`idle`) or waits on one Ray task that
sleeps through `RayExecutor.imap` (`waiting`: tapt's own wait, which wakes every
`POLL_SECONDS` to check the stage's nodes), and measures `--seconds` seconds from
`SETTLE_SECONDS` into that (the task's submission behind it). Recorded per condition and
repeat: the process's CPU ms per wall second (`process_ms_per_s`, from
`time.process_time()`) and every thread's, by name (`threads_ms_per_s`, from
`/proc/self/task/*/schedstat`, in nanoseconds). Conditions run interleaved, `--repeats`
times, so that the load of a shared machine falls on all of them alike.

    .venv/bin/python -m benchmarks.ray_idle --out benchmarks/results/scale
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

SETTLE_SECONDS = 10.0

# Ray's own periodic work in a driver, each made 10 to 60 times rarer (defaults in Ray 2.60:
# 1,000 ms unless noted); and gRPC's polling
RAY_TIMERS = {
    "RAY_core_worker_internal_heartbeat_ms": "10000",
    "RAY_free_objects_period_milliseconds": "10000",
    "RAY_task_events_report_interval_ms": "10000",
    "RAY_metrics_report_interval_ms": "60000",            # 10,000
    "RAY_grpc_client_check_connection_status_interval_milliseconds": "60000",
    "RAY_io_context_event_loop_lag_collection_interval_ms": "60000",
    "RAY_ray_events_report_interval_ms": "60000",
    "RAY_report_worker_backlog_interval_ms": "60000",
    "RAY_raylet_death_check_interval_milliseconds": "10000",
    "RAY_debug_dump_period_milliseconds": "600000",       # 10,000
    "RAY_io_context_monitor_probe_interval_ms": "60000",
    "RAY_event_stats": "0",
}
CONDITIONS: dict[str, tuple[str, dict[str, str]]] = {
    "idle": ("idle", {}),
    "idle, Ray's timers 10-60x rarer": ("idle", RAY_TIMERS),
    "idle, gRPC poll strategy `poll`, one server call thread": (
        "idle", {"GRPC_POLL_STRATEGY": "poll", "RAY_num_server_call_thread": "1"}),
    "waiting on a task (tapt's wait)": ("waiting", {}),
}


def _threads() -> dict[str, float]:
    """CPU seconds of every thread of this process, by name (those of one name summed)."""
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            ns = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError):
            continue
        out[name] = out.get(name, 0.0) + ns / 1e9
    return out


def _sleep_for(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def cell(mode: str, seconds: float, cpus: int) -> dict[str, Any]:
    """One condition in this process (the child)."""
    import ray
    from ray import cloudpickle

    from tapt.extend import Stage

    # internal: the Ray executor's own wait is what is measured
    from tapt.indexer.building.executors.ray_executor import RayExecutor

    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    executor = RayExecutor(progress=False)
    time.sleep(SETTLE_SECONDS)
    window: dict[str, Any] = {}

    def measure() -> None:
        """The window: from SETTLE_SECONDS into the condition (a task's submission behind it)
        to `seconds` later."""
        time.sleep(SETTLE_SECONDS)
        window["before"], window["cpu"] = _threads(), time.process_time()
        window["t0"] = time.perf_counter()
        time.sleep(seconds)
        window["wall"] = time.perf_counter() - window["t0"]
        window["cpu"] = time.process_time() - window["cpu"]
        window["after"] = _threads()

    clock = threading.Thread(target=measure, name="window")
    clock.start()
    lasts = seconds + 2 * SETTLE_SECONDS
    if mode == "idle":
        time.sleep(lasts)
    else:
        list(executor.imap(Stage("wait", _sleep_for), [lasts]))
    clock.join()
    executor.close()
    ray.shutdown()
    before, after, wall, cpu = (window[k] for k in ("before", "after", "wall", "cpu"))
    threads = {k: round((v - before.get(k, 0.0)) / wall * 1e3, 3) for k, v in after.items()
               if v - before.get(k, 0.0) > 0}
    return {"mode": mode, "seconds": round(wall, 1),
            "process_ms_per_s": round(cpu / wall * 1e3, 2),
            "threads_ms_per_s": dict(sorted(threads.items(), key=lambda t: -t[1]))}


def table(records: list[dict[str, Any]]) -> str:
    lines = ["| condition | process CPU ms per wall s (each repeat) | mean | busiest threads, "
             "ms/s (mean) | load (start) |", "|---|---|---:|---|---|"]
    for name in CONDITIONS:
        runs = [r for r in records if r["condition"] == name]
        if not runs:
            continue
        rates = [r["process_ms_per_s"] for r in runs]
        threads: dict[str, float] = {}
        for r in runs:
            for k, v in r["threads_ms_per_s"].items():
                threads[k] = threads.get(k, 0.0) + v / len(runs)
        top = ", ".join(f"{k} {v:.2f}" for k, v in
                        sorted(threads.items(), key=lambda t: -t[1])[:4])
        loads = ", ".join(f"{r['load_start']:.1f}" for r in runs)
        lines.append(f"| {name} | {', '.join(f'{x:.2f}' for x in rates)} | "
                     f"{sum(rates) / len(rates):.2f} | {top} | {loads} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scale"))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=3)
    parser.add_argument("--cell", nargs=2, metavar=("MODE", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(cell(args.cell[0], float(args.cell[1]), args.cpus)))
        return
    records = []
    for repeat in range(args.repeats):
        for name, (mode, settings) in CONDITIONS.items():
            load = os.getloadavg()[0]
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.ray_idle", "--cpus", str(args.cpus),
                 "--cell", mode, str(args.seconds)], env={**os.environ, **settings},
                capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"Error: the cell {name!r} failed: {done.stderr.strip()[-2000:]}")
            record = {"condition": name, "repeat": repeat, "settings": settings,
                      **json.loads(done.stdout.strip().splitlines()[-1]),
                      "load_start": round(load, 2), "cpus": args.cpus}
            records.append(record)
            print(f"{name} #{repeat}: {record['process_ms_per_s']} ms/s", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ray_idle.json").write_text(json.dumps(records, indent=1) + "\n")
    (args.out / "ray_idle.md").write_text(table(records))


if __name__ == "__main__":
    main()
