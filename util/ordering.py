"""Sort keys for scores: float32 values as unsigned integers that sort in the opposite order, so
a ranking with its tie-break packs into one 64-bit integer sort instead of a two-key `lexsort`;
and the first positions of a ranking of any length found block by block (`rank_cut`), without
the ranking or one key per row held: usually by one pass of float comparisons around a
position bracketed by a sample of the scores, else by a radix select over their keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

__all__ = ["RankCut", "descending_bits", "descending_keys", "descending_values", "rank_cut",
           "rows_below_cut", "top_rows"]

BLOCK = 1 << 20            # rows whose keys exist at once in the passes below (~4 MB)
SAMPLE = 1 << 16           # scores a cut's position is bracketed from (a strided sample)
BAND = 1 << 20             # most scores between the brackets held (else the radix select)
_NAN_KEY = np.uint32(0xFFFFFFFF)   # above every number's key: NaN ranks last, as `lexsort` puts it


def descending_bits(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Order-preserving uint32 keys of float32 `values`: a higher value gets a lower key, and
    -0.0 and +0.0 one key (they are equal scores). NaN has no place in this order: callers
    check for it.

    Args:
        values: float32 array of any shape (not written).
        out: uint32 array of the same shape to write the keys into (default: a new one).

    Returns:
        The keys (`out` when given).
    """
    neg = np.negative(values, dtype=np.float32)
    neg += np.float32(0.0)                    # -0.0 -> +0.0
    bits = neg.view(np.int32)
    # IEEE order as unsigned order: negatives flip every bit, positives set the sign bit
    mask = bits >> 31                         # arithmetic: -1 for negatives, 0 otherwise
    mask |= np.int32(-0x80000000)
    if out is None:
        out = np.empty(values.shape, dtype=np.uint32)
    np.bitwise_xor(bits, mask, out=out.view(np.int32))
    return out


def descending_values(keys: np.ndarray) -> np.ndarray:
    """The float32 values of `descending_bits` keys (-0.0 comes back as +0.0).

    Args:
        keys: uint32 keys (or the high halves of packed keys, cast to uint32).

    Returns:
        float32 values.
    """
    keys = np.asarray(keys, dtype=np.uint32)
    bits = np.where(keys >> 31, keys ^ np.uint32(0x80000000), ~keys)
    return np.subtract(np.float32(0), bits.view(np.float32))   # +0.0, never -0.0


@dataclass(frozen=True)
class RankCut:
    """The first `start` positions of a ranking (descending score, ties by ascending row, NaN
    last) as a test on each row's key: rows whose `descending_bits` key is below `key`, and the
    first `ties` rows (by row) whose key equals it.

    Attributes:
        start: How many rows the cut holds.
        key: The key of the row at position `start` (2^32 when `start` is every row).
        ties: How many rows with that key are within the cut.
    """

    start: int
    key: int
    ties: int


def _blocks(scores: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, float32 scores) of consecutive blocks of `scores`."""
    for lo in range(0, len(scores), BLOCK):
        yield lo, np.asarray(scores[lo:lo + BLOCK]).astype(np.float32, copy=False)


def _key_blocks(scores: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, uint32 keys) of consecutive blocks of `scores`, NaN given the last key."""
    for lo, values in _blocks(scores):
        keys = descending_bits(values)
        keys[np.isnan(values)] = _NAN_KEY
        yield lo, keys


def rank_cut(scores: np.ndarray, start: int) -> RankCut:
    """Where the first `start` positions of the ranking of `scores` end: usually from one pass
    of float comparisons between brackets a sample of the scores gives (`_bracketed_cut`),
    else from two passes of a radix select over the scores' keys (the high 16 bits, then the
    low 16 bits of the one bucket holding position `start`): memory for one block, 2^16 counts
    and at most `BAND` scores, whatever the rows.

    Args:
        scores: float32 scores (or values a float32 holds exactly), any length; not written.
        start: A position in the ranking (clipped to 0..len(scores)).

    Returns:
        The cut.
    """
    n = len(scores)
    start = min(max(int(start), 0), n)
    if start == n:
        return RankCut(start, 1 << 32, 0)
    found = _bracketed_cut(scores, start)
    if found is not None:
        return found
    high, before_high = _select_digit(scores, start, shift=16, prefix=None)
    low, before_low = _select_digit(scores, start - before_high, shift=0, prefix=high)
    return RankCut(start, (high << 16) | low, start - before_high - before_low)


def _bracketed_cut(scores: np.ndarray, start: int) -> RankCut | None:
    """`rank_cut` from one pass of float comparisons: the score at position `start` is
    bracketed by order statistics of a strided sample of `SAMPLE` scores (four standard
    deviations of their rank either side), the scores between the brackets are held and
    sorted. None when the brackets miss the position or hold more than `BAND` scores (NaN at
    the position, a sample unlike the rest, many ties): the radix select is exact always."""
    n = len(scores)
    step = max(1, n // SAMPLE)
    sample = np.asarray(scores[::step]).astype(np.float32)
    drawn = len(sample)
    sample = np.sort(sample[~np.isnan(sample)])[::-1]
    if not len(sample):
        return None
    share = start / n
    margin = int(4 * np.sqrt(drawn * share * (1 - share))) + 2
    at = int(share * drawn)
    high = sample[at - margin] if at - margin >= 0 else np.float32(np.inf)
    low = sample[at + margin] if at + margin < len(sample) else np.float32(-np.inf)
    above, band, held = 0, [], 0
    for _, values in _blocks(scores):
        above += int(np.count_nonzero(values > high))
        between = values[(values >= low) & (values <= high)]
        held += len(between)
        if held > BAND:
            return None
        band.append(between)
    between = np.concatenate(band) if band else np.empty(0, dtype=np.float32)
    if not above <= start < above + len(between):
        return None
    value = np.sort(between)[::-1][start - above]
    greater = above + int(np.count_nonzero(between > value))
    return RankCut(start, int(descending_bits(np.float32([value]))[0]), start - greater)


def _select_digit(scores: np.ndarray, position: int, shift: int, prefix: int | None
                  ) -> tuple[int, int]:
    """(digit, keys before it): the 16-bit digit at `shift` of the key at `position` in the
    sorted keys whose high 16 bits are `prefix` (all keys when None), and how many of those
    keys have a lower digit."""
    counts = np.zeros(1 << 16, dtype=np.int64)
    for _, keys in _key_blocks(scores):
        if prefix is not None:
            keys = keys[(keys >> 16) == prefix]
        counts += np.bincount((keys >> shift) & 0xFFFF, minlength=1 << 16)
    cumulative = np.cumsum(counts)
    digit = int(np.searchsorted(cumulative, position, side="right"))
    before = int(cumulative[digit - 1]) if digit else 0
    return digit, before


def _cut_blocks(scores: np.ndarray, cut: RankCut) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first row, float32 scores, within the cut) of consecutive blocks of `scores`: float
    comparisons with the cut's score (-0.0 and +0.0 compare equal, as their keys are; NaN
    above nothing), NaN tested apart where the cut ends among the NaN."""
    ties_left = cut.ties
    at_nan = cut.key == int(_NAN_KEY)
    value = None if at_nan or cut.key >= 1 << 32 else descending_values(np.uint32([cut.key]))[0]
    for lo, values in _blocks(scores):
        if cut.key >= 1 << 32:                  # the cut holds every row
            yield lo, values, np.ones(len(values), dtype=bool)
            continue
        nan = np.isnan(values) if at_nan else None
        inside = ~nan if at_nan else values > value
        if ties_left:
            tied = np.flatnonzero(nan if at_nan else values == value)[:ties_left]
            inside[tied] = True
            ties_left -= len(tied)
        yield lo, values, inside


def rows_below_cut(scores: np.ndarray, cut: RankCut, ordinals: np.ndarray) -> np.ndarray:
    """The rows outside `cut` (positions `cut.start` onwards of the ranking) taken by their
    position among those rows in row order: `np.sort(rank(scores)[cut.start:])[ordinals]`, in
    one pass and without the ranking.

    Args:
        scores: The scores `cut` was found in.
        cut: `rank_cut(scores, start)`.
        ordinals: Sorted positions in 0..len(scores) - start.

    Returns:
        int64 rows, ascending (one per ordinal).
    """
    ordinals = np.asarray(ordinals, dtype=np.int64)
    out = np.empty(len(ordinals), dtype=np.int64)
    seen = taken = 0
    for lo, _, inside in _cut_blocks(scores, cut):
        if taken == len(ordinals):
            break
        outside = len(inside) - int(np.count_nonzero(inside))
        stop = int(np.searchsorted(ordinals, seen + outside, side="left"))
        if stop > taken:                        # only blocks holding a drawn row are listed
            out[taken:stop] = np.flatnonzero(~inside)[ordinals[taken:stop] - seen] + lo
        taken, seen = stop, seen + outside
    if taken != len(ordinals):
        raise ValueError(f"ordinals beyond the {seen} rows outside the cut")
    return out


def top_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The first `k` rows of the ranking of `scores` (descending score, ties by ascending row,
    NaN last), in ranking order: `rank(scores)[:k]`, from three passes over the scores and the
    k rows' keys, not a sort or a copy of every score.

    Args:
        scores: float32 scores (or values a float32 holds exactly); not written.
        k: How many rows (clipped to 0..len(scores)).

    Returns:
        int64 rows.
    """
    cut = rank_cut(scores, k)
    rows, keys = [], []
    for lo, values, inside in _cut_blocks(scores, cut):
        at = np.flatnonzero(inside)
        rows.append(at + lo)
        keys.append(descending_keys(values[at]))
    if not rows:
        return np.empty(0, dtype=np.int64)
    rows_, keys_ = np.concatenate(rows), np.concatenate(keys)
    return rows_[np.lexsort((rows_, keys_))]


def descending_keys(values: np.ndarray) -> np.ndarray:
    """Sort keys of float32 (uint32 keys) or float64 values (uint64 keys) in `rank`'s order of
    the values: a higher value gets a lower key, -0.0 and +0.0 one key, NaN the highest key
    (last). Ties are left to the caller (by row).

    Args:
        values: float32 or float64 values (any other dtype is taken as float32); not written.

    Returns:
        uint32 keys (uint64 for float64 values), one per value.
    """
    values = np.asarray(values)
    if values.dtype != np.float64:
        f = values.astype(np.float32, copy=False)
        keys = descending_bits(f)
        keys[np.isnan(f)] = _NAN_KEY
        return keys
    neg = np.negative(values)
    neg += 0.0                                # -0.0 -> +0.0
    bits = neg.view(np.int64)
    mask = bits >> 63
    mask |= np.int64(-0x8000000000000000)
    keys = np.empty(values.shape, dtype=np.uint64)
    np.bitwise_xor(bits, mask, out=keys.view(np.int64))
    keys[np.isnan(values)] = np.uint64(0xFFFFFFFFFFFFFFFF)
    return keys
