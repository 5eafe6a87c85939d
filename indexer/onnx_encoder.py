"""An `Encoder` running an exported ONNX graph (fp32 or int8) with ONNX Runtime on the CPU.

Texts are tokenised once, sorted by token length and cut into batches, so padding is minimal; the
next batch is padded on a thread while ONNX Runtime (which releases the GIL) runs the current one.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from tapt.errors import TaptError

log = logging.getLogger(__name__)


def default_threads() -> int:
    """Cores this process may use (cgroup/affinity aware where the OS tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class OnnxEncoder:
    """Same interface and embeddings (up to export/quantisation error) as `SentenceTransformerEncoder`."""

    def __init__(self, base, variant: str, threads: int | None = None) -> None:
        """`base` is a CPU `SentenceTransformerEncoder` of the same model (tokenizer, hash, sizes)."""
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise TaptError("the ONNX backends need onnxruntime: pip install onnxruntime") from exc
        from .onnx_export import ensure_onnx

        self.name, self.spec, self.dim = base.name, base.spec, base.dim
        self.max_length, self.device, self.backend = base.max_length, "cpu", variant
        self.dtype = "float32"
        self._hash = base.weights_sha256
        self.fingerprint, self.model_config = base.fingerprint, base.model_config
        self.tokenizer = base.model.tokenizer
        self.path = ensure_onnx(base.model, self.fingerprint, variant)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or default_threads()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.threads = options.intra_op_num_threads
        try:
            self.session = ort.InferenceSession(str(self.path), options,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ORT raises its own classes for a bad graph
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise TaptError(f"ONNX Runtime cannot load the exported model {self.path} "
                            f"({type(exc).__name__}: {first}); delete it to export again, or use "
                            "`backend` torch") from exc
        self.inputs = [i.name for i in self.session.get_inputs()]

    @property
    def weights_sha256(self) -> str:
        return self._hash

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        from .batching import SortedBatches

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not len(texts):
            return out
        tokens = SortedBatches(self.tokenizer, texts, self.max_length, self.inputs)
        batches = tokens.batches(batch_size)
        with ThreadPoolExecutor(max_workers=1) as pool:  # pads the next batch while ORT runs
            ahead = pool.submit(tokens.features, batches[0])
            for b, rows in enumerate(batches):
                features = ahead.result()
                if b + 1 < len(batches):
                    ahead = pool.submit(tokens.features, batches[b + 1])
                out[rows] = self.session.run(None, features)[0]
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def token_counts(self, texts: Sequence[str]) -> np.ndarray:
        ids = self.tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
        return np.fromiter((len(x) for x in ids), dtype=np.int32, count=len(texts))
