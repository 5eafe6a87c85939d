"""The FAISS parts searched one at a time (`PartByPart`, what a local `Index.search` runs) give
`ShardedFaiss`'s results bit for bit, holding one part at a time."""

from __future__ import annotations

import numpy as np
import pytest


def _parts(factory: str, quantizers: int = 1):
    import faiss

    rng = np.random.default_rng(7)
    data = rng.standard_normal((3000, 32)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    templates = []
    for q in range(quantizers):
        template = faiss.index_factory(32, factory, faiss.METRIC_INNER_PRODUCT)
        if not template.is_trained:
            template.train(data[q * 500:q * 500 + 2000])
        templates.append(template)
    parts = []
    for i, start in enumerate(range(0, 3000, 1000)):
        part = faiss.clone_index(templates[min(i, quantizers - 1)])
        part.add_with_ids(data[start:start + 1000], np.arange(start, start + 1000)) \
            if "HNSW" not in factory and factory != "Flat" else part.add(data[start:start + 1000])
        parts.append(part)
    return parts, rng.standard_normal((40, 32)).astype(np.float32)


@pytest.mark.parametrize("factory,quantizers,global_ids", [
    ("IVF16,Flat", 1, True), ("IVF16,PQ8x4fs", 1, True), ("IVF16,SQ8", 1, True),
    ("IVF16,Flat", 2, True), ("Flat", 1, False), ("HNSW8", 1, False)])
def test_one_part_at_a_time_gives_the_sharded_results(factory, quantizers, global_ids):
    from tapt.indexer.ann.faiss_index import PartByPart, ShardedFaiss, set_search_param

    parts, queries = _parts(factory, quantizers)
    offsets = [0, 1000, 2000]
    whole = ShardedFaiss(parts, offsets, global_ids)
    loaded: list[int] = []

    def load(i):
        loaded.append(i)
        return parts[i]

    one = PartByPart(load, offsets, global_ids)
    name = "nprobe" if "IVF" in factory else "efSearch" if "HNSW" in factory else None
    if name:
        set_search_param(whole, name, 4 if name == "nprobe" else 16)
        set_search_param(one, name, 4 if name == "nprobe" else 16)
        assert one._params == {name: 4 if name == "nprobe" else 16}
    want, got = whole.search(queries, 25), one.search(queries, 25)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])
    # every part loaded once; where part 1 has another quantizer, 0 and 1 again (each its own)
    assert sorted(set(loaded)) == [0, 1, 2]
    assert len(loaded) == (5 if quantizers > 1 else 3)
    assert whole.shares_quantizer() == (quantizers == 1 and "IVF" in factory)


def test_local_search_loads_one_part_at_a_time(tmp_path, encoder, monkeypatch):
    """A local index's `search` never holds two FAISS parts: each is released before the next
    is loaded, and the results equal those of the index's `faiss` (every part held)."""
    import gc
    import weakref

    from conftest import write_split_corpus
    from tapt.indexer.building.pipeline import BuildConfig, build_index
    from tapt.indexer.index import Index

    (tmp_path / "corpus").mkdir()
    files = write_split_corpus(tmp_path / "corpus", parts=3, docs_per_topic=6)
    build_index(files, tmp_path / "idx", encoder,
                BuildConfig(split=False, progress=False, shards=3))
    index = Index(tmp_path / "idx")
    live: list[weakref.ref] = []
    most = [0]
    load = index.faiss_part

    def counting(i):
        gc.collect()
        alive = sum(ref() is not None for ref in live)
        most[0] = max(most[0], alive + 1)
        part = load(i)
        live.append(weakref.ref(part))
        return part

    monkeypatch.setattr(index, "faiss_part", counting)
    queries = np.asarray(index.embeddings[:7], dtype=np.float32)
    got = index.search(queries, 5)
    assert "faiss" not in index.__dict__ and len(live) == 3 and most[0] == 1
    want = Index(tmp_path / "idx")
    want.faiss                                  # noqa: B018 - every part held
    expected = want.search(queries, 5)
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_array_equal(got[0], expected[0])
