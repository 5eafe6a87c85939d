"""A budget's cut kept while scores stream (`retriever.ranking.topcut`) equals the cut of the whole
ranking: for every budget unit, segment sizes, tie-heavy and non-finite scores, any blocking of
the rows and any split of them into ranges (serving actors) whose edges cut segments."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import HashingEncoder, make_sentence, write_split_corpus
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.index import Index
from tapt.retriever.methods import RankingInputs, get_method
from tapt.retriever.methods.base import by_sentence_scores
from tapt.retriever.ranking import topcut
from tapt.retriever.ranking.budget import budget_target, cut, parse_budget
from tapt.retriever.scoring import arrays
from tapt.retriever.selections.make import SelectConfig, rank

BUDGETS = ("0.1", "0.5", "1.0", "7", "40", "1", "25sent", "1sent", "300sent", "90tok", "900tok")


def _segments(rng, n_rows: int, longest: int) -> np.ndarray:
    lengths = rng.integers(1, longest + 1, size=n_rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return offsets[offsets <= n_rows] if offsets[-1] > n_rows else offsets


def _whole(scores, offsets, tokens, spec):
    lengths = np.diff(offsets)
    budget = parse_budget(spec)
    target = budget_target(budget, lengths, tokens)
    seg = arrays.segment_mean(scores, lengths)
    chosen = cut(arrays.rank(seg), budget, target, lengths, tokens)
    return chosen, seg[chosen], topcut.Cut.of(budget, target)


def _case(seed: int, longest: int, ties: bool, nonfinite: bool):
    rng = np.random.default_rng(seed)
    offsets = _segments(rng, 700, longest)
    n = int(offsets[-1])
    scores = rng.standard_normal(n).astype(np.float32)
    if ties:
        scores = (np.round(scores * 2) / 2).astype(np.float32)
    if nonfinite:
        scores[rng.choice(n, 9, replace=False)] = -np.inf
        scores[rng.choice(n, 5, replace=False)] = np.nan
    tokens = rng.integers(1, 30, size=len(offsets) - 1)
    return rng, offsets, scores, tokens


@pytest.mark.parametrize("longest", [1, 3, 12])
@pytest.mark.parametrize("ties,nonfinite", [(False, False), (True, False), (True, True)])
def test_streamed_cut_equals_the_cut_of_the_whole_ranking(longest, ties, nonfinite):
    rng, offsets, scores, tokens = _case(longest * 7 + ties + 2 * nonfinite, longest, ties,
                                         nonfinite)
    lengths = np.diff(offsets)
    for spec in BUDGETS:
        want_ids, want_scores, c = _whole(scores, offsets, tokens, spec)
        measure = c.measure(lengths, tokens)
        # one stream, fed in blocks of random sizes (some inside one segment)
        stream = topcut.SegmentStream(offsets, 0, measure, c)
        stream.top.batch = 16          # merges and drops happen many times
        bounds = np.unique(np.concatenate([[0, len(scores)],
                                           rng.integers(0, len(scores), size=40)]))
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            stream.feed(scores[lo:hi])
        got, pieces = stream.finish()
        assert pieces == []
        np.testing.assert_array_equal(got.ids, want_ids, err_msg=spec)
        np.testing.assert_array_equal(got.scores, want_scores, err_msg=spec)
        # ranges that cut segments (as serving actors hold them), their cuts merged
        edges = np.unique(np.concatenate([[0, len(scores)],
                                          rng.integers(1, len(scores), size=6)]))
        kept, all_pieces = topcut.Candidates.empty(), []
        for lo, hi in zip(edges[:-1], edges[1:]):
            first = int(np.searchsorted(offsets, lo, side="right")) - 1
            last = int(np.searchsorted(offsets, hi, side="left"))
            part, pieces = topcut.scan_cut(
                scores[lo:hi], lambda rows: rows, offsets[first:last + 1], first,
                None if measure is None else measure[first:last], c, start=int(lo), block=37)
            kept = topcut.merge(kept, part, c)
            all_pieces += pieces
        joined = topcut.join_pieces(all_pieces, offsets, measure)
        got = topcut.merge(kept, joined, c)
        np.testing.assert_array_equal(got.ids, want_ids, err_msg=spec)
        np.testing.assert_array_equal(got.scores, want_scores, err_msg=spec)


def test_a_cut_of_any_subset_holds_every_globally_cut_member_in_it():
    rng = np.random.default_rng(5)
    ids = np.arange(500)
    scores = (rng.integers(0, 6, size=500) / 3).astype(np.float32)
    measure = rng.integers(1, 9, size=500)
    c = topcut.Cut(300.0, "tokens")
    everything = topcut.Candidates(ids, scores, measure).cut(c)
    for _ in range(20):
        subset = np.sort(rng.choice(500, size=rng.integers(1, 500), replace=False))
        part = topcut.Candidates(ids[subset], scores[subset], measure[subset]).cut(c)
        assert set(np.intersect1d(everything.ids, subset)) <= set(part.ids)
    # merged in any grouping: the same cut
    top = topcut.TopCut(c, batch=7)
    for chunk in np.array_split(rng.permutation(500), 13):
        top.add(topcut.Candidates(ids[chunk], scores[chunk], measure[chunk]))
    got = top.result()
    np.testing.assert_array_equal(got.ids, everything.ids)
    assert c.filled(got.measure) and len(got) < 500


def test_pieces_that_do_not_cover_a_segment_are_refused():
    offsets = np.array([0, 4, 6])
    piece = topcut.Piece(0, 0, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="end at 3, not 4"):
        topcut.join_pieces([piece], offsets, None)
    with pytest.raises(ValueError, match="missing or scored twice"):
        topcut.join_pieces([piece, topcut.Piece(0, 2, np.zeros(2, np.float32))], offsets, None)


# ----------------------------------------------------------------------------- on an index


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    base = tmp_path_factory.mktemp("topcut")
    files = write_split_corpus(base, parts=3, docs_per_topic=8, seed=9)
    build_index(files, base / "idx", HashingEncoder(),
                BuildConfig(segment_size=3, split=False, progress=False, part_size=64, shards=2,
                            embedding_dtype="float16", codes="int8"))
    return Index(base / "idx")


@pytest.fixture(scope="module")
def task():
    import random

    rng = random.Random(3)
    texts = [make_sentence(rng, "legal") for _ in range(20)]
    return HashingEncoder().encode(texts), texts


def _full_path(index, config, embeddings):
    """Today's path: every sentence scored, then ranked and cut."""
    from tapt.retriever.methods import CorpusCache

    corpus = CorpusCache(index)
    view = corpus.view(config.segment_size, config.resolve_context(index, corpus).name)
    ctx = RankingInputs(index, view, config.parsed_budget, config.seed, embeddings, None, corpus)
    scores, info = config.spec.sentence_scores(ctx, config.params)
    return by_sentence_scores(view, scores, ctx.budget, dict(info), config.spec.threshold)


def _full_path_with_text(index, config, embeddings, texts):
    from tapt.retriever.methods import CorpusCache

    corpus = CorpusCache(index)
    view = corpus.view(config.segment_size, config.resolve_context(index, corpus).name)
    ctx = RankingInputs(index, view, config.parsed_budget, config.seed, embeddings, texts, corpus)
    scores, info = config.spec.sentence_scores(ctx, config.params)
    return by_sentence_scores(view, scores, ctx.budget, dict(info), config.spec.threshold)


@pytest.mark.parametrize("method,params", [("centroid", {}), ("distance", {}),
                                           ("density", {"m": 3}), ("classifier", {"rounds": 0}),
                                           ("moore-lewis", {}), ("fused", {}),
                                           ("fused", {"scan": "codes"})])
@pytest.mark.parametrize("size", [1, 3, 5])
def test_methods_stream_the_selection_of_the_whole_array_path(index, task, method, params, size,
                                                              monkeypatch):
    from tapt.retriever.methods import segments

    monkeypatch.setattr(segments, "STREAM_SHARE", 1.0)   # every budget of this small corpus
    embeddings, texts = task
    # row scorers stream their rows' scores; Moore-Lewis and fused their own parts
    streamer = "scan_cut" if method in ("centroid", "distance", "density", "classifier") \
        else "parts_cut"
    for spec in ("0.2", "9", "60sent", "700tok"):
        config = SelectConfig(method, spec, segment_size=size, seed=1, context="sentence",
                              **params)
        want = _full_path_with_text(index, config, embeddings, texts)
        calls = []
        real = getattr(topcut, streamer)
        monkeypatch.setattr(topcut, streamer, lambda *a, **k: calls.append(1) or real(*a, **k))
        got, _ = rank(index, config, embeddings, texts)
        monkeypatch.setattr(topcut, streamer, real)
        assert calls, "the budget's cut did not stream"
        np.testing.assert_array_equal(got.segments, want.segments, err_msg=spec)
        np.testing.assert_array_equal(got.scores, want.scores, err_msg=spec)
        np.testing.assert_array_equal(got.weights, want.weights)
        assert got.info == want.info


def test_tie_heavy_scores_stream_the_same_selection(index, task):
    """A scorer with a handful of distinct values: ties broken by segment id, as `rank`."""
    embeddings, _ = task
    method = get_method("centroid")
    query = arrays.centroid(embeddings)

    def coarse(rows):
        return np.round(arrays.centroid_scores(rows, query) * 4).astype(np.float32) / 4

    from tapt.retriever.methods import CorpusCache

    corpus = CorpusCache(index)
    for size in (1, 2, 4):
        view = corpus.view(size)
        for spec in ("0.3", "11", "45sent", "500tok"):
            budget = parse_budget(spec)
            ctx = RankingInputs(index, view, budget, 0, embeddings, None, corpus)
            target = budget_target(budget, view.lengths, view.tokens)
            got = method.budget_candidates(ctx, coarse, topcut.Cut.of(budget, target))
            want = by_sentence_scores(view, coarse(index.embeddings), budget, {})
            assert len(np.unique(want.scores)) < len(want.scores) // 2   # ties do matter
            np.testing.assert_array_equal(got.ids, want.segments, err_msg=spec)
            np.testing.assert_array_equal(got.scores, want.scores, err_msg=spec)


def test_methods_that_cannot_stream_keep_the_whole_array_path(index, task, monkeypatch):
    embeddings, texts = task
    called = []
    monkeypatch.setattr(topcut, "scan_cut", lambda *a, **k: called.append(a))
    monkeypatch.setattr(topcut, "parts_cut", lambda *a, **k: called.append(a))
    for method, spec, kw in (("moore-lewis", "0.5", {}), ("knn", "30sent", {}),
                             ("centroid", "0.5", {"context": "document"}),
                             ("classifier", None, {}), ("fused-learned", "30sent", {})):
        rank(index, SelectConfig(method, spec, **kw), embeddings, texts)
    assert called == []


@pytest.mark.parametrize("method,params", [("centroid", {}), ("moore-lewis", {}),
                                           ("fused", {}), ("classifier", {"rounds": 1})])
@pytest.mark.parametrize("size", [1, 3])
def test_document_context_streams_the_selection_of_the_whole_array_path(index, task, method,
                                                                        params, size,
                                                                        monkeypatch):
    """`context` document: the pooled scores stream into the budget's cut, block by block."""
    from tapt.retriever.methods import segments

    embeddings, texts = task
    for spec in ("0.2", "9", "60sent", "700tok"):
        config = SelectConfig(method, spec, segment_size=size, seed=1, context="document",
                              **params)
        monkeypatch.setattr(segments, "STREAM_SHARE", 0.0)     # never streams
        want, _ = rank(index, config, embeddings, texts)
        monkeypatch.setattr(segments, "STREAM_SHARE", 1.0)     # every budget streams
        calls = []
        real = topcut.parts_cut
        monkeypatch.setattr(topcut, "parts_cut", lambda *a, **k: calls.append(1) or real(*a, **k))
        got, _ = rank(index, config, embeddings, texts)
        monkeypatch.setattr(topcut, "parts_cut", real)
        assert calls, "the pooled cut did not stream"
        np.testing.assert_array_equal(got.segments, want.segments, err_msg=spec)
        np.testing.assert_array_equal(got.scores, want.scores, err_msg=spec)
        assert got.info == want.info


def test_parts_that_skip_or_repeat_rows_are_refused():
    offsets = np.array([0, 2, 5, 6])
    c = topcut.Cut(2, "segments")
    with pytest.raises(ValueError, match="follow row"):
        topcut.parts_cut([(0, np.ones(2)), (3, np.ones(3))], offsets, None, c)
    with pytest.raises(ValueError, match="end at row 5"):
        topcut.parts_cut([(0, np.ones(5))], offsets, None, c)
    got = topcut.parts_cut([(0, np.arange(4.0)), (4, np.array([9.0, 1.0]))], offsets, None, c)
    np.testing.assert_array_equal(got.ids, [1, 2])     # means 0.5, 2+3+9 / 3 = 4.67, 1


def test_segment_tokens_sum_shard_by_shard():
    from tapt.indexer.store.shards import RowView
    from tapt.retriever.methods.base import segment_tokens

    rng = np.random.default_rng(8)
    counts = [rng.integers(1, 50, size=n).astype(np.int32) for n in (7, 1, 12)]
    tokens = RowView(counts)
    whole = np.concatenate(counts).astype(np.int64)
    for offsets in ([0, 3, 7, 8, 10, 20], [0, 7, 8, 20], [0, 5, 9, 20], [0, 20]):
        offsets = np.array(offsets)
        np.testing.assert_array_equal(segment_tokens(tokens, offsets),
                                      np.add.reduceat(whole, offsets[:-1]))


def test_a_window_over_shards_is_a_view_not_a_copy():
    from tapt.indexer.store.shards import RowView

    parts = [np.arange(10 * k, 10 * k + 10, dtype=np.float32).reshape(5, 2) for k in range(3)]
    rows = RowView(parts)
    whole = np.concatenate(parts)
    for lo, hi in ((0, 15), (3, 12), (6, 9), (4, 100), (14, 15)):
        got = rows.window(lo, hi)
        np.testing.assert_array_equal(np.asarray(got), whole[lo:hi])
        if isinstance(got, RowView):
            assert got.n_parts > 1 and all(np.shares_memory(p, parts[i + lo // 5])
                                           for i, (_, p) in enumerate(got.parts()))
        else:
            assert np.shares_memory(got, parts[lo // 5])


def test_damaged_rows_are_named_by_their_global_row():
    from tapt.errors import IndexFormatError

    rng = np.random.default_rng(4)
    rows = rng.standard_normal((300, 8)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    rows[[150, 151, 153]] *= 3                      # not unit length: cosines beyond 1
    query = arrays.centroid(rows[:10])
    offsets = np.arange(0, 301, 3)
    with pytest.raises(IndexFormatError, match=r"row 150-151, 153 scores"):
        topcut.scan_cut(rows, lambda r: arrays.centroid_scores(r, query, chunk=16), offsets, 0,
                        None, topcut.Cut(5, "segments"), block=64)
    with pytest.raises(IndexFormatError, match=r"row 1150-1151, 1153 scores"):   # an actor's rows
        topcut.scan_cut(rows[:200], lambda r: arrays.centroid_scores(r, query, chunk=16),
                        offsets[:67] + 1000, 0, None, topcut.Cut(5, "segments"), start=1000,
                        block=64)


def test_float64_scores_stream_like_the_whole_array():
    rng, offsets, scores, tokens = _case(17, 6, False, False)
    scores = rng.standard_normal(len(scores))   # float64 values no float32 holds
    for spec in ("0.3", "50sent", "400tok"):
        want_ids, want_scores, c = _whole(scores, offsets, tokens, spec)
        stream = topcut.SegmentStream(offsets, 0, c.measure(np.diff(offsets), tokens), c)
        for lo in range(0, len(scores), 29):           # blocks end inside segments
            stream.feed(scores[lo:lo + 29])
        got, _ = stream.finish()
        np.testing.assert_array_equal(got.ids, want_ids, err_msg=spec)
        np.testing.assert_array_equal(got.scores, want_scores, err_msg=spec)


def test_only_a_budget_that_is_a_small_share_of_the_corpus_streams(index, task, monkeypatch):
    from tapt.retriever.methods import segments

    embeddings, texts = task
    calls = []
    real = topcut.scan_cut
    monkeypatch.setattr(topcut, "scan_cut", lambda *a, **k: calls.append(1) or real(*a, **k))
    n = index.n_sentences
    small, large = f"{int(n * segments.STREAM_SHARE)}sent", f"{int(n * segments.STREAM_SHARE) + 30}sent"
    for spec, streamed in ((small, True), (large, False), ("0.5", False)):
        calls.clear()
        config = SelectConfig("centroid", spec, seed=1, context="sentence")
        got, _ = rank(index, config, embeddings, texts)
        assert bool(calls) == streamed, spec
        want = _full_path(index, config, embeddings)
        np.testing.assert_array_equal(got.segments, want.segments)


@pytest.mark.parametrize("method", ["moore-lewis", "fused"])
def test_streamed_pre_rankings_are_the_prefix_of_the_full_ranking(index, task, method,
                                                                  monkeypatch):
    """iforest's candidates from Moore-Lewis or fused: a streamed cut of their parts."""
    from tapt.retriever.methods import CorpusCache, segments

    embeddings, texts = task
    spec = get_method(method)
    params = spec.make_params({})
    calls = []
    real = topcut.parts_cut
    monkeypatch.setattr(topcut, "parts_cut", lambda *a, **k: calls.append(1) or real(*a, **k))
    for size in (1, 3):
        corpus = CorpusCache(index)
        ctx = RankingInputs(index, corpus.view(size), parse_budget("30sent"), 1, embeddings, texts,
                      corpus)
        count = int(segments.STREAM_SHARE * len(ctx.view))
        got = spec.top_segments(ctx, params, count)
        want = spec.full_ranking(ctx, params).segments[:count]
        np.testing.assert_array_equal(got, want)
    assert calls


def test_a_threshold_ranks_only_the_segments_above_it():
    rng = np.random.default_rng(5)
    scores = np.round(rng.standard_normal(5000), 1).astype(np.float32)   # many ties
    scores[rng.choice(5000, 30, replace=False)] = np.nan
    scores[rng.choice(5000, 30, replace=False)] = -np.inf
    from tapt.retriever.methods import SegmentView

    ones = np.ones(5000, dtype=np.int32)
    view = SegmentView(np.arange(5001), ones, ones * 7)
    for threshold in (0.0, 1.3, -np.inf):
        got = by_sentence_scores(view, scores, None, {}, threshold)
        order = arrays.rank(scores)
        want = order[scores[order] > threshold]
        np.testing.assert_array_equal(got.segments, want)
        np.testing.assert_array_equal(got.scores, scores[want])
