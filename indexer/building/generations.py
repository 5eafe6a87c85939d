"""Replacing an index by a new generation in one atomic step (reindex, repair, upgrade, add).

The new generation is written into a hidden sibling directory (`.NAME.<kind>`) that hard-links
(or copies) every file it does not rewrite, and carries unchanged whatever a user put into the
index (`user_entries`: hidden files, notes in shard folders, links, shard folders its manifest
does not list); once complete it is exchanged with the index in one atomic rename
(`renameat2(RENAME_EXCHANGE)` on Linux). A reader sees the old index or the new one,
never a mix; a killed command leaves the index untouched (the next one removes its leftover).
"""

from __future__ import annotations

import ctypes
import filecmp
import hashlib
import logging
import os
import shutil
import stat
from pathlib import Path
from typing import Any, Callable, Iterable

from tapt.errors import InputError, OutputError
from tapt.indexer.building import checkpoint
from tapt.indexer.store.integrity import remember_index
from tapt.indexer.store.manifest import MANIFEST_NAME, index_foreign_entries, is_leftover
from tapt.util.files import fsync_path, storage_error

log = logging.getLogger(__name__)

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


def check_replaceable(index_dir: Path) -> None:
    """Refuse, before any work, an index whose generation cannot or may not be swapped: one
    made read-only (its folder's mode grants no write: the new generation would come with
    writable folders, and the old one could not be removed), and one that is a mount point (a
    mount point cannot be renamed: the swap would fail after a whole copy was written beside
    it, on the parent file system).

    Raises:
        OutputError: the index is read-only or a mount point.
    """
    try:
        mode = os.stat(index_dir).st_mode
        mounted = os.path.ismount(index_dir)
    except OSError as exc:
        raise OutputError(f"index {index_dir} cannot be looked at ({exc.strerror or exc})"
                          ) from None
    why = None
    if not stat.S_IMODE(mode) & 0o222:
        why = f"its folder is {stat.filemode(mode)}"
    elif os.statvfs(index_dir).f_flag & os.ST_RDONLY:
        why = "its file system is mounted read-only"
    elif not os.access(index_dir, os.W_OK):
        why = "this user may not write into its folder"
    if why:
        raise OutputError(f"index {index_dir} is read-only ({why}): tapt never replaces an "
                          "index made read-only; make it writable to change it")
    if mounted:
        raise OutputError(f"index {index_dir} is a mount point: a new generation replaces the "
                          "index by renaming its folder, which a mount point cannot be; keep "
                          "the index in a folder of the mounted file system (mount it one "
                          "level up) and run the command again")


def discard_previous(work: Path, index_dir: Path) -> None:
    """Remove the previous generation, which the swap left at `work`: first renamed out of the
    work folder's name, so that what cannot be removed (one warning) is never taken for an
    interrupted add or build of the index later."""
    aside = work.parent / f".{index_dir.name}.previous-{os.getpid()}"
    try:
        os.replace(work, aside)
    except OSError:
        aside = work
    shutil.rmtree(aside, ignore_errors=True)
    if os.path.lexists(aside):
        log.warning("the previous generation of %s could not be removed: it is left in %s; "
                    "remove it yourself", index_dir, aside)


def link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def user_entries(index_dir: Path) -> list[str]:
    """What a user (or a restored backup) put into an index: the entries tapt did not write for
    its current generation (hidden files and folders, files inside shard folders, symbolic links,
    shard folders its manifest does not list), as paths relative to it. Every command that
    replaces an index carries them into the new generation unchanged (`mirror`).

    Raises:
        OutputError: one of them cannot be carried (a pipe, socket or device): nothing changed.
    """
    index_dir = Path(index_dir)
    entries = index_foreign_entries(index_dir)
    odd = [e for e in entries if not _carriable(index_dir / e)]
    if odd:
        raise OutputError(f"index {index_dir} holds entries tapt did not write that it cannot "
                          f"keep across a new generation ({_names(odd)}: not regular files, "
                          "folders or links); nothing was changed: move them out of the index "
                          "and run the command again")
    return entries


def _names(entries: list[str], at_most: int = 5) -> str:
    shown = ", ".join(entries[:at_most])
    return shown + (f" and {len(entries) - at_most:,} more" if len(entries) > at_most else "")


def _carriable(path: Path) -> bool:
    """Regular files, symbolic links and folders of them (walked without following links)."""
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode) or stat.S_ISREG(mode):
        return True
    if not stat.S_ISDIR(mode):
        return False
    return all(_carriable(child) for child in path.iterdir())


def _carry(source: Path, target: Path) -> None:
    """Recreate `source` at `target` as it is: files hard-linked (same bytes, same owner and
    mode; copied with their times where links cannot be made), links as links, folders with
    their mode and everything in them."""
    mode = source.lstat().st_mode
    if stat.S_ISLNK(mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISDIR(mode):
        target.mkdir()
        for child in sorted(source.iterdir()):
            _carry(child, target / child.name)
        shutil.copystat(source, target, follow_symlinks=False)
    else:
        link_or_copy(source, target)


def _same_entry(a: Path, b: Path) -> bool:
    """Whether `b` is still what `_carry` made of `a`."""
    try:
        sa, sb = a.lstat(), b.lstat()
    except OSError:
        return False
    if stat.S_IFMT(sa.st_mode) != stat.S_IFMT(sb.st_mode):
        return False
    if stat.S_ISLNK(sa.st_mode):
        return os.readlink(a) == os.readlink(b)
    if stat.S_ISDIR(sa.st_mode):
        names = sorted(c.name for c in a.iterdir())
        return names == sorted(c.name for c in b.iterdir()) and all(
            _same_entry(a / n, b / n) for n in names)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino) or (
        sa.st_size == sb.st_size and filecmp.cmp(a, b, shallow=False))


def mirror(index_dir: Path, work: Path, skip: Iterable[str],
           keep: Iterable[str] | None = None) -> list[str]:
    """Hard-link (or copy) every file of the index into `work`, except the paths in `skip`
    (relative to the index: `manifest.json`, `shards/000002/index.faiss`, `text.lmdb/data.mdb`;
    a skipped directory is skipped whole), and carry every entry tapt did not write (`keep`,
    default `user_entries`) unchanged, whatever `skip` says. A killed write's temporary files
    are left out. Returns the carried entries (`check_kept` checks them before the exchange).
    """
    skip = set(skip)
    keep = user_entries(index_dir) if keep is None else list(keep)
    kept = set(keep)

    def copy(source: Path, target: Path, relative: str) -> None:
        for item in sorted(source.iterdir()):
            rel = f"{relative}{item.name}"
            if rel in kept or rel in skip or is_leftover(item.name):
                continue
            if item.is_dir() and not item.is_symlink():
                (target / item.name).mkdir()
                copy(item, target / item.name, rel + "/")
            elif item.is_file() and not item.is_symlink():
                link_or_copy(item, target / item.name)

    copy(Path(index_dir), Path(work), "")
    carry(index_dir, work, keep)
    return keep


def carry(index_dir: Path, work: Path, kept: Iterable[str]) -> None:
    """Carry each of `kept` (entries a user put into the index) into `work` where it is not
    there yet, unchanged (files hard-linked, links as links, folders whole)."""
    for rel in kept:
        target = Path(work) / rel
        if target.exists() or target.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        _carry(Path(index_dir) / rel, target)


def check_kept(index_dir: Path, work: Path, kept: Iterable[str]) -> None:
    """Refuse to swap in a new generation that lost or changed an entry a user put into the
    index (the command wrote where it lies); the index is unchanged.

    Raises:
        OutputError: naming the entries.
    """
    lost = [rel for rel in kept if not _same_entry(Path(index_dir) / rel, Path(work) / rel)]
    if lost:
        raise OutputError(f"index {index_dir} holds entries tapt did not write where this "
                          f"command writes ({_names(lost)}); nothing was changed: move them out "
                          "of the index and run the command again")


def check_unchanged(path: Path, based_on: str) -> None:
    """Refuse to go on from a generation of the index that is no longer current.

    Args:
        path: The index.
        based_on: The SHA-256 of the manifest this command read when it opened the index.

    Raises:
        InputError: another command (an add, reindex, repair or upgrade) swapped in a new
            generation since: run the command again.
    """
    try:
        current = hashlib.sha256((Path(path) / MANIFEST_NAME).read_bytes()).hexdigest()
    except OSError:
        current = None
    if current != based_on:
        raise InputError(f"index {path} changed while this command was starting (another "
                         "command, such as an index add, swapped in a new generation); run it "
                         "again")


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
    # `.`, `..`: the work directory goes beside the index; a symbolic link IDX: the index it
    # names is updated, the link kept (swapping at the link's name would replace the link)
    path = Path(os.path.realpath(path))
    check_replaceable(path)
    with checkpoint.BuildLock(path):
        if based_on is not None:
            check_unchanged(path, based_on)
        work = checkpoint.work_dir_for(path, kind)
        if work.exists() or work.is_symlink():
            checkpoint.remove_work_dir(work)
        kept = user_entries(path)
        try:
            work.mkdir()
            mirror(path, work, skip, kept)
            manifest = write(work)
            check_kept(path, work, kept)
            fsync_path(work)
            exchange(work, path)
        except BaseException as exc:
            shutil.rmtree(work, ignore_errors=True)
            if isinstance(exc, OSError):
                raise storage_error(exc, work, "writing") from exc
            raise
        discard_previous(work, path)  # now the previous generation
        remember_index(path, manifest)  # after the old links are gone: their times are final
    return manifest
