"""The LMDB text store: sentence id (8-byte big-endian, so keys sort by id) -> JSON record.

A record holds the sentence `text`, its document index `doc`, its position `pos` in the document,
the `source` file, the document key `doc_key` and the input record's other fields under `meta`.
Segments are not stored: they are derived from document offsets for any segment size.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterable, Sequence

import lmdb

from tapt.errors import IndexFormatError

_KEY = struct.Struct(">Q")
_MAP_SIZE = 1 << 40  # address space only: the file grows with the data (sparse on Linux)


def key(sentence_id: int) -> bytes:
    return _KEY.pack(sentence_id)


class TextStoreWriter:
    """Write records in id order; each `put_many` is one transaction."""

    def __init__(self, path: Path) -> None:
        self.env = lmdb.open(str(path), map_size=_MAP_SIZE, subdir=True, sync=False,
                             metasync=False, writemap=False, max_dbs=0)

    def truncate(self, rows: int) -> int:
        """Delete every record with id >= `rows` (an uncommitted tail); returns how many."""
        removed = 0
        with self.env.begin(write=True) as txn:
            cursor = txn.cursor()
            if cursor.set_range(key(rows)):
                while cursor.delete():
                    removed += 1
        self.env.sync(True)
        return removed

    def sync(self) -> None:
        self.env.sync(True)

    def put_many(self, start_id: int, records: Iterable[dict[str, Any]]) -> None:
        with self.env.begin(write=True) as txn:
            for offset, record in enumerate(records):
                payload = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
                txn.put(key(start_id + offset), payload.encode("utf-8"), append=True)

    def close(self) -> None:
        self.env.sync(True)
        self.env.close()


_READERS: dict[tuple[int, int], lmdb.Environment] = {}


def reader_env(path: Path) -> lmdb.Environment:
    """One read-only environment per store file per process (LMDB forbids opening it twice).

    Keyed by the data file's (device, inode), not its path: `tapt index add` renames the old
    generation aside, so one file can be reached under two paths; the cached environment keeps
    the file open, so its inode cannot be reused while the key exists.
    """
    data = path / "data.mdb"
    try:
        stat = data.stat()
    except FileNotFoundError:
        raise IndexFormatError(f"text store {path} is missing") from None
    key_ = (stat.st_dev, stat.st_ino)
    env = _READERS.get(key_)
    if env is None:
        try:
            # Opened as the data file alone: py-lmdb's "already open" guard also keys on
            # lock.mdb's inode when it exists, and a reader of a generation that `add` has since
            # deleted keeps that key after the lock file's inode is reused by an unrelated file.
            env = lmdb.open(str(data), readonly=True, lock=False, subdir=False, max_dbs=0)
        except lmdb.Error as exc:  # e.g. removed between the stat and the open
            raise IndexFormatError(f"text store {path} cannot be opened: {exc}") from exc
        _READERS[key_] = env
    return env


class TextStore:
    """Read-only access; works on read-only directories (no lock file is written)."""

    def __init__(self, path: Path) -> None:
        self.env = reader_env(path)

    def __len__(self) -> int:
        return int(self.env.stat()["entries"])

    def records(self, ids: Sequence[int]) -> list[dict[str, Any]]:
        out = []
        with self.env.begin(buffers=True) as txn:
            for sid in ids:
                raw = txn.get(key(int(sid)))
                if raw is None:
                    raise IndexFormatError(f"text store has no sentence {int(sid)}")
                out.append(json.loads(bytes(raw)))
        return out

    def texts(self, ids: Sequence[int]) -> list[str]:
        return [r["text"] for r in self.records(ids)]
