"""benchmarks/serve_scale.py's report: its tables from a run's results (no Ray here)."""

from __future__ import annotations

import json

from benchmarks.serve_scale import write_report


def test_the_report_holds_every_index_and_the_start_before(tmp_path):
    start = {"total_s": 3.0, "driver_open_s": 0.5, "actors_s": 2.5}
    report = {"shards": ["000000"], "verified": ["000000"], "reached": ["000001"],
              "rows": [0, 65536], "seconds": 1.2}
    results = [{"index": name, "rows": rows, "start_cold": start, "start_warm": start,
                **({"start_before_cold": start} if name == "1M" else {}),
                "actor_reports": [report], "first_request_s": 1.0,
                "first_request_load_average": 3.5, "warm_up_s": 4.0,
                "warm_up_steps_max_s": {"torch": 3.1, "held": 0.2, "parts": 0.3},
                "first_request_after_warm_up_s": 0.4, "warm_up_load_average": 4.5,
                "bytes_per_request": {"sent_per_actor": 113, "scorer_once": 1751,
                                      "received_all_actors": 1000, "actors_asked": 8},
                "latency": {"local": {"first_s": 1, "best_s": 0.1, "median_s": 0.2},
                            "served": {"first_s": 1, "best_s": 0.15, "median_s": 0.2}},
                "served_over_local_best": 1.5, "same_selection": True, "load_average": 2.0}
               for name, rows in (("1M", 1_000_000), ("3M", 3_000_000))]
    meta = {"machine": {"cpu": "CPU", "cores": 2}, "command": "python -m benchmarks.serve_scale",
            "actors": 8, "cpus_per_actor": 0.25, "ray_cpus": 2, "budget": "10000sent",
            "repeats": 5, "before": None, "measured": "now"}
    results[1]["starts"] = [{"kind": kind, "run": run, **start, "load_average": load}
                            for run, load in ((1, 4.5), (2, 6.0)) for kind in ("cold", "warm")]
    write_report(results, meta, tmp_path / "serve")
    text = (tmp_path / "serve.md").read_text()
    assert "| 1M | 1,000,000 | before cold | 1 | 3.0 | 0.5 | 2.5 |" in text
    assert "| 3M | 3,000,000 | 113 | 1,751 | 1,000 |" in text
    assert "| 0 | 000000 | 000000 | 000001 | 0-65,536 | 1.2 |" in text
    assert "| 3M | 1.0 | 3.5 | 4.0 | 3.1 / 0.2 / 0.3 | 0.4 | 4.5 |" in text
    assert "| 3M | 3,000,000 | warm | 2 | 3.0 | 0.5 | 2.5 | - | - | - | 6.0 |" in text
    assert "3M cold 3.0 s (4.5-6.0), warm 3.0 s (4.5-6.0)." in text
    assert json.loads((tmp_path / "serve.json").read_text())["results"][1]["rows"] == 3_000_000
