"""A cache of task embeddings, so repeated selections for one task skip re-embedding it.

Keyed by the model's weight hash and the exact task sentences; stored as `.npy` under
`$TAPT_CACHE_DIR` (default `$XDG_CACHE_HOME/tapt` or `~/.cache/tapt`), `TAPT_CACHE_DIR=off`
turns it off. A cache that cannot be read or written is skipped, never an error.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Sequence

import numpy as np

from tapt.util.cache import cache_dir
from tapt.indexer.encoder import Encoder

log = logging.getLogger(__name__)

# Batches per encoder call when a task is embedded: the progress bar moves every ~10 s on a CPU,
# a task of up to 8 batches is one call as before, and longer ones are as fast as in one call
# (2,000 seeds, ONNX, 2 cores: 34.2 s chunked vs 34.0 s; embeddings within 3e-8).
CHUNK_BATCHES = 8


def _key(model_sha256: str, sentences: Sequence[str], backend: str = "torch") -> str:
    h = hashlib.sha256(model_sha256.encode())
    if backend != "torch":  # torch keys stay as they were; other backends embed slightly differently
        h.update(backend.encode())
    for s in sentences:
        h.update(b"\x00")
        h.update(s.encode("utf-8"))
    return h.hexdigest()


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
    root = cache_dir()
    path = None
    if root is not None:
        key = _key(encoder.weights_sha256, sentences, getattr(encoder, "backend", "torch"))
        path = root / "task-embeddings" / f"{key}.npy"
        try:
            emb = np.load(path)
            if emb.shape == (len(sentences), encoder.dim) and emb.dtype == np.float32:
                return emb, True
        except (OSError, ValueError):
            pass
    emb = encode_in_chunks(encoder, sentences, batch_size, progress)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npy")
            np.save(tmp, np.ascontiguousarray(emb, dtype=np.float32))
            os.replace(tmp, path)
        except OSError as exc:
            log.debug("task embedding cache not written (%s)", exc)
    return emb, False
