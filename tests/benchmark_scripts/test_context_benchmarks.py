"""benchmarks/mixed_documents.py and benchmarks/neighbour_context.py: their poolings on
synthetic scores (the runs themselves need the labelled pool's index)."""

from __future__ import annotations

import numpy as np

from benchmarks.mixed_documents import mixed_scores
from benchmarks.neighbour_context import neighbour_scores, other_documents


def test_mixed_documents_pool_in_row_order_and_only_past_the_test():
    rng = np.random.default_rng(3)
    effects = rng.normal(size=500)
    s = np.repeat(effects, 4) + 0.3 * rng.normal(size=2000)
    offsets = np.arange(0, 2000, 4)
    identity = np.arange(2000)
    pooled, est = mixed_scores(s, identity, offsets)          # the real documents: pooled
    assert est["pooled"] and np.array_equal(np.argsort(-pooled[::4]), np.argsort(-pooled[1::4]))
    perm = rng.permutation(2000)
    mixed, est = mixed_scores(s, perm, offsets)               # random documents: untouched
    assert not est["pooled"] and np.array_equal(mixed, s)
    # the same permutation's documents, pooled: every row of one random document gets one score
    forced, _ = mixed_scores(s[perm.argsort()], perm, offsets)
    assert np.allclose(forced[perm[:4]], forced[perm[0]], atol=1e-6)


def test_neighbour_pooling_and_other_document_neighbours():
    s = np.array([5.0, 4.0, 0.0, 0.1, 0.2, -0.1])
    nbrs = np.array([[1, 2], [0, 2], [3, 4], [2, 4], [3, 2], [4, 3]], dtype=np.int32)
    pooled, est = neighbour_scores(np.tile(s, 50), np.concatenate(
        [nbrs + 6 * i for i in range(50)]), 2)
    assert est["pooled"] and pooled[0] > pooled[1] > pooled[2]
    # rows 0-2 one document, 3-5 another: neighbours from the own document are skipped
    other = other_documents(nbrs, np.array([0, 3, 6]), 2)
    assert other[0].tolist() == [0, 0]                         # none found: the row itself
    assert other[2].tolist() == [3, 4] and other[3].tolist() == [2, 3]
