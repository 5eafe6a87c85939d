"""Pure array functions behind every selection method (no model, no FAISS, no I/O).

Embeddings are L2-normalised float rows, so inner product == cosine similarity. Matrices may be
memory maps or an index's row view over its shards (`tapt.indexer.store.shards.RowView`); full passes
walk them in blocks of a fixed global grid (`blocks`), so that a sharded index gets exactly the
scores of an unsharded one (BLAS rounds a row's result by the shape of the block it is in).
Scores are "higher = more task-like" everywhere; anomaly scores are negated before they leave this module.
A cosine outside [-1, 1] or a gathered row that is not unit length means damaged embeddings:
IndexFormatError naming the rows, never a ranking.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from tapt.indexer.store.integrity import check_cosines, check_unit_rows
from tapt.indexer.store.npy import as_float32

# Moments and z-scores live in `moments`; selection methods reach them through here.
from tapt.retriever.scoring.moments import (  # noqa: F401
    RowRuns,
    ZSum,
    fuse_zscores,
    moments,
    pairwise_sum,
    zscore,
)
from tapt.util import spill
from tapt.util.machine import usable_cores
from tapt.util.ordering import descending_bits
from tapt.util.progress import report_step

CHUNK = 65536
KEY_BLOCK = 1 << 20   # rows whose ranking keys are built at once (~20 MB of temporaries)


@runtime_checkable
class HeldScores(Protocol):
    """Every row's score kept where the rows are (a served index's actors,
    `serving.remote_scores.RemoteScores`), asked for answers that do not grow with the rows:
    the learned scorers (`learned.pu`) take one in place of an array of scores."""

    dtype: np.dtype

    def __len__(self) -> int: ...

    def count_above(self, threshold: float) -> int:
        """How many scores are above `threshold`."""
        ...

    def top_rows(self, k: int) -> np.ndarray:
        """`rank(scores)[:k]`."""
        ...

    def rows_at_ranks(self, ranks: np.ndarray) -> np.ndarray:
        """`rank(scores)[ranks]`."""
        ...

    def rows_below_cut(self, start: int, ordinals: np.ndarray) -> np.ndarray:
        """`ordering.rows_below_cut(scores, ordering.rank_cut(scores, start), ordinals)`."""
        ...

    def values(self) -> np.ndarray:
        """Every score, gathered."""
        ...


@runtime_checkable
class ScoreHolder(Protocol):
    """What keeps scores where the rows are (a served index's `ShardServers`)."""

    def hold_scores(self, scorer: Callable[[np.ndarray], np.ndarray], on: str = "rows"
                    ) -> HeldScores:
        """Every row's score by `scorer` (`on` codes: of its int8 codes), kept."""
        ...

    def hold_lexicon(self, score_shard: Callable[[Any], np.ndarray]) -> HeldScores:
        """Every row's score by `score_shard` of its shard's stored lexical ids, kept."""
        ...

    def zsum(self, *scores: HeldScores) -> HeldScores:
        """`ZSum(*scores)`, kept."""
        ...


def score_holder(index: Any) -> ScoreHolder | None:
    """Where an index keeps scores where its rows are (a served index's actors), else None.

    Args:
        index: The selection's index.

    Returns:
        Its `ScoreHolder` (a served index's `servers`), or None.
    """
    servers = getattr(index, "servers", None)
    return servers if isinstance(servers, ScoreHolder) else None


def as_array(scores: Any) -> np.ndarray:
    """Scores as an array: held ones gathered (`HeldScores.values`), an array as it is."""
    return scores.values() if isinstance(scores, HeldScores) else scores


def centroid(task_embeddings: np.ndarray) -> np.ndarray:
    """Unit-length mean of the task embeddings (Aharoni & Goldberg's Domain-Cosine query)."""
    if len(task_embeddings) == 0:
        raise ValueError("no task embeddings")
    mean = np.asarray(task_embeddings, dtype=np.float64).mean(axis=0)
    norm = np.linalg.norm(mean)
    if norm == 0:
        raise ValueError("task embeddings average to zero")
    return (mean / norm).astype(np.float32)


def blocks(matrix, size: int):
    """(start, rows[start:start + size]) over the global grid of `size`-row blocks."""
    parts = matrix.blocks(size) if hasattr(matrix, "blocks") else (
        (start, matrix[start:start + size]) for start in range(0, len(matrix), size))
    for start, block in parts:
        report_step(f"score rows {start:,}-{start + len(block):,}")
        yield start, block


def centroid_scores(embeddings: np.ndarray, query: np.ndarray, chunk: int = CHUNK
                    ) -> np.ndarray:
    """Cosine of every row to `query`, streamed in chunks over a (memory-mapped) matrix."""
    return Linear(np.asarray(query, dtype=np.float32), cosine=True)(embeddings, chunk)


def linear_scores(rows: np.ndarray, weights: np.ndarray, bias: float = 0.0,
                  chunk: int = CHUNK) -> np.ndarray:
    """rows @ weights + bias in float32, streamed over a (memory-mapped, sharded) matrix:
    float16 and int8 rows through `_cast_scores`, float32 rows by BLAS in `chunk`-row blocks
    of the global grid.

    Args:
        rows: (n, d) rows.
        weights: (d,) weights, or (d, m) for m scores per row.
        bias: Added to every score.
        chunk: Rows per block of float32 rows.

    Returns:
        (n,) float32 scores ((n, m) for (d, m) weights).
    """
    out = (spill.empty(len(rows), np.float32) if np.ndim(weights) == 1 else
           np.empty((len(rows),) + np.shape(weights)[1:], dtype=np.float32))
    w = np.ascontiguousarray(weights, dtype=np.float32)
    cast = getattr(rows, "dtype", None) in (np.float16, np.int8)
    if cast:
        report_step(f"score rows 0-{len(rows):,}")
    if not (cast and _cast_scores(rows, w, out)):
        for start, block in blocks(rows, chunk):
            out[start:start + len(block)] = np.asarray(block, dtype=np.float32) @ w
    if bias:
        out += np.float32(bias)
    return out


@dataclass(frozen=True, eq=False)
class Linear:
    """A linear row scorer: `rows @ weights + bias` in float32 (`linear_scores`).

    Attributes:
        weights: (d,) weights.
        bias: Added to every score.
        cosine: The weights are a unit query of unit rows, so every score is a cosine: scores
            outside [-|weights|, |weights|] mean damaged rows (IndexFormatError, never a
            ranking).
    """

    weights: np.ndarray
    bias: float = 0.0
    cosine: bool = False

    def __call__(self, rows: np.ndarray, chunk: int = CHUNK) -> np.ndarray:
        out = linear_scores(rows, self.weights, self.bias, chunk=chunk)
        if self.cosine:
            check_cosines(out, bound=float(np.linalg.norm(self.weights)))
        return out

    def for_codes(self, scale: np.ndarray) -> "Linear":
        """The scorer of int8 code rows whose scores are this one's of the decoded rows
        (each dimension times `scale`): the scale folded into the weights, one pass."""
        return Linear(np.asarray(self.weights, np.float32) * np.asarray(scale, np.float32),
                      self.bias)


@dataclass(frozen=True, eq=False)
class DistanceDifference:
    """`distance_difference` as a row scorer (Wang et al. 2017).

    Attributes:
        task_mean: The task's mean embedding (not normalised).
        corpus_mean: The mean embedding of a sample of the corpus.
    """

    task_mean: np.ndarray
    corpus_mean: np.ndarray

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return distance_difference(rows, self.task_mean, self.corpus_mean)

    def for_codes(self, scale: np.ndarray) -> "_ProjectedDistance":
        """The scorer of int8 code rows: both dot products on the codes (the scale folded in),
        the rows' squared norm taken as 1, which the rows the codes approximate have."""
        t, c = np.asarray(self.task_mean, np.float64), np.asarray(self.corpus_mean, np.float64)
        weights = np.stack([t, c], axis=1) * np.asarray(scale, np.float64)[:, None]
        return _ProjectedDistance(weights.astype(np.float32), float(t @ t), float(c @ c))


@dataclass(frozen=True, eq=False)
class _ProjectedDistance:
    weights: np.ndarray          # (d, 2): task mean, corpus mean
    task_sq: float
    corpus_sq: float

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        p = linear_scores(rows, self.weights).astype(np.float64)
        d_task = np.sqrt(np.maximum(1.0 - 2 * p[:, 0] + self.task_sq, 0))
        d_corpus = np.sqrt(np.maximum(1.0 - 2 * p[:, 1] + self.corpus_sq, 0))
        return (d_corpus - d_task).astype(np.float32)


def rescore_best(embeddings, scorer, approx: np.ndarray, candidates: int,
                 by: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The `candidates` rows with the highest `approx` scores (or `by` values) scored again
    exactly.

    Args:
        embeddings: The stored rows (a memory map or an index's `RowView`).
        scorer: The exact row scorer. The gathered rows must be unit length (damaged ones
            raise IndexFormatError, as in every gather).
        approx: Every row's approximate score (from its int8 codes); overwritten.
        candidates: How many rows to rescore.
        by: What picks the rows, when it is not `approx` itself (a fused score that
            `approx` is part of).

    Returns:
        (scores: `approx` with the rescored rows' exact scores, the rescored rows ascending).
    """
    key = approx if by is None else np.asarray(by)
    n = min(max(int(candidates), 1), len(key))
    best = np.sort(np.argpartition(-key, n - 1)[:n]) if n < len(key) else np.arange(n)
    approx[best] = exact_scores(embeddings, scorer, best)
    return approx, best


def exact_scores(embeddings, scorer, rows: np.ndarray) -> np.ndarray:
    """`scorer`'s scores of the stored rows `rows` (ascending), gathered `CHUNK` at a time;
    each gathered row must be unit length (damaged ones raise IndexFormatError)."""
    out = np.empty(len(rows), dtype=np.float32)
    for start in range(0, len(rows), CHUNK):
        ids = rows[start:start + CHUNK]
        block = as_float32(embeddings[ids])
        check_unit_rows(block, ids, dtype=getattr(embeddings, "dtype", None))
        out[start:start + len(ids)] = scorer(block)
    return out


def _cast_scores(embeddings: np.ndarray, q: np.ndarray, out: np.ndarray, rows: int = 2048,
                 threads: int | None = None) -> bool:
    """float16 (or int8) rows @ q into `out` through torch, whose cast to float is vectorised
    (numpy's runs ~0.5G values/s here, 14x slower than the product); 2,048 rows at a time stay
    in cache between the cast and the product. The blocks of the global grid are shared
    between `threads` threads (default `scan_threads()`; torch releases the GIL), each block
    computed alone as in one thread, so the scores do not depend on the thread count. False
    when torch is missing (the caller falls back)."""
    try:
        import torch
    except ImportError:
        return False
    dst, qt = torch.from_numpy(out), torch.from_numpy(q)
    product = torch.mv if q.ndim == 1 else torch.mm
    n = len(embeddings)
    workers = max(1, min(threads or scan_threads(), -(-n // rows)))

    def work(first: int) -> None:
        for start in range(first * rows, n, rows * workers):
            block = np.asarray(embeddings[start:start + rows])
            product(torch.from_numpy(block).float(), qt, out=dst[start:start + len(block)])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a read-only memmap: torch warns, nothing is written to it
        if workers == 1:
            work(0)
        else:
            list(_scan_pool(workers).map(work, range(workers)))
    return True


_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}


def _scan_pool(workers: int) -> ThreadPoolExecutor:
    """One pool of `workers` threads per process, kept between scans: a scan in blocks (a
    streamed budget cut, `topcut.scan_cut`) would otherwise start new threads per block, and
    each new thread's allocator arena and torch thread state stay in the process (measured:
    tens of MB over a 2M-row scan)."""
    key = (os.getpid(), workers)      # a forked child starts its own
    if key not in _POOLS:
        _POOLS[key] = ThreadPoolExecutor(workers, thread_name_prefix="tapt-scan")
    return _POOLS[key]


def scan_threads() -> int:
    """Threads of a full scan: the cores this process may use, at most 4 (measured on 2 cores:
    10M float16 rows in 0.75 s with 2 threads, 0.90 s with one)."""
    return min(usable_cores(), 4)


def max_similarity(rows: np.ndarray, task_embeddings: np.ndarray, chunk: int = 8192,
                   ids: np.ndarray | None = None) -> np.ndarray:
    """For each row, its best cosine to any task sentence (exact); the rows (index rows `ids`)
    must be unit length."""
    out = np.empty(len(rows), dtype=np.float32)
    t = np.asarray(task_embeddings, dtype=np.float32).T
    for start in range(0, len(rows), chunk):
        block = np.asarray(rows[start:start + chunk], dtype=np.float32)
        check_unit_rows(block, None if ids is None else ids[start:start + len(block)],
                        dtype=getattr(rows, "dtype", None))
        out[start:start + len(block)] = (block @ t).max(axis=1)
    return out


def knn_union(distances: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of per-query neighbour lists: (distinct ids ascending, best similarity of each)."""
    flat_ids = ids.ravel()
    flat_sim = distances.ravel()
    keep = flat_ids >= 0
    flat_ids, flat_sim = flat_ids[keep], flat_sim[keep]
    union, inverse = np.unique(flat_ids, return_inverse=True)
    best = np.full(len(union), -np.inf, dtype=np.float32)
    np.maximum.at(best, inverse, flat_sim.astype(np.float32))
    return union, best


def segment_of_rows(seg_offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Segment id of each sentence row."""
    return np.searchsorted(seg_offsets, rows, side="right") - 1


def rows_of_segments(seg_offsets: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """All sentence rows of the given segments, in segment order."""
    starts = seg_offsets[segments]
    lengths = seg_offsets[segments + 1] - starts
    base = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return base + np.arange(int(lengths.sum()))


def segment_mean(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Mean of consecutive runs of `values` with the given run lengths (all > 0)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) == len(values):   # runs of one (lengths > 0): the mean is the value itself
        return np.asarray(values).astype(np.float32)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    sums = np.add.reduceat(np.asarray(values, dtype=np.float64), starts) if len(starts) else starts
    return (sums / lengths).astype(np.float32)


def rank(scores: np.ndarray) -> np.ndarray:
    """Indices by descending score; ties broken by ascending index, so rankings are deterministic.

    Scores that are float32 values (most are) sort as one 64-bit key per row, the score's
    order-preserving bits above the row index: one `np.sort` of integers, ~7x faster than the
    two-key `lexsort` it equals (3.1 s -> 0.44 s for 10M scores). Anything else (NaN, float64
    values a float32 cannot hold, 2^32 rows or more) takes the `lexsort`, which puts NaN last.
    """
    packed = _packed_rank(np.asarray(scores))
    if packed is not None:
        return packed
    return np.lexsort((np.arange(len(scores)), -np.asarray(scores, dtype=np.float64)))


def _packed_rank(scores: np.ndarray) -> np.ndarray | None:
    """`rank` through one integer sort, or None when the scores do not fit its key."""
    keys = _ranked_keys(scores)
    if keys is None:
        return None
    keys &= _INDEX_BITS
    return keys.view(np.int64)          # indices < 2^32: the same values, no copy


_INDEX_BITS = np.uint64(0xFFFFFFFF)


def _ranked_keys(scores: np.ndarray) -> np.ndarray | None:
    """One uint64 key per score, unique, sorted in `rank`'s order (the score's descending bits
    above the index, in `_INDEX_BITS`; 8 bytes a row, on a scratch file when large
    (`util.spill`), built block by block, sorted in place), or None when the scores do not fit
    it (NaN, float64 values a float32 cannot hold, 2^32 rows or more)."""
    n = len(scores)
    if n >= 1 << 32 or scores.ndim != 1 or scores.dtype.kind not in "fiu":
        return None
    f = scores.astype(np.float32, copy=False)
    if scores.dtype != np.float32 and not np.array_equal(f, scores):
        return None
    if any(np.isnan(f[lo:lo + KEY_BLOCK]).any() for lo in range(0, n, KEY_BLOCK)):
        return None
    keys = spill.empty(n, np.uint64)
    for start in range(0, n, KEY_BLOCK):           # block temporaries, not 8 bytes a row more
        stop = min(n, start + KEY_BLOCK)
        block = keys[start:stop]
        np.copyto(block, descending_bits(f[start:stop]))   # -0.0 and +0.0 one key, as lexsort
        block <<= np.uint64(32)
        block |= np.arange(start, stop, dtype=np.uint64)
    keys.sort()
    return keys


def rows_at_ranks(scores: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """`rank(scores)[ranks]`: the indices at these positions of the ranking, holding one 8-byte
    key per score instead of the ranking and its copies (what sampling from a stretch of a
    ranking of every corpus row needs).

    Args:
        scores: One score per row.
        ranks: Positions in the ranking (0 = the best), any order.

    Returns:
        int64 indices, one per position.
    """
    ranks = np.asarray(ranks, dtype=np.int64)
    keys = _ranked_keys(np.asarray(scores))
    if keys is None:
        return rank(scores)[ranks]
    return (keys[ranks] & _INDEX_BITS).astype(np.int64)


def rank_top(scores: np.ndarray, k: int) -> np.ndarray:
    """A prefix of `rank(scores)` holding at least its first `k` indices: every index whose
    score is at least the k-th best, in `rank`'s order (a partition, then a sort of the prefix
    only: what a budget needs of a ranking of millions)."""
    n = len(scores)
    if k >= n:
        return rank(scores)
    scores = np.asarray(scores)
    if scores.dtype != np.float32:   # float32 partitions ~2x faster than float64
        scores = scores.astype(np.float64, copy=False)
    k = max(int(k), 1)
    # one copy: the k-th best is the (n - k)-th smallest; NaNs sort last, as rank puts them
    part = np.partition(scores, n - k)
    kth, nan = part[n - k], bool(np.isnan(part[-1]))
    del part
    if nan:
        return _rank_top_with_nan(scores, k)
    top = np.flatnonzero(scores >= kth)
    return top[np.lexsort((top, -scores[top]))]


def _rank_top_with_nan(scores: np.ndarray, k: int) -> np.ndarray:
    neg = -scores
    kth = np.partition(neg, k - 1)[k - 1]
    if np.isnan(kth):
        return rank(scores)
    top = np.flatnonzero(neg <= kth)
    return top[np.lexsort((top, neg[top]))]


def lambda_weights(anomaly: np.ndarray, C: float, alpha: float) -> np.ndarray:
    """TADPOLE's continuous weights: sigmoid(C * (alpha - z)), z the standardised anomaly score;
    kept above 0 (float32's smallest normal number) where the sigmoid underflows, since a weight
    is a share of the loss or of the sampling and the selection keeps the segment."""
    z = zscore(anomaly)
    weights = (1.0 / (1.0 + np.exp(-C * (alpha - z)))).astype(np.float32)
    return np.maximum(weights, np.finfo(np.float32).tiny)


def topm_mean_similarity(rows: np.ndarray, task_embeddings: np.ndarray, m: int,
                         chunk: int = 4096, check: bool = True) -> np.ndarray:
    """For each row, the mean cosine to its `m` most similar task sentences (a density score).

    m = 1 is the best similarity to any task sentence (kNN-TAPT's score, over every row).
    `check`: the scores are cosines, checked to lie in [-1, 1] (off for approximations).
    """
    t = np.asarray(task_embeddings, dtype=np.float32).T
    m = max(1, min(int(m), t.shape[1]))
    out = np.empty(len(rows), dtype=np.float32)
    for start, block in blocks(rows, chunk):
        sims = np.asarray(block, dtype=np.float32) @ t
        if m == 1:
            out[start:start + len(sims)] = sims.max(axis=1)
        else:
            top = np.partition(sims, sims.shape[1] - m, axis=1)[:, -m:]
            out[start:start + len(sims)] = top.mean(axis=1)
    if check:
        check_cosines(out)
    return out


@dataclass(frozen=True, eq=False)
class TopMeanSimilarity:
    """`topm_mean_similarity` as a row scorer.

    Attributes:
        task: The task's embeddings, (n_task, d).
        m: How many of the most similar task sentences each row's score averages.
    """

    task: np.ndarray
    m: int

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return topm_mean_similarity(rows, self.task, self.m)

    def for_codes(self, scale: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """The scorer of int8 code rows: the same scores of the decoded rows, the scale folded
        into the task's embeddings."""
        scaled = np.asarray(self.task, np.float32) * np.asarray(scale, np.float32)
        return partial(topm_mean_similarity, task_embeddings=scaled, m=self.m, check=False)


def distance_difference(rows: np.ndarray, task_mean: np.ndarray, corpus_mean: np.ndarray,
                        chunk: int = CHUNK) -> np.ndarray:
    """Wang et al. 2017: distance to a random-corpus centroid minus distance to the task centroid.

    Euclidean distances to the (unnormalised) mean embeddings; higher = closer to the task.
    """
    t, c = np.asarray(task_mean, np.float64), np.asarray(corpus_mean, np.float64)
    out = np.empty(len(rows), dtype=np.float32)
    for start, block in blocks(rows, chunk):
        block = np.asarray(block, dtype=np.float64)
        sq = (block * block).sum(axis=1)
        check_unit_rows(block, np.arange(start, start + len(block)), squared=sq,
                        dtype=getattr(rows, "dtype", None))
        d_task = np.sqrt(np.maximum(sq - 2 * block @ t + t @ t, 0))
        d_corpus = np.sqrt(np.maximum(sq - 2 * block @ c + c @ c, 0))
        out[start:start + len(block)] = d_corpus - d_task
    return out
