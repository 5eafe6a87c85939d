"""A cache entry or an index file that is not a regular file (a FIFO, a link to /dev/zero, a
folder) never hangs a command or exhausts its memory: a cache entry is ignored with a warning
(and left as it is), an index file is damage (issue 27, class 3). Every command here runs in a
fresh process under a timeout, so a regression fails instead of hanging the suite."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tapt.util.cache as cache_module
from tapt.retriever.tasks.embedding import SCREEN_SUBDIR, SUBDIR, encode_cached
from tapt.util.cache import read_checked, write_checked
from tapt.util.files import IrregularFileError, read_regular, regular_file, sha256_file

CLI = Path(__file__).resolve().parents[1] / "support" / "hashing_cli.py"
TIMEOUT = 120
pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(cache_module, "_WARNED", set())
    monkeypatch.setattr(cache_module, "_WRITABLE", {})


@pytest.fixture(autouse=True)
def no_hang():
    """An in-process read that blocks on a FIFO fails the test instead of hanging the suite
    (reads of /dev/zero run only in subprocesses, under a timeout)."""
    def hung(*_):
        raise TimeoutError("a read blocked on a file that is not a regular file")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(TIMEOUT + 30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _tapt(*argv, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TAPT_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    try:
        return subprocess.run([sys.executable, str(CLI), *map(str, argv)], env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tapt {' '.join(map(str, argv))} hung on a file that is not a regular file")


def _replace(path: Path, kind: str) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() + result.stdout.splitlines()
            if line.startswith("Error:")]


# ------------------------------------------------------------------ the helper itself

@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_read_regular_refuses_what_is_not_a_regular_file(tmp_path, kind):
    path = tmp_path / "f.json"
    path.write_text("{}")
    _replace(path, kind)
    for read in (read_regular, regular_file, sha256_file):
        with pytest.raises(IrregularFileError, match="not a regular file"):
            read(path)


def test_read_regular_bounds_the_size_and_follows_links_only_when_asked(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b"x" * 100)
    assert read_regular(path, 100) == b"x" * 100
    with pytest.raises(IrregularFileError, match="more than the 99"):
        read_regular(path, 99)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    assert read_regular(link, 100) == b"x" * 100
    with pytest.raises(IrregularFileError, match="symbolic link"):
        read_regular(link, 100, follow=False)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent.json")


# ------------------------------------------------------------------ caches

@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_cache_entry_that_is_not_a_file_is_ignored_with_a_warning_and_kept(
        tmp_path, caplog, kind):
    entry = tmp_path / "entry.npy"
    assert write_checked(entry, b"payload")
    _replace(entry, kind)
    with caplog.at_level("WARNING"):
        assert read_checked(entry) is None
        assert write_checked(entry, b"payload") is False       # never replaced
    assert any("entry.npy" in r.getMessage() for r in caplog.records)
    assert entry.is_dir() if kind == "dir" else entry.is_fifo()


def test_an_oversized_cache_entry_is_not_read(tmp_path, caplog):
    entry = tmp_path / "entry.npy"
    assert write_checked(entry, b"x" * 1000)
    with caplog.at_level("WARNING"):
        assert read_checked(entry, limit=999) is None
    assert read_checked(entry, limit=1000) == b"x" * 1000


@pytest.mark.parametrize("kind", ["fifo"])
def test_task_embeddings_cache_entry_is_recomputed(tmp_path, monkeypatch, encoder, kind):
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    sentences = ["Patient fever dose.", "Kidney biopsy lesion therapy."]
    first, cached = encode_cached(encoder, sentences)
    (entry,) = (tmp_path / "cache" / SUBDIR).glob("*.npy")
    _replace(entry, kind)
    again, cached = encode_cached(encoder, sentences)
    assert cached is False and (again == first).all()
    assert entry.is_fifo()


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_select_with_a_fifo_or_dev_zero_in_the_task_cache_finishes(
        fake_index, medical_task, tmp_path, kind):
    cache = tmp_path / "cache"
    first = _tapt("select", "centroid", fake_index, "--task", medical_task, "--budget", "5",
                  "--out", tmp_path / "a.jsonl", cache=cache)
    assert first.returncode == 0, first.stderr
    entries = [p for sub in (SUBDIR, SCREEN_SUBDIR) for p in (cache / sub).glob("*")
               if not p.name.startswith(".")]
    assert entries
    for entry in entries:
        _replace(entry, kind)
    again = _tapt("select", "centroid", fake_index, "--task", medical_task, "--budget", "5",
                  "--out", tmp_path / "b.jsonl", cache=cache)
    assert again.returncode == 0, again.stderr
    assert "not a regular file" in again.stderr
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert all(e.is_symlink() or e.is_fifo() for e in entries)      # left as they were


def test_an_onnx_export_entry_holding_a_fifo_is_damaged_not_read(tmp_path):
    from tapt.indexer.encoding.onnx_export import entry_problem

    (tmp_path / "model.onnx").write_bytes(b"onnx")
    os.mkfifo(tmp_path / "export.json")
    assert "not a regular file" in entry_problem(tmp_path)


def test_a_hash_stamp_that_is_a_fifo_is_ignored(tmp_path, monkeypatch):
    from tapt.indexer.store import integrity

    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(integrity, "SMALL_FILE", 0)
    monkeypatch.setattr(integrity, "_VERIFIED", set())
    big = tmp_path / "big.npy"
    big.write_bytes(b"x" * 4096)
    expected = hashlib.sha256(big.read_bytes()).hexdigest()
    stamp = tmp_path / "cache" / integrity.STAMPS / integrity._stamp_name(
        integrity._identity(big, expected))
    stamp.parent.mkdir(parents=True)
    os.mkfifo(stamp)
    monkeypatch.setattr(integrity, "hash_policy", lambda: (0, True))
    assert integrity.check_checksum(big, expected, "big.npy", "idx") is True
    assert stamp.is_fifo()


# ------------------------------------------------------------------ index files

@pytest.mark.parametrize("name,kind", [
    ("manifest.json", "fifo"),
    ("manifest.json", "zero"),
    ("shards/000000/shard.json", "fifo"),
    ("shards/000000/shard.json", "zero"),
    ("shards/000000/text.lmdb/data.mdb", "fifo"),
    ("shards/000000/vocab.npy", "fifo"),
    ("shards/000000/dochash.npy", "zero"),
    ("vocab.npy", "fifo"),
])
@pytest.mark.parametrize("command", ["select", "verify"])
def test_an_index_file_that_is_not_a_file_is_damage(fake_index, medical_task, tmp_path, name,
                                                    kind, command):
    idx = tmp_path / "idx"
    shutil.copytree(fake_index, idx)
    _replace(idx / name, kind)
    if command == "select":
        argv = ["select", "moore-lewis", idx, "--task", medical_task, "--budget", "5",
                "--out", tmp_path / "s.jsonl"]
    else:
        argv = ["index", "verify", idx]
    result = _tapt(*argv, cache=tmp_path / "cache")
    assert result.returncode == 1, result.stderr
    errors = _errors(result)
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    if command == "select":
        assert Path(name).name in errors[0] and "not a regular file" in errors[0], errors[0]
        assert "/proc/self/fd" not in errors[0]
        assert not (tmp_path / "s.jsonl").exists()
    assert os.path.lexists(idx / name) and not (idx / name).is_file()


def test_a_benchmark_feature_cache_entry_that_is_a_fifo_is_ignored_and_kept(tmp_path, caplog):
    from types import SimpleNamespace

    from tapt.bench.recall_run import dsir_features

    index = SimpleNamespace(uuid="u1")
    fifo = tmp_path / "dsir-u1.npz"
    os.mkfifo(fifo)
    texts = ["a cat sat", "the dog ran", "fever and cough"]
    features = dsir_features(index, texts, tmp_path, progress=False)
    assert features.matrix.shape[0] == len(texts)
    assert fifo.exists() and not fifo.is_file()            # never replaced
    assert "ignoring the cached DSIR features" in caplog.text
    (tmp_path / "dsir-u2.npz").write_bytes(b"not a zip")
    dsir_features(SimpleNamespace(uuid="u2"), texts, tmp_path, progress=False)
    assert dsir_features(SimpleNamespace(uuid="u2"), texts, tmp_path,
                         progress=False).matrix.shape[0] == 3   # replaced, then read
