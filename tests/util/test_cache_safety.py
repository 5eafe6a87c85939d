"""Caches only ever save time: a damaged entry is rebuilt with a warning, a cache directory that
cannot be written (read-only, a file) is skipped with one warning, and keys cover everything that
changes an embedding (issue 11)."""

from __future__ import annotations

import numpy as np
import pytest

import tapt
import tapt.util.cache as cache_module
from conftest import HashingEncoder
from faultfs import read_only_dir
from tapt.retriever.selections.file_format import read_selection
from tapt.retriever.tasks.embedding import SUBDIR, encode_cached


class Counting(HashingEncoder):
    embedded = 0

    def encode(self, texts, batch_size=64):
        self.embedded += len(texts)
        return super().encode(texts, batch_size)


SENTENCES = ["Patient fever dose.", "Kidney biopsy lesion therapy."]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(cache_module, "_WARNED", set())
    monkeypatch.setattr(cache_module, "_WRITABLE", {})


def entries(root):
    return sorted((root / SUBDIR).glob("*.npy"))


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "not npy"])
def test_a_damaged_entry_is_recomputed_with_a_warning(tmp_path, monkeypatch, caplog, damage):
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    enc = Counting()
    fresh, cached = encode_cached(enc, SENTENCES)
    assert not cached and encode_cached(enc, SENTENCES)[1]
    (entry,) = entries(tmp_path / "cache")
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[200] ^= 0x40
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"just text")
    entry.write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        emb, cached = encode_cached(enc, SENTENCES)
    assert not cached and enc.embedded == 2 * len(SENTENCES)
    np.testing.assert_array_equal(emb, fresh)
    assert damage == "empty" or any("damaged" in r.getMessage() for r in caplog.records)
    assert encode_cached(enc, SENTENCES)[1]           # rewritten sound


def test_keys_cover_backend_and_dtype(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    base, onnx, half = Counting(), Counting(), Counting()
    onnx.backend = "onnx"
    half.dtype = "float16"
    for enc in (base, onnx, half):
        assert encode_cached(enc, SENTENCES)[1] is False
    assert len(entries(tmp_path / "cache")) == 3


def _select(fake_index, task, out):
    return tapt.Index.open(fake_index).select("centroid", task, "5", out=out).manifest


def test_cache_that_is_a_file_gives_one_warning_and_every_command_works(
        fake_index, medical_task, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TAPT_CACHE_DIR", str(blocker))
    with caplog.at_level("WARNING"):
        first = _select(fake_index, medical_task, tmp_path / "a.jsonl")
        second = _select(fake_index, medical_task, tmp_path / "b.jsonl")
    warnings = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert not first["timings"]["task_embeddings_cached"]
    assert not second["timings"]["task_embeddings_cached"]
    assert [s.id for s in read_selection(tmp_path / "a.jsonl")[1]] == \
        [s.id for s in read_selection(tmp_path / "b.jsonl")[1]]
    assert blocker.read_text() == "not a directory"


def test_read_only_cache_is_read_but_never_written(fake_index, medical_task, tmp_path,
                                                   monkeypatch, caplog):
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "warm"))
    encode_cached(Counting(), SENTENCES)
    (entry,) = entries(tmp_path / "warm")
    files = {f"{SUBDIR}/{entry.name}": entry.read_bytes()}
    with read_only_dir(tmp_path / "ro", files) as ro:
        if ro is None:
            pytest.skip("no read-only directory can be made here")
        monkeypatch.setenv("TAPT_CACHE_DIR", str(ro))
        enc = Counting()
        with caplog.at_level("WARNING"):
            assert encode_cached(enc, SENTENCES)[1] is True and enc.embedded == 0
            manifest = _select(fake_index, medical_task, tmp_path / "s.jsonl")
            _select(fake_index, medical_task, tmp_path / "t.jsonl")
        assert not manifest["timings"]["task_embeddings_cached"]
        warnings = [r for r in caplog.records if "cannot be written" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
        assert [p.name for p in (ro / SUBDIR).iterdir()] == [entry.name]


def test_a_cache_inside_an_index_is_never_written(fake_index, medical_task, tmp_path,
                                                  monkeypatch, caplog):
    import shutil

    idx = tmp_path / "idx"
    shutil.copytree(fake_index, idx)
    before = sorted(p.relative_to(idx) for p in idx.rglob("*"))
    monkeypatch.setenv("TAPT_CACHE_DIR", str(idx / "cache"))
    with caplog.at_level("WARNING"):
        _select(idx, medical_task, tmp_path / "a.jsonl")
    assert sorted(p.relative_to(idx) for p in idx.rglob("*")) == before
    assert "lies inside the index" in caplog.text
