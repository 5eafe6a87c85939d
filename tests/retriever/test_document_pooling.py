"""Document context (`retriever.ranking.document_pooling`): sentence scores pooled over their documents."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import HashingEncoder
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.ranking.document_pooling import DocumentShape, choose_context, document_scores
from tapt.retriever.scoring import arrays
from tapt.retriever.selections.make import SelectConfig, make_selection
from tapt.retriever.tasks.forms import task_from_files


def test_one_sentence_documents_keep_the_ranking():
    rng = np.random.default_rng(0)
    s = rng.normal(size=500)
    pooled, info = document_scores(s, np.arange(500))
    assert np.array_equal(np.argsort(-pooled, kind="stable"), np.argsort(-s, kind="stable"))
    assert not info.pooled          # no sentence varies within a document: nothing to estimate


def test_long_documents_outrank_lone_high_sentences_and_keep_their_inner_order():
    rng = np.random.default_rng(1)
    # 200 documents of 10 sentences: document effect sd 1, sentence noise sd 1
    effects = rng.normal(size=200)
    s = np.repeat(effects, 10) + rng.normal(size=2000)
    offsets = np.arange(0, 2000, 10)
    pooled, info = document_scores(s, offsets)
    assert info.pooled and 0.5 < info.between < 2.0 and 0.5 < info.within < 2.0
    # a sentence's rank now follows its document's effect far better than its own score did
    truth = np.repeat(effects, 10)
    assert np.corrcoef(pooled, truth)[0, 1] > np.corrcoef(s, truth)[0, 1] + 0.2
    # inside a document the sentences keep their own order
    for d in (0, 57, 199):
        block = slice(10 * d, 10 * d + 10)
        assert np.array_equal(np.argsort(pooled[block]), np.argsort(s[block]))
    # every sentence of a document is ranked above every sentence of a worse document
    doc_rank = np.argsort(-pooled[::10])
    best, second = doc_rank[:2]
    assert pooled[10 * best:10 * best + 10].min() > pooled[10 * second:10 * second + 10].max()


def test_shrinkage_depends_on_document_length():
    # a 1-sentence document with a high score vs a 20-sentence document with a lower mean:
    # the long document's mean is the better evidence
    rng = np.random.default_rng(2)
    background = rng.normal(size=(300, 5)) + rng.normal(size=(300, 1))   # 300 docs of 5
    long_doc = np.full(20, 2.0) + rng.normal(scale=0.3, size=20)
    s = np.concatenate([background.ravel(), long_doc, [2.6]])
    offsets = np.concatenate([np.arange(0, 1500, 5), [1500, 1520]])
    pooled, _ = document_scores(s, offsets)
    assert s[-1] > long_doc.mean()
    assert pooled[1500:1520].min() > pooled[-1]


def test_unselectable_rows_stay_unselectable_and_bad_offsets_are_refused():
    s = np.array([1.0, -np.inf, 0.5, 0.2, np.nan, 0.9])
    pooled, _ = document_scores(s, np.array([0, 3, 6]))
    assert pooled[1] == -np.inf and np.isnan(pooled[4])
    assert np.isfinite(pooled[[0, 2, 3, 5]]).all()
    with pytest.raises(ValueError):
        document_scores(s, np.array([1, 3]))
    with pytest.raises(ValueError):
        document_scores(s, np.array([0, 4, 3]))
    same, info = document_scores(np.arange(5.0), np.array([0]))      # one document
    assert np.array_equal(same, np.arange(5.0)) and not info.pooled


def test_select_with_document_context(fake_index, medical_task):
    ix = Index(fake_index)
    task = task_from_files([str(medical_task)], False, "text")
    enc = HashingEncoder()
    plain = make_selection(ix, SelectConfig("centroid", "0.3"), task, encoder=enc)
    pooled = make_selection(ix, SelectConfig("centroid", "0.3", context="document"), task,
                            encoder=enc)
    assert pooled.manifest["params"]["context"] == "document"
    assert "context" not in plain.manifest["params"]
    info = pooled.manifest["info"]["context"]
    assert info["name"] == "document" and info["pooled"]

    # the same ranking by hand: centroid scores -> document pooling -> segment means
    scores = arrays.centroid_scores(ix.embeddings, arrays.centroid(enc.encode(task.sentences)))
    by_hand, _ = document_scores(scores, ix.doc_offsets)
    view_offsets = ix.segments(None)
    seg = arrays.segment_mean(by_hand, np.diff(view_offsets))
    top = arrays.rank(seg)[:len(pooled)]
    assert [s.id for s in pooled] == top.tolist()


def test_context_is_refused_where_nothing_is_pooled(fake_index):
    with pytest.raises(InputError) as err:
        SelectConfig("knn", None, context="document")
    assert err.value.param == "context"
    with pytest.raises(InputError):
        SelectConfig("centroid", "0.3", context="paragraph")
    with pytest.raises(InputError):
        SelectConfig("iforest", "0.3", candidates="all", context="document")
    SelectConfig("iforest", "0.3", context="document")           # its pre-ranking pools
    SelectConfig("auto", "0.3", context="document")


def test_cli_context_option(fake_index, medical_task, tmp_path, monkeypatch):
    from tapt import cli

    monkeypatch.setattr(Index, "load_encoder", lambda self, *a, **k: HashingEncoder())
    runner = CliRunner()
    assert "--context" not in runner.invoke(cli.cli, ["select", "knn", "--help"]).output
    out = tmp_path / "sel.jsonl"
    result = runner.invoke(cli.cli, ["-q", "select", "centroid", str(fake_index), "--task",
                                      str(medical_task), "--budget", "0.3", "--context",
                                      "document", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["params"]["context"] == "document"
    assert json.loads(result.output)["context"]["reason"] == "asked for"
    help_text = " ".join(runner.invoke(cli.cli, ["select", "centroid", "--help"]).output.split())
    assert "[auto|sentence|document]" in help_text and "[default: auto]" in help_text
    bench_help = " ".join(runner.invoke(cli.cli, ["bench", "recall", "--help"]).output.split())
    assert "[auto|sentence|document|both]" in bench_help
    assert "--context [auto|sentence|document|both] How methods" in bench_help
    result = runner.invoke(cli.cli, ["select", "centroid", str(fake_index), "--task",
                                      str(medical_task), "--budget", "0.3", "--out",
                                      str(tmp_path / "auto.jsonl")])
    assert result.exit_code == 0, result.output
    assert "; context: document (auto: " in result.output
    assert "sentences each" in result.output


def _reference_document_scores(scores, doc_offsets):
    """The whole-array computation `DocumentPooling` reproduces block by block."""
    s = np.asarray(scores, dtype=np.float64)
    n_rows = len(s)
    starts = np.asarray(doc_offsets, dtype=np.int64)
    if len(starts) and starts[-1] == n_rows:
        starts = starts[:-1]
    doc = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n_rows)))
    ok = np.isfinite(s)
    n = np.bincount(doc, weights=ok, minlength=len(starts))
    sums = np.bincount(doc, weights=np.where(ok, s, 0.0), minlength=len(starts))
    has = n > 0
    N, k = float(n.sum()), int(has.sum())
    if k < 2 or N <= k:
        return s.copy()
    means = np.zeros(len(starts))
    means[has] = sums[has] / n[has]
    mu = sums.sum() / N
    within = float(np.sum(np.where(ok, s - means[doc], 0.0) ** 2) / (N - k))
    msb = float(np.sum(n[has] * (means[has] - mu) ** 2) / (k - 1))
    n0 = (N - float(np.sum(n[has] ** 2)) / N) / (k - 1)
    between = (msb - within) / n0 if n0 > 0 else 0.0
    if not between > 0 or not within > 0:
        return s.copy()
    from scipy.stats import f as f_distribution

    if not f_distribution.sf(msb / within, k - 1, N - k) < 1e-3:   # documents like random groups
        return s.copy()
    shrink = np.zeros(len(starts))
    shrink[has] = between / (between + within / n[has])
    doc_score = mu + shrink * (means - mu)
    spread = float(np.ptp(s[ok])) or 1.0
    out = doc_score[doc] + 1e-9 / spread * (s - means[doc])
    out[~ok] = s[~ok]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("run,leaf", [(1 << 20, 1 << 20), (37, 256), (1000, 128)])
def test_pooling_in_runs_equals_the_whole_array_computation(dtype, run, leaf, monkeypatch):
    """Runs of whole documents and numpy's pairwise order: the same bits as one pass."""
    from tapt.retriever.ranking import document_pooling as context
    from tapt.retriever.scoring import moments as score_moments

    monkeypatch.setattr(context, "RUN", run)
    monkeypatch.setattr(score_moments, "MOMENT_LEAF", leaf)
    rng = np.random.default_rng(11)
    lengths = rng.integers(1, 60, size=900)
    lengths[::97] = 400                                    # documents longer than a run
    n = int(lengths.sum())
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    means = rng.normal(size=len(lengths))
    scores = (np.repeat(means, lengths) + rng.normal(size=n)).astype(dtype)
    scores[rng.choice(n, 40, replace=False)] = -np.inf
    scores[rng.choice(n, 10, replace=False)] = np.nan
    scores[starts[5]:starts[6]] = -np.inf                  # a document with nothing selectable
    for offsets in (starts, np.append(starts, n)):
        want = _reference_document_scores(scores, offsets)
        got, info = document_scores(scores, offsets)
        assert info.pooled
        np.testing.assert_array_equal(got, want)
        pooled = context.DocumentPooling(scores, offsets)
        for lo, hi in ((0, 1), (5, 1234), (n - 77, n), (starts[50], starts[52] + 3)):
            np.testing.assert_array_equal(pooled.block(lo, hi), want[lo:hi])
    flat = np.ones(n, dtype=dtype)                         # nothing varies: unchanged
    got, info = document_scores(flat, starts)
    assert not info.pooled and np.array_equal(got, flat.astype(np.float64))


def test_documents_that_are_random_groups_of_sentences_are_not_pooled():
    """Random "documents" (the F test finds no between-document variance): every sentence
    keeps its own score, though the estimated s_b^2 comes out positive by chance."""
    chance_positive = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        s = rng.normal(size=4000) + 3.0 * (rng.random(4000) < 0.2)      # 20% "relevant"
        lengths = rng.integers(1, 8, size=2000)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        offsets = offsets[offsets < len(s)]
        got, info = document_scores(s, offsets)
        assert not info.pooled and np.array_equal(got, s)
        assert info.p_value is not None and info.p_value >= 1e-3 and info.f_statistic < 1.2
        chance_positive += info.between > 0
    assert chance_positive > 0              # without the test some of these would be pooled
    # the same scores grouped by a real document effect are pooled
    rng = np.random.default_rng(0)
    effects = rng.normal(size=1000)
    s = np.repeat(effects, 4) + rng.normal(size=4000)
    got, info = document_scores(s, np.arange(0, 4000, 4))
    assert info.pooled and info.p_value < 1e-12 and info.f_statistic > 3


def test_document_shape_and_the_auto_rule(monkeypatch):
    from tapt.retriever.ranking import document_pooling

    shape = DocumentShape.of(np.array([0, 1, 3, 6, 6, 7]))    # sizes 1, 2, 3, 0, 1
    assert (shape.documents, shape.sentences, shape.in_multi) == (4, 7, 5)
    monkeypatch.setattr(document_pooling, "OFFSET_RUN", 2)     # counted in runs: the same
    assert DocumentShape.of(np.array([0, 1, 3, 6, 6, 7])) == shape
    choice = choose_context("auto", True, shape, "centroid")
    assert choice.name == "document" and choice.requested == "auto"
    assert str(choice) == ("document (auto: 4 documents, 1.8 sentences each, 71% of sentences "
                           "in multi-sentence documents)")
    assert choice.to_json()["share_in_multi_sentence_documents"] == round(5 / 7, 4)
    ones = DocumentShape.of(np.arange(11))
    assert choose_context("auto", True, ones).name == "sentence"
    # one long document among one-sentence ones: under half the sentences share a document
    few = DocumentShape.of(np.array([*range(0, 10), 13]))      # nine of 1, one of 4
    assert few.multi_share == 4 / 13 and choose_context("auto", True, few).name == "sentence"
    knn = choose_context("auto", False, None, "knn")
    assert knn.name == "sentence" and "knn does not pool" in knn.reason
    assert choose_context("document", True).reason == "asked for"
    assert choose_context("sentence", True).name == "sentence"


def test_config_resolves_auto_per_index():
    from types import SimpleNamespace

    docs = SimpleNamespace(shards=[SimpleNamespace(docs=np.array([0, 3, 5, 9]))])
    lines = SimpleNamespace(shards=[SimpleNamespace(docs=np.arange(10))])
    config = SelectConfig("centroid", "0.3")
    assert config.context == "auto" and "context" not in config.to_manifest()
    assert config.resolve_context(docs).name == "document"
    assert config.resolve_context(lines).name == "sentence"
    assert SelectConfig("knn", None).resolve_context(docs).name == "sentence"
    assert SelectConfig("random", "0.3").resolve_context(docs).name == "sentence"
    explicit = SelectConfig("centroid", "0.3", context="sentence")
    assert explicit.resolve_context(docs).name == "sentence"
    assert explicit.to_manifest()["context"] == "sentence"


def test_select_uses_document_context_by_default_and_says_why(fake_index, medical_task):
    ix = Index(fake_index)
    task = task_from_files([str(medical_task)], False, "text")
    enc = HashingEncoder()
    auto = make_selection(ix, SelectConfig("centroid", "0.3"), task, encoder=enc)
    pooled = make_selection(ix, SelectConfig("centroid", "0.3", context="document"), task,
                            encoder=enc)
    plain = make_selection(ix, SelectConfig("centroid", "0.3", context="sentence"), task,
                           encoder=enc)
    assert auto.ids.tolist() == pooled.ids.tolist() != plain.ids.tolist()
    context = auto.manifest["context"]
    assert context["name"] == "document" and context["requested"] == "auto"
    shape = DocumentShape.of(ix.doc_offsets)
    assert context["documents"] == shape.documents == ix.manifest["counts"]["documents"]
    assert context["reason"] == (f"auto: {shape.documents:,} documents, "
                                 f"{shape.per_document:.1f} sentences each, "
                                 f"{shape.multi_share:.0%} of sentences in multi-sentence "
                                 "documents")
    assert pooled.manifest["context"] == {"name": "document", "requested": "document",
                                          "reason": "asked for"}
    assert plain.manifest["context"]["name"] == "sentence" and "context" not in plain.manifest["info"]
    knn = make_selection(ix, SelectConfig("knn", None, k=5), task, encoder=enc)
    assert knn.manifest["context"]["name"] == "sentence"
    assert "does not pool" in knn.manifest["context"]["reason"]
