"""benchmarks/serve_http.py without Ray Serve: its hostile requests against the same HTTP
service on a loopback socket (each refused with its status, nothing read or written outside
the rooms), its load round and its report."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("uvicorn")

import tapt  # noqa: E402
import tapt.indexer.encoding.encoder  # noqa: E402
from benchmarks.serve_http import CANARY, _write, hostile, load_round  # noqa: E402
from conftest import HashingEncoder  # noqa: E402
from http_service import running  # noqa: E402
from tapt.api.rooms import rooms  # noqa: E402
from tapt.api.service import SelectionService  # noqa: E402

TOKEN = "benchmark-test-token-0123456"


def test_hostile_requests_are_refused_and_the_report_says_so(fake_index, tmp_path, monkeypatch):
    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder",
                        lambda spec=None, device="auto", backend="auto", threads=None, **_:
                        HashingEncoder())
    tasks, outs = tmp_path / "tasks", tmp_path / "outs"
    tasks.mkdir()
    outs.mkdir()
    canary = tmp_path / "canary.txt"
    canary.write_text(CANARY + "\n")
    (tmp_path / "token").write_text(TOKEN)
    svc = SelectionService(tapt.Index.open(fake_index), rooms(
        "127.0.0.1", token_file=tmp_path / "token", task_root=tasks, out_root=outs,
        max_budget=100))
    with running(svc) as base:
        rows = hostile(base, TOKEN, tasks, outs, canary, 1 << 20)
        load = load_round(base, TOKEN, "centroid", 3, 5, "10",
                          [["Patient fever therapy dose."]], 60)
    assert [r["status"] for r in rows] == [r["expected"] for r in rows], rows
    assert not any(r["canary_in_answer"] or r["written_outside"] for r in rows)
    assert load["statuses"] == {"200": 6} and load["latency_s"]["p50"] > 0
    results = {"meta": {"measured": "now", "cpu_cores": 2, "command": "python -m x",
                        "ray_cpus": 2, "actors": 8, "cpus_per_actor": 0.25, "rows": 380,
                        "budget": "10", "uptime_before": "load average: 1.00"},
               "load": [load], "warm": [{"method": "centroid", "status": 200, "seconds": 1}],
               "killed": {"status": 503, "seconds": 1.0, "error": "an actor died",
                          "killed_pid_alive_before": True,
                          "next": {"status": 200, "seconds": 2.0},
                          "health_after": {"status": 200}},
               "hostile": rows}
    _write(results, tmp_path / "report")
    text = (tmp_path / "report.md").read_text()
    assert "| centroid | 3 | 6 |" in text and "| no token | 401 | 401 |" in text
    assert json.loads((tmp_path / "report.json").read_text())["load"][0]["clients"] == 3
