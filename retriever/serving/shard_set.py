"""What one serving actor opens of an index: its own shards, checked, and nothing else hashed.

`ShardSubset` opens an index as `Index` does (one directory handle, so one generation; the top
manifest and the shard list checked), but opens and verifies only the shards it is given: each
one's `shard.json` against the SHA-256 the top manifest records for it, then its files against
the checksums in that `shard.json` (`integrity.check_checksum`: small files hashed, large ones
hashed once per version of their content and remembered by a stamp named by that content).
Every file, whatever its size, is hashed once per version of its content (`integrity.hashing`),
so an actor restarted on the same files verifies them from its stamps in milliseconds; the
offsets and token counts are hashed on every open. Another actor's shards are neither opened
nor hashed.

The one exception is the scoring grid (`actors` module docstring): an actor scores the
`grid`-row blocks that start in its shards, and the last may run on into the next shard(s).
Those rows are read from the next shard's `embeddings.npy` (or `codes.npy`), whose header and
length are checked here and whose content the actor that owns it verifies; its document
offsets and token counts (to cut segments there) are small and hashed here. Every row scored
is still checked where it is read (cosines in [-1, 1]).

What an actor needs only for its requests, not to start, is made ready after the start
(`Ready`): torch imported for the float16 and int8 scans, its rows copied into RAM, its FAISS
parts loaded (their content verified with the shard's other files at the start; their headers
and stored ids checked when loaded); each piece at once where a request needs it first.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tapt.indexer.index import Index
from tapt.indexer.store import integrity
from tapt.indexer.store.manifest import (
    CODES,
    DOCS,
    EMBEDDINGS,
    FAISS,
    MANIFEST_NAME,
    SHARDS,
    TOKENS,
    read_shard_manifest,
)
from tapt.indexer.store.shard_open import Shard, open_shard
from tapt.indexer.store.shards import RowView, grid_ranges
from tapt.indexer.store.text_store import damaged
from tapt.util.cache import writable_cache
from tapt.util.files import regular_file

log = logging.getLogger(__name__)


class ShardSubset(Index):
    """The shards `own` of the index at `path`, opened and checked; the rows [`start`, `stop`)
    mapped (its own shards' rows and, past their end, the next shards' rows the scoring grid
    reaches).

    Args:
        path: The index directory.
        own: Positions of this actor's shards in the index's shard list (consecutive).
        rows: The rows [start, stop) it scores (`actors.span`; (0, 0): none).

    Raises:
        IndexFormatError: the index or one of these shards is damaged or incomplete.
    """

    def __init__(self, path: str | Path, own: Sequence[int], rows: tuple[int, int]) -> None:
        self.own = [int(s) for s in own]
        self.rows = (int(rows[0]), int(rows[1]))
        # every file once per version of its content, where a stamp can be kept (else as any
        # open: files up to 64 MiB on every open)
        once = writable_cache(integrity.STAMPS) is not None
        with integrity.hashing(0, True) if once else contextlib.nullcontext():
            super().__init__(path)

    def _open_snapshot(self, dir_fd: int) -> None:
        base, label, dim, emb_dtype, entries = self._read_top(dir_fd)
        try:
            starts = [(int(e["row_offset"]), int(e["rows"]), int(e["doc_offset"]),
                       int(e["documents"])) for e in entries]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise damaged(label, f"{MANIFEST_NAME} lacks its counts, shards or model ({exc})"
                          ) from exc
        row_at = doc_at = 0
        for entry, (row, n, doc, documents) in zip(entries, starts):
            if row != row_at or doc != doc_at or n < 0 or documents < 0:
                raise damaged(label, f"{MANIFEST_NAME}: shard {entry.get('name')} starts at row "
                                     f"{row:,} / document {doc:,}, not {row_at:,} / {doc_at:,}")
            row_at, doc_at = row_at + n, doc_at + documents
        self._check_counts(label, row_at, doc_at)
        self._rows_total, self._dim, self._dtype = row_at, dim, np.dtype(emb_dtype)
        self.all_row_offsets = np.array([s[0] for s in starts] + [row_at], dtype=np.int64)
        if any(not 0 <= s < len(entries) for s in self.own):
            raise damaged(label, f"{MANIFEST_NAME} lists {len(entries)} shards, the actor "
                                 f"serves shard {max(self.own)}")
        self.shards: list[Shard] = [open_shard(self, base, entries[s], dim, emb_dtype, label)
                                    for s in self.own]
        self.opened = [s.name for s in self.shards]
        self._check_vocabulary(base, label)
        last = self.own[-1] + 1 if self.own else 0
        self.row_offsets = (np.array([s.row_offset for s in self.shards]
                                     + [int(self.all_row_offsets[last])], dtype=np.int64)
                            if self.shards else np.zeros(1, np.int64))
        # the shards that hold the rows: its own, then those the grid reaches past them
        start, stop = self.rows
        parts: list[dict[str, Any]] = []
        self.reached: list[str] = []
        for s in range(len(entries)):
            lo, hi = int(self.all_row_offsets[s]), int(self.all_row_offsets[s + 1])
            if hi <= start or lo >= stop or hi == lo:
                continue
            if s in self.own:
                shard = self.shards[self.own.index(s)]
                parts.append({"row": lo, "embeddings": shard.embeddings, "codes": shard.codes,
                              "tokens": shard.tokens, "docs": shard.docs})
            else:
                parts.append(self._reach(base, entries[s], dim, emb_dtype, label))
                self.reached.append(str(entries[s]["name"]))
        self.held_parts = parts

    def _reach(self, base: Path, entry: dict[str, Any], dim: int, emb_dtype: str,
               label: Path) -> dict[str, Any]:
        """Another shard's rows, mapped: its `shard.json` against the top manifest's checksum,
        the headers and lengths of its arrays, its (small) offsets and token counts hashed;
        its embeddings' content is verified by the actor that owns the shard."""
        name, n, documents = str(entry["name"]), int(entry["rows"]), int(entry["documents"])
        directory, where = base / SHARDS / name, f"{SHARDS}/{name}/"
        manifest = read_shard_manifest(directory, label, entry.get("shard_sha256"))
        checksums = manifest.get("checksums") or {}
        found: dict[str, Any] = {}
        wanted = [(EMBEDDINGS, emb_dtype, (n, dim)), (TOKENS, np.int32, (n,)),
                  (DOCS, np.int64, (documents + 1,))]
        if manifest.get("codes") and (directory / CODES).is_file():
            wanted.append((CODES, np.int8, (n, dim)))
        for file, dtype, shape in wanted:
            with integrity.array_errors(where + file, label):
                found[file] = np.load(regular_file(directory / file), mmap_mode="r",
                                      allow_pickle=False)
            integrity.check_npy(found[file], directory / file, where + file, label, dtype, shape)
        for file in (DOCS, TOKENS):
            integrity.check_checksum(directory / file, checksums.get(file), where + file, label,
                                     once=True)
        docs = np.array(found[DOCS])
        integrity.check_offsets(docs, n, documents, label, where + DOCS)
        integrity.check_tokens(found[TOKENS], label, where + TOKENS)
        return {"row": int(entry["row_offset"]), "embeddings": found[EMBEDDINGS],
                "codes": found.get(CODES), "tokens": found[TOKENS], "docs": docs}

    @property
    def n_sentences(self) -> int:
        """Sentences of the whole index (the top manifest's count)."""
        return self._rows_total

    @property
    def dim(self) -> int:
        """Dimensions of a row (the top manifest's model)."""
        return self._dim

    def held(self, what: str) -> Any:
        """The rows [start, stop) of `what` ("embeddings", "codes", "tokens") as one view
        (None: codes the index lacks)."""
        start, stop = self.rows
        if what == "codes" and any(s.codes is None for s in self.shards):
            return None
        if not self.held_parts or stop <= start:
            dtype = np.int8 if what == "codes" else self._dtype
            return np.empty((0, self._dim) if what != "tokens" else (0,), dtype=dtype)
        arrays = [p[what] for p in self.held_parts]
        if any(a is None for a in arrays):
            return None
        first = self.held_parts[0]["row"]
        view = RowView(arrays)
        return view.window(start - first, stop - first)


def checked_by_shard(paths: Sequence[str]) -> dict[str, list[str]]:
    """The index files among `paths` (`.../shards/NAME/FILE`) by shard name: each shard's
    files, sorted.

    Args:
        paths: File paths (`integrity.checked_files`).

    Returns:
        {shard name: [file names relative to the shard's directory]}.
    """
    out: dict[str, set[str]] = {}
    for path in paths:
        parts = Path(path).parts
        for i in range(len(parts) - 2, -1, -1):
            if parts[i] == SHARDS:
                out.setdefault(parts[i + 1], set()).add("/".join(parts[i + 2:]))
                break
    return {name: sorted(files) for name, files in out.items()}


class Ready:
    """Steps an actor needs for its requests but not to start, each run once: all in one
    background thread after the start (`start`), or any one at once by the first request that
    needs it (`get`), whichever comes first; a step that failed raises its error on every `get`.

    Args:
        steps: {name: function}, run in this order by the background thread.
    """

    def __init__(self, steps: dict[str, Callable[[], Any]]) -> None:
        self._steps = dict(steps)
        self._locks = {name: threading.Lock() for name in steps}
        self._done: dict[str, tuple[bool, Any]] = {}
        self.seconds: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._all = threading.Event()

    def get(self, name: str) -> Any:
        """The result of step `name`, run now (in this thread) if it has not run yet."""
        if name not in self._done:
            with self._locks[name]:
                if name not in self._done:
                    began = time.perf_counter()
                    try:
                        self._done[name] = (True, self._steps[name]())
                    except Exception as exc:  # noqa: BLE001 - raised on every get
                        self._done[name] = (False, exc)
                    self.seconds[name] = round(time.perf_counter() - began, 3)
        ok, value = self._done[name]
        if not ok:
            raise value
        return value

    def start(self) -> None:
        """Run every step not run yet in one background thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tapt-serve-ready",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            for name in self._steps:
                try:
                    self.get(name)
                except Exception:  # noqa: BLE001 - kept for the request that needs it
                    log.debug("serving: step %s failed", name, exc_info=True)
        finally:
            self._all.set()

    def wait(self, timeout: float | None = None) -> dict[str, float]:
        """Wait until every step has run (starting them if `start` was not called).

        Args:
            timeout: Seconds to wait at most (None: as long as it takes).

        Returns:
            Seconds each step took, by name (a step not run yet is absent).
        """
        self.start()
        self._all.wait(timeout)
        return dict(self.seconds)


def process_age() -> float | None:
    """Seconds since this process started (from /proc; None elsewhere): in a Ray actor, the
    worker process's start before the actor's own."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            started = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return round(uptime - started / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError):
        return None


def ready_steps(server: Any, hold: str) -> Ready:
    """A serving actor's steps after its start (`actors.ShardServer`: its `rows`, `codes` and
    `index`), in this order: "torch" imports torch where its rows or codes are float16 or int8
    (what a scan waits for first), "held" copies its rows (`hold` rows) or codes (`hold`
    codes) into RAM, "parts" loads its shards' FAISS parts (each checked: length, header,
    stored ids) as (part, base of its ids). Parts whose content no checksum verified at the
    start (a shard that records none for its part) are loaded and checked at once: a damaged
    part stops the start as before."""

    def held() -> None:
        if hold == "rows":
            server.rows = np.array(server.rows)
        elif server.codes is not None:
            server.codes = np.array(server.codes)

    def parts() -> list[tuple[Any, int]]:
        faiss = server.index.faiss
        return [(part, 0 if faiss.global_ids else base)
                for part, base in zip(faiss.parts, faiss.row_offsets)]

    ready = Ready({"torch": lambda: import_scan_backend([server.rows, server.codes]),
                   "held": held, "parts": parts})
    if any(FAISS not in (s.extra.get("checksums") or {}) for s in server.index.shards):
        ready.get("parts")
    return ready


def import_scan_backend(arrays: Sequence[Any]) -> bool:
    """Import torch, which the scans of float16 and int8 rows use (`arrays._cast_scores`),
    where one of `arrays` is such rows and torch is installed: the first request then does not
    wait for the import (seconds per process).

    Returns:
        Whether torch is imported.
    """
    if not any(getattr(a, "dtype", None) in (np.float16, np.int8) for a in arrays):
        return False
    if importlib.util.find_spec("torch") is None:
        return False
    import torch  # noqa: F401 - imported for the scans

    return True


def segments_of(parts: Sequence[dict[str, Any]], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (global rows) and tokens of the segments at `size` of consecutive shards, from
    their document offsets and token counts: segments never cross shards, so they are those of
    `Index.segments(size)` over the same rows.

    Args:
        parts: Consecutive shards: {"row": first row, "docs": local document offsets, "tokens":
            tokens per sentence}.
        size: Sentences per segment.

    Returns:
        (offsets (one more than the segments), tokens per segment (int32)).
    """
    from tapt.indexer.reading.splitter import segment_offsets

    offsets, tokens = [], []
    for part in parts:
        seg = segment_offsets(part["docs"], size)
        offsets.append(seg[:-1] + part["row"])
        tokens.append(np.add.reduceat(np.asarray(part["tokens"]), seg[:-1], dtype=np.int64
                                      ).astype(np.int32) if len(seg) > 1
                      else np.empty(0, np.int32))
    if not parts:
        return np.zeros(1, np.int64), np.empty(0, np.int32)
    end = int(parts[-1]["row"]) + len(parts[-1]["tokens"])
    return (np.concatenate(offsets + [np.array([end], np.int64)]).astype(np.int64),
            np.concatenate(tokens))


def span(index, shards: Sequence[int], grid: int) -> tuple[int, int]:
    """The rows [start, stop) an actor of these shards holds: the `grid`-row blocks that start
    in them (`shards.grid_ranges`); (0, 0) when none does."""
    offsets = np.array([s.row_offset for s in index.shards] + [index.n_sentences])
    ranges = grid_ranges(offsets, grid)
    mine = [r for s in shards for r in ranges[s]]
    return (mine[0][0], mine[-1][1]) if mine else (0, 0)
