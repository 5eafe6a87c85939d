"""Selection fans out over shards: an index of 3 shards selects exactly what an index of 1 shard
of the same corpus selects (every deterministic method, row for row), and `scan` codes keeps at
least 0.99 of the exact selection."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import SAMPLE, HashingEncoder, make_sentence, write_split_corpus
from tapt.errors import IndexFormatError, InputError
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.index import Index
from tapt.retriever.methods.registry import methods
from tapt.retriever.selections.make import SelectConfig, rank

# finetune fine-tunes a transformer for minutes per task (tests/retriever/test_quality_methods.py runs it),
# perplexity adapts a masked LM (tests/retriever/test_perplexity.py runs it);
# every other registered method is deterministic given its seed.
SLOW = {"finetune", "perplexity", "task-model"}    # task-model: needs a model of its own
VARIANTS = {"auto": [{}, {"over": "all"}], "iforest": [{}, {"detector": "knn-dist"}],
            "classifier": [{}, {"rounds": 0}]}


def _config(**kw) -> BuildConfig:
    return BuildConfig(segment_size=4, split=False, progress=False, part_size=64,
                       embedding_dtype="float32", **kw)


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    base = tmp_path_factory.mktemp("shards")
    files = write_split_corpus(base, parts=4, docs_per_topic=10, seed=4)
    one = build_index(files, base / "one", HashingEncoder(), _config())
    three = build_index(files, base / "three", HashingEncoder(), _config(shards=3))
    assert len(one["shards"]) == 1 and len(three["shards"]) == 3
    return Index(base / "one"), Index(base / "three")


@pytest.fixture(scope="module")
def task():
    import random

    rng = random.Random(11)
    texts = [make_sentence(rng, "medical") for _ in range(30)]
    return HashingEncoder().encode(texts), texts


CASES = [(m.name, params) for m in methods() if m.name not in SLOW
         for params in VARIANTS.get(m.name, [{}])]


@pytest.mark.parametrize("method,params", CASES, ids=[f"{m}{p or ''}" for m, p in CASES])
def test_three_shards_select_what_one_shard_selects(indexes, task, method, params):
    one, three = indexes
    embeddings, texts = task
    budget = "120sent"
    got = []
    for index in (one, three):
        config = SelectConfig(method, budget, seed=3, **params)
        ranking, _ = rank(index, config, embeddings, texts)
        got.append(ranking)
    a, b = got
    assert len(a.segments) > 0
    assert np.array_equal(a.segments, b.segments)
    assert np.allclose(a.scores, b.scores, rtol=0, atol=1e-5)
    assert np.array_equal(a.weights, b.weights)


@pytest.mark.parametrize("method", ["centroid", "fused"])
def test_document_context_is_the_same_over_shards(indexes, task, method):
    one, three = indexes
    embeddings, texts = task
    got = [rank(index, SelectConfig(method, "120sent", seed=3, context="document"),
                embeddings, texts)[0] for index in (one, three)]
    plain = rank(one, SelectConfig(method, "120sent", seed=3, context="sentence"), embeddings,
                 texts)[0]
    assert np.array_equal(got[0].segments, got[1].segments)
    assert np.allclose(got[0].scores, got[1].scores, rtol=0, atol=1e-5)
    assert got[0].info["context"]["pooled"] and "context" not in plain.info


def test_a_three_shard_selection_reads_the_same_text(indexes, task, tmp_path):
    from tapt.retriever.selections.make import make_selection
    from tapt.retriever.tasks.forms import resolve_task

    one, three = indexes
    texts = task[1]
    rows = []
    for index in (one, three):
        selection = make_selection(index, SelectConfig("knn", "60sent", k=5),
                                   resolve_task(texts, False, index.dim), encoder=HashingEncoder())
        rows.append([(s.id, s.rows, s.text, s.doc_key) for s in selection])
    assert rows[0] == rows[1] and len(rows[0]) > 0


@pytest.fixture(scope="module")
def coded(tmp_path_factory):
    """6,000 real sentences of the bundled sample's pool in 3 shards, with int8 codes."""
    import gzip
    import json

    base = tmp_path_factory.mktemp("coded")
    with gzip.open(SAMPLE / "pool.jsonl.gz", "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for _, line in zip(range(6000), fh)]
    files = []
    for k in range(3):
        path = base / f"part-{k}.jsonl"
        with open(path, "w", encoding="utf-8") as out:
            for r in records[k * len(records) // 3:(k + 1) * len(records) // 3]:
                out.write(json.dumps(r) + "\n")
        files.append(path)
    build_index(files, base / "idx", HashingEncoder(dim=96),
                BuildConfig(segment_size=1, split=False, progress=False, shards=3, codes="int8"))
    with gzip.open(SAMPLE / "seeds" / "medical.jsonl.gz", "rt", encoding="utf-8") as fh:
        seeds = [json.loads(line)["text"] for line in fh][:100]
    return Index(base / "idx"), seeds


@pytest.mark.parametrize("method", ["centroid", "distance", "density"])
def test_scanning_codes_keeps_the_exact_selection(coded, method):
    index, seeds = coded
    assert index.codes is not None and index.embeddings.dtype == np.float16
    emb = HashingEncoder(dim=96).encode(seeds)
    for budget in ("0.1", "300sent"):
        exact, _ = rank(index, SelectConfig(method, budget), emb)
        codes, _ = rank(index, SelectConfig(method, budget, scan="codes"), emb)
        overlap = len(np.intersect1d(exact.segments, codes.segments)) / len(exact.segments)
        assert overlap >= 0.99, (budget, overlap)
        assert codes.info["scan"] == "codes" and codes.info["rescored_sentences"] >= 4 * len(
            exact.segments) * 0.99


@pytest.mark.parametrize("method", ["classifier", "fused"])
def test_a_classifier_fitted_on_codes_differs_from_the_exact_fit_as_a_seed_does(coded, method):
    """The classifier also fits on the codes (its pre-ranking and rounds): its negatives and
    pseudo-positives are drawn from slightly different rankings, so its selection differs from
    the exact one by about as much as an exact selection with another seed does (measured on
    this index: 0.85-0.87 against 0.85-0.90 between seeds). `fused` fits its classifier half
    the same way."""
    index, seeds = coded
    emb = HashingEncoder(dim=96).encode(seeds)

    def overlap(a, b):
        return len(np.intersect1d(a.segments, b.segments)) / len(a.segments)

    exact = [rank(index, SelectConfig(method, "300sent", seed=s), emb, seeds)[0] for s in (0, 1)]
    codes, _ = rank(index, SelectConfig(method, "300sent", scan="codes"), emb, seeds)
    assert codes.info["scan"] == "codes" and codes.info["rescored_sentences"] == 1200
    assert overlap(exact[0], codes) >= overlap(exact[0], exact[1]) - 0.05


@pytest.mark.parametrize("method", ["centroid", "distance", "density"])
def test_a_streamed_codes_cut_selects_what_the_whole_array_path_selects(coded, method,
                                                                        monkeypatch):
    """`scan` codes ranks candidates: the best `rescore` x budget segments on the codes, cut
    as a stream when few enough (only the cut kept) or from every segment's score otherwise;
    both give the same segments and exact scores, at every budget unit and segment size."""
    from tapt.retriever.methods import segments

    index, seeds = coded
    emb = HashingEncoder(dim=96).encode(seeds)
    for size, budget in ((1, "300sent"), (5, "40"), (5, "0.01"), (3, "3000tok")):
        got = []
        for share in (1.0, 0.0):                   # everything streams / nothing does
            monkeypatch.setattr(segments, "STREAM_SHARE", share)
            ranking, _ = rank(index, SelectConfig(method, budget, segment_size=size,
                                                  scan="codes"), emb)
            got.append(ranking)
        streamed, whole = got
        assert len(streamed.segments) > 10 and streamed.info["scan"] == "codes"
        assert np.array_equal(streamed.segments, whole.segments), (size, budget)
        assert np.array_equal(streamed.scores, whole.scores), (size, budget)
        assert np.all(np.diff(streamed.scores) <= 0)
        monkeypatch.undo()
        exact, _ = rank(index, SelectConfig(method, budget, segment_size=size), emb)
        same = len(np.intersect1d(exact.segments, streamed.segments)) / len(exact.segments)
        assert same >= 0.99, (size, budget, same)


def test_scanning_codes_without_a_budget_is_refused_before_fitting(coded):
    index, seeds = coded
    with pytest.raises(InputError, match="scanning codes needs a budget"):
        rank(index, SelectConfig("classifier", None, scan="codes"),
             HashingEncoder(dim=96).encode(seeds))


def test_codes_scans_reach_the_codes_only(coded, monkeypatch):
    """With `scan` codes every full scan of a method, the classifier's fit included, reads the
    int8 codes; the stored embeddings are only gathered (the fit's training rows, the rescored
    rows)."""
    index, seeds = coded
    emb = HashingEncoder(dim=96).encode(seeds)
    calls = []
    for name in ("score_rows", "score_codes"):
        real = getattr(Index, name)
        monkeypatch.setattr(Index, name, lambda self, scorer, _r=real, _n=name:
                            (calls.append(_n), _r(self, scorer))[1])
    rank(index, SelectConfig("classifier", "300sent", scan="codes", context="sentence"), emb)
    assert calls == ["score_codes"] * 4          # pre-ranking, rounds 0, 1 and 2
    calls.clear()
    rank(index, SelectConfig("classifier", "300sent", context="sentence"), emb)
    assert calls == ["score_rows"] * 4


def test_scanning_codes_needs_codes_and_a_budget(indexes, task):
    one, _ = indexes
    with pytest.raises(InputError, match="no int8 codes.*--codes int8"):
        rank(one, SelectConfig("centroid", "0.1", scan="codes"), task[0])
    with pytest.raises(InputError, match="rescore"):
        SelectConfig("centroid", "0.1", rescore=2.0)
    with pytest.raises(InputError, match="no int8 codes"):
        rank(one, SelectConfig("distance", "0.1", scan="codes"), task[0])


def test_codes_added_by_reindex_are_verified_and_checked_on_open(tmp_path):
    """`reindex(codes="int8")` gives an index codes (same rows, same content); `verify` passes;
    a flipped byte in a shard's codes.npy is refused on open, never ranked on."""
    import shutil

    from tapt.indexer.ann.index_choice import DEFAULT_MEMORY
    from tapt.indexer.building.reindex import reindex
    from tapt.indexer.building.verify import verify_index

    files = write_split_corpus(tmp_path, parts=3, docs_per_topic=4, seed=2)
    build_index(files, tmp_path / "idx", HashingEncoder(), _config(shards=3))
    reindex(tmp_path / "idx", "auto", DEFAULT_MEMORY, progress=False, codes="int8")
    index = Index(tmp_path / "idx")
    assert index.codes is not None and len(index.codes) == index.n_sentences
    assert all((s.directory / "codes.npy").is_file() for s in index.shards)
    assert verify_index(tmp_path / "idx").ok
    emb = HashingEncoder().encode(["Patient fever therapy dose clinical."] * 3)
    exact, _ = rank(index, SelectConfig("centroid", "40sent"), emb)
    coded, _ = rank(index, SelectConfig("centroid", "40sent", scan="codes"), emb)
    assert np.array_equal(exact.segments, coded.segments)
    del index
    shutil.copytree(tmp_path / "idx", tmp_path / "bad")
    path = tmp_path / "bad" / "shards" / "000001" / "codes.npy"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="codes.npy does not match the checksum"):
        rank(Index(tmp_path / "bad"), SelectConfig("centroid", "40sent", scan="codes"), emb)


@pytest.mark.parametrize("prerank", ["centroid", "distance", "classifier"])
def test_iforest_prerank_streams_the_same_candidates(indexes, task, prerank, monkeypatch):
    """iforest's candidates, cut while the pre-ranking's rows stream (no score per sentence),
    are the prefix of the pre-ranking's full ranking: the same selection, score for score."""
    from tapt.retriever.methods import base, segments

    _, three = indexes
    embeddings, texts = task
    got, calls = [], []
    full = base.SentenceScored.full_ranking
    monkeypatch.setattr(base.SentenceScored, "full_ranking",
                        lambda self, ctx, params: (calls.append(1), full(self, ctx, params))[1])
    for share in (1.0, 0.0):                       # everything streams / nothing does
        monkeypatch.setattr(segments, "STREAM_SHARE", share)
        calls.clear()
        for candidates in ("3x", "40"):
            config = SelectConfig("iforest", "60sent", seed=3, prerank=prerank,
                                  candidates=candidates, context="sentence")
            ranking, _ = rank(three, config, embeddings, texts)
            got.append(ranking)
        assert bool(calls) == (share == 0.0)
    for streamed, whole in zip(got[:2], got[2:]):
        assert len(streamed.segments) > 5
        assert streamed.info["candidate_segments"] == whole.info["candidate_segments"]
        assert np.array_equal(streamed.segments, whole.segments)
        assert np.array_equal(streamed.scores, whole.scores)
