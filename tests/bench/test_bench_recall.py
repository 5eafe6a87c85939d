"""The benchmark: metrics against hand-computed cases, and a small end-to-end run."""

import gzip
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import HashingEncoder, make_sentence
from tapt.bench import recall, recall_report
from tapt.bench.clusters import cluster_purity, purity
from tapt.bench.labelled_pool import seed_subset
from tapt.bench.recall_run import bench_recall
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.evaluation.metrics import selection_scores


def test_precision_recall_f1_by_hand():
    relevant = np.array([1, 1, 1, 0, 0, 0, 0, 1], dtype=bool)   # 4 relevant
    s = selection_scores(np.array([0, 1, 3, 3, 4]), relevant)    # duplicate 3 counts once
    assert (s.selected, s.relevant, s.hits) == (4, 4, 2)
    assert s.precision == 0.5 and s.recall == 0.5 and s.f1 == 0.5
    s = selection_scores(np.array([0, 1, 2]), relevant)
    assert s.precision == 1.0 and s.recall == 0.75
    assert s.f1 == pytest.approx(2 * 0.75 / 1.75)


def test_cut_pr_curve_and_budgets():
    lengths = np.array([3, 1, 2, 4])
    assert recall.cut_sentences(np.array([3, 0, 1, 2]), lengths, 5).tolist() == [3, 0]
    assert recall.cut_sentences(np.array([1, 2]), lengths, 100).tolist() == [1, 2]
    curve = recall.pr_curve(np.array([0, 3, 1, 2]), np.array([1, 1, 0, 0], dtype=bool), points=4)
    assert curve["precision"] == [1.0, 0.5, 0.6667, 0.5] and curve["recall"] == [0.5, 0.5, 1, 1]
    assert recall.parse_budgets("oracle,0.5x,2x") == [("oracle", 1.0), ("0.5x", 0.5), ("2x", 2.0)]
    with pytest.raises(InputError):
        recall.parse_budgets("lots")


def test_purity_and_seed_subsets():
    assert purity(np.array([0, 0, 1, 1, 1]), np.array(["a", "b", "b", "b", "a"])) == 0.6
    a, b = seed_subset(100, 10, 0), seed_subset(100, 10, 1)
    assert len(a) == 10 and not np.array_equal(a, b) and np.array_equal(a, seed_subset(100, 10, 0))
    assert seed_subset(5, 10, 2).tolist() == [0, 1, 2, 3, 4]


def test_aggregate_means_over_repeats_then_domains():
    base = {"method": "m", "seeds": 10, "budget": "oracle", "segment_size": 1, "seconds": 1.0}
    rows = [dict(base, domain="a", precision=0.5, recall=0.5, f1=0.5),
            dict(base, domain="a", precision=0.7, recall=0.7, f1=0.7),
            dict(base, domain="b", precision=1.0, recall=1.0, f1=1.0)]
    agg = {r["domain"]: r for r in recall_report.aggregate(rows)}
    assert agg["a"]["precision"] == 0.6 and agg["a"]["runs"] == 2
    assert agg["all"]["precision"] == 0.8


def write_seeds(base):
    rng = random.Random(5)
    for topic in ("medical", "legal"):
        with gzip.open(base / f"{topic}.jsonl.gz", "wt") as fh:
            for i in range(30):
                fh.write(json.dumps({"text": make_sentence(rng, topic), "domain": topic,
                                     "doc": f"s{i}", "pos": 0}) + "\n")
    return base


@pytest.fixture(scope="module")
def seeds_dir(tmp_path_factory):
    return write_seeds(tmp_path_factory.mktemp("seeds"))


# The end-to-end run's result rows (timings aside), recorded before the methods moved into the
# registry: every recorded row must come out identical. Re-record after a deliberate change with
# `PYTHONPATH=tests python tests/bench/test_bench_recall.py` and say why in the commit.
RECORDING = Path(__file__).parents[1] / "data" / "bench_recall_results.json"
E2E_METHODS = ["random", "centroid", "distance", "knn", "maxsim", "density", "moore-lewis",
               "classifier-0", "classifier", "iforest", "hybrid", "auto", "fused",
               "hybrid-fused", "iforest-fused"]


def _row_key(row):
    return (row["method"], row["domain"], row["seeds"], row["repeat"], row["budget"],
            row["segment_size"])


def _without_timings(rows):
    return {_row_key(r): {k: v for k, v in r.items() if k != "seconds"} for r in rows}


def _run_e2e(index, corpus, seeds, tmp_path):
    # recorded at sentence context (the rows named METHOD); the default, auto, cuts this
    # corpus's sentence-scoring methods by document (test_bench_recall_default_context_rows)
    return bench_recall(corpus, seeds, index, E2E_METHODS, [10, 30], "oracle,2x", 2, [1, 4],
                        tmp_path / "out", tmp_path / "cache", progress=False,
                        contexts=("sentence",))


def test_bench_recall_end_to_end(fake_index, labelled_corpus, seeds_dir, tmp_path):
    methods = E2E_METHODS
    report = _run_e2e(fake_index, labelled_corpus[0], seeds_dir, tmp_path)
    recorded = json.loads(RECORDING.read_text())
    got = _without_timings(report["results"])
    for row in recorded:
        assert got.get(_row_key(row)) == row, _row_key(row)
    agg = [r for r in report["aggregate"] if r["domain"] == "all" and r["budget"] == "oracle"
           and r["seeds"] == 30 and r["segment_size"] == 1]
    by = {r["method"]: r for r in agg}
    assert set(by) == set(methods)
    assert by["centroid"]["precision"] > 0.85 > 0.6 > by["random"]["precision"]
    assert by["classifier"]["precision"] > 0.85 and by["fused"]["precision"] > 0.85
    assert by["hybrid-fused"]["precision"] > 0.8
    fused = {(r["segment_size"], r["budget"]) for r in report["results"] if r["method"] == "fused"}
    assert fused == {(1, "oracle"), (1, "2x"), (4, "oracle"), (4, "2x")}
    assert {r["runs"] for r in report["aggregate"] if r["seeds"] == 10 and r["domain"] != "all"} == {2}
    out = tmp_path / "out"
    assert (out / "recall.json").exists() and (out / "pr-medical.png").exists()
    md = (out / "recall.md").read_text()
    assert "### 30 seeds, segment size 1" in md and "| centroid |" in md


def test_bench_recall_with_dsir(fake_index, labelled_corpus, seeds_dir, tmp_path):
    pytest.importorskip("data_selection")
    report = bench_recall(labelled_corpus[0], seeds_dir, fake_index, ["dsir"], [30], "oracle", 1,
                          [1], tmp_path / "out", tmp_path / "cache", progress=False)
    check = report["dsir_library_check"]
    assert check["max_abs_weight_difference"] < 1e-6 and check["top_k_overlap"] == 1.0
    rows = [r for r in report["aggregate"] if r["domain"] == "all"]
    assert rows[0]["precision"] > 0.8


def test_cluster_purity_on_fake_index(fake_index):
    rows = cluster_purity(Index(fake_index), [1, 3], sample=500, pca_dims=8)
    assert rows[0]["purity"] < 0.5 < rows[1]["purity"]


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from conftest import write_labelled_corpus
    from tapt.indexer.building.pipeline import BuildConfig, build_index

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        corpus, index, seeds = base / "pool.jsonl", base / "index", base / "seeds"
        write_labelled_corpus(corpus)
        build_index([corpus], index, HashingEncoder(),
                    BuildConfig(segment_size=4, split=False, progress=False, part_size=64))
        seeds.mkdir()
        write_seeds(seeds)
        report = _run_e2e(index, corpus, seeds, base)
    rows = sorted(_without_timings(report["results"]).values(), key=lambda r: str(_row_key(r)))
    RECORDING.write_text(json.dumps(rows, indent=0) + "\n")
    print(f"recorded {len(rows)} rows -> {RECORDING}")


def test_bench_recall_document_context_rows(fake_index, labelled_corpus, seeds_dir, tmp_path):
    report = bench_recall(labelled_corpus[0], seeds_dir, fake_index, ["centroid", "knn"], [30],
                          "oracle", 1, [1], tmp_path / "out", tmp_path / "cache", progress=False,
                          contexts=("sentence", "document"))
    names = {r["method"] for r in report["results"]}
    assert names == {"centroid", "centroid+document", "knn"}   # knn ranks no sentence scores
    assert report["config"]["contexts"] == ["sentence", "document"]
    plain = [r for r in report["results"] if r["method"] == "centroid"]
    pooled = [r for r in report["results"] if r["method"] == "centroid+document"]
    assert len(plain) == len(pooled) > 0
    # documents of this corpus are single-topic: pooling them never makes centroid worse here
    assert np.mean([r["precision"] for r in pooled]) >= np.mean([r["precision"] for r in plain])
    with pytest.raises(InputError):
        bench_recall(labelled_corpus[0], seeds_dir, fake_index, ["centroid"], [30], "oracle", 1,
                     [1], tmp_path / "out2", tmp_path / "cache", progress=False,
                     contexts=("paragraph",))


def test_bench_recall_default_context_rows(fake_index, labelled_corpus, seeds_dir, tmp_path):
    """The default, auto, reports what `tapt select` runs by default: this corpus's documents
    hold several sentences, so centroid's rows are its document-context cut (iforest's too:
    its pre-ranking pools), knn's its own."""
    report = bench_recall(labelled_corpus[0], seeds_dir, fake_index, ["centroid", "knn"], [30],
                          "oracle", 1, [1], tmp_path / "out", tmp_path / "cache", progress=False)
    assert {r["method"] for r in report["results"]} == {"centroid+document", "knn"}
    auto = report["config"]["auto_context"]
    assert report["config"]["contexts"] == ["auto"] and auto["name"] == "document"
    assert auto["reason"].startswith("auto: ") and auto["sentences_per_document"] > 1
    both = bench_recall(labelled_corpus[0], seeds_dir, fake_index, ["centroid"], [30], "oracle",
                        1, [1], tmp_path / "out2", tmp_path / "cache", progress=False,
                        contexts=("auto", "document", "sentence"))
    names = [r["method"] for r in both["results"]]
    assert sorted(set(names)) == ["centroid", "centroid+document"]
    assert names.count("centroid+document") == names.count("centroid")    # auto = document, once

    def pooled(rep):
        return [(r["domain"], r["precision"]) for r in rep["results"]
                if r["method"] == "centroid+document"]
    assert pooled(both) == pooled(report)


def test_recall_settings_take_lists_or_comma_separated_text():
    from tapt.bench.recall_config import RecallConfig

    given = RecallConfig(methods="centroid, knn", seed_sizes="30,100", segment_sizes=[1, 4],
                         domains="a,b", context="both")
    assert (given.methods, given.seed_sizes, given.segment_sizes, given.domains, given.context) \
        == (("centroid", "knn"), (30, 100), (1, 4), ("a", "b"), ("sentence", "document"))
    assert RecallConfig().methods == ("all",) and RecallConfig().context == ("auto",)
    assert RecallConfig(context=["auto", "document"]).context == ("auto", "document")
    for bad in ({"seed_sizes": "30,x"}, {"repeats": 0}, {"methods": 3}, {"budgets": 2}):
        with pytest.raises(InputError) as err:
            RecallConfig(**bad)
        assert err.value.param == next(iter(bad))
