"""benchmarks/fit_memory.py on 20,000 synthetic rows: the report's peaks, timings and digest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fit_memory_report(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fit_memory", "--rows", "20000", "--positives", "500",
         "--label", "t", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "fit_memory-t.json").read_text())
    assert report["rows"] == 20000 and report["rounds"] == 2
    assert report["fit_peak_bytes"] >= 20000 * 4        # at least the scores of every row
    assert report["rank_peak_bytes"] >= 20000 * 8        # at least the ranking keys
    assert report["fuse_peak_bytes"] >= 20000 * 8        # at least the fused float64 scores
    assert len(report["scores_sha256"]) == 64 == len(report["fused_top_sha256"])
    assert "fit peak" in (tmp_path / "fit_memory-t.md").read_text()
