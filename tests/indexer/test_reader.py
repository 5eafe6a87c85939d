"""The shared reading layer: documents from records, folders, refusals, deduplication, stdin."""

import gzip
import io
import json
import logging
import sys

import pytest

from tapt.errors import InputError
from tapt.indexer.reading.reader import expand_inputs, iter_documents, read_text, scan_inputs
from tapt.retriever.tasks.reading import load_task


def docs(paths, **kw):
    return list(iter_documents(scan_inputs(paths, **kw)))


def test_text_one_document_per_line(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("First doc.\nSecond doc.\n\n", encoding="utf-8")
    out = docs([p])
    assert [d.records[0].text for d in out] == ["First doc.", "Second doc."]


def test_text_blank_line_blocks_are_detected(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("One line\ncontinues.\n\nSecond block.\n", encoding="utf-8")
    out = docs([p])
    assert [d.records[0].text for d in out] == ["One line continues.", "Second block."]
    assert [d.records[0].text for d in docs([p], text_docs="line")] == [
        "One line", "continues.", "Second block."]


def test_jsonl_groups_consecutive_records_by_doc_and_keeps_metadata(tmp_path):
    p = tmp_path / "a.jsonl.gz"
    rows = [{"text": "A one.", "doc": "x", "domain": "d1"}, {"text": "A two.", "doc": "x"},
            {"text": "B.", "doc": "y"}, {"text": "No doc."}, {"text": "   "}]
    with gzip.open(p, "wt") as fh:
        fh.write("\n".join(json.dumps(r) for r in rows) + "\n")
    scan = scan_inputs([p])
    assert scan.skipped_blank == 1 and scan.records == 4
    out = list(iter_documents(scan))
    assert [len(d.records) for d in out] == [2, 1, 1]
    assert out[0].records[0].meta == {"doc": "x", "domain": "d1"}
    assert out[0].key == "x" and out[2].key == f"{p}:4"
    assert [len(d.records) for d in docs([p], doc_field=None)] == [1, 1, 1, 1]
    assert list(iter_documents(scan, skip=2))[0].key == f"{p}:4"


def test_folders_are_walked_in_sorted_order_and_others_reported(tmp_path, caplog):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("B.\n")
    (tmp_path / "a.jsonl").write_text('{"text": "A."}\n')
    (tmp_path / "ignored.bin").write_bytes(b"\x00\x01")
    (tmp_path / "notes.md").write_text("# not corpus\n")
    (tmp_path / ".hidden.txt").write_text("H.\n")
    with caplog.at_level(logging.INFO, logger="tapt.indexer.reading.reader"):
        assert [f.source.basename for f in expand_inputs([tmp_path])] == ["a.jsonl", "b.txt"]
    assert "skipped 2 entries" in caplog.text
    assert "ignored.bin" in caplog.text and "notes.md" in caplog.text
    assert read_text([tmp_path]).sentences == ["A.", "B."]
    with pytest.raises(InputError, match="2 entries are not corpus files.*ignored.bin") as err:
        scan_inputs([tmp_path], strict=True)
    assert "drop `strict`" in err.value.message


def test_unknown_extension_named_directly_is_refused_never_read_as_text(tmp_path):
    p = tmp_path / "corpus.dat"
    p.write_text('{"text": "A record."}\n')
    with pytest.raises(InputError, match=r"corpus.dat: unknown format \(known: jsonl") as err:
        scan_inputs([p])
    assert "`input_format`" in err.value.message
    scan = scan_inputs([p], input_format="jsonl")
    assert [d.records[0].text for d in iter_documents(scan)] == ["A record."]
    gz = tmp_path / "corpus.gz"
    gz.write_bytes(gzip.compress(b"Plain line.\n"))
    assert read_text([gz], input_format="text").sentences == ["Plain line."]
    with pytest.raises(InputError, match="unknown format 'yaml'") as err:
        scan_inputs([p], input_format="yaml")
    assert err.value.param == "input_format"
    with pytest.raises(InputError, match="not read gzip-compressed"):
        scan_inputs([gz], input_format="parquet")


@pytest.mark.parametrize("name,content,message", [
    ("bin.txt", b"abc\x00def\n", "a binary file"),
    ("late.txt", b"fine line\n" * 2000 + b"bad\x00line\n", "late.txt:2001: contains NUL bytes"),
    ("latin.txt", "caf\u00e9\n".encode("latin-1"), "latin.txt:1: not valid UTF-8"),
    ("bad.jsonl", b'{"text": "ok"}\n{broken\n', "bad.jsonl:2: not valid JSON"),
    ("notext.jsonl", b'{"body": "x"}\n', "notext.jsonl:1: field 'text' is missing"),
    ("num.jsonl", b'{"text": 5}\n', "not a string"),
    ("list.jsonl", b'["x"]\n', "must be an object"),
    ("array.json", b'[{"text": "x"}]\n', "read as JSON Lines"),
    ("empty.txt", b"\n\n", "holds no text"),
    ("ragged.csv", b"text,label\nok,1\nbad,1,extra\n", "ragged.csv:3: 3 fields where the header has 2"),
    ("quote.csv", b'text,label\n"unclosed,1\n', "quote.csv:2: not valid CSV"),
    ("nocol.csv", b"body,label\nx,1\n", "no column 'text' in the header"),
    ("nohead.tsv", b"", "no header row"),
])
def test_bad_files_fail_with_one_clear_error(tmp_path, name, content, message):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(InputError, match=message):
        scan_inputs([p])


def test_field_errors_name_the_parameter(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"body": "x"}\n')
    with pytest.raises(InputError) as err:
        scan_inputs([p])
    assert err.value.param == "text_field"
    assert str(err.value).startswith("text_field: ")
    assert read_text([p], text_field="body").sentences == ["x"]


def test_missing_paths_and_empty_folders(tmp_path):
    with pytest.raises(InputError, match="missing.txt: does not exist"):
        scan_inputs([tmp_path / "missing.txt"])
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(InputError, match="holds no corpus files"):
        scan_inputs([tmp_path / "emptydir"])
    with pytest.raises(InputError, match="no input files"):
        scan_inputs([])


def test_corpus_cannot_come_from_stdin(tmp_path):
    with pytest.raises(InputError, match="standard input"):
        scan_inputs(["-"])


def test_same_input_given_twice_is_read_once_with_a_warning(tmp_path, caplog):
    """Issue 11: the same task file twice, or a file and the folder holding it."""
    folder = tmp_path / "task"
    folder.mkdir()
    a = folder / "a.txt"
    a.write_text("Fever and cough.\n")
    (folder / "b.txt").write_text("A kidney biopsy.\n")
    once = load_task([a])
    with caplog.at_level(logging.WARNING):
        twice = load_task([a, str(a), folder / ".." / "task" / "a.txt"])
    assert twice.sentences == once.sentences and twice.sha256 == once.sha256
    assert "given more than once" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        both = load_task([a, folder])
    assert both.sentences == ["Fever and cough.", "A kidney biopsy."]
    assert both.files == [str(a), str(folder / "b.txt")]
    assert "given more than once" in caplog.text


def _stdin(monkeypatch, data: bytes):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_stdin_task_jsonl_or_plain_text(monkeypatch, caplog):
    _stdin(monkeypatch, b'\n{"text": "Patient has a fever. It rose.", "label": 1}\n{"text": "Dose."}\n')
    task = load_task(["-"])
    assert task.sentences == ["Patient has a fever.", "It rose.", "Dose."]
    assert task.files == ["<stdin>"]
    _stdin(monkeypatch, b"{not json} but text\nSecond line.\n")
    assert load_task("-").sentences == ["{not json} but text", "Second line."]
    _stdin(monkeypatch, b"One line.\n")
    with caplog.at_level(logging.WARNING):
        assert load_task(["-", "-"]).sentences == ["One line."]
    assert "more than once" in caplog.text
    _stdin(monkeypatch, b"text,label\nA row.,x\n")
    assert load_task(["-"], input_format="csv").sentences == ["A row."]
    _stdin(monkeypatch, b"\n\n")
    with pytest.raises(InputError, match="holds no text"):
        load_task(["-"])


def test_read_text_hashes_match_the_files(tmp_path):
    import hashlib

    a, b = tmp_path / "a.txt", tmp_path / "b.jsonl"
    a.write_bytes(b"Alpha.\n")
    b.write_bytes(b'{"text": "Beta."}\n')
    text = read_text([a, b])
    assert text.file_sha256 == [hashlib.sha256(b"Alpha.\n").hexdigest(),
                                hashlib.sha256(b'{"text": "Beta."}\n').hexdigest()]
    assert text.sha256 == hashlib.sha256(b'Alpha.\n{"text": "Beta."}\n').hexdigest()
    assert text.documents == [["Alpha."], ["Beta."]]


def test_jsonl_lone_surrogate_escapes_and_null_texts_are_read(tmp_path):
    """Scraped JSON escapes lone UTF-16 surrogates ("\\ud800"), which UTF-8 cannot store: they
    become U+FFFD, in the text and the metadata. A null text is a blank record, as in a table."""
    p = tmp_path / "s.jsonl"
    p.write_text('{"text": "Lone \\ud800 here.", "title": "bad \\udc80"}\n{"text": null}\n'
                 '{"text": "A pair \\ud83d\\ude00 stays."}\n')
    scan = scan_inputs([p])
    assert scan.files[0].scanned.records == 2 and scan.files[0].scanned.blank == 1
    records = [r for d in iter_documents(scan) for r in d.records]
    assert records[0].text == "Lone \ufffd here." and records[0].meta["title"] == "bad \ufffd"
    assert records[1].text == "A pair \U0001F600 stays."
    for record in records:
        record.text.encode("utf-8")


def test_folder_of_shards_skips_markers_and_empty_partitions(tmp_path, caplog):
    """Spark and datatrove folders: `_SUCCESS` / `_logs` and hidden files are not corpus files
    (with --input-format too), and an empty partition is skipped with a warning; an empty file
    named on its own, or a folder of nothing but empty files, is still refused."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    folder = tmp_path / "out"
    folder.mkdir()
    table = pa.table({"text": pa.array(["One. Two.", "Three."]).dictionary_encode()})
    pq.write_table(table, folder / "part-00000.parquet")
    pq.write_table(table.slice(0, 0), folder / "part-00001.parquet")
    (folder / "part-00002.jsonl").write_text("")
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-00000.parquet.crc").write_text("x")
    with caplog.at_level(logging.WARNING):
        scan = scan_inputs([folder], strict=True)
    assert [f.name.split("/")[-1] for f in scan.files] == ["part-00000.parquet"]
    assert "skipped 2 file(s) in folders that hold no text" in caplog.text
    assert [r.text for d in iter_documents(scan) for r in d.records] == ["One. Two.", "Three."]
    hadoop = tmp_path / "hadoop"
    hadoop.mkdir()
    (hadoop / "part-00000").write_text('{"text": "Hello there."}\n')
    (hadoop / "_SUCCESS").write_text("")
    assert len(scan_inputs([hadoop], input_format="jsonl").files) == 1
    with pytest.raises(InputError, match="part-00001.parquet: holds no text"):
        scan_inputs([folder / "part-00001.parquet"])
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.jsonl").write_text("")
    (empty / "b.jsonl").write_text("")
    with pytest.raises(InputError, match="a.jsonl: holds no text \\(nor do the 1 other"):
        scan_inputs([empty])


def test_glob_patterns_stand_for_the_files_they_match(tmp_path):
    """`data/*/*.jsonl`, `**`, file:// and fsspec URLs (memory://) are expanded, sorted; markers
    and hidden files are left out as in a folder; a pattern matching nothing is refused."""
    fsspec = pytest.importorskip("fsspec")
    for sub in ("a", "b"):
        (tmp_path / "data" / sub).mkdir(parents=True)
        (tmp_path / "data" / sub / f"{sub}.jsonl").write_text('{"text": "Hello there."}\n')
    (tmp_path / "data" / "a" / "_SUCCESS").write_text("")
    names = lambda spec: [f.name.rsplit("/", 1)[-1] for f in expand_inputs([spec])]  # noqa: E731
    assert names(str(tmp_path / "data" / "*" / "*.jsonl")) == ["a.jsonl", "b.jsonl"]
    assert names(str(tmp_path / "data" / "**" / "*")) == ["a.jsonl", "b.jsonl"]
    assert names(f"file://{tmp_path}/data/a/*") == ["a.jsonl"]
    fs = fsspec.filesystem("memory")
    fs.pipe("/globbed/x.jsonl", b'{"text": "Hi."}\n')
    fs.pipe("/globbed/y.jsonl", b'{"text": "Hi again."}\n')
    assert names("memory://globbed/*.jsonl") == ["x.jsonl", "y.jsonl"]
    with pytest.raises(InputError, match="the pattern matches no files"):
        expand_inputs([str(tmp_path / "nothing" / "*.parquet")])
    odd = tmp_path / "odd[1].jsonl"                 # an existing name is a name, not a pattern
    odd.write_text('{"text": "Hi."}\n')
    assert names(str(odd)) == ["odd[1].jsonl"]


def test_nan_and_infinite_metadata_become_null_in_every_format(tmp_path):
    """JSON has no NaN: a NaN or infinite metadata value (a Parquet float, JSONL's `NaN`
    extension) is kept as null, as a null is, so a selection's JSON stays standard JSON."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["One.", "Two."], "score": [float("nan"), 1.5]}),
                   tmp_path / "a.parquet")
    (tmp_path / "b.jsonl").write_text('{"text": "Three.", "s": NaN, "t": [1.0, -Infinity]}\n')
    metas = [r.meta for f in ("a.parquet", "b.jsonl")
             for d in iter_documents(scan_inputs([tmp_path / f])) for r in d.records]
    assert metas == [{"score": None}, {"score": 1.5}, {"s": None, "t": [1.0, None]}]
    json.dumps(metas, allow_nan=False)


def test_a_corpus_folder_holding_an_index_is_refused_by_name(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "old-index" / "shards").mkdir(parents=True)
    (corpus / "old-index" / "manifest.json").write_text('{\n  "format": "tapt-index"\n}\n')
    (corpus / "a.txt").write_text("One sentence here.\n")
    with pytest.raises(InputError, match="old-index: is a tapt index, not corpus text"):
        expand_inputs([corpus])
    (corpus / "old-index" / "manifest.json").unlink()     # a folder of other things: read on
    assert [f.name for f in expand_inputs([corpus])] == [str(corpus / "a.txt")]
