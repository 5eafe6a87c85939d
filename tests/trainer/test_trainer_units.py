"""Trainer pieces without training: config, text reading, packing, masking, loss, sampling plan."""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest
import torch

from tapt.errors import InputError
from tapt.indexer.reading.reader import read_text
from tapt.modeling.mlm import IGNORE_INDEX, MaskingCollator, masked_lm_loss
from tapt.retriever.selections.file_format import SelectedSegment, write_selection
from tapt.trainer.config import TrainConfig, parse_mix
from tapt.trainer.data import Example, document_examples, group_sentences, segment_examples
from tapt.trainer.inputs import load_selections
from tapt.trainer.plan import TrainingPlan, mix_counts
from tiny_model import tiny_vocab

GROUPS = {
    "a": "apple apricot avocado almond anise acorn".split(),
    "b": "beet bean basil barley banana berry".split(),
    "c": "cod carp clam crab cuttlefish char".split(),
}


def manifest(uuid: str = "u-1") -> dict:
    return {"method": "knn", "params": {}, "index": {"path": "idx", "uuid": uuid,
            "manifest_sha256": "0" * 64, "model": "m"},
            "task": {"files": [], "sha256": "0" * 64, "sentences": 0}, "counts": {},
            "segment_size": 4}


def segment(i: int, sentences: list[str], weight: float = 1.0) -> SelectedSegment:
    return SelectedSegment(i, i, 0.5, weight, "knn", i, (10 * i, 10 * i + len(sentences)),
                           " ".join(sentences), sentences)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import BertTokenizerFast

    words = [w for g in GROUPS.values() for w in g] + ["the", "is", "."]
    vocab = tiny_vocab([" ".join(words)])
    return BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize("kwargs", [
    {"steps": None},                              # neither --steps nor --epochs
    {"steps": 5, "epochs": 1},                    # both
    {"steps": 0},
    {"weights": "soft"},
    {"batch_size": 0},
    {"lr": -1.0},
    {"warmup": 1.0},
    {"mix": "1:1"},                               # --mix without --task
    {"task": ("t.txt",), "mix": "1:0"},
    {"task": ("t.txt",), "mix": "one:two"},
    {"device": "tpu"},
    {"selections": ()},
    {"max_length": 4},
    {"save_every": 0},
])
def test_config_refuses_bad_values(kwargs):
    base = {"selections": ("s.jsonl",), "out": "o", "steps": 10}
    with pytest.raises(InputError):
        TrainConfig(**{**base, **kwargs})


def test_config_defaults_mix_with_task():
    config = TrainConfig(selections=["s.jsonl"], out="o", steps=3, task=["t.txt"])
    assert config.mix_ratio == (1, 1) and config.selections == ("s.jsonl",)
    assert parse_mix("2:5") == (2, 5)


# ----------------------------------------------------------------------------- task text


def documents(paths):
    return read_text(paths).documents


def test_task_text_is_read_and_split_like_the_corpus(tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("First doc. Two sentences!\nSecond doc\n", encoding="utf-8")
    blocks = tmp_path / "blocks.txt.gz"
    with gzip.open(blocks, "wt", encoding="utf-8") as fh:
        fh.write("Block one line one.\nline two\n\nBlock two.\n")
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in [
        {"text": "A one.", "doc": "d1"}, {"text": "A two.", "doc": "d1"}, {"text": "B.", "doc": "d2"},
        {"text": "C."}, {"text": "D."}]) + "\n", encoding="utf-8")
    assert documents([lines]) == [["First doc.", "Two sentences!"], ["Second doc"]]
    # a block's lines are one record (joined by a space) that the corpus splitter splits
    assert documents([blocks]) == [["Block one line one.", "line two"], ["Block two."]]
    assert documents([jsonl]) == [["A one.", "A two."], ["B."], ["C."], ["D."]]
    # the corpus splitter (pysbd), not a regex: abbreviations do not end a sentence
    assert documents([_write(tmp_path / "abbr.txt", "Dr. Smith saw Mr. Jones. He left.\n")]) == [
        ["Dr. Smith saw Mr. Jones.", "He left."]]


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("content,name", [("", "empty.txt"), ('{"txt": "x"}\n', "bad.jsonl"),
                                          ("{not json\n", "broken.jsonl")])
def test_task_text_refuses_bad_files(tmp_path, content, name):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError):
        documents([path])
    with pytest.raises(InputError):
        documents([tmp_path / "missing.txt"])


# ----------------------------------------------------------------------------- packing


def test_group_sentences_greedy_and_long_alone():
    assert group_sentences([3, 3, 3, 10, 2, 2], 6) == [(0, 2), (2, 3), (3, 4), (4, 6)]


def test_packing_never_crosses_segments(tokenizer):
    rng = random.Random(0)
    segments = []
    for i, (_name, words) in enumerate(list(GROUPS.items()) * 3):
        sents = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 7))) + " ."
                 for _ in range(rng.randint(1, 6))]
        segments.append(segment(i, sents))
    examples = segment_examples(segments, tokenizer, max_length=16)
    ids_of = {name: {tokenizer.convert_tokens_to_ids(w) for w in words}
              for name, words in GROUPS.items()}
    dot = tokenizer.convert_tokens_to_ids(".")
    specials = set(tokenizer.all_special_ids)
    assert len(examples) >= len(segments)
    for e in examples:
        assert len(e.input_ids) <= 16
        assert e.input_ids[0] == tokenizer.cls_token_id and e.input_ids[-1] == tokenizer.sep_token_id
        words = set(e.input_ids) - specials - {dot}
        assert any(words <= group for group in ids_of.values()), "example mixes two segments"
    # every segment's tokens appear, in order, in its own examples
    total = sum(len(e.input_ids) - 2 for e in examples)
    expected = sum(len(tokenizer(" ".join(s.sentences), add_special_tokens=False)["input_ids"])
                   for s in segments)
    assert total == expected


def test_long_sentence_truncated_on_its_own(tokenizer):
    long = " ".join(["apple"] * 40) + " ."
    examples = segment_examples([segment(0, ["beet .", long, "cod ."])], tokenizer, max_length=12)
    assert [len(e.input_ids) for e in examples] == [4, 12, 4]
    assert segment_examples([segment(0, ["beet .", "bean ."], weight=0.25)], tokenizer, 12)[0].weight == 0.25
    with pytest.raises(InputError, match="must be 0 or more"):
        segment_examples([segment(0, ["beet ."], weight=-0.5)], tokenizer, 12)
    zero = segment_examples([segment(0, ["beet ."], weight=0.0)], tokenizer, 12)  # older files
    assert zero[0].weight == 0.0
    TrainingPlan(zero, [], ratio=None, weights="discrete", seed=0, batch_size=2)
    for mode in ("continuous", "sample"):
        with pytest.raises(InputError, match="every selected segment has weight 0"):
            TrainingPlan(zero, [], ratio=None, weights=mode, seed=0, batch_size=2)
    assert len(document_examples([["apple .", "beet ."]], tokenizer, 12)) == 1


# ----------------------------------------------------------------------------- masking


def test_masking_rates_and_specials(tokenizer):
    rng = random.Random(1)
    words = [w for g in GROUPS.values() for w in g]
    examples = [Example(tuple(tokenizer(" ".join(rng.choice(words) for _ in range(rng.randint(20, 60))),
                                        truncation=True, max_length=64)["input_ids"]))
                for _ in range(400)]
    collator = MaskingCollator(tokenizer, 0.15)
    batch = collator(examples, torch.Generator().manual_seed(0))
    ids, _ = collator.pad(examples)
    labels, inputs, attention = batch["labels"], batch["input_ids"], batch["attention_mask"]
    special = torch.isin(ids, torch.tensor(tokenizer.all_special_ids)) | (attention == 0)
    assert (labels[special] == IGNORE_INDEX).all()
    assert (inputs[special] == ids[special]).all()
    targets = labels != IGNORE_INDEX
    rate = targets.sum().item() / (~special).sum().item()
    assert abs(rate - 0.15) < 0.01
    assert (labels[targets] == ids[targets]).all()
    t_in = inputs[targets]
    masked = (t_in == tokenizer.mask_token_id).float().mean().item()
    kept = (t_in == ids[targets]).float().mean().item()
    swapped = 1 - masked - kept
    assert abs(masked - 0.8) < 0.03 and abs(kept - 0.1) < 0.025 and abs(swapped - 0.1) < 0.025
    assert not torch.isin(t_in, torch.tensor([tokenizer.cls_token_id, tokenizer.sep_token_id,
                                              tokenizer.pad_token_id])).any()
    # same generator seed -> same masks
    again = collator(examples, torch.Generator().manual_seed(0))
    assert torch.equal(again["input_ids"], inputs) and torch.equal(again["labels"], labels)


def test_every_example_gets_a_target(tokenizer):
    short = [Example(tuple(tokenizer("apple")["input_ids"]))] * 50
    batch = MaskingCollator(tokenizer, 0.15)(short, torch.Generator().manual_seed(3))
    assert ((batch["labels"] != IGNORE_INDEX).sum(dim=1) == 1).all()


# ----------------------------------------------------------------------------- loss


def test_weighted_loss_formula():
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=11, hidden_size=16, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=32,
                                       max_position_embeddings=8)).eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 11, (3, 5), generator=gen)
    attention = torch.ones_like(ids)
    labels = torch.full((3, 5), IGNORE_INDEX)
    labels[0, 1], labels[0, 3], labels[1, 0], labels[2, 2], labels[2, 4] = 4, 7, 2, 9, 1
    logits = model(input_ids=ids, attention_mask=attention).logits
    manual = []
    for i in range(3):
        pos = (labels[i] != IGNORE_INDEX).nonzero().flatten()
        logp = torch.log_softmax(logits[i, pos], dim=-1)
        manual.append(-logp[torch.arange(len(pos)), labels[i, pos]].mean())
    manual = torch.stack(manual)
    token_mean = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels,
                                                   ignore_index=IGNORE_INDEX)

    def loss(**kw):
        return masked_lm_loss(model, ids, attention, labels, **kw)

    assert torch.allclose(loss(), token_mean, atol=1e-6)
    assert torch.allclose(loss(per_example=True), manual.mean(), atol=1e-6)
    half = loss(weights=torch.full((3,), 0.5))
    assert torch.allclose(half, 0.5 * manual.mean(), atol=1e-6)
    w = torch.tensor([1.0, 0.5, 0.2])
    assert torch.allclose(loss(weights=w), (w * manual).sum() / 3, atol=1e-6)


# ----------------------------------------------------------------------------- plan


def test_sample_mode_draws_proportionally():
    weights = [0.1] * 100 + [0.3] * 100 + [0.6] * 100
    examples = [Example((2, 5, 3), w) for w in weights]
    plan = TrainingPlan(examples, [], ratio=None, weights="sample", seed=0, batch_size=8)
    drawn = np.concatenate([plan.epoch_order(e) for e in range(20)])
    share = np.bincount(drawn // 100, minlength=3) / len(drawn)
    assert np.allclose(share / share.sum(), [0.1, 0.3, 0.6], atol=0.02)
    uniform = TrainingPlan(examples, [], ratio=None, weights="discrete", seed=0, batch_size=8)
    assert sorted(uniform.epoch_order(0)) == list(range(300))
    assert not np.array_equal(uniform.epoch_order(0), uniform.epoch_order(1))


def test_mixing_task_and_selection():
    sel = [Example((2, 5, 3)) for _ in range(30)]
    task = [Example((2, 6, 3), source="task") for _ in range(10)]
    plan = TrainingPlan(sel, task, ratio=(1, 1), weights="discrete", seed=1, batch_size=7)
    order = plan.epoch_order(0)
    assert plan.epoch_size == 60 and plan.steps_per_epoch == 9
    assert np.array_equal(np.bincount(order[order < 30], minlength=30), np.ones(30))
    assert np.array_equal(np.bincount(order[order >= 30] - 30, minlength=10), np.full(10, 3))
    assert mix_counts(10, 30, (1, 3)) == (10, 30) and mix_counts(10, 30, (2, 1)) == (60, 30)
    assert sum(len(plan.batch(s)) for s in range(plan.steps_per_epoch)) == 60


# ----------------------------------------------------------------------------- selections


def test_selection_checks(tmp_path):
    write_selection(tmp_path / "empty.jsonl", [], manifest())
    with pytest.raises(InputError, match="no segments"):
        load_selections([str(tmp_path / "empty.jsonl")])
    write_selection(tmp_path / "a.jsonl", [segment(0, ["apple ."])], manifest("u-1"))
    write_selection(tmp_path / "b.jsonl", [segment(1, ["beet ."])], manifest("u-2"))
    with pytest.raises(InputError, match="different indexes"):
        load_selections([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")])
    segments, records = load_selections([str(tmp_path / "a.jsonl")])
    assert len(segments) == 1 and records[0]["segments"] == 1 and records[0]["manifest_sha256"]
    import shutil

    for name in ("copy.jsonl", "copy.jsonl.manifest.json"):
        shutil.copy(tmp_path / name.replace("copy", "a"), tmp_path / name)
    twice, records = load_selections([str(tmp_path / "a.jsonl"), str(tmp_path / "a.jsonl"),
                                      str(tmp_path / "copy.jsonl")])   # given twice, and a copy
    assert len(twice) == 1 and [r["path"] for r in records] == [str(tmp_path / "a.jsonl")]


def test_trainer_never_imports_faiss():
    import subprocess
    import sys

    code = ("import importlib, pkgutil, sys, tapt.trainer as trainer\n"
            "for m in pkgutil.iter_modules(trainer.__path__):\n"
            "    importlib.import_module('tapt.trainer.' + m.name)\n"
            "import transformers, tapt.cli\n"
            "assert 'faiss' not in sys.modules, 'faiss imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_task_check_knows_a_selection_made_from_several_task_files(tmp_path, caplog):
    from tapt.indexer.reading.reader import read_text
    from tapt.trainer.inputs import check_task_matches

    paths = [tmp_path / "a.txt", tmp_path / "b.txt"]
    paths[0].write_text("Fever and cough.\n")
    paths[1].write_text("A rash on both arms.\n")
    both = read_text(paths, what="the task")            # as a selection reads --task a --task b
    record = {"path": "sel.jsonl", "task": {"sha256": both.sha256}}
    with caplog.at_level("WARNING", logger="tapt"):
        check_task_matches([record], both.file_sha256, both.sha256)
        assert "differs" not in caplog.text
        check_task_matches([record], both.file_sha256[:1], read_text(paths[:1]).sha256)
    assert "--task differs from the task text selection sel.jsonl" in caplog.text
