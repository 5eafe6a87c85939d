"""Open an index directory: the one loader the retriever (and `tapt index info`) reads through.

An index of format 3 is a set of shards (see `manifest`); `Index` shows them as one: global row
ids over `embeddings`, `tokens`, `codes` (row views), `store` (a sharded text store), `faiss`
(every part searched, results merged) and `doc_offsets` (global). `shards` lists each shard's
files and offsets for code that works shard by shard.
"""

from __future__ import annotations

import hashlib
import logging
import os
import weakref
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tapt.errors import IndexFormatError, InputError
from tapt.indexer.encoding.index_model import IndexModel
from tapt.indexer.reading.splitter import segment_docs, segment_offsets
from tapt.indexer.store import integrity
from tapt.indexer.store.identity import generation_mismatch
from tapt.indexer.store.manifest import (
    FAISS,
    MANIFEST_NAME,
    QUANTIZER,
    SHARDED_VERSIONS,
    SHARDS,
    VOCAB,
    read_index_manifest,
)
from tapt.indexer.store.shard_open import Shard, open_shard  # noqa: F401 - Shard: where callers look
from tapt.indexer.store.shards import RowView, ShardedStore, StoreShard
from tapt.indexer.store.text_store import damaged
from tapt.util import spill
from tapt.util.checks import path_text
from tapt.util.files import read_regular

log = logging.getLogger(__name__)

_PROC_FD = Path("/proc/self/fd")


class Index(IndexModel):
    """A built index: manifest, its shards' memory-mapped embeddings, document offsets, text
    stores and FAISS parts, seen as one.

    Opening checks the index before it can answer (see `integrity`): a damaged or inconsistent
    index raises IndexFormatError naming what is damaged and what to run.

    Args:
        path: The index directory.
        versions: Format versions accepted (`tapt index upgrade`, `info` and `verify` also open
            formats 1 and 2, as one shard whose files lie at the top).
        check_faiss: Refuse a missing, cut or (by checksum) damaged `index.faiss` on open;
            `tapt index repair`, which replaces it, opens without.
    """

    _quantizer: tuple[Path, int, str] | None = None     # (path, lists, name): `shared_quantizer`

    def __init__(self, path: str | Path, versions: tuple[int, ...] = SHARDED_VERSIONS,
                 check_faiss: bool = True) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise InputError(f"an index is opened from a path, not {type(path).__name__}",
                             param="path")
        self.path = Path(path_text(path, "path"))
        self._versions = tuple(versions)
        self._check_faiss = check_faiss
        # friendly errors before anything else
        read_index_manifest(self.path, self._versions, rebuild_hint=True)
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
                    shown = str(exc).replace(f"{_PROC_FD}/{dir_fd}", str(self.path))
                    if isinstance(exc, PermissionError) and exc.filename:
                        shown = str(exc.filename).replace(f"{_PROC_FD}/{dir_fd}/", "")
                    raise damaged(self.path, shown, exc) from exc
                # `tapt index add` swapped in a new generation while we opened this one: retry
        raise IndexFormatError(f"index {self.path} kept changing while it was being opened")

    def _open_snapshot(self, dir_fd: int) -> None:
        """Open every file through one directory handle, so all of them come from one generation.

        `tapt index add` replaces the directory atomically; a reader that opened the old one keeps
        reading it (FAISS through an open file handle, even after the old files are removed).
        """
        base, label, dim, emb_dtype, entries = self._read_top(dir_fd)
        self.shards: list[Shard] = []
        row_at = doc_at = 0
        with integrity.opening():
            for entry in entries:
                shard = open_shard(self, base, entry, dim, emb_dtype, label)
                if shard.row_offset != row_at or shard.doc_offset != doc_at:
                    raise damaged(label, f"{MANIFEST_NAME}: shard {shard.name} starts at row "
                                         f"{shard.row_offset:,} / document "
                                         f"{shard.doc_offset:,}, not {row_at:,} / {doc_at:,}")
                row_at += shard.rows
                doc_at += shard.documents
                self.shards.append(shard)
            self._check_counts(label, row_at, doc_at)
            if self.format_version >= 3:
                self._check_vocabulary(base, label)
                self._check_quantizer(base, label)
        self.embeddings = RowView([s.embeddings for s in self.shards])
        self.tokens = RowView([s.tokens for s in self.shards])
        self.row_offsets = self.embeddings.offsets
        codes = [s.codes for s in self.shards]
        self.codes: RowView | None = RowView(codes) if all(c is not None for c in codes) \
            else None
        self.store = (ShardedStore([StoreShard(s.store, s.row_offset, s.doc_offset, s.name)
                                    for s in self.shards], label,
                                   rows=sum(s.rows for s in self.shards)))

    def _read_top(self, dir_fd: int) -> tuple[Path, Path, int, str, list[dict[str, Any]]]:
        """The top manifest through the directory handle (kept as `manifest`): the folder to
        read from, the name errors give, the rows' dimension and dtype, and the shard entries
        (formats 1 and 2: the top directory as one shard)."""
        base = Path(f"/proc/self/fd/{dir_fd}") if _PROC_FD.is_dir() else self.path
        label = self.path
        self.manifest: dict[str, Any] = read_index_manifest(base, self._versions, label=label,
                                                            rebuild_hint=True)
        self._manifest_bytes = read_regular(base / MANIFEST_NAME)
        self._base = base
        try:
            dim = int(self.manifest["model"]["dim"])
            emb_dtype = (self.manifest.get("files", {}).get("embeddings") or {}).get(
                "dtype", "float32")
            entries = (self.manifest["shards"] if self.format_version >= 3 else
                       [{"name": "", "row_offset": 0, "rows": self.manifest["counts"]["sentences"],
                         "doc_offset": 0, "documents": self.manifest["counts"]["documents"]}])
            if not isinstance(entries, list) or not entries:
                raise TypeError("no shards listed")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise damaged(label, f"{MANIFEST_NAME} lacks its counts, shards or model ({exc})"
                          ) from exc
        return base, label, dim, emb_dtype, entries

    def _check_counts(self, label: Path, sentences: int, documents: int) -> None:
        """The top manifest's counts are those its shards add up to."""
        counts = self.manifest.get("counts") or {}
        if counts.get("sentences") != sentences or counts.get("documents") != documents:
            raise damaged(label, f"{MANIFEST_NAME}: its shards hold {sentences:,} sentences in "
                                 f"{documents:,} documents, its counts say "
                                 f"{counts.get('sentences')} in {counts.get('documents')}")

    def _check_vocabulary(self, base: Path, label: Path) -> None:
        """The top-level vocabulary (format 3; read by moore-lewis and fused, and merged by
        `index add`): its header, its length against the manifest, and its checksum by the
        policy of every other file."""
        recorded = self.manifest.get("checksums") or {}
        self.vocabulary: np.ndarray | None = None
        if VOCAB not in recorded and not (base / VOCAB).is_file():
            return                     # no vocabulary recorded or stored: open_lexicon says so
        words = (self.manifest.get("lexical") or {}).get("vocabulary")
        integrity.check_npy_file(base / VOCAB, VOCAB, label, np.uint64,
                                 (words if isinstance(words, int) else None,))
        integrity.check_checksum(base / VOCAB, recorded.get(VOCAB), VOCAB, label)
        with integrity.array_errors(VOCAB, label):
            self.vocabulary = np.load(base / VOCAB, mmap_mode="r", allow_pickle=False)

    def _check_quantizer(self, base: Path, label: Path) -> None:
        """The shared coarse quantizer an index of format 4 records (`faiss.quantizer`): a
        regular file of the recorded length, its checksum by the policy of every other file;
        read on the first search (`shared_quantizer`)."""
        record = (self.manifest.get("faiss") or {}).get("quantizer")
        self._quantizer = None
        if not record:
            return
        try:
            name, lists = str(record["file"]), int(record["lists"])
        except (KeyError, TypeError, ValueError) as exc:
            raise damaged(label, f"{MANIFEST_NAME}: its FAISS quantizer record lacks {exc}"
                          ) from exc
        if name != QUANTIZER:
            raise damaged(label, f"{MANIFEST_NAME} names the FAISS quantizer {name!r}")
        self._quantizer = (base / QUANTIZER, lists, QUANTIZER)
        if not self._check_faiss:
            return
        path = base / QUANTIZER
        if not path.is_file():
            what = "is not a regular file" if os.path.lexists(path) else "is missing"
            raise IndexFormatError(f"index {label} is incomplete: {QUANTIZER} {what}; run "
                                   f"tapt index repair {label} (trains it again)")
        integrity.check_faiss_file(path.stat().st_size, {"faiss": record}, label, QUANTIZER)
        integrity.check_checksum(path, (self.manifest.get("checksums") or {}).get(QUANTIZER),
                                 QUANTIZER, label)

    @cached_property
    def shared_quantizer(self):
        """The IVF coarse quantizer every FAISS part shares, read and checked once (None where
        the index stores one in each part, or has no IVF parts)."""
        from tapt.indexer.ann.faiss_index import read_quantizer

        if self._quantizer is None:
            return None
        path, lists, name = self._quantizer
        return read_quantizer(path, lists, self.dim, self.path, name)

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

    @cached_property
    def doc_offsets(self) -> np.ndarray:
        """CSR offsets of every document over the global sentence rows (int64, built on first
        use: 8 bytes a document, on a scratch file when large, `util.spill`; `segments` and
        `docs_of_rows` work from the shards' own memory-mapped offsets instead)."""
        out = spill.empty(sum(len(s.docs) - 1 for s in self.shards) + 1, np.int64)
        out[0], at = 0, 1
        for s in self.shards:
            out[at:at + len(s.docs) - 1] = s.docs[1:]
            out[at:at + len(s.docs) - 1] += s.row_offset
            at += len(s.docs) - 1
        return out

    def segments(self, size: int | None = None) -> np.ndarray:
        """CSR offsets of segments over sentence rows (the index's segment size unless given).

        Cut shard by shard from each shard's memory-mapped document offsets (segments never
        cross documents, nor documents shards) into the one result: the offsets of
        `segment_offsets(doc_offsets, size)` without a global copy of the document offsets."""
        size = size or self.segment_size
        if size < 1:
            raise ValueError("segment size must be >= 1")
        counts = [int(np.sum((np.diff(s.docs) + size - 1) // size)) for s in self.shards]
        out = spill.empty(sum(counts) + 1, np.int64)      # on a scratch file when large
        at = 0
        for shard, count in zip(self.shards, counts):
            part = segment_offsets(shard.docs, size)
            out[at:at + count] = part[:-1]
            out[at:at + count] += shard.row_offset
            at += count
        out[-1] = self.n_sentences
        return out

    def docs_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """The global document of each sentence row (as `reading.splitter.docs_of_rows` of
        `doc_offsets`), from the shards' own document offsets.

        Args:
            rows: Global sentence rows.

        Returns:
            Their documents' global indices (int64).
        """
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty(rows.shape, dtype=np.int64)
        shard_of = np.searchsorted(np.asarray(self.row_offsets), rows, side="right") - 1
        for i in np.unique(shard_of):
            shard = self.shards[int(i)]
            where = shard_of == i
            out[where] = (np.searchsorted(shard.docs, rows[where] - shard.row_offset,
                                          side="right") - 1 + shard.doc_offset)
        return out

    def segment_docs(self, seg_offsets: np.ndarray) -> np.ndarray:
        return segment_docs(self.doc_offsets, seg_offsets)

    @cached_property
    def faiss(self):
        """The FAISS parts of every shard as one searchable index (`ShardedFaiss`), each checked
        before use (its length and checksum on open): its header and stored ids. Holds every
        part; `search` of several shards loads one part at a time instead (`PartByPart`),
        unless this was asked for first."""
        from tapt.indexer.ann.faiss_index import ShardedFaiss

        return ShardedFaiss([self.faiss_part(i) for i in range(len(self.shards))],
                            [s.row_offset for s in self.shards], self._global_part_ids)

    @property
    def _global_part_ids(self) -> bool:
        return self.manifest.get("faiss", {}).get("part_ids") == "global"

    def faiss_part(self, i: int):
        """Shard `i`'s FAISS part, read (memory-mapped where its type allows) and checked: its
        length, header and stored ids.

        Args:
            i: The shard's position in `shards`.

        Returns:
            The FAISS index of that shard's rows.

        Raises:
            IndexFormatError: the part is missing or damaged (naming `tapt index repair`).
        """
        from tapt.indexer.ann.faiss_index import read_faiss_index, with_quantizer

        shard = self.shards[i]
        where = shard.extra["where"] + FAISS
        if shard.faiss_fd is None and not (shard.directory / FAISS).is_file():
            raise IndexFormatError(f"index {self.path} is incomplete: {where} is missing; "
                                   f"run tapt index repair {self.path} (rebuilds it from the "
                                   "stored embeddings)")
        size = (os.fstat(shard.faiss_fd).st_size if shard.faiss_fd is not None
                else (shard.directory / FAISS).stat().st_size)
        integrity.check_faiss_file(size, {"faiss": shard.extra["faiss"]}, self.path, where)
        try:
            part = read_faiss_index(shard.faiss_path)
        except (RuntimeError, MemoryError) as exc:
            first = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ""
            raise damaged(self.path, f"{where} cannot be read ({first}); tapt index repair "
                                     "rebuilds it from the stored embeddings") from exc
        integrity.check_faiss_index(part, shard.rows, self.dim, self.path,
                                    shard.row_offset if self._global_part_ids else 0, where)
        return with_quantizer(part, self.shared_quantizer, self.path, where)

    @cached_property
    def lexicon(self):
        """The stored lexical ids of every shard (`lexical.Lexicon`), checked on first use."""
        from tapt.indexer.reading.lexical import open_lexicon

        return open_lexicon(self)

    def score_rows(self, scorer: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """`scorer` of every stored embedding (a row scorer walks the rows in blocks of the
        global grid, `retriever.scoring.arrays.blocks`). A served index has the actors that hold the
        rows run it, with the same scores."""
        return np.asarray(scorer(self.embeddings))

    def score_codes(self, scorer: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """`scorer` of every row's int8 codes (`codes`; the index must have them), as
        `score_rows` of the embeddings."""
        if self.codes is None:
            raise InputError(f"index {self.path} has no int8 codes: run tapt index reindex "
                             f"{self.path} --codes int8")
        return np.asarray(scorer(self.codes))

    def lexicon_scores(self, score_shard: Callable[[Any], np.ndarray]) -> np.ndarray:
        """One float32 score per sentence from its shard's stored lexical ids: `score_shard`
        (a function of one `lexical.ShardLexicon`) run on every shard, in row order. A served
        index runs it in the actors that hold the shards."""
        return self.lexicon.map_shards(score_shard)

    def search(self, queries: np.ndarray, k: int, nprobe: int | None = None,
               ef_search: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-`k` corpus rows per query (inner product): candidates from the FAISS index,
        rescored from the stored embeddings when it is approximate. `nprobe` / `ef_search`
        override the recorded default of an IVF / HNSW index."""
        from tapt.indexer.ann.faiss_index import PartByPart, knn_search

        # the parts already held (`faiss` asked for, a served index's) or the only one (kept
        # for the next search), else one at a time: the driver holds one shard's part, never
        # every shard's (a search of several shards reads each part again)
        parts = (self.faiss if "faiss" in self.__dict__ or len(self.shards) == 1 else PartByPart(
            self.faiss_part, [s.row_offset for s in self.shards], self._global_part_ids))
        return knn_search(parts, self.embeddings, queries, k, self.manifest.get("faiss", {}),
                          nprobe=nprobe, ef_search=ef_search, label=self.path)

    def identity(self) -> dict[str, Any]:
        """What a selection records to name this exact generation of the index (its path
        absolute: the selection is read again from other working directories; two blocks are
        compared by content, `identity.same_snapshot`, never by path)."""
        return {"path": os.path.abspath(self.path), "uuid": self.uuid,
                "manifest_sha256": self.manifest_sha256, "model": self.manifest["model"]["name"],
                "rows": self.n_sentences, "generation": self.generation}

    def check_selection(self, selection: str | Path, recorded: dict[str, Any]) -> None:
        """Refuse a selection made from another index, or another generation of this one."""
        current = {**self.identity(), "same_content_as": self.manifest.get("same_content_as")}
        problem = generation_mismatch(recorded, current)
        if problem:
            raise InputError(f"{selection} {problem}")

    def disk_bytes(self) -> dict[str, int]:
        """Bytes per file name, summed over the shards (`text.lmdb` counts its directory)."""
        sizes: dict[str, int] = {}

        def add(directory: Path) -> None:
            for item in sorted(directory.iterdir()):
                if item.name == SHARDS and item.is_dir():
                    for shard in sorted(item.iterdir()):
                        if shard.is_dir():
                            add(shard)
                    continue
                size = (sum(f.stat().st_size for f in item.rglob("*") if f.is_file())
                        if item.is_dir() else item.stat().st_size)
                sizes[item.name] = sizes.get(item.name, 0) + size

        try:
            add(self.path)
        except OSError as exc:
            raise IndexFormatError(f"index {self.path} cannot be listed any more "
                                   f"({exc.strerror or exc}): it was moved, deleted or made "
                                   "unreadable after it was opened; open it again") from exc
        return sizes
