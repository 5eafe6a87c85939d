"""A damaged index fails loudly and never answers wrong: each case damages a real file of a real
index (a truncated file, a flipped byte, an edited array), then runs the command as a user would
and expects exactly one `Error:` line naming the damage (issue 11)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import HashingEncoder, make_legacy, reseal_shard, shard_file
from hashing_cli import idx, one_error, run  # noqa: F401 - fixtures
from tapt.indexer.building.add import add_to_index
from tapt.indexer.index import Index
from tapt.indexer.store.manifest import LMDB_DATA, STORE, write_index_manifest
from tapt.indexer.store.text_store import TextStoreWriter, key
from tapt.util.files import sha256_file

HERE = Path(__file__).resolve().parents[1] / "support"
METHODS = ("centroid", "knn", "iforest", "distance", "density", "classifier", "fused", "auto")






@pytest.fixture()
def large(monkeypatch):
    """Treat the small test index like a large one: no file is hashed on open, so the checks
    that guard large indexes (record CRCs, score ranges, row lengths, FAISS agreement) act."""
    monkeypatch.setenv("TAPT_HASH_ON_OPEN", "0")




def select(run, idx, task, method="centroid", out=None):
    extra = ["--k", "3"] if method == "knn" else ["--budget", "3"]
    return run("select", method, idx, "--task", task, *extra,
               "--out", out or idx.parent / f"{method}.jsonl")


def flip(path: Path, offset: int, mask: int = 0x40) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def record_offset(idx: Path, sid: int) -> int:
    """Where the text of record `sid` lies in the LMDB data file."""
    text = Index(idx).store.texts([sid])[0].encode()
    return (shard_file(idx, LMDB_DATA)).read_bytes().index(text) + 3


def test_truncated_text_store_is_diagnosed_never_a_sigbus(idx, medical_task):
    """In a fresh process, as a user runs it: LMDB maps the file, a missing page is SIGBUS."""
    data = shard_file(idx, LMDB_DATA)
    os.truncate(data, data.stat().st_size // 2)
    for argv, expected in (
            (["select", "centroid", idx, "--task", medical_task, "--budget", "3", "--out",
              idx.parent / "s.jsonl"], "cut short"),
            (["index", "repair", idx], "cannot repair"),
            (["index", "info", idx], "damaged")):
        for hashing in ("64M", "0"):
            proc = subprocess.run([sys.executable, str(HERE / "hashing_cli.py"), "-q",
                                   *map(str, argv)], capture_output=True, text=True,
                                  env={**os.environ, "TAPT_HASH_ON_OPEN": hashing})
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1, (argv, proc.returncode, proc.stderr)
            assert lines[0].startswith("Error: ") and (expected in lines[0] or hashing != "0")
    proc = subprocess.run([sys.executable, str(HERE / "hashing_cli.py"), "-q", "index",
                           "verify", str(idx)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "cut short" in proc.stdout and proc.stderr.startswith("Error: ")
    assert not (idx.parent / "s.jsonl").exists()


def test_flipped_byte_in_a_text_record_fails_when_read(idx, medical_task, run, large):
    flip(shard_file(idx, LMDB_DATA), record_offset(idx, 5), 0x01)
    everything = run("select", "centroid", idx, "--task", medical_task, "--budget", "1.0",
                     "--out", idx.parent / "all.jsonl")      # reads every record
    one_error(everything, "text record 5 fails its checksum", "tapt index verify")
    out = run("index", "verify", idx).output
    assert "1 damaged record(s) (first: 5)" in out


def test_damaged_lexical_ids_stop_moore_lewis(idx, medical_task, run):
    lexical = np.load(shard_file(idx, "lexical.npy"))
    lexical[7] = lexical.max() + 10          # a bigram type that does not exist
    np.save(shard_file(idx, "lexical.npy"), lexical)
    one_error(select(run, idx, medical_task, "moore-lewis"), "lexical.npy",
              "does not match the checksum")
    reseal_shard(idx, **{"lexical.npy": sha256_file(shard_file(idx, "lexical.npy"))})
    for method in ("moore-lewis", "fused"):   # a checksum that agrees: the range check holds
        one_error(select(run, idx, medical_task, method), "lexical.npy names bigrams")
    assert "lexical" in run("index", "verify", idx).output


def test_flipped_byte_is_caught_by_the_checksum_on_open(idx, medical_task, run):
    flip(shard_file(idx, LMDB_DATA), record_offset(idx, 5), 0x01)
    one_error(select(run, idx, medical_task), "text.lmdb/data.mdb does not match the checksum")


def test_a_record_that_is_not_json_is_one_error_line(idx, medical_task, run, large):
    env_path = shard_file(idx, STORE)
    writer = TextStoreWriter(env_path)
    payload = b'{"text": "broken'
    with writer.env.begin(write=True) as txn:  # a valid checksum over bytes that are not JSON
        txn.put(key(3), zlib.crc32(payload, zlib.crc32(key(3))).to_bytes(4, "big") + payload)
    writer.close()
    everything = run("select", "centroid", idx, "--task", medical_task, "--budget", "1.0",
                     "--out", idx.parent / "all.jsonl")
    one_error(everything, "text record 3 is not valid JSON")


@pytest.mark.parametrize("method", METHODS)
def test_flipped_exponent_in_embeddings_stops_every_method(idx, medical_task, run, large, method):
    row = 7
    flip(shard_file(idx, "embeddings.npy"), 128 + 4 * 64 * row + 4 * 3 + 3, 0x40)  # exponent: x 2^64
    line = one_error(select(run, idx, medical_task, method), "embeddings.npy row 7")
    assert "tapt index verify" in line
    assert not (idx.parent / f"{method}.jsonl").exists()


def test_nan_row_and_every_score_range_check(idx, medical_task, run, large):
    emb = np.load(shard_file(idx, "embeddings.npy"), mmap_mode="r+")
    emb[11, 0] = np.nan
    emb.flush()
    del emb
    one_error(select(run, idx, medical_task, "centroid"), "row 11")
    one_error(select(run, idx, medical_task, "density"), "row 11")


def test_truncated_and_flipped_faiss(idx, medical_task, run, large):
    original = (shard_file(idx, "index.faiss")).read_bytes()
    (shard_file(idx, "index.faiss")).write_bytes(original[: len(original) // 2])
    one_error(select(run, idx, medical_task, "knn"), "index.faiss is", "bytes")
    one_error(select(run, idx, medical_task, "centroid"), "index.faiss is")  # checked on open
    # A flipped byte in the vector of a row knn returns: it disagrees with the embeddings.
    (shard_file(idx, "index.faiss")).write_bytes(original)
    ix = Index(idx)
    best = int(ix.search(HashingEncoder().encode(["patient fever tumour dose"]), 1)[1][0, 0])
    assert (shard_file(idx, "index.faiss")).read_bytes()[-ix.n_sentences * ix.dim * 4:] == \
        np.ascontiguousarray(ix.embeddings, dtype=np.float32).tobytes()  # flat: vectors last
    vectors = len(original) - ix.n_sentences * ix.dim * 4
    del ix
    data = bytearray(original)
    data[vectors + best * 64 * 4 + 2] ^= 0x40
    (shard_file(idx, "index.faiss")).write_bytes(bytes(data))
    task = idx.parent / "t.txt"
    task.write_text("patient fever tumour dose\n")
    one_error(select(run, idx, task, "knn"), "index.faiss and embeddings.npy disagree")


def test_garbage_faiss_and_small_files_hashed_on_open(idx, medical_task, run):
    flip(shard_file(idx, "index.faiss"), 200)
    one_error(select(run, idx, medical_task, "knn"), "index.faiss does not match the checksum")
    (shard_file(idx, "index.faiss")).write_bytes(b"not a faiss index" * 2000)
    one_error(select(run, idx, medical_task, "knn"), "index.faiss")
    done = run("index", "repair", idx)
    assert done.exit_code == 0 and "rebuilt index.faiss" in done.output
    assert select(run, idx, medical_task, "knn").exit_code == 0


@pytest.mark.parametrize("edit", ["docs shifted", "docs not rising", "docs end", "tokens zero",
                                  "tokens changed", "embeddings longer"])
def test_edited_arrays_that_are_still_valid_are_refused(idx, medical_task, run, edit):
    docs, tokens = np.load(shard_file(idx, "docs.npy")), np.load(shard_file(idx, "tokens.npy"))
    if edit == "docs shifted":
        docs[3] -= 1
    elif edit == "docs not rising":
        docs[3] = docs[4]
    elif edit == "docs end":
        docs[-1] -= 1
    elif edit == "tokens zero":
        tokens[2] = 0
    elif edit == "tokens changed":
        tokens[2] += 5
    if edit.startswith("docs"):
        np.save(shard_file(idx, "docs.npy"), docs)
    elif edit.startswith("tokens"):
        np.save(shard_file(idx, "tokens.npy"), tokens)
    else:
        with open(shard_file(idx, "embeddings.npy"), "ab") as fh:
            fh.write(b"\0" * 256)
    for hashing in ("64M", "0"):
        os.environ["TAPT_HASH_ON_OPEN"] = hashing
        try:
            one_error(select(run, idx, medical_task), "damaged")
        finally:
            del os.environ["TAPT_HASH_ON_OPEN"]


def test_offsets_are_checked_even_when_their_checksum_agrees(idx, medical_task, run):
    docs = np.load(shard_file(idx, "docs.npy"))
    docs[3] = docs[4]
    np.save(shard_file(idx, "docs.npy"), docs)
    reseal_shard(idx, **{"docs.npy": sha256_file(shard_file(idx, "docs.npy"))})
    one_error(select(run, idx, medical_task), "docs.npy: document 3 has 0 sentences")


def test_edited_manifest_is_refused(idx, medical_task, run):
    text = (idx / "manifest.json").read_text()
    (idx / "manifest.json").write_text(text.replace('"segment_size": 4', '"segment_size": 5'))
    one_error(select(run, idx, medical_task), "manifest.json does not match its own checksum")
    assert "does not match its own checksum" in run("index", "verify", idx).output


def test_a_selection_from_another_generation_is_refused_by_eval_and_train(
        idx, medical_task, run, tmp_path, labelled_corpus):
    sel = tmp_path / "sel.jsonl"
    assert select(run, idx, medical_task, out=sel).exit_code == 0
    copy = tmp_path / "copy"
    shutil.copytree(idx, copy)
    extra = tmp_path / "more.jsonl"
    extra.write_text(json.dumps({"text": "Captain anchor harbour tide storm.", "domain": "sea",
                                 "doc": "new"}) + "\n")
    add_to_index(copy, [extra], HashingEncoder(), progress=False)
    ok = run("eval", sel, "--index", idx, "--label", "medical")
    assert ok.exit_code == 0, ok.output
    line = one_error(run("eval", sel, "--index", copy, "--label", "medical"),
                     "another generation", "generation 1", "generation 2")
    assert f"{Index(idx).n_sentences:,} sentences" in line
    assert f"{Index(copy).n_sentences:,} sentences" in line
    # two copies that grew apart under one uuid: same generation number, other content
    other = tmp_path / "other"
    shutil.copytree(idx, other)
    extra.write_text(json.dumps({"text": "Clause licence warranty court.", "domain": "legal",
                                 "doc": "x"}) + "\n")
    add_to_index(other, [extra], HashingEncoder(), progress=False)
    sel_a, sel_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert select(run, copy, medical_task, out=sel_a).exit_code == 0
    assert select(run, other, medical_task, out=sel_b).exit_code == 0
    from tapt.errors import InputError
    from tapt.trainer.inputs import load_selections

    with pytest.raises(InputError, match="different generations"):
        load_selections([str(sel_a), str(sel_b)])


def test_reindex_keeps_selections_valid(idx, medical_task, run, tmp_path):
    sel = tmp_path / "sel.jsonl"
    assert select(run, idx, medical_task, out=sel).exit_code == 0
    assert run("index", "reindex", idx, "--index", "hnsw").exit_code == 0
    assert run("eval", sel, "--index", idx, "--label", "medical").exit_code == 0


def make_format_1(idx: Path) -> None:
    """Turn a current index into one as tapt wrote format 1: bare JSON records, no seal."""
    make_legacy(idx, 1)


def test_format_1_index_is_refused_with_upgrade_named_then_upgraded(idx, medical_task, run,
                                                                    tmp_path):
    before = Index(idx).store.texts(range(Index(idx).n_sentences))
    make_format_1(idx)
    line = one_error(select(run, idx, medical_task), "format version 1",
                     f"tapt index upgrade {idx}")
    assert "no re-embedding" in line
    assert "tapt index upgrade" in run("index", "verify", idx).output
    assert "(format 1," in run("index", "info", idx).output
    old_sel = json.loads((idx / "manifest.json").read_text())
    done = run("index", "upgrade", idx)
    assert done.exit_code == 0 and "format 1 -> 3" in done.output, done.output
    ix = Index(idx)
    assert ix.format_version == 3 and ix.store.texts(range(ix.n_sentences)) == before
    assert ix.manifest["uuid"] == old_sel["uuid"] and ix.manifest["same_content_as"]
    assert run("index", "verify", idx).exit_code == 0
    assert "nothing to do" in run("index", "upgrade", idx).output
    assert select(run, idx, medical_task).exit_code == 0


def test_python_api_upgrades_an_old_index(idx):
    import tapt

    before = Index(idx).store.texts(range(Index(idx).n_sentences))
    make_format_1(idx)
    # tapt 0.1 listed its input files as bare paths
    manifest = json.loads((idx / "manifest.json").read_text())
    files = manifest["ingest"]["files"]
    manifest["ingest"]["files"] = [f["path"] if isinstance(f, dict) else f for f in files]
    (idx / "manifest.json").write_text(json.dumps(manifest))
    ix = tapt.Index.upgrade(idx, progress=False)
    assert ix.format_version == 3          # sharded; its Flat index has no quantizer to share
    assert ix.store.texts(range(ix.n_sentences)) == before
    assert tapt.Index.upgrade(idx, progress=False).generation == ix.generation


def test_a_damaged_format_1_index_is_not_upgraded(idx, run):
    make_format_1(idx)
    flip(idx / LMDB_DATA, record_offset_plain(idx), 0x01)
    one_error(run("index", "upgrade", idx), "does not match the checksum")
    assert json.loads((idx / "manifest.json").read_text())["format_version"] == 1


def record_offset_plain(idx: Path) -> int:
    return (idx / LMDB_DATA).read_bytes().index(b'"text":"') + 10


def test_sealed_manifest_written_by_every_writer(idx):
    from tapt.indexer.store.manifest import read_index_manifest

    manifest = read_index_manifest(idx)
    write_index_manifest(idx, {**manifest, "note": "x"})
    assert read_index_manifest(idx)["note"] == "x"


def test_large_files_are_hashed_once_per_version_and_remembered(idx, medical_task, run,
                                                               monkeypatch, tmp_path):
    """A sign flip keeps every score in range and every row unit length: only a checksum sees
    it. Files too large to hash on every open are hashed on their first open after a change
    (here: a cache without the stamps the build wrote, which vouch for a copy that kept the
    files' modification times)."""
    import tapt.indexer.store.integrity as integrity

    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(integrity, "SMALL_FILE", 1024)  # every data file counts as large
    calls = []
    real = integrity.sha256_file
    monkeypatch.setattr(integrity, "sha256_file",
                        lambda p, progress=False: calls.append(Path(p).name) or real(p))
    assert select(run, idx, medical_task).exit_code == 0       # a new copy: hashed once
    assert {"embeddings.npy", "data.mdb"} <= set(calls)
    calls.clear()
    integrity._VERIFIED.clear()                                 # as in a new process
    assert select(run, idx, medical_task).exit_code == 0
    assert "embeddings.npy" not in calls and "data.mdb" not in calls
    flip(shard_file(idx, "embeddings.npy"), 128 + 4 * 64 * 9 + 4 * 5 + 3, 0x80)  # one sign bit
    one_error(select(run, idx, medical_task), "embeddings.npy does not match the checksum")
    monkeypatch.setenv("TAPT_HASH_ON_OPEN", "0")                # large-file hashing off:
    assert select(run, idx, medical_task).exit_code == 0        # the documented gap
