"""`tapt index verify` names each kind of damage and its repair; `repair` fixes FAISS; a moved
index still loads, selects and verifies."""

from __future__ import annotations

import json
import shutil

import lmdb
import numpy as np
import pytest
from click.testing import CliRunner

import tapt
from conftest import HashingEncoder, shard_file
from tapt.cli import cli
from tapt.errors import IndexFormatError
from tapt.indexer.building.repair import repair_index
from tapt.indexer.building.verify import verify_index
from tapt.indexer.index import Index
from tapt.indexer.store.text_store import key


@pytest.fixture()
def idx(fake_index, tmp_path):
    """A private copy of the session's fake index, to damage."""
    out = tmp_path / "idx"
    shutil.copytree(fake_index, out)
    return out


def failed(report) -> dict[str, str]:
    return {f.check: f.detail + " | " + f.repair for f in report.findings if not f.ok}


def test_a_sound_index_passes_every_check(idx):
    report = verify_index(idx, deep=True, encoder=HashingEncoder())
    assert report.ok, failed(report)
    checks = {f.check for f in report.findings}
    assert {"manifest", "embeddings", "offsets", "faiss", "text store",
            "checksum embeddings.npy", "checksum text.lmdb/data.mdb",
            "deep: re-embedded sample"} <= checks


def test_flipped_byte_in_embeddings_is_found_and_needs_a_rebuild(idx):
    path = shard_file(idx, "embeddings.npy")
    data = bytearray(path.read_bytes())
    data[128 + 4 * 64 * 3 + 5] ^= 0xFF
    path.write_bytes(bytes(data))
    bad = failed(verify_index(idx))
    assert "checksum embeddings.npy" in bad and "rebuild the index" in bad["checksum embeddings.npy"]
    with pytest.raises(IndexFormatError, match="cannot repair"):
        repair_index(idx, progress=False)


def test_a_missing_recorded_file_fails_verify_as_it_fails_every_reader(idx):
    """A file whose checksum the shard records (document hashes, lexical ids, codes) is damage
    when it is gone: verify used to skip it and pass an index that select refuses."""
    recorded = json.loads(shard_file(idx, "shard.json").read_text())["checksums"]
    name = next(n for n in ("dochash.npy", "lexical.npy", "codes.npy") if n in recorded)
    shard_file(idx, name).unlink()
    bad = failed(verify_index(idx))
    assert f"file {name}" in bad and "missing" in bad[f"file {name}"]
    assert "rebuild the index" in bad[f"file {name}"]
    with pytest.raises(IndexFormatError, match="cannot repair"):
        repair_index(idx, progress=False)


def test_truncated_embeddings(idx):
    path = shard_file(idx, "embeddings.npy")
    path.write_bytes(path.read_bytes()[:-4 * 64 * 2])
    bad = failed(verify_index(idx))
    assert "embeddings" in bad


@pytest.mark.parametrize("damage", ["delete", "garbage", "other-rows"])
def test_broken_faiss_is_repaired_from_the_embeddings(idx, damage):
    path = shard_file(idx, "index.faiss")
    if damage == "delete":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(b"not a faiss index" * 10)
    else:
        import faiss

        other = faiss.IndexFlatIP(64)
        other.add(np.random.default_rng(0).normal(size=(Index(idx).n_sentences, 64))
                  .astype(np.float32))
        faiss.write_index(other, str(path))
    bad = failed(verify_index(idx))
    assert bad and all("tapt index repair" in v for v in bad.values()), list(bad)
    done = repair_index(idx, progress=False)
    assert done and "rebuilt index.faiss of shard(s) 000000" in done[0]
    assert verify_index(idx).ok
    assert repair_index(idx, progress=False) == []


def test_missing_text_record_and_inconsistent_offsets(idx):
    n = json.loads((idx / "manifest.json").read_text())["counts"]["sentences"]
    env = lmdb.open(str(shard_file(idx, "text.lmdb")), subdir=True)
    with env.begin(write=True) as txn:
        txn.delete(key(n - 1))
    env.close()
    docs = np.load(shard_file(idx, "docs.npy"))
    docs[1] += 1
    np.save(shard_file(idx, "docs.npy"), docs)
    bad = failed(verify_index(idx))
    assert "text store" in bad and "records" in bad["text store"]
    assert "checksum docs.npy" in bad and "checksum text.lmdb/data.mdb" in bad


def test_cli_verify_exit_status_and_json(idx):
    runner = CliRunner()
    ok = runner.invoke(cli, ["-q", "index", "verify", str(idx), "--json"])
    assert ok.exit_code == 0, ok.output
    assert all(json.loads(line)["ok"] for line in ok.output.strip().splitlines())
    (shard_file(idx, "index.faiss")).unlink()
    bad = runner.invoke(cli, ["-q", "index", "verify", str(idx)])
    assert bad.exit_code == 1 and "failed" in bad.output and "tapt index repair" in bad.output
    fixed = runner.invoke(cli, ["-q", "index", "repair", str(idx)])
    assert fixed.exit_code == 0 and "rebuilt" in fixed.output


def test_moved_index_loads_selects_and_verifies(idx, tmp_path, medical_task):
    moved = tmp_path / "elsewhere" / "renamed-index"
    moved.parent.mkdir()
    shutil.move(str(idx), moved)
    assert not idx.exists()
    assert verify_index(moved).ok
    selection = tapt.Index.open(moved).select("knn", medical_task, k=3,
                                              out=tmp_path / "s.jsonl")
    assert selection.manifest["counts"]["segments"] > 0
    assert str(idx) not in json.dumps(Index(moved).manifest["files"])
