"""Why a row was picked (`select(..., explain=True)`, `tapt show`, `tapt plot scores`, `tapt
plot domains --color-by`): each scorer's part of a segment's score adds up to it at sentence
context, a sentence's own score stands beside its document's pooled one at document context,
the nearest task sentences are the task's, the sample of corpus scores is seeded and the
selection with and without `explain` is the same."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import tapt
import tapt.indexer.encoding.encoder
from conftest import HashingEncoder
from tapt.cli import cli

TASK = ["Patient fever therapy dose.", "Kidney biopsy lesion chronic.", "Tumour cardiac nerve."]


@pytest.fixture()
def index(fake_index):
    return tapt.Index.open(fake_index)


@pytest.mark.parametrize("method,names", [("centroid", ["centroid"]),
                                          ("classifier", ["classifier"]),
                                          ("fused", ["meaning", "lm", "words"])])
def test_the_parts_add_up_to_the_score_and_change_nothing(index, method, names):
    plain = index.select(method, TASK, "8", context="sentence")
    sel = index.select(method, TASK, "8", context="sentence",
                       explain=True)
    assert sel.ids.tolist() == plain.ids.tolist()
    assert sel.manifest["explain"]["parts"] == names
    for segment in sel:
        parts = segment.explain["parts"]
        assert list(parts) == names
        assert sum(parts.values()) == pytest.approx(segment.score, abs=1e-4)
        assert segment.explain["own"] == pytest.approx(segment.score, abs=1e-4)
        assert "document" not in segment.explain
        nearest = segment.explain["nearest"]
        assert len(nearest) == 3 and {n["sentence"] for n in nearest} <= set(TASK)
        assert [n["cosine"] for n in nearest] == sorted((n["cosine"] for n in nearest),
                                                        reverse=True)
    sample = sel.manifest["explain"]["sample"]
    assert sample["of"] == sample["segments"] == len(sample["scores"])   # a small index: all
    assert sel.manifest["explain"]["cut"] == pytest.approx(sel.segments[-1].score, abs=1e-6)
    # the segments the selection kept are the best of the whole sample
    assert min(s.score for s in sel) >= sorted(sample["scores"])[-len(sel)] - 1e-4


def test_document_context_keeps_the_own_score_beside_the_documents(index):
    sel = index.select("centroid", TASK, "6", context="document",
                       explain=True)
    assert sel.manifest["explain"]["context"] == "document"
    assert sel.manifest["explain"]["sample"] is None     # a document's pool needs every row
    for segment in sel:
        assert segment.explain["document"] == pytest.approx(segment.score, abs=1e-6)
        assert segment.explain["own"] == pytest.approx(segment.explain["parts"]["centroid"])
    assert any(s.explain["own"] != pytest.approx(s.explain["document"]) for s in sel)


def test_a_method_without_parts_says_so_and_the_file_keeps_it(index, tmp_path):
    sel = index.select("knn", TASK, "5", explain=True, k=3)
    assert sel.manifest["explain"]["parts"] == [] and sel.manifest["explain"]["sample"] is None
    assert all(s.explain["parts"] == {} and len(s.explain["nearest"]) == 3 for s in sel)
    path = sel.write(tmp_path / "knn.jsonl")
    again = tapt.Selection.read(path)
    assert [s.explain for s in again] == [s.explain for s in sel]
    assert "explain" not in json.loads(index.select("knn", TASK, "5",
                                                    k=3).segments[0].to_json())


def test_show_and_plots(fake_index, tmp_path, monkeypatch):
    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder",
                        lambda spec=None, device="auto", backend="auto", threads=None, **_:
                        HashingEncoder())
    (tmp_path / "task.txt").write_text("\n".join(TASK) + "\n")
    run = CliRunner().invoke
    sel = tmp_path / "sel.jsonl"
    made = run(cli, ["-q", "select", "fused", str(fake_index), "--task", str(tmp_path / "task.txt"),
                     "--budget", "6", "--context", "sentence", "--explain", "--out", str(sel)])
    assert made.exit_code == 0, made.output
    shown = run(cli, ["show", str(sel), "--top", "2", "--field", "domain"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[1].split()[:5] == ["rank", "score", "meaning", "lm", "words"]
    assert "nearest task sentence:" in shown.output and "share by domain:" in shown.output
    report = json.loads(run(cli, ["show", str(sel), "--json", "--field", "domain"]).output)
    assert sum(s["share"] for s in report["share"]) == pytest.approx(1.0, abs=1e-3)
    assert report["share"][0]["value"] == "medical"
    png = tmp_path / "scores.png"
    drawn = run(cli, ["plot", "scores", str(sel), "--out", str(png)])
    assert drawn.exit_code == 0 and png.read_bytes().startswith(b"\x89PNG"), drawn.output
    assert "6 selected" in drawn.output
    # a plot replaces only a plot of its own
    (tmp_path / "notes.png").write_text("mine")
    refused = run(cli, ["plot", "scores", str(sel), "--out", str(tmp_path / "notes.png")])
    assert refused.exit_code == 1 and (tmp_path / "notes.png").read_text() == "mine"
    for colour in ("source", "score", "domain"):
        out = tmp_path / f"map-{colour}.png"
        done = run(cli, ["plot", "domains", str(fake_index), "--out", str(out), "--sample", "80",
                         "--selection", str(sel), "--color-by", colour])
        assert done.exit_code == 0 and out.stat().st_size > 1000, done.output
    missing = run(cli, ["plot", "domains", str(fake_index), "--out", str(tmp_path / "m.png"),
                        "--color-by", "nothing-has-this"])
    assert missing.exit_code == 1 and missing.output.count("\n") == 1
    assert "Error: --color-by: no sampled sentence" in missing.output
    no_selection = run(cli, ["plot", "domains", str(fake_index), "--out", str(tmp_path / "m.png"),
                             "--color-by", "score"])
    assert no_selection.exit_code == 1 and "--selection" in no_selection.output


def test_the_sample_is_seeded(index):
    a, b, c = (index.select("centroid", TASK, "4", seed=seed,
                            context="sentence", explain=True, segment_size=1)
               for seed in (1, 1, 2))
    assert a.manifest["explain"]["sample"] == b.manifest["explain"]["sample"]
    assert np.isfinite(c.manifest["explain"]["sample"]["scores"]).all()
