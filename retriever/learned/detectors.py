"""Novelty detectors fitted on task embeddings: each returns rows -> anomaly (higher = less task-like).

    iforest      Isolation Forest, 200 trees (TADPOLE)
    lof          Local Outlier Factor in novelty mode, 20 neighbours
    ocsvm        One-Class SVM, RBF kernel, nu = 0.1
    robust-cov   Mahalanobis distance under a Minimum Covariance Determinant fit (always in a
                 PCA projection of <= 16 dimensions: MCD needs many more rows than dimensions)
    pca-recon    squared reconstruction error of a PCA of the task (16 components, at most
                 a quarter of the dimensions)
    knn-dist     mean Euclidean distance to the 10 nearest task rows
All come from scikit-learn. With `pca_dims` > 0 the detector works in a PCA projection fitted on
the task plus as many corpus rows (`background`), which keeps the directions in which other
domains differ from the task.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tapt.errors import InputError

Anomaly = Callable[[np.ndarray], np.ndarray]
DETECTORS = ("iforest", "lof", "ocsvm", "robust-cov", "pca-recon", "knn-dist")
_ROBUST_MAX_DIMS = 16


def _model(name: str, train: np.ndarray, seed: int):
    """The fitted scikit-learn object and a function model, block -> anomaly."""
    from sklearn import covariance, decomposition, ensemble, neighbors, svm

    if name == "iforest":
        m = ensemble.IsolationForest(n_estimators=200, random_state=seed, n_jobs=1).fit(train)
        return lambda x: -m.score_samples(x)
    if name == "lof":
        m = neighbors.LocalOutlierFactor(n_neighbors=min(20, len(train) - 1), novelty=True).fit(train)
        return lambda x: -m.score_samples(x)
    if name == "ocsvm":
        m = svm.OneClassSVM(nu=0.1, gamma="scale").fit(train)
        return lambda x: -m.score_samples(x)
    if name == "robust-cov":
        try:
            m = covariance.MinCovDet(random_state=seed).fit(train)
        except ValueError as exc:      # no spread to fit (the same sentence many times)
            raise InputError(f"robust-cov cannot fit these rows ({str(exc).split('.')[0]}): "
                             "the task's sentences are (nearly) all alike; give more varied "
                             "ones, or another `detector`", param="detector") from None
        return m.mahalanobis
    if name == "pca-recon":
        p = decomposition.PCA(n_components=max(1, min(16, len(train) - 1, train.shape[1] // 4)),
                              random_state=seed).fit(train)
        return lambda x: ((x - p.inverse_transform(p.transform(x))) ** 2).sum(axis=1)
    if name == "knn-dist":
        m = neighbors.NearestNeighbors(n_neighbors=min(10, len(train)), algorithm="brute").fit(train)
        return lambda x: m.kneighbors(x)[0].mean(axis=1)
    raise InputError(f"unknown detector {name!r}: use one of {', '.join(DETECTORS)} or auto")


def fit_detector(name: str, task: np.ndarray, contamination: np.ndarray | None = None,
                 seed: int = 0, pca_dims: int = 0, background: np.ndarray | None = None
                 ) -> Anomaly:
    """Fit detector `name` on the task rows (plus `contamination` corpus rows, as TADPOLE does)."""
    from sklearn.decomposition import PCA

    train = np.asarray(task, dtype=np.float32)
    if contamination is not None and len(contamination):
        train = np.vstack([train, np.asarray(contamination, dtype=np.float32)])
    dims = pca_dims
    if name == "robust-cov" and (dims == 0 or dims > _ROBUST_MAX_DIMS):
        dims = _ROBUST_MAX_DIMS
    projection = None
    if dims:
        basis = train if background is None else np.vstack([task, background]).astype(np.float32)
        projection = PCA(n_components=min(dims, *basis.shape), random_state=seed).fit(basis)
        train = projection.transform(train)
    score = _model(name, train, seed)

    def anomaly(rows: np.ndarray, chunk: int = 16384) -> np.ndarray:
        out = np.empty(len(rows), dtype=np.float32)
        for start in range(0, len(rows), chunk):
            block = np.asarray(rows[start:start + chunk], dtype=np.float32)
            if projection is not None:
                block = projection.transform(block)
            out[start:start + len(block)] = score(block)
        return out

    return anomaly
