"""Exact rescoring of approximate-search candidates from the stored (memory-mapped) embeddings.

Pure numpy: the final ranking of every search is by exact inner products of stored rows, whatever
index type produced the candidates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from tapt.errors import IndexFormatError
from tapt.indexer.store.integrity import check_unit_rows
from tapt.indexer.store.npy import as_float32

_GATHER_BYTES = 64 << 20  # rows gathered per block of queries
_BLOCK_QUERIES = 64  # at most: a block's matrix product grows with queries x distinct rows


def exact_topk(embeddings: np.ndarray, queries: np.ndarray, candidates: np.ndarray, k: int,
               label: str | Path | None = None, candidate_sims: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the `k` candidates with the highest exact inner product, best first.

    `candidates` is (queries, k') of row ids, -1 for none. Ties break by ascending id. Returns
    (similarities, ids); a query with fewer than `k` valid candidates is padded with -inf / -1.
    Every gathered row is checked for unit length (IndexFormatError names damaged rows).

    A similarity is one float32 dot product of its row and query, the same value whichever
    other rows and queries share the call (so a sharded index ranks as an unsharded one). Only
    the candidates that can reach a query's top `k` are computed that way: a matrix product of
    the block's distinct rows and queries (whose rounding depends on the block) finds them,
    within a bound on the two roundings' difference.

    `candidate_sims`, a (queries, k') float32 array when given, is filled with every
    candidate's similarity from that matrix product (-inf for none): within ~1e-6 of the exact
    value, what a caller needs to check a search's own similarities against the stored rows.
    """
    queries = np.asarray(queries, dtype=np.float32)
    nq, width = candidates.shape
    k = min(k, width)
    dim = queries.shape[1]
    sims_out = np.full((nq, k), -np.inf, dtype=np.float32)
    ids_out = np.full((nq, k), -1, dtype=np.int64)
    if candidate_sims is not None:
        candidate_sims[...] = -np.inf
    if nq == 0 or k == 0:
        return sims_out, ids_out
    step = max(1, min(_BLOCK_QUERIES, _GATHER_BYTES // max(1, width * dim * 4)))
    grouped = _by_shared_candidates(candidates)
    # reused for every block of queries: fresh memory per block costs more page faults than
    # the work
    rows_buf = np.empty((min(step, nq) * width, dim), dtype=np.float32)
    for start in range(0, nq, step):
        block = grouped[start:start + step]
        cand = np.asarray(candidates[block], dtype=np.int64)
        valid = cand >= 0
        if not valid.any():
            continue
        block_q = queries[block]
        safe = np.where(valid, cand, cand[valid][0])
        unique, inverse = np.unique(safe, return_inverse=True)
        inverse = inverse.reshape(safe.shape)
        # ascending ids: sequential reads
        rows = as_float32(embeddings[unique], out=rows_buf[:len(unique)])
        squared = np.einsum("ij,ij->i", rows, rows)
        check_unit_rows(rows, unique, label, squared=squared, dtype=embeddings.dtype)
        sims, approx = _exact_sims(rows, block_q, inverse, valid, k,
                                   float(np.sqrt(squared.max())))
        if candidate_sims is not None:
            candidate_sims[block] = approx
        order = np.lexsort((np.where(valid, cand, np.iinfo(np.int64).max), -sims), axis=-1)[:, :k]
        top_sims = np.take_along_axis(sims, order, axis=1)
        top_ids = np.take_along_axis(cand, order, axis=1)
        top_ids[~np.isfinite(top_sims)] = -1
        sims_out[block] = top_sims
        ids_out[block] = top_ids
    return sims_out, ids_out


Candidates = tuple[np.ndarray, np.ndarray, np.ndarray]  # ids, approximate and exact similarities


def exact_of(embeddings: np.ndarray, queries: np.ndarray, candidates: np.ndarray,
             label: str | Path | None = None, offset: int = 0) -> np.ndarray:
    """The exact similarity of every candidate, in the candidates' order, -inf for none: one
    float32 dot product of its row and query each (the value `exact_topk` gives it, whatever
    else shares the call), computed once for a candidate a query has several times (the
    candidates of several searches side by side), every gathered row checked for unit length.
    `candidates` are rows of `embeddings` + `offset` (a shard's or an actor's rows, named by
    their global ids)."""
    from tapt.indexer.store.integrity import rows_from

    queries = np.asarray(queries, dtype=np.float32)
    local = np.where(candidates >= 0, candidates - offset, -1).astype(np.int64)
    out = np.full(local.shape, -np.inf, dtype=np.float32)
    nq, width = local.shape
    stride = int(local.max(initial=0)) + 1
    step = max(1, min(nq, _GATHER_BYTES // max(1, width * queries.shape[1] * 4)))
    for start in range(0, nq, step):
        block = local[start:start + step]
        q_of, j_of = np.nonzero(block >= 0)
        if not len(q_of):
            continue
        pairs, at = np.unique(q_of * stride + block[q_of, j_of], return_inverse=True)
        unique, row_of = np.unique(pairs % stride, return_inverse=True)
        rows = as_float32(embeddings[unique])           # ascending ids: sequential reads
        try:
            check_unit_rows(rows, unique, label, dtype=embeddings.dtype)
        except IndexFormatError as exc:
            raise rows_from(exc, offset) from exc
        sims = np.einsum("ij,ij->i", rows[row_of], queries[start + pairs // stride])
        out[start + q_of, j_of] = sims[at]
    return out


def best_of(found: Candidates, width: int, by: int) -> Candidates:
    """Each query's best `width` candidates by similarity `by` (1: approximate, 2: exact),
    best first, ties by ascending id, none (-1) last: how the candidates of several parts are
    merged (by 1, as `faiss_index.merge_topk` merges a search's), then ranked (by 2, as
    `exact_topk` ranks them)."""
    ids = found[0]
    valid = ids >= 0
    order = np.lexsort((np.where(valid, ids, np.iinfo(np.int64).max),
                        np.where(valid, -found[by], np.inf)), axis=-1)[:, :width]
    return tuple(np.take_along_axis(a, order, 1) for a in found)  # type: ignore[return-value]


def merge_candidates(parts: Iterable[Candidates | None], width: int) -> Candidates | None:
    """The best `width` candidates by approximate similarity of several parts' candidates
    (the candidates `best_of(..., by=1)` keeps), merged as they come: one part's width held
    beside the merged ones. The merged candidates are in no particular order (`best_of`
    ranks them)."""
    merged = None
    for part in parts:
        if part is None:
            continue
        merged = part if merged is None else _best_set(
            tuple(np.concatenate([a, b], axis=1) for a, b in zip(merged, part)), width)
    return merged


def _best_set(found: Candidates, width: int) -> Candidates:
    """`best_of(found, width, 1)`'s candidates, unordered: one 64-bit key per candidate (the
    approximate similarity's order-preserving bits above the id's offset from the smallest id,
    none last) and one partition, as `faiss_index.merge_topk` keys a search's results; ids
    spread over 2^32 or more, and NaN, take `best_of`."""
    from tapt.util.ordering import descending_bits

    ids, approx = found[0], found[1]
    if width >= ids.shape[1]:
        return found
    valid = ids >= 0
    lowest = int(ids[valid].min()) if valid.any() else 0
    if (not valid.any() or int(ids.max()) - lowest >= 0xFFFFFFFF or approx.dtype != np.float32
            or np.isnan(approx[valid]).any()):
        return best_of(found, width, 1)
    key = descending_bits(approx).astype(np.uint64) << np.uint64(32)
    key |= (ids - lowest).astype(np.uint64) & np.uint64(0xFFFFFFFF)
    key[~valid] = np.uint64(0xFFFFFFFFFFFFFFFF)
    keep = np.argpartition(key, width - 1, axis=1)[:, :width]
    return tuple(np.take_along_axis(a, keep, 1) for a in found)  # type: ignore[return-value]


def exact_top(found: Candidates, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, ids) of each query's best `k` candidates by exact similarity, -inf / -1
    where it has fewer: what `exact_topk` returns for the same candidates."""
    top = best_of(found, k, 2)
    finite = np.isfinite(top[2])
    return np.where(finite, top[2], -np.inf).astype(np.float32), np.where(finite, top[0], -1)


def _by_shared_candidates(candidates: np.ndarray) -> np.ndarray:
    """The queries in an order that puts queries with many common candidates together (by a
    MinHash of their candidate sets), so a block of queries gathers fewer distinct rows."""
    signature = np.empty(len(candidates), dtype=np.uint64)
    for start in range(0, len(candidates), 4096):      # bounded temporaries for any task
        ids = np.asarray(candidates[start:start + 4096], dtype=np.int64)
        hashed = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        hashed[ids < 0] = np.iinfo(np.uint64).max
        signature[start:start + len(ids)] = hashed.min(axis=1)
    return np.argsort(signature, kind="stable")


def _exact_sims(rows: np.ndarray, queries: np.ndarray, inverse: np.ndarray, valid: np.ndarray,
                k: int, row_norm: float) -> tuple[np.ndarray, np.ndarray]:
    """(queries, candidates) exact similarities of the candidates that can be among a query's
    `k` best, -inf for the rest and for invalid ones, and the block product's similarities of
    every candidate (-inf for invalid ones); candidate j of query i is row `inverse[i, j]`."""
    approx = rows @ queries.T                     # (distinct rows, queries)
    approx = np.take_along_axis(approx.T, inverse, axis=1)  # (queries, candidates)
    approx[~valid] = -np.inf
    # Any float32 rounding of a d-term dot product is within gamma_d |row| |query| of the exact
    # value (Higham; gamma_d ~ d 2^-24), so the two roundings differ by at most twice that, and
    # a candidate more than four times that below the k-th best cannot reach the top k. Eight
    # times leaves room for the rounding of the norms themselves.
    margin = (8.0 * queries.shape[1] * 2.0 ** -24 * row_norm
              * np.sqrt(np.einsum("ij,ij->i", queries, queries)))
    if k < approx.shape[1]:
        kth = -np.partition(-approx, k - 1, axis=1)[:, k - 1]
    else:
        kth = np.full(len(approx), -np.inf, dtype=np.float32)
    floor = kth - margin
    floor[~np.isfinite(floor)] = -np.inf   # a NaN or too few candidates: compute them all
    near = valid & ~(approx < floor[:, None])
    q_of, j_of = np.nonzero(near)
    sims = np.full(approx.shape, -np.inf, dtype=np.float32)
    sims[q_of, j_of] = np.einsum("ij,ij->i", rows[inverse[q_of, j_of]], queries[q_of])
    return sims, approx
