"""The index manifest (`manifest.json`): format version, model identity, counts, versions."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from tapt.errors import IndexFormatError

INDEX_FORMAT = "tapt-index"
INDEX_FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
_LIBRARIES = (
    "tapt", "numpy", "faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "torch", "transformers",
    "sentence-transformers", "lmdb", "scikit-learn", "pysbd", "onnx", "onnxruntime",
)


def library_versions() -> dict[str, str]:
    """Versions of Python and of the installed libraries that shape an artefact."""
    versions = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to a temporary name in the same directory, fsync, then rename over `path`."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_index_manifest(index_dir: Path) -> dict[str, Any]:
    """Load and check an index manifest; clear errors for a missing, foreign or newer index."""
    if not index_dir.exists():
        raise IndexFormatError(f"index {index_dir} does not exist")
    if not index_dir.is_dir():
        raise IndexFormatError(f"index {index_dir} is not a directory")
    path = index_dir / MANIFEST_NAME
    if not path.is_file():
        raise IndexFormatError(f"{index_dir} is not a tapt index (no {MANIFEST_NAME})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"{path} is damaged: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != INDEX_FORMAT:
        raise IndexFormatError(f"{path} is not a tapt index manifest")
    version = manifest.get("format_version")
    if version != INDEX_FORMAT_VERSION:
        newer = isinstance(version, int) and version > INDEX_FORMAT_VERSION
        hint = "upgrade tapt" if newer else "rebuild it with this tapt"
        raise IndexFormatError(
            f"index {index_dir} has format version {version}; this tapt reads version "
            f"{INDEX_FORMAT_VERSION} ({hint})"
        )
    return manifest


def manifest_sha256(index_dir: Path) -> str:
    return hashlib.sha256((index_dir / MANIFEST_NAME).read_bytes()).hexdigest()
