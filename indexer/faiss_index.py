"""FAISS index creation, loading and searching over the stored embeddings.

With `ann_recall` (exact ground truth and recall via faiss.contrib) the only indexer modules that
import faiss. Which index to build is decided in `index_choice`; every search of an approximate
index fetches more candidates than asked and ranks them by exact inner products (`rescore`).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from tapt.errors import InputError
from tapt.util.files import atomic_write

from .index_choice import (RESCORE_FACTOR, RESCORE_MIN, IndexChoice, choice_from_manifest,
                           rescore_k)
from .integrity import check_results
from .rescore import exact_topk
from .store import damaged

log = logging.getLogger(__name__)

FLAT_FACTORY = "Flat"
_ADD_CHUNK = 65536
_FALLBACK_DEFAULT = {"nprobe": 64, "efSearch": 128}
AGREEMENT = 2e-3  # FAISS vs numpy inner products of the same float32 rows differ by ~1e-6


def build_faiss_index(
    embeddings: np.ndarray, path: Path, choice: IndexChoice | str = FLAT_FACTORY,
    progress: bool = True, calibrate: bool = True,
) -> dict[str, Any]:
    """Create an inner-product index from (memory-mapped) embeddings, trained on a seeded sample
    where the type needs it, added in chunks, calibrated and written (fsynced) to `path`.

    Returns the manifest's `faiss` section. `choice` may be a bare factory string (old manifests).
    """
    import faiss

    n, dim = embeddings.shape
    if isinstance(choice, str):
        choice = choice_from_manifest({"factory": choice}, n, dim)
    t_start = time.perf_counter()
    index = faiss.index_factory(dim, choice.factory, faiss.METRIC_INNER_PRODUCT)
    if choice.kind == "hnsw":
        faiss.downcast_index(index).hnsw.efConstruction = int(
            choice.params.get("efConstruction", 40))
    train_seconds = 0.0
    if not index.is_trained:
        t0 = time.perf_counter()
        _train(faiss, index, embeddings, choice)
        train_seconds = time.perf_counter() - t0
    for start in tqdm(range(0, n, _ADD_CHUNK), desc="faiss add", unit="chunk",
                      disable=not progress or n <= _ADD_CHUNK):
        index.add(np.ascontiguousarray(embeddings[start:start + _ADD_CHUNK], dtype=np.float32))
    info: dict[str, Any] = {"factory": choice.factory, "metric": "inner_product",
                            "ntotal": int(index.ntotal), "file": path.name}
    info.update(choice.manifest())
    info["train"]["seconds"] = round(train_seconds, 2)
    if choice.approximate:
        info["rescore"] = {"factor": RESCORE_FACTOR.get(choice.kind, 1), "min": RESCORE_MIN}
        if calibrate:
            from .ann_recall import calibrate as calibrate_search

            info["search"] = calibrate_search(index, embeddings, choice, progress=progress)
            info["rescore"]["factor"] = info["search"]["rescore_factor"]
    # Through Python's file object, so a full or read-only disk is an OSError -> StorageError
    # (faiss's own writer reports it as a bare RuntimeError), written atomically and fsynced.
    with atomic_write(path, "wb") as fh:
        faiss.write_index(index, faiss.PyCallbackIOWriter(fh.write))
    info["bytes"] = os.path.getsize(path)
    info["build_seconds"] = round(time.perf_counter() - t_start, 2)
    return info


def _train(faiss, index, embeddings: np.ndarray, choice: IndexChoice) -> None:
    """Train on a seeded random sample of rows (sorted, so the memory map is read in order)."""
    n = len(embeddings)
    size = min(n, choice.train_size or n)
    rng = np.random.default_rng(choice.seed)
    rows = np.sort(rng.choice(n, size=size, replace=False)) if size < n else np.arange(n)
    sample = np.ascontiguousarray(embeddings[rows], dtype=np.float32)
    try:
        ivf = faiss.extract_index_ivf(index)
        ivf.cp.seed = choice.seed
        pq = getattr(faiss.downcast_index(ivf), "pq", None)
        if pq is not None:
            pq.cp.seed = choice.seed
    except RuntimeError:
        pass
    log.info("training %s on %s of %s rows", choice.factory, f"{size:,}", f"{n:,}")
    index.train(sample)


def read_faiss_index(path: Path):
    """Load an index written by `build_faiss_index`, memory-mapped where the type allows it."""
    import faiss

    try:
        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    except RuntimeError:
        return faiss.read_index(str(path))


def set_search_param(index, name: str, value: int) -> None:
    """Set `nprobe` (IVF) or `efSearch` (HNSW) on an index, through any wrapping transform."""
    import faiss

    faiss.ParameterSpace().set_index_parameter(index, name, int(value))


def search_setting(faiss_info: dict[str, Any], n: int, dim: int, nprobe: int | None = None,
                   ef_search: int | None = None) -> tuple[str, str | None, int | None]:
    """(kind, parameter name, value) for a search: the given value, else the recorded default."""
    choice = choice_from_manifest(faiss_info, n, dim)
    for param, value, name in (("nprobe", nprobe, "nprobe"), ("ef_search", ef_search,
                                                               "efSearch")):
        if value is None:
            continue
        if value < 1:
            raise InputError("must be at least 1", param=param)
        if choice.search_param != name:
            kind = "exact" if choice.kind == "flat" else choice.kind
            hint = {"nprobe": "use `nprobe`", "efSearch": "use `ef_search`"}.get(
                choice.search_param or "", "it needs no search parameter")
            raise InputError(f"does not apply to this index's FAISS index {choice.factory} "
                             f"({kind}): {hint}", param=param)
        return choice.kind, name, int(value)
    if choice.search_param is None:
        return choice.kind, None, None
    recorded = (faiss_info.get("search") or {}).get("default")
    return choice.kind, choice.search_param, int(recorded or _FALLBACK_DEFAULT[choice.search_param])


def knn_search(index, embeddings: np.ndarray, queries: np.ndarray, k: int,
               faiss_info: dict[str, Any], nprobe: int | None = None,
               ef_search: int | None = None, label: str | Path | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """The exact top-`k` rows per query by inner product: an exact index answers directly; an
    approximate one fetches `rescore_k` candidates that are rescored from `embeddings`.

    Every row FAISS returns is checked against the stored embeddings (an exact index's
    similarities must equal the rows' inner products; candidates must exist), so a damaged
    `index.faiss` or `embeddings.npy` that reaches an answer fails as IndexFormatError."""
    n, dim = embeddings.shape
    k = min(int(k), n)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    kind, name, value = search_setting(faiss_info, n, dim, nprobe, ef_search)
    if kind == "flat":
        sims, ids = index.search(queries, k)
        check_results(sims, ids, n, label)
        exact, _ = exact_topk(embeddings, queries, ids, k, label=label)
        valid = ids >= 0
        if (np.abs(np.where(valid, exact - sims, 0)) > AGREEMENT).any():
            q, j = np.argwhere(np.abs(np.where(valid, exact - sims, 0)) > AGREEMENT)[0]
            raise damaged(label, f"index.faiss and embeddings.npy disagree (query {int(q)}, "
                                 f"similarity {float(sims[q, j]):.4f} vs {float(exact[q, j]):.4f})")
        return sims, ids
    set_search_param(index, name, value)
    factor = (faiss_info.get("rescore") or {}).get("factor")
    sims, candidates = index.search(queries, rescore_k(k, kind, n, factor))
    check_results(sims, candidates, n, label)
    return exact_topk(embeddings, queries, candidates, k, label=label)
