"""Reading a sharded index as one: global row ids over the shards' own files.

A shard holds rows [row_offset, row_offset + rows) of the index; its files are numbered locally
(row 0 is global row `row_offset`). `RowView` makes the shards' memory-mapped arrays look like one
array to the code that scores them (the slices and row lists the methods use), `ShardedStore`
does the same for the text stores, and both also hand out the shards one by one
(`RowView.parts`), the unit a process per shard (a Ray actor) works on.

Scoring over a `RowView` is computed on a grid of global row blocks (`blocks`): a block that
straddles two shards is copied into one buffer, so every block holds the same rows whatever the
sharding, and BLAS (whose results depend on a block's shape) gives a 3-shard index exactly the
scores of a 1-shard index of the same corpus.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import lmdb
import numpy as np

from tapt.errors import InputError
from tapt.indexer.store.text_store import _KEY, DamagedRecord, TextStore, damaged, decode_record


def locate(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The shard of each global row (`offsets`: row offsets of the shards, plus the total)."""
    return np.searchsorted(offsets, rows, side="right") - 1


class RowView:
    """A read-only array of rows concatenated from per-shard arrays (memory maps, in order).

    Supports `len`, `shape`, `dtype`, integer, slice, integer-array and boolean indexing on
    the first axis, and `np.asarray` (which copies everything: meant for small indexes).
    """

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        if not parts:
            raise ValueError("a row view needs at least one part")
        self._parts = list(parts)
        self.offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
        self.dtype = np.dtype(parts[0].dtype)
        self.row_shape = tuple(parts[0].shape[1:])

    # --- array protocol

    @property
    def shape(self) -> tuple[int, ...]:
        return (int(self.offsets[-1]), *self.row_shape)

    @property
    def ndim(self) -> int:
        return 1 + len(self.row_shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = (np.asarray(self._parts[0]) if len(self._parts) == 1
               else np.concatenate([np.asarray(p) for p in self._parts]))
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"<RowView {self.shape} {self.dtype} over {len(self._parts)} shard(s)>"

    # --- the shards

    @property
    def n_parts(self) -> int:
        return len(self._parts)

    def parts(self) -> Iterator[tuple[int, np.ndarray]]:
        """(global row offset, that shard's array) for every shard, in order."""
        for offset, part in zip(self.offsets[:-1].tolist(), self._parts):
            yield int(offset), part

    def window(self, start: int, stop: int) -> "np.ndarray | RowView":
        """Rows [start, stop) without a copy: a slice of one shard's array, or a row view of
        the slices of the shards the range spans."""
        stop = min(stop, len(self))
        first = bisect.bisect_right(self.offsets, start) - 1
        last = bisect.bisect_right(self.offsets, max(start, stop - 1)) - 1
        if stop <= start or first == last:
            return self._range(start, stop)
        return RowView([self._parts[s][max(start, int(self.offsets[s])) - int(self.offsets[s]):
                                       min(stop, int(self.offsets[s + 1])) - int(self.offsets[s])]
                        for s in range(first, last + 1)])

    def blocks(self, size: int) -> Iterator[tuple[int, np.ndarray]]:
        """(start, rows[start:start + size]) over the global grid of `size`-row blocks."""
        for start in range(0, len(self), size):
            yield start, self[start:start + size]

    # --- indexing

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            rows = self[key[0]]
            return rows[(slice(None), *key[1:])] if np.ndim(rows) > len(self.row_shape) else \
                rows[key[1:]]
        if isinstance(key, (int, np.integer)):
            i = int(key)
            n = len(self)
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(f"row {key} is out of range for {n} rows")
            s = bisect.bisect_right(self.offsets, i) - 1
            return self._parts[s][i - int(self.offsets[s])]
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                return self[np.arange(start, stop, step)]
            return self._range(start, stop)
        rows = np.asarray(key)
        if rows.dtype == bool:
            if rows.shape != (len(self),):
                raise IndexError("a boolean index must have one value per row")
            rows = np.flatnonzero(rows)
        return self.take(rows)

    def _range(self, start: int, stop: int) -> np.ndarray:
        if stop <= start:
            return self._parts[0][0:0]
        first = bisect.bisect_right(self.offsets, start) - 1
        last = bisect.bisect_right(self.offsets, stop - 1) - 1
        if first == last:
            base = int(self.offsets[first])
            return self._parts[first][start - base:stop - base]
        pieces = []
        for s in range(first, last + 1):
            base = int(self.offsets[s])
            pieces.append(self._parts[s][max(start, base) - base:min(stop, int(self.offsets[s + 1]))
                                         - base])
        return np.concatenate(pieces)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The given global rows, in the order given (duplicates allowed)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        n = len(self)
        if rows.size and (rows.min() < -n or rows.max() >= n):
            raise IndexError(f"row index out of range for {n} rows")
        rows = np.where(rows < 0, rows + n, rows)
        if len(self._parts) == 1:
            return self._parts[0][rows]
        out = np.empty((len(rows), *self.row_shape), dtype=self.dtype)
        if len(rows) > 1 and (rows[1:] >= rows[:-1]).all():
            # ascending (what rescoring asks for): each shard's rows are one run of `rows`
            bounds = np.searchsorted(rows, self.offsets).tolist()
            for s, part in enumerate(self._parts):
                if bounds[s + 1] > bounds[s]:
                    np.take(part, rows[bounds[s]:bounds[s + 1]] - int(self.offsets[s]), axis=0,
                            out=out[bounds[s]:bounds[s + 1]])
            return out
        shard = locate(self.offsets, rows)
        for s in np.unique(shard).tolist():
            sel = np.flatnonzero(shard == s)
            out[sel] = self._parts[s][rows[sel] - int(self.offsets[s])]
        return out


def grid_ranges(offsets: np.ndarray, size: int) -> list[list[tuple[int, int]]]:
    """The global grid of `size`-row blocks, per shard: the blocks that start in it (a block
    that straddles a boundary belongs to the shard it starts in). What a worker per shard
    scores so that the union is exactly the grid `RowView.blocks` walks."""
    n = int(offsets[-1])
    out: list[list[tuple[int, int]]] = [[] for _ in range(len(offsets) - 1)]
    for start in range(0, n, size):
        s = int(locate(offsets, np.array([start]))[0])
        out[s].append((start, min(n, start + size)))
    return out


@dataclass
class StoreShard:
    """One shard's text store, where its rows and documents start."""

    store: TextStore
    row_offset: int
    doc_offset: int
    name: str


class ShardedStore:
    """The text records of every shard under their global row ids (read-only).

    Records are stored under local ids with local document numbers; they are handed out with
    the global document number (`doc`), exactly as an unsharded index stores them.
    """

    def __init__(self, shards: Sequence[StoreShard], label: str | Path,
                 rows: int | None = None) -> None:
        self.shards = list(shards)
        self.label = label
        self.rows = rows        # the index's row count, when known: ids past it are misuse
        self._starts = [s.row_offset for s in self.shards]

    def __len__(self) -> int:
        return sum(len(s.store) for s in self.shards)

    def _shard_of(self, sid: int) -> int:
        return bisect.bisect_right(self._starts, sid) - 1

    def iter_records(self, ids: Iterable[int]) -> Iterator[dict[str, Any]]:
        """The records of `ids` one by one, each checked; IndexFormatError names the first
        damaged or missing one, InputError an id outside the index's rows."""
        txns: dict[int, Any] = {}
        try:
            for sid in ids:
                sid = int(sid)
                if self.rows is not None and not 0 <= sid < self.rows:
                    raise InputError(f"row {sid} is out of range: the index has {self.rows:,} "
                                     f"sentences (rows 0 to {self.rows - 1:,})", param="ids")
                s = self._shard_of(sid) if sid >= 0 else -1
                if s < 0:
                    raise damaged(self.label, f"the text store has no sentence {sid}")
                shard = self.shards[s]
                txn = txns.get(s)
                if txn is None:
                    txn = txns[s] = shard.store.env.begin(buffers=True)
                local = sid - shard.row_offset
                k = _KEY.pack(local)
                raw = txn.get(k)
                if raw is None:
                    raise damaged(self.label, f"the text store has no sentence {sid}")
                try:
                    record = decode_record(local, raw, shard.store.checksummed, k)
                except DamagedRecord as exc:
                    where = (f" (shard {shard.name}, row {local})" if len(self.shards) > 1
                             else "")
                    raise damaged(self.label, str(exc).replace(f"record {local}",
                                                               f"record {sid}") + where) from exc
                if shard.doc_offset and isinstance(record.get("doc"), int):
                    record["doc"] += shard.doc_offset
                yield record
        except lmdb.Error as exc:
            raise damaged(self.label, f"the text store cannot be read ({exc})") from exc
        finally:
            for txn in txns.values():
                txn.abort()

    def records(self, ids: Iterable[int]) -> list[dict[str, Any]]:
        return list(self.iter_records(ids))

    def texts(self, ids: Iterable[int]) -> list[str]:
        return [r["text"] for r in self.iter_records(ids)]
