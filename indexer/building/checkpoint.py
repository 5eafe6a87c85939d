"""The records that let an interrupted build resume: the plan, and one completion record per
finished piece of work.

A build writes into a hidden work directory beside the target (`.NAME.building`). `plan.json`
names the build (a fingerprint of its inputs, model and settings) and its shards (which input
files each holds). Each stage leaves a completion record only once its output is complete and
renamed into place: `shards/NNNNNN/prepared.json` (the shard's text store, offsets and lexical
ids), `parts/part-PPPPPP.json` (one embedded part), `embedded.json` (the shard's embeddings
assembled), `shard.json` (its FAISS part and checksums). Every record names the run that wrote
it (the plan's fingerprint). Rerunning the same command skips every piece whose record this run
wrote; a record of another run (a shard folder copied or restored into the work directory) is
refused, never reused and never deleted; a process killed in the middle of a piece loses only that piece (its
temporary files are ignored and removed).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from tapt.errors import InputError, Interrupted, OutputError, StorageError
from tapt.util.files import read_regular, storage_error, write_json_atomic

log = logging.getLogger(__name__)

PLAN = "plan.json"
_VERSION = 3     # 3: every completion record names its run (the plan's fingerprint)
LOCK_MARK = b"tapt build lock\n"
_LOCK_TRIES = 5


class ForeignRecord(InputError):
    """A work directory holds a stage folder or completion record another run wrote; the work
    directory is kept as it is (its owner decides)."""


@dataclass
class Plan:
    """What a build or add is: its fingerprint, its shards, where its rows start."""

    fingerprint: str
    shards: list[dict[str, Any]] = field(default_factory=list)  # name, files, records
    embedding_dtype: str = "float32"
    base_rows: int = 0          # rows the index held before this add began
    base_docs: int = 0
    sessions: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"version": _VERSION, **asdict(self)}


def fingerprint(parts: dict[str, Any]) -> str:
    """A stable hash of everything that decides a build's output (inputs, settings, model)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def work_dir_for(out: Path, kind: str = "building") -> Path:
    return out.parent / f".{out.name}.{kind}"


class BuildLock:
    """An exclusive lock beside the target (`.NAME.lock`): two builds of one index cannot interleave.

    The lock file holds `LOCK_MARK`; one left by a killed build (the mark, or empty: killed
    between its creation and the mark) is taken over. Anything else at that path (a user's file,
    a link, a folder) is refused, never opened for writing or removed. Removed when released:
    builds never wait for it, and one that locked a file another build had already removed
    tries again, so a stale inode cannot be shared.
    """

    def __init__(self, out: Path) -> None:
        self.path = out.parent / f".{out.name}.lock"
        self._fd: int | None = None

    def __enter__(self) -> "BuildLock":
        for _ in range(_LOCK_TRIES):
            fd = self._open()
            if fd is None:           # removed by its holder between two looks: again
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                os.close(fd)
                raise InputError(f"another build of {self.path.name[1:-5]} is running "
                                 f"(lock {self.path})") from exc
            if self._still_there(fd):
                with contextlib.suppress(OSError):   # a full disk: an empty lock is as good
                    os.ftruncate(fd, 0)
                    os.write(fd, LOCK_MARK)
                self._fd = fd
                return self
            os.close(fd)             # released and removed by its holder meanwhile: again
        raise InputError(f"could not take the lock {self.path}: other builds keep taking it")

    def _open(self) -> int | None:
        """A descriptor of the lock file: made anew, or a stale one of tapt's (refused: any
        other file there); None when it went away as it was looked at."""
        flags = os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            return os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        except OSError as exc:
            raise storage_error(exc, self.path) from exc
        try:
            fd = os.open(self.path, flags)
        except OSError as exc:       # a link or a folder there (ELOOP, EISDIR), or gone
            if exc.errno == errno.ENOENT:
                return None
            raise self._in_the_way() from exc
        try:
            info = os.fstat(fd)
            ours = stat.S_ISREG(info.st_mode) and info.st_size <= len(LOCK_MARK) and (
                os.pread(fd, len(LOCK_MARK) + 1, 0) in (b"", LOCK_MARK))
        except OSError as exc:
            os.close(fd)
            raise storage_error(exc, self.path) from exc
        if not ours:
            os.close(fd)
            raise self._in_the_way()
        return fd

    def _in_the_way(self) -> InputError:
        return InputError(f"{self.path} is in the way and is not tapt's lock file: move it "
                          "away (tapt never removes a file it did not write)")

    def _still_there(self, fd: int) -> bool:
        try:
            here, held = os.stat(self.path, follow_symlinks=False), os.fstat(fd)
        except FileNotFoundError:
            return False
        return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def read_plan(work: Path) -> Plan | None:
    """The plan of an interrupted build, or None when there is none."""
    path = work / PLAN
    if not path.is_file():
        return None
    try:
        raw = json.loads(read_regular(path))
        if raw.pop("version", None) != _VERSION:
            return None
        return Plan(**raw)
    except (ValueError, TypeError) as exc:
        # Only written by rename, so a damaged file means outside tampering: start over.
        log.warning("ignoring unreadable %s (%s); the build starts over", path, exc)
        return None


def write_plan(work: Path, plan: Plan) -> None:
    write_json_atomic(work / PLAN, plan.to_json())


def commit_part(path: Path, record: dict[str, Any]) -> None:
    """Write a part's completion record (the moment the part counts as done)."""
    write_json_atomic(path, record)


def kept_part(record_path: Path, record: dict[str, Any], path: Path, checksum: str,
              dtype: Any, shape: tuple[int, ...]) -> Any:
    """The array at `path` of an embedded part kept for resuming, as its record says it was
    written (the SHA-256 under `checksum`, `record["rows"]` rows of `shape` and `dtype`). A part
    that differs (changed, cut or deleted since) is removed with its record, so that running the
    command again embeds it anew, and StorageError is raised."""
    import io

    import numpy as np

    try:
        try:
            data = read_regular(path, limit=None)
        except FileNotFoundError:
            raise ValueError("it is missing") from None
        want = record.get(checksum)
        if want is not None and hashlib.sha256(data).hexdigest() != want:
            raise ValueError("its bytes differ from those written")
        array = np.load(io.BytesIO(data), allow_pickle=False)
        if array.shape != (int(record["rows"]), *shape) or array.dtype != np.dtype(dtype):
            raise ValueError(f"it holds {array.shape} {array.dtype}, not {record['rows']} rows")
    except ValueError as exc:
        for stale in (record_path, path):
            stale.unlink(missing_ok=True)
        raise StorageError(f"{path}: an embedded part kept for resuming is damaged ({exc}); "
                           "it is removed: run the same command again to embed it anew") from None
    return array


def committed_rows(work: Path) -> int:
    """Sentences whose embeddings this work directory's run committed (parts and whole shards;
    records another run wrote are not counted)."""
    from tapt.indexer.store.manifest import SHARDS

    plan = read_plan(work)
    run = plan.fingerprint if plan is not None else None

    def rows(path: Path) -> int | None:
        try:
            record = json.loads(read_regular(path))
            return int(record["rows"]) if record.get("run") == run else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    total = 0
    for shard in sorted((work / SHARDS).glob("[0-9]*")):
        done = rows(shard / "embedded.json")
        if done is not None:
            total += done
            continue
        total += sum(r for record in (shard / "parts").glob("part-*.json")
                     if (r := rows(record)) is not None)
    return total


def prepare_work_dir(out: Path, wanted: str, restart: bool, kind: str = "building"
                     ) -> tuple[Path, Plan | None]:
    """Create the work directory, or find a resumable one with the same fingerprint.

    Returns the directory and the plan to resume (None: start fresh).
    """
    work = work_dir_for(out, kind)
    try:
        return _prepared(out, work, wanted, restart, kind)
    except OSError as exc:
        raise OutputError(f"{work}, the work folder of an interrupted "
                          f"{'build' if kind == 'building' else kind.removesuffix('ing')} of "
                          f"{out}, cannot be used ({exc.strerror or exc}): make it readable "
                          "and writable, or move it away, and run the command again") from None


def _prepared(out: Path, work: Path, wanted: str, restart: bool, kind: str
              ) -> tuple[Path, Plan | None]:
    if work.exists():
        plan = read_plan(work)
        if plan is not None and plan.fingerprint == wanted and not restart:
            return work, plan
        if plan is not None and not restart:
            job = "build" if kind == "building" else "add"
            raise InputError(
                f"an interrupted {job} of {out} with other inputs or settings (or into an index "
                f"replaced since) is in {work} ({committed_rows(work):,} sentences embedded): "
                f"rerun that {job} to finish it, or pass `restart` to discard it")
        remove_work_dir(work)
        if plan is not None:
            log.info("discarded the interrupted build in %s (restart)", work)
    work.mkdir()
    return work, None


def remove_work_dir(work: Path) -> None:
    """Remove a work directory tapt left behind, after checking that it holds only what tapt
    writes there (a directory of the same hidden name made by someone else is never deleted)."""
    from tapt.indexer.store.manifest import foreign_entries

    if work.is_symlink() or not work.is_dir() or foreign_entries(work):
        raise OutputError(f"{work} is in the way and does not look like tapt's work directory; "
                          "move it away and run the command again")
    shutil.rmtree(work)


@contextlib.contextmanager
def keep_or_discard(work: Path, job: str, doing: str, kept_note: str, earlier: int = 0,
                    prepared: str | None = None,
                    disk_full: Callable[[int], str] | None = None) -> Iterator[None]:
    """The failure handling of a build or an add writing into `work`: on any exception, the work
    directory is kept when it holds committed rows (or, with `prepared`, a shard holding that
    completion record) or a record of another run (`ForeignRecord`), and removed otherwise;
    Ctrl-C becomes `Interrupted` and an OSError a one-line StorageError.

    Args:
        work: The work directory.
        job: What runs, for `Interrupted` ("build", "add").
        doing: What was being done in `work`, for `storage_error` ("building").
        kept_note: The info line logged when the work is kept, a %-format of (the committed
            sentences, formatted with thousands separators, and `work`).
        earlier: Sentences committed by earlier, interrupted runs (this run resumed them).
        prepared: A completion record name whose presence in any shard keeps the work too.
        disk_full: The message of a full disk, given the committed sentences (default: the
            one of `storage_error`).
    """
    try:
        yield
    except BaseException as exc:
        from tapt.indexer.store.manifest import SHARDS

        committed = committed_rows(work) if work.exists() else 0
        started = prepared is not None and work.exists() and any(
            (work / SHARDS).glob(f"*/{prepared}"))
        resumable = bool(committed or started)
        if not resumable and not isinstance(exc, ForeignRecord):
            shutil.rmtree(work, ignore_errors=True)
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Interrupted):
            raise Interrupted(job, committed, str(work) if resumable else None, earlier) from exc
        if resumable:
            # info, not a warning: the one Error line says to run the command again
            log.info(kept_note, f"{committed:,}", work)
        full = (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or (
            isinstance(exc, StorageError) and str(exc).startswith("disk full"))
        if full and disk_full is not None:
            raise StorageError(disk_full(committed)) from exc
        if isinstance(exc, OSError):
            raise storage_error(exc, work, doing) from exc
        raise
