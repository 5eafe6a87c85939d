"""Unit tests of the new scorers on small arrays, and of the new methods on the fake index."""

import numpy as np
import pytest

from conftest import HashingEncoder
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.learned import heldout
from tapt.retriever.learned.detectors import DETECTORS, fit_detector
from tapt.retriever.learned.pu import PUConfig, pu_classifier
from tapt.retriever.scoring import arrays, ngram_lm
from tapt.retriever.scoring.ngram_lm import moore_lewis_scores
from tapt.retriever.selections.make import SelectConfig, rank


def unit(x):
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_topm_mean_similarity_by_hand():
    task = unit([[1, 0], [0, 1], [1, 1]])
    rows = unit([[1, 0], [0, 1]])
    s = 1 / np.sqrt(2)
    assert np.allclose(arrays.topm_mean_similarity(rows, task, 1), [1, 1])
    assert np.allclose(arrays.topm_mean_similarity(rows, task, 2), [(1 + s) / 2] * 2)
    assert np.allclose(arrays.topm_mean_similarity(rows, task, 9), [(1 + s) / 3] * 2)
    assert np.allclose(arrays.topm_mean_similarity(rows, task, 1, chunk=1),
                       arrays.max_similarity(rows, task))


def test_distance_difference_by_hand():
    rows = np.array([[0.0, 1.0], [0.6, 0.8]])  # unit rows, as stored embeddings are
    out = arrays.distance_difference(rows, np.array([0.0, 1.0]), np.array([0.6, 0.8]))
    assert np.allclose(out, [np.sqrt(0.4), -np.sqrt(0.4)])


def test_scorers_on_codes_score_the_decoded_rows():
    """`for_codes(scale)` of a scorer gives its scores of the rows the codes decode to (rows
    chosen to decode exactly: unit rows on a 0.2 grid), in one pass over the int8 codes."""
    codes = np.array([[5, 0], [0, 5], [3, 4], [4, -3]], dtype=np.int8)
    scale = np.full(2, 0.2, dtype=np.float32)
    rows = codes * np.float64(0.2)
    query = unit([[1.0, 2.0]])[0]
    linear = arrays.Linear(query, bias=-0.25)
    np.testing.assert_allclose(linear.for_codes(scale)(codes), rows @ query - 0.25, atol=1e-6)
    t_mean, c_mean = np.array([0.1, 0.7]), np.array([0.5, 0.2])
    distance = arrays.DistanceDifference(t_mean, c_mean)
    np.testing.assert_allclose(distance.for_codes(scale)(codes),
                               arrays.distance_difference(rows, t_mean, c_mean), atol=1e-6)
    assert distance.for_codes(scale)(codes).dtype == np.float32
    task = unit([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    for m in (1, 2):
        np.testing.assert_allclose(arrays.TopMeanSimilarity(task, m).for_codes(scale)(codes),
                                   arrays.topm_mean_similarity(rows, task, m), atol=1e-6)
    # two scores per row (m = 2 weights) stream through the int8 cast as one
    two = arrays.linear_scores(codes, np.stack([query, -query], axis=1))
    np.testing.assert_allclose(two, np.stack([codes @ query, -(codes @ query)], axis=1),
                               rtol=1e-6)


def test_rescore_best_replaces_only_the_best_approximations():
    exact = np.array([0.9, 0.1, 0.5, 0.3, 0.7], dtype=np.float32)
    rows = np.eye(5, dtype=np.float32)
    approx = exact + np.array([-0.05, 0.02, 0.01, 0.05, -0.01], dtype=np.float32)
    scores, best = arrays.rescore_best(rows, arrays.Linear(exact), approx.copy(), 2)
    assert best.tolist() == [0, 4]
    np.testing.assert_array_equal(scores[best], exact[best])
    np.testing.assert_array_equal(scores[[1, 2, 3]], approx[[1, 2, 3]])


def test_fuse_zscores_by_hand():
    a = np.array([1.0, 2.0, 3.0])            # z = -1.2247, 0, 1.2247
    b = np.array([30.0, 10.0, 20.0])         # z = 1.2247, -1.2247, 0
    z = np.sqrt(1.5)
    assert np.allclose(arrays.fuse_zscores(a, b), [0.0, -z, z])
    # scale does not matter: each scorer counts once
    assert np.allclose(arrays.fuse_zscores(a, 1000 * b), arrays.fuse_zscores(a, b))
    # a row one scorer cannot score gets that scorer's lowest finite value, not -inf
    c = np.array([-np.inf, 1.0, 2.0])
    assert np.allclose(arrays.fuse_zscores(c), arrays.zscore([1.0, 1.0, 2.0]))
    assert np.allclose(arrays.fuse_zscores(np.ones(3), a), arrays.zscore(a))
    with pytest.raises(ValueError):
        arrays.fuse_zscores(a, b[:2])
    with pytest.raises(ValueError):
        arrays.fuse_zscores()


def test_fused_beats_either_half_when_their_errors_differ():
    # 100 relevant rows of 1000: each half confuses a different set of 50 irrelevant rows
    relevant = np.zeros(1000, dtype=bool)
    relevant[:100] = True
    rng = np.random.default_rng(0)
    meaning = rng.normal(size=1000) + 3 * relevant
    meaning[100:150] += 3                   # wrong in meaning, right in wording
    wording = rng.normal(size=1000) + 3 * relevant
    wording[150:200] += 3
    top = lambda s: relevant[np.argsort(-s)[:100]].mean()  # noqa: E731
    fused = arrays.fuse_zscores(meaning, wording)
    assert top(fused) > max(top(meaning), top(wording)) + 0.1


def test_bigram_lm_witten_bell_by_hand():
    vocab = ngram_lm.Vocabulary()
    ids, lengths = vocab.encode(["a b", "a a"])      # <s> a b </s> | <s> a a </s>
    lm = ngram_lm.BigramLM.fit(ids, lengths, len(vocab))
    # predicted tokens: a b </s> a a </s> -> N = 6; V = 4 (<s>, </s>, a, b)
    a, b = vocab.ids["a"], vocab.ids["b"]
    p1_b = (1 + 1) / (6 + 4 + 1)
    # history a: followed by b, a, </s> -> c(a) = 3, T(a) = 3, c(a, b) = 1
    expected = (1 + 3 * p1_b) / (3 + 3)
    got = 2 ** lm.log2_probs(np.array([a]), np.array([b]))[0]
    assert np.isclose(got, expected)
    # an unknown word after an unknown history gets the add-one unknown slot
    unk = 2 ** lm.log2_probs(np.array([99]), np.array([98]))[0]
    assert np.isclose(unk, 1 / 11)
    # probabilities over the vocabulary + unknown slot sum to one for a seen history
    words = np.array([0, 1, a, b, 99])
    total = (2 ** lm.log2_probs(np.full(5, a), words)).sum()
    assert np.isclose(total, 1.0)
    ce = lm.cross_entropy(ids, lengths)
    assert ce.shape == (2,) and (ce > 0).all()


def test_moore_lewis_prefers_in_domain_text():
    pool = ["the patient has a fever", "the ship left the harbour", "fever and cough in the patient",
            "the captain of the ship", "a storm at sea", "kidney disease of the patient"] * 3
    task = ["the patient had fever", "kidney fever patient", "a patient with cough"]
    scores = moore_lewis_scores(pool, task, seed=0)
    medical = np.array(["patient" in t or "fever" in t for t in pool])
    assert scores[medical].min() > scores[~medical].max()


def blobs(seed=0, n=300, dim=16):
    rng = np.random.default_rng(seed)
    centres = unit(rng.normal(size=(3, dim)))
    labels = np.repeat(np.arange(3), n // 3)
    x = unit(centres[labels] + 0.2 * rng.normal(size=(len(labels), dim)))
    return x, labels


def test_pu_classifier_separates_blobs_and_self_trains():
    x, labels = blobs()
    task = x[labels == 0][:30]
    prerank = arrays.centroid_scores(x, arrays.centroid(task))
    scores, scorer, info = pu_classifier(x, task, prerank, 100, PUConfig(rounds=2, seed=0))
    top = arrays.rank(scores)[:100]
    assert (labels[top] == 0).mean() > 0.95
    assert len(info["rounds"]) == 3 and info["rounds"][1]["positives"] > 30
    assert np.allclose(scorer(x[:5]), scores[:5], atol=1e-4)
    only, _, info0 = pu_classifier(x, task, prerank, None, PUConfig(rounds=0, seed=0))
    assert abs(info0["positive_estimate"] - 100) < 40
    with pytest.raises(InputError):
        PUConfig(rounds=-1)


@pytest.mark.parametrize("name", DETECTORS)
def test_every_detector_ranks_the_task_blob_first(name):
    x, labels = blobs(n=240)
    task = x[labels == 0][:60]
    anomaly = fit_detector(name, task, None, seed=0,
                           background=x[::4])
    a = anomaly(x)
    assert a.shape == (len(x),) and np.isfinite(a).all()
    inside = a[labels == 0][60:]
    assert np.mean(inside[:, None] < a[labels != 0][None, :]) > 0.9


def test_a_task_of_one_sentence_repeated_refuses_robust_cov_and_leaves_it_out_of_a_choice():
    same = np.tile(np.random.default_rng(0).random((1, 16)).astype(np.float32), (40, 1))
    with pytest.raises(InputError, match="robust-cov cannot fit these rows") as refused:
        fit_detector("robust-cov", same)
    assert refused.value.param == "detector"
    outliers = np.random.default_rng(1).random((10, 16)).astype(np.float32)
    fits = {name: (lambda name: lambda train: fit_detector(name, train))(name)
            for name in ("robust-cov", "knn-dist")}
    ranking = heldout.evaluate(fits, same, outliers)
    assert [r["name"] for r in ranking] == ["knn-dist"]


def test_unknown_detector_is_refused():
    with pytest.raises(InputError, match="unknown detector"):
        fit_detector("magic", np.eye(4, dtype=np.float32))
    with pytest.raises(InputError, match="'magic' is not one of iforest, lof") as err:
        SelectConfig(method="iforest", budget="0.1", detector="magic")
    assert err.value.param == "detector"


def test_heldout_metrics_by_hand():
    scores = np.array([0.9, 0.8, 0.7, 0.1])
    is_task = np.array([True, False, True, False])
    # top half = rows 0, 1: tp 1, precision 1/2, recall 1/2
    assert heldout.break_even_f1(scores, is_task) == pytest.approx(0.5)
    assert heldout.auc(scores, is_task) == pytest.approx(0.75)
    train, test = heldout.split_task(50, seed=0)
    assert len(test) == 5 and len(train) == 45 and not set(train) & set(test)
    x, labels = blobs()
    table = heldout.evaluate({"good": lambda t: (lambda r: r @ t.mean(0)),
                              "bad": lambda t: (lambda r: -(r @ t.mean(0)))},
                             x[labels == 0], x[labels != 0], seed=0)
    assert [r["name"] for r in table] == ["good", "bad"] and table[0]["f1"] > 0.9


@pytest.mark.parametrize("params", [
    {"method": "distance"}, {"method": "density", "m": 5}, {"method": "density", "m": 1},
    {"method": "classifier", "rounds": 1}, {"method": "moore-lewis"}, {"method": "auto"},
    {"method": "fused", "rounds": 1},
    {"method": "iforest", "prerank": "fused", "candidates": "1.2x", "detector": "knn-dist"},
    {"method": "iforest", "detector": "auto", "candidates": "3x"},
    {"method": "iforest", "detector": "lof", "prerank": "density", "candidates": "2x"},
])
def test_new_methods_find_the_task_domain(fake_index, medical_task, params):
    ix = Index(fake_index)
    labels = np.array([r["meta"]["domain"] for r in ix.store.records(range(ix.n_sentences))])
    relevant = labels == "medical"
    texts = medical_task.read_text().splitlines()
    task = HashingEncoder().encode(texts)
    config = SelectConfig(budget=f"{int(relevant.sum())}sent", segment_size=1, **params)
    ranking, _ = rank(ix, config, task, texts)
    assert relevant[ranking.segments].mean() > 0.8, params


def test_fused_needs_text_and_a_budget(fake_index, medical_task):
    ix = Index(fake_index)
    texts = medical_task.read_text().splitlines()
    with pytest.raises(InputError, match="budget"):
        SelectConfig(method="fused")
    with pytest.raises(InputError, match="text"):
        rank(ix, SelectConfig(method="fused", budget="50sent"), HashingEncoder().encode(texts), [])
    with pytest.raises(InputError, match="text"):
        rank(ix, SelectConfig(method="iforest", prerank="fused", budget="50sent"),
             HashingEncoder().encode(texts), [])


def test_classifier_without_budget_keeps_probable_rows(fake_index, medical_task):
    ix = Index(fake_index)
    texts = medical_task.read_text().splitlines()
    ranking, _ = rank(ix, SelectConfig(method="classifier", rounds=0, segment_size=1),
                      HashingEncoder().encode(texts))
    assert len(ranking.segments) > 0 and (ranking.scores > 0).all()


def test_stored_lexicon_scores_every_row_as_it_scores_rows_one_by_one(fake_index):
    """`score_all` (model ids looked up once per shard word, then per bigram type) gives each
    sentence the score `score_rows` gives it from its own (history, word) hashes."""
    from tapt.indexer.index import Index
    from tapt.retriever.scoring.ngram_lm import HashedLMs

    index = Index(fake_index)
    task = ["the patient had a fever and a cough", "blood flow to the kidneys was reduced"]
    models = HashedLMs(index.lexicon, task, seed=1)
    every = models.score_all()
    rows = np.random.default_rng(0).permutation(len(every))[:200]
    np.testing.assert_array_equal(every[rows], models.score_rows(rows))


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("sorted_types,run", [(True, None), (True, 5), (False, None)])
def test_stored_lexicon_scores_from_per_word_terms_as_from_every_pair(fake_index, monkeypatch,
                                                                       order, sorted_types,
                                                                       run):
    """A shard's scores from the models' per-word terms, with the pairs either model counted
    computed in full, equal the models' log-probabilities of every pair (`score_rows`), with
    extra in-domain rows and either order, and with the types taken a few at a time (`run`,
    the counted pairs then found across runs); a shard whose types are not sorted by
    (history, word) is scored pair by pair, with the same scores."""
    from tapt.indexer.index import Index
    from tapt.indexer.reading.lexical import Lexicon, ShardLexicon
    from tapt.retriever.scoring import ngram_lm
    from tapt.retriever.scoring.ngram_lm import HashedLMs

    if run:
        monkeypatch.setattr(ngram_lm, "TYPE_RUN", run)
    lexicon = Index(fake_index).lexicon
    assert len(lexicon.shards[0].bigrams) > 5 * (run or 0)
    if not sorted_types:
        shard = lexicon.shards[0]
        order_ = np.random.default_rng(3).permutation(len(shard.bigrams))
        where = np.empty_like(order_)
        where[order_] = np.arange(len(order_))
        shuffled = ShardLexicon(None, shard.vocab, np.asarray(shard.bigrams)[order_],
                                where[np.asarray(shard.lexical)].astype(np.int32),
                                shard.offsets)
        lexicon = Lexicon([shuffled, *lexicon.shards[1:]], lexicon.row_offsets,
                          lexicon.vocabulary)
    task = ["the patient had a fever and a cough", "blood flow to the kidneys was reduced"]
    models = HashedLMs(lexicon, task, extra_rows=np.arange(0, len(lexicon), 7), seed=2,
                       order=order)
    every = models.score_all()
    rows = np.arange(len(every))
    np.testing.assert_allclose(every, models.score_rows(rows), rtol=1e-6, atol=1e-6)
    ids = models.dense(np.asarray(lexicon.shards[0].vocab))
    split = models._split_gains(ids, lexicon.shards[0].bigrams)
    assert (split is None) == (not sorted_types and order == 2)


def test_bigram_log2_probs_split_into_word_terms_for_uncounted_pairs():
    """For a pair the model never counted, log2 P(w | h) is the word's term plus the history's
    (`split_log2`), unknown words and histories included."""
    from tapt.retriever.scoring.ngram_lm import BigramLM

    rng = np.random.default_rng(7)
    S, V = 40, 100
    lm = BigramLM.fit_pairs(rng.integers(0, S, 500), rng.integers(2, S, 500), V, S)
    qh, qw = rng.integers(0, S + 5, 3000), rng.integers(0, S + 5, 3000)
    counted = np.isin(qh * S + qw, lm.bigram_keys) & (qh < S) & (qw < S)
    ids = np.arange(S + 5)
    word, history = lm.split_log2(ids)
    np.testing.assert_allclose((word[qw] + history[qh])[~counted],
                               lm.log2_probs(qh, qw)[~counted], rtol=1e-12, atol=1e-12)
    assert counted.any() and not np.allclose((word[qw] + history[qh])[counted],
                                             lm.log2_probs(qh, qw)[counted])


def test_bigram_log2_probs_follow_the_interpolated_formula():
    """log2 P(w | h) of `BigramLM` (per-id terms gathered, the bigram table searched only where
    a pair can be in it) equals Witten-Bell-style interpolation computed pair by pair, for
    seen and unseen pairs, unknown words and unknown histories."""
    from tapt.retriever.scoring.ngram_lm import BigramLM

    rng = np.random.default_rng(6)
    S, V = 40, 100
    hist, word = rng.integers(0, S, 3000), rng.integers(2, S, 3000)
    lm = BigramLM.fit_pairs(hist, word, V, S)
    qh = np.concatenate([rng.integers(0, S + 5, 2000), hist[:300]])
    qw = np.concatenate([rng.integers(0, S + 5, 2000), word[:300]])
    total = lm.unigram_counts.sum()
    pairs = {}
    for a, b in zip(hist.tolist(), word.tolist()):
        pairs[a, b] = pairs.get((a, b), 0) + 1
    expected = []
    for a, b in zip(qh.tolist(), qw.tolist()):
        p1 = ((lm.unigram_counts[b] if b < S else 0.0) + 1.0) / (total + V + 1.0)
        c_h = lm.history_counts[a] if a < S else 0.0
        t_h = lm.history_types[a] if a < S else 0.0
        c_hw = pairs.get((a, b), 0) if a < S and b < S else 0
        expected.append(np.log2((c_hw + t_h * p1) / (c_h + t_h)) if c_h > 0 else np.log2(p1))
    np.testing.assert_allclose(lm.log2_probs(qh, qw), expected, rtol=1e-12)


def test_pu_classifier_above_the_exact_draw_size_draws_from_the_same_rows(monkeypatch):
    """Above `EXACT_DRAW_ROWS` the negatives are drawn from the rows below the same ranking
    position, in row order (no key per row): the same population and sample size, as
    separating, the same pseudo-positives, and seeded."""
    from tapt.retriever.learned import pu

    x, labels = blobs(n=3000)
    task = x[labels == 0][:30]
    prerank = arrays.centroid_scores(x, arrays.centroid(task)).astype(np.float32)
    drawn = []
    real_fit = pu._fit
    monkeypatch.setattr(pu, "_fit", lambda pos, neg, C: (
        drawn.append((pos, neg)), real_fit(pos, neg, C))[1])
    exact, _, exact_info = pu_classifier(x, task, prerank, 1000, PUConfig(rounds=2, seed=0))
    exact_draws, drawn[:] = list(drawn), []
    monkeypatch.setattr(pu, "EXACT_DRAW_ROWS", 0)
    lean, scorer, info = pu_classifier(x, task, prerank, 1000, PUConfig(rounds=2, seed=0))
    lean_draws, drawn[:] = list(drawn), []
    assert info["rounds"] == exact_info["rounds"]   # the same counts each round
    # round 0: negatives below position n // 3 of the pre-ranking, none above it
    below = set(arrays.rank(prerank)[len(x) // 3:].tolist())
    rows_of = {tuple(np.round(r, 6)): i for i, r in enumerate(x)}
    neg0 = [rows_of[tuple(np.round(r, 6))] for r in lean_draws[0][1]]
    assert set(neg0) <= below and len(set(neg0)) == len(neg0)
    assert not np.array_equal(lean_draws[0][1], exact_draws[0][1])   # another sample
    top = arrays.rank(lean)[:1000]
    assert (labels[top] == 0).mean() > 0.95
    again, _, _ = pu_classifier(x, task, prerank, 1000, PUConfig(rounds=2, seed=0))
    np.testing.assert_array_equal(again, lean)     # seeded
    assert abs(np.corrcoef(lean, exact)[0, 1]) > 0.99


def test_pu_classifier_from_a_ranking_scored_only_where_drawn(monkeypatch):
    """A pre-ranking scored only at the rows round 0 draws (`pu.DrawnRanking`, the path above
    `EXACT_DRAW_ROWS`): 2 x wanted + 64 rows are scored, the negatives come from below the
    estimated position n // 3 (all but a few from below the exact one), and the fit is seeded
    and separates as well as from every row's score."""
    from tapt.retriever.learned import pu

    x, labels = blobs(n=3000)
    task = x[labels == 0][:30]
    centroid = arrays.Linear(arrays.centroid(task), cosine=True)
    prerank = centroid(x)
    asked = []

    def score(rows):
        asked.append(np.asarray(rows).copy())
        return centroid(x[rows])

    drawn = []
    real_fit = pu._fit
    monkeypatch.setattr(pu, "_fit", lambda pos, neg, C: (
        drawn.append((pos, neg)), real_fit(pos, neg, C))[1])
    config = PUConfig(rounds=2, seed=0)
    lean, _, info = pu_classifier(x, task, pu.DrawnRanking(len(x), score), 1000, config)
    wanted = int(config.negatives * len(task))
    assert len(asked) == 1 and len(asked[0]) == 2 * wanted + 64
    assert np.all(np.diff(asked[0]) > 0)                 # ascending, no row twice
    rows_of = {tuple(np.round(r, 6)): i for i, r in enumerate(x)}
    neg0 = [rows_of[tuple(np.round(r, 6))] for r in drawn[0][1]]
    assert len(neg0) == len(set(neg0)) == wanted == info["rounds"][0]["negatives"]
    below = set(arrays.rank(prerank)[len(x) // 3:].tolist())
    assert np.mean([r in below for r in neg0]) > 0.95
    assert set(neg0) <= set(asked[0].tolist())
    assert (labels[arrays.rank(lean)[:1000]] == 0).mean() > 0.95
    again, _, _ = pu_classifier(x, task, pu.DrawnRanking(len(x), score), 1000, config)
    np.testing.assert_array_equal(again, lean)
    exact, _, _ = pu_classifier(x, task, prerank, 1000, config)
    assert np.corrcoef(lean, exact)[0, 1] > 0.99


def test_iforest_candidates_hold_n_times_a_sentence_budget():
    """`--candidates Nx` with a budget in sentences or tokens is the pre-ranking's shortest
    prefix holding N x the budget, whatever the length of its top segments (short ones: the
    pool used to hold about half the budget, then exactly 1x, which left the detector nothing
    to choose)."""
    from types import SimpleNamespace

    from tapt.retriever.methods.candidates import holding_budget
    from tapt.retriever.ranking.budget import parse_budget

    lengths = np.array([15] * 60 + [1] * 60)          # index order: long segments first
    ranking = np.arange(len(lengths))[::-1]            # the pre-ranking puts the short ones first

    def top_segments(ctx, params, count):
        return ranking[:count]

    pre = SimpleNamespace(top_segments=top_segments)
    view = type("View", (), {"lengths": lengths, "tokens": lengths * 20,
                             "__len__": lambda self: len(lengths)})()
    ctx = SimpleNamespace(view=view, budget=parse_budget("90sent"))
    for times in (1, 1.2, 2):           # the 6 index-order segments hold 90 sentences
        pool = holding_budget(ctx, pre, None, int(np.ceil(6 * times)), times)
        held = 90 * times
        assert lengths[pool].sum() >= held and lengths[pool[:-1]].sum() < held, times
        np.testing.assert_array_equal(pool, ranking[:len(pool)])
    ctx.budget = parse_budget("3seg")                  # a segment budget is a segment count
    np.testing.assert_array_equal(holding_budget(ctx, pre, None, 6, 2), ranking[:6])
    ctx.budget = parse_budget("30sent")     # 40 one-sentence top segments: 1x cuts them to 30,
    np.testing.assert_array_equal(holding_budget(ctx, pre, None, 40, 1), ranking[:30])
    np.testing.assert_array_equal(holding_budget(ctx, pre, None, 40, 2), ranking[:60])
    ctx.budget = parse_budget("500sent")    # 10 x more than the corpus holds: every segment
    assert len(holding_budget(ctx, pre, None, 20, 10)) == len(lengths)


def test_a_sentence_budget_the_candidates_cannot_fill_is_reported():
    from tapt.retriever.methods.base import take
    from tapt.retriever.ranking.budget import parse_budget

    lengths = np.array([5, 5, 5, 5])
    view = type("View", (), {"lengths": lengths, "tokens": lengths * 10,
                             "__len__": lambda self: 4})()
    info = {}
    ranking = take(view, np.array([2, 0]), np.zeros(4, np.float32), parse_budget("15sent"), info)
    assert list(ranking.segments) == [2, 0]
    assert info["budget_shortfall"] == "only 10 sentences in the candidates for 15"
    assert "15sent" in info["warnings"][0]
    full = {}
    take(view, np.array([2, 0, 1]), np.zeros(4, np.float32), parse_budget("15sent"), full)
    assert "budget_shortfall" not in full


@pytest.mark.parametrize("method", ["classifier", "fused"])
def test_selections_above_the_exact_draw_size_find_the_task_domain(fake_index, medical_task,
                                                                    monkeypatch, method):
    """The row-order draws of an index above `pu.EXACT_DRAW_ROWS`, forced on the small index:
    a selection through `Index.select` is as precise, and mostly the same segments."""
    from tapt.retriever.learned import pu

    ix = Index(fake_index)
    labels = np.array([r["meta"]["domain"] for r in ix.store.records(range(ix.n_sentences))])
    relevant = labels == "medical"
    texts = medical_task.read_text().splitlines()
    config = SelectConfig(method=method, budget=f"{int(relevant.sum())}sent", segment_size=1)
    exact, _ = rank(ix, config, HashingEncoder().encode(texts), texts)
    monkeypatch.setattr(pu, "EXACT_DRAW_ROWS", 0)
    drawn, _ = rank(ix, config, HashingEncoder().encode(texts), texts)
    assert relevant[drawn.segments].mean() > 0.8
    overlap = len(set(drawn.segments) & set(exact.segments)) / len(exact.segments)
    assert overlap > 0.8, overlap
