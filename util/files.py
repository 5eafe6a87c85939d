"""File hashing and crash-safe writes: the one place tapt hashes a file or replaces one.

Every file tapt writes goes to a temporary name in the target's directory, is flushed to disk,
and is renamed over the target only when complete, so a reader or a crash sees the old file or
the new one, never half of one.

Every cache entry and index file tapt reads is opened with `open_regular` (or `read_regular`,
`regular_file`): only a regular file of a bounded size is read, so a named pipe never blocks a
command and a link to `/dev/zero` never exhausts its memory.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator

from tapt.errors import StorageError

_BLOCK = 1 << 22
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_REFUSED = (errno.EROFS, errno.EACCES, errno.EPERM)
# Bound on a JSON record tapt reads whole (manifests, stage records, cache records): far above
# any it writes, far below what would exhaust memory.
JSON_LIMIT = 1 << 26
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


class IrregularFileError(OSError):
    """A file tapt reads is not a regular file (a FIFO, a device, a directory, a symbolic link
    where none is followed) or is larger than any tapt writes there. An OSError, so every reader
    that turns an unreadable file into a warning (caches) or into damage (indexes) does so;
    `strerror` says what the file is."""

    def __init__(self, path: str | Path, problem: str) -> None:
        super().__init__(errno.EINVAL, problem, str(path))

    def __str__(self) -> str:   # the name, not the path: it may be a /proc/self/fd/N/... one
        return f"{os.path.basename(self.filename)} {self.strerror}"


def real_path(path: str | Path) -> Path:
    """`path` made absolute, `~` expanded and every symbolic link resolved as far as it goes:
    `Path.resolve` raises RuntimeError on a loop of links (Python < 3.13), this never raises;
    what is looked at afterwards (a directory, a file) then fails with its own OSError (ELOOP),
    which the caller reports.

    Args:
        path: The path.

    Returns:
        The absolute path.
    """
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "of another kind")


def open_regular(path: str | Path, limit: int | None = None, follow: bool = True) -> BinaryIO:
    """Open a file for reading in binary only when it is a regular file of at most `limit` bytes.

    Opened without blocking (a FIFO would wait forever for a writer) and checked on the open
    handle (`fstat`), so a symbolic link to a device or a FIFO is refused as what it points to.

    Args:
        path: The file.
        limit: Most bytes the file may hold (None: any size).
        follow: Follow a symbolic link in the last component (False: refuse the link itself).

    Returns:
        The open file, positioned at its start.

    Raises:
        FileNotFoundError: the file does not exist.
        IrregularFileError: it is not a regular file, or is larger than `limit`.
        OSError: it cannot be opened.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow and os.path.islink(path):
            raise IrregularFileError(path, "is a symbolic link, not a regular file") from None
        if exc.errno == errno.ENXIO:             # a socket cannot be opened at all
            raise IrregularFileError(path, "is a socket, not a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IrregularFileError(path, f"is {_kind(info.st_mode)}, not a regular file")
        if limit is not None and info.st_size > limit:
            raise IrregularFileError(path, f"holds {info.st_size:,} bytes, more than the "
                                           f"{limit:,} tapt ever writes there")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, limit: int | None = JSON_LIMIT, follow: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (checked as `open_regular` does;
    a file that grows past `limit` while it is read is refused too).

    Args:
        path: The file.
        limit: Most bytes the file may hold (None: any size).
        follow: Follow a symbolic link in the last component.

    Returns:
        The file's bytes.

    Raises:
        FileNotFoundError: the file does not exist.
        IrregularFileError: it is not a regular file, or is larger than `limit`.
        OSError: it cannot be read.
    """
    with open_regular(path, limit, follow) as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise IrregularFileError(path, f"holds more than the {limit:,} bytes tapt ever writes "
                                       "there")
    return data


def regular_file(path: str | Path, limit: int | None = None, follow: bool = True) -> Path:
    """`path`, once it is known to be a regular file of at most `limit` bytes: for readers that
    open a file by its name themselves (numpy's memory maps, LMDB, FAISS).

    Raises:
        FileNotFoundError: the file does not exist.
        IrregularFileError: it is not a regular file, or is larger than `limit`.
    """
    open_regular(path, limit, follow).close()
    return Path(path)


def storage_error(exc: OSError, path: str | Path, doing: str = "writing") -> StorageError:
    """A one-line StorageError for an OSError met while writing `path`.

    Args:
        exc: The error the operating system raised.
        path: The file or directory being written.
        doing: What was being done, for the message ("writing", "building").

    Returns:
        The error to raise (from `exc`).
    """
    if exc.errno in _FULL:
        return StorageError(f"disk full while {doing} {path}; nothing was replaced: free space "
                            "and run the command again")
    if exc.errno in _REFUSED:
        return StorageError(f"cannot write {path}: {exc.strerror} (read-only or not yours); "
                            "choose a writable location")
    return StorageError(f"{doing} {path} failed: {exc.strerror or exc}")


def sha256_file(path: str | Path, progress: bool = False) -> str:
    """SHA-256 of a file's bytes, read in 4 MiB blocks.

    Args:
        path: The file.
        progress: Show a progress bar in bytes (for multi-GB files).

    Returns:
        The hex digest.
    """
    from tqdm.auto import tqdm

    path = Path(path)
    digest = hashlib.sha256()
    with open_regular(path) as fh, tqdm(total=os.fstat(fh.fileno()).st_size, unit="B",
                                        unit_scale=True, desc=f"sha256 {path.name}",
                                        disable=not progress, leave=False) as bar:
        hash_stream(fh, digest, on_block=bar.update)
    return digest.hexdigest()


def sha256_files(paths: Iterable[str | Path]) -> str:
    """One SHA-256 over the bytes of several files, in the order given."""
    digest = hashlib.sha256()
    for path in paths:
        with open_regular(path) as fh:
            hash_stream(fh, digest)
    return digest.hexdigest()


def hash_stream(fh: BinaryIO, *digests: Any, on_block: Callable[[int], Any] | None = None) -> None:
    """Feed every byte of an open binary stream to each of `digests` (hashlib objects), in 4 MiB
    blocks; `on_block(n)` is told the size of each block (a progress bar's update)."""
    while block := fh.read(_BLOCK):
        for digest in digests:
            digest.update(block)
        if on_block is not None:
            on_block(len(block))


def fsync_path(path: str | Path) -> None:
    """fsync a file or a directory (a directory's fsync makes a rename inside it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: str | Path) -> Path:
    """Create a directory and its parents if missing; a full or read-only disk becomes
    StorageError."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(exc, exc.filename or path, "creating") from exc
    return path


@contextlib.contextmanager
def parents_of(path: str | Path) -> Iterator[Path]:
    """Create the missing parent directories of `path` for the block; if the block fails,
    remove again those it created (when still empty), so a failed write leaves nothing."""
    parent = Path(path).parent
    missing = []
    for folder in (parent, *parent.parents):
        if folder.exists():
            break
        missing.append(folder)
    ensure_dir(parent)
    try:
        yield parent
    except BaseException:
        for folder in missing:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def temporary_sibling(path: str | Path, tag: str = "tmp") -> Path:
    """A hidden name beside `path` that no other process writes (`.NAME.tag-PID`)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{tag}-{os.getpid()}")


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8"
                 ) -> Iterator[Any]:
    """Open a temporary sibling of `path` for writing; on success fsync it and rename it over
    `path`, on any error remove it and leave `path` as it was.

    Args:
        path: The file to create or replace.
        mode: "w" (text) or "wb" (bytes).
        encoding: Text encoding (ignored in binary mode).

    Yields:
        The open file object.

    Raises:
        StorageError: the disk is full or the location is not writable (nothing is replaced).
    """
    path = Path(path)
    tmp = temporary_sibling(path)
    try:
        fh = open(tmp, mode, encoding=None if "b" in mode else encoding)  # noqa: SIM115 - held across the yield
    except OSError as exc:
        raise storage_error(exc, path) from exc
    try:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        os.replace(tmp, path)
    except OSError as exc:
        raise storage_error(exc, path) from exc
    finally:
        if not fh.closed:
            with contextlib.suppress(OSError):  # closing flushes: a full disk fails again
                fh.close()
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write `obj` as indented JSON to `path` atomically (temporary name, fsync, rename)."""
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=2, ensure_ascii=False)
        fh.write("\n")
