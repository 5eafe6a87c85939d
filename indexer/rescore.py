"""Exact rescoring of approximate-search candidates from the stored (memory-mapped) embeddings.

Pure numpy: the final ranking of every search is by exact inner products of stored rows, whatever
index type produced the candidates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .integrity import check_unit_rows
from .npy import as_float32

_GATHER_BYTES = 32 << 20  # rows gathered per block of queries


def exact_topk(embeddings: np.ndarray, queries: np.ndarray, candidates: np.ndarray, k: int,
               label: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the `k` candidates with the highest exact inner product, best first.

    `candidates` is (queries, k') of row ids, -1 for none. Ties break by ascending id. Returns
    (similarities, ids); a query with fewer than `k` valid candidates is padded with -inf / -1.
    Every gathered row is checked for unit length (IndexFormatError names damaged rows).
    """
    queries = np.asarray(queries, dtype=np.float32)
    nq, width = candidates.shape
    k = min(k, width)
    dim = queries.shape[1]
    sims_out = np.full((nq, k), -np.inf, dtype=np.float32)
    ids_out = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or k == 0:
        return sims_out, ids_out
    step = max(1, _GATHER_BYTES // max(1, width * dim * 4))
    # reused for every block of queries (fresh memory per block costs more page faults than
    # the work): the gathered rows as float32, and those rows per query and candidate
    rows_buf = np.empty((min(step, nq) * width, dim), dtype=np.float32)
    vecs_buf = np.empty(min(step, nq) * width * dim, dtype=np.float32)
    for start in range(0, nq, step):
        cand = np.asarray(candidates[start:start + step], dtype=np.int64)
        valid = cand >= 0
        if not valid.any():
            continue
        safe = np.where(valid, cand, cand[valid][0])
        unique, inverse = np.unique(safe, return_inverse=True)
        # ascending ids: sequential reads
        rows = as_float32(embeddings[unique], out=rows_buf[:len(unique)])
        check_unit_rows(rows, unique, label, squared=np.einsum("ij,ij->i", rows, rows),
                        dtype=embeddings.dtype)
        vecs = vecs_buf[:safe.size * dim].reshape(*safe.shape, dim)
        np.take(rows, inverse.reshape(safe.shape), axis=0, out=vecs)
        sims = np.einsum("ckd,cd->ck", vecs, queries[start:start + step])
        sims[~valid] = -np.inf
        order = np.lexsort((np.where(valid, cand, np.iinfo(np.int64).max), -sims), axis=-1)[:, :k]
        top_sims = np.take_along_axis(sims, order, axis=1)
        top_ids = np.take_along_axis(cand, order, axis=1)
        top_ids[~np.isfinite(top_sims)] = -1
        sims_out[start:start + len(cand)] = top_sims
        ids_out[start:start + len(cand)] = top_ids
    return sims_out, ids_out
