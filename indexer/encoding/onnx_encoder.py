"""An `Encoder` running an exported ONNX graph (fp32 or int8) with ONNX Runtime on the CPU.

Texts are tokenised once, sorted by token length and cut into batches, so padding is minimal; the
next batch is padded on a thread while ONNX Runtime (which releases the GIL) runs the current one.
The fp32 backend runs the fused graph (`onnx_export`, variant `onnx-fused`) unless `fused=False`
asks for the plain trace; both are the same arithmetic up to float rounding.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from tapt.errors import TaptError
from tapt.indexer.encoding.batching import MODEL_INPUTS, Pretokenized, SortedBatches, Tokenizing
from tapt.util.machine import usable_cores

log = logging.getLogger(__name__)


# Padded tokens per batch of the fused fp32 graph. Rows are computed independently, so batching
# changes no embedding; the budget only cuts batches where lengths jump. On a 4,096-text window of
# the bundled sample it pads 2.2% of the work instead of 6.2% (batches of 64 texts), and products
# of ~1,000-2,000 rows run at the rate of the 2,048-row reference (benchmarks/speed_encode.py).
TOKEN_BUDGET = 2048


def graph_of(variant: str, fused: bool = True) -> str:
    """The exported graph a backend runs: `onnx` runs the fused fp32 graph unless told not to."""
    return "onnx-fused" if variant == "onnx" and fused else variant


def default_threads() -> int:
    """ONNX Runtime's intra-op threads unless told: the cores this process may use."""
    return usable_cores()


class OnnxEncoder:
    """Same interface and embeddings (up to export/quantisation error) as `SentenceTransformerEncoder`."""

    def __init__(self, base, variant: str, threads: int | None = None, fused: bool = True,
                 max_tokens: int | None = None) -> None:
        """Load (exporting once if needed) the ONNX graph of `base`'s model.

        Args:
            base: a CPU `SentenceTransformerEncoder` of the same model (tokenizer, hash, sizes),
                or its cached facts (`model_facts.LightModel`).
            variant: the backend, `onnx` (fp32) or `onnx-int8`.
            threads: ONNX Runtime intra-op threads [default: the cores this process may use].
            fused: run fp32 as the fused graph (faster, same embedding); False: the plain trace.
            max_tokens: most tokens per batch after padding (see `batching.plan_batches`),
                besides at most `batch_size` texts; 0: no token limit; None: `TOKEN_BUDGET` for
                the fused fp32 graph, no limit otherwise (int8 scales activations per batch, so
                its batches are kept as they were).
        """
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise TaptError("the ONNX backends need onnxruntime: pip install onnxruntime") from exc
        from tapt.indexer.encoding.onnx_export import ensure_onnx

        self.name, self.spec, self.dim = base.name, base.spec, base.dim
        self.max_length, self.device, self.backend = base.max_length, "cpu", variant
        self.dtype = "float32"
        self._hash = base.weights_sha256
        self.fingerprint, self.model_config = base.fingerprint, base.model_config
        self.tokenizer = base.tokenizer
        self.graph = graph_of(variant, fused)
        if max_tokens is None:
            max_tokens = TOKEN_BUDGET if self.graph == "onnx-fused" else 0
        self.max_tokens = max_tokens or None
        self.path = ensure_onnx(lambda: base.model, self.fingerprint, self.graph)
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
        return self._encode(texts, batch_size)[0]

    def encode_counted(self, texts: Sequence[str], batch_size: int = 64
                       ) -> tuple[np.ndarray, np.ndarray]:
        """`encode` and `token_counts` from one tokenisation (see `encoder.encode_counted`):
        `encode_tokens` of `tokenizing()(texts)`."""
        if not len(texts):
            return np.empty((0, self.dim), dtype=np.float32), np.empty(0, dtype=np.int32)
        return self.encode_tokens(self.tokenizing(self.inputs)(texts), batch_size)

    def tokenizing(self, names: Sequence[str] | None = None) -> Tokenizing:
        """This encoder's tokenisation, to run apart from the model (`batching.Tokenizing`).

        Args:
            names: The columns to make (default: every model input, so any backend of the
                same model can run on them).

        Returns:
            A picklable callable: texts -> `Pretokenized`.
        """
        return Tokenizing(self.tokenizer, self.max_length, names or MODEL_INPUTS)

    def encode_tokens(self, tokens: Pretokenized, batch_size: int = 64
                      ) -> tuple[np.ndarray, np.ndarray]:
        """`encode_counted` of texts tokenised already (by `tokenizing()`): the forward pass
        only, the same embeddings.

        Args:
            tokens: The texts' `Pretokenized` tokens.
            batch_size: Most texts per batch.

        Returns:
            (embeddings, counts) in the texts' order.
        """
        return self._forward(tokens.tokens, batch_size), tokens.counts

    def _encode(self, texts: Sequence[str], batch_size: int):
        """The embeddings and the `SortedBatches` they came from (None without texts)."""
        if not len(texts):
            return np.empty((0, self.dim), dtype=np.float32), None
        tokens = SortedBatches(self.tokenizer, texts, self.max_length, self.inputs)
        return self._forward(tokens, batch_size), tokens

    def _forward(self, tokens: SortedBatches, batch_size: int) -> np.ndarray:
        """The model on length-sorted batches of `tokens` (the next padded on a thread while
        ONNX Runtime, which releases the GIL, runs the current one), normalised, in order."""
        out = np.empty((len(tokens.lengths), self.dim), dtype=np.float32)
        batches = tokens.batches(batch_size, self.max_tokens)

        def features(rows: np.ndarray) -> dict[str, np.ndarray]:
            padded = tokens.features(rows)
            return {name: padded[name] for name in self.inputs if name in padded}

        with ThreadPoolExecutor(max_workers=1) as pool:  # pads the next batch while ORT runs
            ahead = pool.submit(features, batches[0])
            for b, rows in enumerate(batches):
                fed = ahead.result()
                if b + 1 < len(batches):
                    ahead = pool.submit(features, batches[b + 1])
                out[rows] = self.session.run(None, fed)[0]
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def token_counts(self, texts: Sequence[str]) -> np.ndarray:
        from tapt.indexer.encoding.batching import token_lengths

        return token_lengths(self.tokenizer, texts)
