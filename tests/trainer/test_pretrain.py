"""`tapt.pretrain` / `tapt pretrain`: a general masked LM made from a random sample of an index
(a new BERT with a learnt WordPiece vocabulary, or an existing model continued), reproducible,
resumable, refused early when it cannot work; and the general model `bench_downstream` makes
once and reuses from the cache."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tapt import api
from tapt.errors import InputError
from tapt.modeling.scratch import PRESETS

FAST = dict(preset="tiny", steps=4, batch_size=8, sample=200, progress=False)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_new_model_of_the_corpus_is_reproducible_and_loads_as_a_masked_lm(fake_index,
                                                                             tmp_path):
    from tapt.modeling.mlm import load_mlm
    from tapt.util.files import sha256_file

    manifest = api.pretrain(fake_index, tmp_path / "a", **FAST)
    assert manifest["steps"] == 4 and len(manifest["loss_curve"]) == 4
    info = manifest["pretrain"]
    assert info["preset"] == "tiny" and info["shape"]["hidden_size"] == 64
    assert 180 <= info["sample"]["sentences"] <= 220 and info["vocabulary"]["kind"] == "wordpiece"
    assert manifest["arguments"]["vocab_size"] == PRESETS["tiny"]["vocab_size"]
    model, tokenizer, loaded = load_mlm(str(tmp_path / "a"), warn=False)
    assert not loaded["head_initialised"] and tokenizer.mask_token == "[MASK]"
    assert model.config.hidden_size == 64 and len(tokenizer) == info["vocabulary"]["size"]
    again = api.pretrain(fake_index, tmp_path / "b", **FAST)
    assert again["loss_curve"] == manifest["loss_curve"]
    assert sha256_file(tmp_path / "a" / "model.safetensors") == \
        sha256_file(tmp_path / "b" / "model.safetensors")
    other = api.pretrain(fake_index, tmp_path / "c", **{**FAST, "seed": 1})
    assert other["pretrain"]["sample"]["sha256"] != info["sample"]["sha256"]


def test_resume_continues_from_a_checkpoint_and_another_setting_is_refused(fake_index,
                                                                            tmp_path):
    import shutil

    out = tmp_path / "m"
    done = api.pretrain(fake_index, out, save_every=2, keep_checkpoints=1, **FAST)
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-2"]
    (out / "training_manifest.json").unlink()       # as if stopped after step 2's checkpoint
    resumed = api.pretrain(fake_index, out, resume=True, save_every=2, keep_checkpoints=1,
                           **FAST)
    assert resumed["resumed_at"] == [2] and resumed["loss_curve"] == done["loss_curve"]
    with pytest.raises(InputError, match="another configuration"):
        api.pretrain(fake_index, out, resume=True, **{**FAST, "steps": 6})
    shutil.rmtree(out)


@pytest.mark.parametrize("settings, param", [
    ({"preset": "huge"}, "preset"), ({"heads": 3}, "heads"), ({"vocab_size": 10}, "vocab_size"),
    ({"stepz": 3}, "stepz"), ({"lr": -1.0}, "lr"), ({"tokenizer": "bpe"}, "tokenizer"),
])
def test_settings_that_cannot_work_are_refused_before_anything_is_written(fake_index, tmp_path,
                                                                         settings, param):
    with pytest.raises(InputError) as err:
        api.pretrain(fake_index, tmp_path / "x", **{**FAST, **settings})
    assert err.value.param == param and not (tmp_path / "x").exists()


def test_an_existing_model_is_continued_on_the_sample(fake_index, tmp_path):
    from tiny_model import write_tiny_bert

    base = write_tiny_bert(tmp_path / "bert", ["alpha beta gamma delta"] * 3, hidden_size=16,
                           layers=1)
    manifest = api.pretrain(fake_index, tmp_path / "warm", model=str(base), max_length=32,
                            **FAST)
    assert manifest["pretrain"]["vocabulary"]["kind"] == "model"
    assert manifest["model"]["name"].endswith("bert") and manifest["steps"] == 4


def test_the_command_prints_one_summary_line(fake_index, tmp_path):
    from tapt.cli import cli

    result = CliRunner().invoke(cli, ["-q", "pretrain", str(fake_index), "--out",
                                      str(tmp_path / "g"), "--preset", "tiny", "--steps", "2",
                                      "--sample", "100", "--batch-size", "4"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("pretrained 2 steps in ") and "sampled sentences" in \
        result.output
    result = CliRunner().invoke(cli, ["-q", "pretrain", str(fake_index), "--out",
                                      str(tmp_path / "h"), "--heads", "3"])
    assert result.exit_code != 0 and result.output.startswith("Error: --heads: ")


def test_bench_downstream_makes_the_general_model_once_and_checks_it(fake_index, tmp_path,
                                                                    monkeypatch, caplog):
    import random

    from conftest import HashingEncoder, make_sentence

    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("tapt.indexer.encoding.encoder.load_encoder",
                        lambda *a, **k: HashingEncoder())       # the fake index's model
    monkeypatch.setitem(PRESETS["tiny"], "steps", 3)
    monkeypatch.setitem(PRESETS["tiny"], "sample", 100)
    rng = random.Random(5)
    rows = [{"text": make_sentence(rng, topic), "label": topic, "doc": f"{topic}:{d}"}
            for topic in ("medical", "legal") for d in range(6) for _ in range(2)]
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = dict(preset="tiny", conditions="none,random", budget="20sent", steps=2,
                    batch_size=4, max_length=16, folds=3, ft_epochs=1, group_field="doc",
                    progress=False)
    first = api.bench_downstream(fake_index, labelled, tmp_path / "r1", **settings)
    general = first["settings"]["general_model"]
    assert not general["reused"] and general["steps"] == 3
    assert general["path"].startswith(str(tmp_path / "cache" / "general-models"))
    second = api.bench_downstream(fake_index, labelled, tmp_path / "r2", **settings)
    assert second["settings"]["general_model"]["reused"]
    assert second["aggregate"][0]["accuracy"] == first["aggregate"][0]["accuracy"]
    weights = tmp_path / "cache" / "general-models" / general["key"] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    third = api.bench_downstream(fake_index, labelled, tmp_path / "r3", **settings)
    assert not third["settings"]["general_model"]["reused"]          # made again
    assert "does not match" in caplog.text
