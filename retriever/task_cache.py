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

# Sentences per encoder call: the progress bar moves every few seconds on a CPU, and a task of up
# to this many sentences is embedded in one call, as it always was.
CHUNK_BATCHES = 4


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

    The chunks do not depend on `progress`, so a quiet run embeds exactly as a shown one.
    """
    from tqdm.auto import tqdm

    chunk = max(1, batch_size) * CHUNK_BATCHES
    sentences = list(sentences)
    parts = []
    with tqdm(total=len(sentences), unit="sentence", desc="embed task", disable=not progress,
              leave=False) as bar:
        for start in range(0, len(sentences), chunk):
            parts.append(np.asarray(encoder.encode(sentences[start:start + chunk],
                                                   batch_size=batch_size), dtype=np.float32))
            bar.update(len(parts[-1]))
    if not parts:
        return np.empty((0, encoder.dim), dtype=np.float32)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


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
