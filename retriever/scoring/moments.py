"""Sums, means and spreads of score arrays in blocks, bit for bit what numpy's pairwise summation
gives for the whole array, and the z-scores and their fusion built on them (`zscore`,
`fuse_zscores`, `ZSum`): a float32 array of 10^9 scores needs no float64 copy."""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from tapt.util import spill

# Rows per block of the moments below: numpy's pairwise summation is followed exactly above it.
MOMENT_LEAF = 1 << 20
_NUMPY_PAIRWISE_BLOCK = 128   # numpy sums at most this many rows without splitting them


def _pairwise(lo: int, hi: int, leaf_sum: Callable[[int, int], float],
              leaf: int | None = None) -> float:
    """numpy's pairwise sum of rows lo..hi, split as numpy splits it (halves rounded down to a
    multiple of 8) down to blocks of at most `leaf` rows (default MOMENT_LEAF), each summed
    by `leaf_sum` with `np.add.reduce`: bit for bit the sum of one contiguous float64 array of
    those rows, without that array."""
    leaf = MOMENT_LEAF if leaf is None else leaf
    n = hi - lo
    if n <= max(leaf, _NUMPY_PAIRWISE_BLOCK):
        return leaf_sum(lo, hi)
    half = n // 2
    half -= half % 8
    return (_pairwise(lo, lo + half, leaf_sum, leaf)
            + _pairwise(lo + half, hi, leaf_sum, leaf))


def pairwise_sum(n: int, leaf_sum: Callable[[int, int], float], leaf: int | None = None
                 ) -> float:
    """`np.add.reduce` of a contiguous float64 array of `n` values, bit for bit, without that
    array: `leaf_sum(lo, hi)` sums (with `np.add.reduce`) the values of rows lo..hi, for runs of
    at most `leaf` rows (default MOMENT_LEAF) split as numpy's pairwise summation splits them."""
    return _pairwise(0, n, leaf_sum, leaf) if n else 0.0


def _as_float64(values: np.ndarray, lo: int, hi: int, fill: float | None) -> np.ndarray:
    block = np.asarray(values[lo:hi], dtype=np.float64)
    if fill is not None:
        block = np.where(np.isfinite(block), block, fill)
    return block


def moments(values: np.ndarray, fill: float | None = None) -> tuple[float, float]:
    """`(mean, std)` of `values` as float64, equal bit for bit to `np.mean` and `np.std` of
    `values.astype(np.float64)`, in blocks (a float32 array of 10^9 scores needs no float64
    copy of 8 GB, nor the 8 GB of deviations that `np.std` allocates).

    Args:
        values: One score per row.
        fill: What non-finite entries count as (None: they count as they are).

    Returns:
        The mean and the (population) standard deviation.
    """
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    mean = np.float64(_pairwise(0, n, lambda lo, hi: np.add.reduce(
        _as_float64(values, lo, hi, fill)))) / n

    def squares(lo: int, hi: int) -> float:
        d = _as_float64(values, lo, hi, fill) - mean
        return np.add.reduce(np.multiply(d, d, out=d))

    return float(mean), float(np.sqrt(np.float64(_pairwise(0, n, squares)) / n))


def _finite_min(values: np.ndarray) -> float | None:
    """The lowest finite value (None when there is none), in blocks."""
    low = None
    for lo in range(0, len(values), MOMENT_LEAF):
        block = np.asarray(values[lo:lo + MOMENT_LEAF])
        finite = block[np.isfinite(block)]
        if len(finite):
            m = float(finite.min())
            low = m if low is None else min(low, m)
    return low


def zscore(values: np.ndarray) -> np.ndarray:
    """`(values - mean) / std` in float64, block by block (all zeros when the values do not
    vary)."""
    values = np.asarray(values)
    out = np.zeros(len(values), dtype=np.float64)
    mean, std = moments(values)
    if std == 0:
        return out
    for lo in range(0, len(values), MOMENT_LEAF):
        hi = min(lo + MOMENT_LEAF, len(values))
        out[lo:hi] = (_as_float64(values, lo, hi, None) - mean) / std
    return out


class RowRuns:
    """Scores of every row computed run by run: a subclass implements `__len__` and
    `block(lo, hi)` (the float64 scores of rows lo..hi); `parts` and `all` follow."""

    def run_size(self) -> int:
        """Rows per run of `parts` by default."""
        return MOMENT_LEAF

    def __len__(self) -> int:
        raise NotImplementedError

    def block(self, lo: int, hi: int) -> np.ndarray:
        raise NotImplementedError

    def parts(self, size: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, scores) of consecutive runs of `size` rows (default `run_size`), in
        row order, each computed when it is reached."""
        size, n = size or self.run_size(), len(self)
        for lo in range(0, n, size):
            yield lo, self.block(lo, min(lo + size, n))

    def part_count(self, size: int | None = None) -> int:
        """How many parts `parts(size)` yields."""
        return -(-len(self) // (size or self.run_size()))

    def all(self, dtype: type = np.float64) -> np.ndarray:
        """The score of every row (float64, or `dtype`), computed run by run."""
        out = spill.empty(len(self), dtype)
        for lo, part in self.parts():
            out[lo:lo + len(part)] = part
        return out


class ZSum(RowRuns):
    """The sum of each score array's z-scores (`fuse_zscores`), for any range of rows: the
    means and spreads are taken once, a range's sum when it is asked for, so a streamed ranking
    holds no per-row sum. `block(lo, hi)` is `fuse_zscores(...)[lo:hi]` bit for bit.

    Args:
        scores: Score arrays of equal length, one score per row each.

    Raises:
        ValueError: no score array, or arrays of different lengths.
    """

    def __init__(self, *scores: np.ndarray) -> None:
        if not scores:
            raise ValueError("fuse_zscores needs at least one score array")
        scores = [np.asarray(values) for values in scores]
        n = len(scores[0])
        self.terms: list[tuple[np.ndarray, float | None, float, float]] = []
        self.kept: list[int] = []            # which of `scores` each term is
        for i, values in enumerate(scores):
            if values.shape != (n,):
                raise ValueError("fuse_zscores: score arrays differ in length")
            fill = None
            if not np.isfinite(values).all():
                low = _finite_min(values)
                fill = 0.0 if low is None else low
            mean, std = moments(values, fill)
            if std != 0:                     # a constant array adds nothing
                self.terms.append((values, fill, mean, std))
                self.kept.append(i)
        self.n = n

    def zscores_at(self, rows: np.ndarray) -> list[np.ndarray | None]:
        """Each score array's z-scores at `rows` (None for a constant array, which adds
        nothing): the parts whose sum is the fused score of those rows."""
        rows = np.asarray(rows, dtype=np.int64)
        out: list[np.ndarray | None] = [None] * (max(self.kept, default=-1) + 1)
        for i, (values, fill, mean, std) in zip(self.kept, self.terms):
            block = np.asarray(values[rows], dtype=np.float64)
            if fill is not None:
                block = np.where(np.isfinite(block), block, fill)
            out[i] = (block - mean) / std
        return out

    def __len__(self) -> int:
        return self.n

    def block(self, lo: int, hi: int) -> np.ndarray:
        """The sums of rows lo..hi (float64)."""
        total = np.zeros(hi - lo, dtype=np.float64)
        for values, fill, mean, std in self.terms:
            total += (_as_float64(values, lo, hi, fill) - mean) / std
        return total


def fuse_zscores(*scores: np.ndarray) -> np.ndarray:
    """Sum of each score array's z-scores (equal weight per scorer, whatever its scale).

    Non-finite entries count as the lowest finite score of their array, so one scorer that
    cannot score a row does not remove it from the ranking of the others. Computed in blocks:
    beyond its float64 result, no per-row copy of a score array is made (`ZSum`).
    """
    return ZSum(*scores).all()
