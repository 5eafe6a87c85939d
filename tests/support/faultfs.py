"""Real filesystem faults for tests and benchmarks: a read-only directory and a full disk.

As root (where permission bits do not stop writes) they are tmpfs mounts, read-only or tiny;
otherwise a read-only directory is `chmod 555`, and a full disk is not available (None).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

MOUNTED: list[Path] = []  # mounts made by `mount_full` / `mount_read_only`, for `release`


def _mount(path: Path, options: str) -> bool:
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                              capture_output=True)
    except OSError:
        return False
    return done.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def _held(made: bool, path: Path) -> Iterator[Path | None]:
    if not made:
        yield None
        return
    try:
        yield path
    finally:
        release(path)


def read_only_dir(path: Path, files: dict[str, bytes] | None = None
                  ) -> contextlib.AbstractContextManager[Path | None]:
    """A directory no process can write into (holding `files`), or None where none can be made."""
    path.mkdir(parents=True, exist_ok=True)
    for name, data in (files or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    return _held(mount_read_only(path), path)


def full_disk(path: Path, size: str = "256k") -> contextlib.AbstractContextManager[Path | None]:
    """A directory on a tiny filesystem of `size` (root only), or None where none can be made."""
    return _held(mount_full(path, size), path)


def fill(path: Path) -> None:
    """Fill the filesystem under `path` until writing fails."""
    fd = os.open(path / ".filler", os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)


def mount_full(path: Path, size: str = "256k") -> bool:
    """Mount a tiny filesystem at `path` (root only; `release` unmounts it); False if not."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not _mount(path, f"size={size}"):
        return False
    MOUNTED.append(path)
    return True


def mount_read_only(path: Path) -> bool:
    """Make the directory `path` read-only in place (a read-only bind mount as root, chmod 555
    of it and its folders otherwise; `release` undoes it); False if neither works."""
    if os.geteuid() != 0:
        for folder in (path, *[p for p in path.rglob("*") if p.is_dir()]):
            folder.chmod(0o555)
        MOUNTED.append(path)
        return True
    if subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True).returncode:
        return False
    MOUNTED.append(path)
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(path)],
                      capture_output=True).returncode:
        release(path)
        return False
    return True


def release(only: Path | None = None) -> None:
    """Undo the mounts (or chmods) made by `mount_full` and `mount_read_only`: all, or `only`."""
    for path in [p for p in reversed(MOUNTED) if only is None or p == only]:
        MOUNTED.remove(path)
        if os.geteuid() != 0:
            for folder in (path, *[p for p in path.rglob("*") if p.is_dir()]):
                folder.chmod(0o755)
        else:
            _umount(path)
