"""Messages that name what exists: a record without the text field lists the fields it has, a
label that does not occur lists those that do (most frequent first, counted), a file given as a
selection that is an export says so; and export/train read the very bytes they checked."""

from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner

import tapt
from conftest import HashingEncoder
from tapt.cli import cli
from tapt.errors import InputError
from tapt.indexer.index import Index

TASK = ["Patient fever therapy dose.", "Kidney biopsy lesion."]


@pytest.fixture(autouse=True)
def hashing_model(monkeypatch):
    monkeypatch.setattr(Index, "load_encoder", lambda self, *a, **k: HashingEncoder())
    monkeypatch.setattr("tapt.indexer.encoding.encoder.load_encoder",
                        lambda *a, **k: HashingEncoder())


def error_of(*argv) -> str:
    result = CliRunner().invoke(cli, ["-q", *map(str, argv)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    return lines[0]


@pytest.fixture()
def selection(fake_index, tmp_path):
    sel = tapt.Index.open(fake_index).select("centroid", task=TASK, budget="4")
    return sel.write(tmp_path / "sel.jsonl")


def test_a_record_without_the_text_field_lists_its_fields(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "Fine."}\n{"body": "x", "title": "y", "lang": "en"}\n')
    line = error_of("index", "build", corpus, "--out", tmp_path / "idx")
    assert line == (f"Error: --text-field: {corpus}:2: field 'text' is missing (the record's "
                    "fields: 'body', 'title', 'lang'); name the one holding the text with "
                    "--text-field")
    corpus.write_text('{"text": ["a", "list"]}\n')
    assert "field 'text' is not a string (it holds list: [\"a\", \"list\"])" in error_of(
        "index", "build", corpus, "--out", tmp_path / "idx")


def test_a_label_that_does_not_occur_lists_those_that_do(selection, fake_index):
    line = error_of("eval", selection, "--index", fake_index, "--label", "medicall")
    assert line.startswith("Error: --label: no sentence of the index has domain = 'medicall': "
                           "did you mean 'medical'?; its values, most frequent first: "), line
    counted = line.split("most frequent first: ")[1]
    labels = [part.rsplit(" (", 1) for part in counted.split(", ")]
    counts = [int(n.rstrip(")").replace(",", "")) for _, n in labels]
    assert counts == sorted(counts, reverse=True) and "medical" in dict(labels)
    other = error_of("eval", selection, "--index", fake_index, "--label", "zzz")
    assert "did you mean" not in other and "its values, most frequent first" in other


@pytest.mark.parametrize("fmt,kind", [("parquet", "a Parquet file"),
                                      ("jsonl", "JSON Lines that are not selection lines"),
                                      ("txt", "not JSON Lines")])
def test_an_export_given_as_a_selection_is_named(selection, tmp_path, fmt, kind):
    export = tmp_path / f"train.{fmt}"
    tapt.export(selection, export)
    line = error_of("train", "--selection", export, "--steps", "1", "--out", tmp_path / "m")
    assert f"{export} is {kind}" in line and "not a selection file" in line
    assert "--out -" not in line
    with pytest.raises(InputError, match="not a selection file"):
        tapt.Selection.read(export)


def test_a_selection_without_its_manifest_still_says_how_that_happens(selection, tmp_path):
    (tmp_path / "sel.jsonl.manifest.json").unlink()
    assert "written to standard output (--out -) has none" in error_of(
        "export", selection, "--out", tmp_path / "x.parquet")


def test_export_reads_the_bytes_it_checked(fake_index, selection, tmp_path, monkeypatch):
    """A selection written over the path between the check and the reading (a concurrent
    `select --out`) never lends its rows to the first one's manifest."""
    from tapt.retriever.selections import file_format

    other = tapt.Index.open(fake_index).select(
        "centroid", task=["Captain anchor harbour tide storm."], budget="4").write(tmp_path / "other.jsonl")
    first_ids = [s.id for s in tapt.Selection.read(selection)]
    assert first_ids != [s.id for s in tapt.Selection.read(other)]
    swapped = []

    def swap_after(real):
        def hashing(*args, **kwargs):
            out = real(*args, **kwargs)
            if not swapped:
                swapped.append(True)
                shutil.copy(other, tmp_path / "new.jsonl")
                os.replace(tmp_path / "new.jsonl", selection)
            return out
        return hashing

    for name in ("hash_stream", "sha256_file"):
        if hasattr(file_format, name):
            monkeypatch.setattr(file_format, name, swap_after(getattr(file_format, name)))
    read = tapt.Selection.read(selection)
    assert swapped and [s.id for s in read] == first_ids
    assert read.manifest["task"]["sha256"] != tapt.Selection.read(other).manifest["task"][
        "sha256"]


def test_resuming_over_a_rewritten_selection_says_it_was_rewritten():
    from tapt.trainer.manifest import identity_differences

    diffs = identity_differences({"selections": ["a" * 64], "data_sha256": "x", "lr": 1e-4},
                                 {"selections": ["b" * 64], "data_sha256": "y", "lr": 1e-4})
    assert diffs == ["a selection file holds other segments than when the run began (it was "
                     "rewritten or replaced since: a select --out over it?)"]
    assert identity_differences({"lr": 1e-4, "data_sha256": "x"},
                                {"lr": 2e-4, "data_sha256": "y"}) == [
        'data_sha256: "x" -> "y"', "lr: 0.0001 -> 0.0002"]
