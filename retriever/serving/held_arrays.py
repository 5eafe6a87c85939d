"""The actor's side of `remote_scores`: the score arrays a serving actor (`actors.ShardServer`)
keeps by name, and the operations the driver's handles ask of them (`ACTOR_OPS`, run by
`ShardServer.held`; `held_cut` by `ShardServer.held_top`). Every answer is O(positions asked),
a few numbers, or a budget's cut; only `values` returns an actor's whole array."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from tapt.retriever.ranking import topcut
from tapt.util.ordering import descending_keys

# --- in the actor --------------------------------------------------------------------------

@dataclass
class Held:
    """One named array in an actor: its first global row, its values and, once asked for, its
    sort keys (`ordering.descending_keys`) sorted, with the local rows in that order (stable:
    equal keys in row order)."""

    lo: int
    values: np.ndarray
    sorted_keys: np.ndarray | None = field(default=None, repr=False)
    order: np.ndarray | None = field(default=None, repr=False)

    def keys(self) -> tuple[np.ndarray, np.ndarray]:
        if self.sorted_keys is None:
            keys = descending_keys(self.values)
            self.order = np.argsort(keys, kind="stable")
            self.sorted_keys = keys[self.order]
        return self.sorted_keys, self.order

    def local(self, lo: int, hi: int) -> np.ndarray:
        return self.values[max(lo - self.lo, 0):max(hi - self.lo, 0)]


def _store(server) -> dict[str, Held]:
    return server.__dict__.setdefault("_held", {})


def _put(server, name: str, lo: int, values: np.ndarray) -> tuple[int, int, str]:
    _store(server)[name] = Held(int(lo), values)
    return int(lo), int(lo) + len(values), values.dtype.str


def _op_rows(server, name: str, scorer, on: str = "rows") -> tuple[int, int, str]:
    """The scorer's scores of the rows this actor scores (or of their int8 codes)."""
    return _put(server, name, server.start,
                np.asarray(scorer(server.rows if on == "rows" else server.codes)))


def _op_lexicon(server, name: str, score_shard) -> tuple[int, int, str]:
    """`score_shard` of each of this actor's shards' lexical ids, in row order."""
    found = server.lexicon_scores(score_shard)
    lo = found[0][0] if found else 0
    values = (np.concatenate([part for _, part in found]) if found
              else np.empty(0, np.float32))
    return _put(server, name, lo, values)


def _op_piece(server, name: str, lo: int, hi: int) -> np.ndarray:
    return np.array(_store(server)[name].local(lo, hi))


def _resolved(pieces: Sequence[tuple[int, Any]]) -> list[tuple[int, np.ndarray]]:
    """Pieces whose values are Ray object references (another actor's `piece`), fetched here."""
    import ray

    refs = [p for _, p in pieces if isinstance(p, ray.ObjectRef)]
    got = iter(ray.get(refs)) if refs else iter(())
    return sorted(((int(s), next(got) if isinstance(p, ray.ObjectRef) else p)
                   for s, p in pieces), key=lambda sp: sp[0])


def _joined(server, name: str, lo: int, hi: int, pieces) -> np.ndarray:
    """Rows [lo, hi) of `name`: this actor's own, and the pieces handed over."""
    entry = _store(server).get(name)
    parts = _resolved(list(pieces))
    if entry is not None:
        own = entry.local(lo, hi)
        if len(own):
            parts.append((max(lo, entry.lo), own))
    parts.sort(key=lambda sp: sp[0])
    row = lo
    for start, part in parts:
        if start != row:
            raise ValueError(f"{name}: rows {row}.. are missing or held twice")
        row += len(part)
    if row != hi:
        raise ValueError(f"{name}: rows end at {row}, not {hi}")
    return np.concatenate([p for _, p in parts]) if parts else np.empty(0, np.float32)


def _op_assemble(server, name: str, source: str, lo: int, hi: int, pieces
                 ) -> tuple[int, int, str]:
    return _put(server, name, lo, _joined(server, source, lo, hi, pieces))


def _op_finite(server, name: str) -> tuple[bool, float | None]:
    values = _store(server)[name].values
    finite = np.isfinite(values)
    if finite.all():
        return True, (float(values.min()) if len(values) else None)
    kept = values[finite]
    return False, (float(kept.min()) if len(kept) else None)


def _op_leaf_sums(server, name: str, leaves, fill: float | None, mean: float | None
                  ) -> list[float]:
    """`np.add.reduce` of each leaf's rows as float64 (non-finite ones as `fill`), or of their
    squared deviations from `mean`: what `moments` sums per leaf in one process."""
    out = []
    for lo, hi, pieces in leaves:
        x = np.asarray(_joined(server, name, lo, hi, pieces), dtype=np.float64)
        if fill is not None:
            x = np.where(np.isfinite(x), x, fill)
        if mean is None:
            out.append(float(np.add.reduce(x)))
        else:
            d = x - np.float64(mean)
            out.append(float(np.add.reduce(np.multiply(d, d, out=d))))
    return out


def _op_zsum(server, out: str, lo: int, hi: int, terms) -> tuple[int, int, str]:
    """`moments.ZSum.block` of this actor's rows: the sum of each term's z-scores (float64)."""
    total = np.zeros(max(hi - lo, 0), dtype=np.float64)
    store = _store(server)
    for name, fill, mean, std in terms:
        entry = store[name]
        if entry.lo != lo or len(entry.values) != len(total):
            raise ValueError(f"{name} is not held on rows {lo}..{hi}")
        x = np.asarray(entry.values, dtype=np.float64)
        if fill is not None:
            x = np.where(np.isfinite(x), x, fill)
        total += (x - mean) / std
    return _put(server, out, lo, total)


def _op_cast(server, out: str, name: str, dtype: str) -> tuple[int, int, str]:
    entry = _store(server)[name]
    return _put(server, out, entry.lo, entry.values.astype(np.dtype(dtype)))


def _op_count_above(server, name: str, threshold: float) -> int:
    return int(np.count_nonzero(_store(server)[name].values > threshold))


def _op_count_le(server, name: str, keys: np.ndarray) -> np.ndarray:
    """How many of this actor's keys are <= each of `keys`."""
    sorted_keys, _ = _store(server)[name].keys()
    return np.searchsorted(sorted_keys, keys, side="right").astype(np.int64)


def _op_count_le_sum(server, name: str, keys: np.ndarray, others: Sequence[Any]) -> np.ndarray:
    """`count_le` here plus the other actors' (references to their `count_le` answers, fetched
    here, actor to actor): one answer for every actor (int32 where it fits)."""
    import ray

    total = _op_count_le(server, name, keys)
    for part in ray.get(list(others)) if others else ():
        total += part
    return total.astype(np.int32) if not len(total) or total.max() < 1 << 31 else total


def _op_count_eq(server, name: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys below, keys equal) of each of `keys`."""
    sorted_keys, _ = _store(server)[name].keys()
    lt = np.searchsorted(sorted_keys, keys, side="left")
    return lt.astype(np.int64), (np.searchsorted(sorted_keys, keys, side="right") - lt
                                 ).astype(np.int64)


def _op_range_keys(server, name: str, lo: np.ndarray, hi: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(range, key, count) of this actor's distinct keys in each range of keys [lo, hi]."""
    sorted_keys, _ = _store(server)[name].keys()
    start = np.searchsorted(sorted_keys, lo, side="left")
    stop = np.searchsorted(sorted_keys, hi, side="right")
    ranges, keys, counts = [], [], []
    for i, (a, b) in enumerate(zip(start.tolist(), stop.tolist())):
        if b > a:
            k, c = np.unique(sorted_keys[a:b], return_counts=True)
            ranges.append(np.full(len(k), i, dtype=np.int32))
            keys.append(k)
            counts.append(c.astype(np.int32 if len(sorted_keys) < 1 << 31 else np.int64))
    if not ranges:
        return np.empty(0, np.int32), sorted_keys[:0], np.empty(0, np.int32)
    return np.concatenate(ranges), np.concatenate(keys), np.concatenate(counts)


def _op_tied_rows(server, name: str, keys: np.ndarray, ties: np.ndarray) -> np.ndarray:
    """The global row of the `ties`-th (0-based, in row order) row with each key."""
    entry = _store(server)[name]
    sorted_keys, order = entry.keys()
    at = np.searchsorted(sorted_keys, keys, side="left") + np.asarray(ties, dtype=np.int64)
    return order[at].astype(np.int64) + entry.lo


def _inside(entry: Held, key: int | None, ties: int) -> np.ndarray:
    """Which local rows are inside a cut: key below `key`, or among the first `ties` rows (in
    row order) with key `key` (None: every row)."""
    keys = descending_keys(entry.values)
    if key is None:
        return np.ones(len(keys), dtype=bool)
    key = keys.dtype.type(key)
    inside = keys < key
    if ties:
        inside[np.flatnonzero(keys == key)[:ties]] = True
    return inside


def _op_inside(server, name: str, key: int | None, ties: int) -> tuple[np.ndarray, np.ndarray]:
    """(global rows, keys) of the rows inside the cut."""
    entry = _store(server)[name]
    rows = np.flatnonzero(_inside(entry, key, ties))
    return rows + entry.lo, descending_keys(entry.values[rows])


def _op_outside(server, name: str, key: int | None, ties: int, ordinals: np.ndarray
                ) -> np.ndarray:
    """The global rows at `ordinals` among the rows outside the cut, in row order."""
    entry = _store(server)[name]
    rows = np.flatnonzero(~_inside(entry, key, ties))
    return rows[np.asarray(ordinals, dtype=np.int64)].astype(np.int64) + entry.lo


def _op_set(server, name: str, rows: np.ndarray, values: np.ndarray) -> None:
    entry = _store(server)[name]
    entry.values[np.asarray(rows, dtype=np.int64) - entry.lo] = values
    entry.sorted_keys = entry.order = None


def _op_values(server, name: str) -> tuple[int, np.ndarray]:
    entry = _store(server)[name]
    return entry.lo, entry.values


def _op_free(server, names: Sequence[str]) -> None:
    for name in names:
        _store(server).pop(name, None)


def _op_names(server) -> list[str]:
    return sorted(_store(server))


def _op_at(server, name: str, rows: np.ndarray) -> np.ndarray:
    """The values at global `rows` (ascending, all of them this actor's)."""
    entry = _store(server)[name]
    return np.asarray(entry.values[np.asarray(rows, dtype=np.int64) - entry.lo])


ACTOR_OPS: dict[str, Callable[..., Any]] = {
    "rows": _op_rows, "lexicon": _op_lexicon, "piece": _op_piece, "assemble": _op_assemble,
    "finite": _op_finite, "leaf_sums": _op_leaf_sums, "zsum": _op_zsum, "cast": _op_cast,
    "count_above": _op_count_above, "count_le": _op_count_le, "count_eq": _op_count_eq,
    "count_le_sum": _op_count_le_sum, "range_keys": _op_range_keys,
    "tied_rows": _op_tied_rows, "inside": _op_inside, "outside": _op_outside, "set": _op_set,
    "values": _op_values, "free": _op_free, "names": _op_names, "at": _op_at}


def held_cut(server, name: str, cut: topcut.Cut, size: int, first: int, of: str
             ) -> tuple[topcut.Candidates, list[topcut.Piece], tuple[int, int, int]]:
    """The cut of the segments of an actor's rows of `name` ranked by their mean held score,
    and the pieces of the segments its rows begin or end inside (as `ShardServer.top`; `of`:
    the array's layout, "rows" or "shards")."""
    entry = _store(server)[name]
    lo, hi = entry.lo, entry.lo + len(entry.values)
    offsets, seg, measure, check = server._stream(cut, size, first, lo, hi, of)
    stream = topcut.SegmentStream(offsets, seg, measure, cut, lo)
    for start in range(0, len(entry.values), topcut.BLOCK):
        stream.feed(entry.values[start:start + topcut.BLOCK])
    kept, pieces = stream.finish()
    return kept, pieces, check
