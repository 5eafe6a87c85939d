"""Sentence encoders: the `Encoder` protocol and its sentence-transformers implementation."""

from __future__ import annotations

import hashlib
import logging
from typing import Protocol, Sequence

import numpy as np

from .errors import InputError, TaptError
from .models import display_name, resolve_model

log = logging.getLogger(__name__)


class Encoder(Protocol):
    """What the indexer and retriever need from a model (a fake one serves the unit tests)."""

    name: str
    spec: str | None
    dim: int
    max_length: int
    device: str

    @property
    def weights_sha256(self) -> str: ...

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """L2-normalised float32 embeddings, one row per text, in input order."""
        ...

    def token_counts(self, texts: Sequence[str]) -> np.ndarray:
        """Tokens per text including special tokens, before truncation (int32)."""
        ...


def pick_device(device: str) -> str:
    """`auto` -> cuda when torch sees a GPU, else cpu; `cuda` without a GPU is an error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise TaptError("--device cuda was asked for, but torch sees no CUDA GPU")
    return device


class SentenceTransformerEncoder:
    """A sentence-transformers model; `spec` is a local directory, the packaged default or a hub name."""

    def __init__(self, spec: str | None = None, device: str = "auto") -> None:
        import transformers
        from sentence_transformers import SentenceTransformer

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        self.device = pick_device(device)
        self.name = display_name(spec)
        self.spec = spec
        source = resolve_model(spec)
        try:
            self.model = SentenceTransformer(source, device=self.device)
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"cannot load model {spec!r}: {first}") from exc
        dim = self.model.get_embedding_dimension() if hasattr(
            self.model, "get_embedding_dimension"
        ) else self.model.get_sentence_embedding_dimension()
        if not dim:
            raise InputError(f"model {spec!r} does not report an embedding dimension")
        self.dim = int(dim)
        self.max_length = int(self.model.max_seq_length or 512)
        # Hashed before any fp16 cast, so CPU- and GPU-built indexes of one model agree.
        self._hash = _state_sha256(self.model)
        if self.device.startswith("cuda"):
            self.model.half()  # fp16 halves memory traffic; cosine agreement with fp32 is ~0.9999

    @property
    def weights_sha256(self) -> str:
        return self._hash

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        emb = self.model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def token_counts(self, texts: Sequence[str]) -> np.ndarray:
        ids = self.model.tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
        return np.fromiter((len(x) for x in ids), dtype=np.int32, count=len(texts))


def _state_sha256(model) -> str:
    """Hash of every parameter tensor (name and bytes): identifies the weights, not the files."""
    import torch

    h = hashlib.sha256()
    state = model.state_dict()
    for key in sorted(state):
        tensor = state[key].detach().cpu().contiguous()
        h.update(key.encode())
        h.update(str(tensor.dtype).encode())
        h.update(tensor.view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return h.hexdigest()
