"""CUDA paths: encoding in half precision and masked-LM training. Skipped without a GPU (CI has none).

Self-contained (no conftest fixtures, no faiss/lmdb), so it also runs on a bare GPU machine:
`TAPT_TEST_MODEL=<sentence-transformers dir> pytest -q --noconftest tests/project/test_gpu.py`.
"""

from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROBES = ["The patient was given 5 mg of the drug twice a day.",
          "The court dismissed the appeal.", "Hi.",
          "A long sentence, with many words and clauses, that pads the batch well beyond the rest."]


@pytest.fixture(scope="module")
def model_spec() -> str | None:
    return os.environ.get("TAPT_TEST_MODEL")  # None = the packaged all-MiniLM-L6-v2


@pytest.mark.parametrize("dtype,floor", [("float16", 0.999), ("bfloat16", 0.99), ("float32", 0.9999)])
def test_cuda_encoder_agrees_with_cpu(model_spec, dtype, floor):
    from tapt.indexer.encoding.encoder import SentenceTransformerEncoder, load_encoder

    cpu = SentenceTransformerEncoder(model_spec, device="cpu")
    gpu = SentenceTransformerEncoder(model_spec, device="cuda", dtype=dtype)
    assert gpu.device.startswith("cuda") and gpu.weights_sha256 == cpu.weights_sha256
    got, ref = gpu.encode(PROBES, batch_size=3), cpu.encode(PROBES)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)
    assert (got * ref).sum(axis=1).min() >= floor
    default = load_encoder(model_spec, device="cuda", backend="auto")
    assert default.backend == "torch" and default.dtype == "float16"  # the measured default


def test_cuda_training_learns_and_evaluates_like_cpu(tmp_path):
    from tapt.retriever.selections.file_format import SelectedSegment, write_selection
    from tapt.trainer.config import TrainConfig
    from tapt.trainer.evaluate import evaluate_text
    from tapt.trainer.loop import train
    from tiny_model import write_tiny_bert

    rng = random.Random(0)
    words = "the cat dog bird sees likes chases big small red old".split()
    texts = [" ".join(rng.choice(words) for _ in range(8)) + " ." for _ in range(300)]
    model = write_tiny_bert(tmp_path / "tiny", texts, hidden_size=64, layers=2, max_positions=64)
    segments = [SelectedSegment(i, i, 1.0, 1.0, "knn", i, (4 * i, 4 * i + 4), " ".join(texts[4 * i:4 * i + 4]),
                                texts[4 * i:4 * i + 4]) for i in range(60)]
    manifest = {"method": "knn", "params": {}, "segment_size": 4, "counts": {"segments": 60},
                "index": {"path": "idx", "uuid": "u", "manifest_sha256": "0" * 64, "model": "tiny"},
                "task": {"files": [], "sha256": "0" * 64, "sentences": 0}}
    sel = tmp_path / "sel.jsonl"
    write_selection(sel, segments, manifest)
    heldout = tmp_path / "heldout.txt"
    heldout.write_text("\n".join(texts[:32]) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    result = train(TrainConfig(selections=(str(sel),), out=str(out), model=str(model), steps=60,
                               batch_size=16, max_length=32, lr=3e-3, device="cuda", progress=False))
    curve = result["loss_curve"]
    assert len(curve) == 60 and all(math.isfinite(x) for x in curve)
    assert sum(curve[-10:]) / 10 < sum(curve[:10]) / 10 - 0.2
    on_gpu = evaluate_text(str(out), [str(heldout)], max_length=32, device="cuda")
    on_cpu = evaluate_text(str(out), [str(heldout)], max_length=32, device="cpu")
    assert on_gpu["tokens"] == on_cpu["tokens"]  # same masks on both devices
    assert on_gpu["loss"] == pytest.approx(on_cpu["loss"], abs=0.05)  # bf16 autocast vs fp32


def test_faiss_gpu_trains_and_assigns_an_ivf_index_as_well_as_the_cpu(monkeypatch):
    """faiss-gpu (`pip install 'tapt[gpu]'`): k-means and coarse assignment on the GPU give an
    index whose recall matches the CPU-built one's (not bit for bit: GPU arithmetic rounds
    differently); the times are printed for the record."""
    import time

    faiss = pytest.importorskip("faiss")
    from tapt.indexer.ann import faiss_index as fi
    from tapt.indexer.ann.index_choice import choice_from_manifest

    if not fi.faiss_gpus():
        pytest.skip("needs faiss-gpu (pip install 'tapt[gpu]') and a GPU FAISS can see")
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((500, 64)).astype(np.float32)
    rows = centres[rng.integers(0, 500, 200_000)] + 0.3 * rng.standard_normal((200_000, 64),
                                                                            dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    queries, truth = rows[:200], None
    choice = choice_from_manifest({"factory": "IVF1024,Flat"}, len(rows), 64)
    recall = {}
    for device in ("gpu", "cpu"):
        if device == "cpu":
            monkeypatch.setenv("TAPT_FAISS_GPU", "0")
        t0 = time.perf_counter()
        template, train_s = fi.train_template(rows, choice)
        part = fi.build_part(rows, choice, template, 0)
        print(f"faiss {device}: train {train_s:.2f} s, train + add {time.perf_counter() - t0:.2f} s")
        part.nprobe = 16
        _, found = part.search(queries, 10)
        if truth is None:
            _, truth = faiss.knn(queries, rows, 10, metric=faiss.METRIC_INNER_PRODUCT)
        recall[device] = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)])
    assert recall["gpu"] >= recall["cpu"] - 0.02 and recall["gpu"] >= 0.8
