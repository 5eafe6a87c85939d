"""TADPOLE's protocol for choosing a scorer for a task, from the task alone (no labels needed).

Split the task 90/10 (seeded), fit on the 90%, and score the held-out 10% together with an equal
number of random corpus rows taken as outliers. A scorer's F1 is that of the task class when the
better-scoring half of this test set is predicted "task" (the classes are equal in size, so this
is the break-even point); the ROC AUC is reported beside it. Random corpus rows include some
sentences of the task's own domain, which caps both numbers below 1 for every scorer alike.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from tapt.errors import InputError

log = logging.getLogger(__name__)

Scorer = Callable[[np.ndarray], np.ndarray]
Fit = Callable[[np.ndarray], Scorer]


def split_task(n: int, seed: int, test_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) indices of a seeded 90/10 split; both non-empty."""
    if n < 4:
        raise InputError(f"the task has {n} sentence{'' if n == 1 else 's'}: its held-out "
                         "split (90/10) needs at least 4")
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(2, int(round(test_fraction * n)))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def break_even_f1(scores: np.ndarray, is_task: np.ndarray) -> float:
    """F1 of the task class when the top half by score (ties by position) is predicted task."""
    scores, is_task = np.asarray(scores, np.float64), np.asarray(is_task, bool)
    order = np.lexsort((np.arange(len(scores)), -scores))
    predicted = np.zeros(len(scores), dtype=bool)
    predicted[order[: len(scores) // 2]] = True
    tp = int((predicted & is_task).sum())
    p = tp / max(1, int(predicted.sum()))
    r = tp / max(1, int(is_task.sum()))
    return 2 * p * r / (p + r) if p + r else 0.0


def auc(scores: np.ndarray, is_task: np.ndarray) -> float:
    """ROC AUC of `scores` for the task class (ties count one half)."""
    from scipy.stats import rankdata

    ranks = rankdata(scores)
    pos = np.asarray(is_task, bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not n_pos or not n_neg:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def evaluate(fits: dict[str, Fit], task: np.ndarray, outliers: np.ndarray,
             seed: int = 0) -> list[dict]:
    """Fit every scorer on 90% of the task; rank them by F1 (then AUC) on the held-out test set."""
    train_idx, test_idx = split_task(len(task), seed)
    outliers = np.asarray(outliers)[: len(test_idx)]
    test = np.vstack([task[test_idx], outliers])
    is_task = np.concatenate([np.ones(len(test_idx), bool), np.zeros(len(outliers), bool)])
    rows = []
    for name, fit in fits.items():
        try:
            scores = fit(task[train_idx])(test)
        except InputError as exc:        # one that cannot fit these rows is not a candidate
            log.info("%s left out: %s", name, exc.message)
            continue
        rows.append({"name": name, "f1": round(break_even_f1(scores, is_task), 4),
                     "auc": round(auc(scores, is_task), 4)})
    return sorted(rows, key=lambda r: (-r["f1"], -r["auc"], r["name"]))
