"""Loading the versioned JSON manifests of tapt's artefacts (indexes, selections, training runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tapt.errors import TaptError
from tapt.util.files import read_regular


def read_versioned_json(path: str | Path, fmt: str, versions: tuple[int, ...] | int, what: str,
                        error: type[TaptError] = TaptError, rebuild: str = "", lost: str = "",
                        shown: str | Path | None = None) -> dict[str, Any]:
    """Read a manifest and check its `format` and `format_version`.

    Args:
        path: The manifest file.
        fmt: The expected `format` value (e.g. "tapt-index").
        versions: The format version(s) this tapt reads.
        what: How to name the artefact in errors ("index idx", "selection sel.jsonl").
        error: The exception class to raise.
        rebuild: What to tell the user when the artefact is of an older version.
        lost: What to tell the user when the file is not JSON or not a manifest of `fmt`.
        shown: How to name the file in messages (default: `path`).

    Returns:
        The manifest as a dict.

    Raises:
        error: the file is missing, not JSON, of another format, or of another version.
    """
    path = Path(path)
    shown = shown or path
    fix = f"; {lost}" if lost else ""
    readable = (versions,) if isinstance(versions, int) else tuple(versions)
    try:
        manifest = json.loads(read_regular(path).decode("utf-8"))
    except FileNotFoundError as exc:
        raise error(f"{what} has no manifest ({path.name} is missing)") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{what}: manifest {shown} is damaged ({exc}){fix}") from exc
    except OSError as exc:
        raise error(f"{what}: cannot read {shown} ({exc.strerror or exc}){fix}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise error(f"{shown} is not a {fmt} manifest{fix}")
    version = manifest.get("format_version")
    if version not in readable:
        newer = isinstance(version, int) and version > max(readable)
        hint = "upgrade tapt" if newer else (rebuild or "recreate it with this tapt")
        raise error(f"{what} has format version {version}; this tapt reads version "
                    f"{', '.join(map(str, readable))} ({hint})")
    return manifest
