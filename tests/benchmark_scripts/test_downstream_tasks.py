"""benchmarks/downstream_tasks.py (labelled tasks from the seed files) and the GPU script's
shell syntax."""

from __future__ import annotations

import collections
import gzip
import json
import subprocess

import pytest

from benchmarks import downstream_tasks
from conftest import REPO, SAMPLE


def test_quotes_task_labels_by_fortune_file_and_is_not_in_the_pool():
    rows = downstream_tasks.make_task("quotes", SAMPLE / "seeds", classes=4, min_docs=8)
    counts = collections.Counter(r["label"] for r in rows)
    assert sorted(counts) == ["computers", "definitions", "people", "songs-poems"]
    assert all(counts[k] >= 100 for k in counts)
    with gzip.open(SAMPLE / "pool.jsonl.gz", "rt", encoding="utf-8") as fh:
        pool_docs = {json.loads(line)["doc"] for line in fh}
    assert not pool_docs & {r["doc"] for r in rows}        # held out by document


def test_it_task_labels_by_manual_section():
    rows = downstream_tasks.make_task("it", SAMPLE / "seeds", classes=3, min_docs=8)
    assert sorted({r["label"] for r in rows}) == ["2", "3", "7"]
    assert all(r["doc"].endswith("." + r["label"]) for r in rows)


def test_religion_task_labels_by_part_of_the_bible():
    rows = downstream_tasks.make_task("religion", SAMPLE / "seeds", classes=10, min_docs=8)
    counts = collections.Counter(r["label"] for r in rows)
    assert set(counts) <= set(downstream_tasks.BIBLE_PARTS) and len(counts) >= 4
    books = {b for part in downstream_tasks.BIBLE_PARTS.values() for b in part.split()}
    assert len(books) == 66                                   # every book in exactly one part
    assert all(r["doc"].startswith("kjv:") for r in rows)


def test_the_goal_is_read_off_the_reports():
    from benchmarks.downstream_proxy import _goal

    def report(task, low, share):
        return {"task": task, "aggregate": [
            {"condition": "oracle", "accuracy_vs_random": {"ci_low": low}},
            {"condition": "fused", "oracle_share": {"share": share, "share_ci_low": 0.1}}]}

    met = _goal([report("a", 0.01, 0.9), report("b", 0.02, 0.85), report("c", -0.01, 0.1)])
    assert met["oracle_resolved_on"] == ["a", "b"] and met["met"]
    assert not _goal([report("a", 0.01, 0.9), report("b", -0.02, 0.85)])["met"]
    assert not _goal([report("a", 0.01, 0.5), report("b", 0.02, 0.95)])["met"]


def test_the_script_refuses_an_existing_file(tmp_path):
    out = tmp_path / "mine.jsonl"
    out.write_text("keep")
    assert downstream_tasks.main(["quotes", "--out", str(out)]) == 1
    assert out.read_text() == "keep"


def test_gpu_script_is_valid_bash():
    script = REPO / "benchmarks" / "gpu_downstream.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    with pytest.raises(subprocess.CalledProcessError):     # OUT is required
        subprocess.run(["bash", str(script)], check=True, capture_output=True,
                       env={"PATH": "/usr/bin:/bin"})
