"""benchmarks/driver_memory.py: the per-method table's records and growth, and (slow) a real
run of `--indexes` on a tiny synthetic index, one fresh process per cell."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _report(records):
    return {"created": "now", "machine": {"cpu": "cpu", "cores": 2}, "argv": ["--indexes", "x"],
            "budget": "10000sent", "methods": ["centroid", "knn"], "before": "HEAD",
            "records": records}


def _record(method, rows, peak, code="after", digest="d"):
    return {"method": method, "rows": rows, "peak_mb": peak, "base_mb": 100.0,
            "seconds": 1.0, "code": code, "digest": digest}


def test_the_table_has_every_method_its_growth_and_the_comparison():
    sys.path.insert(0, str(ROOT))
    from benchmarks.driver_memory import cells_markdown

    text = cells_markdown(_report([
        _record("centroid", 1_000_000, 200.0), _record("centroid", 3_000_000, 230.0),
        _record("knn", 1_000_000, 300.0, "before", "a"), _record("knn", 1_000_000, 200.0,
                                                                  digest="b"),
        _record("knn", 3_000_000, 400.0),
        {"method": "knn", "index": "/x", "code": "after", "error": "Error: boom"}]))
    lines = text.splitlines()
    assert "| peak at 1M (MB) | peak at 3M (MB) |" in text
    assert any(line.startswith("| centroid | 200 | 230 | 1.15x | 100 / 130 |") for line in lines)
    assert any(line.startswith("| knn | 200 | 400 | 2.00x | 100 / 300 |") for line in lines)
    assert "| knn | 1,000,000 | 300 / 200 | 200 / 100 | NO |" in text
    assert "knn on /x (after) failed: Error: boom" in text


@pytest.mark.slow
def test_cells_measure_each_method_in_a_fresh_process(tmp_path):
    built = subprocess.run(
        [sys.executable, "-c", "from pathlib import Path; from benchmarks.synthetic_index import "
         f"Spec, make_index; make_index(Path({str(tmp_path / 'w')!r}), Spec(rows=20000, "
         "shards=2, clusters=50))"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.driver_memory", "--indexes", str(tmp_path / "w"),
         "--methods", "centroid,knn", "--cell-budget", "200sent", "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "driver_memory.json").read_text())
    records = report["records"]
    assert [(r["method"], r["rows"]) for r in records] == [("centroid", 20000), ("knn", 20000)]
    for r in records:
        assert r["peak_mb"] >= r["open_mb"] >= r["base_mb"] > 0
    assert records[0]["selected"] == 200
    assert "| centroid |" in (tmp_path / "out" / "driver_memory.md").read_text()
