"""benchmarks/tokenize_speed.py on 300 sample sentences: every path checked equal, a row per
path, parallelism setting and thread count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tokenize_speed_report(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.tokenize_speed", "--n", "300", "--repeats", "1",
         "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "tokenize_speed.json").read_text())
    assert report["texts"] == 300 and report["max_length"] == 256
    cores = report["usable_cores"]
    for parallelism in ("false", "true"):
        rows = [r for r in report["rows"] if r["parallelism"] == parallelism
                and not r["path"].startswith("CUDA path")]
        assert [r["path"] for r in rows][0] == "tokenizer call"
        assert [r["threads"] for r in rows if r["path"] == "backend"][-1] == cores
        assert [r["path"] for r in rows][-1] == "token counts"
    assert report["rows"][-1]["path"] == "CUDA path, model stubbed (batch 1024)"
    assert (tmp_path / "tokenize_speed.md").read_text().startswith("# Host tokenisation")
    assert all(r["sentences_per_s"] > 0 and r["us_per_sentence"] > 0 for r in report["rows"])
    assert report["rows"][0]["x_call"] == 1.0
    table = (tmp_path / "tokenize_speed.md").read_text()
    assert table.count("| backend |") == 2 * sum(1 for r in report["rows"]
                                                 if r["path"] == "backend" and
                                                 r["parallelism"] == "false")
