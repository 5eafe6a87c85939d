"""Task embeddings are cached per model and task text; the cache can be turned off."""

import numpy as np

import tapt
from conftest import HashingEncoder, loading
from tapt.retriever.selections.file_format import read_selection
from tapt.retriever.tasks.embedding import encode_cached


class CountingEncoder(HashingEncoder):
    embedded = 0

    def encode(self, texts, batch_size=64):
        self.embedded += len(texts)
        return super().encode(texts, batch_size)


class OtherModel(CountingEncoder):
    @property
    def weights_sha256(self) -> str:
        return "another-model"


def _select(fake_index, task, out, encoder, monkeypatch):
    loading(monkeypatch, encoder)
    return tapt.Index.open(fake_index).select("centroid", task, "5", out=out).manifest


def test_second_selection_reuses_the_task_embeddings(fake_index, tmp_path, monkeypatch,
                                                     medical_task):
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    enc = CountingEncoder()
    first = _select(fake_index, medical_task, tmp_path / "a.jsonl", enc, monkeypatch)
    embedded = enc.embedded
    second = _select(fake_index, medical_task, tmp_path / "b.jsonl", enc, monkeypatch)
    assert embedded > 0 and enc.embedded == embedded
    assert first["timings"]["task_embeddings_cached"] is False
    assert second["timings"]["task_embeddings_cached"] is True
    ids = [[s.id for s in read_selection(tmp_path / f"{n}.jsonl")[1]] for n in "ab"]
    assert ids[0] == ids[1]
    other = OtherModel()
    emb, cached = encode_cached(other, ["A sentence."])
    assert not cached and other.embedded == 1    # another model never reads this cache


def test_cache_off_and_unwritable_cache_are_not_errors(fake_index, tmp_path, monkeypatch,
                                                       medical_task):
    monkeypatch.setenv("TAPT_CACHE_DIR", "off")
    enc = CountingEncoder()
    _select(fake_index, medical_task, tmp_path / "a.jsonl", enc, monkeypatch)
    once = enc.embedded
    _select(fake_index, medical_task, tmp_path / "b.jsonl", enc, monkeypatch)
    assert once > 0 and enc.embedded == 2 * once
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TAPT_CACHE_DIR", str(blocker / "cache"))
    manifest = _select(fake_index, medical_task, tmp_path / "c.jsonl", CountingEncoder(), monkeypatch)
    assert manifest["timings"]["task_embeddings_cached"] is False
    assert np.isfinite(manifest["timings"]["embed_task_seconds"])


def test_screening_is_cached_per_model_files_and_a_damaged_entry_is_recomputed(
        tmp_path, monkeypatch, caplog):
    from tapt.indexer.encoding.encoder import LazyEncoder, embedding_key
    from tapt.retriever.tasks.embedding import SCREEN_SUBDIR, embed_task
    from tapt.util.cache import write_checked

    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    enc, loads = CountingEncoder(), []

    def lazy(stamp):
        return LazyEncoder(embedding_key(enc), enc.dim, lambda: loads.append(1) or enc, stamp)

    sentences = ["A fever.", "A cough and an ache.", "A rash."]
    first = embed_task(lazy("files-1"), sentences)
    again = embed_task(lazy("files-1"), sentences)
    assert not first.cached and again.cached and len(loads) == 1
    np.testing.assert_array_equal(first.embeddings, again.embeddings)
    embed_task(lazy("files-2"), sentences)        # the model's files changed: loaded again
    assert len(loads) == 2
    assert embed_task(LazyEncoder(embedding_key(enc), enc.dim, lambda: enc), sentences).cached
    for entry in (tmp_path / "cache" / SCREEN_SUBDIR).iterdir():
        write_checked(entry, b'{"sentences": 3, "left_out": [7], "warnings": []}')
    with caplog.at_level("WARNING"):
        redone = embed_task(lazy("files-1"), sentences)
    assert len(loads) == 3 and redone.sentences == sentences
    assert "holds no valid screening" in caplog.text


def test_a_cache_entry_copied_onto_another_key_does_not_answer_for_it(tmp_path, caplog):
    """The checksum covers the entry's name (its key): a task's embeddings copied over another
    task's entry are recomputed, never served as that task's."""
    import shutil

    from tapt.util.cache import read_checked, write_checked

    a, b = tmp_path / "task-a.npy", tmp_path / "task-b.npy"
    assert write_checked(a, b"embeddings of task a") and write_checked(b, b"embeddings of b")
    assert read_checked(a) == b"embeddings of task a"
    shutil.copyfile(b, a)
    with caplog.at_level("WARNING"):
        assert read_checked(a) is None
    assert "not this key's" in caplog.text
    old = tmp_path / "old.npy"                 # an entry of the previous trailer: recomputed
    import hashlib
    old.write_bytes(b"payload" + b"TAPTSUM1" + hashlib.sha256(b"payload").digest())
    caplog.clear()
    assert read_checked(old) is None and "damaged" not in caplog.text
