"""Crash-safe builds: killed, interrupted or out of disk, the same command resumes row for row."""

from __future__ import annotations

import errno
import random
from pathlib import Path

import pytest

from build_worker import assert_same_index, kill_and_resume
from conftest import HashingEncoder, write_labelled_corpus
from tapt.indexer import checkpoint
from tapt.indexer.build import BuildConfig, build_index
from tapt.errors import InputError, StorageError
from tapt.indexer.index import Index
from tapt.indexer.npy import NpyAppender



def _config(**kw) -> BuildConfig:
    return BuildConfig(segment_size=4, split=False, progress=False, window=32, batch_size=32, **kw)


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
    with pytest.raises(type(exc)):
        build_index([corpus], out, first, _config())
    assert not out.exists()
    progress = checkpoint.read_progress(checkpoint.work_dir_for(out))
    assert progress.rows == first.embedded > 0
    second = CountingEncoder()
    manifest = build_index([corpus], out, second, _config())
    assert second.embedded == manifest["counts"]["sentences"] - progress.rows
    assert manifest["build"]["sessions"] == 2
    assert_same_index(out, reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_uncommitted_tail_is_cut_off(corpus, reference, tmp_path, monkeypatch):
    """Killed after a window's rows and LMDB records were written but before its commit record."""
    out = tmp_path / "idx"
    real_commit = checkpoint.commit
    calls = {"n": 0}

    def dying_commit(work, progress):
        calls["n"] += 1
        if calls["n"] == 3:
            raise SystemExit("killed")
        real_commit(work, progress)

    monkeypatch.setattr(checkpoint, "commit", dying_commit)
    with pytest.raises(SystemExit):
        build_index([corpus], out, HashingEncoder(), _config())
    monkeypatch.setattr(checkpoint, "commit", real_commit)
    work = checkpoint.work_dir_for(out)
    committed = checkpoint.read_progress(work).rows
    on_disk = ((work / "embeddings.npy").stat().st_size - 128) // (4 * 64)
    assert on_disk > committed          # a torn tail really is there
    build_index([corpus], out, HashingEncoder(), _config())
    assert_same_index(out, reference)


def test_changed_inputs_or_settings_refuse_to_resume(corpus, tmp_path):
    out = tmp_path / "idx"
    with pytest.raises(RuntimeError):
        build_index([corpus], out, FailingEncoder(3, RuntimeError("boom")), _config())
    with pytest.raises(InputError, match="other inputs or settings.*`restart`"):
        build_index([corpus], out, HashingEncoder(),
                    BuildConfig(segment_size=5, split=False, progress=False, window=32))
    manifest = build_index([corpus], out, HashingEncoder(), BuildConfig(
        segment_size=5, split=False, progress=False, window=32, restart=True))
    assert manifest["build"]["sessions"] == 1


def test_disk_full_stops_clearly_and_resumes(corpus, reference, tmp_path, monkeypatch):
    out = tmp_path / "idx"
    real_append = NpyAppender.append
    calls = {"n": 0}

    def full_disk(self, block):
        calls["n"] += 1
        if calls["n"] == 10:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_append(self, block)

    monkeypatch.setattr(NpyAppender, "append", full_disk)
    with pytest.raises(StorageError, match="disk full.*committed.*resume"):
        build_index([corpus], out, HashingEncoder(), _config())
    monkeypatch.setattr(NpyAppender, "append", real_append)
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
