"""The checks an index passes every time it is opened, before it answers anything.

Cheap for any size: file lengths, array headers (of every array file, lexical ids and document
hashes included), document offsets, token counts, the text store's last page, FAISS header and id
ranges. Then the SHA-256 its manifests record, for every file they record one for (a shard's
`shard.json`: its arrays, text store, FAISS part, lexical ids and document hashes; the top
manifest: the vocabulary):

- files up to 64 MiB: hashed on every open (milliseconds), as long as the files an open hashes
  that way stay within 64 MiB in all (`opening`: an index of many shards does not hash
  gigabytes of small files on every open); past that, as larger files;
- larger files (and every file past that sum): hashed on their first open after they changed
  (an edit, a partial write, a copy that does not keep the modification time: size or mtime
  differ), with a progress note; the verdict is remembered in the user cache (`verified/`), so
  later opens cost nothing;
- `docs.npy` and `tokens.npy` (they cut every selection's segments): hashed once per version
  of their content whatever their size and the policy, and their structure (offsets that rise,
  counts of at least one token) checked whenever their content is not vouched for already
  (`vouched`: without a cache, on every open).

A file tapt itself just wrote (build, add, reindex, repair, upgrade) is remembered without
hashing again, with a stamp whatever its size: the first open of a new index in another process
hashes small files only up to its budget, not every file the build wrote. Without a writable
cache, larger files are not hashed on open. A stamp names the file's content (the SHA-256
its manifest records, its size and modification time), never its inode or device: one node's
stamp holds for the same file seen from another node through a shared cache (whose inode
numbers differ), and a stamp written for one file never vouches for another of different
content. Within one process a verdict is also keyed by inode and change time (a file replaced
under the same name is hashed again).

`TAPT_HASH_ON_OPEN` changes that: `all` hashes every file on every open, a size such as `256M`
hashes files up to it on every open and larger ones never, `0` hashes only `docs.npy` and
`tokens.npy` (once per version). Whatever is not hashed is still checked where it is read:
every text record by its CRC32, every cosine against [-1, 1], every gathered embedding row for
unit length, every FAISS result against the stored embeddings. `tapt index verify` hashes everything, always.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
from collections import deque
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from tapt.errors import IndexFormatError, InputError
from tapt.indexer.store.text_store import damaged
from tapt.util.cache import read_checked, readable_cache, writable_cache, write_checked
from tapt.util.files import IrregularFileError, open_regular, sha256_file
from tapt.util.sizes import parse_memory

log = logging.getLogger(__name__)

SMALL_FILE = 64 << 20
_VERIFIED: set[tuple[Any, ...]] = set()
# every file compared with its checksum in this process, in order (the latest 100,000)
_CHECKED: deque[str] = deque(maxlen=100_000)
STAMPS = "verified"


def checked_files() -> list[str]:
    """The paths this process has compared with their recorded checksums (hashed, or known
    intact from a stamp), in the order it did: what a serving actor reports it verified.

    Returns:
        The paths, as they were given (an index's files through its directory handle).
    """
    return list(_CHECKED)


_POLICY: ContextVar[tuple[int | None, bool] | None] = ContextVar("tapt_hash_policy",
                                                                 default=None)
_OPEN_BUDGET: ContextVar[list[int] | None] = ContextVar("tapt_open_budget", default=None)


@contextmanager
def opening(budget: int = SMALL_FILE) -> Iterator[None]:
    """One open of an index: the files hashed on every open because they are small are hashed
    that way only while they sum to at most `budget` bytes; the rest are hashed once per
    version of their content, as larger files are."""
    token = _OPEN_BUDGET.set([int(budget)])
    try:
        yield
    finally:
        _OPEN_BUDGET.reset(token)


@contextmanager
def hashing(limit: int | None, once: bool) -> Iterator[None]:
    """Opens in this block hash as `hash_policy` would return (`limit`, `once`), unless
    `TAPT_HASH_ON_OPEN` is set (the user's word wins). A serving actor opens its shards with
    (0, True): every file hashed once per version of its content, then known from its stamp;
    a served index's driver with (0, False): only the offsets and token counts hashed, as every
    shard's content is verified by the actor that serves it.

    Args:
        limit: Files up to this size are hashed on every open (None: all).
        once: Larger files are hashed once per version and remembered.
    """
    token = _POLICY.set((limit, once))
    try:
        yield
    finally:
        _POLICY.reset(token)


def hash_policy() -> tuple[int | None, bool]:
    """(files up to this size are hashed on every open, None = all; whether larger files are
    hashed once per version and remembered), from `TAPT_HASH_ON_OPEN` (else `hashing`'s)."""
    raw = os.environ.get("TAPT_HASH_ON_OPEN", "").strip().lower()
    if raw == "" and _POLICY.get() is not None:
        return _POLICY.get()
    if raw in ("", "once", "default"):
        return SMALL_FILE, True
    if raw in ("all", "always"):
        return None, False
    if raw in ("0", "off", "none", "no"):
        return 0, False
    try:
        return parse_memory(raw), False
    except InputError as exc:
        raise InputError(f"TAPT_HASH_ON_OPEN={raw!r}: use once (the default), all, 0, or a "
                         "size like 256M") from exc


def _identity(path: Path, expected: str) -> tuple[Any, ...]:
    """This process's key of a verdict on `path`: (size, mtime, expected SHA-256, device,
    inode, change time); the first three are what a stamp in the cache is keyed by."""
    stat = path.stat()
    return (stat.st_size, stat.st_mtime_ns, expected, stat.st_dev, stat.st_ino,
            stat.st_ctime_ns)


def _stamp_name(ident: tuple[Any, ...]) -> str:
    """The cache file of a verdict: named by the content it vouches for (the expected SHA-256,
    size and modification time), not by inode or device, which differ between nodes."""
    size, mtime_ns, expected = ident[:3]
    return hashlib.sha256(repr(("content", expected, size, mtime_ns)).encode()).hexdigest()


def remember(path: Path, expected: str, stamp: bool = False) -> None:
    """Record that this version of `path` (just written and hashed by tapt) is intact: in this
    process, and by a stamp in the cache where the policy would not hash it on every open (or
    `stamp`: whatever its size; an open past its budget of small files reads those stamps). A
    stamp already there is kept as it is."""
    ident = _identity(path, expected)
    _VERIFIED.add(ident)
    limit = hash_policy()[0]
    if stamp or ident[0] > (SMALL_FILE if limit is None else min(SMALL_FILE, limit)):
        stamps = writable_cache(STAMPS)
        if stamps is not None and read_checked(stamps / _stamp_name(ident), 256) != \
                expected.encode():
            write_checked(stamps / _stamp_name(ident), expected.encode())


def recorded_checksums(index_dir: Path, manifest: dict[str, Any]) -> list[tuple[Path, str, str]]:
    """(path, SHA-256, name for messages) of every file an index's manifests record a checksum
    for: the top manifest's, and each shard's `shard.json` (format 3)."""
    import json

    from tapt.indexer.store.manifest import SHARD_MANIFEST, SHARDS

    index_dir = Path(index_dir)
    out = [(index_dir / n, e, n) for n, e in (manifest.get("checksums") or {}).items()]
    for entry in manifest.get("shards") or []:
        directory = index_dir / SHARDS / str(entry.get("name"))
        try:
            shard = json.loads((directory / SHARD_MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        out += [(directory / n, e, f"{SHARDS}/{entry.get('name')}/{n}")
                for n, e in (shard.get("checksums") or {}).items()]
    return out


def remember_index(index_dir: Path, manifest: dict[str, Any]) -> None:
    """`remember` every file an index's manifests record a checksum for, each with a stamp
    whatever its size: an open hashes small files only up to its budget (`opening`) and reads
    the stamps of the others, so the first open in another process does not hash every file
    of a new index again (an add's driver CPU at 10M rows: 5.2 s before, 1.7 s, measured)."""
    for path, expected, _ in recorded_checksums(index_dir, manifest):
        if path.is_file():
            remember(path, expected, stamp=True)


def vouched(path: Path, expected: str | None) -> bool:
    """Whether this version of `path` is already known to match `expected` (verified in this
    process, or by a stamp in the cache): its content is then what tapt wrote and checked."""
    if not expected:
        return False
    try:
        ident = _identity(path, expected)
    except OSError:
        return False
    if ident in _VERIFIED:
        return True
    found = readable_cache(STAMPS)
    return found is not None and read_checked(found / _stamp_name(ident), 256) == \
        expected.encode()


def check_checksum(path: Path, expected: str | None, name: str, label: str | Path,
                   force: bool = False, once: bool = False) -> bool:
    """Compare a file with its recorded SHA-256 as the policy says (`force`: always; `once`:
    unless this version of it is known to match, whatever its size or the policy).

    Returns:
        Whether the file's checksum is known to hold.

    Raises:
        IndexFormatError: the file does not match.
    """
    if not expected:
        return False
    _CHECKED.append(str(path))
    ident = _identity(path, expected)
    if ident in _VERIFIED:
        return True
    limit, remember_large = hash_policy()
    size = ident[0]
    budget = _OPEN_BUDGET.get()
    every_open = limit is None or size <= limit
    if every_open and limit == SMALL_FILE and budget is not None and not force:
        every_open = budget[0] >= size
        budget[0] -= size if every_open else 0
        remember_large = remember_large or not every_open
    if once or not (force or every_open):
        if not (once or remember_large):
            return False
        if vouched(path, expected):
            _VERIFIED.add(ident)
            return True
        if not once and writable_cache(STAMPS) is None:
            return False
        if size > SMALL_FILE:          # a pause worth a note
            log.info("checking %s (%.1f GB) against its manifest's checksum: once per version "
                     "of the file", path.name if label is None else f"{label}/{name}",
                     size / 1e9)
    if sha256_file(path, progress=size > (1 << 30)) != expected:
        raise damaged(label, f"{name} does not match the checksum in its manifest")
    if force or (every_open and not once):   # hashed on every open: a stamp would never be read
        _VERIFIED.add(ident)
    else:
        remember(path, expected, stamp=True)
    return True


def check_all_checksums(index_dir: Path, manifest: dict[str, Any], label: str | Path,
                        what: str = "") -> None:
    """Hash every file the manifests record a checksum for, whatever its size (before a
    command seals the index's content again: add, upgrade). `what` ends the message."""
    for path, expected, name in recorded_checksums(index_dir, manifest):
        if path.is_file() and sha256_file(path, progress=path.stat().st_size > (1 << 30)) \
                != expected:
            raise damaged(label, f"{name} does not match the checksum in its manifest{what}")
        if path.is_file():
            remember(path, expected)


def check_npy(array: np.ndarray, path: Path, name: str, label: str | Path, dtype: str | np.dtype,
              shape: tuple[int, ...]) -> None:
    """An array file holds exactly the dtype and shape the manifest says, and nothing more."""
    if array.dtype != np.dtype(dtype) or tuple(array.shape) != tuple(shape):
        raise damaged(label, f"{name} holds {array.dtype} {tuple(array.shape)}, the manifest says "
                             f"{np.dtype(dtype)} {tuple(shape)}")
    offset = getattr(array, "offset", None)
    if offset is not None:
        size = path.stat().st_size
        if size != offset + array.nbytes:
            raise damaged(label, f"{name} is {size:,} bytes, {offset + array.nbytes:,} expected")


@contextmanager
def array_errors(name: str, label: str | Path) -> Iterator[None]:
    """Reading an index's array file: missing -> incomplete, unreadable -> damaged (one line
    each, naming the file and what to run)."""
    try:
        yield
    except FileNotFoundError:
        raise IndexFormatError(f"index {label} is incomplete: {name} is missing; run tapt index "
                               f"verify {label}") from None
    except IrregularFileError as exc:
        raise damaged(label, f"{name} {exc.strerror}") from exc
    except Exception as exc:  # noqa: BLE001 - numpy's header parser raises many kinds
        raise damaged(label, f"{name} cannot be read ({type(exc).__name__}: "
                             f"{str(exc)[:200]})", exc) from exc


def check_npy_file(path: Path, name: str, label: str | Path, dtype: str | np.dtype,
                   shape: tuple[int | None, ...]) -> tuple[int, ...]:
    """An array file that is not memory-mapped on open (lexical ids, document hashes,
    vocabularies): its header names `dtype` and a shape that fits `shape` (None: any length),
    and the file holds exactly that many bytes (a cut or padded file is refused). Reads only the
    header. Returns the stored shape.

    Raises:
        IndexFormatError: the file is missing, unreadable, or not what the index stores there.
    """
    from numpy.lib import format as npy_format

    with array_errors(name, label), open_regular(path) as fh:
        version = npy_format.read_magic(fh)
        if version == (1, 0):
            stored, fortran, stored_dtype = npy_format.read_array_header_1_0(fh)
        elif version == (2, 0):
            stored, fortran, stored_dtype = npy_format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"npy format version {version}")
        offset = fh.tell()
        size = os.fstat(fh.fileno()).st_size
    fits = len(stored) == len(shape) and all(w is None or w == s for s, w in zip(stored, shape))
    if stored_dtype != np.dtype(dtype) or not fits or (fortran and len(stored) > 1):
        want = "(" + ", ".join("*" if w is None else str(w) for w in shape) + \
            ("," if len(shape) == 1 else "") + ")"
        raise damaged(label, f"{name} holds {stored_dtype} {tuple(stored)}, the index stores "
                             f"{np.dtype(dtype)} {want} there")
    expected = offset + math.prod(stored) * stored_dtype.itemsize
    if size != expected:
        raise damaged(label, f"{name} is {size:,} bytes, {expected:,} expected")
    return tuple(stored)


def check_offsets(docs: np.ndarray, n: int, documents: int | None, label: str | Path,
                  name: str = "docs.npy") -> None:
    """Document offsets start at 0, rise strictly, end at the sentence count."""
    problem = None
    if docs.ndim != 1 or docs.dtype != np.int64 or len(docs) < 2:
        problem = f"{docs.dtype} {docs.shape}, not int64 offsets"
    elif docs[0] != 0 or docs[-1] != n:
        problem = f"offsets run from {int(docs[0])} to {int(docs[-1])}, not 0 to {n}"
    elif documents is not None and len(docs) - 1 != documents:
        problem = f"{len(docs) - 1:,} documents, the manifest says {documents:,}"
    else:
        steps = np.diff(docs)
        if (steps <= 0).any():
            at = int(np.flatnonzero(steps <= 0)[0])
            problem = f"document {at} has {int(steps[at])} sentences (offsets must rise)"
    if problem:
        raise damaged(label, f"{name}: {problem}")


def check_tokens(tokens: np.ndarray, label: str | Path, name: str = "tokens.npy") -> None:
    """Every sentence has at least one token (a count can never be 0 or negative)."""
    if len(tokens) and int(tokens.min()) < 1:
        at = int(np.argmin(tokens))
        raise damaged(label, f"{name}: sentence {at} has {int(tokens[at])} tokens")


def check_faiss_file(size: int, manifest: dict[str, Any], label: str | Path,
                     name: str = "index.faiss") -> None:
    """The FAISS file has the length its manifest records (a truncated one is never read)."""
    recorded = (manifest.get("faiss") or {}).get("bytes")
    if recorded is not None and size != int(recorded):
        raise damaged(label, f"{name} is {size:,} bytes, the manifest records "
                             f"{int(recorded):,}")


def check_faiss_index(index, n: int, dim: int, label: str | Path, id_base: int = 0,
                      name: str = "index.faiss") -> None:
    """Header and stored ids of a loaded FAISS index (one shard's part): row count, dimension,
    metric, and (for HNSW graphs and IVF lists) every stored id in range (IVF parts store global
    ids from `id_base`), so a damaged file cannot make FAISS read outside its arrays."""
    import faiss

    if index.ntotal != n or index.d != dim:
        raise damaged(label, f"{name} holds {index.ntotal:,} rows of {index.d} dims; the "
                             f"embeddings are {n:,} x {dim}")
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise damaged(label, f"{name} does not use inner products")
    inner = index
    while hasattr(faiss.downcast_index(inner), "index") and not isinstance(
            faiss.downcast_index(inner), (faiss.IndexHNSW, faiss.IndexIVF)):
        inner = faiss.downcast_index(inner).index
    inner = faiss.downcast_index(inner)
    if isinstance(inner, faiss.IndexHNSW):
        neighbors = faiss.vector_to_array(inner.hnsw.neighbors)
        if len(neighbors) and (neighbors.min() < -1 or neighbors.max() >= n):
            raise damaged(label, f"{name}: its HNSW graph links to rows that do not exist")
        levels = faiss.vector_to_array(inner.hnsw.levels)
        if len(levels) != n or (len(levels) and (levels.min() < 1)):
            raise damaged(label, f"{name}: its HNSW levels are inconsistent")
        offsets = faiss.vector_to_array(inner.hnsw.offsets)
        if len(offsets) != n + 1 or (np.diff(offsets.astype(np.int64)) < 0).any() or (
                len(offsets) and int(offsets[-1]) != len(neighbors)):
            raise damaged(label, f"{name}: its HNSW offsets are inconsistent")
        if n and not 0 <= inner.hnsw.entry_point < n:
            raise damaged(label, f"{name}: its HNSW entry point does not exist")
    elif isinstance(inner, faiss.IndexIVF):
        lists = faiss.downcast_InvertedLists(inner.invlists)
        sizes = np.array([lists.list_size(i) for i in range(inner.nlist)], dtype=np.int64)
        if sizes.sum() != n:
            raise damaged(label, f"{name}: its inverted lists hold {int(sizes.sum()):,} rows, "
                                 f"not {n:,}")
        for i in np.flatnonzero(sizes).tolist():
            ids = np.empty(int(sizes[i]), dtype=np.int64)
            ptr = lists.get_ids(i)
            try:
                faiss.memcpy(faiss.swig_ptr(ids), ptr, ids.nbytes)
            finally:
                lists.release_ids(i, ptr)
            if ids.min() < id_base or ids.max() >= id_base + n:
                raise damaged(label, f"{name}: inverted list {i} holds rows that do not exist")


def check_results(sims: np.ndarray, ids: np.ndarray, n: int, label: str | Path) -> None:
    """FAISS results name existing rows (or -1 for none) and finite similarities."""
    if ids.size and (ids.min() < -1 or ids.max() >= n):
        raise damaged(label, "index.faiss returned rows that do not exist")
    valid = ids >= 0
    if not np.isfinite(sims[valid]).all():
        raise damaged(label, "index.faiss returned non-finite similarities")


COSINE_SLACK = 5e-3   # float16 rows are unit length to ~4e-3
UNIT_SLACK = {np.dtype(np.float32): 1e-3, np.dtype(np.float16): 4e-3}


_ROWS = re.compile(r"(embeddings\.npy row )([0-9][0-9, -]*[0-9]|[0-9])")


def rows_from(exc: IndexFormatError, offset: int) -> IndexFormatError:
    """The damage report of a check of rows counted from 0 (a block of a scan), its row
    numbers counted from `offset` instead (the block's first global row)."""
    def shift(match: re.Match) -> str:
        return match.group(1) + re.sub(r"[0-9]+", lambda m: str(int(m.group()) + offset),
                                       match.group(2))

    return IndexFormatError(_ROWS.sub(shift, exc.message), param=exc.param)


def _rows(ids: np.ndarray) -> str:
    """`17`, `17-19`, or `17-19, 40 (and 3 more)` for sorted row ids."""
    ids = np.unique(np.asarray(ids, dtype=np.int64))
    runs, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[i - 1] + 1:
            runs.append(f"{ids[start]}" if i - 1 == start else f"{ids[start]}-{ids[i - 1]}")
            start = i
    return ", ".join(runs[:3]) + (f" (and {len(runs) - 3} more ranges)" if len(runs) > 3 else "")


def check_cosines(scores: np.ndarray, ids: np.ndarray | None = None, bound: float = 1.0,
                  label: str | Path | None = None) -> None:
    """Cosines of unit vectors lie in [-1, 1]: anything outside (or NaN) is damaged embeddings.

    One pass of max(|x|) over the scores: negligible beside computing them.

    Args:
        scores: One score per row.
        ids: The index rows the scores belong to (default: their positions).
        bound: The largest magnitude a sound row can score.
        label: The index, for the message.
    """
    scores = np.asarray(scores)
    if not len(scores):
        return
    limit = bound + COSINE_SLACK
    if scores.max() <= limit and -scores.min() <= limit:    # NaN fails both; no |x| copy
        return
    bad = np.flatnonzero(~(np.abs(scores) <= bound + COSINE_SLACK))
    rows = np.asarray(ids)[bad] if ids is not None else bad
    raise damaged(label, f"embeddings.npy row {_rows(rows)} scores {float(scores[bad[0]]):.4g}, "
                         f"outside [-{bound:g}, {bound:g}] where every score of unit vectors lies")


def check_unit_rows(rows: np.ndarray, ids: np.ndarray | None = None,
                    label: str | Path | None = None, squared: np.ndarray | None = None,
                    dtype: np.dtype | None = None) -> None:
    """Rows read from embeddings.npy are unit length (`squared`: norms already computed;
    `dtype`: the stored dtype, when `rows` were cast). An all-zero row passes: an encoder may
    embed a text without content as zeros, and damage does not zero a whole row."""
    if squared is None:
        block = np.asarray(rows, dtype=np.float32)
        squared = np.einsum("ij,ij->i", block, block)
    if not len(squared):
        return
    slack = UNIT_SLACK.get(np.dtype(dtype or getattr(rows, "dtype", np.float32)), 1e-3)
    ok = (np.abs(np.sqrt(np.maximum(squared, 0)) - 1) <= slack) | (squared == 0)
    if ok.all():
        return
    bad = np.flatnonzero(~ok)
    where = np.asarray(ids)[bad] if ids is not None else bad
    raise damaged(label, f"embeddings.npy row {_rows(where)} has length "
                         f"{float(np.sqrt(max(float(squared[bad[0]]), 0))):.4g}, not 1")
