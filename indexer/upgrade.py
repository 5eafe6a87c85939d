"""`tapt index upgrade`: bring an index of format 1 to the current format without re-embedding.

Format 1 stored text records as bare JSON. The upgrade first checks every file against the
SHA-256 its manifest recorded (a damaged index is refused: its text would be sealed as sound),
then writes a new text store whose records carry CRC32s and a sealed manifest of format 2, in a
new generation swapped in atomically (`generations`), like `add` and `reindex`. Rows, text,
embeddings and the FAISS index are unchanged (hard-linked), so selections made from the old
index stay valid: the old manifest's hash is listed under `same_content_as`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from tapt.util.files import sha256_file
from tapt.util.versions import library_versions, utc_now

from .generations import replace_generation
from .index import Index
from .integrity import check_all_checksums
from .manifest import (INDEX_FORMAT_VERSION, LMDB_DATA, MANIFEST_NAME, STORE,
                       UPGRADABLE_VERSIONS, write_index_manifest)
from .store import TextStoreWriter

log = logging.getLogger(__name__)

_BATCH = 4096


def upgrade_index(path: str | Path, progress: bool = True) -> tuple[dict[str, Any], bool]:
    """Upgrade the index at `path` in place (atomically); returns (manifest, whether it changed).

    Raises:
        IndexFormatError: the index is damaged (any file differs from its recorded checksum,
            a record is not JSON), or of a format this tapt cannot read.
    """
    path = Path(path)
    index = Index(path, versions=(INDEX_FORMAT_VERSION,) + UPGRADABLE_VERSIONS)
    old = index.manifest
    if index.format_version == INDEX_FORMAT_VERSION:
        return old, False
    check_all_checksums(path, old, path, ", so it cannot be upgraded")
    previous = index.manifest_sha256
    n = index.n_sentences

    def write(work: Path) -> dict[str, Any]:
        writer = TextStoreWriter(work / STORE, checksummed=True)
        try:
            with tqdm(total=n, unit="record", desc="upgrade", disable=not progress,
                      leave=False) as bar:
                for start in range(0, n, _BATCH):
                    batch = index.store.records(range(start, min(n, start + _BATCH)))
                    writer.put_many(start, batch)
                    bar.update(len(batch))
        finally:
            writer.close()
        manifest = dict(old)
        manifest["format_version"] = INDEX_FORMAT_VERSION
        manifest["files"] = {**old.get("files", {}),
                             "store_records": "CRC32 (big-endian) of key + JSON, then the JSON"}
        manifest["checksums"] = {**(old.get("checksums") or {}),
                                 LMDB_DATA: sha256_file(work / LMDB_DATA)}
        manifest["same_content_as"] = list(old.get("same_content_as") or []) + [previous]
        manifest["upgraded"] = {"from_format": old["format_version"], "at": utc_now(),
                                "versions": library_versions()}
        return write_index_manifest(work, manifest)

    manifest = replace_generation(path, "upgrading", (STORE, MANIFEST_NAME), write,
                                  based_on=previous)
    log.info("%s: format %s -> %s (%s records rewritten with checksums)", path,
             old["format_version"], INDEX_FORMAT_VERSION, f"{n:,}")
    return manifest, True
