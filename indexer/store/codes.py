"""The int8 codes an index may store beside its embeddings: symmetric per-dimension scales from a
seeded sample of rows, and the rows coded with them."""

from __future__ import annotations

import numpy as np

CODE_SAMPLE = 262_144


def code_scale(embeddings, seed: int = 0) -> np.ndarray:
    """Per-dimension scale of symmetric int8 codes: the largest magnitude of a seeded sample of
    rows / 127 (values beyond it are clipped)."""
    n = len(embeddings)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, size=min(n, CODE_SAMPLE), replace=False))
    sample = np.asarray(embeddings[rows], dtype=np.float32)
    return np.maximum(np.abs(sample).max(axis=0), 1e-6).astype(np.float32) / 127.0


def encode_codes(rows: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """int8 codes of float rows: round(x / scale), clipped to [-127, 127]."""
    x = np.asarray(rows, dtype=np.float32) / scale
    return np.clip(np.rint(x), -127, 127).astype(np.int8)
