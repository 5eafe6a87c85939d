"""centroid and density with `tuned_model`: a task-tuned encoder rescores the candidates."""

from __future__ import annotations

import numpy as np
import pytest

import tapt
from conftest import HashingEncoder
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.methods import registry
from tapt.retriever.methods import tuned as tuned_module
from tapt.retriever.scoring import arrays


class CountingEncoder(HashingEncoder):
    """Another encoder than the index's (other dimension, other vectors) that counts the texts
    it embeds."""

    name = "tuned-test"

    def __init__(self) -> None:
        super().__init__(dim=24)
        self.texts = 0

    def encode(self, texts, batch_size: int = 64) -> np.ndarray:
        self.texts += len(texts)
        return super().encode(texts, batch_size)


@pytest.fixture()
def tuned(monkeypatch, tmp_path):
    made = []

    def load(spec, device):
        made.append(CountingEncoder())
        return made[-1]

    monkeypatch.setattr(tuned_module, "load_tuned_encoder", load)
    (tmp_path / "tuned").mkdir()            # a model folder by its files (loaded by `load`)
    (tmp_path / "tuned" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    return made


def _select(fake_index, medical_task, encoder, method, budget, **kw):
    ix = tapt.Index.open(fake_index)
    task = medical_task.read_text().splitlines()
    return ix.select(method, task=task, budget=budget, context="sentence",
                     **kw), task


@pytest.mark.parametrize("method,params", [("centroid", {}), ("density", {"m": 3})])
def test_tuned_encoder_reranks_only_the_candidates(fake_index, medical_task, encoder, tuned,
                                                    method, params):
    plain, task = _select(fake_index, medical_task, encoder, method, "30", **params)
    got, _ = _select(fake_index, medical_task, encoder, method, "10", tuned_model="tuned",
                     candidates="30", **params)
    index = Index(fake_index)
    offsets = index.segments(None)
    pool = plain.ids                                    # the stored embeddings' top 30
    rows = arrays.rows_of_segments(offsets, pool)
    other = HashingEncoder(dim=24)
    cand, task_emb = other.encode(index.store.texts(rows.tolist())), other.encode(task)
    if method == "centroid":
        row_scores = cand @ arrays.centroid(task_emb)
    else:
        row_scores = arrays.topm_mean_similarity(cand, task_emb, 3)
    seg = arrays.segment_mean(row_scores, np.diff(offsets)[pool])
    order = arrays.rank(seg)
    assert got.ids.tolist() == pool[order][:10].tolist()
    assert np.allclose(got.scores, seg[order][:10], atol=1e-5)
    assert got.ids.tolist() != pool[:10].tolist()      # the tuned encoder changed the order
    # only the candidates and the task were embedded, once
    (used,) = tuned
    assert used.texts == len(rows) + len(task)
    info = got.info
    assert info["tuned_model"] == "tuned-test" and info["reembedded_rows"] == len(rows)
    assert info["reembedded_task"] == len(task) and info["candidate_segments"] == 30
    assert info["prerank"] == method and "tuned_seconds" in info


def test_without_tuned_model_it_is_the_plain_method(fake_index, medical_task, encoder,
                                                    monkeypatch):
    """Without `tuned_model` the registered methods select what their plain versions do, to
    the byte; the tuned-only parameters are refused by name; iforest's shared `candidates`
    and `prerank` reach a centroid pre-ranking harmlessly."""
    cases = [("centroid", "0.3", {}), ("centroid", "50sent", {"segment_size": 1}),
             ("density", "100sent", {"m": 5}), ("density", "400tok", {"m": 1})]
    for method, budget, kw in cases:
        got, _ = _select(fake_index, medical_task, encoder, method, budget, **kw)
        registered = registry.get_method(method)
        monkeypatch.setitem(registry.METHODS.by_name, method, registered.plain)
        want, _ = _select(fake_index, medical_task, encoder, method, budget, **kw)
        monkeypatch.setitem(registry.METHODS.by_name, method, registered)
        assert got.ids.tolist() == want.ids.tolist()
        assert got.scores.tobytes() == want.scores.tobytes() and got.info == want.info
    for param, value in (("candidates", "5x"), ("prerank", "fused"), ("tuned_device", "cpu")):
        with pytest.raises(InputError) as err:
            _select(fake_index, medical_task, encoder, "centroid", "5", **{param: value})
        assert err.value.param == param and "tuned_model" in str(err.value)
    pre, _ = _select(fake_index, medical_task, encoder, "iforest", "5", prerank="centroid",
                     candidates="3x")
    assert pre.info["candidate_segments"] > 5


def test_a_model_directory_as_the_tuned_encoder(fake_index, medical_task, encoder, tmp_path,
                                                labelled_corpus):
    """A Hugging Face model directory (what `tapt train` writes) loads as the tuned encoder;
    a missing one is refused naming `tuned_model`."""
    from tiny_model import write_tiny_bert

    model = write_tiny_bert(tmp_path / "tuned", [r["text"] for r in labelled_corpus[1]],
                            hidden_size=16, layers=1)
    got, task = _select(fake_index, medical_task, encoder, "centroid", "8", tuned_model=str(model),
                        candidates="16", prerank="density", tuned_device="cpu")
    plain, _ = _select(fake_index, medical_task, encoder, "density", "16")
    assert set(got.ids) <= set(plain.ids) and len(got.ids) == 8
    assert got.info["tuned_model"] == "tuned" and got.info["prerank"] == "density"
    with pytest.raises(InputError) as err:
        _select(fake_index, medical_task, encoder, "centroid", "8",
                tuned_model=str(tmp_path / "missing"))
    assert err.value.param == "tuned_model"
    with pytest.raises(InputError) as err:                 # the task's text is needed
        tapt.Index.open(fake_index).select("centroid", task=encoder.encode(task), budget="8",
                                           tuned_model=str(model))
    assert err.value.param == "task"
