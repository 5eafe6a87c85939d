"""benchmarks/codes_precision.py on a 300-sentence prefix of the bundled sample, real model:
the report has a row per domain, seed size and method, and its summary and table follow."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from tapt.cli import cli

ROOT = Path(__file__).resolve().parents[2]


def test_codes_precision_report(real_sample, tmp_path):
    pool, seeds = real_sample
    index = tmp_path / "idx"
    built = CliRunner().invoke(cli, ["-q", "index", "build", str(pool), "--out", str(index),
                                     "--no-split", "--codes", "int8"], catch_exceptions=False)
    assert built.exit_code == 0, built.output
    (tmp_path / "seeds").mkdir()
    shutil.copy(seeds, tmp_path / "seeds" / "medical.jsonl")
    # `python -m` from the repository root, as documented (see tests/benchmark_scripts/test_scale_select.py)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.codes_precision", "--index", str(index), "--seeds",
         str(tmp_path / "seeds"), "--methods", "centroid,fused", "--seed-sizes", "30,1000",
         "--out", str(tmp_path / "out"), "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "codes_precision.json").read_text())
    rows = report["rows"]
    assert [(r["method"], r["seeds"]) for r in rows] == [
        ("centroid", 30), ("fused", 30), ("centroid", 60), ("fused", 60)]
    medical = sum(json.loads(line)["domain"] == "medical"
                  for line in pool.read_text().splitlines())
    for r in rows:
        assert r["domain"] == "medical" and r["budget"] == f"{medical}sent"
        assert 0 <= r["precision_codes"] <= 1 and 0 <= r["overlap_codes_exact"] <= 1
    centroid = [r for r in rows if r["method"] == "centroid"]
    assert all(r["overlap_seed_1_exact"] == 1.0 for r in centroid)   # no random draws
    assert [(s["method"], s["seeds"], s["domains"]) for s in report["summary"]] == [
        ("centroid", 30, 1), ("centroid", 60, 1), ("fused", 30, 1), ("fused", 60, 1)]
    table = (tmp_path / "out" / "codes_precision.md").read_text()
    assert "| fused | 60 |" in table and "Regenerate:" in table
