"""DSIR (Xie et al. 2023, `data-selection` on PyPI): hashed n-gram importance weights, top-k mode.

Two ways to get the same numbers:
- `run_library`: the package end to end (`HashedNgramDSIR`: fit raw and target bags of hashed
  uni+bigrams, compute log importance weights of every pool sentence). Its default
  `min_example_length=100` would drop every pool sentence shorter than 100 words (here almost
  all of them), so it is set to 1 so that DSIR sees the same text as tapt.
- `PoolFeatures`: the package's own featurizer (`get_ngram_counts`: wordpunct tokens, sha256
  buckets) run once over the pool and kept sparse, then per task the package's formula
  `log_diff = log(p_target + 1e-8) - log(p_raw + 1e-8)`, weight = features @ log_diff. With the
  raw distribution fitted on all pool tokens (the package's "auto" limit of 1e9 tokens is larger
  than the pool) this is the same computation, done once instead of once per task.
Top-k mode ranks by the weight itself (no Gumbel noise).
"""

from __future__ import annotations

import gzip
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from tapt.bench import optional

NUM_BUCKETS = 10_000
NGRAMS = 2


def _row_buckets(text: str) -> np.ndarray:
    get_ngram_counts = optional("data_selection.hashed_ngram_dsir").get_ngram_counts

    counts = get_ngram_counts(text, n=NGRAMS, num_buckets=NUM_BUCKETS)
    return np.flatnonzero(counts), counts[np.flatnonzero(counts)]


class PoolFeatures:
    """Hashed n-gram counts of every pool sentence (CSR), computed with the package's featurizer."""

    def __init__(self, texts: list[str], progress: bool = True) -> None:
        from scipy import sparse

        indptr, indices, data = [0], [], []
        for text in tqdm(texts, desc="dsir features", disable=not progress):
            cols, vals = _row_buckets(text)
            indices.append(cols)
            data.append(vals)
            indptr.append(indptr[-1] + len(cols))
        self.matrix = sparse.csr_matrix(
            (np.concatenate(data).astype(np.float64), np.concatenate(indices), np.array(indptr)),
            shape=(len(texts), NUM_BUCKETS))
        raw = np.asarray(self.matrix.sum(axis=0)).ravel()
        self.raw_probs = raw / raw.sum()

    def save(self, path: Path) -> None:
        from scipy import sparse

        sparse.save_npz(path, self.matrix)

    @classmethod
    def load(cls, path: Path) -> "PoolFeatures":
        from scipy import sparse

        self = cls.__new__(cls)
        self.matrix = sparse.load_npz(path).tocsr()
        raw = np.asarray(self.matrix.sum(axis=0)).ravel()
        self.raw_probs = raw / raw.sum()
        return self

    def weights(self, target_texts: list[str]) -> np.ndarray:
        """Log importance weight of every pool sentence for this target (higher = more like it)."""
        target = np.zeros(NUM_BUCKETS)
        for text in target_texts:
            cols, vals = _row_buckets(text)
            target[cols] += vals
        target_probs = target / target.sum()
        log_diff = np.log(target_probs + 1e-8) - np.log(self.raw_probs + 1e-8)
        return np.asarray(self.matrix @ log_diff).ravel()


def _write_jsonl(path: Path, texts: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for text in texts:
            fh.write(json.dumps({"text": text}) + "\n")


def run_library(pool_texts: list[str], target_texts: list[str], progress: bool = True
                ) -> tuple[np.ndarray, float]:
    """The package end to end (one process): log importance weights of the pool, and seconds
    (`progress` False: the package's own tqdm bars hidden too)."""
    import contextlib
    import io

    HashedNgramDSIR = optional("data_selection").HashedNgramDSIR
    # the package draws tqdm bars on stderr with no switch to turn them off
    quiet = (contextlib.nullcontext() if progress
             else contextlib.redirect_stderr(io.StringIO()))
    with quiet, tempfile.TemporaryDirectory(prefix="tapt-dsir-") as tmp:
        tmp = Path(tmp)
        _write_jsonl(tmp / "raw.jsonl", pool_texts)
        _write_jsonl(tmp / "target.jsonl", target_texts)
        t0 = time.perf_counter()
        dsir = HashedNgramDSIR([str(tmp / "raw.jsonl")], [str(tmp / "target.jsonl")],
                               cache_dir=str(tmp / "cache"), num_proc=1, ngrams=NGRAMS,
                               num_buckets=NUM_BUCKETS, min_example_length=1)
        dsir.fit_importance_estimator(num_tokens_to_fit="all")
        dsir.compute_importance_weights()
        seconds = time.perf_counter() - t0
        weights = np.load(tmp / "cache" / "log_importance_weights" / "0.npy")
    return weights, seconds


def read_texts(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh]
