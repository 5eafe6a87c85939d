"""Learned fusion, few-seed Moore-Lewis and Domain-Finetune (issue 14) on small data."""

import json
import random

import numpy as np
import pytest

from conftest import TOPICS, make_sentence
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.evaluation.oracle import sentence_labels
from tapt.retriever.learned import auto_choice, fusion
from tapt.retriever.learned.few_seeds import (
    LexicalConfig,
    LexicalModel,
    PoolText,
    expanded_moore_lewis,
    expansion_rows,
)
from tapt.retriever.methods.learned_scorers import TaskData, fit_scorers, learned_fusion
from tapt.retriever.scoring import ngram_lm
from tapt.retriever.scoring.ngram_lm import BigramLM, Vocabulary, moore_lewis_scores


def test_unigram_cross_entropy_by_hand():
    vocab = Vocabulary()
    ids, lengths = vocab.encode(["a b", "a a"])          # predicted: a b </s> a a </s>, N = 6
    lm = BigramLM.fit(ids, lengths, len(vocab))          # V = 4
    a, b = vocab.ids["a"], vocab.ids["b"]
    one = np.array([0, a, b, 1]), np.array([4])          # <s> a b </s>
    p = {a: (3 + 1) / 11, b: (1 + 1) / 11, 1: (2 + 1) / 11}
    expected = -np.mean([np.log2(p[a]), np.log2(p[b]), np.log2(p[1])])
    assert np.isclose(ngram_lm.unigram_cross_entropy(lm, *one)[0], expected)
    # an unknown word gets the add-one unknown slot
    unknown = np.array([0, 99, 1]), np.array([3])
    assert np.isclose(ngram_lm.unigram_cross_entropy(lm, *unknown)[0],
                      -np.mean([np.log2(1 / 11), np.log2(p[1])]))


def _sentences(topic, n, seed):
    rng = random.Random(seed)
    return [make_sentence(rng, topic) for _ in range(n)]


def _corpus(n_per_topic=60, seed=0):
    rng = random.Random(seed)
    texts, labels = [], []
    for topic in TOPICS:
        for _ in range(n_per_topic):
            texts.append(make_sentence(rng, topic))
            labels.append(topic)
    order = list(range(len(texts)))
    rng.shuffle(order)
    return [texts[i] for i in order], np.array([labels[i] for i in order])


def test_plain_lexical_model_equals_moore_lewis():
    texts, _ = _corpus()
    task = _sentences("sea", 20, 5)
    pool = PoolText.of(texts)
    vocab = Vocabulary()
    encoded = vocab.encode(texts)
    expected = moore_lewis_scores([], task, 3, vocab=vocab, pool_encoded=encoded)
    got = LexicalModel(pool, task, np.empty(0, np.int64), 3).score_rows()
    assert np.allclose(got, expected)
    assert np.allclose(LexicalModel(PoolText.of(texts), task, [], 3).score_rows([5, 2]),
                       expected[[5, 2]])


def test_expansion_rows_and_config():
    meaning = np.array([0.5, 3.0, -1.0, 2.0, 1.0])
    assert expansion_rows(meaning, 4, 0.5).tolist() == [1, 3]
    assert expansion_rows(meaning, None, 1.0).tolist() == [0, 1, 3, 4]   # log-odds > 0
    assert len(expansion_rows(meaning, 4, 0.0)) == 0
    with pytest.raises(InputError):
        LexicalConfig(order=3)
    with pytest.raises(InputError):
        LexicalConfig(fraction=1.5)


def test_expanded_moore_lewis_helps_a_tiny_task():
    texts, labels = _corpus(n_per_topic=200)
    relevant = labels == "medical"
    task = _sentences("medical", 5, 9)
    pool = PoolText.of(texts)
    meaning = relevant + np.random.default_rng(0).normal(0, 0.3, len(texts))  # a decent ranking
    n = int(relevant.sum())
    plain, _ = expanded_moore_lewis(pool, task, meaning, n, LexicalConfig(fraction=0.0))
    expanded, info = expanded_moore_lewis(pool, task, meaning, n, LexicalConfig())
    top = lambda s: relevant[np.argsort(-s, kind="stable")[:n]].mean()  # noqa: E731
    assert info["expansion_rows"] == n // 2 and info["general_lm_sentences"] == 5 + n // 2
    assert top(expanded) >= top(plain)
    uni, _ = expanded_moore_lewis(pool, task, meaning, n, LexicalConfig(order=1))
    assert top(uni) > 0.8


def test_fit_weights_prefers_the_informative_scorer_and_stays_non_negative():
    rng = np.random.default_rng(0)
    y = np.concatenate([np.ones(300, bool), np.zeros(3000, bool)])
    good = rng.normal(size=len(y)) + 2.5 * y
    noise = rng.normal(size=len(y))
    anti = rng.normal(size=len(y)) - 0.5 * y
    w = fusion.fit_weights(np.c_[good, noise, anti], y, ["good", "noise", "anti"])
    assert w["anti"] == 0 and w["good"] > 5 * max(w["noise"], 1e-9)
    assert np.isclose(sum(v for v in w.values()), sum(v > 0 for v in w.values()))
    # nothing separates: equal weights
    flat = fusion.fit_weights(np.c_[-good, -good], y, ["a", "b"])
    assert flat == {"a": 1.0, "b": 1.0}


def test_fuse_weighted_zscores_and_fold_split():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([30.0, 10.0, -np.inf])
    out = fusion.fuse({"a": a, "b": b}, {"a": 2.0, "b": 0.0})
    assert np.allclose(out, 2 * (a - 2) / np.std(a))
    with pytest.raises(InputError):
        fusion.fuse({"a": a}, {"c": 1.0})
    parts = fusion.fold_split(23, 5)
    assert np.concatenate(parts).tolist() == list(range(23))          # contiguous, in order
    assert all(len(p) >= 4 for p in parts)
    with pytest.raises(InputError):
        fusion.fold_split(7, 5)


def test_learned_weights_follow_the_heldout_evidence():
    # the task is 40 rows of a blob; scorer "sharp" sees the blob, "blind" is noise
    rng = np.random.default_rng(1)
    task = rng.normal(size=(40, 3)) + [4, 0, 0]
    corpus = np.vstack([rng.normal(size=(400, 3)), rng.normal(size=(40, 3)) + [4, 0, 0]])

    def sharp(train):
        centre = task[train].mean(axis=0)
        score = lambda x: -np.linalg.norm(x - centre, axis=1)  # noqa: E731
        return lambda idx, rows: (score(task[idx]), score(corpus[rows]))

    def blind(train):
        r = np.random.default_rng(len(train))
        return lambda idx, rows: (r.normal(size=len(idx)), r.normal(size=len(rows)))

    result = fusion.learn_weights({"sharp": sharp, "blind": blind}, 40, np.arange(440), folds=4)
    assert result.weights["sharp"] > 1.5 and result.weights["blind"] < 0.5
    assert result.heldout_auc["sharp"] > 0.8 > result.heldout_auc["blind"]
    assert result.positives == 40 and result.folds == 4
    assert json.dumps(result.to_json())


def test_learned_fusion_on_the_fake_index(fake_index, encoder, labelled_corpus):
    index = Index(fake_index)
    texts = index.store.texts(range(index.n_sentences))
    task_texts = _sentences("medical", 30, 3)
    data = TaskData(index, PoolText.of(texts), encoder.encode(task_texts), task_texts,
                    n_positive=60, seed=0)
    got = learned_fusion(data, folds=3, sample=200, also=("centroid",))
    fused, weights, parts = got.scores, got.weights, got.parts
    labels = sentence_labels(index, "domain")
    assert len(fused) == index.n_sentences and set(parts) == {"classifier", "moore-lewis",
                                                               "density", "centroid"}
    assert set(weights.weights) == set(parts) - {"centroid"}
    assert weights.heldout_auc["learned"] > 0.7 and weights.corpus_sample == 200
    assert got.features.x.shape == (30 + 3 * 200, 4) and got.features.fold_of.max() == 2
    n = int((labels == "medical").sum())
    assert (labels[np.argsort(-fused, kind="stable")[:n]] == "medical").mean() > 0.7
    again = learned_fusion(data, folds=3, sample=200, also=("centroid",))
    assert np.array_equal(fused, again.scores) and again.weights.weights == weights.weights
    choice = auto_choice.choose(got.features.x, got.features.is_task, got.features.fold_of,
                             got.features.names)
    names = [r["name"] for r in choice.table]
    assert choice.chosen == names[0] and {"fused", "fused-learned", "centroid"} <= set(names)
    fitted = fit_scorers(("moore-lewis",), data, np.arange(10))
    assert fitted["moore-lewis"].info["expansion_rows"] == 30   # 0.5 x n_positive
    assert len(fitted["moore-lewis"].task(np.array([10, 11]))) == 2


# ---- Domain-Finetune ---------------------------------------------------------------------------

from tapt.modeling.classifier import freeze_below, load_classifier  # noqa: E402
from tapt.retriever.learned import finetune_classifier as ft  # noqa: E402
from tapt.retriever.learned.finetune_cache import WEIGHTS  # noqa: E402


def test_finetune_helpers_by_hand():
    prerank = np.array([0.1, 0.9, 0.5, 0.7, 0.3])
    assert ft.candidate_rows(prerank, 2, "1.5x").tolist() == [1, 2, 3]
    assert ft.candidate_rows(prerank, None, "2").tolist() == [1, 3]
    assert ft.candidate_rows(prerank, None, "all").tolist() == list(range(5))
    with pytest.raises(InputError):
        ft.candidate_rows(prerank, None, "2x")
    # candidates 1, 2, 3 hold 0.9, 0.5, 0.7; the new order 2 > 3 > 1 gets them re-dealt
    out = ft.transplant(prerank, np.array([1, 2, 3]), np.array([0.0, 5.0, 1.0]))
    assert np.allclose(out, [0.1, 0.5, 0.9, 0.7, 0.3])
    neg = ft.negative_rows(prerank, 1, 10, np.random.default_rng(0))
    assert sorted(neg.tolist()) == [0, 2, 4]            # everything below rank 2 x 1
    for bad in ({"steps": 0}, {"batch_size": 1}, {"lr": -1.0}, {"warmup": 1.0},
                {"rounds": -1}, {"device": "tpu"}, {"candidates": "x"}, {"max_length": 4}):
        with pytest.raises(InputError):
            ft.FinetuneConfig(**bad)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, labelled_corpus):
    from tiny_model import write_tiny_bert

    texts = [r["text"] for r in labelled_corpus[1]]
    return str(write_tiny_bert(tmp_path_factory.mktemp("tiny") / "bert", texts))


def _finetune(fake_index, tiny_model, **kw):
    index = Index(fake_index)
    labels = sentence_labels(index, "domain")
    task = _sentences("legal", 24, 11)
    prerank = (labels == "legal") + np.random.default_rng(0).normal(0, 0.8, index.n_sentences)
    n = int((labels == "legal").sum())
    config = ft.FinetuneConfig(model=tiny_model, steps=30, batch_size=8, max_length=16,
                               lr=1e-3, **kw)
    return ft.finetune_scores(index, task, prerank, n, config, progress=False), prerank, labels, n


def test_finetune_reranks_candidates_and_is_cached(fake_index, tiny_model, tmp_path,
                                                   monkeypatch, caplog):
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    result, prerank, labels, n = _finetune(fake_index, tiny_model)
    cand = result.candidates
    assert len(cand) == int(np.ceil(1.5 * n)) and not result.info["cached"]
    outside = np.setdiff1d(np.arange(len(prerank)), cand)
    assert np.array_equal(result.scores[outside], prerank[outside])
    assert np.allclose(np.sort(result.scores[cand]), np.sort(prerank[cand]))
    top = lambda s: (labels[np.argsort(-s, kind="stable")[:n]] == "legal").mean()  # noqa: E731
    assert top(result.scores) > top(prerank)             # the classifier learned the domain
    again, *_ = _finetune(fake_index, tiny_model)
    assert again.info["cached"] and np.array_equal(again.scores, result.scores)
    # a damaged entry is rebuilt with a warning, and gives the same classifier (seeded)
    (weights,) = (tmp_path / "cache" / "finetune").glob(f"*/{WEIGHTS}")
    weights.write_bytes(weights.read_bytes()[:-10] + b"0123456789")
    rebuilt, *_ = _finetune(fake_index, tiny_model)
    assert not rebuilt.info["cached"] and "damaged" in caplog.text
    assert np.allclose(rebuilt.scores, result.scores)
    other, *_ = _finetune(fake_index, tiny_model, seed=1)  # other parameters: another entry
    assert not other.info["cached"]
    assert len(list((tmp_path / "cache" / "finetune").iterdir())) == 2


@pytest.mark.slow
def test_finetune_without_a_writable_cache(fake_index, tiny_model, tmp_path, monkeypatch):
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    monkeypatch.setenv("TAPT_CACHE_DIR", str(root / "tapt"))
    try:
        result, *_ = _finetune(fake_index, tiny_model, rounds=1)
    finally:
        root.chmod(0o700)
    assert not result.info["cached"] and result.info["positives"] > 24   # self-training added rows
    monkeypatch.setenv("TAPT_CACHE_DIR", "off")
    off, *_ = _finetune(fake_index, tiny_model, rounds=1)
    assert np.array_equal(off.scores, result.scores)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_finetune_on_gpu(fake_index, tiny_model, monkeypatch):
    monkeypatch.setenv("TAPT_CACHE_DIR", "off")
    result, prerank, labels, n = _finetune(fake_index, tiny_model, device="cuda",
                                           candidates="all")
    assert result.info["device"].startswith("cuda") and len(result.candidates) == len(prerank)


def test_finetune_cuda_refused_without_a_gpu(fake_index, tiny_model):
    if __import__("torch").cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(InputError, match="device"):
        _finetune(fake_index, tiny_model, device="cuda")


def test_freeze_below_trains_only_the_top_layers(tiny_model):
    import torch

    torch.manual_seed(0)
    model, _, _ = load_classifier(tiny_model)
    everything = freeze_below(model, 0)
    freeze_below(model, 1)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(".layer.1." in n for n in trainable) and not any(".layer.0." in n for n in trainable)
    assert {"head.weight", "head.bias"} <= trainable and len(trainable) < everything
    with pytest.raises(InputError):
        ft.FinetuneConfig(train_layers=-1)


def test_auto_choice_ranks_by_heldout_auc_and_judges_learned_fusion_out_of_fold():
    rng = np.random.default_rng(2)
    y = np.concatenate([np.ones(200, bool), np.zeros(2000, bool)])
    fold_of = np.concatenate([np.arange(200) % 4, np.repeat(np.arange(4), 500)])
    good = rng.normal(size=len(y)) + 2 * y
    weak = rng.normal(size=len(y)) + 0.3 * y
    x = np.c_[good, weak, rng.normal(size=len(y))]
    names = ["classifier", "moore-lewis", "density"]
    choice = auto_choice.choose(x, y, fold_of, names)
    table = {r["name"]: r for r in choice.table}
    assert choice.chosen in ("classifier", "fused-learned")
    assert table["classifier"]["auc"] > table["fused"]["auc"] > table["moore-lewis"]["auc"]
    assert table["density"]["auc"] < 0.6 and 0 <= table["density"]["f1"] <= 1
    extra = {"finetune": (np.r_[np.ones(10), np.zeros(10)], np.r_[np.ones(10), np.zeros(10)] > 0)}
    assert auto_choice.choose(x, y, fold_of, names, extra=extra).chosen == "finetune"


@pytest.mark.slow
def test_quality_methods_through_index_select(fake_index, encoder, tiny_model, monkeypatch):
    import functools

    import tapt
    from tapt.retriever.methods import auto

    monkeypatch.setenv("TAPT_CACHE_DIR", "off")
    ix = tapt.Index.open(fake_index)
    labels = sentence_labels(Index(fake_index), "domain")
    n = int((labels == "medical").sum())
    texts = _sentences("medical", 30, 4)
    select = functools.partial(ix.select, task=texts, budget=f"{n}sent", segment_size=1)
    precision = lambda s: (labels[s.rows[:, 0]] == "medical").mean()  # noqa: E731
    learned = select("fused-learned", folds=3, sample=200)
    assert len(learned) == n and precision(learned) > 0.8
    assert set(learned.info["fusion"]["weights"]) == {"classifier", "moore-lewis", "density"}
    tuned = select("finetune", finetune_model=tiny_model, steps=10)
    assert len(tuned) == n and tuned.info["finetune"]["candidate_rows"] >= n
    # `with_finetune` fine-tunes the index's model with the defaults: a tiny one here
    monkeypatch.setattr(auto, "FinetuneConfig", functools.partial(
        ft.FinetuneConfig, model=tiny_model, steps=10, batch_size=8, max_length=16))
    chosen = select("auto", over="all", with_finetune=True)
    names = {r["name"] for r in chosen.info["heldout"]}
    assert {"finetune", "fused", "fused-learned", "classifier", "centroid"} <= names
    assert chosen.info["chosen"] == chosen.info["heldout"][0]["name"] and len(chosen) == n
    with pytest.raises(InputError, match="budget"):
        ix.select("auto", task=texts, over="all")
    with pytest.raises(InputError, match="text"):
        ix.select("fused-learned", task=encoder.encode(texts), budget=f"{n}sent")


def test_make_optimizer_groups_decay_and_prefix_rates():
    import torch

    from tapt.util.training import make_optimizer

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    model.add_module("head", torch.nn.Linear(3, 1))
    optimizer, scheduler = make_optimizer(model, 1e-4, 0.01, 0.5, 10, prefix_lr={"head.": 1e-2})
    # decayed: the two weight matrices (1e-4 for layer 0, 1e-2 for the head); no decay: biases
    # and LayerNorm (3 tensors at 1e-4, the head's bias at 1e-2)
    rates = sorted((g["weight_decay"], g["initial_lr"], len(g["params"]))
                   for g in optimizer.param_groups)
    assert rates == [(0.0, 1e-4, 3), (0.0, 1e-2, 1), (0.01, 1e-4, 1), (0.01, 1e-2, 1)]
    assert optimizer.param_groups[0]["lr"] == 0.0            # warmup starts at zero


def test_onnx_scoring_matches_torch(tiny_model):
    import torch

    torch.manual_seed(0)
    model, tokenizer, _ = load_classifier(tiny_model)
    model.eval()
    texts = _sentences("legal", 40, 1) + _sentences("sea", 40, 2)
    config = ft.FinetuneConfig(model=tiny_model, max_length=16, score_batch_size=8,
                               score_backend="onnx")
    fitted = ft.FittedClassifier(model, tokenizer, config, torch.device("cpu"), {})
    got = fitted.score(texts)
    assert fitted.info["score_backend"] == "onnx"
    expected = ft._score(model, tokenizer, texts, config, torch.device("cpu"), False)
    assert np.allclose(got, expected, atol=1e-4)
    with pytest.raises(InputError):
        ft.FinetuneConfig(score_backend="tensorrt")


@pytest.mark.slow
def test_registered_quality_methods_select_through_the_registry(fake_index, encoder, tiny_model,
                                                                monkeypatch):
    from tapt.retriever.selections.make import SelectConfig, rank

    monkeypatch.setenv("TAPT_CACHE_DIR", "off")
    index = Index(fake_index)
    labels = sentence_labels(index, "domain")
    n = int((labels == "medical").sum())
    texts = _sentences("medical", 30, 4)
    task = encoder.encode(texts)
    precision = lambda r: (labels[r.segments] == "medical").mean()  # noqa: E731
    learned, _ = rank(index, SelectConfig("fused-learned", f"{n}sent", segment_size=1, folds=3,
                                          sample=200), task, texts)
    assert precision(learned) > 0.8 and set(learned.info["fusion"]["weights"]) == {
        "classifier", "moore-lewis", "density"}
    tuned, _ = rank(index, SelectConfig("finetune", f"{n}sent", segment_size=1,
                                        finetune_model=tiny_model, steps=10), task, texts)
    assert len(tuned.segments) == n and tuned.info["prerank"] == "fused"
    chosen, _ = rank(index, SelectConfig("auto", f"{n}sent", segment_size=1, over="all"),
                     task, texts)
    assert chosen.info["chosen"] == chosen.info["heldout"][0]["name"]
    assert {"fused", "fused-learned", "classifier"} <= {r["name"] for r in chosen.info["heldout"]}


def test_registered_quality_method_parameters_are_checked():
    from tapt.retriever.selections.make import SelectConfig

    for method, params in (("auto", {"with_finetune": True}), ("fused-learned", {"folds": 1}),
                           ("fused-learned", {"expand": 2.0}), ("finetune", {"candidates": "z"}),
                           ("finetune", {"finetune_device": "tpu"})):
        with pytest.raises(InputError):
            SelectConfig(method, "100sent", **params)
    with pytest.raises(InputError, match="budget"):
        SelectConfig("finetune")


def test_general_lm_size_is_reported_as_sampled(fake_index):
    """The general LM is fitted on as many random corpus sentences as the task has, at most
    the whole corpus: the info says how many it was."""
    from tapt.retriever.selections.make import SelectConfig, rank

    index = Index(fake_index)
    for n in (12, index.n_sentences + 50):
        texts = _sentences("medical", n, 5)
        ranking, _ = rank(index, SelectConfig("moore-lewis", "10"), None, texts)
        assert ranking.info["general_lm_sentences"] == min(n, index.n_sentences)
    assert ngram_lm.general_sample_size(7, 3) == 3
