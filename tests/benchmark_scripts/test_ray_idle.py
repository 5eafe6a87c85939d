"""benchmarks/ray_idle.py: the table of a driver's CPU per wall second by condition."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _record(condition, repeat, rate, threads, load):
    return {"condition": condition, "repeat": repeat, "process_ms_per_s": rate,
            "threads_ms_per_s": threads, "load_start": load}


def test_the_table_gives_each_conditions_repeats_mean_and_busiest_threads():
    sys.path.insert(0, str(ROOT))
    from benchmarks.ray_idle import CONDITIONS, table

    idle, waiting = "idle", "waiting on a task (tapt's wait)"
    assert {idle, waiting} <= set(CONDITIONS)
    text = table([
        _record(idle, 0, 2.0, {"worker.io": 1.0, "client.poll0": 0.5, "python": 0.1}, 1.0),
        _record(waiting, 0, 4.0, {"python": 2.0, "worker.io": 1.5}, 1.5),
        _record(idle, 1, 3.0, {"worker.io": 2.0, "client.poll0": 1.5}, 2.0)])
    lines = text.splitlines()
    assert lines[0].startswith("| condition | process CPU ms per wall s (each repeat) | mean |")
    assert ("| idle | 2.00, 3.00 | 2.50 | worker.io 1.50, client.poll0 1.00, python 0.05 | "
            "1.0, 2.0 |") in lines
    assert f"| {waiting} | 4.00 | 4.00 | python 2.00, worker.io 1.50 | 1.5 |" in lines
    assert len(lines) == 4          # a condition without records has no row
