"""Nothing a user owns is ever destroyed: every command that writes refuses an output that is an
input, inside or around one, inside an index, or something tapt did not make (issue 11)."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import write_labelled_corpus
from hashing_cli import one_error, run  # noqa: F401 - fixtures
from tapt.errors import OutputError
from tapt.indexer.index import Index


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "corpus" / "pool.jsonl"
    path.parent.mkdir()
    write_labelled_corpus(path, docs_per_topic=3)
    return path


def snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_overwrite_never_deletes_a_folder_of_user_files(run, corpus, tmp_path):
    papers = tmp_path / "papers"
    papers.mkdir()
    (papers / "thesis.tex").write_text("years of work")
    one_error(run("index", "build", corpus, "--out", papers, "--overwrite"), "never replaced")
    assert (papers / "thesis.tex").read_text() == "years of work"


@pytest.mark.parametrize("where", ["the input", "its folder", "a folder around it",
                                   "inside an input folder"])
def test_out_is_never_an_input_inside_or_around_one(run, corpus, tmp_path, where):
    source = corpus.parent if where == "inside an input folder" else corpus
    out = {"the input": corpus, "its folder": corpus.parent, "a folder around it": tmp_path,
           "inside an input folder": corpus.parent / "idx"}[where]
    before = snapshot(tmp_path)
    result = run("index", "build", source, "--out", out, "--overwrite")
    one_error(result, "input")
    assert snapshot(tmp_path) == before


def test_overwrite_replaces_only_a_tapt_index_holding_nothing_else(run, corpus, tmp_path):
    idx = tmp_path / "idx"
    assert run("index", "build", corpus, "--out", idx, "--no-split").exit_code == 0
    first = Index(idx).uuid
    one_error(run("index", "build", corpus, "--out", idx), "pass --overwrite")
    assert run("index", "build", corpus, "--out", idx, "--overwrite").exit_code == 0
    assert Index(idx).uuid != first
    (idx / "notes.txt").write_text("mine")
    one_error(run("index", "build", corpus, "--out", idx, "--overwrite"), "notes.txt")
    assert (idx / "notes.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run("index", "build", corpus, "--out", empty).exit_code == 0
    assert Index(empty).n_sentences > 0


def test_nothing_is_written_inside_an_index_nor_read_from_one_as_corpus(run, corpus, tmp_path):
    idx = tmp_path / "idx"
    assert run("index", "build", corpus, "--out", idx).exit_code == 0
    before = snapshot(idx)
    one_error(run("index", "build", corpus, "--out", idx / "sub"), "inside the tapt index")
    one_error(run("index", "build", idx / "manifest.json", "--out", tmp_path / "x"),
              "lies inside the tapt index")
    one_error(run("index", "add", idx, idx / "manifest.json"), "lies inside the tapt index")
    one_error(run("index", "add", idx, tmp_path), "lies inside the input")
    assert snapshot(idx) == before and not (tmp_path / "x").exists()


def test_a_work_directory_someone_else_made_is_never_removed(run, corpus, tmp_path):
    idx = tmp_path / "idx"
    assert run("index", "build", corpus, "--out", idx).exit_code == 0
    squatter = tmp_path / ".idx.reindexing"
    squatter.mkdir()
    (squatter / "diary.txt").write_text("private")
    one_error(run("index", "reindex", idx, "--index", "flat"), "does not look like tapt's")
    assert (squatter / "diary.txt").read_text() == "private"


def test_train_out_is_never_an_input_an_index_or_a_foreign_folder(tmp_path, fake_index):
    from tapt.trainer.outdir import check_output

    selection = tmp_path / "sel.jsonl"
    selection.write_text("{}\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.txt").write_text("mine")
    for out, message in ((selection, "input"), (fake_index / "model", "inside the tapt index"),
                         (folder, "never replaced"), (tmp_path, "contains the input")):
        with pytest.raises(OutputError, match=message):
            check_output(out, None, False, inputs=[selection])
    assert (folder / "a.txt").read_text() == "mine" and selection.read_text() == "{}\n"


def test_bench_and_plot_outputs_follow_the_rule(run, fake_index, tmp_path):
    from tapt.bench.recall_run import check_bench_outputs

    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "paper.md").write_text("mine")
    with pytest.raises(OutputError, match="never replaced"):
        check_bench_outputs(folder, tmp_path / "cache", [fake_index])
    with pytest.raises(OutputError, match="inside the tapt index"):
        check_bench_outputs(tmp_path / "new", fake_index / "cache", [])
    with pytest.raises(OutputError, match="the input"):
        check_bench_outputs(tmp_path / "c" / "out", tmp_path / "c", [])
    check_bench_outputs(tmp_path / "new", tmp_path / "cache", [fake_index])

    pytest.importorskip("matplotlib")
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG holiday")
    one_error(run("plot", "domains", fake_index, "--out", photo, "--sample", 50),
              "never replaces a file it did not write")
    assert photo.read_bytes() == b"\x89PNG holiday"
    one_error(run("plot", "domains", fake_index, "--out", fake_index / "map.png"),
              "lies inside")
    plot = tmp_path / "map.png"
    assert run("plot", "domains", fake_index, "--out", plot, "--sample", 50).exit_code == 0
    assert run("plot", "domains", fake_index, "--out", plot, "--sample", 60).exit_code == 0


def test_a_build_killed_by_a_full_disk_keeps_the_old_index(run, corpus, tmp_path, monkeypatch):
    """--overwrite of an index: the old one stays until the new one is complete."""
    import errno

    import tapt.indexer.building.stages as stages

    idx = tmp_path / "idx"
    assert run("index", "build", corpus, "--out", idx).exit_code == 0
    before = snapshot(idx)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(stages, "build_part", full)
    one_error(run("index", "build", corpus, "--out", idx, "--overwrite"), "disk full")
    assert snapshot(idx) == before
    assert json.loads((idx / "manifest.json").read_text())["format"] == "tapt-index"
    shutil.rmtree(tmp_path / ".idx.building", ignore_errors=True)
