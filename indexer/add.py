"""`tapt index add`: append new documents to an index, skipping documents it already holds.

The add works on a copy of the index's files in a hidden sibling directory (`.NAME.adding`), with
the same committed windows as a build (see `checkpoint`), so a killed add resumes. When it is
complete the copy and the index are exchanged in one atomic rename (`renameat2(RENAME_EXCHANGE)`
on Linux): a reader sees the old index or the new one, never a mix, and existing ids never change
(new sentences get the next ids). The copy costs one pass over the index's files per add.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import shutil
import unicodedata
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from tapt.errors import InputError
from tapt.util.files import storage_error
from tapt.util.safety import check_output, is_tapt_index
from tapt.util.versions import utc_now

from . import checkpoint
from .build import BuildConfig, build_into, corpus_paths, scan_corpus
from .encoder import Encoder
from .generations import exchange
from .index import Index
from .integrity import check_all_checksums, remember_index
from .manifest import (DOCS, EMBEDDINGS, INDEX_FORMAT_VERSION, LMDB_DATA, STORE, TOKENS,
                       write_index_manifest)
from .reader import CorpusScan, InputSpec
from .store import TextStore, close_reader

log = logging.getLogger(__name__)


# Invisible characters that make two renderings of one text differ byte for byte.
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))


def normalise_for_identity(text: str) -> str:
    """The form two texts are compared in: Unicode NFC, without zero-width characters and
    soft hyphens. Only for duplicate detection; stored text stays as the corpus gave it."""
    return unicodedata.normalize("NFC", text).translate(_ZERO_WIDTH)


def doc_hash(sentences: Iterable[str]) -> bytes:
    """Identity of a document's content: its sentences, in order, normalised (NFC, no
    zero-width characters), so Unicode variants of one document are one document."""
    joined = "\n".join(normalise_for_identity(s) for s in sentences)
    return hashlib.sha256(joined.encode("utf-8")).digest()[:16]


def _existing_hashes(work: Path, rows: int, docs: int, label: Path) -> set[bytes]:
    """Hashes of the committed documents in `work` (read before its store is opened for writing)."""
    header = 128  # NpyAppender's fixed header; the header itself may be stale after a kill
    offsets = np.fromfile(work / DOCS, dtype=np.int64, count=docs + 1, offset=header)
    if len(offsets) != docs + 1 or offsets[-1] != rows:
        raise InputError(f"{work} is inconsistent ({len(offsets) - 1} documents ending at row "
                         f"{offsets[-1] if len(offsets) else 0}, {rows} rows committed): pass "
                         "`restart`")
    hashes: set[bytes] = set()
    try:
        texts = (r["text"] for r in TextStore(work / STORE, label=label).iter_records(range(rows)))
        for d in range(docs):
            hashes.add(doc_hash(itertools.islice(texts, int(offsets[d + 1] - offsets[d]))))
    finally:
        close_reader(work / STORE)
    return hashes


def _copy_index(index: Index, work: Path) -> None:
    for name in (EMBEDDINGS, TOKENS, DOCS):
        shutil.copyfile(index.path / name, work / name)
    (work / STORE).mkdir()
    shutil.copyfile(index.path / LMDB_DATA, work / LMDB_DATA)


def check_add_inputs(index_path: Path, inputs: list[InputSpec] | CorpusScan) -> None:
    """`index add` writes the index: no local input may be it, lie inside it, or contain it."""
    check_output(index_path, what="index", inputs=corpus_paths(inputs), directory=True,
                 ours=is_tapt_index, param="idx")


def add_to_index(path: str | Path, inputs: list[InputSpec], encoder: Encoder,
                 batch_size: int | None = None, restart: bool = False,
                 progress: bool = True, *, text_field: str | None = None,
                 doc_field: str | None = None, text_docs: str | None = None,
                 input_format: str | None = None, hf_split: str | None = None,
                 strict: bool = False) -> dict[str, Any]:
    """Append the documents of `inputs` that the index does not hold yet; returns the manifest.

    The reading options (`text_field`, `doc_field`, `text_docs`) default to the index's; the
    others are as for a build (`tapt.indexer.reader.scan_inputs`).
    """
    index = Index(path)
    check_add_inputs(index.path, list(inputs))
    index.check_encoder(encoder)
    old = index.manifest
    # The add copies the index and records new checksums: damage copied now would be sealed as
    # sound, so every file is checked first (one more read of what the copy reads anyway).
    check_all_checksums(index.path, old, index.path)
    ingest = old["ingest"]
    config = BuildConfig(segment_size=old["segment_size"],
                         batch_size=batch_size or old["build"].get("batch_size", 64),
                         window=old["build"].get("window", 4096),
                         split=ingest["split_sentences"],
                         text_field=text_field or ingest["text_field"],
                         doc_field=ingest["doc_field"] if doc_field is None else doc_field,
                         text_docs=text_docs or ingest["text_docs"], input_format=input_format,
                         hf_split=hf_split, strict=strict,
                         progress=progress, **_faiss_request(old.get("faiss", {})),
                         embedding_dtype=old["files"]["embeddings"].get("dtype", "float32"))
    scan = scan_corpus(inputs, config)
    check_add_inputs(index.path, scan)
    wanted = checkpoint.fingerprint({
        "inputs": scan.identity(),
        "index": index.manifest_sha256, "batch_size": config.batch_size,
        "read": [config.text_field, config.doc_field, config.text_docs, config.input_format,
                 config.hf_split],
        "store_format": INDEX_FORMAT_VERSION,
    })
    with checkpoint.BuildLock(index.path):
        work, resumed = checkpoint.prepare_work_dir(index.path, wanted, restart, kind="adding")
        try:
            if resumed is None:
                _copy_index(index, work)
                counts = old["counts"]
                resumed = checkpoint.Progress(
                    wanted, base_rows=index.n_sentences, rows=index.n_sentences,
                    docs=counts["documents"], tokens=counts["tokens"],
                    truncated=counts["truncated_sentences"], sessions=0)
                checkpoint.commit(work, resumed)
            seen = _existing_hashes(work, resumed.rows, resumed.docs, index.path)

            def duplicate(sentences: list[str]) -> bool:
                h = doc_hash(sentences)
                if h in seen:
                    return True
                seen.add(h)
                return False

            manifest = build_into(work, scan, inputs, encoder, config, resumed, duplicate)
            final = checkpoint.read_progress(work)
            manifest = write_index_manifest(work, _merge_manifest(old, manifest, scan, inputs,
                                                                  final))
            exchange(work, index.path)
        except BaseException as exc:
            committed = checkpoint.read_progress(work) if work.exists() else None
            if committed is not None and committed.rows > committed.base_rows:
                log.warning("kept this add's %s committed sentences in %s: run the same command "
                            "again to resume", f"{committed.rows - committed.base_rows:,}", work)
            else:
                shutil.rmtree(work, ignore_errors=True)
            if isinstance(exc, OSError):
                raise storage_error(exc, work, "adding to the index in") from exc
            raise
        shutil.rmtree(work, ignore_errors=True)  # now the previous generation
        (index.path / checkpoint.PROGRESS).unlink(missing_ok=True)
        remember_index(index.path, manifest)
    return manifest


def _faiss_request(faiss_info: dict[str, Any]) -> dict[str, Any]:
    """The index type request of the index (re-applied to the grown corpus); old ones: Flat."""
    request = faiss_info.get("requested") or faiss_info.get("kind") or (
        "flat" if faiss_info.get("factory", "Flat") == "Flat" else "auto")
    out: dict[str, Any] = {"index": request,
                           "opq": bool((faiss_info.get("params") or {}).get("opq", False))}
    if faiss_info.get("memory_budget_bytes"):
        out["memory"] = int(faiss_info["memory_budget_bytes"])
    return out


def _merge_manifest(old: dict[str, Any], new: dict[str, Any], scan, inputs,
                    progress: checkpoint.Progress) -> dict[str, Any]:
    """The new manifest keeps the index's identity and history and records this add."""
    added_rows = new["counts"]["sentences"] - old["counts"]["sentences"]
    added_docs = new["counts"]["documents"] - old["counts"]["documents"]
    merged = dict(new)
    merged["uuid"], merged["created"] = old["uuid"], old["created"]
    merged["generation"] = int(old.get("generation", 1)) + 1
    merged.pop("same_content_as", None)  # new rows: earlier manifests name other content
    merged["updated"] = utc_now()
    merged["build"] = old["build"]
    merged["ingest"] = {**old["ingest"],
                        "sources": old["ingest"]["sources"] + [str(p) for p in inputs],
                        "files": old["ingest"]["files"] + scan.manifest_files()}
    merged["counts"] = {**new["counts"], "files": old["counts"]["files"] + len(scan.files),
                        "skipped_blank_records": old["counts"]["skipped_blank_records"]
                        + scan.skipped_blank}
    merged["history"] = list(old.get("history", [])) + [{
        "added": merged["updated"], "sources": [str(p) for p in inputs],
        "documents": added_docs, "sentences": added_rows,
        "duplicate_documents_skipped": progress.duplicates,
        "embed_seconds": round(progress.embed_seconds, 2), "sessions": progress.sessions,
    }]
    return merged
