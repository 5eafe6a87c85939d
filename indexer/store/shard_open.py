"""One shard of an index as opened (`Shard`) and the checks of its files on open
(`open_shard`, called by `Index` for every shard it lists)."""

from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tapt.errors import IndexFormatError
from tapt.indexer.store import integrity
from tapt.indexer.store.manifest import (
    BIGRAMS,
    CODES,
    DOC_HASHES,
    DOCS,
    EMBEDDINGS,
    FAISS,
    LEXICAL,
    LEXICAL_OFFSETS,
    LMDB_DATA,
    MANIFEST_NAME,
    SHARDS,
    STORE,
    TOKENS,
    VOCAB,
    read_shard_manifest,
)
from tapt.indexer.store.text_store import TextStore, damaged
from tapt.util.files import regular_file


@dataclass
class Shard:
    """One shard as opened: where it is, its offsets, its manifest and its arrays."""

    name: str
    directory: Path             # through the index's directory handle (one generation)
    row_offset: int
    rows: int
    doc_offset: int
    documents: int
    manifest: dict[str, Any]
    embeddings: np.ndarray
    tokens: np.ndarray
    docs: np.ndarray
    store: TextStore
    faiss_fd: int | None = None
    codes: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def faiss_path(self) -> Path:
        return Path(f"/proc/self/fd/{self.faiss_fd}") if self.faiss_fd is not None \
            else self.directory / FAISS



def open_shard(index: Any, base: Path, entry: dict[str, Any], dim: int, emb_dtype: str,
               label: Path) -> Shard:
    """One shard of `index` (an `Index` being opened) with its files checked: headers, lengths,
    offsets and checksums by the index's policy (formats 1 and 2: the top directory as one
    shard)."""
    try:
        name = str(entry["name"])
        row_offset, n = int(entry["row_offset"]), int(entry["rows"])
        doc_offset, documents = int(entry["doc_offset"]), int(entry["documents"])
    except (KeyError, TypeError, ValueError) as exc:
        raise damaged(label, f"{MANIFEST_NAME} lists a shard without its offsets ({exc})"
                      ) from exc
    if index.format_version >= 3:
        if not re.fullmatch(r"\d{6}", name):
            raise damaged(label, f"{MANIFEST_NAME} lists a shard named {name!r}")
        directory = base / SHARDS / name
        where = f"{SHARDS}/{name}/"
        manifest = read_shard_manifest(directory, label, entry.get("shard_sha256"))
        if manifest.get("rows") != n or manifest.get("documents") != documents:
            raise damaged(label, f"shard {name}: shard.json holds {manifest.get('rows')} rows "
                                 f"in {manifest.get('documents')} documents, manifest.json "
                                 f"says {n} in {documents}")
        faiss_info = manifest.get("faiss") or {}
        checksums = manifest.get("checksums") or {}
    else:
        directory, where, manifest = base, "", index.manifest
        faiss_info = index.manifest.get("faiss") or {}
        checksums = index.manifest.get("checksums") or {}
    faiss_files = (FAISS,) if index._check_faiss else ()
    for file in (EMBEDDINGS, TOKENS, DOCS, *faiss_files):
        if not (directory / file).is_file():
            fix = (f"tapt index repair {label} (rebuilds it from the stored embeddings)"
                   if file == FAISS else f"tapt index verify {label}")
            if os.path.lexists(directory / file):    # a FIFO, a device: never opened
                raise damaged(label, f"{where}{file} is not a regular file")
            raise IndexFormatError(f"index {label} is incomplete: {where}{file} is missing; "
                                   f"run {fix}")
    arrays = {}
    names = [EMBEDDINGS, TOKENS, DOCS] + ([CODES] if manifest.get("codes") and
                                          index.format_version >= 3 else [])
    for file in names:
        with integrity.array_errors(where + file, label):
            arrays[file] = np.load(regular_file(directory / file), mmap_mode="r",
                                   allow_pickle=False)
    integrity.check_npy(arrays[EMBEDDINGS], directory / EMBEDDINGS, where + EMBEDDINGS, label,
                        emb_dtype, (n, dim))
    integrity.check_npy(arrays[TOKENS], directory / TOKENS, where + TOKENS, label, np.int32,
                        (n,))
    integrity.check_npy(arrays[DOCS], directory / DOCS, where + DOCS, label, np.int64,
                        (documents + 1,))
    if CODES in arrays:
        integrity.check_npy(arrays[CODES], directory / CODES, where + CODES, label, np.int8,
                            (n, dim))
    # the files read later (lexical ids: moore-lewis, fused; document hashes: index add)
    # are checked on open too: header, length, and checksum by the same policy; and mapped
    # now, so a reader answers from the generation it opened even after another command
    # swapped in a new one and removed this one's files
    lazy, mapped = [], {}
    if index.format_version >= 3:
        for file, dtype, shape in ((DOC_HASHES, np.uint8, (documents, 16)),
                                   (VOCAB, np.uint64, (None,)),
                                   (BIGRAMS, np.int32, (None, 2)),
                                   (LEXICAL, np.int32, (None,)),
                                   (LEXICAL_OFFSETS, np.int64, (n + 1,))):
            if file in checksums or (directory / file).is_file():
                integrity.check_npy_file(directory / file, where + file, label, dtype, shape)
                with integrity.array_errors(where + file, label):
                    mapped[file] = np.load(directory / file, mmap_mode="r",
                                           allow_pickle=False)
                lazy.append(file)
    if index._check_faiss:
        integrity.check_faiss_file((directory / FAISS).stat().st_size, {"faiss": faiss_info},
                                   label, where + FAISS)
    # offsets and token counts (which cut every selection's segments) are hashed once per
    # version whatever the policy; whose content is vouched for already (a stamp: what tapt
    # wrote and checked) are not read whole again on every open
    known = {file: integrity.vouched(directory / file, checksums.get(file))
             for file in (DOCS, TOKENS)}
    for file in (DOCS, TOKENS, EMBEDDINGS, LMDB_DATA, *faiss_files, *(
            [CODES] if CODES in arrays else []), *lazy):
        if (directory / file).is_file():
            integrity.check_checksum(directory / file, checksums.get(file), where + file,
                                     label, once=file in (DOCS, TOKENS))
    docs = arrays[DOCS]      # memory-mapped, checked (kept once: no copy per shard)
    if not known[DOCS]:
        integrity.check_offsets(docs, n, documents, label, where + DOCS)
    if not known[TOKENS]:
        integrity.check_tokens(arrays[TOKENS], label, where + TOKENS)
    store = TextStore(directory / STORE, checksummed=index.format_version >= 2, label=label)
    faiss_fd = None
    # with check_faiss the file was there a moment ago: if it is gone now, the directory was
    # replaced under us (`index add`), and the OSError makes the caller retry on the new one
    if index._check_faiss or (directory / FAISS).is_file():
        faiss_fd = os.open(directory / FAISS, os.O_RDONLY)
        weakref.finalize(index, os.close, faiss_fd)
    return Shard(name or "000000", directory, row_offset, n, doc_offset, documents, manifest,
                 arrays[EMBEDDINGS], arrays[TOKENS], docs, store,
                 faiss_fd if base != index.path else None, arrays.get(CODES),
                 {"faiss": faiss_info, "checksums": checksums, "where": where,
                  "mapped": mapped})
