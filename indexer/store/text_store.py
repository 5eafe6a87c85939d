"""The LMDB text store: sentence id (8-byte big-endian, so keys sort by id) -> JSON record.

A record holds the sentence `text`, its document index `doc`, its position `pos` in the document,
the `source` file, the document key `doc_key` and the input record's other fields under `meta`.
Segments are not stored: they are derived from document offsets for any segment size.

From index format 2 every value is a 4-byte CRC32 (big-endian) of the key and the JSON, then the
JSON: a flipped byte in a record, or a record under another id, fails loudly when it is read.
Before any read, the data file's length is checked against the environment's last page: LMDB
maps the file, and a page past the end of a truncated file would kill the process (SIGBUS).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import lmdb

from tapt.errors import IndexFormatError, StorageError
from tapt.util.files import open_regular, storage_error

_KEY = struct.Struct(">Q")
_CRC = struct.Struct(">I")
_MAP_SIZE = 1 << 40  # address space only: the file grows with the data (sparse on Linux)
DATA = "data.mdb"


class DamagedRecord(ValueError):
    """A stored record whose checksum or JSON does not hold."""


def key(sentence_id: int) -> bytes:
    return _KEY.pack(sentence_id)


def encode_record(sentence_id: int, record: dict[str, Any], checksummed: bool = True) -> bytes:
    """The stored bytes of one record: CRC32(key + JSON) + JSON (format 2), or the JSON alone."""
    payload = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if not checksummed:
        return payload
    return _CRC.pack(zlib.crc32(payload, zlib.crc32(key(sentence_id)))) + payload


def decode_record(sentence_id: int, raw, checksummed: bool = True,
                  key_bytes: bytes | None = None) -> dict[str, Any]:
    """The record stored under `sentence_id` (`raw`: its bytes or an LMDB buffer);
    DamagedRecord when its bytes do not hold."""
    view = memoryview(raw)
    payload = view
    if checksummed:
        if len(view) < _CRC.size:
            raise DamagedRecord(f"text record {sentence_id} is cut short")
        payload = view[_CRC.size:]
        seed = zlib.crc32(key_bytes if key_bytes is not None else key(sentence_id))
        if _CRC.unpack_from(view)[0] != zlib.crc32(payload, seed):
            raise DamagedRecord(f"text record {sentence_id} fails its checksum")
    try:
        record = json.loads(str(payload, "utf-8"))  # a str skips json's encoding detection
    except (UnicodeDecodeError, ValueError) as exc:
        raise DamagedRecord(f"text record {sentence_id} is not valid JSON") from exc
    if type(record) is not dict or type(record.get("text")) is not str:
        raise DamagedRecord(f"text record {sentence_id} has no text")
    return record


def damaged(label: str | Path | None, what: str, cause: BaseException | None = None
            ) -> IndexFormatError:
    """The one error for damage found while reading an index: what, and what to run. A file
    this user may not read (`cause` a PermissionError) is no damage: the error says so, and
    what to give."""
    if isinstance(cause, PermissionError):
        where = f"index {label}" if label is not None else "the index"
        file = what.split(" (")[0].removesuffix(" cannot be read")
        return IndexFormatError(f"{where}: {file} cannot be read "
                                f"({cause.strerror or cause}): it is not damaged, this user may "
                                f"not read it; give read access to the index's files (chmod -R "
                                f"u+rX {label if label is not None else 'IDX'})")
    if label is None:
        return IndexFormatError(f"the index is damaged: {what}; run tapt index verify on it "
                                "(then rebuild it from its corpus, or repair what it names)")
    return IndexFormatError(f"index {label} is damaged: {what}; run tapt index verify {label} "
                            "(then rebuild the index from its corpus, or repair what it names)")


def _write_error(exc: lmdb.Error, path: Path) -> StorageError:
    """LMDB reports OS errors in its message only: a full or read-only disk by its strerror."""
    text = str(exc)
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
        if os.strerror(code) in text:
            return storage_error(OSError(code, os.strerror(code)), path)
    if os.strerror(errno.EIO) in text and _nearly_full(path):
        # LMDB reports a write that found no space as EIO: say what the user can fix.
        return storage_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), path)
    if isinstance(exc, lmdb.MapFullError):
        return storage_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), path)
    return StorageError(f"writing the text store {path} failed: {text}")


def _nearly_full(path: Path) -> bool:
    for where in (path, *path.parents):
        try:
            return shutil.disk_usage(where).free < (1 << 20)
        except OSError:
            continue
    return False


class TextStoreWriter:
    """Write records in id order; each `put_many` is one transaction.

    Disk-full and read-only failures become StorageError (the build keeps what it committed).
    """

    def __init__(self, path: Path, checksummed: bool = True) -> None:
        self.path = path
        self.checksummed = checksummed
        try:
            self.env = lmdb.open(str(path), map_size=_MAP_SIZE, subdir=True, sync=False,
                                 metasync=False, writemap=False, max_dbs=0)
        except lmdb.Error as exc:
            raise _write_error(exc, path) from exc

    def truncate(self, rows: int) -> int:
        """Delete every record with id >= `rows` (an uncommitted tail); returns how many."""
        removed = 0
        try:
            with self.env.begin(write=True) as txn:
                cursor = txn.cursor()
                if cursor.set_range(key(rows)):
                    while cursor.delete():
                        removed += 1
            self.env.sync(True)
        except lmdb.Error as exc:
            raise _write_error(exc, self.path) from exc
        return removed

    def sync(self) -> None:
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise _write_error(exc, self.path) from exc

    def put_many(self, start_id: int, records: Iterable[dict[str, Any]]) -> None:
        try:
            with self.env.begin(write=True) as txn:
                for offset, record in enumerate(records):
                    sid = start_id + offset
                    txn.put(key(sid), encode_record(sid, record, self.checksummed), append=True)
        except lmdb.Error as exc:
            raise _write_error(exc, self.path) from exc

    def close(self) -> None:
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise _write_error(exc, self.path) from exc
        finally:
            self.env.close()


_READERS: dict[tuple[int, int], lmdb.Environment] = {}


def check_length(env: lmdb.Environment, data: Path, label: str | Path) -> None:
    """Refuse a data file shorter than the environment's last page (LMDB would SIGBUS)."""
    need = (int(env.info()["last_pgno"]) + 1) * int(env.stat()["psize"])
    size = data.stat().st_size
    if size < need:
        raise damaged(label, f"{data.parent.name}/{DATA} is {size:,} bytes but its last page "
                             f"ends at byte {need:,} (the file was cut short)")


def reader_env(path: Path, label: str | Path | None = None) -> lmdb.Environment:
    """One read-only environment per store file per process (LMDB forbids opening it twice),
    checked for length every time it is handed out.

    Keyed by the data file's (device, inode), not its path: `tapt index add` renames the old
    generation aside, so one file can be reached under two paths; the cached environment keeps
    the file open, so its inode cannot be reused while the key exists.
    """
    label = label if label is not None else path.parent
    data = path / DATA
    try:
        with open_regular(data) as fh:   # a FIFO would block LMDB's open, a device never end
            stat = os.fstat(fh.fileno())
    except FileNotFoundError:
        raise IndexFormatError(f"index {label} is incomplete: text store {path.name}/{DATA} is "
                               "missing; rebuild the index from its corpus") from None
    except OSError as exc:
        raise damaged(label, f"text store {path.name}/{DATA} cannot be read "
                             f"({exc.strerror or exc})", exc) from exc
    key_ = (stat.st_dev, stat.st_ino)
    cached = _READERS.get(key_)
    if cached is None:
        try:
            # Opened as the data file alone: py-lmdb's "already open" guard also keys on
            # lock.mdb's inode when it exists, and a reader of a generation that `add` has since
            # deleted keeps that key after the lock file's inode is reused by an unrelated file.
            env = lmdb.open(str(data), readonly=True, lock=False, subdir=False, max_dbs=0)
        except lmdb.Error as exc:  # not an LMDB file, cut to nothing, removed meanwhile
            raise damaged(label, f"text store {path.name} cannot be opened ({exc})") from exc
        try:
            check_length(env, data, label)
        except BaseException:
            env.close()
            raise
        _READERS[key_] = env
        return env
    check_length(cached, data, label)
    return cached


def close_reader(path: Path) -> None:
    """Close this process's reader of a store (before the same file is opened for writing)."""
    try:
        stat = (path / DATA).stat()
    except OSError:
        return
    cached = _READERS.pop((stat.st_dev, stat.st_ino), None)
    if cached is not None:
        cached.close()


class TextStore:
    """Read-only access; works on read-only directories (no lock file is written).

    Args:
        path: The `text.lmdb` directory.
        checksummed: Records carry CRC32s (index format 2 and later).
        label: How to name the index in errors.
    """

    def __init__(self, path: Path, checksummed: bool = True, label: str | Path | None = None
                 ) -> None:
        self.label = label if label is not None else path.parent
        self.env = reader_env(path, self.label)
        self.checksummed = checksummed

    def __len__(self) -> int:
        return int(self.env.stat()["entries"])

    def iter_records(self, ids: Iterable[int]) -> Iterator[dict[str, Any]]:
        """The records of `ids` one by one, each checked (one read transaction)."""
        try:
            with self.env.begin(buffers=True) as txn:
                for sid in ids:
                    k = _KEY.pack(sid)
                    raw = txn.get(k)
                    if raw is None:
                        raise damaged(self.label, f"the text store has no sentence {int(sid)}")
                    yield decode_record(sid, raw, self.checksummed, k)
        except DamagedRecord as exc:
            raise damaged(self.label, str(exc)) from exc
        except lmdb.Error as exc:
            raise damaged(self.label, f"the text store cannot be read ({exc})") from exc

    def records(self, ids: Iterable[int]) -> list[dict[str, Any]]:
        """The records of `ids`, each checked; IndexFormatError names the first damaged one."""
        return list(self.iter_records(ids))

    def texts(self, ids: Sequence[int] | Iterable[int]) -> list[str]:
        """The texts of `ids`, each record checked (records are not kept: no GC churn)."""
        return [r["text"] for r in self.iter_records(ids)]
