"""The one rule for every path tapt writes: never destroy what a user owns.

Every command that writes (index build/add/reindex, select, export, train, bench, plot) checks
its output with `check_output` before any work is done:

- an output is never an input: not equal to one, not inside an input directory, not a directory
  that contains an input, and never inside a tapt index;
- an existing output is replaced only when tapt made it and it is as tapt wrote it (`ours`), or,
  for a single file tapt made that was changed since (`made`: an edited selection, a filtered
  export), when the caller passes `overwrite`; a file or directory tapt did not make is never
  replaced, whatever the flags (an empty directory aside).

An output path that is a symbolic link is refused (never written through, never replaced).
The caller then writes under a temporary name and renames (`tapt.util.files.atomic_write`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Iterable

from tapt.errors import OutputError
from tapt.util.files import read_regular, real_path

INDEX_MANIFEST = "manifest.json"
INDEX_FORMAT = "tapt-index"


def _resolved(path: str | Path) -> Path:
    return real_path(path)


def is_tapt_index(path: str | Path) -> bool:
    """True when `path` is a directory whose manifest says it is a tapt index."""
    try:
        manifest = json.loads(read_regular(Path(path) / INDEX_MANIFEST))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == INDEX_FORMAT


def enclosing_index(path: str | Path) -> Path | None:
    """The tapt index directory that `path` lies in (or is), if any."""
    here = _resolved(path)
    for candidate in (here, *here.parents):
        if _is_dir(candidate) and is_tapt_index(candidate):
            return candidate
    return None


def _is_dir(path: Path) -> bool:
    """Whether `path` is a directory; False where it cannot even be looked at (the command
    reading it reports that)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def check_usable(out: str | Path, param: str | None = "out") -> None:
    """Refuse an output path the system cannot even look at (a name too long, a directory that
    may not be searched) with one OutputError naming it.

    Args:
        out: The path a command will write.
        param: The parameter name that holds `out`, for messages.

    Raises:
        OutputError: the path cannot be examined.
    """
    path = Path(out).expanduser()
    try:
        path.is_symlink()
        for part in (path, *path.parents):      # the nearest part that exists must be usable
            try:
                os.stat(part)
                break
            except (FileNotFoundError, NotADirectoryError):     # said by check_output
                continue
    except OSError as exc:  # a name too long, a directory we may not search, a loop of links
        raise OutputError(f"{str(out)[:200]}: cannot be used ({exc.strerror or exc})",
                          param=param) from None


def _a(what: str) -> str:
    return f"{'an' if what[:1].lower() in 'aeiou' else 'a'} {what}"


def check_not_input(out: str | Path, inputs: Iterable[str | Path], param: str = "out") -> Path:
    """Refuse a path a command writes that is one of its inputs, inside one, or around one.

    Args:
        out: The path the command will write.
        inputs: Every path the command reads.
        param: The parameter name that holds `out`, for messages.

    Returns:
        `out` resolved to an absolute path.

    Raises:
        OutputError: `out` is an input, inside an input folder, or contains an input.
    """
    target = _resolved(out)
    for raw in inputs:
        source = _resolved(raw)
        if target == source:
            raise OutputError(f"{out} is also an input of this command; choose another path",
                              param=param)
        if _is_dir(source) and target.is_relative_to(source):
            raise OutputError(f"{out} lies inside the input {raw}; choose a path outside it",
                              param=param)
        if target.is_relative_to(source) is False and source.is_relative_to(target):
            raise OutputError(f"{out} contains the input {raw}; choose another path",
                              param=param)
    return target


def check_path(out: object, param: str = "out") -> None:
    """Refuse an output that is not a path (None, a number, an empty string) with an
    OutputError naming `param`, before any path arithmetic fails on it."""
    if not isinstance(out, (str, os.PathLike)) or not os.fspath(out):
        kind = "empty" if isinstance(out, (str, os.PathLike)) else type(out).__name__
        raise OutputError(f"must be a path, not {kind}", param=param)


def check_not_link(out: str | Path, param: str | None = "out") -> None:
    """Refuse an output path whose last component is a symbolic link (dangling or not): writing
    through it would rewrite the file it points to (an archived run behind `latest.jsonl`), and
    replacing it would destroy the user's link. Links among the parent directories are fine.

    Args:
        out: The path a command will write.
        param: The parameter name that holds `out`, for messages.

    Raises:
        OutputError: `out` is a symbolic link.
    """
    path = Path(out).expanduser()
    try:
        if not path.is_symlink():
            return
        to = os.readlink(path)
    except OSError:
        return                          # check_usable names what cannot be looked at
    raise OutputError(f"{out} is a symbolic link (to {to}); tapt never writes through or "
                      "replaces a link: choose another path, or remove the link yourself",
                      param=param)


def check_output(out: str | Path, *, what: str, inputs: Iterable[str | Path] = (),
                 overwrite: bool = False, ours: Callable[[Path], bool] | None = None,
                 ours_needs_overwrite: bool = False, directory: bool = False,
                 param: str = "out", made: Callable[[Path], bool] | None = None,
                 marked: bool = True) -> Path:
    """Refuse an output path that would overwrite or delete something tapt did not make.

    Args:
        out: The path the command will write (a file, or a directory with `directory=True`).
        what: What is written, for messages ("selection", "index", "model directory").
        inputs: Every path the command reads (corpus files and folders, task files, the index).
        overwrite: The user asked to replace an existing output tapt made that changed since
            (`made`), or (`ours_needs_overwrite`) one of its own.
        ours: Whether an existing `out` is an artefact of the kind this command writes, as
            tapt wrote it.
        made: Whether an existing single file `out` is one tapt wrote, changed since (replaced
            only with `overwrite`); a file neither `ours` nor `made` is never replaced.
        ours_needs_overwrite: Replacing our own artefact also needs `overwrite`.
        directory: `out` is a directory (a foreign non-empty one is never replaced).
        param: The parameter name that holds `out`, for messages.
        marked: False where tapt's own file of this kind cannot be told from a user's (a plain
            text export): the refusal says so instead of "not written by tapt".

    Returns:
        `out` resolved to an absolute path.

    Raises:
        OutputError: `out` is an input, inside or around one, inside an index, is a symbolic
            link, or holds something that may not be replaced.
    """
    check_path(out, param)
    check_not_link(out, param)
    target = check_not_input(out, inputs, param)
    check_usable(out, param)
    index = enclosing_index(target.parent if not target.exists() else target)
    if index is not None and not (directory and index == target and ours is not None
                                  and ours(target)):
        raise OutputError(f"{out} lies inside the tapt index {index}; write outside it",
                          param=param)
    if not target.exists() and not target.is_symlink():
        parent = target.parent
        if parent.exists() and not parent.is_dir():
            raise OutputError(f"cannot create {out}: {parent} is not a directory", param=param)
        return target
    if target.exists() and not target.is_dir() and not target.is_file():
        raise OutputError(f"{out} is not a regular file (a device, pipe or socket); tapt writes "
                          "only regular files and never replaces anything else, whatever the "
                          "flags: choose another path (- writes to standard output where a "
                          "command takes it)", param=param)
    mine = ours is not None and ours(target)
    if mine:
        if ours_needs_overwrite and not overwrite:
            raise OutputError(f"{out} already holds a {what}; pass `overwrite` to replace it",
                              param=param)
        return target
    if target.is_dir():
        if not directory:
            raise OutputError(f"{out} is a directory; give a file path for the {what}",
                              param=param)
        if not any(target.iterdir()):
            return target
        raise OutputError(f"{out} is a directory that is not {_a(what)} as tapt wrote it (it "
                          "holds other files, or files changed since); it is never replaced: "
                          "choose a new or empty directory", param=param)
    if directory:
        raise OutputError(f"{out} is a file, not {_a(what)}; it is never replaced: choose "
                          "another path", param=param)
    if made is not None and made(target):
        if not overwrite:
            raise OutputError(f"{out} is {_a(what)} tapt wrote that may have been changed "
                              "since; pass `overwrite` to replace it", param=param)
        return target
    if not marked:
        raise OutputError(f"{out} exists, and {_a(what)} carries no mark of tapt that tells it "
                          "from a user's file, so tapt never replaces one, whatever the flags: "
                          "choose another path, or move the file away yourself", param=param)
    raise OutputError(f"{out} exists and is not {_a(what)} written by tapt; tapt never replaces "
                      "a file it did not write, whatever the flags: choose another path, or "
                      "move the file away yourself", param=param)
