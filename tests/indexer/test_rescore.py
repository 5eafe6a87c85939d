"""`indexer.rescore.exact_topk`: the exact top k of approximate candidates."""

import numpy as np
import pytest

from tapt.errors import IndexFormatError
from tapt.indexer.ann import rescore
from tapt.indexer.ann.rescore import exact_topk


def reference(embeddings, queries, candidates, k):
    """Every candidate's own float32 dot product, ranked by (similarity desc, id asc)."""
    valid = candidates >= 0
    rows = embeddings[np.where(valid, candidates, 0)].astype(np.float32)
    sims = np.einsum("ckd,cd->ck", rows, queries.astype(np.float32))
    sims[~valid] = -np.inf
    order = np.lexsort((np.where(valid, candidates, np.iinfo(np.int64).max), -sims),
                       axis=-1)[:, :k]
    top_sims = np.take_along_axis(sims, order, axis=1)
    top_ids = np.take_along_axis(candidates, order, axis=1)
    top_ids[~np.isfinite(top_sims)] = -1
    return top_sims, top_ids


def unit(rng, n, dim, dtype=np.float32):
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_equals_per_pair_dot_products_whatever_the_blocks(monkeypatch, dtype):
    """Near-duplicate rows (similarities a few ulps apart) and shared, missing and repeated
    candidates: the same values and order as each pair's own dot product, for blocks of one
    query, a few, and all of them."""
    rng = np.random.default_rng(3)
    base = unit(rng, 60, 48)
    rows = np.concatenate([base, base + 1e-4 * unit(rng, 60, 48)])  # near ties
    embeddings = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(dtype)
    queries = unit(rng, 37, 48)
    candidates = rng.integers(0, len(embeddings), (37, 40))
    candidates[rng.random(candidates.shape) < 0.15] = -1
    candidates[5] = -1                                    # a query without candidates
    candidates[6, :3] = [7, 7, 67]                         # a repeated id, its near twin
    want = reference(embeddings, queries, candidates, 10)
    for budget in (1, 40 * 48 * 4 * 3, 1 << 30):
        monkeypatch.setattr(rescore, "_GATHER_BYTES", budget)
        got = exact_topk(embeddings, queries, candidates, 10)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


def test_a_query_ranks_the_same_alone_and_among_others():
    rng = np.random.default_rng(4)
    embeddings = unit(rng, 500, 32)
    queries = unit(rng, 50, 32)
    candidates = rng.integers(0, 500, (50, 30))
    together = exact_topk(embeddings, queries, candidates, 8)
    for q in (0, 17, 49):
        alone = exact_topk(embeddings, queries[q:q + 1], candidates[q:q + 1], 8)
        np.testing.assert_array_equal(alone[0][0], together[0][q])
        np.testing.assert_array_equal(alone[1][0], together[1][q])


def test_fewer_candidates_than_k_are_padded():
    rng = np.random.default_rng(5)
    embeddings = unit(rng, 20, 8)
    candidates = np.array([[3, -1, 4, -1], [-1, -1, -1, -1]])
    sims, ids = exact_topk(embeddings, unit(rng, 2, 8), candidates, 4)
    assert sorted(ids[0, :2]) == [3, 4] and (ids[0, 2:] == -1).all() and (ids[1] == -1).all()
    assert np.isneginf(sims[0, 2:]).all() and np.isneginf(sims[1]).all()


def test_a_damaged_row_among_the_candidates_fails():
    rng = np.random.default_rng(6)
    embeddings = unit(rng, 50, 8)
    embeddings[9] *= 3
    with pytest.raises(IndexFormatError, match="row 9"):
        exact_topk(embeddings, unit(rng, 3, 8), np.array([[1, 2, 9]] * 3), 2, label="idx")


def test_the_cut_through_exactly_tied_rows_takes_the_lowest_ids():
    """Identical rows under many ids, the cut falling inside their group: a matrix product
    rounds copies by their place in the block, the pairs' own dot products do not."""
    rng = np.random.default_rng(7)
    distinct = unit(rng, 12, 384)
    embeddings = distinct[rng.integers(0, 12, 3000)]
    queries = unit(rng, 24, 384)
    candidates = np.stack([rng.permutation(3000)[:300] for _ in range(24)])
    for k in (5, 40, 90):
        want = reference(embeddings, queries, candidates, k)
        got = exact_topk(embeddings, queries, candidates, k)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


def test_candidate_sims_are_every_candidates_similarity(monkeypatch):
    """`candidate_sims`: each valid candidate's similarity (within float32 rounding of its own
    dot product), -inf where there is none, in the caller's query order whatever the blocks."""
    rng = np.random.default_rng(5)
    embeddings = unit(rng, 90, 32)
    queries = unit(rng, 21, 32)
    candidates = rng.integers(0, 90, (21, 12))
    candidates[rng.random(candidates.shape) < 0.2] = -1
    candidates[4] = -1
    valid = candidates >= 0
    want = np.einsum("ckd,cd->ck", embeddings[np.where(valid, candidates, 0)], queries)
    for budget in (1, 1 << 30):                       # blocks of one query, or all of them
        monkeypatch.setattr(rescore, "_GATHER_BYTES", budget)
        got = np.full(candidates.shape, 7.0, dtype=np.float32)
        sims, ids = exact_topk(embeddings, queries, candidates, 5, candidate_sims=got)
        np.testing.assert_allclose(got[valid], want[valid], atol=1e-5)
        assert np.all(got[~valid] == -np.inf)
        np.testing.assert_array_equal(ids, reference(embeddings, queries, candidates, 5)[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_exact_of_gives_every_candidate_its_own_dot_product(monkeypatch, dtype):
    """What a shard or an actor sends back for the driver to rank: each candidate's exact
    similarity in place (-inf for none), equal to `exact_topk`'s value of it, with global ids
    counted from an offset; the top k of those is `exact_topk`'s answer."""
    from tapt.indexer.ann.rescore import exact_of, exact_top

    rng = np.random.default_rng(5)
    embeddings = unit(rng, 90, 32, dtype)
    queries = unit(rng, 21, 32)
    candidates = rng.integers(0, 90, (21, 30))
    candidates[rng.random(candidates.shape) < 0.2] = -1
    candidates[4] = -1
    valid = candidates >= 0
    rows = embeddings[np.where(valid, candidates, 0)].astype(np.float32)
    want = np.where(valid, np.einsum("ckd,cd->ck", rows, queries), -np.inf)
    for budget in (1, 1 << 30):
        monkeypatch.setattr(rescore, "_GATHER_BYTES", budget)
        got = exact_of(embeddings, queries, np.where(valid, candidates + 1000, -1), offset=1000)
        np.testing.assert_array_equal(got, want.astype(np.float32))
    sims, ids = exact_top((np.where(valid, candidates, -1), want.astype(np.float32), got), 10)
    top = exact_topk(embeddings, queries, candidates, 10)
    np.testing.assert_array_equal(ids, top[1])
    np.testing.assert_array_equal(sims, top[0])


def test_candidates_merged_as_they_come_are_the_best_of_all_at_once():
    """Parts' candidates (distinct ids, tied approximate similarities, padding) merged two at a
    time by their packed keys keep what one ranking of all of them keeps."""
    from tapt.indexer.ann.rescore import best_of, merge_candidates

    rng = np.random.default_rng(9)
    ids = np.stack([rng.permutation(5000)[:600] for _ in range(40)])
    parts = []
    for p in range(3):
        i = ids[:, p * 200:(p + 1) * 200].copy()
        a = np.round(rng.random(i.shape), 2).astype(np.float32)      # many ties
        e = rng.random(i.shape).astype(np.float32)
        i[7, 50:], a[7, 50:], e[7, 50:] = -1, -np.inf, -np.inf         # a short part
        parts.append((i, a, e))
    whole = best_of(tuple(np.concatenate(x, axis=1) for x in zip(*parts)), 150, 1)
    merged = best_of(merge_candidates(parts, 150), 150, 1)
    for got, want in zip(merged, whole):
        np.testing.assert_array_equal(got, want)
