"""Refusals that need no model come before any model loads: a model folder that is not there
(moved, mistyped, an offline hub name not cached), a model folder whose configuration files
already differ from the index's model, a corpus mistake in `index build`/`add`, selections that
cannot be trained on together; and a model that differs only in its weights is refused as soon
as they are read, before anything is exported to ONNX. (benchmarks/cheap_refusals.py times them
through the command line with the real model.)"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

import tapt
import tapt.indexer.encoding.encoder as encoder_module
from tapt.errors import InputError, ModelMismatchError
from tapt.indexer.encoding.encoder import file_differences
from tapt.indexer.encoding.models import (
    DEFAULT_MODEL,
    file_facts,
    missing_model,
    packaged_default_path,
)
from tapt.indexer.index import Index


def _no_load(*args, **kwargs):
    raise AssertionError("a model was loaded before the cheap refusal")


@pytest.fixture()
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hf-cache"
    (cache / "models--org--cached" / "snapshots" / "abc").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_a_model_folder_that_is_not_there_is_named(tmp_path, hub_cache):
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "config.json").write_text("{}")
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "modules.json").write_text("[]")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("hi")
    assert missing_model(None) is None and missing_model(DEFAULT_MODEL) is None
    assert missing_model(str(tmp_path / "here")) is None
    assert missing_model(str(tmp_path / "st")) is None
    assert "holds no model (no config.json or modules.json" in missing_model(
        str(tmp_path / "empty"))
    assert "is not a directory" in missing_model(str(tmp_path / "file"))
    assert missing_model("org/cached") is None
    for gone in (str(tmp_path / "gone"), "./gone", "../gone", "~/gone-model-x", "a/b/c"):
        assert "does not exist (moved or deleted?)" in missing_model(gone), gone
    assert "HF_HUB_OFFLINE" in missing_model("org/not-cached")
    assert "HF_HUB_OFFLINE" in missing_model("plain-name")


def test_an_online_hub_name_is_left_to_the_loader(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert missing_model("org/some-model") is None


def _recorded_like_packaged() -> dict:
    """The model record of an index built with the packaged model, as far as its files say."""
    root = packaged_default_path()
    config = json.loads((root / "config.json").read_text())
    return {"name": DEFAULT_MODEL, "dim": 384, "max_length": 256,
            "config": {"modules": [{"type": "Transformer", "architecture": {
                k: config[k] for k in ("model_type", "hidden_size", "num_hidden_layers",
                                       "vocab_size")}}]}}


def _tiny_bert(tmp_path: Path) -> Path:
    from tiny_model import write_tiny_bert

    return write_tiny_bert(tmp_path / "tiny", ["the cat sat on the mat ."] * 10, hidden_size=32,
                           layers=2, max_positions=64)


def test_configuration_files_tell_another_model_apart_without_loading_it(tmp_path):
    recorded = _recorded_like_packaged()
    assert file_differences(recorded, file_facts(str(packaged_default_path()))) == []
    facts = file_facts(str(_tiny_bert(tmp_path)))
    diffs = file_differences(recorded, facts)
    assert "hidden_size 32 (index: 384)" in diffs and "num_hidden_layers 2 (index: 6)" in diffs
    assert file_differences(recorded, {}) == []          # a hub name: nothing to compare yet


def _fake_index(tmp_path: Path, recorded: dict):
    fake = types.SimpleNamespace(manifest={"model": recorded, "build": {"backend": "torch"}},
                                 path=tmp_path / "idx", check_encoder=_no_load,
                                 _task_backend=lambda device, backend: "torch")
    fake._refuse_missing_model = types.MethodType(Index._refuse_missing_model, fake)
    return fake


def test_index_load_encoder_refuses_before_loading(tmp_path, monkeypatch, hub_cache):
    monkeypatch.setattr(encoder_module, "SentenceTransformerEncoder", _no_load)
    recorded = _recorded_like_packaged()
    fake = _fake_index(tmp_path, recorded)
    with pytest.raises(ModelMismatchError, match="hidden_size 32 .index: 384."):
        Index.load_encoder(fake, str(_tiny_bert(tmp_path)))
    with pytest.raises(ModelMismatchError, match="does not exist .moved or deleted.*pass "
                                                 "`model` with its directory"):
        Index.load_encoder(fake, str(tmp_path / "not-here"))
    moved = _fake_index(tmp_path, {**recorded, "source": str(tmp_path / "model-moved")})
    with pytest.raises(ModelMismatchError, match="model-moved does not exist"):
        Index.load_encoder(moved)


def test_a_model_is_checked_before_it_is_exported_to_onnx(tmp_path, monkeypatch):
    from tapt.indexer.encoding import model_facts, onnx_encoder

    folder = tmp_path / "other-weights"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    base = types.SimpleNamespace(name="other", dim=384)
    exported = []
    monkeypatch.setattr(encoder_module, "SentenceTransformerEncoder", lambda *a, **k: base)
    monkeypatch.setattr(model_facts, "load_facts", lambda *a, **k: None)
    monkeypatch.setattr(model_facts, "record_facts", lambda *a, **k: None)
    monkeypatch.setattr(onnx_encoder, "OnnxEncoder", lambda *a, **k: exported.append(a))

    def wrong(model):
        assert model is base
        raise ModelMismatchError("other weights")

    with pytest.raises(ModelMismatchError, match="other weights"):
        encoder_module.load_encoder(str(folder), device="cpu", backend="onnx", check=wrong)
    assert exported == []
    encoder_module.load_encoder(str(folder), device="cpu", backend="onnx", check=lambda m: None)
    assert len(exported) == 1


def test_a_corpus_mistake_is_refused_before_the_model_loads(tmp_path, monkeypatch, fake_index):
    monkeypatch.setattr(encoder_module, "load_encoder", _no_load)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"body": "no text field"}\n')
    with pytest.raises(InputError, match="field 'text' is missing"):
        tapt.Index.build([corpus], tmp_path / "idx")
    with pytest.raises(InputError, match="model folder .* does not exist"):
        tapt.Index.build([corpus], tmp_path / "idx", model=str(tmp_path / "gone"))
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(fake_index, copy)
    monkeypatch.setattr(Index, "load_encoder", _no_load)
    with pytest.raises(InputError, match="field 'text' is missing"):
        tapt.Index.open(copy).add([corpus])


def test_selections_that_cannot_go_together_are_refused_before_training(tmp_path, monkeypatch,
                                                                        fake_index):
    import shutil

    import tapt.trainer.loop

    monkeypatch.setattr(tapt.trainer.loop, "train", _no_load)
    task = ["Patient fever therapy dose."]
    first = tapt.Index.open(fake_index).select("centroid", task=task, budget="3",
                                               
                                               out=tmp_path / "a.jsonl")
    shutil.copytree(fake_index, tmp_path / "other")
    manifest = json.loads((tmp_path / "other" / "manifest.json").read_text())
    other = tapt.Index.open(tmp_path / "other")
    second = other.select("centroid", task=task, budget="3",
                          out=tmp_path / "b.jsonl")
    data = json.loads((tmp_path / "b.jsonl.manifest.json").read_text())
    data["index"]["uuid"] = "another-" + manifest["uuid"]
    (tmp_path / "b.jsonl.manifest.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="come from different indexes"):
        tapt.train([first.path, second.path], tmp_path / "m", steps=1)
    tapt.export(first.path, tmp_path / "x.parquet")
    with pytest.raises(InputError, match="is a Parquet file"):
        tapt.train(tmp_path / "x.parquet", tmp_path / "m", steps=1)


def test_a_loaders_own_words_are_quoted_as_they_are():
    from tapt.indexer.encoding.models import load_failure

    exc = ValueError("Unrecognized model in /m. Should have a `model_type` key in its "
                     "config.json\nmore")
    message = load_failure("/m", "cannot load model", exc)
    assert message.endswith("Should have a 'model_type' key in its config.json")
    rendered = InputError(message).render(lambda p: "--" + p.replace("_", "-"))
    assert "--model-type" not in rendered and "'model_type'" in rendered


def test_an_add_at_another_precision_than_the_index_is_refused_before_the_model_loads(
        tmp_path, monkeypatch, fake_index):
    from tapt.indexer.encoding.index_model import IndexModel

    monkeypatch.setattr(encoder_module, "load_encoder", _no_load)
    monkeypatch.setattr(Index, "load_encoder", _no_load)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "A new sentence."}\n')
    with pytest.raises(InputError, match="embedded with the torch backend; rows embedded with "
                                         "onnx-int8 differ") as refused:
        tapt.Index.open(fake_index).add([corpus], backend="onnx-int8")
    assert refused.value.param == "backend"

    class Built(IndexModel):
        def __init__(self, backend):
            self.manifest = {"build": {"backend": backend}}

    Built("torch").check_add_backend("cpu", "onnx")          # float and float: the same rows
    Built("onnx").check_add_backend("cpu", "torch")
    Built("onnx-int8").check_add_backend("cpu", "auto")      # the index's own
    Built("onnx-int8").check_add_backend("cpu", "onnx-int8")
    for backend in ("torch", "onnx"):
        with pytest.raises(InputError, match="onnx-int8 backend.*on the CPU"):
            Built("onnx-int8").check_add_backend("cpu", backend)
