"""benchmarks/gpu_embed_pipeline.py (the GPU check of tokenising apart, without Ray) on the CPU
with a tiny setting: both paths run and give the same embeddings and token counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_embed_pipeline_runs_on_the_cpu(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = tmp_path / "check.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_embed_pipeline.py", str(out), "--device", "cpu",
         "--sentences", "96", "--part-rows", "32", "--workers", "1", "--rounds", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["parts"] == 3 and report["sentences"] == 96
    assert report["max_abs_difference"] == 0.0 and report["same_token_counts"] is True
    assert report["local"]["sentences_per_second"] > 0
    assert report["pipeline"]["sentences_per_second"] > 0
    assert "pipeline" in done.stdout and "sentences/s" in done.stdout
