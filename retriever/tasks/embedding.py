"""A cache of task embeddings, so repeated selections for one task skip re-embedding it.

Keyed by everything that changes an embedding (the model's full fingerprint: weights, module
configs, tokenizer, maximum length; the backend and the compute dtype) and the exact task
sentences; stored as checksummed `.npy` files under `$TAPT_CACHE_DIR` (default
`$XDG_CACHE_HOME/tapt` or `~/.cache/tapt`), `TAPT_CACHE_DIR=off` turns it off. An entry is used
only when its checksum, shape and unit-length rows hold; a damaged one is recomputed with a
warning, and a cache that cannot be written is skipped with one warning.

`embed_task` also caches the outcome of screening the task with the model's tokenizer (which
sentences were left out, and the warnings), keyed the same way by the unscreened sentences: a
task seen before is then served without loading the model at all (`LazyEncoder`).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tapt.indexer.encoding.encoder import Encoder, LazyEncoder, embedding_key
from tapt.retriever.tasks.forms import screen_left_out
from tapt.util.cache import read_checked, readable_cache, writable_cache, write_checked
from tapt.util.checks import whole_number

log = logging.getLogger(__name__)

SUBDIR = "task-embeddings-v2"
SCREEN_SUBDIR = "task-screens-v1"
# Batches per encoder call when a task is embedded: the progress bar moves every ~10 s on a CPU,
# a task of up to 8 batches is one call as before, and longer ones are as fast as in one call
# (2,000 seeds, ONNX, 2 cores: 34.2 s chunked vs 34.0 s; embeddings within 3e-8).
CHUNK_BATCHES = 8
# Bounds on what an entry can hold, so a huge or endless file in the cache is never read whole:
# an .npy header (numpy writes 128 bytes), and a screening's warnings.
_NPY_HEADER = 1 << 16
_SCREEN_BASE = 1 << 20


def _key(key: str, sentences: Sequence[str]) -> str:
    h = hashlib.sha256(key.encode())
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

    batch_size = whole_number(batch_size, "batch_size")
    sentences = list(sentences)
    if not sentences:
        return np.empty((0, encoder.dim), dtype=np.float32)
    chunk = batch_size * CHUNK_BATCHES
    order = np.argsort([-len(s) for s in sentences], kind="stable")
    out = np.empty((len(sentences), encoder.dim), dtype=np.float32)
    with tqdm(total=len(sentences), unit="sentence", desc="embed task", disable=not progress,
              leave=False) as bar:
        for start in range(0, len(sentences), chunk):
            rows = order[start:start + chunk]
            out[rows] = encoder.encode([sentences[i] for i in rows], batch_size=batch_size)
            bar.update(len(rows))
    return out


def _cached_embeddings(key: str, sentences: Sequence[str], dim: int) -> np.ndarray | None:
    name = f"{_key(key, sentences)}.npy"
    found = readable_cache(SUBDIR)
    if found is None:
        return None
    payload = read_checked(found / name, _NPY_HEADER + 4 * len(sentences) * dim)
    if payload is None:
        return None
    emb = _load(payload, len(sentences), dim)
    if emb is None:
        log.warning("cache entry %s holds no valid embeddings; recomputing it", found / name)
    return emb


def _store(sub: str, name: str, payload: bytes) -> None:
    target = writable_cache(sub)
    if target is not None:
        write_checked(target / name, payload)


def encode_cached(encoder: Encoder, sentences: Sequence[str], batch_size: int = 64,
                  progress: bool = False) -> tuple[np.ndarray, bool]:
    """Embeddings of `sentences` and whether they came from the cache (a progress bar while
    they are embedded when `progress`)."""
    key = embedding_key(encoder)
    emb = _cached_embeddings(key, sentences, encoder.dim)
    if emb is not None:
        return emb, True
    emb = encode_in_chunks(encoder, sentences, batch_size, progress)
    buf = io.BytesIO()
    np.save(buf, emb)
    _store(SUBDIR, f"{_key(key, sentences)}.npy", buf.getvalue())
    return emb, False


@dataclass
class TaskEmbedding:
    """A task as the model reads it.

    Attributes:
        sentences: The sentences kept (those the model cannot read at all are left out).
        embeddings: One row per kept sentence.
        warnings: What screening the task found (also logged).
        cached: Whether the embeddings came from the cache.
    """

    sentences: list[str]
    embeddings: np.ndarray
    warnings: list[str]
    cached: bool


def _screen_name(key: str, sentences: Sequence[str]) -> str:
    return f"{_key('screen' + chr(0) + key, sentences)}.json"


def _cached_screen(key: str, sentences: Sequence[str]) -> tuple[list[int], list[str]] | None:
    found = readable_cache(SCREEN_SUBDIR)
    if found is None:
        return None
    path = found / _screen_name(key, sentences)
    payload = read_checked(path, _SCREEN_BASE + 1024 * len(sentences))
    if payload is None:
        return None
    try:
        record = json.loads(payload)
        left_out, warnings = record["left_out"], record["warnings"]
        valid = (record["sentences"] == len(sentences)
                 and all(isinstance(i, int) and 0 <= i < len(sentences) for i in left_out)
                 and left_out == sorted(set(left_out)) and len(left_out) < len(sentences)
                 and all(isinstance(w, str) for w in warnings))
    except (ValueError, KeyError, TypeError):
        valid = False
    if not valid:
        log.warning("cache entry %s holds no valid screening; recomputing it", path)
        return None
    return left_out, warnings


def embed_task(encoder: LazyEncoder, sentences: Sequence[str], batch_size: int = 64,
               progress: bool = False) -> TaskEmbedding:
    """Screen the task with the model's tokenizer (`screen_tokens`) and embed what is kept,
    both through the cache: a task screened and embedded before loads no model.

    Args:
        encoder: The model, loaded only on a cache miss.
        sentences: The task's sentences.
        batch_size: Sentences per encoder batch.
        progress: Show a progress bar while the task is embedded.

    Returns:
        The kept sentences, their embeddings, the screening's warnings and whether the
        embeddings came from the cache.

    Raises:
        InputError: no sentence holds a token the model knows.
    """
    sentences = list(sentences)
    reuse = encoder.reuse_key
    if reuse is not None:
        screen = _cached_screen(reuse, sentences)
        if screen is not None:
            left_out, warnings = screen
            dropped = set(left_out)
            kept = [s for i, s in enumerate(sentences) if i not in dropped]
            emb = _cached_embeddings(encoder.key, kept, encoder.dim)
            if emb is not None:
                for warning in warnings:
                    log.warning("%s", warning)
                return TaskEmbedding(kept, emb, warnings, True)
    model = encoder.get()
    key = embedding_key(model)
    left_out, warnings = screen_left_out(model, sentences)
    dropped = set(left_out)
    kept = [s for i, s in enumerate(sentences) if i not in dropped]
    if reuse is not None and key == encoder.key:
        record = {"sentences": len(sentences), "left_out": left_out, "warnings": warnings}
        _store(SCREEN_SUBDIR, _screen_name(reuse, sentences), json.dumps(record).encode())
    emb, cached = encode_cached(model, kept, batch_size=batch_size, progress=progress)
    return TaskEmbedding(kept, emb, warnings, cached)

