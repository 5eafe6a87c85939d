import json

import numpy as np
import pytest

from tapt.errors import TaptError
from tapt.indexer.encoding.models import (
    DEFAULT_MODEL,
    display_name,
    packaged_default_path,
    resolve_model,
)


def test_default_model_resolves_to_the_packaged_directory():
    path = resolve_model(None)
    assert path == str(packaged_default_path()) == resolve_model(DEFAULT_MODEL)
    assert display_name(None) == DEFAULT_MODEL
    assert display_name("org/some-model") == "org/some-model"


def test_cuda_request_without_gpu_is_a_clear_error():
    torch = pytest.importorskip("torch")
    from tapt.indexer.encoding.encoder import pick_device

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(TaptError, match="sees no CUDA GPU"):
        pick_device("cuda")
    assert pick_device("auto") == "cpu"


@pytest.fixture(scope="session")
def minilm():
    from tapt.indexer.encoding.encoder import SentenceTransformerEncoder

    return SentenceTransformerEncoder(None, device="cpu")


def test_real_encoder_embeds_normalised_and_counts_tokens(minilm):
    emb = minilm.encode(["A short sentence.", "Another, slightly longer sentence here."])
    assert emb.shape == (2, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    counts = minilm.token_counts(["word " * 300, "hi"])
    assert counts[0] > minilm.max_length == 256 and counts[1] == 3
    assert len(minilm.weights_sha256) == 64 and minilm.name == DEFAULT_MODEL


def test_the_cuda_batching_path_embeds_like_sentence_transformers(minilm, monkeypatch):
    """The CUDA path's own batching (tokenised once, sorted, padded to multiples of 8, put
    back in order) run on the CPU, where only pinning needs a GPU: the same vectors."""
    import torch

    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self)
    texts = ["A short sentence.", "", "word " * 300, "Another, slightly longer one here.",
             "x", "Ünïcödé text and 中文", "ten words in this sentence are enough to be longer"]
    got = minilm._encode_cuda(texts, batch_size=3)
    ref = minilm.encode(texts, batch_size=3)
    assert got.shape == ref.shape == (len(texts), 384)
    np.testing.assert_allclose(got, ref, atol=2e-5)
    assert minilm._encode_cuda([], batch_size=3).shape == (0, 384)


@pytest.mark.parametrize("path", ["cuda-batching", "onnx", "torch", "protocol"])
def test_encode_counted_equals_encode_and_token_counts(minilm, monkeypatch, path):
    """One tokenisation gives both: the embeddings of `encode` and the untruncated counts of
    `token_counts`, texts longer than the model's maximum recounted."""
    import torch

    from tapt.indexer.encoding.encoder import encode_counted
    from tapt.indexer.encoding.onnx_encoder import OnnxEncoder

    texts = ["A short sentence.", "", "word " * 300, "x " * 254, "x " * 255, "Ünïcödé 中文",
             "ten words in this sentence are enough to be longer"]
    counts = minilm.token_counts(texts)
    assert counts[2] > 256 and counts[3] == 256 and counts[4] == 257   # at and past the limit
    if path == "cuda-batching":
        monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self)
        emb, got = minilm._encode_cuda(texts, batch_size=3, counted=True)
        want = minilm.encode(texts, batch_size=3)
    elif path == "onnx":
        encoder = OnnxEncoder(minilm, "onnx")
        emb, got = encode_counted(encoder, texts, batch_size=3)
        want = encoder.encode(texts, batch_size=3)
        assert encoder.encode_counted([], 3)[1].shape == (0,)
    elif path == "torch":
        emb, got = encode_counted(minilm, texts, batch_size=3)
        want = minilm.encode(texts, batch_size=3)
    else:                                   # an encoder without encode_counted: both calls
        class Plain:
            dim = 384

            def encode(self, texts, batch_size=64):
                return minilm.encode(texts, batch_size)

            def token_counts(self, texts):
                return minilm.token_counts(texts)

        emb, got = encode_counted(Plain(), texts, batch_size=3)
        want = minilm.encode(texts, batch_size=3)
    assert got.dtype == np.int32 and got.tolist() == counts.tolist()
    np.testing.assert_allclose(emb, want, atol=2e-5)


def test_missing_model_directory_is_an_input_error(tmp_path):
    from tapt.errors import InputError
    from tapt.indexer.encoding.encoder import SentenceTransformerEncoder

    (tmp_path / "empty-model").mkdir()
    with pytest.raises(InputError, match="cannot load model"):
        SentenceTransformerEncoder(str(tmp_path / "empty-model"), device="cpu")


PROBES = ["The patient was given 5 mg of the drug twice a day.",
          "The court dismissed the appeal.", "Hi.",
          "A long sentence, with many words and clauses, that pads the batch well beyond the rest."]


@pytest.mark.parametrize("backend,floor", [("onnx", 0.9999), ("onnx-int8", 0.97)])
def test_onnx_backends_agree_with_torch_and_export_once(minilm, backend, floor):
    from tapt.indexer.encoding.encoder import load_encoder
    from tapt.indexer.encoding.onnx_export import export_dir

    onnx = load_encoder(None, device="cpu", backend=backend)
    assert onnx.backend == backend and onnx.weights_sha256 == minilm.weights_sha256
    assert onnx.dim == minilm.dim and onnx.max_length == minilm.max_length
    got, ref = onnx.encode(PROBES, batch_size=3), minilm.encode(PROBES)
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert (got * ref).sum(axis=1).min() >= floor
    np.testing.assert_array_equal(onnx.token_counts(PROBES), minilm.token_counts(PROBES))
    assert onnx.graph == {"onnx": "onnx-fused"}.get(backend, backend)  # fp32 runs fused
    cached = export_dir(minilm.fingerprint, onnx.graph) / "model.onnx"
    assert onnx.path == cached and cached.is_file()
    stamp = cached.stat().st_mtime_ns
    again = load_encoder(None, device="cpu", backend=backend)
    assert cached.stat().st_mtime_ns == stamp and again.path == cached  # reused, not re-exported
    assert onnx.encode([]).shape == (0, minilm.dim)


def test_backend_resolution_and_refusals():
    from tapt.indexer.encoding.encoder import CPU_DEFAULT, resolve_backend

    assert resolve_backend("auto", "cpu") == CPU_DEFAULT
    assert resolve_backend("auto", "cuda") == "torch"
    assert resolve_backend("onnx", "cpu") == "onnx"
    with pytest.raises(TaptError, match="CPU only"):
        resolve_backend("onnx-int8", "cuda")
    with pytest.raises(TaptError, match="unknown backend"):
        resolve_backend("tensorrt", "cpu")


def test_index_records_its_backend_and_tasks_embed_with_it(tmp_path, minilm):
    from tapt.indexer.building.pipeline import BuildConfig, build_index
    from tapt.indexer.encoding.encoder import load_encoder
    from tapt.indexer.index import Index

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(PROBES) + "\n", encoding="utf-8")
    build_index([corpus], tmp_path / "ix", load_encoder(None, "cpu", "onnx"),
                BuildConfig(progress=False, split=False))
    ix = Index(tmp_path / "ix")
    assert ix.manifest["build"]["backend"] == "onnx"
    assert ix.load_encoder(device="cpu").backend == "onnx"
    assert ix.load_encoder(device="cpu", backend="torch").backend == "torch"


def _model_copy(tmp_path, pooling: str | None = None):
    """A copy of the packaged model directory, with another pooling mode if asked."""
    import shutil

    from tapt.indexer.encoding.models import packaged_default_path

    copy = tmp_path / "model-copy"
    shutil.copytree(packaged_default_path(), copy)
    if pooling:
        config = json.loads((copy / "1_Pooling" / "config.json").read_text())
        config["pooling_mode_mean_tokens"] = pooling == "mean"
        config["pooling_mode_cls_token"] = pooling == "cls"
        (copy / "1_Pooling" / "config.json").write_text(json.dumps(config))
    return copy


def test_fingerprint_covers_pooling_so_same_weights_are_not_the_same_model(minilm, tmp_path):
    """Issue 11: same weights, CLS pooling instead of mean, was accepted as the index's model and
    poisoned the task cache."""
    from tapt.errors import ModelMismatchError
    from tapt.indexer.encoding.encoder import (
        SentenceTransformerEncoder,
        embedding_key,
        model_differences,
        model_record,
    )
    from tapt.indexer.index import Index

    moved = SentenceTransformerEncoder(str(_model_copy(tmp_path)), device="cpu")
    assert moved.fingerprint == minilm.fingerprint    # a moved copy is the same model
    cls_dir = _model_copy(tmp_path / "cls", "cls")
    cls = SentenceTransformerEncoder(str(cls_dir), device="cpu")
    assert cls.weights_sha256 == minilm.weights_sha256
    assert cls.fingerprint != minilm.fingerprint
    assert embedding_key(cls) != embedding_key(minilm)
    diffs = model_differences(model_record(minilm), cls)
    assert diffs and "pooling_mode" in " ".join(diffs), diffs
    assert model_differences(model_record(minilm), moved) == []
    old_manifest = {k: v for k, v in model_record(minilm).items()
                    if k not in ("fingerprint", "config")}
    assert model_differences(old_manifest, cls) == []  # old manifests: what they recorded

    class Fake:  # an index built with the packaged model, opened with the CLS copy
        manifest = {"model": model_record(minilm)}
        path = tmp_path / "idx"

    with pytest.raises(ModelMismatchError, match="pooling_mode"):
        Index.check_encoder(Fake(), cls)


def test_a_truncated_onnx_export_is_made_again_never_a_traceback(minilm, caplog):
    from tapt.indexer.encoding.encoder import load_encoder
    from tapt.indexer.encoding.onnx_export import export_dir

    first = load_encoder(None, device="cpu", backend="onnx")
    cached = export_dir(minilm.fingerprint, "onnx-fused") / "model.onnx"
    assert first.path == cached
    cached.write_bytes(cached.read_bytes()[: cached.stat().st_size // 3])
    with caplog.at_level("WARNING"):
        again = load_encoder(None, device="cpu", backend="onnx")
    assert any("damaged" in r.getMessage() and "exporting the model again" in r.getMessage()
               for r in caplog.records)
    assert again.path == cached and cached.stat().st_size > 3 * 1000
    np.testing.assert_allclose(again.encode(PROBES), first.encode(PROBES), atol=1e-5)


def test_fused_graph_has_fused_operators_and_embeds_like_the_plain_one(minilm):
    from tapt.indexer.encoding.onnx_encoder import OnnxEncoder

    fused = OnnxEncoder(minilm, "onnx")
    plain = OnnxEncoder(minilm, "onnx", fused=False, max_tokens=40)
    assert plain.graph == "onnx" and plain.path.parent.name.endswith("-onnx-v2")
    info = json.loads((fused.path.parent / "export.json").read_text())
    ort = tuple(int(x) for x in info["onnxruntime"].split(".")[:2])
    if ort >= (1, 31):      # 1.30's optimizer leaves this trace's attention unfused
        assert info["fused_operators"]["Attention"] == 6  # one per layer: QKV in one product
    assert {"SkipLayerNormalization", "BiasGelu"} <= set(info["fused_operators"])
    assert info["probe_cosine_to_torch"] >= 0.9999
    texts = PROBES * 5 + ["word " * 300]  # uneven lengths, one truncated to the maximum
    got, ref = fused.encode(texts, batch_size=4), plain.encode(texts, batch_size=4)
    assert (got * ref).sum(axis=1).min() >= 0.99999
    np.testing.assert_allclose(got, minilm.encode(texts), atol=1e-4)


def test_an_architecture_the_optimizer_cannot_fuse_keeps_the_plain_graph(minilm, tmp_path,
                                                                           monkeypatch):
    import onnxruntime.transformers.optimizer as optimizer

    from tapt.indexer.encoding import onnx_export

    def refuse(*args, **kwargs):
        raise NotImplementedError("unknown pattern")

    monkeypatch.setattr(optimizer, "optimize_model", refuse)
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    path = onnx_export.ensure_onnx(lambda: minilm.model, minilm.fingerprint, "onnx-fused")
    info = json.loads((path.parent / "export.json").read_text())
    assert info["fused_operators"] == {} and info["probe_cosine_to_torch"] >= 0.9999
    assert onnx_export.entry_problem(path.parent) is None


def test_the_cpu_computes_in_float32_and_an_unknown_dtype_is_refused(minilm):
    from tapt.errors import InputError
    from tapt.indexer.encoding.encoder import SentenceTransformerEncoder, preferred_batch_size

    assert minilm.dtype == "float32" and preferred_batch_size(minilm) == 64
    with pytest.raises(InputError, match="float16"):
        SentenceTransformerEncoder(None, device="cpu", dtype="half")


def test_tokenising_apart_embeds_as_encode_counted(minilm, monkeypatch):
    """`tokenizing_of` (pickled, as to a Ray task) then `encode_tokens`: the same embeddings and
    counts, bit for bit, as `encode_counted` (ONNX, and torch's CUDA path run on the CPU);
    sentence-transformers on the CPU tokenises itself."""
    import pickle

    import torch

    from tapt.indexer.encoding.encoder import encode_counted, tokenizing_of
    from tapt.indexer.encoding.onnx_encoder import OnnxEncoder

    texts = ["A short sentence.", "", "word " * 300, "x " * 255, "Ünïcödé 中文",
             "ten words in this sentence are enough to be longer"] * 3
    assert tokenizing_of(minilm) is None
    onnx = OnnxEncoder(minilm, "onnx")
    tokens = pickle.loads(pickle.dumps(tokenizing_of(onnx)(texts)))
    emb, counts = onnx.encode_tokens(tokens, batch_size=4)
    want_emb, want_counts = encode_counted(onnx, texts, batch_size=4)
    assert np.array_equal(emb, want_emb) and np.array_equal(counts, want_counts)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self)
    monkeypatch.setattr(type(minilm), "_own_batches", property(lambda self: True))  # as on CUDA
    tokens = pickle.loads(pickle.dumps(tokenizing_of(minilm)(texts)))
    emb, counts = minilm.encode_tokens(tokens, batch_size=4)
    want_emb, want_counts = minilm._encode_cuda(texts, batch_size=4, counted=True)
    assert np.array_equal(emb, want_emb) and np.array_equal(counts, want_counts)
