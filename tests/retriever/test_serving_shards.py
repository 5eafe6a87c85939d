"""What one serving actor opens (`retriever.serving`), without Ray: only its own shards,
verified against the checksums their own `shard.json` records; another shard's damage is not
its business, its own shard's damage stops it with one error naming the shard; hash stamps are
named by content, not by inode."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import HashingEncoder, write_split_corpus
from ray_worker import CONFIG
from tapt.errors import IndexFormatError
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.index import Index
from tapt.indexer.store import integrity
from tapt.retriever.serving.actors import ShardServer, segments_of, span


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("serving-shards")
    corpus = [str(p) for p in write_split_corpus(base, parts=3, docs_per_topic=6)]
    out = base / "idx"
    build_index(corpus, out, HashingEncoder(), BuildConfig(**CONFIG))
    return out


def _damage(path: Path) -> None:
    """Flip a byte past the header: length, dtype and shape stay, only a checksum sees it."""
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(bytes(data))


def test_an_actor_opens_and_verifies_only_its_own_shards(index_dir, tmp_path):
    damaged = tmp_path / "idx"
    shutil.copytree(index_dir, damaged)
    _damage(damaged / "shards" / "000002" / "embeddings.npy")
    index = Index(index_dir)
    rows = span(index, [1], 64)
    server = ShardServer(str(damaged), [1], rows)        # shard 2's damage is not read here
    report = server.report()
    assert report["shards"] == ["000001"] and report["verified"] == ["000001"]
    assert "embeddings.npy" in report["checked"]["000001"]
    # the rows of its last 64-row block that lie in shard 2 are mapped, their content verified
    # by shard 2's own actor: only shard 2's small offsets and token counts are hashed here
    assert set(report["checked"]) <= {"000001", *report["reached"]}
    for name in report["reached"]:
        assert name > "000001" and report["checked"][name] == ["docs.npy", "tokens.npy"]
    row_bytes = index.dim * index.embeddings.dtype.itemsize
    assert server.nbytes() == (rows[1] - rows[0]) * row_bytes
    with pytest.raises(IndexFormatError) as failed:
        ShardServer(str(damaged), [2], span(index, [2], 64))
    message = str(failed.value)
    assert "\n" not in message
    assert "shards/000002/embeddings.npy does not match the checksum" in message
    assert "tapt index verify" in message


def test_an_actors_segments_are_those_of_the_index(index_dir):
    index = Index(index_dir)
    for size in (1, 3, 4, 7):
        whole = index.segments(size)
        for group in ([0], [1], [2], [0, 1]):
            server = ShardServer(str(index_dir), group, span(index, group, 64))
            offsets, tokens = server.segments(size, "shards")
            first = int(np.searchsorted(whole, offsets[0]))
            assert np.array_equal(offsets, whole[first:first + len(offsets)])
            expected = np.add.reduceat(np.asarray(index.tokens[:], dtype=np.int64),
                                       whole[:-1])[first:first + len(tokens)]
            assert np.array_equal(tokens, expected)
    assert segments_of([], 3)[0].tolist() == [0]


def test_hash_stamps_name_the_content_not_the_inode(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(integrity, "SMALL_FILE", 0)          # every file is "large"
    monkeypatch.setattr(integrity, "_VERIFIED", set())
    big = tmp_path / "a" / "big.npy"
    big.parent.mkdir()
    big.write_bytes(b"x" * 4096)
    expected = hashlib.sha256(big.read_bytes()).hexdigest()
    copy = tmp_path / "b" / "big.npy"        # another inode, as another node sees the file
    copy.parent.mkdir()
    shutil.copy2(big, copy)
    assert os.stat(big).st_ino != os.stat(copy).st_ino
    name = integrity._stamp_name(integrity._identity(big, expected))
    assert name == integrity._stamp_name(integrity._identity(copy, expected))
    calls = []
    real = integrity.sha256_file
    monkeypatch.setattr(integrity, "sha256_file",
                        lambda p, progress=False: calls.append(p) or real(p))
    assert integrity.check_checksum(big, expected, "big.npy", "idx")
    assert calls == [big] and (tmp_path / "cache" / integrity.STAMPS / name).is_file()
    monkeypatch.setattr(integrity, "_VERIFIED", set())       # a new process
    assert integrity.check_checksum(copy, expected, "big.npy", "idx")
    assert calls == [big]                  # the copy's content is vouched for by the stamp
    copy.write_bytes(b"y" * 4096)          # new content (and a new modification time)
    with pytest.raises(IndexFormatError, match="does not match the checksum"):
        integrity.check_checksum(copy, expected, "big.npy", "idx")


def test_an_actor_hashes_its_files_once_per_version(index_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(integrity, "_VERIFIED", set())
    hashed = []
    real = integrity.sha256_file
    monkeypatch.setattr(integrity, "sha256_file",
                        lambda p, progress=False: hashed.append(Path(p).name) or real(p))
    index = Index(index_dir)
    hashed.clear()
    monkeypatch.setattr(integrity, "_VERIFIED", set())      # an actor process
    ShardServer(str(index_dir), [0], span(index, [0], 64))
    assert {"embeddings.npy", "data.mdb", "index.faiss", "lexical.npy"} <= set(hashed)
    hashed.clear()
    monkeypatch.setattr(integrity, "_VERIFIED", set())      # a new actor process
    ShardServer(str(index_dir), [0], span(index, [0], 64))
    assert hashed == []      # every file, offsets and token counts too, known by its stamp


def test_what_only_requests_need_is_made_ready_after_the_start(index_dir):
    """An actor's start opens and verifies its shards and nothing more: its rows are copied
    into RAM, its FAISS parts loaded and torch imported by `warm` (in the background) or by the
    first request that needs one; the rows and the search answer as those of the index."""
    index = Index(index_dir)
    rows = span(index, [0], 64)
    server = ShardServer(str(index_dir), [0], rows)
    assert server.report()["verified"] == ["000000"] and server._ready.seconds == {}
    assert not isinstance(server.rows, np.ndarray) or isinstance(server.rows, np.memmap)
    queries = np.asarray(index.embeddings[:3], dtype=np.float32)
    want = index.faiss.search(queries, 5)
    found = server.search(queries, 5)        # loads the parts at once, and only them
    assert set(server._ready.seconds) == {"parts"}
    parts = [p for p, _ in server.parts]
    assert len(parts) == 1 and parts[0].ntotal == index.shards[0].rows
    assert np.array_equal(found[1][:, 0], want[1][:, 0])
    server.warm()
    assert list(server.warmed(60)) == ["parts", "torch", "held"]     # the rest, in order
    assert isinstance(server.rows, np.ndarray) and not isinstance(server.rows, np.memmap)
    assert np.array_equal(server.rows, np.asarray(index.embeddings[rows[0]:rows[1]]))
    assert server.nbytes() == server.rows.nbytes


def test_ready_runs_each_step_once_in_the_background_or_when_needed():
    from tapt.retriever.serving.shard_set import Ready

    ran = []

    def fails():
        ran.append("bad")
        raise IndexFormatError("index x is damaged: a part")

    ready = Ready({"a": lambda: ran.append("a") or 1, "bad": fails,
                   "c": lambda: ran.append("c") or 3})
    assert ready.get("c") == 3 and ran == ["c"]          # at once, alone
    ready.start()
    assert set(ready.wait(30)) == {"a", "bad", "c"} and sorted(ran) == ["a", "bad", "c"]
    assert ready.get("a") == 1 and ready.get("c") == 3 and len(ran) == 3    # once each
    for _ in range(2):                                   # a failed step fails every request
        with pytest.raises(IndexFormatError, match="damaged: a part"):
            ready.get("bad")
    assert len(ran) == 3


def test_a_part_no_checksum_covers_is_loaded_and_checked_at_the_start(index_dir):
    """Where a shard records no checksum for its FAISS part, nothing verified its content at
    the start: the part is loaded (its header and ids checked) before the start ends."""
    from types import SimpleNamespace

    from tapt.retriever.serving.shard_set import ready_steps

    index = Index(index_dir)
    loaded = []
    covered = SimpleNamespace(extra={"checksums": {"index.faiss": "..."}})
    bare = SimpleNamespace(extra={"checksums": {"embeddings.npy": "..."}})

    class Faiss:
        global_ids, row_offsets = True, [0]

        @property
        def parts(self):
            loaded.append(1)
            raise IndexFormatError("index x is damaged: shards/000000/index.faiss holds 3 rows")

    server = SimpleNamespace(rows=index.embeddings, codes=None,
                             index=SimpleNamespace(shards=[covered], faiss=Faiss()))
    ready_steps(server, "rows")                   # verified at the start: loaded later
    assert loaded == []
    server.index.shards = [covered, bare]
    with pytest.raises(IndexFormatError, match="index.faiss holds 3 rows"):
        ready_steps(server, "rows")
    assert loaded == [1]
