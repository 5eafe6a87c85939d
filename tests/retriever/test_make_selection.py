"""Selecting (`retriever.selections.make`, through `Index.select`): methods find the task's domain,
the selection file and manifest, determinism, budgets, and refused requests."""

import json

import numpy as np
import pytest

import tapt
from tapt.errors import BudgetError, InputError
from tapt.indexer.index import Index
from tapt.retriever.evaluation.evaluate import evaluate_selections
from tapt.retriever.selections.file_format import manifest_path, read_selection
from tapt.retriever.selections.make import SelectConfig, rank
from tapt.retriever.tasks.reading import load_task


def select(fake_index, task, tmp_path, name="sel.jsonl", *, method, **params):
    out = tmp_path / name
    selection = tapt.Index.open(fake_index).select(method, task,
                                                   out=out, **params)
    return out, selection.manifest


def medical_precision(fake_index, out):
    return evaluate_selections([str(out)], str(fake_index), "domain", "medical")[0]


# Base rate of `medical` in the toy corpus is about one third.
@pytest.mark.parametrize("method,params,floor", [
    ("centroid", {}, 0.9), ("knn", {"k": 10}, 0.9), ("iforest", {}, 0.7),
    ("iforest", {"pca": 4}, 0.6), ("iforest", {"candidates": "all"}, 0.7),
    ("iforest", {"prerank": "knn", "k": 10}, 0.7),
])
def test_methods_find_the_task_domain(fake_index, medical_task, tmp_path, method, params, floor):
    ix = Index(fake_index)
    n_medical = sum(1 for r in ix.store.records(range(ix.n_sentences))
                    if r["meta"]["domain"] == "medical")
    out, manifest = select(fake_index, medical_task, tmp_path, method=method,
                           budget=f"{n_medical}sent", **params)
    row = medical_precision(fake_index, out)
    assert row["precision"] > floor, row
    assert manifest["counts"]["sentences"] >= n_medical


def test_random_baseline_is_seeded_and_near_base_rate(fake_index, tmp_path):
    a, _ = select(fake_index, None, tmp_path, "a.jsonl", method="random", budget="0.5", seed=3)
    b, _ = select(fake_index, None, tmp_path, "b.jsonl", method="random", budget="0.5", seed=3)
    c, _ = select(fake_index, None, tmp_path, "c.jsonl", method="random", budget="0.5", seed=4)
    assert a.read_text() == b.read_text() != c.read_text()
    assert medical_precision(fake_index, a)["precision"] < 0.7


def test_knn_without_budget_selects_the_union(fake_index, medical_task, tmp_path):
    out, manifest = select(fake_index, medical_task, tmp_path, method="knn", k=3)
    info = manifest["info"]
    assert info["union_sentences"] <= 3 * 40
    assert manifest["counts"]["segments"] == info["candidate_segments"]
    _, segments = read_selection(out)
    scores = [s.score for s in segments]
    assert scores == sorted(scores, reverse=True)


def test_selection_file_and_manifest_contents(fake_index, medical_task, tmp_path):
    out, manifest = select(fake_index, medical_task, tmp_path, method="centroid", budget="5")
    loaded, segments = read_selection(out)
    assert loaded["method"] == "centroid" and loaded["index"]["uuid"] == Index(fake_index).uuid
    assert loaded["task"]["sentences"] == 40 and len(loaded["task"]["sha256"]) == 64
    assert set(loaded["timings"]) >= {"embed_task_seconds", "score_seconds", "total_seconds"}
    assert [s.rank for s in segments] == list(range(5))
    ix = Index(fake_index)
    for s in segments:
        assert s.sentences == ix.store.texts(range(*s.rows))
        assert s.text == " ".join(s.sentences) and s.weight == 1.0
    assert manifest_path(out).exists()


def test_selection_is_deterministic(fake_index, medical_task, tmp_path):
    kw = dict(method="iforest", budget="0.3", weights="continuous", C=4.0, alpha=0.0, seed=7)
    a, _ = select(fake_index, medical_task, tmp_path, "a.jsonl", **kw)
    b, _ = select(fake_index, medical_task, tmp_path, "b.jsonl", **kw)
    assert a.read_text() == b.read_text()


def test_continuous_weights_decrease_with_rank(fake_index, medical_task, tmp_path):
    out, _ = select(fake_index, medical_task, tmp_path, method="iforest", budget="1.0",
                    candidates="all", weights="continuous", C=4.0, alpha=0.0)
    _, segments = read_selection(out)
    weights = np.array([s.weight for s in segments])
    assert len(segments) == len(Index(fake_index).segments()) - 1
    assert (np.diff(weights) <= 1e-6).all() and 0 < weights.min() < 0.5 < weights.max() < 1


def test_segment_size_override_recuts_segments(fake_index, medical_task, tmp_path):
    out, manifest = select(fake_index, medical_task, tmp_path, method="centroid", budget="10",
                           segment_size=1)
    _, segments = read_selection(out)
    assert manifest["segment_size"] == 1 and all(s.rows[1] - s.rows[0] == 1 for s in segments)


def test_bad_requests(fake_index, medical_task, tmp_path):
    with pytest.raises(BudgetError, match="larger than the corpus"):
        select(fake_index, medical_task, tmp_path, method="centroid", budget="100000")
    with pytest.raises(InputError, match="needs a budget") as err:
        SelectConfig(method="centroid")
    assert err.value.param == "budget"
    with pytest.raises(InputError, match="use 10x") as err:
        SelectConfig(method="iforest", budget="0.1", candidates="lots")
    assert err.value.param == "candidates"
    with pytest.raises(InputError, match="needs a task"):
        tapt.Index.open(fake_index).select("centroid", None, "3",
                                           out=tmp_path / "x.jsonl")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(InputError, match="holds no text"):
        load_task([empty])
    assert not (tmp_path / "x.jsonl").exists()


def test_malformed_serve_requests_get_an_error_answer(fake_index, medical_task, tmp_path):
    import tapt
    from tapt.api.served import answer_request

    class Served:   # answer_request needs only `select`; this one embeds with the test encoder
        def __init__(self, ix):
            self.ix = ix

        def select(self, *args, **kwargs):
            return self.ix.select(*args, **kwargs)

    served = Served(tapt.Index.open(fake_index))
    base = {"id": 7, "method": "centroid", "task": str(medical_task), "budget": "3"}
    for change, param in [({"task": {"files": 5}}, "task"), ({"task": {"files": "a.txt"}}, "task"),
                          ({"task": 5}, "task"), ({"task": {"paths": ["a"]}}, "task"),
                          ({"out": 5}, "out"), ({"overwrite": "yes"}, "overwrite")]:
        answer = answer_request(served, {**base, **change})
        assert answer["id"] == 7 and answer["error"].startswith(f"{param}: "), (change, answer)
    answer = answer_request(served, {**base, "segment_size": "two"})
    assert answer["id"] == 7 and "error" in answer
    answer = answer_request(served, {**base, "task": {"files": [str(medical_task)]},
                                     "out": str(tmp_path / "s.jsonl")})
    assert "error" not in answer and len(answer["ids"]) == 3 and (tmp_path / "s.jsonl").is_file()


def test_rank_is_pure_given_embeddings(fake_index):
    ix = Index(fake_index)
    task = np.asarray(ix.embeddings[7:8])
    # each sentence's own score (the default, auto, pools this corpus's documents)
    ranking, view = rank(ix, SelectConfig(method="centroid", budget="3", segment_size=1,
                                          context="sentence"), task)
    assert len(view) == ix.n_sentences and len(ranking.segments) == 3
    assert np.isclose(ranking.scores[0], 1.0, atol=1e-5)
    assert np.allclose(ix.embeddings[ranking.segments[0]], ix.embeddings[7])


def test_eval_refuses_selection_from_another_index(fake_index, medical_task, tmp_path):
    out, _ = select(fake_index, medical_task, tmp_path, method="centroid", budget="3")
    mpath = manifest_path(out)
    manifest = json.loads(mpath.read_text())
    manifest["index"]["uuid"] = "other"
    mpath.write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="another index"):
        evaluate_selections([str(out)], str(fake_index), "domain", "medical")


@pytest.mark.parametrize("rows", [[-3, 1], [10 ** 9, 10 ** 9 + 2]])
def test_eval_refuses_rows_outside_the_index_even_with_a_matching_manifest(
        fake_index, medical_task, tmp_path, rows):
    import hashlib

    out, _ = select(fake_index, medical_task, tmp_path, method="centroid", budget="3")
    lines = out.read_text().splitlines()
    first = json.loads(lines[0])
    first["rows"] = rows
    out.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    mpath = manifest_path(out)
    manifest = json.loads(mpath.read_text())
    manifest["selection_sha256"] = hashlib.sha256(out.read_bytes()).hexdigest()
    mpath.write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="names rows outside the index"):
        evaluate_selections([str(out)], str(fake_index), "domain", "medical")


def test_indexes_declare_the_selection_protocol(fake_index):
    from tapt.api import ServedIndex
    from tapt.retriever.ranking.index_protocol import CutsOwnRows, SelectableIndex, own_cuts, window

    ix = Index(fake_index)
    assert isinstance(ix, SelectableIndex) and own_cuts(ix) is None
    assert issubclass(ServedIndex, CutsOwnRows)      # its actors make the cuts
    rows = np.arange(10)
    assert window(rows, 2, 5).tolist() == [2, 3, 4]
