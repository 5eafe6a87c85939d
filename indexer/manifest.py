"""The index manifest (`manifest.json`): format version, model identity, counts, versions."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from tapt.errors import IndexFormatError
from tapt.util.manifests import read_versioned_json

INDEX_FORMAT = "tapt-index"
INDEX_FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
def read_index_manifest(index_dir: Path) -> dict[str, Any]:
    """Load and check an index manifest; clear errors for a missing, foreign or newer index."""
    if not index_dir.exists():
        raise IndexFormatError(f"index {index_dir} does not exist")
    if not index_dir.is_dir():
        raise IndexFormatError(f"index {index_dir} is not a directory")
    if not (index_dir / MANIFEST_NAME).is_file():
        raise IndexFormatError(f"{index_dir} is not a tapt index (no {MANIFEST_NAME})")
    return read_versioned_json(index_dir / MANIFEST_NAME, INDEX_FORMAT, INDEX_FORMAT_VERSION,
                               f"index {index_dir}", IndexFormatError,
                               rebuild="rebuild it with this tapt")


def manifest_sha256(index_dir: Path) -> str:
    return hashlib.sha256((index_dir / MANIFEST_NAME).read_bytes()).hexdigest()
