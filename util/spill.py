"""Arrays of one value per corpus row or segment that a process fills and reads, kept on a
scratch file instead of in its own memory once they are large.

A selection's segment view and its per-row scores grow with the corpus (4-16 bytes a row): at
10^9 rows they are gigabytes, where everything else a selection holds grows with its budget.
`empty` gives such an array as a plain `numpy.ndarray` over a shared memory map of a scratch
file: the kernel keeps its pages in the page cache while they are used and writes them back
(and drops them) under memory pressure, as it does for the index's memory-mapped embeddings.

The file is unlinked before it is used (`tempfile.TemporaryFile`), so nothing is left behind,
not even when the process is killed, and nothing but this anonymous file is ever written; its
blocks are reserved up front (`os.posix_fallocate`, or zeros written where the platform has
none), so a full disk is found when the array is made (the array is then made in memory, with
one warning), never as a signal when a page is written. `$TAPT_SCRATCH_DIR` names the directory (default: the system's temporary directory,
`$TMPDIR`); `$TAPT_SPILL_BYTES` the smallest array spilled (default 16 MiB: smaller ones stay
in memory, where they cost less than a file).
"""

from __future__ import annotations

import logging
import mmap
import os
import tempfile

import numpy as np

from tapt.errors import InputError
from tapt.util.cache import warn_once
from tapt.util.sizes import parse_memory

log = logging.getLogger(__name__)

DEFAULT_SPILL_BYTES = 16 << 20
_SPILLED = [0]


def spill_bytes() -> int:
    """The smallest array (in bytes) `empty` puts on a scratch file (`$TAPT_SPILL_BYTES`;
    `off` keeps every array in memory)."""
    raw = os.environ.get("TAPT_SPILL_BYTES", "").strip()
    if not raw:
        return DEFAULT_SPILL_BYTES
    if raw.lower() in ("off", "none", "never"):
        return -1
    if raw == "0":
        return 0
    try:
        return parse_memory(raw)
    except InputError as exc:
        raise InputError(f"TAPT_SPILL_BYTES={raw[:24]!r}: use a size like 16M, 0 (every "
                         "array) or off (none)") from exc


def spilled_total() -> int:
    """Bytes of the scratch-file arrays `empty` has made in this process (live or not)."""
    return _SPILLED[0]


def scratch_dir() -> str:
    """Where scratch files are made: `$TAPT_SCRATCH_DIR`, else the temporary directory."""
    return os.environ.get("TAPT_SCRATCH_DIR") or tempfile.gettempdir()


def _reserve(fh, nbytes: int, chunk: int = 1 << 20) -> None:
    """Give the file `nbytes` of allocated blocks (a write to its map can then never fail):
    `posix_fallocate`, or zeros written where the platform has none (macOS)."""
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fh.fileno(), 0, nbytes)
        return
    zeros = bytes(chunk)
    for at in range(0, nbytes, chunk):
        fh.write(zeros[:min(chunk, nbytes - at)])
    fh.flush()


def empty(n: int, dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised 1-d array of `n` values of `dtype`: on an unlinked scratch file when it
    holds at least `spill_bytes()` bytes, in memory otherwise (or when no scratch file can be
    made: one warning per directory, the answer is the same).

    Args:
        n: Its length.
        dtype: Its dtype.

    Returns:
        A writable `numpy.ndarray` (never a `numpy.memmap`: it behaves as any array).
    """
    dtype = np.dtype(dtype)
    nbytes = int(n) * dtype.itemsize
    limit = spill_bytes()
    if limit < 0 or nbytes < max(limit, 1):
        return np.empty(int(n), dtype=dtype)
    where = scratch_dir()
    try:
        with tempfile.TemporaryFile(dir=where, prefix="tapt-spill-") as fh:
            _reserve(fh, nbytes)
            buffer = mmap.mmap(fh.fileno(), nbytes, access=mmap.ACCESS_WRITE)
    except (OSError, ValueError) as exc:
        warn_once(f"spill:{where}", "no scratch file of %d MB in %s (%s): keeping such arrays "
                  "in memory (set TAPT_SCRATCH_DIR to a directory with room)", nbytes >> 20,
                  where, getattr(exc, "strerror", None) or exc)
        return np.empty(int(n), dtype=dtype)
    _SPILLED[0] += nbytes
    # the mapping keeps the file's blocks after its descriptor is closed; the array keeps the
    # mapping (its `base`) as long as it or a view of it lives
    return np.frombuffer(buffer, dtype=dtype, count=int(n))
