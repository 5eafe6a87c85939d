"""An ONNX encoder of an unchanged model directory seen before starts from its cached facts and
tokenizer copy (no sentence-transformers, no weights) and embeds exactly as the full load."""

from __future__ import annotations

import copy
import os
import shutil

import numpy as np
import pytest

from tapt.indexer.encoding import encoder as encoder_module
from tapt.indexer.encoding.batching import PROBES
from tapt.indexer.encoding.encoder import SentenceTransformerEncoder, load_encoder
from tapt.indexer.encoding.model_facts import SUBDIR, _same_tokenizer, load_facts
from tapt.indexer.encoding.models import model_files_stamp, packaged_default_path
from tapt.indexer.encoding.onnx_encoder import OnnxEncoder

TEXTS = [*PROBES, "Fever and a persistent cough.", "The court dismissed the appeal."]


@pytest.fixture()
def model_dir(tmp_path):
    """A copy of the packaged model (its files can then change)."""
    return shutil.copytree(packaged_default_path(), tmp_path / "model")


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """A cache of this test only, sharing the session's ONNX exports (exporting takes long)."""
    shared = os.environ["TAPT_CACHE_DIR"]
    load_encoder(None, "cpu", "onnx")               # the session's export exists from here on
    root = tmp_path / "cache"
    root.mkdir()
    (root / "onnx").symlink_to(os.path.join(shared, "onnx"), target_is_directory=True)
    monkeypatch.setenv("TAPT_CACHE_DIR", str(root))
    return root


def no_full_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(encoder_module.SentenceTransformerEncoder, "__init__", refuse)


def test_second_load_uses_the_facts_and_embeds_identically(model_dir, cache, monkeypatch):
    full = OnnxEncoder(SentenceTransformerEncoder(str(model_dir), "cpu"), "onnx")
    first = load_encoder(str(model_dir), "cpu", "onnx")            # loads, records the facts
    assert load_facts(model_files_stamp(str(model_dir))) is not None
    no_full_load(monkeypatch)
    light = load_encoder(str(model_dir), "cpu", "onnx")
    for attr in ("name", "spec", "dim", "max_length", "weights_sha256", "fingerprint",
                 "model_config", "path"):
        assert getattr(light, attr) == getattr(full, attr) == getattr(first, attr), attr
    np.testing.assert_array_equal(light.encode(TEXTS, batch_size=4), full.encode(TEXTS))
    np.testing.assert_array_equal(light.token_counts(TEXTS), full.token_counts(TEXTS))
    assert _same_tokenizer(full.tokenizer, light.tokenizer, full.max_length)


def test_a_changed_model_directory_is_loaded_again(model_dir, cache, monkeypatch):
    load_encoder(str(model_dir), "cpu", "onnx")
    config = model_dir / "config_sentence_transformers.json"
    stat = config.stat()
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert load_facts(model_files_stamp(str(model_dir))) is None
    no_full_load(monkeypatch)
    with pytest.raises(AssertionError, match="the model was loaded"):
        load_encoder(str(model_dir), "cpu", "onnx")


@pytest.mark.parametrize("damage", ["tokenizer", "facts", "extra file"])
def test_a_damaged_entry_is_recomputed_with_a_warning(model_dir, cache, caplog, damage):
    load_encoder(str(model_dir), "cpu", "onnx")
    stamp = model_files_stamp(str(model_dir))
    entry = cache / SUBDIR / stamp
    if damage == "tokenizer":
        path = entry / "tokenizer" / "tokenizer.json"
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x20
        path.write_bytes(bytes(data))
    elif damage == "facts":
        (entry / "facts.json").write_bytes(b"{}")
    else:
        (entry / "tokenizer" / "special_tokens_map.json").write_text("{}")
    with caplog.at_level("WARNING"):
        assert load_facts(stamp) is None
    assert "damaged" in caplog.text
    reloaded = load_encoder(str(model_dir), "cpu", "onnx")     # rebuilds the entry
    assert load_facts(stamp) is not None
    np.testing.assert_array_equal(
        reloaded.encode(TEXTS), load_encoder(str(model_dir), "cpu", "onnx").encode(TEXTS))


def test_a_tokenizer_that_reads_back_differently_is_not_trusted(minilm_tokenizer):
    other = copy.deepcopy(minilm_tokenizer)
    assert _same_tokenizer(minilm_tokenizer, other, 256)
    other.model_max_length = 128
    assert not _same_tokenizer(minilm_tokenizer, other, 256)
    lowercase_off = copy.deepcopy(minilm_tokenizer)
    from tokenizers import normalizers

    lowercase_off.backend_tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False)
    assert not _same_tokenizer(minilm_tokenizer, lowercase_off, 256)


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(packaged_default_path()))
