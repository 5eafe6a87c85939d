"""Exports keep the corpus's own field names: every metadata field a typed column of its own,
tapt's provenance under `tapt_` names that cannot collide with them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import tapt

PROVENANCE = {"tapt_rank", "tapt_id", "tapt_doc", "tapt_row_start", "tapt_row_end",
              "tapt_doc_key", "tapt_source", "tapt_sentences", "tapt_sentence_meta",
              "tapt_method"}


@pytest.fixture(scope="module")
def selection(tmp_path_factory):
    """A selection of a corpus whose records have fields `source`, `doc`, `year`, `tags`, and
    `score` and `tapt_note` (names tapt's own columns take)."""
    tmp = tmp_path_factory.mktemp("fields")
    corpus = tmp / "pool.jsonl"
    with open(corpus, "w") as fh:
        for i in range(12):
            fh.write(json.dumps({"text": f"Fever and a cough in patient number {i}.",
                                 "source": f"ward-{i % 3}", "doc": f"note-{i}", "year": 2000 + i,
                                 "tags": ["medical", f"t{i}"], "score": i / 10,
                                 "tapt_note": "x"}) + "\n")
    ix = tapt.Index.build([corpus], tmp / "idx", model="hashing-test", segment_size=1,
                          split=False, doc_field=None)
    return ix.select("centroid", task=["Fever and a cough."], budget="5")


def _check_columns(names):
    assert list(names[:3]) == ["text", "weight", "score"] and PROVENANCE <= set(names)
    assert {"source", "doc", "year", "tags", "corpus_score", "corpus_tapt_note"} <= set(names)
    assert "meta" not in names and "id" not in names


def test_parquet_has_typed_corpus_columns(selection, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(selection.export(tmp_path / "train.parquet"))
    _check_columns(table.column_names)
    schema = table.schema
    assert schema.field("year").type == pa.int64()
    assert schema.field("tags").type == pa.list_(pa.string())
    assert schema.field("source").type == schema.field("doc").type == pa.string()
    assert schema.field("corpus_score").type == pa.float64()
    assert schema.field("tapt_id").type == pa.int64()
    rows = table.to_pylist()
    first = selection[0]
    assert rows[0]["source"] == first.meta["source"] and rows[0]["doc"] == first.meta["doc"]
    assert rows[0]["tapt_source"] == first.source and rows[0]["tapt_doc"] == first.doc
    assert rows[0]["year"] == first.meta["year"] and rows[0]["tags"][0] == "medical"
    assert rows[0]["score"] == pytest.approx(first.score)


def test_hf_dataset_has_typed_corpus_columns(selection, tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_from_disk(str(selection.export(tmp_path / "ds", format="hf")))
    _check_columns(ds.column_names)
    assert ds.features["year"].dtype == "int64" and ds.features["source"].dtype == "string"
    assert ds[0]["tags"] == selection[0].meta["tags"] and ds[0]["doc"] == selection[0].meta["doc"]
    assert ds[0]["tapt_doc_key"] == selection[0].doc_key


def test_jsonl_and_pandas_keep_the_fields(selection, tmp_path):
    path = selection.export(tmp_path / "train.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    _check_columns(list(rows[0]))
    assert isinstance(rows[0]["year"], int) and isinstance(rows[0]["tags"], list)
    assert rows[0]["doc"] == selection[0].meta["doc"] and rows[0]["tapt_doc"] == selection[0].doc
    pytest.importorskip("pandas")
    df = selection.to_pandas()
    _check_columns(list(df.columns))
    assert (df["year"] >= 2000).all() and df["source"].str.startswith("ward-").all()


def test_a_field_without_one_type_is_json_text(selection):
    pa = pytest.importorskip("pyarrow")
    mixed = tapt.Selection(list(selection.segments[:2]), selection.manifest)
    mixed.segments[0] = _with_meta(mixed.segments[0], {"year": 2001, "extra": {}})
    mixed.segments[1] = _with_meta(mixed.segments[1], {"year": "unknown"})
    table = mixed.to_arrow()
    assert table.schema.field("year").type == pa.string()
    assert [json.loads(v) for v in table["year"].to_pylist()] == [2001, "unknown"]
    assert table["extra"].to_pylist() == ["{}", None]


def _with_meta(segment, meta):
    import dataclasses

    return dataclasses.replace(segment, meta=meta)


def test_the_file_format_page_lists_the_fixed_columns():
    from tapt.retriever.selections import export_schema

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "files.md").read_text()
    table = page.split("<!-- export-columns -->", 1)[1].split("<!-- /export-columns -->", 1)[0]
    assert tuple(re.findall(r"^\| `([a-z_]+)` \|", table, re.M)) == export_schema.FIXED
    assert export_schema.FIXED[:3] == ("text", "weight", "score")
    assert set(export_schema.PROVENANCE) == PROVENANCE


def test_an_export_of_the_old_layout_is_still_tapts_own(selection, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from tapt.retriever.selections.selection import _PARQUET_KEY, _PARQUET_ROWS_KEY, _rows_digest

    old = pa.table({"text": selection.texts, "id": selection.ids.tolist(),
                    "meta": [json.dumps(m) for m in selection.meta]})
    old = old.replace_schema_metadata({_PARQUET_KEY: b"{}",
                                       _PARQUET_ROWS_KEY: _rows_digest(old).encode()})
    pq.write_table(old, tmp_path / "train.parquet")
    selection.export(tmp_path / "train.parquet")          # replaced without `overwrite`
    assert "tapt_id" in pq.read_schema(tmp_path / "train.parquet").names
    lines = [json.dumps(dict(zip(("text", "weight", "score", "rank", "id", "doc", "row_start",
                                  "row_end", "doc_key", "source", "meta", "sentence_meta",
                                  "sentences", "method"), [""] * 14)))]
    (tmp_path / "old.jsonl").write_text(lines[0] + "\n")
    with pytest.raises(tapt.OutputError, match="overwrite"):
        selection.export(tmp_path / "old.jsonl")           # tapt's, changed: only with it
    selection.export(tmp_path / "old.jsonl", overwrite=True)
