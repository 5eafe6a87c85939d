"""`tapt index repair`: rebuild what can be rebuilt without re-embedding (the FAISS index)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from .build import EMBEDDINGS, FAISS
from tapt.errors import IndexFormatError
from .faiss_index import build_faiss_index
from .index_choice import choice_from_manifest
from tapt.util.files import sha256_file, write_json_atomic

from .manifest import MANIFEST_NAME, read_index_manifest
from .verify import REBUILD, verify_index

log = logging.getLogger(__name__)


def repair_index(path: str | Path, progress: bool = True) -> list[str]:
    """Rebuild the FAISS index from the stored embeddings if it is not sound; returns what it did.

    Refuses (IndexFormatError) when anything else is wrong: those parts need a rebuild.
    """
    path = Path(path)
    report = verify_index(path, progress=progress)
    broken = [f for f in report.findings if not f.ok]
    faiss_parts = {"faiss", f"file {FAISS}", f"checksum {FAISS}"}
    other = [f for f in broken if f.check not in faiss_parts]
    if other:
        raise IndexFormatError(
            f"cannot repair {path}: {other[0].check}: {other[0].detail}; "
            + REBUILD.format(path=path))
    if not broken:
        return []
    manifest = read_index_manifest(path)
    embeddings = np.load(path / EMBEDDINGS, mmap_mode="r")
    recorded = manifest.get("faiss", {})
    choice = choice_from_manifest(recorded, *embeddings.shape)  # same factory, params and seed
    factory = choice.factory
    tmp = path / f".{FAISS}.repair-{os.getpid()}"
    try:
        info = build_faiss_index(embeddings, tmp, choice, progress=progress)
        os.replace(tmp, path / FAISS)
    finally:
        tmp.unlink(missing_ok=True)
    info["file"] = FAISS
    for key in ("reindexed", "previous"):
        if key in recorded:
            info[key] = recorded[key]
    manifest["faiss"] = info
    if manifest.get("checksums") is not None:
        manifest["checksums"][FAISS] = sha256_file(path / FAISS)
    write_json_atomic(path / MANIFEST_NAME, manifest)
    done = f"rebuilt {FAISS} from {EMBEDDINGS} ({info['ntotal']:,} rows, {factory})"
    log.info(done)
    return [done]
