"""The user cache directory shared by tapt's caches (task embeddings, exported ONNX models).

A cache only ever saves time: an entry is used only when its checksum holds (a damaged one is
rebuilt, with a warning), and a cache directory that cannot be written (read-only, a file, on a
full disk) is skipped with one warning per process; every command still works without it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

# The trailer's SHA-256 covers the file's name (its cache key) with the payload, so an entry
# copied or renamed onto another key fails its check instead of answering for that key.
_MAGIC = b"TAPTSUM2"
_OLD_MAGIC = b"TAPTSUM1"          # the payload alone: read as absent (recomputed), not damaged
_TRAILER = len(_MAGIC) + 32
_WARNED: set[str] = set()
_WRITABLE: dict[Path, bool] = {}


def _digest(path: Path, payload: bytes) -> bytes:
    return hashlib.sha256(path.name.encode("utf-8", "surrogateescape") + b"\0" + payload).digest()


def cache_dir() -> Path | None:
    """`$TAPT_CACHE_DIR`, else `$XDG_CACHE_HOME/tapt` or `~/.cache/tapt`; None when set to `off`."""
    raw = os.environ.get("TAPT_CACHE_DIR")
    if raw is not None:
        return None if raw.strip().lower() in ("", "off", "0", "none") else Path(raw)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tapt"


def warn_once(key: str, message: str, *args: object) -> None:
    """Log a warning the first time `key` is seen in this process."""
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(message, *args)


def _unusable(root: Path, exc: OSError) -> None:
    warn_once(f"cache:{root}", "the tapt cache %s cannot be written (%s); continuing without "
              "caching (set TAPT_CACHE_DIR to a writable directory, or to off)", root,
              exc.strerror or exc)


def writable_cache(sub: str) -> Path | None:
    """`<cache>/<sub>`, created and tested for writing once per process; None (after one
    warning) when the cache is off or cannot be written."""
    root = cache_dir()
    if root is None:
        return None
    path = root / sub
    if path not in _WRITABLE:
        from tapt.util.safety import enclosing_index

        index = enclosing_index(root)
        if index is not None:        # nothing is ever written inside an index
            warn_once(f"cache-in-index:{root}", "the tapt cache %s lies inside the index %s; "
                      "continuing without caching (set TAPT_CACHE_DIR outside it)", root, index)
            _WRITABLE[path] = False
            return None
        try:
            path.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=path)
            os.close(fd)
            os.unlink(probe)
            _WRITABLE[path] = True
        except OSError as exc:
            _unusable(root, exc)
            _WRITABLE[path] = False
    return path if _WRITABLE[path] else None


def readable_cache(sub: str) -> Path | None:
    """`<cache>/<sub>` when it exists as a directory (a read-only cache is still read)."""
    root = cache_dir()
    if root is None:
        return None
    path = root / sub
    try:
        return path if path.is_dir() else None
    except OSError:
        return None


def read_checked(path: Path, limit: int = 1 << 26) -> bytes | None:
    """The payload of a cache file written by `write_checked`; None when there is none, and
    None with a warning when it is not a regular file of at most `limit` payload bytes (a FIFO
    or a link to a device is never read: it would block or never end) or its checksum does not
    hold (the caller rebuilds it).

    Args:
        path: The cache entry.
        limit: Most payload bytes an entry of this kind can hold.

    Returns:
        The payload, or None.
    """
    from tapt.util.files import read_regular

    try:
        data = read_regular(path, limit + _TRAILER, follow=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        warn_once(f"cache-read:{path}", "cache entry %s cannot be read (%s); recomputing it "
                  "without replacing it", path, exc.strerror or exc)
        return None
    payload, trailer = data[:-_TRAILER], data[-_TRAILER:]
    if len(data) >= _TRAILER and trailer[:len(_OLD_MAGIC)] == _OLD_MAGIC:
        return None
    if (len(data) < _TRAILER or trailer[:len(_MAGIC)] != _MAGIC
            or _digest(path, payload) != trailer[len(_MAGIC):]):
        log.warning("cache entry %s is damaged or not this key's (its checksum does not match); "
                    "recomputing it", path)
        return None
    return payload


def _foreign(path: Path) -> bool:
    """Whether `path` exists as something tapt never writes in a cache (a symbolic link, a
    FIFO, a device, a directory): such an entry is left as it is, never replaced."""
    try:
        return not stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def write_checked(path: Path, payload: bytes) -> bool:
    """Write `payload` and its SHA-256 atomically to `path`; False (after one warning) when
    the cache cannot be written."""
    from tapt.errors import StorageError
    from tapt.util.files import atomic_write

    if _foreign(path):
        warn_once(f"cache-foreign:{path}", "cache entry %s is not a regular file; leaving it as "
                  "it is (not cached)", path)
        return False
    try:
        with atomic_write(path, "wb") as fh:
            fh.write(payload)
            fh.write(_MAGIC + _digest(path, payload))
        return True
    except StorageError as exc:        # a full disk: the answer is the same, only not cached
        cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else None
        warn_once(f"cache-write:{path.parent.parent}", "the tapt cache %s cannot hold more "
                  "entries (%s); continuing without caching them", path.parent.parent,
                  (cause.strerror if cause is not None else None) or exc)
    except OSError as exc:
        _unusable(path.parent, exc)
    return False
