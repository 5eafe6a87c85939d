"""Text tapt would refuse as a task never enters an index: a record whose text holds NUL
(U+0000), in any format, is refused with its file and line (or row), or read as U+FFFD under
`--invalid-utf8 replace`; tabs and newlines are ordinary text; so a selection exported from an
index is always a valid task (issue 27, class 8)."""

from __future__ import annotations

import json

import pytest

from hashing_cli import one_error, run  # noqa: F401 - fixtures
from tapt.errors import InputError
from tapt.indexer.reading.reader import iter_documents, read_text, scan_inputs

GOOD = ["Patient fever dose and kidney biopsy.", "Lesion therapy for the kidney.",
        "Harbour tide and anchor.", "Clause licence warranty court."] * 3


def _jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def _parquet(path, texts):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts}), path)
    return path


def _csv(path, texts, pad=0):
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "pad"])
        for t in texts:
            writer.writerow([t, "x" * pad])
    return path


WRITERS = {"jsonl": _jsonl, "parquet": _parquet, "csv": _csv}
PLACE = {"jsonl": "c.jsonl:3", "parquet": "c.parquet:row 3", "csv": "c.csv:4"}


def _with_nul(fmt, tmp_path, pad=0):
    texts = GOOD[:2] + ["Fever\x00dose in the ward."] + GOOD[2:]
    if fmt == "csv":
        return _csv(tmp_path / "c.csv", texts, pad)
    return WRITERS[fmt](tmp_path / f"c.{fmt}", texts)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv"])
def test_a_record_holding_nul_is_refused_with_its_place(run, tmp_path, fmt):
    corpus = _with_nul(fmt, tmp_path)
    line = one_error(run("index", "build", corpus, "--out", tmp_path / "idx"), PLACE[fmt],
                     "NUL")
    assert "--invalid-utf8 replace" in line
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv"])
def test_replace_reads_nul_as_u_fffd_counted(run, tmp_path, fmt):
    corpus = _with_nul(fmt, tmp_path)      # one NUL in a small text file: not a binary file
    result = run("index", "build", corpus, "--out", tmp_path / "idx", "--invalid-utf8",
                 "replace", "--no-split")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["counts"]["invalid_utf8_records"] == 1
    scan = scan_inputs([corpus], invalid_utf8="replace")
    texts = [r.text for d in iter_documents(scan) for r in d.records]
    assert "Fever\ufffddose in the ward." in texts and not any("\x00" in t for t in texts)


def test_task_readers_refuse_nul_as_the_corpus_readers_do(tmp_path):
    for fmt in ("jsonl", "parquet"):
        with pytest.raises(InputError, match=f"{PLACE[fmt]}: contains NUL"):
            read_text([_with_nul(fmt, tmp_path)])


def test_tabs_and_newlines_are_ordinary_text(run, tmp_path):
    corpus = _jsonl(tmp_path / "c.jsonl", GOOD + ["Column\tseparated\ttext.",
                                                  "First line.\nSecond line.\r\nThird."])
    result = run("index", "build", corpus, "--out", tmp_path / "idx", "--no-split")
    assert result.exit_code == 0, result.output
    text = read_text([corpus], split=False).sentences
    assert any("separated" in t for t in text) and any("Third" in t for t in text)


def test_an_exported_selection_is_a_valid_task(run, tmp_path):
    corpus = _jsonl(tmp_path / "c.jsonl", GOOD + ["Fever\x00dose and\tkidney biopsy."])
    assert run("index", "build", corpus, "--out", tmp_path / "idx", "--invalid-utf8",
               "replace", "--no-split").exit_code == 0
    task = _jsonl(tmp_path / "task.jsonl", ["Fever dose and kidney biopsy."])
    made = run("select", "knn", tmp_path / "idx", "--task", task, "--budget", "1.0",
               "--out", tmp_path / "sel.jsonl")
    assert made.exit_code == 0, made.output
    for fmt in ("jsonl", "txt", "parquet"):
        out = tmp_path / f"export.{fmt}"
        assert run("export", tmp_path / "sel.jsonl", "--out", out).exit_code == 0
        again = run("select", "centroid", tmp_path / "idx", "--task", out, "--budget", "3",
                    "--out", tmp_path / f"again-{fmt}.jsonl")
        assert again.exit_code == 0, again.output
