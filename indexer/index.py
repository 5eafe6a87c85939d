"""Open an index directory: the one loader the retriever (and `tapt index info`) reads through."""

from __future__ import annotations

import hashlib
import logging
import os
import weakref
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .build import DOCS, EMBEDDINGS, FAISS, STORE, TOKENS
from .encoder import Encoder
from tapt.errors import IndexFormatError, InputError, ModelMismatchError
from .manifest import MANIFEST_NAME, read_index_manifest
from .splitter import segment_docs, segment_offsets
from .store import TextStore

log = logging.getLogger(__name__)

_PROC_FD = Path("/proc/self/fd")


class Index:
    """A built index: manifest, memory-mapped embeddings, document offsets, text store, FAISS."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        read_index_manifest(self.path)  # friendly errors for a missing, foreign or newer index
        for _ in range(3):
            dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
            weakref.finalize(self, os.close, dir_fd)
            try:
                self._open_snapshot(dir_fd)
                return
            except (OSError, IndexFormatError) as exc:
                if os.stat(self.path).st_ino == os.fstat(dir_fd).st_ino:
                    if isinstance(exc, IndexFormatError):
                        raise
                    raise IndexFormatError(f"index {self.path} is damaged: {exc}") from exc
                # `tapt index add` swapped in a new generation while we opened this one: retry
        raise IndexFormatError(f"index {self.path} kept changing while it was being opened")

    def _open_snapshot(self, dir_fd: int) -> None:
        """Open every file through one directory handle, so all of them come from one generation.

        `tapt index add` replaces the directory atomically; a reader that opened the old one keeps
        reading it (FAISS through an open file handle, even after the old files are removed).
        """
        base = Path(f"/proc/self/fd/{dir_fd}") if _PROC_FD.is_dir() else self.path
        self.manifest: dict[str, Any] = read_index_manifest(base)
        for name in (EMBEDDINGS, TOKENS, DOCS, FAISS):
            if not (base / name).is_file():
                raise IndexFormatError(f"index {self.path} is incomplete: {name} is missing")
        try:
            self.embeddings: np.ndarray = np.load(base / EMBEDDINGS, mmap_mode="r")
            self.tokens: np.ndarray = np.load(base / TOKENS, mmap_mode="r")
            self.doc_offsets: np.ndarray = np.load(base / DOCS)
        except FileNotFoundError:
            raise
        except (ValueError, OSError) as exc:
            raise IndexFormatError(f"index {self.path} is damaged: {exc}") from exc
        n, dim = self.manifest["counts"]["sentences"], self.manifest["model"]["dim"]
        if self.embeddings.shape != (n, dim) or len(self.tokens) != n or self.doc_offsets[-1] != n:
            raise IndexFormatError(
                f"index {self.path} is inconsistent: manifest says {n} x {dim}, embeddings are "
                f"{self.embeddings.shape}, tokens {len(self.tokens)}, documents end at "
                f"{int(self.doc_offsets[-1])}"
            )
        self._manifest_bytes = (base / MANIFEST_NAME).read_bytes()
        self.store = TextStore(base / STORE)
        faiss_fd = os.open(base / FAISS, os.O_RDONLY)
        weakref.finalize(self, os.close, faiss_fd)
        self._faiss_path = Path(f"/proc/self/fd/{faiss_fd}") if base != self.path \
            else self.path / FAISS

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
        return hashlib.sha256(self._manifest_bytes).hexdigest()

    def segments(self, size: int | None = None) -> np.ndarray:
        """CSR offsets of segments over sentence rows (the index's segment size unless given)."""
        return segment_offsets(self.doc_offsets, size or self.segment_size)

    def segment_docs(self, seg_offsets: np.ndarray) -> np.ndarray:
        return segment_docs(self.doc_offsets, seg_offsets)

    @cached_property
    def faiss(self):
        from .faiss_index import read_faiss_index

        index = read_faiss_index(self._faiss_path)
        if index.ntotal != self.n_sentences:
            raise IndexFormatError(
                f"index {self.path}: FAISS holds {index.ntotal} rows, embeddings {self.n_sentences}"
            )
        return index

    def search(self, queries: np.ndarray, k: int, nprobe: int | None = None,
               ef_search: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-`k` corpus rows per query (inner product): candidates from the FAISS index,
        rescored from the stored embeddings when it is approximate. `nprobe` / `ef_search`
        override the recorded default of an IVF / HNSW index."""
        from .faiss_index import knn_search

        return knn_search(self.faiss, self.embeddings, queries, k, self.manifest.get("faiss", {}),
                          nprobe=nprobe, ef_search=ef_search)

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

    def load_encoder(self, model: str | None = None, device: str = "auto",
                     backend: str = "auto") -> Encoder:
        """The index's own model (or `model`, which must have the same weights), checked.

        `backend="auto"` embeds with the backend the index was built with (the same embedding
        function for corpus and task) where the device allows it, else the device's default.
        """
        from .encoder import load_encoder, pick_device

        recorded = self.manifest["model"]
        spec = model if model is not None else (recorded.get("source") or recorded["name"])
        if backend == "auto":
            built = self.manifest.get("build", {}).get("backend", "torch")
            on_cuda = pick_device(device).startswith("cuda")
            backend = "auto" if on_cuda and built.startswith("onnx") else built
        try:
            encoder = load_encoder(spec, device=device, backend=backend)
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
