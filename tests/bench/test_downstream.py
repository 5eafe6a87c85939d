"""Downstream classification fine-tuning (`bench.downstream_finetune`), the linear probe, its labelled
data and cross-validation folds."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from conftest import COMMON, TOPICS, make_sentence
from tapt.bench.downstream_data import group_folds, read_labelled
from tapt.bench.downstream_finetune import (
    FinetuneSettings,
    classification_scores,
    cross_validate,
    finetune_classifier,
)
from tapt.errors import InputError
from tiny_model import write_tiny_bert

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def labelled_rows(n_docs: int = 10, per_doc: int = 4, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"text": make_sentence(rng, topic), "label": topic, "doc": f"{topic}:{d}"}
            for topic in TOPICS for d in range(n_docs) for _ in range(per_doc)]


def write_rows(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    texts = [" ".join(words) for words in TOPICS.values()] + [" ".join(COMMON)]
    return str(write_tiny_bert(tmp_path_factory.mktemp("tiny") / "bert", texts * 3,
                               hidden_size=32, layers=2, max_positions=64))


def test_scores_match_hand_computed_values():
    scores = classification_scores([0, 0, 1, 1, 2], [0, 1, 1, 1, 0])
    assert scores["accuracy"] == pytest.approx(0.6)
    # F1: label 0: tp1 fp1 fn1 -> 0.5; label 1: tp2 fp1 fn0 -> 0.8; label 2: 0
    assert scores["macro_f1"] == pytest.approx((0.5 + 0.8 + 0.0) / 3)


def test_finetune_learns_a_separable_task(tiny_model):
    rows = labelled_rows(n_docs=12, per_doc=3)
    texts = [r["text"] for r in rows]
    names = sorted(TOPICS)
    labels = np.array([names.index(r["label"]) for r in rows])
    order = np.random.default_rng(0).permutation(len(rows))
    train, test = order[:60], order[60:]
    settings = FinetuneSettings(epochs=6, batch_size=8, lr=1e-3, head_lr=3e-3, max_length=24)
    result = finetune_classifier(tiny_model, [texts[i] for i in train], labels[train],
                                 [texts[i] for i in test], labels[test], n_labels=3,
                                 settings=settings, seed=0, progress=False)
    assert result["accuracy"] > 0.8            # chance is 1/3
    assert result["macro_f1"] > 0.75
    assert len(result["loss_curve"]) == result["steps"] == settings.total_steps(60)
    assert np.mean(result["loss_curve"][-5:]) < np.mean(result["loss_curve"][:5])
    again = finetune_classifier(tiny_model, [texts[i] for i in train], labels[train],
                                [texts[i] for i in test], labels[test], n_labels=3,
                                settings=settings, seed=0, progress=False)
    assert again["loss_curve"] == result["loss_curve"]   # seeded: the same run


def test_cross_validation_tests_every_example_once_full_and_probe(tiny_model, tmp_path):
    data = read_labelled(write_rows(tmp_path / "l.jsonl", labelled_rows(n_docs=6, per_doc=3)),
                         group_field="doc")
    folds = group_folds(data, 3, seed=0)
    groups = np.asarray(data.groups)
    for fold in range(3):                    # no document on both sides
        assert not set(groups[folds == fold]) & set(groups[folds != fold])
    full = cross_validate(tiny_model, data.texts, data.labels, folds, n_labels=3,
                          settings=FinetuneSettings(epochs=4, batch_size=8, lr=1e-3,
                                                    head_lr=3e-3, max_length=24),
                          seed=0, progress=False)
    assert len(full["predicted"]) == len(data.texts) and len(full["fold_accuracy"]) == 3
    assert len(full["loss_curves"]) == 3 and full["accuracy"] > 0.6      # chance 1/3
    assert full["accuracy"] == pytest.approx(full["correct"].mean())
    probe = cross_validate(tiny_model, data.texts, data.labels, folds, n_labels=3,
                           settings=FinetuneSettings(mode="probe", max_length=24), seed=0,
                           progress=False)
    assert probe["loss_curves"] == [] and probe["accuracy"] > 0.5
    with pytest.raises(InputError) as err:
        FinetuneSettings(mode="linear")
    assert err.value.param == "ft_mode"


@pytest.mark.parametrize("lines, message", [
    (['{"text": "a b", "label": "x"}', "not json"], "line 2 .* is not JSON"),
    (['{"text": "a b", "label": "x"}', '{"text": "c d"}'], "line 2 .* no label in field 'label'"),
    (['{"text": "", "label": "x"}'], "line 1 .* no text"),
    (['{"text": "a", "label": "x"}', '{"text": "b", "label": "x"}'], "at least two labels"),
    (['[1, 2]'], "not a JSON object"),
])
def test_bad_labelled_files_are_refused(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=message):
        read_labelled(path)


def test_a_label_in_one_document_is_refused(tmp_path):
    rows = labelled_rows(n_docs=3) + [{"text": "odd one out", "label": "odd", "doc": "odd:0"}]
    data = read_labelled(write_rows(tmp_path / "l.jsonl", rows), group_field="doc")
    with pytest.raises(InputError, match="'odd' has all its examples in one group"):
        group_folds(data, 3, seed=0)
