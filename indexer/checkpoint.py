"""Committed chunks of an index build, so that a killed build resumes where it stopped.

A build writes into a hidden work directory beside the target (`.NAME.building`). After each
embedding window it appends the window's rows to the `.npy` files, fsyncs them, writes the window's
records to LMDB in one synced transaction, and only then replaces `progress.json` (fsync + rename):
that file is the commit record. Everything past what it names is an uncommitted tail, cut off on
resume (file lengths truncated, LMDB keys past the committed row count deleted). Windows always end
on a document boundary, so the documents already read are skipped on resume, none is split or
embedded twice, and every later window holds the same sentences as in an uninterrupted build.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tapt.errors import InputError, OutputError
from tapt.util.files import storage_error, write_json_atomic

log = logging.getLogger(__name__)

PROGRESS = "progress.json"
_VERSION = 1


@dataclass
class Progress:
    """What is committed: rows (sentences), documents kept and documents read from the input."""

    fingerprint: str
    base_rows: int = 0          # rows the index held before this build or add began
    rows: int = 0
    docs: int = 0
    docs_read: int = 0
    tokens: int = 0
    truncated: int = 0
    duplicates: int = 0
    embed_seconds: float = 0.0
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

    Removed when released: builds never wait for it, so a stale inode cannot be shared.
    """

    def __init__(self, out: Path) -> None:
        self.path = out.parent / f".{out.name}.lock"
        self._fh = None

    def __enter__(self) -> "BuildLock":
        try:
            self._fh = open(self.path, "a+")
        except OSError as exc:
            raise storage_error(exc, self.path) from exc
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._fh.close()
            raise InputError(f"another build of {self.path.name[1:-5]} is running "
                             f"(lock {self.path})") from exc
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            self.path.unlink(missing_ok=True)
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()


def read_progress(work: Path) -> Progress | None:
    """The last commit of an interrupted build, or None when nothing was committed."""
    path = work / PROGRESS
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if raw.pop("version", None) != _VERSION:
            return None
        return Progress(**raw)
    except (ValueError, TypeError) as exc:
        # Only written by rename, so a damaged file means outside tampering: start over.
        log.warning("ignoring unreadable %s (%s); the build starts over", path, exc)
        return None


def commit(work: Path, progress: Progress) -> None:
    write_json_atomic(work / PROGRESS, progress.to_json())


def prepare_work_dir(out: Path, wanted: str, restart: bool, kind: str = "building"
                     ) -> tuple[Path, Progress | None]:
    """Create the work directory, or find a resumable one with the same fingerprint.

    Returns the directory and the committed progress to resume from (None: start fresh).
    """
    work = work_dir_for(out, kind)
    if work.exists():
        progress = read_progress(work)
        if progress is not None and progress.fingerprint == wanted and not restart:
            return work, progress
        if progress is not None and not restart:
            raise InputError(
                f"an interrupted {'build' if kind == 'building' else 'add'} of {out} with other "
                f"inputs or settings is in {work} "
                f"({progress.rows:,} sentences committed): rerun that build to finish it, or "
                "pass `restart` to discard it")
        remove_work_dir(work)
        if progress is not None:
            log.info("discarded the interrupted build in %s (restart)", work)
    work.mkdir()
    return work, None


def remove_work_dir(work: Path) -> None:
    """Remove a work directory tapt left behind, after checking that it holds only what tapt
    writes there (a directory of the same hidden name made by someone else is never deleted)."""
    from .manifest import foreign_entries

    if work.is_symlink() or not work.is_dir() or foreign_entries(work):
        raise OutputError(f"{work} is in the way and does not look like tapt's work directory; "
                          "move it away and run the command again")
    shutil.rmtree(work)
