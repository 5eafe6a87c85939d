"""FAISS index creation from stored embeddings (the only indexer module that imports faiss)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

FLAT_FACTORY = "Flat"
_ADD_CHUNK = 65536


def build_faiss_index(
    embeddings: np.ndarray, path: Path, factory: str = FLAT_FACTORY, progress: bool = True
) -> dict[str, Any]:
    """Create an inner-product index from (memory-mapped) embeddings, added in chunks; write it."""
    import faiss

    n, dim = embeddings.shape
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        raise ValueError(f"factory {factory!r} needs training; only untrained-free types for now")
    for start in tqdm(range(0, n, _ADD_CHUNK), desc="faiss add", unit="chunk",
                      disable=not progress or n <= _ADD_CHUNK):
        index.add(np.ascontiguousarray(embeddings[start:start + _ADD_CHUNK], dtype=np.float32))
    faiss.write_index(index, str(path))
    return {"factory": factory, "metric": "inner_product", "ntotal": int(index.ntotal),
            "file": path.name, "bytes": os.path.getsize(path)}


def read_faiss_index(path: Path):
    """Load an index written by `build_faiss_index`, memory-mapped where the type allows it."""
    import faiss

    try:
        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    except RuntimeError:
        return faiss.read_index(str(path))
