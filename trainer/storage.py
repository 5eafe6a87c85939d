"""Write failures of a training run as one StorageError.

torch.save and safetensors do not raise OSError when the disk fills: torch raises
`RuntimeError: [enforce fail at inline_container.cc ...] unexpected pos` (the OSError, when
torch wrote through a Python file, is only its context), safetensors its own error whose text
holds "No space left on device (os error 28)". Every write of a run goes through `writing`, so
each becomes the one message `tapt.util.files.storage_error` gives for an OSError.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Any, Iterator

from tapt.errors import StorageError, TaptError
from tapt.util.files import storage_error

# what the libraries' own errors say for ENOSPC, EDQUOT and EFBIG
_FULL_TEXT = ("no space left on device", "os error 28", "disk quota exceeded", "os error 122",
              "file too large", "os error 27")


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError behind `exc` (itself, its cause or its context), if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _disk_full(path: Path) -> bool:
    """True when the filesystem holding `path` has no block left for an ordinary user."""
    for folder in (path, *path.parents):
        try:
            return os.statvfs(folder).f_bavail == 0
        except OSError:
            continue
    return False


def write_failure(exc: BaseException, path: str | Path) -> StorageError:
    """A one-line StorageError for an error raised while `path` was written.

    Args:
        exc: The error raised by the writer (OSError, torch's RuntimeError, safetensors' error).
        path: The file or folder being written.

    Returns:
        The error to raise (from `exc`).
    """
    path = Path(path)
    found = _os_error(exc)
    if found is not None and found.errno is not None:
        return storage_error(found, path)
    text = str(exc).lower()
    if any(t in text for t in _FULL_TEXT) or _disk_full(path):
        return storage_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), path)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return StorageError(f"writing {path} failed: {first}")


def _write_errors() -> tuple[type[BaseException], ...]:
    kinds: list[type[BaseException]] = [OSError, RuntimeError]
    with contextlib.suppress(ImportError):
        from safetensors import SafetensorError

        kinds.append(SafetensorError)
    return tuple(kinds)


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Turn a failed write inside the block into StorageError (`write_failure`); the caller
    removes what the block left."""
    try:
        yield
    except TaptError:
        raise
    except _write_errors() as exc:
        raise write_failure(exc, path) from exc


def torch_save(obj: Any, path: str | Path) -> None:
    """`torch.save` through a Python file, so that a full disk surfaces as its OSError."""
    import torch

    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())
