import numpy as np
import pytest

from tapt.errors import BudgetError
from tapt.retriever.ranking.budget import Budget, budget_target, cut, parse_budget
from tapt.retriever.scoring import arrays


def unit(rows):
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_centroid_and_streaming_scores_match_direct_product():
    rng = np.random.default_rng(0)
    corpus = unit(rng.normal(size=(1000, 8)))
    task = unit(rng.normal(size=(20, 8)))
    c = arrays.centroid(task)
    assert np.isclose(np.linalg.norm(c), 1.0)
    expected = corpus @ (task.mean(0) / np.linalg.norm(task.mean(0)))
    np.testing.assert_allclose(arrays.centroid_scores(corpus, c, chunk=37), expected, atol=1e-6)


def test_max_similarity_is_exact():
    rng = np.random.default_rng(1)
    rows, task = unit(rng.normal(size=(50, 6))), unit(rng.normal(size=(7, 6)))
    np.testing.assert_allclose(arrays.max_similarity(rows, task, chunk=8),
                               (rows @ task.T).max(1), atol=1e-6)


def test_knn_union_keeps_best_similarity_and_drops_missing():
    ids = np.array([[3, 1, -1], [1, 5, 3]])
    dist = np.array([[0.9, 0.5, -1.0], [0.7, 0.6, 0.2]], dtype=np.float32)
    union, best = arrays.knn_union(dist, ids)
    assert union.tolist() == [1, 3, 5]
    np.testing.assert_allclose(best, [0.7, 0.9, 0.6])


def test_segment_helpers():
    offsets = np.array([0, 2, 3, 7])
    assert arrays.segment_of_rows(offsets, np.array([0, 1, 2, 6])).tolist() == [0, 0, 1, 2]
    assert arrays.rows_of_segments(offsets, np.array([2, 0])).tolist() == [3, 4, 5, 6, 0, 1]
    np.testing.assert_allclose(arrays.segment_mean(np.arange(7.0), np.diff(offsets)),
                               [0.5, 2.0, 4.5])


def test_rank_breaks_ties_by_index():
    assert arrays.rank(np.array([0.1, 0.5, 0.5, -1.0])).tolist() == [1, 2, 0, 3]


def test_segment_mean_of_one_sentence_segments_is_the_reduceat_result():
    rng = np.random.default_rng(2)
    for values in (rng.standard_normal(999).astype(np.float32), rng.standard_normal(999)):
        ones = np.ones(len(values), dtype=np.int64)
        by_runs = (np.add.reduceat(values.astype(np.float64), np.arange(len(values)))
                   / ones).astype(np.float32)
        got = arrays.segment_mean(values, ones)
        assert got.dtype == np.float32 and got is not values
        np.testing.assert_array_equal(got, by_runs)


@pytest.mark.parametrize("dtype", [np.float16, np.int8])
def test_a_threaded_scan_gives_the_scores_of_one_thread(dtype):
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((20_000, 48)).astype(np.float32)
    rows = (rows / np.abs(rows).max() * 100).astype(dtype) if dtype == np.int8 else \
        rows.astype(dtype)
    q = rng.standard_normal(48).astype(np.float32)
    one, four = np.empty(len(rows), np.float32), np.empty(len(rows), np.float32)
    assert arrays._cast_scores(rows, q, one, rows=512, threads=1)
    assert arrays._cast_scores(rows, q, four, rows=512, threads=4)
    np.testing.assert_array_equal(one, four)
    np.testing.assert_allclose(one, rows.astype(np.float32) @ q, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_linear_scores_are_the_product_plus_bias(dtype):
    rng = np.random.default_rng(4)
    rows = rng.standard_normal((5000, 32)).astype(dtype)
    w = rng.standard_normal(32)
    got = arrays.linear_scores(rows, w, bias=-1.5, chunk=1000)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, rows.astype(np.float64) @ w - 1.5, rtol=1e-5, atol=1e-4)


def _lexsort_rank(scores):
    return np.lexsort((np.arange(len(scores)), -np.asarray(scores, dtype=np.float64)))


@pytest.mark.parametrize("kind", ["normal", "ties", "specials", "nan", "float64", "float64-exact",
                                  "int", "big-int", "float16"])
def test_rank_equals_the_two_key_sort_for_every_kind_of_score(kind):
    """The packed-key sort and its fallback give exactly the (descending score, ascending
    index) order: ties, -0.0 == 0.0, infinities, NaN last, values float32 cannot hold."""
    rng = np.random.default_rng(1)
    for n in (0, 1, 2, 7, 1000, 50_000):
        s = rng.standard_normal(n).astype(np.float32)
        if kind == "ties":
            s = rng.integers(-3, 4, n).astype(np.float32)
        elif kind == "specials" and n:
            s[rng.integers(0, n, 6)] = rng.choice(
                np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45], dtype=np.float32), 6)
        elif kind == "nan" and n:
            s[rng.integers(0, n, 3)] = np.nan
        elif kind == "float64":
            s = rng.standard_normal(n) * (1 + 1e-12)
        elif kind == "float64-exact":
            s = s.astype(np.float64)
        elif kind == "int":
            s = rng.integers(-5, 5, n)
        elif kind == "big-int":
            s = rng.integers(2**40, 2**40 + 4, n)
        elif kind == "float16":
            s = s.astype(np.float16)
        before = s.copy()
        got = arrays.rank(s)
        assert got.dtype == np.int64
        want = _lexsort_rank(s)
        np.testing.assert_array_equal(got, want)
        positions = rng.integers(0, n, 40) if n else np.empty(0, np.int64)
        at = arrays.rows_at_ranks(s, positions)
        assert at.dtype == np.int64
        np.testing.assert_array_equal(at, want[positions])
        np.testing.assert_array_equal(s, before)   # the caller's scores are not written


def test_ranking_keys_get_their_index_block_by_block(monkeypatch):
    monkeypatch.setattr(arrays, "KEY_BLOCK", 7)
    s = np.random.default_rng(2).integers(-2, 3, 100).astype(np.float32)   # ties everywhere
    np.testing.assert_array_equal(arrays.rank(s), _lexsort_rank(s))
    np.testing.assert_array_equal(arrays.rows_at_ranks(s, [0, 50, 99, 7]),
                                  _lexsort_rank(s)[[0, 50, 99, 7]])


def test_lambda_weights_follow_the_formula():
    anomaly = np.array([1.0, 2.0, 3.0, 10.0])
    z = (anomaly - anomaly.mean()) / anomaly.std()
    expected = 1 / (1 + np.exp(-4.0 * (0.5 - z)))
    np.testing.assert_allclose(arrays.lambda_weights(anomaly, C=4.0, alpha=0.5), expected,
                               rtol=1e-6)
    w = arrays.lambda_weights(anomaly, 4.0, 0.0)
    assert (np.diff(w) < 0).all() and ((w > 0) & (w < 1)).all()
    np.testing.assert_allclose(arrays.lambda_weights(np.ones(3), 4.0, 0.0), [0.5] * 3)
    steep = arrays.lambda_weights(np.array([0.0] * 50 + [100.0]), C=40.0, alpha=0.0)
    assert steep[-1] > 0 and steep[0] > 0.99         # the sigmoid underflows: kept above 0


def test_small_weights_stay_positive_in_selection_files():
    from tapt.retriever.selections.file_format import SelectedSegment

    seg = SelectedSegment(id=3, rank=0, score=0.5, weight=3.2e-9, method="iforest", doc=0,
                          rows=(3, 4), text="x", sentences=["x"])
    assert seg.to_dict()["weight"] == 3.2e-9 and seg.to_dict()["score"] == 0.5


def test_budget_cut_in_every_unit():
    lengths = np.array([5, 1, 3, 2])
    tokens = np.array([50, 10, 30, 20])
    order = np.array([2, 0, 3, 1])
    assert cut(order, parse_budget("2"), 2, lengths, tokens).tolist() == [2, 0]
    assert cut(order, parse_budget("0.5"), budget_target(parse_budget("0.5"), lengths, tokens),
               lengths, tokens).tolist() == [2, 0]
    # 3 sentences are reached exactly by the first segment; 4 needs the second (overshoot 4)
    assert cut(order, parse_budget("3sent"), 3, lengths, tokens).tolist() == [2]
    assert cut(order, parse_budget("4sent"), 4, lengths, tokens).tolist() == [2, 0]
    assert cut(order, parse_budget("85tok"), 85, lengths, tokens).tolist() == [2, 0, 3]
    assert cut(order, parse_budget("1000tok"), 1000, lengths, tokens).tolist() == [2, 0, 3, 1]


@pytest.mark.parametrize("spec,unit,value", [
    ("0.2", "fraction", 0.2), ("1.0", "fraction", 1.0), ("5000", "segments", 5000),
    ("12seg", "segments", 12), ("20000sent", "sentences", 20000), ("2Mtok", "tokens", 2e6),
    ("500ktok", "tokens", 5e5),
])
def test_parse_budget(spec, unit, value):
    assert parse_budget(spec) == Budget(spec, unit, value)


@pytest.mark.parametrize("spec", ["0", "0.0", "-1", "nan", "inf", "1.5", "abc", "2.5seg", ""])
def test_bad_budgets_are_refused(spec):
    with pytest.raises(BudgetError):
        parse_budget(spec)


def test_budget_larger_than_corpus():
    with pytest.raises(BudgetError, match="larger than the corpus"):
        budget_target(parse_budget("5"), np.ones(4), np.ones(4))
    with pytest.raises(BudgetError, match="larger than the corpus"):
        budget_target(parse_budget("10sent"), np.ones(4), np.ones(4))


def test_a_budget_ranks_only_the_prefix_it_cuts_with_the_full_ranking_s_order():
    """`budget_order` (partition, then sort of the prefix) cuts exactly what a sort of every
    score cuts: ties by ascending segment, NaN last, for every budget unit."""
    from tapt.retriever.methods.base import SegmentView, budget_order
    from tapt.retriever.ranking.budget import budget_target, cut, parse_budget

    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(10, 300))
        s = (rng.integers(0, 5, n) if trial % 2 else rng.standard_normal(n)).astype(np.float32)
        if trial % 5 == 0:
            s[rng.integers(0, n, 3)] = np.nan
        lengths = rng.integers(1, 6, n)
        tokens = lengths * rng.integers(5, 30, n)
        view = SegmentView(np.concatenate([[0], np.cumsum(lengths)]), lengths, tokens)
        full = arrays.rank(s)
        for spec in ("0.1", "0.5", "3", f"{max(1, int(lengths.sum() * 0.3))}sent",
                     f"{max(1, int(tokens.sum() * 0.2))}tok"):
            budget = parse_budget(spec)
            target = budget_target(budget, lengths, tokens)
            assert np.array_equal(cut(budget_order(view, s, budget), budget, target, lengths,
                                      tokens), cut(full, budget, target, lengths, tokens))
        k = int(rng.integers(1, n + 1))
        top = arrays.rank_top(s, k)
        assert len(top) >= k and np.array_equal(top, full[:len(top)])


@pytest.mark.parametrize("n,start,wanted", [(100, 33, 20), (60_000, 20_000, 300),
                                            (60_000, 20_000, 39_000), (30_000, 29_999, 5),
                                            (50, 0, 50)])
def test_sampling_below_a_rank_draws_what_choice_draws_from_the_ranking(n, start, wanted):
    """`pu._sample_ranks` = `rng.choice(rank(scores)[start:], ...)`, sorted, draw for draw:
    both of numpy's algorithms (a set for few draws from many, a permutation otherwise)."""
    from tapt.retriever.learned.pu import _sample_ranks

    scores = np.random.default_rng(3).integers(-50, 50, n).astype(np.float32)   # many ties
    size = min(n - start, wanted)
    rng_old, rng_new = np.random.default_rng(5), np.random.default_rng(5)
    old = np.sort(rng_old.choice(arrays.rank(scores)[start:], size=size, replace=False))
    new = _sample_ranks(rng_new, scores, start, wanted, 10**9)
    np.testing.assert_array_equal(new, old)
    assert rng_new.random() == rng_old.random()     # the generator moved on alike
    assert len(new) == size and len(np.unique(new)) == size


def _reference_zscore(values):
    values = np.asarray(values, dtype=np.float64)
    std = values.std()
    return np.zeros_like(values) if std == 0 else (values - values.mean()) / std


def _reference_fuse(*scores):
    total = np.zeros(len(scores[0]), dtype=np.float64)
    for values in scores:
        values = np.asarray(values, dtype=np.float64)
        finite = np.isfinite(values)
        if not finite.all():
            values = np.where(finite, values, values[finite].min() if finite.any() else 0.0)
        total += _reference_zscore(values)
    return total


@pytest.mark.parametrize("leaf", [64, 1000, 1 << 20])
def test_blockwise_moments_and_zscores_equal_numpy_bit_for_bit(monkeypatch, leaf):
    """numpy's pairwise summation is followed exactly across blocks: the same mean, spread,
    z-scores and fused scores as one float64 copy of the whole array, at any block size."""
    from tapt.retriever.scoring import moments as score_moments

    monkeypatch.setattr(score_moments, "MOMENT_LEAF", leaf)
    rng = np.random.default_rng(7)
    for n in (1, 7, 129, 5003, 100_001):
        for dtype in (np.float32, np.float64):
            a = (rng.standard_normal(n) * 10 ** rng.uniform(-2, 2)).astype(dtype)
            b = rng.standard_normal(n).astype(np.float32)
            if n > 10:
                b[::97], b[5] = -np.inf, np.nan
            for x in (a, np.round(a, 1)):
                as64 = x.astype(np.float64)
                assert arrays.moments(x) == (float(as64.mean()), float(as64.std()))
                np.testing.assert_array_equal(arrays.zscore(x), _reference_zscore(x))
                np.testing.assert_array_equal(arrays.fuse_zscores(x, b), _reference_fuse(x, b))
    flat = np.full(50, 2.5, dtype=np.float32)
    np.testing.assert_array_equal(arrays.zscore(flat), np.zeros(50))
    np.testing.assert_array_equal(arrays.fuse_zscores(np.full(9, np.inf)), np.zeros(9))


def test_rank_top_is_a_prefix_of_rank_with_ties_and_nans():
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64, np.int64):
        x = np.round(rng.standard_normal(4001) * 3).astype(dtype)
        for k in (1, 2, 100, 4000):
            top, full = arrays.rank_top(x, k), arrays.rank(x)
            assert len(top) >= k and np.array_equal(top, full[:len(top)])
    x = rng.standard_normal(1000)
    x[::7] = np.nan
    for k in (1, 500, 900, 999):
        top = arrays.rank_top(x, k)
        assert np.array_equal(top, arrays.rank(x)[:len(top)]) and len(top) >= k
