"""Crash-safe builds: killed, interrupted or out of disk, the same command resumes row for row
(finished shards and parts are kept; a part in progress is lost and embedded again)."""

from __future__ import annotations

import errno
import random
from pathlib import Path

import pytest

from build_worker import assert_same_index, kill_and_resume
from conftest import HashingEncoder, write_labelled_corpus, write_split_corpus
from tapt.errors import InputError, Interrupted, StorageError
from tapt.indexer.building import checkpoint, stages
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.index import Index


def _config(**kw) -> BuildConfig:
    return BuildConfig(segment_size=4, split=False, progress=False, part_size=32, batch_size=32, **kw)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("resume") / "pool.jsonl"
    write_labelled_corpus(path, docs_per_topic=10, seed=3)
    return path


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "idx"
    build_index([corpus], out, HashingEncoder(), _config())
    return out


class FailingEncoder(HashingEncoder):
    """Fails on its `fail_at`-th call, counting the sentences it embedded before."""

    def __init__(self, fail_at: int, exc: BaseException) -> None:
        super().__init__()
        self.fail_at, self.exc, self.embedded = fail_at, exc, 0

    def encode(self, texts, batch_size=64):
        if self.calls + 1 == self.fail_at:
            self.calls += 1
            raise self.exc
        self.embedded += len(texts)
        return super().encode(texts, batch_size)


class CountingEncoder(HashingEncoder):
    embedded = 0

    def encode(self, texts, batch_size=64):
        self.embedded += len(texts)
        return super().encode(texts, batch_size)


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_interrupted_build_resumes_without_reembedding(corpus, reference, tmp_path, exc):
    out = tmp_path / "idx"
    first = FailingEncoder(fail_at=4, exc=exc)
    with pytest.raises(type(exc)) as raised:
        build_index([corpus], out, first, _config())
    assert not out.exists()
    committed = checkpoint.committed_rows(checkpoint.work_dir_for(out))
    assert committed == first.embedded > 0
    if isinstance(exc, KeyboardInterrupt):   # says what it kept, where
        assert isinstance(raised.value, Interrupted)
        assert raised.value.kept == committed
        assert raised.value.work == str(checkpoint.work_dir_for(out))
        assert f"{committed:,} embedded sentences" in str(raised.value)
    second = CountingEncoder()
    manifest = build_index([corpus], out, second, _config())
    assert second.embedded == manifest["counts"]["sentences"] - committed
    assert manifest["build"]["sessions"] == 2
    assert_same_index(out, reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_a_part_without_its_record_is_embedded_again(corpus, reference, tmp_path, monkeypatch):
    """Killed after a part's files were written but before its completion record."""
    out = tmp_path / "idx"
    real_commit = checkpoint.commit_part
    calls = {"n": 0}

    def dying_commit(path, record):
        calls["n"] += 1
        if calls["n"] == 3:
            raise SystemExit("killed")
        real_commit(path, record)

    monkeypatch.setattr(checkpoint, "commit_part", dying_commit)
    with pytest.raises(SystemExit):
        build_index([corpus], out, HashingEncoder(), _config())
    monkeypatch.setattr(checkpoint, "commit_part", real_commit)
    parts = checkpoint.work_dir_for(out) / "shards" / "000000" / "parts"
    assert (parts / "emb-000002.npy").is_file()          # the torn part's files are there ...
    assert not (parts / "part-000002.json").exists()     # ... without its record
    second = CountingEncoder()
    build_index([corpus], out, second, _config())
    assert_same_index(out, reference)
    assert second.embedded == Index(out).n_sentences - 2 * 32


def test_changed_inputs_or_settings_refuse_to_resume(corpus, tmp_path):
    out = tmp_path / "idx"
    with pytest.raises(RuntimeError):
        build_index([corpus], out, FailingEncoder(3, RuntimeError("boom")), _config())
    with pytest.raises(InputError, match="other inputs or settings.*`restart`"):
        build_index([corpus], out, HashingEncoder(),
                    BuildConfig(segment_size=5, split=False, progress=False, part_size=32))
    manifest = build_index([corpus], out, HashingEncoder(), BuildConfig(
        segment_size=5, split=False, progress=False, part_size=32, restart=True))
    assert manifest["build"]["sessions"] == 1


def test_disk_full_stops_clearly_and_resumes(corpus, reference, tmp_path, monkeypatch):
    out = tmp_path / "idx"
    real_save = stages._save
    calls = {"n": 0}

    def full_disk(path, array):
        calls["n"] += 1
        if calls["n"] == 12:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(path, array)

    monkeypatch.setattr(stages, "_save", full_disk)
    with pytest.raises(StorageError, match="disk full.*committed.*resume"):
        build_index([corpus], out, HashingEncoder(), _config())
    monkeypatch.setattr(stages, "_save", real_save)
    assert not out.exists()
    build_index([corpus], out, HashingEncoder(), _config())
    assert_same_index(out, reference)


def test_a_second_concurrent_build_is_refused(corpus, tmp_path):
    out = tmp_path / "idx"
    with checkpoint.BuildLock(out):
        with pytest.raises(InputError, match="another build"):
            build_index([corpus], out, HashingEncoder(), _config())
    build_index([corpus], out, HashingEncoder(), _config())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigkill_at_random_moments_then_resume_equals_uninterrupted(corpus, reference, tmp_path,
                                                                   seed):
    out = tmp_path / "idx"
    seen = kill_and_resume(corpus, out, random.Random(seed), kills=3)
    total = Index(reference).n_sentences
    assert any(0 < rows < total for rows in seen), f"no kill landed mid-build: {seen}"
    assert_same_index(out, reference)


@pytest.fixture(scope="module")
def split_corpus(tmp_path_factory) -> list[Path]:
    return write_split_corpus(tmp_path_factory.mktemp("split-resume"), parts=3,
                              docs_per_topic=8, seed=5)


def test_sigkilled_sharded_build_resumes_to_the_uninterrupted_one(split_corpus, tmp_path):
    reference = tmp_path / "reference"
    build_index(split_corpus, reference, HashingEncoder(), _config(shards=3))
    out = tmp_path / "idx"
    seen = kill_and_resume(split_corpus, out, random.Random(7), kills=3, shards=3)
    assert any(0 < rows < Index(reference).n_sentences for rows in seen), seen
    assert_same_index(out, reference)
    assert len(Index(out).shards) == 3
