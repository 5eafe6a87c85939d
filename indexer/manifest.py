"""The index layout: its file names, and its manifest (`manifest.json`: format version, model
identity, counts, checksums, versions), sealed by a checksum of its own content.

Format versions:
    1  text records stored as plain JSON; no manifest seal (read only by `tapt index upgrade`)
    2  every text record carries a CRC32 of its id and bytes; the manifest carries `self_sha256`,
       a SHA-256 of its own canonical JSON; the model block records the model's full fingerprint;
       `same_content_as` lists the manifests of the same rows and text (before a reindex,
       repair or upgrade)
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from tapt.errors import IndexFormatError
from tapt.util.files import write_json_atomic
from tapt.util.manifests import read_versioned_json

INDEX_FORMAT = "tapt-index"
INDEX_FORMAT_VERSION = 2
UPGRADABLE_VERSIONS = (1,)
MANIFEST_NAME = "manifest.json"
SEAL = "self_sha256"

EMBEDDINGS = "embeddings.npy"
TOKENS = "tokens.npy"
DOCS = "docs.npy"
STORE = "text.lmdb"
FAISS = "index.faiss"
LMDB_DATA = f"{STORE}/data.mdb"
# Everything tapt writes into an index directory (progress.json only while a build runs).
INDEX_ENTRIES = frozenset({MANIFEST_NAME, EMBEDDINGS, TOKENS, DOCS, STORE, FAISS, "progress.json"})
STORE_ENTRIES = frozenset({"data.mdb", "lock.mdb"})
_LEFTOVER = re.compile(r"^\..+\.(tmp|repair)-\d+$")  # a temporary file of a killed write


def upgrade_hint(index_dir: Path) -> str:
    return (f"run tapt index upgrade {index_dir} (rewrites its text store with checksums; "
            "no re-embedding)")


def _canonical(manifest: dict[str, Any]) -> bytes:
    body = {k: v for k, v in manifest.items() if k != SEAL}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def seal(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with `self_sha256` set to the SHA-256 of the rest of it."""
    return {**{k: v for k, v in manifest.items() if k != SEAL},
            SEAL: hashlib.sha256(_canonical(manifest)).hexdigest()}


def write_index_manifest(index_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Seal `manifest` and write it atomically into `index_dir`; returns what was written."""
    sealed = seal(manifest)
    write_json_atomic(Path(index_dir) / MANIFEST_NAME, sealed)
    return sealed


def read_index_manifest(index_dir: Path, versions: tuple[int, ...] = (INDEX_FORMAT_VERSION,),
                        label: Path | None = None) -> dict[str, Any]:
    """Load and check an index manifest; clear errors for a missing, foreign, older, newer or
    damaged one.

    Args:
        index_dir: The index directory (or a /proc/self/fd path to it).
        versions: The format versions the caller reads (verify and upgrade also read 1).
        label: How to name the index in messages (default: `index_dir`).

    Returns:
        The manifest.
    """
    label = label or index_dir
    if not index_dir.exists():
        raise IndexFormatError(f"index {label} does not exist")
    if not index_dir.is_dir():
        raise IndexFormatError(f"index {label} is not a directory")
    if not (index_dir / MANIFEST_NAME).is_file():
        raise IndexFormatError(f"{label} is not a tapt index (no {MANIFEST_NAME})")
    manifest = read_versioned_json(index_dir / MANIFEST_NAME, INDEX_FORMAT,
                                   tuple(versions) + UPGRADABLE_VERSIONS, f"index {label}",
                                   IndexFormatError, rebuild="rebuild it with this tapt")
    version = manifest["format_version"]
    if version not in versions:
        raise IndexFormatError(f"index {label} has format version {version}, without checksums "
                               f"on its text records: {upgrade_hint(label)}")
    if version >= 2 and manifest.get(SEAL) != seal(manifest)[SEAL]:
        raise IndexFormatError(f"index {label} is damaged: {MANIFEST_NAME} does not match its own "
                               f"checksum (edited or corrupted); run tapt index verify {label}")
    return manifest


def foreign_entries(index_dir: Path) -> list[str]:
    """Entries of an index directory that tapt did not write there (never deleted by tapt)."""
    index_dir = Path(index_dir)
    out = []
    for item in sorted(index_dir.iterdir()):
        if _LEFTOVER.match(item.name):
            continue
        if item.name == STORE and item.is_dir():
            out += [f"{STORE}/{s.name}" for s in sorted(item.iterdir())
                    if s.name not in STORE_ENTRIES]
        elif item.name not in INDEX_ENTRIES or item.name == STORE:
            out.append(item.name)
    return out
