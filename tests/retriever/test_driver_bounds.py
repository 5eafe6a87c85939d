"""What the driver holds of a local index does not grow with its rows beyond the segment view:
segment offsets cut shard by shard (no global copy of the document offsets), lengths without an
int64 copy, and iforest's candidates refused above their memory limit."""

from __future__ import annotations

import numpy as np
import pytest

from tapt.errors import InputError


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    from conftest import HashingEncoder, write_split_corpus
    from tapt.indexer.building.pipeline import BuildConfig, build_index
    from tapt.indexer.index import Index

    base = tmp_path_factory.mktemp("bounds")
    files = write_split_corpus(base, parts=3, docs_per_topic=5, seed=3)
    build_index(files, base / "idx", HashingEncoder(),
                BuildConfig(split=False, progress=False, shards=3, segment_size=4))
    index = Index(base / "idx")
    assert len(index.shards) == 3
    return index


@pytest.mark.parametrize("size", [1, 3, 4, 7, 1000])
def test_segments_cut_shard_by_shard_equal_the_global_cut(sharded, size):
    from tapt.indexer.reading.splitter import docs_of_rows, segment_offsets
    from tapt.retriever.methods.segments import segment_lengths

    got = sharded.segments(size)
    assert "doc_offsets" not in sharded.__dict__          # never built for the cut
    want = segment_offsets(sharded.doc_offsets, size)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    lengths = segment_lengths(got, block=5)
    assert lengths.dtype == np.int32
    np.testing.assert_array_equal(lengths, np.diff(want))
    rows = np.arange(sharded.n_sentences)
    np.testing.assert_array_equal(sharded.docs_of_rows(rows[::-1]),
                                  docs_of_rows(sharded.doc_offsets, rows[::-1]))
    del sharded.__dict__["doc_offsets"]


def test_shard_document_offsets_are_mapped_not_copied(sharded):
    for shard in sharded.shards:
        assert isinstance(shard.docs, np.memmap)


def test_iforest_refuses_candidates_over_the_memory_limit(sharded, monkeypatch):
    from tapt.retriever.methods import RankingInputs, SegmentView, get_method, iforest
    from tapt.retriever.ranking.budget import parse_budget

    task = np.asarray(sharded.embeddings[:6], dtype=np.float32)
    method = get_method("iforest")
    ctx = RankingInputs(sharded, SegmentView.of(sharded, 1), parse_budget("5sent"), 0, task)
    params = method.make_params({})
    chosen = method.rank(ctx, params)                   # 50 candidate rows: well within
    assert len(chosen.segments) == 5 and chosen.info["candidate_segments"] == 50, chosen.info
    monkeypatch.setattr(iforest, "CANDIDATE_MEMORY", 49 * sharded.dim * 4)
    with pytest.raises(InputError) as err:
        method.rank(ctx, params)
    assert err.value.param == "candidates" and "50 candidate sentences" in str(err.value)
    monkeypatch.setattr(iforest, "CANDIDATE_MEMORY", 50 * sharded.dim * 4)
    again = method.rank(ctx, params)
    np.testing.assert_array_equal(again.segments, chosen.segments)
