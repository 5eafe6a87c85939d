"""The wording classifier: hashed n-gram features from stored lexical ids, its per-shard scoring,
and the pseudo-labels it learns from."""

import numpy as np
import pytest

from tapt.indexer.reading.lexical import Lexicon
from tapt.retriever.learned.pu import PUConfig
from tapt.retriever.learned.wording import pseudo_labels, wording_scores
from tapt.retriever.scoring.ngram_features import (
    FEATURES,
    NgramClassifier,
    feature_ids,
    sentence_matrix,
)
from tapt.retriever.scoring.ngram_lm import HashedLMs

MEDICAL = ["the patient was given a dose of {} mg", "symptoms of {} include fever and pain",
           "the clinical trial of {} enrolled patients", "a dose of {} reduced the infection"]
LEGAL = ["the court held that the {} contract was void", "the defendant appealed the {} ruling",
         "under the statute the {} claim is barred", "the plaintiff filed a {} motion"]


def corpus(n_each: int, seed: int) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    texts, medical = [], []
    for i in range(n_each):
        for pattern, is_medical in ((MEDICAL[i % 4], True), (LEGAL[i % 4], False)):
            texts.append(pattern.format(words[rng.integers(len(words))]))
            medical.append(is_medical)
    return texts, np.array(medical)


def test_features_are_word_and_pair_counts_over_the_l2_length():
    hist, word, lengths = HashedLMs.text_pairs(["a b a", "c"])
    m = sentence_matrix(hist, word, lengths).toarray()
    assert m.shape == (2, FEATURES)
    # "a b a </s>": 4 predicted tokens, 8 features; the word "a" counts twice
    uni, _ = feature_ids(hist, word)
    assert np.isclose(m[0, uni[0]], 2 / np.sqrt(8))
    assert np.isclose(m[1].sum(), 4 / np.sqrt(4))     # "c </s>": 2 tokens, 4 features once each


def test_feature_buckets_are_the_hashes_modulo_the_feature_count():
    """A word's bucket is its hash modulo `FEATURES`, a pair's the 64-bit wrapped
    (history + 1) x mix + word modulo `FEATURES` (taken as low bits of per-word parts)."""
    from tapt.retriever.scoring.ngram_features import _MIX

    rng = np.random.default_rng(4)
    hist = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    word = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    hist[:3], word[:3] = 0, [1, 2**64 - 1, 0]
    with np.errstate(over="ignore"):
        pair = (hist + np.uint64(1)) * _MIX + word
    uni, bi = feature_ids(hist, word)
    np.testing.assert_array_equal(uni, (word % np.uint64(FEATURES)).astype(np.int64))
    np.testing.assert_array_equal(bi, (pair % np.uint64(FEATURES)).astype(np.int64))


@pytest.mark.parametrize("run", [None, 7])
def test_shard_scores_equal_the_sparse_product(monkeypatch, run):
    """Also with the bigram types taken a few at a time (`ngram_lm.type_runs`)."""
    from tapt.retriever.scoring import ngram_features

    if run:
        monkeypatch.setattr(ngram_features, "TYPE_RUN", run)
    texts, _ = corpus(40, 0)
    lexicon = Lexicon.of_texts(texts)
    assert len(lexicon.shards[0].bigrams) > 5 * (run or 0)
    rng = np.random.default_rng(1)
    model = NgramClassifier(lexicon, rng.normal(size=FEATURES).astype(np.float32), 0.25)
    rows = np.arange(len(texts))
    expected = sentence_matrix(*lexicon.pairs(rows)) @ model.weights + 0.25
    np.testing.assert_allclose(model.score_all(), expected, rtol=1e-5, atol=1e-5)


def test_fit_ranks_unseen_sentences_of_the_positive_side_first():
    texts, medical = corpus(60, 2)
    lexicon = Lexicon.of_texts(texts)
    train = np.arange(len(texts)) < 60
    model = NgramClassifier.fit(lexicon, ["a dose of beta for the patient"],
                                np.flatnonzero(train & medical), np.flatnonzero(train & ~medical))
    scores = model.score_all()
    held = ~train
    top = np.argsort(-scores[held])[: int(medical[held].sum())]
    assert medical[held][top].mean() == 1.0


def test_pseudo_labels_follow_the_self_training_rule():
    ranking = np.arange(1000, 0, -1).astype(np.float32)      # row i ranks i-th
    config = PUConfig(seed=3)
    pos, neg = pseudo_labels(ranking, k=100, n_task=10, config=config)
    assert pos.tolist() == list(range(50))                     # the top half of k, all taken
    assert len(neg) == 3 * (10 + 50) and neg.min() >= 200      # below the top 2k
    assert np.all(np.diff(neg) > 0)
    again = pseudo_labels(ranking, k=100, n_task=10, config=config)
    assert np.array_equal(again[1], neg)                       # seeded


def test_wording_scores_learn_from_a_ranking_without_labels():
    texts, medical = corpus(80, 4)
    lexicon = Lexicon.of_texts(texts)
    rng = np.random.default_rng(5)
    # a noisy first ranking: right on average, wrong on a third of the rows
    ranking = (medical + rng.normal(scale=0.8, size=len(texts))).astype(np.float32)
    scores, info = wording_scores(lexicon, ["symptoms of gamma include fever"], ranking,
                                  int(medical.sum()), PUConfig(seed=0))
    n = int(medical.sum())
    first = medical[np.argsort(-ranking)[:n]].mean()
    assert medical[np.argsort(-scores)[:n]].mean() > first
    assert info["pseudo_positives"] == n // 2 and info["features"] == FEATURES


def test_fused_wording_choices_are_checked():
    from tapt.errors import InputError
    from tapt.retriever.methods.registry import get_method

    method = get_method("fused")
    assert method.make_params({}, explicit=()).wording == "lm+classifier"
    with pytest.raises(InputError):
        method.make_params({"wording": "trigram"}, explicit=("wording",))
