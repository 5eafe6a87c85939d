import gzip
import json

import pytest

from tapt.errors import InputError
from tapt.indexer.reader import expand_paths, iter_documents, read_texts, scan_inputs


def docs(paths, **kw):
    scan = scan_inputs(paths, **kw)
    return list(iter_documents(scan, doc_field=kw.get("doc_field", "doc")))


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
    assert [len(d.records) for d in docs([p], doc_field=None)] == [1, 1, 1, 1]


def test_directories_are_walked_in_sorted_order(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("B.\n")
    (tmp_path / "a.jsonl").write_text('{"text": "A."}\n')
    (tmp_path / "ignored.bin").write_bytes(b"\x00\x01")
    (tmp_path / ".hidden.txt").write_text("H.\n")
    assert [p.name for p in expand_paths([tmp_path])] == ["a.jsonl", "b.txt"]
    assert read_texts([tmp_path]) == ["A.", "B."]


@pytest.mark.parametrize("name,content,message", [
    ("bin.txt", b"abc\x00def\n", "NUL bytes"),
    ("latin.txt", "caf\u00e9\n".encode("latin-1"), "not valid UTF-8"),
    ("bad.jsonl", b'{"text": "ok"}\n{broken\n', "bad.jsonl:2: not valid JSON"),
    ("notext.jsonl", b'{"body": "x"}\n', "field 'text' is missing"),
    ("num.jsonl", b'{"text": 5}\n', "not a string"),
    ("list.jsonl", b'["x"]\n', "must be an object"),
    ("empty.txt", b"\n\n", "holds no text"),
])
def test_bad_files_fail_with_one_clear_error(tmp_path, name, content, message):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(InputError, match=message):
        scan_inputs([p])


def test_truncated_gzip_and_missing_paths(tmp_path):
    p = tmp_path / "t.txt.gz"
    data = gzip.compress(b"line one.\n" * 1000)
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="cannot read"):
        scan_inputs([p])
    with pytest.raises(InputError, match="no such file"):
        scan_inputs([tmp_path / "missing.txt"])
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(InputError, match="holds no"):
        scan_inputs([tmp_path / "emptydir"])
