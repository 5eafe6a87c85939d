"""`tapt index add`: appends new shards whose content equals a build of everything, duplicates are
skipped, existing shards and ids never change, a killed add resumes, and readers during an add
see one whole generation."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from build_worker import assert_same_content
from conftest import HashingEncoder, shard_file, write_labelled_corpus
from tapt.errors import Interrupted
from tapt.indexer.building.add import add_to_index
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.index import Index

ADD_WORKER = """
import sys, time
sys.path[:0] = [{tests!r}, {repo!r}]
from conftest import HashingEncoder
from tapt.indexer.building.add import add_to_index
class Slow(HashingEncoder):
    def encode(self, texts, batch_size=64):
        time.sleep(0.05)
        return super().encode(texts, batch_size)
add_to_index({idx!r}, [{corpus!r}], Slow(), progress=False)
"""


def _config() -> BuildConfig:
    return BuildConfig(segment_size=4, split=False, progress=False, part_size=32, batch_size=32)


@pytest.fixture(scope="module")
def halves(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("add")
    a, b = base / "a.jsonl", base / "b.jsonl"
    write_labelled_corpus(a, docs_per_topic=6, seed=4)
    write_labelled_corpus(b, docs_per_topic=6, seed=5)
    return a, b


@pytest.fixture(scope="module")
def both(halves, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("both") / "idx"
    build_index(list(halves), out, HashingEncoder(), _config())
    return out


def _fresh(halves, tmp_path) -> Path:
    out = tmp_path / "idx"
    build_index([halves[0]], out, HashingEncoder(), _config())
    return out


def test_add_equals_building_everything_at_once(halves, both, tmp_path):
    idx = _fresh(halves, tmp_path)
    before = Index(idx)
    first_uuid, old_rows = before.uuid, before.n_sentences
    old_texts = before.store.texts(range(old_rows))
    old_shard = before.manifest["shards"][0]
    inode = shard_file(idx, "embeddings.npy").stat().st_ino
    manifest = add_to_index(idx, [halves[1]], HashingEncoder(), progress=False)
    assert_same_content(idx, both)
    after = Index(idx)
    assert after.uuid == first_uuid and manifest["generation"] == 2
    assert after.store.texts(range(old_rows)) == old_texts          # ids are stable
    assert manifest["history"][-1]["sentences"] == after.n_sentences - old_rows
    assert manifest["shards"][0] == old_shard                       # the old shard as it was
    assert shard_file(idx, "embeddings.npy").stat().st_ino == inode  # not copied: linked
    assert manifest["shards"][1]["name"] == "000001" and manifest["shards"][1][
        "row_offset"] == old_rows
    assert manifest["history"][-1]["shards"] == ["000001"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_documents_already_present_are_skipped(halves, tmp_path):
    idx = _fresh(halves, tmp_path)
    rows = Index(idx).n_sentences
    docs = Index(idx).manifest["counts"]["documents"]
    before = (idx / "manifest.json").read_bytes()
    generation = Index(idx).generation
    manifest = add_to_index(idx, [halves[0]], HashingEncoder(), progress=False)
    assert Index(idx).n_sentences == rows
    assert manifest["history"][-1]["duplicate_documents_skipped"] == docs
    # nothing new: no new generation, so selections made from the index stay valid
    assert manifest["history"][-1]["unchanged"] is True
    assert (idx / "manifest.json").read_bytes() == before
    assert Index(idx).generation == generation == manifest["generation"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_a_killed_add_resumes(halves, both, tmp_path):
    idx = _fresh(halves, tmp_path)

    class Failing(HashingEncoder):
        def encode(self, texts, batch_size=64):
            if self.calls == 2:
                raise KeyboardInterrupt
            return super().encode(texts, batch_size)

    with pytest.raises(Interrupted) as raised:
        add_to_index(idx, [halves[1]], Failing(), progress=False)
    assert (tmp_path / ".idx.adding").is_dir()
    assert raised.value.work == str(tmp_path / ".idx.adding") and raised.value.kept > 0
    assert Index(idx).manifest.get("generation") == 1             # the index is untouched
    manifest = add_to_index(idx, [halves[1]], HashingEncoder(), progress=False)
    assert manifest["history"][-1]["sessions"] == 2
    assert_same_content(idx, both)


def test_readers_during_an_add_see_one_whole_generation(halves, tmp_path):
    idx = _fresh(halves, tmp_path)
    tests = str(Path(__file__).parents[1])
    code = ADD_WORKER.format(tests=tests, repo=str(Path(tests).parent), idx=str(idx),
                             corpus=str(halves[1]))
    child = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    encoder = HashingEncoder()
    seen = set()
    deadline = time.time() + 60
    while time.time() < deadline:
        done = child.poll() is not None
        ix = Index(idx)
        n = ix.n_sentences
        assert ix.faiss.ntotal == n and ix.doc_offsets[-1] == n
        last = ix.store.texts([n - 1])[0]
        np.testing.assert_allclose(ix.embeddings[n - 1], encoder.encode([last])[0], atol=1e-6)
        seen.add(n)
        if done:
            break
    assert child.wait() == 0, child.stderr.read()
    assert len(seen) == 2, f"expected the old and the new generation, saw row counts {seen}"


def test_cli_add(halves, tmp_path, monkeypatch):
    from click.testing import CliRunner

    import tapt.indexer.index as index_module
    from tapt.cli import cli

    idx = _fresh(halves, tmp_path)
    monkeypatch.setattr(index_module.Index, "load_encoder",
                        lambda self, model=None, device="auto", backend="auto": HashingEncoder())
    result = CliRunner().invoke(cli, ["-q", "index", "add", str(idx), str(halves[1])])
    assert result.exit_code == 0, result.output
    assert "added" in result.output and "duplicate documents skipped" in result.output
    result = CliRunner().invoke(cli, ["-q", "index", "info", str(idx), "--json"])
    assert json.loads(result.output)["generation"] == 2
    result = CliRunner().invoke(cli, ["-q", "index", "info", str(idx)])
    assert "generation 2" in result.output, result.output


def test_unicode_variants_of_indexed_documents_are_duplicates(tmp_path):
    """NFD vs NFC, zero-width characters and soft hyphens do not make a document new; the
    stored text stays exactly as the corpus gave it."""
    import unicodedata

    docs = ["Café crème au lait is served.", "Naïve résumé of the coöperation."]
    corpus = tmp_path / "a.jsonl"
    corpus.write_text("".join(json.dumps({"text": t, "doc": i}) + "\n"
                              for i, t in enumerate(docs)), encoding="utf-8")
    idx = tmp_path / "idx"
    build_index([corpus], idx, HashingEncoder(), _config())
    variants = [unicodedata.normalize("NFD", docs[0]),
                docs[1].replace("résumé", "ré\u200bsu\u00admé").replace(" of", "\ufeff of"),
                "Naïve résumé of a new document."]
    more = tmp_path / "b.jsonl"
    more.write_text("".join(json.dumps({"text": t, "doc": i}) + "\n"
                            for i, t in enumerate(variants)), encoding="utf-8")
    manifest = add_to_index(idx, [more], HashingEncoder(), progress=False)
    last = manifest["history"][-1]
    assert last["duplicate_documents_skipped"] == 2 and last["documents"] == 1
    ix = Index(idx)
    assert ix.store.texts(range(ix.n_sentences)) == docs + [variants[2]]
