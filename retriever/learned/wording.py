"""The wording classifier: a hashed n-gram logistic regression (`scoring.ngram_features`) fitted
on a ranking's own pseudo-labels, without any label beyond the task.

Moore-Lewis compares two generative bigram models; a discriminative model of the same words
weighs each word and pair by how well it separates the task's side from the rest, which the
difference of two smoothed language models does not. With few task sentences a discriminative
n-gram model has too little to learn from, so it learns from a first ranking instead, by the rule
the PU classifier's self-training uses (`learned.pu`): the task and a sample of the top
`positive_fraction x n_positive` rows of the ranking are the positives; a uniform sample of the
rows below the top `2 x n_positive` (`negatives` per positive) the negatives. Without a budget,
`n_positive` is the number of rows the meaning classifier puts above probability 0.5.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tapt.retriever.learned.pu import PUConfig, pseudo_labels
from tapt.retriever.scoring.ngram_features import FEATURES, NgramClassifier
from tapt.util.progress import report_step


def wording_scores(lexicon, task_texts: Sequence[str], ranking: np.ndarray, k: int,
                   config: PUConfig, apply=None) -> tuple[np.ndarray, dict]:
    """The wording classifier's log-odds of every corpus row, and what it was fitted on.

    Args:
        lexicon: The corpus's lexicon (stored lexical ids).
        task_texts: The task's sentences.
        ranking: float32 first ranking of every corpus row (freed by the caller afterwards).
        k: The rows the selection wants (`n_positive`).
        config: The pseudo-labelling and fit settings (`PUConfig`; its rounds are not used).
        apply: Runs a per-shard scorer on every shard (a served index's actors); default the
            lexicon's own.

    Returns:
        (float32 log-odds per row, {"pseudo_positives", "negatives", "features"}).
    """
    positives, negatives = pseudo_labels(ranking, k, len(task_texts), config)
    report_step("fit the wording classifier")
    model = NgramClassifier.fit(lexicon, task_texts, positives, negatives, config.C)
    info = {"pseudo_positives": int(len(positives)), "negatives": int(len(negatives)),
            "features": FEATURES}
    return model.score_all(apply), info
