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

from tapt.errors import IndexFormatError, InputError, ModelMismatchError

from . import integrity
from .encoder import Encoder, model_differences
from .identity import generation_mismatch
from .manifest import (DOCS, EMBEDDINGS, FAISS, INDEX_FORMAT_VERSION, LMDB_DATA, MANIFEST_NAME,
                       STORE, TOKENS, read_index_manifest)
from .splitter import segment_docs, segment_offsets
from .store import TextStore, damaged

log = logging.getLogger(__name__)

_PROC_FD = Path("/proc/self/fd")


class Index:
    """A built index: manifest, memory-mapped embeddings, document offsets, text store, FAISS.

    Opening checks the index before it can answer (see `integrity`): a damaged or inconsistent
    index raises IndexFormatError naming what is damaged and what to run.

    Args:
        path: The index directory.
        versions: Format versions accepted (`tapt index upgrade` also opens version 1).
        check_faiss: Refuse a missing, cut or (by checksum) damaged `index.faiss` on open;
            `tapt index repair`, which replaces it, opens without.
    """

    def __init__(self, path: str | Path, versions: tuple[int, ...] = (INDEX_FORMAT_VERSION,),
                 check_faiss: bool = True) -> None:
        self.path = Path(path)
        self._versions = tuple(versions)
        self._check_faiss = check_faiss
        read_index_manifest(self.path, self._versions)  # friendly errors before anything else
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
                    raise damaged(self.path, str(exc)) from exc
                # `tapt index add` swapped in a new generation while we opened this one: retry
        raise IndexFormatError(f"index {self.path} kept changing while it was being opened")

    def _open_snapshot(self, dir_fd: int) -> None:
        """Open every file through one directory handle, so all of them come from one generation.

        `tapt index add` replaces the directory atomically; a reader that opened the old one keeps
        reading it (FAISS through an open file handle, even after the old files are removed).
        """
        base = Path(f"/proc/self/fd/{dir_fd}") if _PROC_FD.is_dir() else self.path
        label = self.path
        self.manifest: dict[str, Any] = read_index_manifest(base, self._versions, label=label)
        self._manifest_bytes = (base / MANIFEST_NAME).read_bytes()
        faiss_files = (FAISS,) if self._check_faiss else ()
        for name in (EMBEDDINGS, TOKENS, DOCS, *faiss_files):
            if not (base / name).is_file():
                fix = (f"tapt index repair {label} (rebuilds it from the stored embeddings)"
                       if name == FAISS else f"tapt index verify {label}")
                raise IndexFormatError(f"index {label} is incomplete: {name} is missing; run "
                                       f"{fix}")
        try:
            n, dim = int(self.manifest["counts"]["sentences"]), int(self.manifest["model"]["dim"])
            documents = int(self.manifest["counts"]["documents"])
            emb_dtype = (self.manifest.get("files", {}).get("embeddings") or {}).get(
                "dtype", "float32")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise damaged(label, f"{MANIFEST_NAME} lacks its counts or model ({exc})") from exc
        arrays = {}
        for name in (EMBEDDINGS, TOKENS, DOCS):
            try:
                arrays[name] = np.load(base / name, mmap_mode="r", allow_pickle=False)
            except FileNotFoundError:
                raise
            except Exception as exc:  # noqa: BLE001 - numpy's header parser raises many kinds
                raise damaged(label, f"{name} cannot be read ({type(exc).__name__}: "
                                     f"{str(exc)[:200]})") from exc
        integrity.check_npy(arrays[EMBEDDINGS], base / EMBEDDINGS, EMBEDDINGS, label, emb_dtype,
                            (n, dim))
        integrity.check_npy(arrays[TOKENS], base / TOKENS, TOKENS, label, np.int32, (n,))
        integrity.check_npy(arrays[DOCS], base / DOCS, DOCS, label, np.int64, (documents + 1,))
        checksums = self.manifest.get("checksums") or {}
        if self._check_faiss:
            integrity.check_faiss_file((base / FAISS).stat().st_size, self.manifest, label)
        for name in (DOCS, TOKENS, EMBEDDINGS, LMDB_DATA, *faiss_files):
            if (base / name).is_file():
                integrity.check_checksum(base / name, checksums.get(name), name, label,
                                         force=name in (DOCS, TOKENS))
        self.embeddings: np.ndarray = arrays[EMBEDDINGS]
        self.tokens: np.ndarray = arrays[TOKENS]
        self.doc_offsets: np.ndarray = np.array(arrays[DOCS])
        integrity.check_offsets(self.doc_offsets, n, documents, label)
        integrity.check_tokens(self.tokens, label)
        self.store = TextStore(base / STORE, checksummed=self.format_version >= 2, label=label)
        self._faiss_fd: int | None = None  # (missing only when opened without check_faiss)
        if (base / FAISS).is_file():
            self._faiss_fd = os.open(base / FAISS, os.O_RDONLY)
            weakref.finalize(self, os.close, self._faiss_fd)
        self._faiss_path = Path(f"/proc/self/fd/{self._faiss_fd}") if base != self.path \
            else self.path / FAISS

    @property
    def format_version(self) -> int:
        return int(self.manifest["format_version"])

    @property
    def generation(self) -> int:
        return int(self.manifest.get("generation", 1))

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
        """The FAISS index, checked before use (its length and checksum on open): its header and
        stored ids."""
        from .faiss_index import read_faiss_index

        if self._faiss_fd is None:
            raise IndexFormatError(f"index {self.path} is incomplete: {FAISS} is missing; run "
                                   f"tapt index repair {self.path} (rebuilds it from the stored "
                                   "embeddings)")
        integrity.check_faiss_file(os.fstat(self._faiss_fd).st_size, self.manifest, self.path)
        try:
            index = read_faiss_index(self._faiss_path)
        except (RuntimeError, MemoryError) as exc:
            first = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ""
            raise damaged(self.path, f"{FAISS} cannot be read ({first}); tapt index repair "
                                     "rebuilds it from the stored embeddings") from exc
        integrity.check_faiss_index(index, self.n_sentences, self.dim, self.path)
        return index

    def search(self, queries: np.ndarray, k: int, nprobe: int | None = None,
               ef_search: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-`k` corpus rows per query (inner product): candidates from the FAISS index,
        rescored from the stored embeddings when it is approximate. `nprobe` / `ef_search`
        override the recorded default of an IVF / HNSW index."""
        from .faiss_index import knn_search

        return knn_search(self.faiss, self.embeddings, queries, k, self.manifest.get("faiss", {}),
                          nprobe=nprobe, ef_search=ef_search, label=self.path)

    def check_encoder(self, encoder: Encoder) -> None:
        """Refuse a model other than the one the index was built with: its full fingerprint
        (weights, module configs, tokenizer, maximum length) must match the manifest's."""
        model = self.manifest["model"]
        diffs = model_differences(model, encoder)
        if diffs:
            raise ModelMismatchError(
                f"model {encoder.name} is not the model index {self.path} was built with "
                f"({model['name']}): it has {'; '.join(diffs)}")

    def identity(self) -> dict[str, Any]:
        """What a selection records to name this exact generation of the index."""
        return {"path": str(self.path), "uuid": self.uuid,
                "manifest_sha256": self.manifest_sha256, "model": self.manifest["model"]["name"],
                "rows": self.n_sentences, "generation": self.generation}

    def check_selection(self, selection: str | Path, recorded: dict[str, Any]) -> None:
        """Refuse a selection made from another index, or another generation of this one."""
        current = {**self.identity(), "same_content_as": self.manifest.get("same_content_as")}
        problem = generation_mismatch(recorded, current)
        if problem:
            raise InputError(f"{selection} {problem}")

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
                f"{exc}; index {self.path} was built with {recorded['name']}: pass `model` with "
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
