"""Methods that score every corpus sentence, then rank segments by their sentences' mean score.

    distance      Wang et al. 2017: distance to a random-corpus centroid minus to the task's
    density       mean cosine to the m nearest task sentences (m = 1: best cosine to any)
    classifier    positive-unlabeled logistic regression with self-training (`pu`)
    moore-lewis   Moore & Lewis 2010 bigram cross-entropy difference (`ngram_lm`)
    fused         classifier + moore-lewis: the sum of their z-scores (meaning + wording)
    auto          the embedding scorer with the best held-out F1 for the task (`heldout`)
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

from tapt.errors import InputError
from tapt.indexer.index import Index

from . import scoring
from .budget import Budget
from .choose_detector import corpus_rows
from .heldout import evaluate
from .methods import Ranking, SegmentView, _take
from .ngram_lm import BigramLM, Vocabulary, moore_lewis, select_sentences
from .pu import PUConfig, pu_classifier

log = logging.getLogger(__name__)

Scorer = Callable[[np.ndarray], np.ndarray]
AUTO_CANDIDATES = ("centroid", "distance", "density", "classifier")


def by_sentence_scores(view: SegmentView, sentence_scores: np.ndarray, budget: Budget | None,
                       info: dict[str, Any], threshold: float | None = None) -> Ranking:
    """Segments ranked by the mean score of their sentences; without a budget, those whose mean
    is above `threshold`."""
    seg_scores = scoring.segment_mean(sentence_scores, view.lengths)
    order = scoring.rank(seg_scores)
    if budget is None:
        if threshold is None:
            raise InputError("this method needs a --budget")
        order = order[seg_scores[order] > threshold]
    return _take(view, order, seg_scores, budget, info)


def fit_scorer(name: str, index: Index, task: np.ndarray, *, m: int = 10, rounds: int = 2,
               n_positive: int | None = None, seed: int = 0) -> tuple[Scorer, dict[str, Any]]:
    """An embedding scorer (rows -> higher = more task-like) fitted on the task."""
    if name == "centroid":
        query = scoring.centroid(task)
        return lambda rows: scoring.centroid_scores(rows, query), {}
    if name == "distance":
        sample = corpus_rows(index, max(len(task), 1000), np.random.default_rng(seed))
        t_mean = np.asarray(task, np.float64).mean(axis=0)
        c_mean = np.asarray(index.embeddings[sample], np.float64).mean(axis=0)
        return (lambda rows: scoring.distance_difference(rows, t_mean, c_mean),
                {"corpus_sample": int(len(sample))})
    if name == "density":
        return lambda rows: scoring.topm_mean_similarity(rows, task, m), {"m": m}
    if name == "classifier":
        prerank = scoring.centroid_scores(index.embeddings, scoring.centroid(task))
        _, scorer, info = pu_classifier(index.embeddings, task, prerank, n_positive,
                                        PUConfig(rounds=rounds, seed=seed))
        return scorer, info
    raise InputError(f"unknown scorer {name!r}: use one of {', '.join(AUTO_CANDIDATES)}")


def embedding_method(name: str, index: Index, view: SegmentView, task: np.ndarray,
                     budget: Budget | None, *, m: int = 10, rounds: int = 2,
                     seed: int = 0) -> Ranking:
    """Run one of distance / density / classifier over every corpus sentence."""
    n_positive = None
    if budget is not None and budget.unit == "sentences":
        n_positive = int(budget.value)
    scorer, info = fit_scorer(name, index, task, m=m, rounds=rounds, n_positive=n_positive,
                              seed=seed)
    threshold = 0.0 if name == "classifier" else None
    return by_sentence_scores(view, scorer(index.embeddings), budget, info, threshold)


def pre_ranking(name: str, index: Index, view: SegmentView, task: np.ndarray,
                budget: Budget | None, *, m: int = 10, rounds: int = 2, seed: int = 0) -> Ranking:
    """The full ranking of every segment by an embedding scorer (candidates for a detector)."""
    n_positive = int(budget.value) if budget is not None and budget.unit == "sentences" else None
    scorer, info = fit_scorer(name, index, task, m=m, rounds=rounds, n_positive=n_positive,
                              seed=seed)
    return by_sentence_scores(view, scorer(index.embeddings), None, info, threshold=-np.inf)


def choose_method(index: Index, task: np.ndarray, seed: int = 0, m: int = 10,
                  candidates: tuple[str, ...] = AUTO_CANDIDATES) -> list[dict]:
    """Held-out F1 of every embedding scorer for this task (TADPOLE's protocol), best first."""
    rng = np.random.default_rng(seed + 1)
    outliers = np.asarray(index.embeddings[corpus_rows(index, len(task) // 5 + 2, rng)])

    def fit_of(name: str):
        return lambda train: fit_scorer(name, index, train, m=m, rounds=0, seed=seed)[0]

    return evaluate({name: fit_of(name) for name in candidates}, task, outliers, seed)


def auto(index: Index, view: SegmentView, task: np.ndarray, budget: Budget | None, *,
         m: int = 10, rounds: int = 2, seed: int = 0) -> Ranking:
    """The method with the best held-out F1 for this task, run on the whole task."""
    table = choose_method(index, task, seed=seed, m=m)
    best = table[0]["name"]
    log.info("auto: %s (held-out F1 %.3f)", best, table[0]["f1"])
    ranking = embedding_method(best, index, view, task, budget, m=m, rounds=rounds, seed=seed)
    ranking.info.update({"chosen": best, "method_f1": {r["name"]: r["f1"] for r in table}})
    return ranking


def moore_lewis_scores(pool_texts: list[str], task_texts: list[str], seed: int = 0,
                       vocab: Vocabulary | None = None,
                       pool_encoded: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Cross-entropy difference of every pool sentence: in-domain LM on the task, general LM on
    an equally sized random sample of the pool. Pass `vocab` and `pool_encoded` to reuse them."""
    if not task_texts:
        raise InputError("moore-lewis needs the task's text")
    vocab = vocab or Vocabulary()
    ids, lengths = pool_encoded if pool_encoded is not None else vocab.encode(pool_texts)
    n = len(lengths)
    sample = np.sort(np.random.default_rng(seed).choice(n, size=min(len(task_texts), n),
                                                        replace=False))
    task_ids, task_len = vocab.encode(task_texts)
    in_lm = BigramLM.fit(task_ids, task_len, len(vocab))
    general = BigramLM.fit(*select_sentences(ids, lengths, sample), len(vocab))
    return moore_lewis(in_lm, general, ids, lengths)


def moore_lewis_method(index: Index, view: SegmentView, task_texts: list[str],
                       budget: Budget, seed: int = 0) -> Ranking:
    """Moore-Lewis over the index's stored text."""
    texts = index.store.texts(range(index.n_sentences))
    scores = moore_lewis_scores(texts, task_texts, seed)
    return by_sentence_scores(view, scores, budget, {"general_lm_sentences": len(task_texts)})


def fused_scores(classifier: np.ndarray, moore_lewis: np.ndarray) -> np.ndarray:
    """The fused score of every sentence: z(classifier log-odds) + z(Moore-Lewis difference).

    The two disagree usefully: the classifier sees meaning (embeddings), Moore-Lewis sees the
    domain's words, and on the benchmark their errors overlap little."""
    return scoring.fuse_zscores(classifier, moore_lewis)


def fused_sentence_scores(index: Index, task: np.ndarray, lexical: np.ndarray,
                          n_positive: int | None, *, rounds: int = 2, seed: int = 0
                          ) -> tuple[np.ndarray, dict[str, Any]]:
    """Fit the PU classifier on the task and fuse its scores with Moore-Lewis scores already
    computed for every stored sentence."""
    scorer, info = fit_scorer("classifier", index, task, rounds=rounds, n_positive=n_positive,
                              seed=seed)
    return fused_scores(scorer(index.embeddings), lexical), info


def fused_method(index: Index, view: SegmentView, task: np.ndarray, task_texts: list[str],
                 budget: Budget, *, rounds: int = 2, seed: int = 0, cut: bool = True) -> Ranking:
    """The PU classifier and Moore-Lewis over every stored sentence, fused by z-score; with
    `cut=False` every segment in order (a pre-ranking for detector rescoring)."""
    if not task_texts:
        raise InputError("fused needs the task's text")
    texts = index.store.texts(range(index.n_sentences))
    lexical = moore_lewis_scores(texts, task_texts, seed)
    n_positive = int(budget.value) if budget.unit == "sentences" else None
    scores, info = fused_sentence_scores(index, task, lexical, n_positive, rounds=rounds,
                                         seed=seed)
    info = {**info, "general_lm_sentences": len(task_texts)}
    if not cut:
        return by_sentence_scores(view, scores, None, info, threshold=-np.inf)
    return by_sentence_scores(view, scores, budget, info)
