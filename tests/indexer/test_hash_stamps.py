"""What a build or an add wrote and hashed is vouched for by a stamp in the cache, small files
too: the first open in another process hashes small files only up to its budget
(`integrity.opening`), not every file of a new index again; a file changed since is hashed and
refused."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from conftest import HashingEncoder, write_labelled_corpus
from tapt.errors import IndexFormatError
from tapt.indexer.building.add import add_to_index
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.index import Index
from tapt.indexer.store import integrity

BUDGET = 1000       # bytes of small files an open hashes: less than one shard's arrays


@pytest.fixture()
def opens(tmp_path, monkeypatch):
    """A fresh cache; `opens.new_process()` forgets this process's verdicts and returns the
    names of the files hashed from then on; every open has a budget of `BUDGET` bytes."""
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(integrity, "_VERIFIED", set())
    real_opening = integrity.opening.__wrapped__
    monkeypatch.setattr(integrity, "opening",
                        contextlib.contextmanager(lambda budget=BUDGET: real_opening(budget)))
    hashed: list[tuple[str, int]] = []
    real = integrity.sha256_file

    def recording(path, progress=False):
        hashed.append((Path(path).name, Path(path).stat().st_size))
        return real(path, progress=progress)

    monkeypatch.setattr(integrity, "sha256_file", recording)

    class Opens:
        @staticmethod
        def new_process() -> list[tuple[str, int]]:
            integrity._VERIFIED.clear()
            hashed.clear()
            return hashed

    return Opens()


def _config() -> BuildConfig:
    return BuildConfig(segment_size=4, split=False, progress=False, part_size=64)


def test_a_new_index_is_not_hashed_again_past_the_open_budget(tmp_path, opens):
    corpus = tmp_path / "pool.jsonl"
    write_labelled_corpus(corpus)
    out = tmp_path / "idx"
    build_index([corpus], out, HashingEncoder(), _config())
    hashed = opens.new_process()
    Index(out).lexicon                     # noqa: B018 - every recorded file checked
    assert sum(size for _, size in hashed) <= BUDGET, hashed
    assert len(integrity.checked_files()) >= 10

    more = tmp_path / "more.jsonl"
    write_labelled_corpus(more, seed=5)
    add_to_index(out, [str(more)], HashingEncoder(), progress=False)
    hashed = opens.new_process()
    index = Index(out)
    index.lexicon                          # noqa: B018
    assert len(index.shards) == 2
    assert sum(size for _, size in hashed) <= BUDGET, hashed


def test_a_file_changed_after_its_stamp_is_hashed_and_refused(tmp_path, opens):
    corpus = tmp_path / "pool.jsonl"
    write_labelled_corpus(corpus)
    out = tmp_path / "idx"
    build_index([corpus], out, HashingEncoder(), _config())
    lexical = out / "shards" / "000000" / "lexical.npy"
    data = bytearray(lexical.read_bytes())
    data[-3] ^= 0x01                        # same length, header and ids in range
    lexical.write_bytes(bytes(data))
    hashed = opens.new_process()
    with pytest.raises(IndexFormatError, match="lexical.npy does not match the checksum"):
        Index(out).lexicon                  # noqa: B018
    assert "lexical.npy" in [name for name, _ in hashed]
