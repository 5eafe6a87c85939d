"""Scores kept where the rows are (`retriever.serving.remote_scores`), on a local 2-CPU Ray
cluster started once here: every answer a handle gives equals the one-process function on the
whole array (rows at ranking positions, the top rows, rows below a cut, counts, moments and
z-score sums bit for bit, with ties, -0.0 and NaN, across actors and layouts); served classifier
and fused selections equal local ones; and the bytes the driver receives for them do not grow
with the rows (no score per row crosses Ray).

Skipped when Ray is not installed (`pip install 'tapt[ray]'`; `make test` installs it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tapt  # noqa: E402
from conftest import HashingEncoder, write_split_corpus, write_task  # noqa: E402
from ray_worker import CONFIG, ship_by_value  # noqa: E402
from tapt.indexer.building.pipeline import BuildConfig, build_index  # noqa: E402
from tapt.retriever.scoring import arrays, moments  # noqa: E402
from tapt.retriever.serving import remote_scores  # noqa: E402
from tapt.retriever.serving.remote_scores import RemoteScores, new_name  # noqa: E402
from tapt.util import ordering  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    ship_by_value()
    yield
    ray.shutdown()


def _index(base: Path, docs_per_topic: int) -> Path:
    corpus = [str(p) for p in write_split_corpus(base, parts=3, docs_per_topic=docs_per_topic)]
    out = base / "idx"
    build_index(corpus, out, HashingEncoder(),
                BuildConfig(**CONFIG, codes="int8", embedding_dtype="float16"))
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    return _index(tmp_path_factory.mktemp("remote-small"), 6)


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    return _index(tmp_path_factory.mktemp("remote-large"), 48)


@pytest.fixture(scope="module")
def served(cluster, small):
    """The small index on 3 actors with a 64-row grid: every actor scores rows, and rows begin
    and end inside segments and pairwise-summation leaves."""
    with tapt.ServedIndex(small, actors=3, cpus_per_actor=0.2, grid=64) as index:
        yield index


def _held(servers, values: np.ndarray, layout) -> RemoteScores:
    """`values` held by the actors in `layout` (each actor's rows [lo, hi))."""
    name = new_name()
    servers._get([a.held.remote("assemble", name, "-", lo, hi, [(lo, values[lo:hi])])
                  for a, (lo, hi) in zip(servers.actors, layout)], "score")
    return RemoteScores(servers, name, list(layout), "rows", values.dtype)


def _awkward(n: int, dtype, seed: int = 0) -> np.ndarray:
    """Scores with many ties, -0.0 beside 0.0, infinities and NaN."""
    rng = np.random.default_rng(seed)
    values = np.round(rng.normal(size=n), 1).astype(dtype)
    values[rng.choice(n, 9, replace=False)] = 0.0
    values[rng.choice(n, 9, replace=False)] = -0.0
    values[rng.choice(n, 3, replace=False)] = np.nan
    values[rng.choice(n, 2, replace=False)] = np.inf
    return values


def _layouts(servers, n: int):
    spans = [tuple(s) for s in servers.spans]
    shards = [(int(servers.row_offsets[g[0]]), int(servers.row_offsets[g[-1] + 1]))
              for g in servers.groups]
    return spans, shards


@pytest.mark.parametrize("search", ["default", "bisection", "narrow"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_held_rows_are_those_of_the_whole_array(served, dtype, search, monkeypatch):
    # the k-way search of ranking positions (`_keys_at`): as shipped, as a bisection, and
    # split 3 ways with at most 7 keys a round (many rounds, ranges limited by the key budget)
    fanout, pivots = {"default": (remote_scores.FANOUT, remote_scores.PIVOTS),
                      "bisection": (2, 2), "narrow": (3, 7)}[search]
    monkeypatch.setattr(remote_scores, "FANOUT", fanout)
    monkeypatch.setattr(remote_scores, "PIVOTS", pivots)
    servers, n = served.servers, served.n_sentences
    values = _awkward(n, dtype)
    spans, shards = _layouts(servers, n)
    assert spans != shards
    for layout in (spans, shards):
        held = _held(servers, values, layout)
        order = arrays.rank(values)
        ranks = np.array([0, 1, 5, 50, n // 2, n - 4, n - 1, 77, 3])
        assert held.rows_at_ranks(ranks).tolist() == order[ranks].tolist()
        for k in (1, 7, 40, n - 1, n):
            assert held.top_rows(k).tolist() == order[:k].tolist()
        assert held.count_above(0.0) == int(np.count_nonzero(values > 0))
        if dtype == np.float32:
            for start in (0, 13, 100, n - 1, n):
                ordinals = np.sort(np.random.default_rng(start).choice(
                    n - start, size=min(n - start, 20), replace=False))
                want = ordering.rows_below_cut(values, ordering.rank_cut(values, start),
                                               ordinals)
                assert held.rows_below_cut(start, ordinals).tolist() == want.tolist()
        assert np.array_equal(held.values(), values, equal_nan=True)


def test_held_moments_and_zsum_are_those_of_one_process_bit_for_bit(served, monkeypatch):
    servers, n = served.servers, served.n_sentences
    spans, shards = _layouts(servers, n)
    a = np.random.default_rng(1).normal(size=n).astype(np.float32)
    b = _awkward(n, np.float32, seed=2)
    for leaf in (moments.MOMENT_LEAF, 32):     # one leaf across every actor, or many
        monkeypatch.setattr(moments, "MOMENT_LEAF", leaf)
        held_a, held_b = _held(servers, a, spans), _held(servers, b, shards)
        assert held_a.moments() == moments.moments(a)
        fill = held_b.finite_fill()
        assert fill == float(np.nanmin(np.where(np.isinf(b), np.nan, b)))
        assert held_b.moments(fill) == moments.moments(b, fill)
        fused = servers.zsum(held_a, held_b)
        assert fused.layout == held_a.layout and fused.dtype == np.float64
        assert np.array_equal(fused.values(), moments.ZSum(a, b).all())
        assert np.array_equal(fused.astype(np.float32).values(),
                              moments.ZSum(a, b).all(np.float32))
    names = servers.ray.get([x.held.remote("names") for x in servers.actors])
    del held_a, held_b, fused
    after = servers.ray.get([x.held.remote("names") for x in servers.actors])
    assert sum(map(len, after)) < sum(map(len, names))      # a dropped handle frees its array


RUNS = (("classifier", "40sent", {}), ("classifier", "12", {"rounds": 1}),
        ("classifier", "30sent", {"scan": "codes"}), ("fused", "12", {"wording": "lm"}),
        ("fused", "30sent", {}), ("fused", "30sent", {"scan": "codes", "wording": "lm"}))


def _select(index, task, method, budget, params):
    return index.select(method, task, budget, context="sentence",
                        **params)


def test_served_classifier_and_fused_select_as_local(served, small, tmp_path, monkeypatch):
    from tapt.retriever.methods import segments

    monkeypatch.setattr(segments, "STREAM_SHARE", 1.0)    # every budget's cut streams
    task = write_task(tmp_path / "task.txt", "legal", n=30)
    local = tapt.Index.open(small)
    servers = served.servers
    gathered = []
    for name in ("scores", "lexicon_scores"):      # no score per row is gathered
        monkeypatch.setattr(servers, name, lambda *a, **k: gathered.append(a))
    for method, budget, params in RUNS:
        want = _select(local, task, method, budget, params)
        got = _select(served, task, method, budget, params)
        assert got.ids.tolist() == want.ids.tolist() and len(got) > 0, (method, params)
        # blocks of 64 rows have other shapes than in one process: BLAS may round the last bit
        np.testing.assert_allclose([s.score for s in got], [s.score for s in want],
                                   rtol=0, atol=1e-6)
    assert gathered == []
    assert servers.ray.get([a.held.remote("names") for a in servers.actors]) == [[]] * 3


def test_served_fits_above_the_exact_draw_size_select_as_local(served, small, tmp_path,
                                                               monkeypatch):
    """Above `pu.EXACT_DRAW_ROWS` (forced here) round 0 scores only the rows it draws from
    (`pu.DrawnRanking`): a served index gathers those rows' embeddings and selects as one
    process does."""
    from tapt.retriever.learned import pu

    monkeypatch.setattr(pu, "EXACT_DRAW_ROWS", 0)
    task = write_task(tmp_path / "task.txt", "legal", n=30)
    local = tapt.Index.open(small)
    for method, budget, params in (("classifier", "40sent", {}),
                                   ("fused", "30sent", {"scan": "codes", "wording": "lm"})):
        want = _select(local, task, method, budget, params)
        got = _select(served, task, method, budget, params)
        assert got.ids.tolist() == want.ids.tolist() and len(got) > 0, (method, params)


# budgets in sentences: without one the fit's training rows are a share of the positives,
# which grow with the rows up to `PUConfig.max_train` (the driver gathers their embeddings)
BYTES_RUNS = (("classifier", "40sent", {}), ("classifier", "40sent", {"scan": "codes"}),
              ("fused", "40sent", {"wording": "lm"}), ("fused", "40sent", {}))


def _received(index_dir: Path, task) -> dict[str, int]:
    out = {}
    with tapt.serve(index_dir, actors=3, cpus_per_actor=0.2) as index:
        traffic = index.servers.count_traffic()
        for method, budget, params in BYTES_RUNS:
            before = {way: traffic[way] for way in ("received", "sent", "scorer_bytes")}
            _select(index, task, method, budget, params)
            for way, count in before.items():       # answers; requests; scorers, models
                out[method, budget, str(params), way] = traffic[way] - count
        return {**out, "rows": index.n_sentences}


def test_what_the_driver_receives_does_not_grow_with_the_rows(cluster, small, large, tmp_path,
                                                              monkeypatch):
    from tapt.retriever.methods import segments

    monkeypatch.setattr(segments, "STREAM_SHARE", 1.0)
    # bisect every position to one key: on indexes this small, fetching the keys of a range of
    # a few rows (`BRACKET`) ends the search sooner the fewer the rows, which is no growth; and
    # two ways a round: the k-way search asks up to `FANOUT` keys per distinct range of keys,
    # as many ranges as the positions spread over, bounded by `PIVOTS` keys a round, never by
    # the rows; but an index of a few hundred rows has too few distinct scores to spread them
    monkeypatch.setattr(remote_scores, "BRACKET", 0)
    monkeypatch.setattr(remote_scores, "FANOUT", 2)
    monkeypatch.setattr(remote_scores, "PIVOTS", 2)
    task = write_task(tmp_path / "task.txt", "medical", n=30)
    few, many = _received(small, task), _received(large, task)
    assert many["rows"] >= 6 * few["rows"]
    for key in few:
        if key != "rows":
            # 6x the rows: a few percent more (the bisection's distinct values), and less than
            # one gather of a float per row would add (4 bytes a row; the fit made four)
            grew = many[key] - few[key]
            assert grew < 0.1 * few[key] and grew < 4 * (many["rows"] - few["rows"]), (
                key, few, many)


def test_served_fused_explains_each_part_as_local(served, small, tmp_path):
    """`explain` gathers each scorer's z-score of the chosen rows and of the sample only."""
    task = write_task(tmp_path / "task.txt", "legal", n=30)
    kwargs = dict(context="sentence", explain=True)
    want = tapt.Index.open(small).select("fused", task, "20sent", **kwargs)
    got = served.select("fused", task, "20sent", **kwargs)
    assert got.ids.tolist() == want.ids.tolist() and len(got) > 0
    assert got.manifest["explain"]["parts"] == ["meaning", "lm", "words"]
    for mine, theirs in zip(got, want):
        assert list(mine.explain["parts"]) == ["meaning", "lm", "words"]
        np.testing.assert_allclose(list(mine.explain["parts"].values()),
                                   list(theirs.explain["parts"].values()), rtol=0, atol=1e-5)
        assert sum(mine.explain["parts"].values()) == pytest.approx(mine.score, abs=1e-4)
    np.testing.assert_allclose(got.manifest["explain"]["sample"]["scores"],
                               want.manifest["explain"]["sample"]["scores"], rtol=0, atol=1e-5)
    servers = served.servers
    assert servers.ray.get([a.held.remote("names") for a in servers.actors]) == [[]] * 3
