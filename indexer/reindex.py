"""`tapt index reindex`: change an index's FAISS type from its stored embeddings, no re-embedding.

Crash-safe like `tapt index add`: the new `index.faiss` (written and fsynced under a temporary
directory `.NAME.reindexing` that hard-links every other file of the index) and its manifest,
with the new `faiss` section and the new checksum of `index.faiss`, are swapped in with the index
in one atomic directory exchange (`generations`). A reader sees the old index or the new one,
never a mix; a killed reindex leaves the index untouched (the next reindex removes the leftover
directory). Rows and text do not change, so selections made before stay valid.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from tapt.util.files import sha256_file
from tapt.util.versions import utc_now

from .faiss_index import build_faiss_index
from .generations import replace_generation
from .index import Index
from .index_choice import DEFAULT_MEMORY, IndexChoice, choose_index
from .manifest import EMBEDDINGS, FAISS, MANIFEST_NAME, write_index_manifest

log = logging.getLogger(__name__)


def rebuild_faiss(index: Index, choice: IndexChoice, kind: str, progress: bool = True,
                  keep: tuple[str, ...] = (), extra: dict[str, Any] | None = None
                  ) -> dict[str, Any]:
    """Swap in a new generation of `index` whose FAISS index is built as `choice` from the
    stored embeddings; `keep` names keys of the old `faiss` section carried over, `extra` is
    added to the new one. Returns the new manifest (which lists the old one under
    `same_content_as`)."""
    old = index.manifest
    previous = index.manifest_sha256

    def write(work: Path) -> dict[str, Any]:
        embeddings = np.load(work / EMBEDDINGS, mmap_mode="r")
        info = build_faiss_index(embeddings, work / FAISS, choice, progress=progress)
        for key in keep:
            if key in old.get("faiss", {}):
                info[key] = old["faiss"][key]
        info.update(extra or {})
        manifest = dict(old)
        manifest["faiss"] = info
        manifest["checksums"] = {**(old.get("checksums") or {}), FAISS: sha256_file(work / FAISS)}
        manifest["same_content_as"] = list(old.get("same_content_as") or []) + [previous]
        return write_index_manifest(work, manifest)

    return replace_generation(index.path, kind, (FAISS, MANIFEST_NAME), write,
                              based_on=previous)


def reindex(path: str | Path, index_type: str = "auto", memory: str | int = DEFAULT_MEMORY,
            opq: bool = False, progress: bool = True) -> dict[str, Any]:
    """Rebuild the FAISS index of `path` as `index_type` within `memory`; returns the manifest."""
    index = Index(path)  # friendly errors for a missing, damaged or foreign index
    choice = choose_index(index.n_sentences, index.dim, memory, index_type, opq=opq)
    log.info("reindexing %s: %s", path, choice.reason)
    previous = index.manifest.get("faiss", {}).get("factory")

    manifest = rebuild_faiss(index, choice, "reindexing", progress,
                             extra={"reindexed": utc_now(), "previous": previous})
    log.info("%s: %s -> %s", path, previous, manifest["faiss"]["factory"])
    return manifest
