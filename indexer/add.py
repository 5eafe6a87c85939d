"""`tapt index add`: append new documents to an index, skipping documents it already holds.

The add works on a copy of the index's files in a hidden sibling directory (`.NAME.adding`), with
the same committed windows as a build (see `checkpoint`), so a killed add resumes. When it is
complete the copy and the index are exchanged in one atomic rename (`renameat2(RENAME_EXCHANGE)`
on Linux): a reader sees the old index or the new one, never a mix, and existing ids never change
(new sentences get the next ids). The copy costs one pass over the index's files per add.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

import lmdb
import numpy as np

from . import checkpoint
from .build import DOCS, EMBEDDINGS, STORE, TOKENS, BuildConfig, build_into, scan_corpus
from .encoder import Encoder
from tapt.errors import InputError
from .index import Index
from tapt.util.files import write_json_atomic
from tapt.util.versions import utc_now

from .manifest import MANIFEST_NAME
from .reader import InputSpec
from .store import key

log = logging.getLogger(__name__)

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def doc_hash(sentences: Iterable[str]) -> bytes:
    """Identity of a document's content: its sentences, in order."""
    return hashlib.sha256("\n".join(sentences).encode("utf-8")).digest()[:16]


def _existing_hashes(work: Path, rows: int, docs: int) -> set[bytes]:
    """Hashes of the committed documents in `work` (read before its store is opened for writing)."""
    header = 128  # NpyAppender's fixed header; the header itself may be stale after a kill
    offsets = np.fromfile(work / DOCS, dtype=np.int64, count=docs + 1, offset=header)
    env = lmdb.open(str(work / STORE), readonly=True, lock=False, subdir=True, max_dbs=0)
    hashes: set[bytes] = set()
    try:
        with env.begin(buffers=True) as txn:
            for d in range(docs):
                texts = []
                for sid in range(int(offsets[d]), int(offsets[d + 1])):
                    texts.append(json.loads(bytes(txn.get(key(sid))))["text"])
                hashes.add(doc_hash(texts))
    finally:
        env.close()
    if offsets[-1] != rows:
        raise InputError(f"{work} is inconsistent ({offsets[-1]} != {rows} rows): add --restart")
    return hashes


def _exchange(a: Path, b: Path) -> None:
    """Swap two directories atomically where the kernel can, else with two renames."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b),
                          _RENAME_EXCHANGE) == 0:
            return
    except (AttributeError, OSError):
        pass
    aside = b.parent / f".{b.name}.old-{os.getpid()}"
    os.replace(b, aside)
    os.replace(a, b)
    os.replace(aside, a)


def _copy_index(index: Index, work: Path) -> None:
    for name in (EMBEDDINGS, TOKENS, DOCS):
        shutil.copyfile(index.path / name, work / name)
    (work / STORE).mkdir()
    shutil.copyfile(index.path / STORE / "data.mdb", work / STORE / "data.mdb")


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
    index.check_encoder(encoder)
    old = index.manifest
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
    wanted = checkpoint.fingerprint({
        "inputs": scan.identity(),
        "index": index.manifest_sha256, "batch_size": config.batch_size,
        "read": [config.text_field, config.doc_field, config.text_docs, config.input_format,
                 config.hf_split],
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
            seen = _existing_hashes(work, resumed.rows, resumed.docs)

            def duplicate(sentences: list[str]) -> bool:
                h = doc_hash(sentences)
                if h in seen:
                    return True
                seen.add(h)
                return False

            manifest = build_into(work, scan, inputs, encoder, config, resumed, duplicate)
            final = checkpoint.read_progress(work)
            manifest = _merge_manifest(old, manifest, scan, inputs, final)
            write_json_atomic(work / MANIFEST_NAME, manifest)
            _exchange(work, index.path)
        except BaseException:
            committed = checkpoint.read_progress(work) if work.exists() else None
            if committed is not None and committed.rows > committed.base_rows:
                log.warning("kept this add's %s committed sentences in %s: run the same command "
                            "again to resume", f"{committed.rows - committed.base_rows:,}", work)
            else:
                shutil.rmtree(work, ignore_errors=True)
            raise
        shutil.rmtree(work, ignore_errors=True)  # now the previous generation
        (index.path / checkpoint.PROGRESS).unlink(missing_ok=True)
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
