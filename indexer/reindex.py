"""`tapt index reindex`: change an index's FAISS type from its stored embeddings, no re-embedding.

Crash-safe like `tapt index add`: the new `index.faiss` (written and fsynced under a temporary
directory `.NAME.reindexing` that hard-links every other file of the index) and its manifest,
with the new `faiss` section and the new checksum of `index.faiss`, are swapped in with the index
in one atomic directory exchange. A reader sees the old index or the new one, never a mix; a
killed reindex leaves the index untouched (the next reindex removes the leftover directory).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from . import checkpoint
from .add import _exchange
from .build import EMBEDDINGS, FAISS
from .faiss_index import build_faiss_index
from .index import Index
from .index_choice import DEFAULT_MEMORY, choose_index
from tapt.util.files import fsync_path, sha256_file, write_json_atomic
from tapt.util.versions import utc_now

from .manifest import MANIFEST_NAME

log = logging.getLogger(__name__)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _mirror(index_dir: Path, work: Path) -> None:
    """Hard-link (or copy) every file of the index except the FAISS index and the manifest."""
    for item in sorted(index_dir.iterdir()):
        if item.name.startswith(".") or item.name in (FAISS, MANIFEST_NAME):
            continue
        if item.is_dir():
            (work / item.name).mkdir()
            for sub in sorted(item.iterdir()):
                if sub.is_file():
                    _link_or_copy(sub, work / item.name / sub.name)
        elif item.is_file():
            _link_or_copy(item, work / item.name)


def reindex(path: str | Path, index_type: str = "auto", memory: str | int = DEFAULT_MEMORY,
            opq: bool = False, progress: bool = True) -> dict[str, Any]:
    """Rebuild the FAISS index of `path` as `index_type` within `memory`; returns the manifest."""
    path = Path(path)
    Index(path)  # friendly errors for a missing, damaged or foreign index before locking
    with checkpoint.BuildLock(path):
        index = Index(path)
        choice = choose_index(index.n_sentences, index.dim, memory, index_type, opq=opq)
        old = index.manifest
        log.info("reindexing %s: %s", path, choice.reason)
        work = checkpoint.work_dir_for(path, "reindexing")
        if work.exists():
            log.info("removing %s left by an interrupted reindex", work)
            shutil.rmtree(work)
        work.mkdir()
        try:
            _mirror(path, work)
            embeddings = np.load(work / EMBEDDINGS, mmap_mode="r")
            info = build_faiss_index(embeddings, work / FAISS, choice, progress=progress)
            info["reindexed"] = utc_now()
            info["previous"] = old.get("faiss", {}).get("factory")
            manifest = dict(old)
            manifest["faiss"] = info
            if old.get("checksums") is not None:
                manifest["checksums"] = {**old["checksums"], FAISS: sha256_file(work / FAISS)}
            write_json_atomic(work / MANIFEST_NAME, manifest)
            fsync_path(work)
            _exchange(work, path)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        shutil.rmtree(work, ignore_errors=True)  # now the previous generation
    log.info("%s: %s -> %s", path, info["previous"], info["factory"])
    return manifest
