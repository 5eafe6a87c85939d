"""Anomaly detectors fitted on task embeddings (TADPOLE): lower anomaly = more task-like."""

from __future__ import annotations

import numpy as np


def fit_isolation_forest(
    task_embeddings: np.ndarray,
    corpus_sample: np.ndarray,
    seed: int = 0,
    n_estimators: int = 200,
    pca_dims: int = 0,
    pca_background: np.ndarray | None = None,
):
    """TADPOLE Algorithm 1: an Isolation Forest on the task plus a few random corpus sentences.

    The corpus sentences (10% as many as the task's, chosen by the caller) play the role of the
    expected contamination. With `pca_dims` > 0 the forest works in a PCA projection fitted on
    the task plus `pca_background` (corpus sentences as many as the task's): random axis-aligned
    cuts isolate poorly in 384 dimensions, and a projection fitted on the task alone would hide
    exactly the directions in which other domains differ from it.
    Returns a function rows -> anomaly scores (higher = more anomalous).
    """
    from sklearn.decomposition import PCA
    from sklearn.ensemble import IsolationForest

    train = np.vstack([task_embeddings, corpus_sample]).astype(np.float32)
    projection = None
    if pca_dims:
        basis = train if pca_background is None else np.vstack([task_embeddings, pca_background])
        dims = min(pca_dims, basis.shape[0], basis.shape[1])
        projection = PCA(n_components=dims, random_state=seed).fit(basis.astype(np.float32))
        train = projection.transform(train)
    forest = IsolationForest(n_estimators=n_estimators, random_state=seed, n_jobs=1).fit(train)

    def anomaly(rows: np.ndarray, chunk: int = 16384) -> np.ndarray:
        out = np.empty(len(rows), dtype=np.float32)
        for start in range(0, len(rows), chunk):
            block = np.asarray(rows[start:start + chunk], dtype=np.float32)
            if projection is not None:
                block = projection.transform(block)
            out[start:start + len(block)] = -forest.score_samples(block)
        return out

    return anomaly
