"""Pick the detector that best separates a task from random corpus rows (TADPOLE's Table 1)."""

from __future__ import annotations

import logging

import numpy as np

from tapt.indexer.index import Index
from tapt.retriever.learned.detectors import DETECTORS, fit_detector
from tapt.retriever.learned.heldout import evaluate

log = logging.getLogger(__name__)


def corpus_rows(index: Index, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` distinct random corpus rows (sorted), at most the whole corpus."""
    return np.sort(rng.choice(index.n_sentences, size=min(n, index.n_sentences), replace=False))


def rank_detectors(index: Index, task: np.ndarray, seed: int = 0, pca_dims: int = 0,
                   detectors: tuple[str, ...] = DETECTORS) -> list[dict]:
    """Every detector's held-out F1 and AUC for this task, best first."""
    rng = np.random.default_rng(seed)
    rows = corpus_rows(index, 2 * len(task) + max(2, len(task) // 10), rng)
    rows = rng.permutation(rows)
    outliers = np.asarray(index.embeddings[np.sort(rows[: len(task) // 5 + 2])])
    background = np.asarray(index.embeddings[np.sort(rows[len(task) // 5 + 2:][: len(task)])])
    contamination = np.asarray(index.embeddings[np.sort(rows[-max(1, len(task) // 10):])])

    def fit_of(name: str):
        def fit(train: np.ndarray):
            anomaly = fit_detector(name, train, contamination[: max(1, len(train) // 10)],
                                   seed=seed, pca_dims=pca_dims, background=background)
            return lambda x: -anomaly(x)
        return fit

    ranking = evaluate({name: fit_of(name) for name in detectors}, task, outliers, seed)
    log.info("detectors for this task: %s",
             ", ".join(f"{r['name']} F1 {r['f1']:.3f}" for r in ranking))
    return ranking
