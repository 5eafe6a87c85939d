import json

import numpy as np
import pytest

from conftest import HashingEncoder
from tapt.indexer.build import BuildConfig, build_index
from tapt.errors import IndexFormatError, InputError, ModelMismatchError, OutputError
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
    assert m["format_version"] == 2 and m["model"]["name"] == "hashing-test"
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
    from tapt.retriever.select import SelectConfig, run_selection

    def snapshot():
        return {p.relative_to(fake_index): p.stat().st_mtime_ns for p in fake_index.rglob("*")}

    before = snapshot()
    ix = Index(fake_index)
    ix.store.texts(range(5))
    run_selection(ix, SelectConfig(method="knn", k=3), tmp_path / "s.jsonl", [str(medical_task)],
                  HashingEncoder())
    assert snapshot() == before
