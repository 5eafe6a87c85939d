"""Open an index directory: the one loader the retriever (and `tapt index info`) reads through."""

from __future__ import annotations

import logging
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .build import DOCS, EMBEDDINGS, FAISS, STORE, TOKENS
from .encoder import Encoder
from .errors import IndexFormatError, InputError, ModelMismatchError
from .manifest import manifest_sha256, read_index_manifest
from .splitter import segment_docs, segment_offsets
from .store import TextStore

log = logging.getLogger(__name__)


class Index:
    """A built index: manifest, memory-mapped embeddings, document offsets, text store, FAISS."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.manifest: dict[str, Any] = read_index_manifest(self.path)
        for name in (EMBEDDINGS, TOKENS, DOCS, FAISS):
            if not (self.path / name).is_file():
                raise IndexFormatError(f"index {self.path} is incomplete: {name} is missing")
        try:
            self.embeddings: np.ndarray = np.load(self.path / EMBEDDINGS, mmap_mode="r")
            self.tokens: np.ndarray = np.load(self.path / TOKENS, mmap_mode="r")
            self.doc_offsets: np.ndarray = np.load(self.path / DOCS)
        except (ValueError, OSError) as exc:
            raise IndexFormatError(f"index {self.path} is damaged: {exc}") from exc
        n, dim = self.manifest["counts"]["sentences"], self.manifest["model"]["dim"]
        if self.embeddings.shape != (n, dim) or len(self.tokens) != n or self.doc_offsets[-1] != n:
            raise IndexFormatError(
                f"index {self.path} is inconsistent: manifest says {n} x {dim}, embeddings are "
                f"{self.embeddings.shape}, tokens {len(self.tokens)}, documents end at "
                f"{int(self.doc_offsets[-1])}"
            )

    @property
    def n_sentences(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    @property
    def segment_size(self) -> int:
        return int(self.manifest["segment_size"])

    @property
    def uuid(self) -> str:
        return str(self.manifest["uuid"])

    @cached_property
    def manifest_sha256(self) -> str:
        return manifest_sha256(self.path)

    def segments(self, size: int | None = None) -> np.ndarray:
        """CSR offsets of segments over sentence rows (the index's segment size unless given)."""
        return segment_offsets(self.doc_offsets, size or self.segment_size)

    def segment_docs(self, seg_offsets: np.ndarray) -> np.ndarray:
        return segment_docs(self.doc_offsets, seg_offsets)

    @cached_property
    def store(self) -> TextStore:
        return TextStore(self.path / STORE)

    @cached_property
    def faiss(self):
        from .faiss_index import read_faiss_index

        index = read_faiss_index(self.path / FAISS)
        if index.ntotal != self.n_sentences:
            raise IndexFormatError(
                f"index {self.path}: FAISS holds {index.ntotal} rows, embeddings {self.n_sentences}"
            )
        return index

    def check_encoder(self, encoder: Encoder) -> None:
        """Refuse a model other than the one the index was built with."""
        model = self.manifest["model"]
        if encoder.dim != model["dim"]:
            raise ModelMismatchError(
                f"model {encoder.name} gives {encoder.dim}-dim embeddings; index {self.path} was "
                f"built with {model['name']} ({model['dim']}-dim)"
            )
        if encoder.weights_sha256 != model["weights_sha256"]:
            raise ModelMismatchError(
                f"model {encoder.name} is not the model index {self.path} was built with "
                f"({model['name']}, weights sha256 {model['weights_sha256'][:12]}...)"
            )

    def load_encoder(self, model: str | None = None, device: str = "auto") -> Encoder:
        """The index's own model (or `model`, which must have the same weights), checked."""
        from .encoder import SentenceTransformerEncoder

        recorded = self.manifest["model"]
        spec = model if model is not None else (recorded.get("source") or recorded["name"])
        try:
            encoder = SentenceTransformerEncoder(spec, device=device)
        except InputError as exc:
            raise ModelMismatchError(
                f"{exc}; index {self.path} was built with {recorded['name']}: pass --model with "
                "its directory"
            ) from exc
        self.check_encoder(encoder)
        return encoder

    def disk_bytes(self) -> dict[str, int]:
        sizes = {}
        for item in sorted(self.path.iterdir()):
            if item.is_dir():
                sizes[item.name] = sum(f.stat().st_size for f in item.rglob("*") if f.is_file())
            else:
                sizes[item.name] = item.stat().st_size
        return sizes
