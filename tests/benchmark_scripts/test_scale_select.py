"""benchmarks/scale_select.py at a tiny size: a real synthetic index is built, all three methods
run, the reports have their structure, and knn on a Flat part selects what exact search does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tapt.indexer.index import Index

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    # as documented: `python -m benchmarks.scale_select` from the repository root (pysbd installs
    # a top-level `benchmarks` package of its own, so the module is not imported from here)
    base = tmp_path_factory.mktemp("scale")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale_select", "--rows", "20000", "--shards", "2",
         "--sizes", "1,2", "--budgets", "500sent", "--repeats", "1", "--knn-queries", "300",
         "--recall-queries", "40", "--fused-task", "100", "--work", str(base / "work"),
         "--out", str(base / "out"), "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return base


def test_reports_have_every_method(run):
    report = json.loads((run / "out" / "select_latency.json").read_text())
    assert report["methods"] == ["centroid", "knn", "fused"]
    assert report["synthetic"]["rows"] == 20000 and report["index"]["factory"] == "Flat"
    assert [r["shards"] for r in report["results"]] == [1, 2]
    assert {r["rows"] for r in report["breakdown"]} == {10000, 20000}
    knn, fused = report["knn"], report["fused"]
    assert knn["queries"] == 300 and knn["recall_queries"] == 40 and knn["k"] == 100
    assert 0 <= knn["recall_at_k"] <= 1 and 0 <= fused["precision"] <= 1
    assert knn["first_s"] > 0 and knn["best_s"] <= knn["first_s"]
    assert set(fused["best_parts_s"]) == {"moore_lewis_s", "classifier_s", "wording_s",
                                          "fusion_s", "rank_and_cut_s"}
    assert fused["best_parts_s"]["classifier_s"] > 0 and fused["best_parts_s"]["fusion_s"] >= 0
    assert 0 < fused["best_cpu_s"]
    assert fused["selected_sentences"] == int(fused["budget"].removesuffix("sent"))
    codes = report["fused_codes"]
    assert codes["scan"] == "codes" and fused["scan"] == "exact"
    assert codes["budget"] == fused["budget"] and 0 <= codes["overlap_with_exact"] <= 1
    markdown = (run / "out" / "select_latency.md").read_text()
    for heading in ("Centroid; the task", "knn; the task",
                    "fused (the PU classifier, Moore-Lewis and the wording classifier)",
                    "The synthetic index's build"):
        assert heading in markdown


def test_knn_on_a_flat_part_selects_what_exact_search_selects(run):
    knn = json.loads((run / "out" / "select_latency.json").read_text())["knn"]
    assert knn["kind"] == "flat" and knn["recall_at_k"] == 1.0
    assert knn["selection_vs_exact"]["overlap"] == 1.0
    assert knn["selection_vs_exact"]["same_order"] is True
    assert knn["selection_vs_exact"]["selected"] > 100


def test_the_synthetic_index_is_a_real_index_with_lexical_ids(run):
    index = Index(run / "work" / "index")
    labels = np.load(run / "work" / "labels.npy")
    assert len(index.shards) == 2 and index.n_sentences == len(labels) == 20000
    assert index.codes is not None and len(index.lexicon) == 20000
    # one record = one sentence = one document, its words stored as the prepare stage stores them
    text = index.store.texts([12345])[0]
    _, _, predicted = index.lexicon.pairs(np.array([12345]))
    assert predicted[0] == len(text.split()) + 1
    # rows of one blob are closer to each other than to other blobs
    emb = np.asarray(index.embeddings[:4000], dtype=np.float32)
    same = labels[:4000, None] == labels[None, :4000]
    sims = emb @ emb.T
    assert sims[same & ~np.eye(4000, dtype=bool)].mean() > sims[~same].mean() + 0.2


def test_an_earlier_report_is_kept_beside_the_new_fused_rows(run, tmp_path):
    """`--before` keeps an earlier revision's fused records, labelled, beside the new ones;
    `--before` without its revision is refused."""
    first = run / "out" / "select_latency.json"
    args = [sys.executable, "-m", "benchmarks.scale_select", "--rows", "20000", "--shards", "2",
            "--methods", "fused", "--repeats", "1", "--fused-task", "100",
            "--work", str(run / "work"), "--out", str(tmp_path), "-q", "--before", str(first)]
    refused = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--before-revision" in refused.stderr
    done = subprocess.run(args + ["--before-revision", "abc1234"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "select_latency.json").read_text())
    earlier = json.loads(first.read_text())
    for key in ("fused", "fused_codes"):
        assert report[f"{key}_before"] == {**earlier[key], "revision": "abc1234"}
    markdown = (tmp_path / "select_latency.md").read_text()
    assert "| exact, tapt at abc1234 |" in markdown and "| codes, tapt at abc1234 |" in markdown
