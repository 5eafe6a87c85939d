"""Building a FAISS index and calibrating its search: the step of a build (and of add and
reindex) that uses both `faiss_index` (the index types) and `ann_recall` (recall measured against
exact ground truth), above them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from . import stages
from ..ann.ann_recall import calibrate as calibrate_search
from ..ann.faiss_index import (FLAT_FACTORY, ShardedFaiss, build_part, faiss_section, ids_are_global,
                          read_faiss_index, train_template, write_faiss)
from ..ann.index_choice import IndexChoice, choice_from_manifest
from ..store.manifest import EMBEDDINGS
from ..store.shards import RowView


def calibrate_section(info: dict[str, Any], index, embeddings: np.ndarray, choice: IndexChoice,
                      progress: bool = False) -> dict[str, Any]:
    """`info` with the default search parameter calibrated on the whole (sharded) index."""
    if not choice.approximate:
        return info
    info = dict(info)
    info["search"] = calibrate_search(index, embeddings, choice, progress=progress)
    info["rescore"] = {**info["rescore"], "factor": info["search"]["rescore_factor"]}
    return info


def build_faiss_index(embeddings: np.ndarray, path: Path, choice: IndexChoice | str = FLAT_FACTORY,
                      progress: bool = True, calibrate: bool = True) -> dict[str, Any]:
    """One FAISS index over all of `embeddings` (a one-shard index's part), trained, added,
    calibrated and written (fsynced) to `path`; returns its `faiss` section. `choice` may be a
    bare factory string (old manifests)."""
    n, dim = embeddings.shape
    if isinstance(choice, str):
        choice = choice_from_manifest({"factory": choice}, n, dim)
    t0 = time.perf_counter()
    template, train_seconds = train_template(embeddings, choice)
    index = build_part(embeddings, choice, template, 0, progress)
    info = faiss_section(choice, index.ntotal, train_seconds)
    if calibrate:
        info = calibrate_section(info, index, embeddings, choice, progress)
    info["file"] = path.name
    info["bytes"] = write_faiss(index, path)
    info["build_seconds"] = round(time.perf_counter() - t0, 2)
    return info


def calibrated_faiss(work: Path, names: list[str], offsets: list[int], choice: IndexChoice,
                     ntotal: int, train_seconds: float, progress: bool) -> dict[str, Any]:
    """The top manifest's `faiss` section, its search parameter calibrated on every shard."""
    info = faiss_section(choice, ntotal, train_seconds)
    if not choice.approximate:
        return info
    view = RowView([np.load(stages.shard_path(work, n) / EMBEDDINGS, mmap_mode="r")
                    for n in names])
    parts = [read_faiss_index(stages.shard_path(work, n) / "index.faiss") for n in names]
    return calibrate_section(info, ShardedFaiss(parts, offsets, ids_are_global(choice)), view,
                             choice, progress)
