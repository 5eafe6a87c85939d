"""task-model: a token- or sequence-classification model rescores pre-ranked candidates."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tapt
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.learned.task_classifier import entity_scores
from tapt.retriever.scoring import arrays
from task_models import ENTITIES, write_sentence_classifier, write_tagger


@pytest.fixture(scope="module")
def models(tmp_path_factory, labelled_corpus):
    texts = [r["text"] for r in labelled_corpus[1]]
    base = tmp_path_factory.mktemp("task-models")
    write_tagger(base / "tagger", texts)
    write_sentence_classifier(base / "classifier", texts)
    return base


def spans(text: str) -> int:
    """Entity spans of a sentence by the tagger's construction: runs of entity words."""
    words = re.findall(r"\w+|[^\w\s]", text.lower())
    return sum(1 for i, w in enumerate(words)
               if w in ENTITIES and (i == 0 or words[i - 1] not in ENTITIES))


def test_entity_scores_count_spans_and_density():
    predicted = np.array([[0, 1, 1, 0, 2, 0], [1, 2, 1, 0, 0, 0]])
    valid = np.array([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]], dtype=bool)
    begins = np.array([False, False, True])      # labels O, I-X, B-X
    # row 0: pieces 1-2 one run, piece 4 another; row 1: 1 | B starts anew | 1 continues it
    assert entity_scores(predicted, valid, 0, begins, "count").tolist() == [2.0, 2.0]
    assert entity_scores(predicted, valid, 0, begins, "density").tolist() == [0.75, 0.75]


def test_token_classifier_ranks_by_entity_count(fake_index, medical_task, encoder, models):
    ix = tapt.Index.open(fake_index)
    task = medical_task.read_text().splitlines()
    got = ix.select("task-model", task=task, budget="12", context="sentence",
                    task_model=str(models / "tagger"), candidates="all")
    index = Index(fake_index)
    texts = index.store.texts(range(index.n_sentences))
    offsets = index.segments(None)
    expected = arrays.segment_mean(np.array([spans(t) for t in texts], dtype=np.float64),
                                   np.diff(offsets))
    assert got.ids.tolist() == arrays.rank(expected)[:12].tolist()
    assert np.allclose(got.scores, expected[got.ids])
    assert got.scores[0] > got.scores[-1] > 0          # the tagger's counts, not a tie
    info = got.info
    assert info["task_model_kind"] == "token" and info["score"] == "count"
    assert info["label"] == "O" and info["scored_sentences"] == index.n_sentences

    # candidates from centroid's ranking: only they are scored, ties keep centroid's order
    pre = ix.select("centroid", task=task, budget="20", context="sentence")
    dense = ix.select("task-model", task=task, budget="6", context="sentence",
                      task_model=str(models / "tagger"), candidates="20", score="density")
    pool = pre.ids
    lengths = np.diff(offsets)[pool]
    density = []
    for seg in pool:
        rows = texts[offsets[seg]:offsets[seg + 1]]
        density.append(np.mean([_density(t) for t in rows]))
    order = arrays.rank(np.asarray(density, dtype=np.float32))
    assert dense.ids.tolist() == pool[order][:6].tolist()
    assert dense.info["scored_sentences"] == int(lengths.sum())
    assert dense.info["prerank"] == "centroid"


def _density(text: str) -> float:
    words = re.findall(r"\w+|[^\w\s]", text.lower())       # no sentence reaches 64 pieces
    return sum(w in ENTITIES for w in words) / max(len(words), 1)


def test_sequence_classifier_ranks_by_class_probability(fake_index, medical_task, encoder,
                                                        models):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    ix = tapt.Index.open(fake_index)
    task = medical_task.read_text().splitlines()
    path = models / "classifier"
    one = {"segment_size": 1, "context": "sentence"}
    got = ix.select("task-model", task=task, budget="50sent", task_model=str(path),
                    candidates="80", task_batch_size=7, **one)
    pool = ix.select("centroid", task=task, budget="80", **one).ids
    index = Index(fake_index)
    texts = index.store.texts(pool.tolist())
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    batch = AutoTokenizer.from_pretrained(path)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        probs = torch.softmax(model(**batch).logits, -1).numpy()
    prob = probs[:, 1]
    order = arrays.rank(prob.astype(np.float32))
    assert got.ids.tolist() == pool[order][:50].tolist()
    assert np.allclose(got.scores, prob[order][:50], atol=1e-5)
    assert got.info["label"] == "relevant" and got.info["score"] == "probability"
    other = ix.select("task-model", task=task, budget="50sent", task_model=str(path),
                      candidates="80", label="other", **one)
    assert other.ids.tolist() == pool[arrays.rank(probs[:, 0].astype(np.float32))][:50].tolist()


def test_task_model_failures_name_the_parameter(fake_index, medical_task, encoder, models,
                                               tmp_path):
    from tiny_model import write_tiny_bert

    ix = tapt.Index.open(fake_index)
    task = medical_task.read_text().splitlines()

    def select(**kw):
        return ix.select("task-model", task=task, budget="5",
                         context="sentence", **kw)

    cases = [({}, "task_model"), ({"task_model": str(tmp_path / "missing")}, "task_model"),
             ({"task_model": str(write_tiny_bert(tmp_path / "mlm", task))}, "task_model"),
             ({"task_model": str(models / "classifier"), "score": "density"}, "score"),
             ({"task_model": str(models / "tagger"), "score": "probability"}, "score"),
             ({"task_model": str(models / "tagger"), "label": "PER"}, "label"),
             ({"task_model": str(models / "tagger"), "candidates": "lots"}, "candidates")]
    for kw, param in cases:
        with pytest.raises(InputError) as err:
            select(**kw)
        assert err.value.param == param, (kw, str(err.value))
