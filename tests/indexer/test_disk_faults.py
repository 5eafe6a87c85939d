"""A full disk or a read-only location is one `Error:` line, never a traceback, and nothing
half-written is left under the output's name (issue 11). Real tmpfs mounts where the tests run as
root (skipped otherwise), and the same faults injected by monkeypatching everywhere."""

from __future__ import annotations

import contextlib
import errno
import shutil

import pytest

from conftest import write_labelled_corpus
from faultfs import fill, full_disk, read_only_dir
from hashing_cli import one_error, run  # noqa: F401 - fixtures
from tapt.indexer.index import Index


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "pool.jsonl"
    write_labelled_corpus(path, docs_per_topic=8)
    return path


def _full_writes(real):
    """`atomic_write` whose file refuses every byte, as on a full disk."""
    @contextlib.contextmanager
    def full(path, mode="w", encoding="utf-8"):
        with real(path, mode, encoding) as fh:
            class Full:
                def write(self, data):
                    raise OSError(errno.ENOSPC, "No space left on device")
            yield Full()
            del fh
    return full


def test_disk_full_during_the_faiss_write_of_a_build(run, corpus, tmp_path, monkeypatch):
    import tapt.indexer.ann.faiss_index as faiss_index

    real = faiss_index.atomic_write
    monkeypatch.setattr(faiss_index, "atomic_write", _full_writes(real))
    one_error(run("index", "build", corpus, "--out", tmp_path / "idx"), "disk full",
              "committed", "run the same command again to resume")
    assert not (tmp_path / "idx").exists() and (tmp_path / ".idx.building").is_dir()
    monkeypatch.setattr(faiss_index, "atomic_write", real)  # space freed: the build resumes
    assert run("index", "build", corpus, "--out", tmp_path / "idx").exit_code == 0
    assert Index(tmp_path / "idx").n_sentences > 0


def test_disk_full_while_writing_a_selection(run, fake_index, medical_task, tmp_path,
                                             monkeypatch):
    import tapt.retriever.selections.file_format as selection_file

    monkeypatch.setattr(selection_file, "atomic_write", _full_writes(selection_file.atomic_write))
    one_error(run("select", "centroid", fake_index, "--task", medical_task, "--budget", "3",
                  "--out", tmp_path / "s.jsonl"), "disk full while writing")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("size", ["32k", "96k", "160k"])
def test_real_full_disk_during_a_build(run, corpus, tmp_path, size):
    with full_disk(tmp_path / "disk", size) as disk:
        if disk is None:
            pytest.skip("a tiny filesystem needs root")
        line = one_error(run("index", "build", corpus, "--out", disk / "idx", "--no-split"))
        # The plan from the scan's counts refuses before anything is prepared; or, where those
        # fit, the disk fills while the text store is written, or the plan from the prepared
        # sentences refuses the rest before anything is embedded.
        assert "disk full" in line or ("more disk" in line and (
            "nothing was embedded" in line or "nothing was prepared" in line)), line
        assert not (disk / "idx").exists()


def test_real_full_disk_and_read_only_selection_outputs(run, fake_index, medical_task, tmp_path):
    argv = ["select", "centroid", fake_index, "--task", medical_task, "--budget", "3", "--out"]
    with full_disk(tmp_path / "disk", "64k") as disk:
        if disk is None:
            pytest.skip("a tiny filesystem needs root")
        fill(disk)
        one_error(run(*argv, disk / "s.jsonl"), "disk full")
        one_error(run(*argv, disk / "sub" / "s.jsonl"), "disk full")
        assert sorted(p.name for p in disk.iterdir()) == [".filler"]
    with read_only_dir(tmp_path / "ro") as ro:
        if ro is None:
            pytest.skip("no read-only directory can be made here")
        one_error(run(*argv, ro / "s.jsonl"), "cannot write", "read-only")
        one_error(run(*argv, ro / "sub" / "s.jsonl"), "read-only")


def test_writers_on_a_read_only_index_are_one_line(run, fake_index, tmp_path):
    files = {str(p.relative_to(fake_index)): p.read_bytes()
             for p in fake_index.rglob("*") if p.is_file()}
    with read_only_dir(tmp_path / "ro" / "idx", files) as ro:
        if ro is None:
            pytest.skip("no read-only directory can be made here")
        assert run("index", "info", ro).exit_code == 0
        assert run("index", "verify", ro).exit_code == 0
        for argv in (["index", "reindex", ro, "--index", "hnsw"], ["index", "upgrade", ro]):
            result = run(*argv)
            assert result.exit_code in (0, 1), result.output
            if result.exit_code:
                one_error(result)
        (tmp_path / "more.txt").write_text("A new sentence about ships and storms.\n")
        one_error(run("index", "add", ro, tmp_path / "more.txt"))


def test_add_on_a_full_disk_leaves_the_index_as_it_was(run, fake_index, tmp_path):
    with full_disk(tmp_path / "disk", "600k") as disk:
        if disk is None:
            pytest.skip("a tiny filesystem needs root")
        idx = disk / "idx"
        shutil.copytree(fake_index, idx)
        before = Index(idx).manifest_sha256
        fill(disk)
        (tmp_path / "more.txt").write_text("A new sentence about ships and storms.\n" * 50)
        one_error(run("index", "add", idx, tmp_path / "more.txt"), "disk full")
        assert Index(idx).manifest_sha256 == before
        assert run("index", "verify", idx).exit_code == 0
