"""Replacing an index by a new generation in one atomic step (reindex, repair, upgrade, add).

The new generation is written into a hidden sibling directory (`.NAME.<kind>`) that hard-links
(or copies) every file it does not rewrite; once complete it is exchanged with the index in one
atomic rename (`renameat2(RENAME_EXCHANGE)` on Linux). A reader sees the old index or the new one,
never a mix; a killed command leaves the index untouched (the next one removes its leftover).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable

from tapt.errors import InputError
from tapt.util.files import fsync_path, storage_error

from . import checkpoint
from .manifest import MANIFEST_NAME
from .integrity import remember_index

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> None:
    """Swap two directories atomically where the kernel can, else with two renames."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b),
                          _RENAME_EXCHANGE) == 0:
            return
    except (AttributeError, OSError):
        pass
    aside = b.parent / f".{b.name}.old-{os.getpid()}"
    os.replace(b, aside)
    os.replace(a, b)
    os.replace(aside, a)


def link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def mirror(index_dir: Path, work: Path, skip: Iterable[str]) -> None:
    """Hard-link (or copy) every file of the index into `work`, except the paths in `skip`
    (relative to the index: `manifest.json`, `shards/000002/index.faiss`, `text.lmdb/data.mdb`;
    a skipped directory is skipped whole). Hidden entries (temporary files) are never copied."""
    skip = set(skip)

    def copy(source: Path, target: Path, relative: str) -> None:
        for item in sorted(source.iterdir()):
            rel = f"{relative}{item.name}"
            if item.name.startswith(".") or rel in skip:
                continue
            if item.is_dir() and not item.is_symlink():
                (target / item.name).mkdir()
                copy(item, target / item.name, rel + "/")
            elif item.is_file():
                link_or_copy(item, target / item.name)

    copy(Path(index_dir), Path(work), "")


def replace_generation(path: Path, kind: str, skip: Iterable[str],
                       write: Callable[[Path], dict[str, Any]],
                       based_on: str | None = None) -> dict[str, Any]:
    """Under the index's build lock, mirror it into `.NAME.<kind>` without `skip`, let `write`
    add the new files and manifest there, and swap the result in; returns `write`'s manifest.
    `based_on`: the SHA-256 of the manifest `write` builds on (refused if the index changed).

    Raises:
        StorageError: the disk filled up or refused a write (the index is untouched).
        InputError: the index changed (another command swapped in a generation) meanwhile.
    """
    with checkpoint.BuildLock(path):
        if based_on is not None and hashlib.sha256(
                (path / MANIFEST_NAME).read_bytes()).hexdigest() != based_on:
            raise InputError(f"index {path} changed while this command was starting (another "
                             "command swapped in a new generation); run it again")
        work = checkpoint.work_dir_for(path, kind)
        if work.exists() or work.is_symlink():
            checkpoint.remove_work_dir(work)
        try:
            work.mkdir()
            mirror(path, work, skip)
            manifest = write(work)
            fsync_path(work)
            exchange(work, path)
        except BaseException as exc:
            shutil.rmtree(work, ignore_errors=True)
            if isinstance(exc, OSError):
                raise storage_error(exc, work, "writing") from exc
            raise
        shutil.rmtree(work, ignore_errors=True)  # now the previous generation
        remember_index(path, manifest)  # after the old links are gone: their times are final
    return manifest
