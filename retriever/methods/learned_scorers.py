"""Sentence scorers fitted on all or part of a task, scoring corpus rows and held-out task
sentences alike: what learned fusion and `auto` need for TADPOLE's held-out protocol.

    classifier    the PU classifier's log-odds (`pu`, self-trained for `n_positive`)
    moore-lewis   Moore-Lewis, the task expanded by the classifier's top rows (`few_seeds`)
    moore-lewis-plain  Moore-Lewis on the task alone (Moore & Lewis's original)
    density       mean cosine to the 10 nearest task sentences
    distance      Wang et al.'s centroid distance difference
    centroid      cosine to the task centroid
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.learned.few_seeds import LexicalConfig, LexicalModel, PoolText, expansion_rows
from tapt.retriever.learned.fusion import (
    FoldFit,
    FusionWeights,
    HeldoutFeatures,
    cross_fitted_features,
    fuse,
    weights_from,
)
from tapt.retriever.methods.ranking_inputs import RankingInputs
from tapt.retriever.methods.registry import get_method
from tapt.retriever.methods.segments import SegmentView
from tapt.retriever.ranking.budget import parse_budget

SCORERS = ("classifier", "moore-lewis", "moore-lewis-plain", "density", "distance", "centroid")
FUSION_INPUTS = ("classifier", "moore-lewis", "density")


@dataclass
class TaskData:
    """A task (embeddings and text) on an index whose every sentence is encoded in `pool`."""

    index: Index
    pool: PoolText
    embeddings: np.ndarray
    texts: list[str]
    n_positive: int | None
    seed: int = 0
    m: int = 10
    rounds: int = 2
    lexical: LexicalConfig = field(default_factory=LexicalConfig)

    def __post_init__(self) -> None:
        if len(self.embeddings) != len(self.texts):
            raise InputError("task embeddings and texts differ in length")


@dataclass
class Fitted:
    """One scorer fitted on part of a task: `corpus(rows)` (None = every row), `task(indices)`."""

    corpus: Callable[[np.ndarray | None], np.ndarray]
    task: Callable[[np.ndarray], np.ndarray]
    info: dict[str, Any] = field(default_factory=dict)


def _embedding_fit(name: str, data: TaskData, train: np.ndarray, heldout: bool) -> Fitted:
    """The registered method's embedding scorer (`Method.scorer`), fitted on `train`."""

    method = get_method(name)
    params = method.make_params({k: v for k, v in (("m", data.m), ("rounds", data.rounds))
                                 if k in {f.name for f in dataclasses.fields(method.Params)}},
                                explicit=())
    budget = parse_budget(f"{data.n_positive}sent") if data.n_positive else None
    ctx = RankingInputs(data.index, SegmentView.of(data.index, 1), budget, data.seed,
                  data.embeddings, data.texts)
    scorer, info = method.scorer(ctx, data.embeddings[train], params, heldout=heldout)
    emb = data.index.embeddings

    def corpus(rows: np.ndarray | None) -> np.ndarray:
        if rows is None:
            return data.index.score_rows(scorer)
        return scorer(np.asarray(emb[np.asarray(rows)]))

    return Fitted(corpus, lambda idx: scorer(data.embeddings[idx]), info)


def fit_scorers(names: tuple[str, ...] | list[str], data: TaskData,
                train: np.ndarray | None = None, heldout: bool = False) -> dict[str, Fitted]:
    """The named scorers fitted on the task sentences `train` (all when None). `heldout` fits
    skip the classifier's self-training rounds (as `auto`'s held-out fits always have): the
    rounds cost most of a fit, and the held-out protocol runs one fit per fold."""
    unknown = [n for n in names if n not in SCORERS]
    if unknown:
        raise InputError(f"unknown scorers {unknown}: use {', '.join(SCORERS)}")
    train = np.arange(len(data.texts)) if train is None else np.asarray(train)
    out: dict[str, Fitted] = {}
    expand = data.lexical.fraction > 0 and "moore-lewis" in names
    if "classifier" in names or expand:
        out["classifier"] = _embedding_fit("classifier", data, train, heldout)
    for name in names:
        if name in ("density", "distance", "centroid"):
            out[name] = _embedding_fit(name, data, train, heldout)
    train_texts = [data.texts[i] for i in train]
    for name, fraction in (("moore-lewis", data.lexical.fraction), ("moore-lewis-plain", 0.0)):
        if name not in names:
            continue
        extra = (expansion_rows(out["classifier"].corpus(None), data.n_positive, fraction)
                 if fraction > 0 else np.empty(0, dtype=np.int64))
        out[name] = _lexical_fit(data, train_texts, extra)
    return {n: out[n] for n in names}


def _lexical_fit(data: TaskData, train_texts: list[str], extra: np.ndarray) -> Fitted:
    model = LexicalModel(data.pool, train_texts, extra, data.seed, data.lexical.order)
    return Fitted(model.score_rows, lambda idx: model.score_texts([data.texts[i] for i in idx]),
                  {"expansion_rows": int(len(extra)), "lm_order": data.lexical.order})


def fold_fits(names: tuple[str, ...] | list[str], data: TaskData) -> dict[str, FoldFit]:
    """One `FoldFit` per scorer for `fusion.learn_weights`; the scorers of one fold are fitted
    together (the lexical scorer reuses that fold's classifier)."""
    memo: dict[bytes, dict[str, Fitted]] = {}

    def fitted(train: np.ndarray) -> dict[str, Fitted]:
        key = np.asarray(train, np.int64).tobytes()
        if key not in memo:
            memo.clear()
            memo[key] = fit_scorers(names, data, train, heldout=True)
        return memo[key]

    def fit_of(name: str) -> FoldFit:
        def fit(train: np.ndarray):
            model = fitted(train)[name]
            return lambda idx, rows: (model.task(idx), model.corpus(rows))
        return fit

    return {name: fit_of(name) for name in names}


def corpus_sample(index: Index, n: int, seed: int) -> np.ndarray:
    """`n` distinct random corpus rows, sorted (the unlabelled side of the held-out protocol)."""
    rng = np.random.default_rng(seed + 7)
    return np.sort(rng.choice(index.n_sentences, size=min(n, index.n_sentences), replace=False))


def heldout_features(data: TaskData, names: tuple[str, ...] | list[str] = SCORERS,
                     folds: int = 5, sample: int = 4000) -> HeldoutFeatures:
    """Cross-fitted held-out scores of the named scorers (`fusion.cross_fitted_features`)."""
    return cross_fitted_features(fold_fits(names, data), len(data.texts),
                                 corpus_sample(data.index, sample, data.seed), folds)


@dataclass
class LearnedFusion:
    """Fused scores of every corpus row, the weights, each scorer's scores over the corpus
    (fitted on the whole task), and the held-out evidence."""

    scores: np.ndarray
    weights: FusionWeights
    parts: dict[str, np.ndarray]
    features: HeldoutFeatures


def learned_fusion(data: TaskData, inputs: tuple[str, ...] = FUSION_INPUTS,
                   also: tuple[str, ...] = (), folds: int = 5,
                   sample: int = 4000) -> LearnedFusion:
    """Learned fusion of the scorers `inputs` for one task (`fusion` module); `also` adds
    scorers to the held-out features and the corpus scores without fusing them (for `auto`)."""
    names = tuple(dict.fromkeys(inputs + also))
    features = heldout_features(data, names, folds, sample)
    weights = weights_from(features, list(inputs), data.seed)
    full = fit_scorers(names, data)
    parts = {name: full[name].corpus(None) for name in names}
    return LearnedFusion(fuse({n: parts[n] for n in inputs}, weights.weights), weights, parts,
                         features)
