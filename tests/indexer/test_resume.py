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


@pytest.mark.parametrize("damage", ["changed", "cut", "gone", "tokens changed"])
def test_a_kept_part_damaged_on_the_disk_is_refused_then_embedded_anew(corpus, reference,
                                                                       tmp_path, damage):
    out = tmp_path / "idx"
    with pytest.raises(RuntimeError):
        build_index([corpus], out, FailingEncoder(4, RuntimeError("boom")), _config())
    parts = next((tmp_path / ".idx.building" / "shards").iterdir()) / "parts"
    emb, tok = parts / "emb-000001.npy", parts / "tok-000001.npy"
    if damage == "changed":      # other rows of the right shape: only the checksum tells
        emb.write_bytes(emb.read_bytes()[:128] + (parts / "emb-000000.npy").read_bytes()[128:])
    elif damage == "cut":
        emb.write_bytes(emb.read_bytes()[:-100])
    elif damage == "gone":
        emb.unlink()
    else:
        data = bytearray(tok.read_bytes())
        data[-1] ^= 0x01
        tok.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="part kept for resuming is damaged.*run the same "
                                           "command again"):
        build_index([corpus], out, HashingEncoder(), _config())
    assert not (parts / "part-000001.json").exists() and (parts / "part-000000.json").exists()
    again = CountingEncoder()
    build_index([corpus], out, again, _config())
    assert_same_index(out, reference)
    assert again.embedded == 32          # the damaged part, and only it


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


def test_a_users_file_where_the_lock_goes_is_refused_and_kept(corpus, tmp_path):
    out = tmp_path / "idx"
    lock = tmp_path / ".idx.lock"
    lock.write_text("my notes\n")
    with pytest.raises(InputError, match="in the way and is not tapt's lock"):
        build_index([corpus], out, HashingEncoder(), _config())
    assert lock.read_text() == "my notes\n" and not out.exists()
    lock.unlink()
    target = tmp_path / "elsewhere"
    target.write_text("")
    lock.symlink_to(target)
    with pytest.raises(InputError, match="in the way"):
        build_index([corpus], out, HashingEncoder(), _config())
    assert lock.is_symlink() and target.read_text() == "" and not out.exists()


def test_a_failed_build_removes_the_folders_it_made_for_its_output(corpus, tmp_path,
                                                                   monkeypatch):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError):
        build_index([empty], tmp_path / "new1" / "new2" / "idx", HashingEncoder(), _config())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl"]

    def full_disk(*args, **kwargs):                 # a failure that keeps its work to resume
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(stages, "_save", full_disk)
    out = tmp_path / "new3" / "idx"
    with pytest.raises(StorageError, match="resume"):
        build_index([corpus], out, HashingEncoder(), _config())
    assert not out.exists() and (tmp_path / "new3" / ".idx.building").is_dir()


@pytest.mark.parametrize("left", [checkpoint.LOCK_MARK, b""])
def test_a_lock_a_killed_build_left_is_taken_over_and_removed(corpus, tmp_path, left):
    out = tmp_path / "idx"
    lock = tmp_path / ".idx.lock"
    lock.write_bytes(left)
    with checkpoint.BuildLock(out):
        assert lock.read_bytes() == checkpoint.LOCK_MARK
        with pytest.raises(InputError, match="another build"), checkpoint.BuildLock(out):
            pass
    assert not lock.exists()
    build_index([corpus], out, HashingEncoder(), _config())
    assert not lock.exists() and out.is_dir()


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
