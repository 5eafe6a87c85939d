"""What a request over HTTP may do (`tapt index serve --http`): the rooms it may read and write,
who may ask, and how much.

A request names no server path but under the roots it was given: a task file only under
`task_root`, an output only under `out_root` (each relative, with no `..`, no absolute path,
and no symbolic link that leads out: the resolved path must stay inside the resolved root);
with no root, no path at all. A bearer token is required unless the server listens on a
loopback address with `no_auth`. Bodies, tasks, budgets and requests in flight are bounded,
each refusal a 4xx answer with one line saying which bound (`Refused`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tapt.api.arguments import PathLike
from tapt.errors import InputError, TaptError


class Refused(TaptError):
    """A request the server will not answer, with its HTTP status (4xx, or 503).

    Args:
        status: The HTTP status.
        message: One line saying why.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# The bounds' defaults (`Rooms`, `rooms`, `serve`, `tapt index serve --http`)
LIMITS: dict[str, Any] = {"max_body": 1 << 20, "max_task": 2000, "max_budget": 100_000,
                          "max_concurrent": 32, "request_timeout": 120.0}


@dataclass(frozen=True)
class Rooms:
    """The bounds of an HTTP-served index (`tapt.serve(..., http=...)`).

    Attributes:
        token_sha256: SHA-256 of the bearer token (None: no token, `no_auth`).
        task_root: The folder task files may be read from (None: tasks only as sentences).
        out_root: The folder selections may be written to (None: no file written).
        max_body: Bytes of a request body.
        max_task: Task sentences of a request (and characters: 1,000 a sentence).
        max_budget: Sentences a budget may reach (its largest reading).
        max_concurrent: Requests in flight at once (one selection runs at a time; the others
            wait their turn, up to `timeout`).
        request_timeout: Seconds a request may take, waiting included.
    """

    token_sha256: str | None = None
    task_root: Path | None = None
    out_root: Path | None = None
    max_body: int = LIMITS["max_body"]
    max_task: int = LIMITS["max_task"]
    max_budget: int = LIMITS["max_budget"]
    max_concurrent: int = LIMITS["max_concurrent"]
    request_timeout: float = LIMITS["request_timeout"]

    def allows(self, authorization: str | None) -> bool:
        """Whether an `Authorization` header carries the token (always, without one)."""
        if self.token_sha256 is None:
            return True
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        digest = hashlib.sha256(token.strip().encode("utf-8", "replace")).hexdigest()
        return hmac.compare_digest(digest, self.token_sha256)


def rooms(host: str, *, token_file: PathLike | None = None, no_auth: bool = False,
          task_root: PathLike | None = None, out_root: PathLike | None = None,
          **limits: Any) -> Rooms:
    """Check an HTTP server's settings and read its token (never kept in plain text).

    Args:
        host: The address the server listens on.
        token_file: A file holding the bearer token (16 characters or more).
        no_auth: No token (only on a loopback address).
        task_root: The folder task files may be read from.
        out_root: The folder selections may be written to.
        **limits: `LIMITS` to change (None: the default).

    Raises:
        InputError: a token missing or unreadable, `no_auth` on an address that is not
            loopback, a root that is not a folder, a bound that is not positive.
    """
    if no_auth and token_file is not None:
        raise InputError("give either `token_file` or `no_auth`, not both", param="no_auth")
    if no_auth and not is_loopback(host):
        raise InputError(f"only on a loopback address (127.0.0.1, ::1, localhost), not "
                         f"{host}: anyone who reaches {host} could select and read the corpus; "
                         "give `token_file`", param="no_auth")
    digest = None
    if not no_auth:
        if token_file is None:
            raise InputError("a bearer token is required: give `token_file` (a file holding "
                             "the token), or `no_auth` on a loopback address", param="token_file")
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read {token_file} ({exc})", param="token_file") from None
        if len(token) < 16:
            raise InputError(f"{token_file} holds {len(token)} characters: a token needs at "
                             "least 16", param="token_file")
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
    roots = {}
    for name, root in (("task_root", task_root), ("out_root", out_root)):
        if root is not None and not Path(root).is_dir():
            raise InputError(f"{root} is not a folder", param=name)
        roots[name] = Path(os.path.realpath(root)) if root is not None else None
    unknown = sorted(set(limits) - set(LIMITS))
    if unknown:
        raise InputError(f"unknown bound(s) {', '.join(unknown)}", param=unknown[0])
    values = {**LIMITS, **{k: v for k, v in limits.items() if v is not None}}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or not math.isfinite(value):
            raise InputError(f"must be a positive number, not {value!r}", param=name)
        values[name] = type(LIMITS[name])(value)
    return Rooms(digest, roots["task_root"], roots["out_root"], **values)


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or `localhost`."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def inside(root: Path | None, name: Any, what: str) -> Path:
    """The path `name` names under `root`, refused unless it stays there.

    Raises:
        Refused: 403 when there is no root, or the name is absolute, climbs out with `..`,
            or resolves (through symbolic links) outside the root; 400 when it is no name.
    """
    if root is None:
        raise Refused(403, f"{what}: this server reads and writes no files of its own for "
                           "requests (started without its root); give the task as sentences "
                           "and no `out`, or `out` \"-\"")
    if not isinstance(name, str) or not name or "\x00" in name:
        raise Refused(400, f"{what}: a path is a non-empty string")
    relative = Path(name)
    if relative.is_absolute() or ".." in relative.parts or name.startswith("~"):
        raise Refused(403, f"{what}: {name!r} is not a path inside the server's room "
                           "(a relative path without ..)")
    resolved = Path(os.path.realpath(root / relative))
    if not _ancestor_or_self(root, resolved):
        raise Refused(403, f"{what}: {name!r} leads out of the server's room")
    return resolved


# entries of a task folder or pattern a request may make the server look through
MAX_TASK_ENTRIES = 100_000


def task_inside(root: Path | None, name: Any) -> Path:
    """`inside` for a task name, which may also be a folder or a glob pattern (as the corpus
    reader reads them): every file and folder it reaches, through links too, must stay in the
    root.

    Raises:
        Refused: as `inside`; 403 when an entry it reaches leads out of the root; 413 when it
            reaches more than MAX_TASK_ENTRIES entries.
    """
    import glob

    resolved = inside(root, name, "task")
    root = cast(Path, root)         # `inside` refuses a server without one
    starts = ((Path(p) for p in glob.iglob(str(root / name), recursive=True))
              if glob.has_magic(name) else iter([resolved]))
    seen = 0

    def within(path: Path) -> None:
        nonlocal seen
        seen += 1
        if seen > MAX_TASK_ENTRIES:
            raise Refused(413, f"task: {name!r} reaches more than {MAX_TASK_ENTRIES:,} files "
                               "and folders")
        if not _ancestor_or_self(root, Path(os.path.realpath(path))):
            raise Refused(403, f"task: {name!r} leads out of the server's room")

    for start in starts:
        within(start)
        if not start.is_dir():
            continue
        for folder, dirs, files in os.walk(start, followlinks=True):
            for entry in (*dirs, *files):
                within(Path(folder) / entry)
            here = Path(os.path.realpath(folder))
            dirs[:] = [d for d in dirs if not Path(folder, d).is_symlink()     # not round a loop
                       or not _ancestor_or_self(Path(os.path.realpath(Path(folder, d))), here)]
    return resolved


def _ancestor_or_self(folder: Path, of: Path) -> bool:
    return folder == of or folder in of.parents


def checked(request: Any, served_rows: int, segment_size: int, rooms_: Rooms
            ) -> tuple[dict[str, Any], str | None]:
    """A request checked against the rooms and bounds, its paths made the server's own.

    Args:
        request: The parsed request body.
        served_rows: Sentences of the served index (a fraction's budget reading).
        segment_size: The index's segment size (a segment count's reading).
        rooms_: The bounds.

    Returns:
        (the request to answer, the output's path relative to `out_root`, or None).

    Raises:
        Refused: 400 for a request that is no object or lacks a budget, 403 for a path out
            of the rooms, 413 for a task or budget over its bound.
    """
    from tapt.retriever.ranking.budget import parse_budget

    if not isinstance(request, dict):
        raise Refused(400, "request: a request is a JSON object")
    request = dict(request)
    task = request.get("task")
    if isinstance(task, list):
        if len(task) > rooms_.max_task:
            raise Refused(413, f"task: {len(task):,} sentences, at most {rooms_.max_task:,} "
                               "a request here")
        chars = sum(len(t) for t in task if isinstance(t, str))
        if chars > rooms_.max_task * 1000:
            raise Refused(413, f"task: {chars:,} characters, at most "
                               f"{rooms_.max_task * 1000:,} a request here")
    elif isinstance(task, str):
        request["task"] = str(task_inside(rooms_.task_root, task))
    elif isinstance(task, dict) and isinstance(task.get("files"), list):
        files = task["files"]
        if len(files) > 64:
            raise Refused(413, "task: at most 64 files a request")
        request["task"] = {"files": [str(task_inside(rooms_.task_root, f)) for f in files]}
    params = request.get("params")
    if isinstance(params, dict):
        # a model a method loads (tuned_model, lm_model, ...) is a folder in the task room,
        # never a server path elsewhere nor a hub name to download
        request["params"] = {k: (str(inside(rooms_.task_root, v, f"params.{k}"))
                                 if k.endswith("_model") and v is not None else v)
                             for k, v in params.items()}
    budget = request.get("budget")
    if budget is None:
        raise Refused(400, "budget: required over HTTP (every answer is bounded)")
    try:
        parsed = parse_budget(str(budget))
    except TaptError as exc:
        raise Refused(400, str(exc)) from None
    size = request.get("segment_size") or segment_size
    if not isinstance(size, int) or isinstance(size, bool):
        raise Refused(400, "segment_size: must be a whole number")
    reach = {"fraction": parsed.value * served_rows, "segments": parsed.value * size,
             "sentences": parsed.value, "tokens": parsed.value}[parsed.unit]
    if reach > rooms_.max_budget:
        raise Refused(413, f"budget: {budget} may reach {reach:,.0f} sentences, at most "
                           f"{rooms_.max_budget:,} a request here")
    out, relative = request.get("out"), None
    if out is not None and out != "-":
        resolved = inside(rooms_.out_root, out, "out")
        request["out"] = str(resolved)
        relative = resolved.relative_to(rooms_.out_root).as_posix()
    return request, relative
