"""Learned fusion: per-task weights for z-scored sentence scorers, fitted from the task alone.

`fused` adds the z-scores of its scorers with equal weights. Here the weights are fitted per task
with TADPOLE's held-out protocol, never with oracle labels:

1. the task is split into `folds` contiguous blocks in its own order (sentences of one document
   sit together in a task file, so a held-out sentence's document-mates are mostly held out
   with it, and a scorer that merely recognises the task's documents gains nothing); for each
   block, every scorer is fitted on the other blocks and scores the held-out block and one
   fixed random corpus sample;
2. each fold's scores are standardised by the mean and spread of that fold's corpus-sample scores,
   i.e. on the same scale as the z-score of the final scorer over the whole corpus;
3. a logistic regression separates held-out task sentences (positive) from the corpus sample
   (unlabelled: it holds some task-like rows). Under the usual positive-unlabelled assumption
   (the task is a random sample of the task-like rows; Elkan & Noto 2008) a P-vs-U classifier
   ranks like the P-vs-N one, so its weights are fitted without any negative label. Weights are
   kept non-negative (every scorer is "higher = more task-like"): a scorer whose weight comes out
   negative is dropped and the rest refitted.

The callers' held-out fits of the PU classifier skip its self-training rounds (as `auto`'s
always have): the rounds cost most of a fit, and the protocol runs one fit per fold.

The held-out AUC of every single scorer, of the equal-weight sum and of the learned weights is
returned beside the weights, so a selection says why it weighted as it did.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tapt.errors import InputError
from tapt.retriever.learned.heldout import auc
from tapt.retriever.scoring import arrays

log = logging.getLogger(__name__)

# fit(train task indices) -> score(held-out task indices, corpus rows) -> (task scores, corpus scores)
FoldScorer = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
FoldFit = Callable[[np.ndarray], FoldScorer]


@dataclass
class FusionWeights:
    """Weights per scorer name (z-score units) and the held-out evidence behind them."""

    weights: dict[str, float]
    heldout_auc: dict[str, float] = field(default_factory=dict)
    positives: int = 0
    corpus_sample: int = 0
    folds: int = 0

    def to_json(self) -> dict:
        return {"weights": {k: round(v, 4) for k, v in self.weights.items()},
                "heldout_auc": self.heldout_auc, "heldout_positives": self.positives,
                "corpus_sample": self.corpus_sample, "folds": self.folds}


def _finite(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    if finite.all():
        return values
    return np.where(finite, values, values[finite].min() if finite.any() else 0.0)


def fold_split(n: int, folds: int) -> list[np.ndarray]:
    """`folds` contiguous, disjoint, non-empty blocks of range(n), in order."""
    if folds < 2:
        raise InputError(f"learned fusion needs at least 2 folds, got {folds}", param="folds")
    if n < 2 * folds:
        raise InputError(f"the task has {n} sentences: learned fusion with {folds} folds needs "
                         f"at least {2 * folds}", param="task")
    return [part for part in np.array_split(np.arange(n), folds)]


@dataclass
class HeldoutFeatures:
    """Cross-fitted standardised scores: rows are every task sentence once, then the corpus
    sample once per fold; columns are the scorers `names`. `is_task` labels the rows and
    `fold_of` says which fold's scorers produced each row."""

    x: np.ndarray
    is_task: np.ndarray
    fold_of: np.ndarray
    names: list[str]

    def columns(self, names: list[str] | tuple[str, ...]) -> np.ndarray:
        return self.x[:, [self.names.index(n) for n in names]]


def cross_fitted_features(fits: dict[str, FoldFit], n_task: int, corpus_rows: np.ndarray,
                          folds: int = 5) -> HeldoutFeatures:
    """Held-out features of every scorer in `fits` (see `HeldoutFeatures`), each fold's scores
    standardised by that fold's corpus-sample mean and spread."""
    names = list(fits)
    parts = fold_split(n_task, folds)
    task_x = np.zeros((n_task, len(names)))
    corpus_x = np.zeros((folds, len(corpus_rows), len(names)))
    everything = np.arange(n_task)
    for f, part in enumerate(parts):
        train = np.setdiff1d(everything, part)
        for j, name in enumerate(names):
            s_task, s_corpus = fits[name](train)(part, corpus_rows)
            s_task, s_corpus = _finite(s_task), _finite(s_corpus)
            mu, sd = s_corpus.mean(), s_corpus.std()
            sd = sd if sd > 0 else 1.0
            task_x[part, j] = (s_task - mu) / sd
            corpus_x[f, :, j] = (s_corpus - mu) / sd
    x = np.vstack([task_x, corpus_x.reshape(-1, len(names))])
    y = np.concatenate([np.ones(n_task, bool), np.zeros(folds * len(corpus_rows), bool)])
    fold_of = np.concatenate([np.zeros(n_task, np.int64),
                              np.repeat(np.arange(folds), len(corpus_rows))])
    for f, part in enumerate(parts):
        fold_of[part] = f
    return HeldoutFeatures(x, y, fold_of, names)


def fit_weights(x: np.ndarray, y: np.ndarray, names: list[str], C: float = 1.0,
                seed: int = 0) -> dict[str, float]:
    """Non-negative logistic-regression weights (class-balanced) of standardised features,
    scaled to sum to the number of scorers kept (the equal-weight sum has every weight 1)."""
    from sklearn.linear_model import LogisticRegression

    keep = list(range(len(names)))
    coef = np.zeros(len(names))
    while keep:
        model = LogisticRegression(C=C, class_weight="balanced", max_iter=1000,
                                   random_state=seed).fit(x[:, keep], y)
        w = model.coef_.ravel()
        if (w > 0).all():
            coef[keep] = w
            break
        keep = [k for k, v in zip(keep, w) if v > 0]
    if not (coef > 0).any():  # nothing separates the task: fall back to equal weights
        coef = np.ones(len(names))
    coef = coef * ((coef > 0).sum() / coef.sum())
    return {name: float(c) for name, c in zip(names, coef)}


def learn_weights(fits: dict[str, FoldFit], n_task: int, corpus_rows: np.ndarray,
                  folds: int = 5, seed: int = 0, C: float = 1.0) -> FusionWeights:
    """Fit fusion weights for the scorers in `fits` by the held-out protocol (module docstring)."""
    return weights_from(cross_fitted_features(fits, n_task, corpus_rows, folds),
                        list(fits), seed, C)


def weights_from(features: HeldoutFeatures, inputs: list[str], seed: int = 0,
                 C: float = 1.0) -> FusionWeights:
    """Fusion weights of the scorers `inputs` from held-out features that hold them."""
    names = list(inputs)
    x, y = features.columns(names), features.is_task
    folds = int(features.fold_of.max()) + 1
    weights = fit_weights(x, y, names, C, seed)
    w = np.array([weights[n] for n in names])
    table = {name: round(auc(x[:, j], y), 4) for j, name in enumerate(names)}
    table["equal-sum"] = round(auc(x.sum(axis=1), y), 4)
    table["learned"] = round(auc(x @ w, y), 4)
    log.info("learned fusion weights %s (held-out AUC %s)", weights, table)
    return FusionWeights(weights, table, int(y.sum()), int((~y).sum()) // folds, folds)


def fuse(scores: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    """Weighted sum of each scorer's z-score over all rows (non-finite rows count as the
    scorer's lowest finite score, as in `scoring.fuse_zscores`)."""
    missing = [name for name in weights if name not in scores]
    if missing:
        raise InputError(f"no scores for fusion inputs {missing}")
    total = None
    for name, w in weights.items():
        if w == 0:
            continue
        z = w * arrays.zscore(_finite(scores[name]))
        total = z if total is None else total + z
    if total is None:
        raise InputError("every fusion weight is zero")
    return total
