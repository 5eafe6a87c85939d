"""Merging the top-k results of several FAISS parts (or serving actors) into one: best first,
ties by ascending id, whatever the number of parts."""

from __future__ import annotations

from typing import Iterable

import numpy as np

from tapt.util.ordering import descending_bits, descending_values

MERGE_GROUP = 16   # parts' results merged at a time: memory bounded whatever the shard count


def merge_in_groups(results: Iterable[tuple[np.ndarray, np.ndarray]], k: int,
                    group: int = MERGE_GROUP) -> tuple[np.ndarray, np.ndarray]:
    """`merge_topk` of results that arrive one part at a time, `group` parts merged at once:
    the same answer (the best k of a union are among the best k of its groups), holding
    `group` x k results per query instead of one per part's result."""
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    for result in results:
        pending.append(result)
        if len(pending) >= group:
            pending = [merge_topk(pending, k)]
    if not pending:
        raise ValueError("merge_in_groups needs at least one part's results")
    return merge_topk(pending, k)


def merge_topk(results: list[tuple[np.ndarray, np.ndarray]], k: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The best `k` per query of several parts' results, best first, ties by ascending id
    (-inf / -1 where a query has fewer than `k`).

    Each result is one 64-bit key, the similarity's order-preserving bits above the id's
    offset from the smallest id: the keys are partitioned in place and the best `k` sorted
    (the two-key sort of every part's results was most of a 10-shard search). NaN, float64
    similarities and ids spread over 2^32 or more take the two-key sort."""
    if not results:
        raise ValueError("merge_topk needs at least one part's results")
    n = len(results[0][1])
    widths = [r[1].shape[1] for r in results]
    width = sum(widths)
    k = max(0, min(int(k), width))
    top_id = np.iinfo(np.int64).max
    lowest = min((int(np.min(r[1], initial=top_id, where=r[1] >= 0)) for r in results),
                 default=top_id)
    lowest = 0 if lowest == top_id else lowest
    highest = max((int(np.max(r[1], initial=0)) for r in results), default=0)
    if (width == 0 or n == 0 or highest - lowest >= 0xFFFFFFFF
            or any(r[0].dtype != np.float32 or np.isnan(r[0]).any() for r in results)):
        return _merge_lexsort(results, k)
    none = np.uint64(0xFFFFFFFFFFFFFFFF)     # after every real key: no id
    key = np.empty((n, width), dtype=np.uint64)
    start = 0
    for sims, ids in results:
        block = key[:, start:start + ids.shape[1]]
        block[:] = descending_bits(sims)
        block <<= np.uint64(32)
        block |= (ids - lowest).astype(np.uint64) & np.uint64(0xFFFFFFFF)
        block[ids < 0] = none
        start += ids.shape[1]
    if k < width:
        key.partition(max(k - 1, 0), axis=1)
    top = np.sort(key[:, :k], axis=1)
    missing = top == none
    ids = (top & np.uint64(0xFFFFFFFF)).astype(np.int64) + lowest
    ids[missing] = -1
    sims = descending_values((top >> np.uint64(32)).astype(np.uint32))
    sims[missing] = -np.inf
    return sims, ids


def _merge_lexsort(results: list[tuple[np.ndarray, np.ndarray]], k: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """`merge_topk` by a partition and a two-key sort (any dtype, NaN last, any ties)."""
    if len(results) == 1 and results[0][1].shape[1] <= k:
        sims, ids = results[0]
    else:
        sims = np.concatenate([r[0] for r in results], axis=1)
        ids = np.concatenate([r[1] for r in results], axis=1)
    valid = ids >= 0
    id_key = np.where(valid, ids, np.iinfo(np.int64).max)
    neg = -np.where(valid, sims, -np.inf)
    if 0 < k < sims.shape[1]:
        # Only the best k per query are sorted: those strictly better than the k-th best
        # similarity, and of the ones equal to it the lowest ids.
        kth = np.partition(neg, k - 1, axis=1)[:, k - 1:k]
        pick = np.where(neg < kth, -1, np.where(neg == kth, id_key, np.iinfo(np.int64).max))
        chosen = np.argpartition(pick, k - 1, axis=1)[:, :k]
        id_key = np.take_along_axis(id_key, chosen, axis=1)
        neg = np.take_along_axis(neg, chosen, axis=1)
        sims = np.take_along_axis(sims, chosen, axis=1)
        ids = np.take_along_axis(ids, chosen, axis=1)
    order = np.lexsort((id_key, neg), axis=-1)[:, :k]
    ids = np.take_along_axis(ids, order, axis=1)
    sims = np.where(ids >= 0, np.take_along_axis(sims, order, axis=1), -np.inf)
    return sims, ids
