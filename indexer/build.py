"""`tapt index build`: corpus -> sentences -> segments -> embeddings -> FAISS + LMDB + manifest.

Everything is written into a hidden work directory beside the target that is renamed into place
only when the build has finished, so no half-written index is ever visible under its name. The
work is committed window by window (see `checkpoint`): a build that is killed, runs out of disk or
is interrupted keeps its committed windows, and the same command resumes from them.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from tqdm.auto import tqdm

from . import checkpoint
from .formats import ReadOptions
from .encoder import Encoder
from tapt.errors import InputError, StorageError
from .faiss_index import build_faiss_index
from .index_choice import DEFAULT_MEMORY, REQUESTS, choose_index, parse_memory
from tapt.util.files import sha256_file, write_json_atomic
from tapt.util.versions import library_versions, utc_now

from .manifest import INDEX_FORMAT, INDEX_FORMAT_VERSION, MANIFEST_NAME
from .npy import NpyAppender
from .reader import CorpusScan, Document, InputSpec, TextDocs, iter_documents, scan_inputs
from .readahead import read_ahead
from .splitter import SentenceSplitter, segment_offsets
from .store import TextStoreWriter

log = logging.getLogger(__name__)

EMBEDDINGS = "embeddings.npy"
TOKENS = "tokens.npy"
DOCS = "docs.npy"
STORE = "text.lmdb"
FAISS = "index.faiss"


EMBEDDING_DTYPES = ("float32", "float16")


@dataclass
class BuildConfig:
    """Options of one index build, validated on creation."""

    segment_size: int = 15
    batch_size: int = 64
    window: int = 4096
    split: bool = True
    text_field: str = "text"
    doc_field: str | None = "doc"
    text_docs: TextDocs = "auto"
    input_format: str | None = None  # read every file as this format (else by its suffix)
    hf_split: str | None = None      # split of a DatasetDict folder or Hub dataset
    strict: bool = False             # refuse folders holding files of no known format
    overwrite: bool = False
    restart: bool = False
    progress: bool = True
    index: str = "auto"             # FAISS type: auto, flat, hnsw or ivfpq (see index_choice)
    memory: str | int = DEFAULT_MEMORY  # budget for the FAISS index in RAM
    opq: bool = False
    embedding_dtype: str = "float32"  # or float16: half the disk and page cache, cosine error ~1e-4

    def __post_init__(self) -> None:
        if self.segment_size < 1:
            raise InputError("--segment-size must be at least 1")
        if self.batch_size < 1:
            raise InputError("--batch-size must be at least 1")
        if self.window < self.batch_size:
            self.window = self.batch_size
        ReadOptions(self.text_field, self.doc_field, self.text_docs, self.input_format,
                    self.hf_split, self.strict)  # validates the reading options
        if self.index not in REQUESTS:
            raise InputError(f"--index must be one of {', '.join(REQUESTS)}")
        parse_memory(self.memory)
        if self.embedding_dtype not in EMBEDDING_DTYPES:
            raise InputError(f"--embedding-dtype must be one of {', '.join(EMBEDDING_DTYPES)}")


@dataclass
class _Pending:
    """Sentences waiting for the next embedding window, with their store records."""

    texts: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)


def _sentences(doc: Document, doc_index: int, split: SentenceSplitter) -> Iterator[dict[str, Any]]:
    pos = 0
    for rec in doc.records:
        for sentence in split(rec.text):
            yield {"text": sentence, "doc": doc_index, "pos": pos, "doc_key": doc.key,
                   "source": doc.source, "meta": rec.meta}
            pos += 1


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def scan_corpus(inputs: list[InputSpec], config: BuildConfig) -> CorpusScan:
    """The up-front scan of a build's or an add's inputs, read as `config` says."""
    return scan_inputs(inputs, config.text_field, config.doc_field, config.text_docs,
                       input_format=config.input_format, hf_split=config.hf_split,
                       strict=config.strict, progress=config.progress)


def build_index(
    inputs: list[InputSpec], out: str | Path, encoder: Encoder, config: BuildConfig | None = None
) -> dict[str, Any]:
    """Build an index directory at `out` (resuming an interrupted build of it) and return its manifest."""
    config = config or BuildConfig()
    out = Path(out)
    if out.exists() and not config.overwrite:
        raise InputError(f"{out} already exists (use --overwrite to replace it)")
    parent = out.parent if str(out.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    if not os.access(parent, os.W_OK):
        raise InputError(f"cannot write into {parent}")
    scan = scan_corpus(inputs, config)
    wanted = checkpoint.fingerprint({
        "inputs": scan.identity(),
        "model": [encoder.name, encoder.weights_sha256, encoder.dim, encoder.max_length],
        "config": {k: v for k, v in vars(config).items()
                   if k not in ("overwrite", "restart", "progress", "index", "memory", "opq",
                                "strict")},
    })
    with checkpoint.BuildLock(out):
        work, resumed = checkpoint.prepare_work_dir(out, wanted, config.restart)
        try:
            manifest = build_into(work, scan, inputs, encoder, config,
                                   resumed or checkpoint.Progress(wanted))
            if out.exists():
                old = parent / f".{out.name}.old-{os.getpid()}"
                os.replace(out, old)
                os.replace(work, out)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(work, out)
            (out / checkpoint.PROGRESS).unlink(missing_ok=True)
            return manifest
        except BaseException as exc:
            committed = checkpoint.read_progress(work)
            if committed is None or committed.rows == 0:
                shutil.rmtree(work, ignore_errors=True)
            else:
                log.warning("kept %s sentences of this build in %s: run the same command again "
                            "to resume", f"{committed.rows:,}", work)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                where = f"; {committed.rows:,} sentences are committed" if committed else ""
                raise StorageError(f"disk full while building {out}{where}: free space and run "
                                   "the same command again to resume") from exc
            raise


def build_into(tmp: Path, scan, inputs, encoder: Encoder, config: BuildConfig,
                progress: checkpoint.Progress,
                skip_doc: Callable[[list[str]], bool] | None = None) -> dict[str, Any]:
    """Embed into `tmp`, continuing from `progress`; `skip_doc(sentences)` drops a document."""
    start = time.perf_counter()
    splitter = SentenceSplitter(split=config.split)
    store = TextStoreWriter(tmp / STORE)
    resume = progress.rows > 0 or progress.docs_read > 0
    if resume:
        dropped = store.truncate(progress.rows)
        progress.sessions += 1
        if progress.sessions > 1:
            log.info("resuming in %s: %s sentences of %s documents committed%s", tmp,
                     f"{progress.rows:,}", f"{progress.docs:,}",
                     f" ({dropped} uncommitted records dropped)" if dropped else "")
    rows_at = progress.rows if resume else None
    docs_at = progress.docs + 1 if resume else None
    n_rows = progress.rows
    pending = _Pending()
    total = scan.records if not config.split else None
    bar = tqdm(total=total, initial=n_rows - progress.base_rows if total else 0, unit="sent",
               desc="embedding",
               disable=not config.progress, dynamic_ncols=True, smoothing=0.05)

    emb_out = NpyAppender(tmp / EMBEDDINGS, np.dtype(config.embedding_dtype), (encoder.dim,),
                          resume_rows=rows_at)
    tok_out = NpyAppender(tmp / TOKENS, np.int32, resume_rows=rows_at)
    doc_out = NpyAppender(tmp / DOCS, np.int64, resume_rows=docs_at)
    if not resume:
        doc_out.append(np.zeros(1, dtype=np.int64))

    def flush(docs_read: int) -> None:
        nonlocal n_rows
        if pending.texts:
            counts = encoder.token_counts(pending.texts)
            t0 = time.perf_counter()
            emb = encoder.encode(pending.texts, batch_size=config.batch_size)
            progress.embed_seconds += time.perf_counter() - t0
            emb_out.append(emb)
            tok_out.append(counts)
            ends = np.unique([r["doc"] for r in pending.records], return_counts=True)[1]
            doc_out.append(n_rows + np.cumsum(ends))
            for f in (emb_out, tok_out, doc_out):
                f.sync()
            store.put_many(n_rows, pending.records)
            store.sync()
            n_rows += len(pending.texts)
            progress.tokens += int(counts.sum())
            progress.truncated += int((counts > encoder.max_length).sum())
            bar.update(len(pending.texts))
        progress.rows = n_rows
        progress.docs = doc_out.rows - 1
        progress.docs_read = docs_read
        checkpoint.commit(tmp, progress)
        pending.texts.clear()
        pending.records.clear()

    def windows() -> Iterator[tuple[list[str], list[dict[str, Any]], int, int]]:
        """(texts, records, documents read, duplicates skipped) per embedding window."""
        doc_index, docs_read, duplicates = progress.docs, progress.docs_read, 0
        texts: list[str] = []
        records: list[dict[str, Any]] = []
        for doc in iter_documents(scan, skip=progress.docs_read):
            docs_read += 1
            found = list(_sentences(doc, doc_index, splitter))
            if found and skip_doc is not None and skip_doc([r["text"] for r in found]):
                duplicates += 1
                found = []
            if found:
                texts.extend(r["text"] for r in found)
                records.extend(found)
                doc_index += 1
            if len(texts) >= config.window:
                yield texts, records, docs_read, duplicates
                texts, records, duplicates = [], [], 0
        yield texts, records, docs_read, duplicates

    try:
        for texts, records, docs_read, duplicates in read_ahead(windows()):
            pending.texts.extend(texts)
            pending.records.extend(records)
            progress.duplicates += duplicates
            flush(docs_read)
    finally:
        bar.close()
        emb_out.close()
        tok_out.close()
        doc_out.close()
        store.close()
    n_tokens, truncated, embed_seconds = progress.tokens, progress.truncated, progress.embed_seconds
    if n_rows == 0:
        raise InputError("the corpus holds no sentences")
    if truncated:
        log.warning("%d of %d sentences are longer than the model's %d tokens and were truncated "
                    "for embedding", truncated, n_rows, encoder.max_length)

    docs = np.load(tmp / DOCS)
    embeddings = np.load(tmp / EMBEDDINGS, mmap_mode="r")
    t0 = time.perf_counter()
    choice = choose_index(n_rows, encoder.dim, config.memory, config.index, opq=config.opq)
    log.info("faiss index: %s", choice.reason)
    faiss_info = build_faiss_index(embeddings, tmp / FAISS, choice, progress=config.progress)
    faiss_seconds = time.perf_counter() - t0
    n_segments = len(segment_offsets(docs, config.segment_size)) - 1
    seconds = time.perf_counter() - start
    manifest = {
        "format": INDEX_FORMAT,
        "format_version": INDEX_FORMAT_VERSION,
        "uuid": str(uuid.uuid4()),
        "created": utc_now(),
        "model": {
            "name": encoder.name,
            "source": encoder.spec,
            "weights_sha256": encoder.weights_sha256,
            "dim": encoder.dim,
            "max_length": encoder.max_length,
            "normalized": True,
            "similarity": "cosine (inner product of L2-normalised embeddings)",
        },
        "segment_size": config.segment_size,
        "ingest": {
            "split_sentences": config.split,
            "splitter": "pysbd" if config.split else "none (one record = one sentence)",
            "text_field": config.text_field,
            "doc_field": config.doc_field,
            "text_docs": config.text_docs,
            "input_format": config.input_format,
            "hf_split": config.hf_split,
            "sources": [str(p) for p in inputs],
            "files": scan.manifest_files(),
        },
        "counts": {
            "files": len(scan.files),
            "documents": len(docs) - 1,
            "sentences": n_rows,
            "segments": n_segments,
            "tokens": n_tokens,
            "truncated_sentences": truncated,
            "skipped_blank_records": scan.skipped_blank,
        },
        "faiss": faiss_info,
        "files": {
            "embeddings": {"file": EMBEDDINGS, "dtype": config.embedding_dtype,
                           "shape": [n_rows, encoder.dim]},
            "tokens": TOKENS,
            "documents": DOCS,
            "store": STORE,
            "faiss": FAISS,
        },
        "build": {
            "seconds": round(seconds, 2),
            "embed_seconds": round(embed_seconds, 2),
            "faiss_seconds": round(faiss_seconds, 2),
            "sentences_per_second": round(n_rows / embed_seconds, 1) if embed_seconds else None,
            "peak_rss_mb": round(_peak_rss_mb(), 1),
            "device": encoder.device,
            "backend": getattr(encoder, "backend", "torch"),
            "batch_size": config.batch_size,
            "window": config.window,
            "sessions": progress.sessions,
        },
        "checksums": {name: sha256_file(tmp / name) for name in
                      (EMBEDDINGS, TOKENS, DOCS, FAISS, f"{STORE}/data.mdb")},
        "versions": library_versions(),
    }
    write_json_atomic(tmp / MANIFEST_NAME, manifest)
    return manifest
