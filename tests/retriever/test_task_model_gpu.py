"""task-model and the tuned encoder on a CUDA GPU: the same scores as on the CPU (skipped
without a GPU; imports nothing that needs FAISS or LMDB, so it runs on a bare GPU machine)."""

from __future__ import annotations

import numpy as np
import pytest

from task_models import write_sentence_classifier, write_tagger

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TEXTS = ["The kidney and liver were examined.", "A tumour of the liver kidney.", "No entity here.",
         "The ship left the harbour at dawn with its crew.", "Kidney."] * 7


def test_task_model_scores_on_gpu_as_on_cpu(tmp_path):
    from tapt.retriever.learned.task_classifier import load_task_model, score_texts

    write_tagger(tmp_path / "tagger", TEXTS)
    write_sentence_classifier(tmp_path / "clf", TEXTS)
    for name, score, label in (("tagger", "count", 0), ("tagger", "density", 0),
                               ("clf", "probability", 1)):
        cpu, _ = score_texts(load_task_model(str(tmp_path / name), "cpu"), TEXTS, score, label, 8)
        gpu, _ = score_texts(load_task_model(str(tmp_path / name), "cuda"), TEXTS, score, label,
                             8)
        assert np.allclose(cpu, gpu, atol=1e-4), (name, score)
    assert cpu.min() >= 0 and gpu.max() <= 1


def test_tuned_encoder_on_gpu(tmp_path):
    from tapt.indexer.encoding.encoder import load_encoder
    from tiny_model import write_tiny_bert

    model = str(write_tiny_bert(tmp_path / "tuned", TEXTS, hidden_size=16, layers=1))
    cpu = load_encoder(model, device="cpu", backend="torch").encode(TEXTS)
    gpu = load_encoder(model, device="cuda", backend="torch")   # as `tuned_device` cuda
    assert gpu.device.startswith("cuda")
    assert np.all(np.sum(cpu * gpu.encode(TEXTS), axis=1) > 0.99)
