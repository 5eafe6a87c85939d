"""A cache of task embeddings, so repeated selections for one task skip re-embedding it.

Keyed by everything that changes an embedding (the model's full fingerprint: weights, module
configs, tokenizer, maximum length; the backend and the compute dtype) and the exact task
sentences; stored as checksummed `.npy` files under `$TAPT_CACHE_DIR` (default
`$XDG_CACHE_HOME/tapt` or `~/.cache/tapt`), `TAPT_CACHE_DIR=off` turns it off. An entry is used
only when its checksum, shape and unit-length rows hold; a damaged one is recomputed with a
warning, and a cache that cannot be written is skipped with one warning.
"""

from __future__ import annotations

import hashlib
import io
import logging
from typing import Sequence

import numpy as np

from tapt.indexer.encoder import Encoder, embedding_key
from tapt.util.cache import read_checked, readable_cache, writable_cache, write_checked

log = logging.getLogger(__name__)

SUBDIR = "task-embeddings-v2"
# Batches per encoder call when a task is embedded: the progress bar moves every ~10 s on a CPU,
# a task of up to 8 batches is one call as before, and longer ones are as fast as in one call
# (2,000 seeds, ONNX, 2 cores: 34.2 s chunked vs 34.0 s; embeddings within 3e-8).
CHUNK_BATCHES = 8


def _key(encoder: Encoder, sentences: Sequence[str]) -> str:
    h = hashlib.sha256(embedding_key(encoder).encode())
    for s in sentences:
        h.update(b"\x00")
        h.update(s.encode("utf-8"))
    return h.hexdigest()


def _load(payload: bytes, n: int, dim: int) -> np.ndarray | None:
    try:
        emb = np.load(io.BytesIO(payload), allow_pickle=False)
    except (ValueError, OSError, EOFError):
        return None
    if emb.shape != (n, dim) or emb.dtype != np.float32:
        return None
    norms = np.linalg.norm(emb, axis=1)
    if not np.isfinite(emb).all() or not ((np.abs(norms - 1) <= 1e-3) | (norms == 0)).all():
        return None
    return emb


def encode_in_chunks(encoder: Encoder, sentences: Sequence[str], batch_size: int = 64,
                     progress: bool = False) -> np.ndarray:
    """`encoder.encode` over chunks of a few batches, with a progress bar in sentences.

    Sentences are ordered longest first before they are cut into chunks (as the encoders order
    them inside one call), so batches are padded as little as in a single call. The chunks do
    not depend on `progress`: a quiet run embeds exactly as a shown one.
    """
    from tqdm.auto import tqdm

    sentences = list(sentences)
    if not sentences:
        return np.empty((0, encoder.dim), dtype=np.float32)
    chunk = max(1, batch_size) * CHUNK_BATCHES
    order = np.argsort([-len(s) for s in sentences], kind="stable")
    out = np.empty((len(sentences), encoder.dim), dtype=np.float32)
    with tqdm(total=len(sentences), unit="sentence", desc="embed task", disable=not progress,
              leave=False) as bar:
        for start in range(0, len(sentences), chunk):
            rows = order[start:start + chunk]
            out[rows] = encoder.encode([sentences[i] for i in rows], batch_size=batch_size)
            bar.update(len(rows))
    return out


def encode_cached(encoder: Encoder, sentences: Sequence[str], batch_size: int = 64,
                  progress: bool = False) -> tuple[np.ndarray, bool]:
    """Embeddings of `sentences` and whether they came from the cache (a progress bar while
    they are embedded when `progress`)."""
    name = f"{_key(encoder, sentences)}.npy"
    found = readable_cache(SUBDIR)
    if found is not None:
        payload = read_checked(found / name)
        if payload is not None:
            emb = _load(payload, len(sentences), encoder.dim)
            if emb is not None:
                return emb, True
            log.warning("cache entry %s holds no valid embeddings; recomputing it", found / name)
    emb = encode_in_chunks(encoder, sentences, batch_size, progress)
    target = writable_cache(SUBDIR)
    if target is not None:
        buf = io.BytesIO()
        np.save(buf, emb)
        write_checked(target / name, buf.getvalue())
    return emb, False
