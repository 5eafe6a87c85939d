"""Building an index (`indexer.building.pipeline`): one id per row across FAISS, embeddings and
store, the manifest, refusals, sharded builds equal to one shard, and the vocabulary merge."""

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from build_worker import assert_same_content
from conftest import HashingEncoder, write_split_corpus
from tapt.errors import IndexFormatError, InputError, ModelMismatchError, OutputError
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.index import Index


def test_one_id_contract_faiss_embeddings_store(fake_index, labelled_corpus):
    _, records = labelled_corpus
    ix = Index(fake_index)
    assert ix.n_sentences == len(records) == ix.faiss.ntotal
    enc = HashingEncoder()
    for sid in (0, 17, ix.n_sentences - 1):
        text = ix.store.texts([sid])[0]
        assert text == records[sid]["text"]
        np.testing.assert_allclose(ix.embeddings[sid], enc.encode([text])[0], atol=1e-6)
        rec = ix.store.records([sid])[0]
        assert rec["meta"]["domain"] == records[sid]["domain"]
        # FAISS row sid holds the same vector: searching with it finds itself at similarity 1
        dist, ids = ix.faiss.search(np.asarray(ix.embeddings[sid:sid + 1]), 1)
        assert np.isclose(dist[0, 0], 1.0, atol=1e-5)
        assert np.allclose(ix.embeddings[ids[0, 0]], ix.embeddings[sid])


def test_documents_and_segments_follow_the_doc_field(fake_index, labelled_corpus):
    _, records = labelled_corpus
    ix = Index(fake_index)
    docs = [r["doc"] for r in records]
    boundaries = [0] + [i for i in range(1, len(docs)) if docs[i] != docs[i - 1]] + [len(docs)]
    assert ix.doc_offsets.tolist() == boundaries
    seg = ix.segments()
    assert (np.diff(seg) <= 4).all()
    for s in range(len(seg) - 1):
        assert len({docs[i] for i in range(seg[s], seg[s + 1])}) == 1


def test_manifest_records_model_counts_and_versions(fake_index):
    m = Index(fake_index).manifest
    assert m["format_version"] == 3 and m["model"]["name"] == "hashing-test"
    assert [s["name"] for s in m["shards"]] == ["000000"] and m["shards"][0]["row_offset"] == 0
    assert m["model"]["dim"] == 64 and m["model"]["normalized"] is True
    assert m["faiss"]["factory"] == "Flat" and m["segment_size"] == 4
    assert m["counts"]["sentences"] == m["files"]["embeddings"]["shape"][0]
    assert {"python", "numpy", "faiss-cpu", "lmdb"} <= set(m["versions"])
    assert all(not str(v).startswith("/") for v in m["files"].values() if isinstance(v, str))


def test_text_corpus_is_split_into_sentences_and_long_ones_counted(tmp_path):
    corpus = tmp_path / "c.txt"
    long = " ".join(["word"] * 30) + "."
    corpus.write_text(f"First sentence here. Second one follows!\n{long}\n", encoding="utf-8")
    m = build_index([corpus], tmp_path / "i", HashingEncoder(),
                    BuildConfig(segment_size=15, progress=False))
    assert m["counts"]["sentences"] == 3 and m["counts"]["documents"] == 2
    assert m["counts"]["truncated_sentences"] == 1
    assert Index(tmp_path / "i").store.texts([0, 1]) == ["First sentence here.", "Second one follows!"]


def test_existing_output_is_refused_unless_overwrite(tmp_path, labelled_corpus):
    out = tmp_path / "idx"
    build_index([labelled_corpus[0]], out, HashingEncoder(), BuildConfig(progress=False))
    with pytest.raises(OutputError, match="already holds a tapt index; pass `overwrite`"):
        build_index([labelled_corpus[0]], out, HashingEncoder(), BuildConfig(progress=False))
    first = Index(out).uuid
    build_index([labelled_corpus[0]], out, HashingEncoder(),
                BuildConfig(progress=False, overwrite=True))
    assert Index(out).uuid != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_bad_corpus_fails_before_anything_is_written(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xff\xfe broken\n")
    with pytest.raises(InputError, match="not valid UTF-8"):
        build_index([bad], tmp_path / "idx", HashingEncoder(), BuildConfig(progress=False))
    assert not (tmp_path / "idx").exists()
    with pytest.raises(InputError, match="segment_size"):
        BuildConfig(segment_size=0)


def test_loading_checks_directory_version_and_model(tmp_path, fake_index):
    with pytest.raises(IndexFormatError, match="does not exist"):
        Index(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(IndexFormatError, match="not a tapt index"):
        Index(tmp_path / "plain")
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(fake_index, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    Index(copy).check_encoder(HashingEncoder())  # a moved copy loads (no absolute paths)
    with pytest.raises(ModelMismatchError, match="64-dim"):
        Index(copy).check_encoder(HashingEncoder(dim=32))

    class Other(HashingEncoder):
        @property
        def weights_sha256(self):
            return "0" * 64

    with pytest.raises(ModelMismatchError, match="not the model"):
        Index(copy).check_encoder(Other())
    manifest["format_version"] = 99
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="version 99.*upgrade tapt"):
        Index(copy)


def test_reading_an_index_writes_nothing_into_it(fake_index, medical_task, tmp_path):
    """So read-only directories and media can be queried (LMDB without a lock file)."""
    import tapt

    def snapshot():
        return {p.relative_to(fake_index): p.stat().st_mtime_ns for p in fake_index.rglob("*")}

    before = snapshot()
    ix = tapt.Index.open(fake_index)
    ix.store.texts(range(5))
    ix.select("knn", medical_task, k=3, out=tmp_path / "s.jsonl")
    assert snapshot() == before


@pytest.fixture(scope="module")
def split_corpus(tmp_path_factory):
    return write_split_corpus(tmp_path_factory.mktemp("split"), parts=4, docs_per_topic=6)


def _config(**kw) -> BuildConfig:
    return BuildConfig(segment_size=4, split=False, progress=False, part_size=48,
                       embedding_dtype="float32", **kw)


def test_three_shard_build_equals_one_shard_build(split_corpus, tmp_path):
    one = build_index(split_corpus, tmp_path / "one", HashingEncoder(), _config())
    three = build_index(split_corpus, tmp_path / "three", HashingEncoder(), _config(shards=3))
    assert len(one["shards"]) == 1 and len(three["shards"]) == 3
    assert_same_content(tmp_path / "one", tmp_path / "three")
    rows = [s["rows"] for s in three["shards"]]
    assert [s["row_offset"] for s in three["shards"]] == [0, rows[0], rows[0] + rows[1]]
    assert sum(s["segments"] for s in three["shards"]) == one["counts"]["segments"]
    ix = Index(tmp_path / "three")
    for shard in ix.shards:   # documents never cross a shard; global id = offset + local row
        assert shard.docs[0] == 0 and shard.docs[-1] == shard.rows
        first = ix.store.records([shard.row_offset])[0]
        assert first["pos"] == 0 and first["doc"] == shard.doc_offset
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "three"]


def test_shard_size_groups_whole_files_and_float16_is_the_sharded_default(split_corpus,
                                                                         tmp_path):
    records = [len(Path(p).read_text().splitlines()) for p in split_corpus]
    size = max(records) + min(records)
    m = build_index(split_corpus, tmp_path / "idx", HashingEncoder(),
                    BuildConfig(segment_size=4, split=False, progress=False, shard_size=size))
    groups = [sh.manifest["input_files"] for sh in Index(tmp_path / "idx").shards]
    assert [f for g in groups for f in g] == [str(p) for p in split_corpus]
    assert all(sum(records[[str(p) for p in split_corpus].index(f)] for f in g) <= size
               or len(g) == 1 for g in groups)
    assert len(m["shards"]) >= 2 and m["files"]["embeddings"]["dtype"] == "float16"
    one = build_index(split_corpus[:1], tmp_path / "small", HashingEncoder(),
                      BuildConfig(split=False, progress=False))
    assert one["files"]["embeddings"]["dtype"] == "float32"      # one shard, small: float32
    with pytest.raises(InputError, match="shard_size"):
        BuildConfig(shard_size="2X")
    with pytest.raises(InputError, match="not both"):
        BuildConfig(shards=2, shard_size="2M")
    assert BuildConfig(shard_size="2M").shard_size == 2_000_000


def test_stage_tasks_are_picklable_and_the_executor_is_pluggable(split_corpus, tmp_path):
    """What a Ray executor needs: plain tasks it can ship, and `map` and `imap` (results as
    they finish) as the only entry points; nothing of the corpus read in this process."""
    from tapt.indexer.building import executors, stages

    seen = []

    class Recording(executors.LocalExecutor):
        name = "recording"

        def map(self, stage, tasks, encoder=None):
            for task in tasks:
                assert pickle.loads(pickle.dumps(task)) == task or stage.name == "prepare"
                pickle.dumps(task)
            seen.append((stage.name, len(tasks)))
            return super().map(stage, tasks, encoder)

        def imap(self, stage, tasks):
            for task in tasks:
                pickle.dumps(task)
            seen.append((stage.name, len(tasks)))
            yield from super().imap(stage, tasks)

    m = build_index(split_corpus, tmp_path / "idx", HashingEncoder(), _config(shards=2),
                    executor=Recording(progress=False))
    stage_names = [name for name, _ in seen]
    assert stage_names == ["scan", "prepare", "embed", "assemble", "train", "index", "publish"]
    assert dict(seen)["prepare"] == 2 and dict(seen)["embed"] == sum(
        -(-s["rows"] // m["build"]["window"]) for s in m["shards"])
    assert callable(stages.prepare_shard) and callable(stages.embed_part)
    with pytest.raises(InputError, match="executor"):
        BuildConfig(executor="nope")


def test_the_corpus_vocabulary_is_merged_in_buckets_as_one_union(tmp_path, monkeypatch):
    """`write_union` (bounded memory, buckets by the hashes' top bits) writes what repeated
    `np.union1d` makes, and leaves nothing but the file."""
    from tapt.indexer.reading import lexical

    monkeypatch.setattr(lexical, "_UNION_CHUNK", 1000)
    monkeypatch.setattr(lexical, "_UNION_IN_MEMORY", 100)          # the buckets, not one sort
    rng = np.random.default_rng(4)
    common = rng.integers(0, 2**64 - 1, size=3000, dtype=np.uint64)
    shards = [np.concatenate([[0, 1], rng.choice(common, 2500), rng.integers(
        0, 2**64 - 1, size=700, dtype=np.uint64)]).astype(np.uint64) for _ in range(5)]
    shards.append(np.array([0, 1, 2**64 - 1, 0, 2**63], dtype=np.uint64))   # bucket edges
    want = lexical.union_vocabulary(shards)
    out = tmp_path / "vocab.npy"
    out.write_bytes(b"an older file")
    assert lexical.write_union(out, (s[2:] for s in shards)) == len(want)
    np.testing.assert_array_equal(np.load(out), want)
    assert np.load(out).dtype == np.uint64 and sorted(p.name for p in tmp_path.iterdir()) == [
        "vocab.npy"]
    base = np.load(out)
    more = np.array([0, 1, 5, 2**62], dtype=np.uint64)
    lexical.write_union(out, [base, more[2:]])
    np.testing.assert_array_equal(np.load(out), np.union1d(want, more[2:]))
    monkeypatch.setattr(lexical, "_UNION_IN_MEMORY", 1 << 20)       # small: one sort in memory
    assert lexical.write_union(out, (s[2:] for s in shards)) == len(want)
    np.testing.assert_array_equal(np.load(out), want)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vocab.npy"]


def test_a_killed_vocabulary_merge_leaves_only_what_tapt_recognises(tmp_path):
    """The bucket folder and temporary file of a merge killed mid-way are tapt's own: a later
    run may remove the work directory that holds them."""
    from tapt.indexer.store.manifest import foreign_entries

    (tmp_path / ".vocab.npy.buckets-4242").mkdir()
    (tmp_path / ".vocab.npy.tmp-4242").write_bytes(b"")
    assert foreign_entries(tmp_path) == []
    (tmp_path / "notes.txt").write_text("mine")
    assert foreign_entries(tmp_path) == ["notes.txt"]
