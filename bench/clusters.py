"""Aharoni & Goldberg 2020, Table 1: how well unsupervised GMM clusters of the stored embeddings
recover the domain labels (purity), for several numbers of clusters.

A seeded sample of sentences is projected with PCA to 50 dimensions (as they do) and clustered
with a Gaussian mixture (diagonal covariances); purity = the share of sentences whose cluster's
majority label is their own label.
"""

from __future__ import annotations

import numpy as np

from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.evaluation.oracle import sentence_labels


def purity(clusters: np.ndarray, labels: np.ndarray) -> float:
    """Sum over clusters of the count of the majority label, over all items."""
    if len(clusters) != len(labels) or not len(labels):
        raise InputError("purity needs one label per clustered item")
    _, label_ids = np.unique(labels, return_inverse=True)
    table = np.zeros((int(clusters.max()) + 1, int(label_ids.max()) + 1), dtype=np.int64)
    np.add.at(table, (clusters, label_ids), 1)
    return float(table.max(axis=1).sum() / len(labels))


def cluster_purity(index: Index, ks: list[int], label_field: str = "domain",
                   sample: int = 20000, pca_dims: int = 50, seed: int = 0) -> list[dict]:
    """GMM purity of the index's embeddings against `label_field`, one row per k."""
    from sklearn.decomposition import PCA
    from sklearn.mixture import GaussianMixture

    if any(k < 1 for k in ks):
        raise InputError("values must be positive", param="ks")
    drawn = min(sample, index.n_sentences)
    if max(ks) > drawn:
        raise InputError(f"{max(ks)} clusters of {drawn} sampled sentences: every cluster "
                         "would hold one (or none); sample more or ask for fewer", param="ks")
    labels = sentence_labels(index, label_field)
    rows = np.sort(np.random.default_rng(seed).choice(
        index.n_sentences, size=min(sample, index.n_sentences), replace=False))
    x = np.asarray(index.embeddings[rows], dtype=np.float32)
    x = PCA(n_components=min(pca_dims, *x.shape), random_state=seed).fit_transform(x)
    out = []
    for k in ks:
        gmm = GaussianMixture(n_components=min(k, len(x)), covariance_type="diag",
                              random_state=seed).fit(x)
        out.append({"k": k, "purity": round(purity(gmm.predict(x), labels[rows]), 4),
                    "sentences": int(len(rows)), "labels": int(len(set(labels[rows])))})
    return out
