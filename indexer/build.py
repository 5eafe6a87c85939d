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

from tapt.errors import InputError, OutputError, StorageError
from tapt.util.files import ensure_dir, sha256_file, storage_error
from tapt.util.safety import check_output, enclosing_index, is_tapt_index
from tapt.util.versions import library_versions, utc_now

from . import checkpoint
from .encoder import Encoder, model_fingerprint, model_record
from .formats import ReadOptions
from .faiss_index import build_faiss_index
from .index_choice import DEFAULT_MEMORY, REQUESTS, choose_index, parse_memory
from .integrity import remember_index
from .manifest import (DOCS, EMBEDDINGS, FAISS, INDEX_FORMAT, INDEX_FORMAT_VERSION, LMDB_DATA,
                       STORE, TOKENS, foreign_entries, write_index_manifest)
from .npy import NpyAppender
from .reader import CorpusScan, Document, InputSpec, TextDocs, iter_documents, scan_inputs
from .readahead import read_ahead
from .splitter import SentenceSplitter, segment_offsets
from .store import TextStoreWriter

log = logging.getLogger(__name__)


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
            raise InputError("must be at least 1", param="segment_size")
        if self.batch_size < 1:
            raise InputError("must be at least 1", param="batch_size")
        if self.window < self.batch_size:
            self.window = self.batch_size
        ReadOptions(self.text_field, self.doc_field, self.text_docs, self.input_format,
                    self.hf_split, self.strict)  # validates the reading options
        if self.index not in REQUESTS:
            raise InputError(f"must be one of {', '.join(REQUESTS)}", param="index")
        parse_memory(self.memory)
        if self.embedding_dtype not in EMBEDDING_DTYPES:
            raise InputError(f"must be one of {', '.join(EMBEDDING_DTYPES)}",
                             param="embedding_dtype")


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


def local_inputs(inputs: list[InputSpec] | CorpusScan) -> list[Path]:
    """The local paths among inputs (of a scan: every local file it reads); URLs, Hub datasets
    and standard input have no place on this disk to protect."""
    if isinstance(inputs, CorpusScan):
        return [f.source.local for f in inputs.files if f.source.local is not None]
    return [Path(spec) for spec in inputs if isinstance(spec, (str, Path))
            and str(spec) != "-" and "://" not in str(spec)]


def corpus_paths(inputs: list[InputSpec] | CorpusScan) -> list[Path]:
    """The local inputs of a build or an add, none of them inside a tapt index (an index's own
    files are never a corpus)."""
    paths = local_inputs(inputs)
    for raw in paths:
        inside = enclosing_index(raw)
        if inside is not None:
            raise OutputError(f"the input {raw} lies inside the tapt index {inside}; an index's "
                              "own files are not a corpus", param="corpus")
    return paths


def replaceable_index(path: Path) -> bool:
    """A directory `--overwrite` may replace: a tapt index holding only what tapt wrote."""
    return is_tapt_index(path) and not foreign_entries(path)


def check_index_output(out: str | Path, inputs: list[InputSpec] | CorpusScan,
                       overwrite: bool) -> Path:
    """The output rule of `index build`: `out` is new, an empty directory, or (with `overwrite`)
    a tapt index holding nothing else; never an input, inside one, or around one; and no input
    is inside a tapt index. Returns `out` resolved."""
    inputs = corpus_paths(inputs)
    target = Path(out).expanduser().resolve()
    if target.is_dir() and is_tapt_index(target):
        extra = foreign_entries(target)
        if extra:
            raise OutputError(f"{out} is a tapt index that also holds files tapt did not write "
                              f"({', '.join(extra[:3])}); it is never replaced: move them out or "
                              "choose another path", param="out")
    if Path(out).is_symlink():
        raise OutputError(f"{out} is a symbolic link; give the directory it points to",
                          param="out")
    return check_output(out, what="tapt index", inputs=inputs, overwrite=overwrite,
                        ours=replaceable_index, ours_needs_overwrite=True, directory=True)


def build_index(
    inputs: list[InputSpec], out: str | Path, encoder: Encoder, config: BuildConfig | None = None
) -> dict[str, Any]:
    """Build an index directory at `out` (resuming an interrupted build of it) and return its
    manifest.

    Raises:
        OutputError: `out` may not be written (see `check_index_output`).
        StorageError: the disk filled up or refused a write (committed windows are kept).
    """
    config = config or BuildConfig()
    model_dir = [encoder.spec] if encoder.spec and Path(encoder.spec).is_dir() else []
    check_index_output(out, [*inputs, *model_dir], config.overwrite)
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    ensure_dir(parent)
    if not os.access(parent, os.W_OK):
        raise StorageError(f"cannot write into {parent}; choose a writable location")
    scan = scan_corpus(inputs, config)
    check_index_output(out, scan, config.overwrite)
    wanted = checkpoint.fingerprint({
        "inputs": scan.identity(),
        "model": [encoder.name, model_fingerprint(encoder), encoder.dim, encoder.max_length],
        "config": {k: v for k, v in vars(config).items()
                   if k not in ("overwrite", "restart", "progress", "index", "memory", "opq",
                                "strict")},
        "store_format": INDEX_FORMAT_VERSION,
    })
    with checkpoint.BuildLock(out):
        work, resumed = checkpoint.prepare_work_dir(out, wanted, config.restart)
        try:
            manifest = build_into(work, scan, inputs, encoder, config,
                                   resumed or checkpoint.Progress(wanted))
            if out.exists() or out.is_symlink():
                check_index_output(out, [], config.overwrite)  # still ours after the long build
                old = parent / f".{out.name}.old-{os.getpid()}"
                os.replace(out, old)
                os.replace(work, out)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(work, out)
            (out / checkpoint.PROGRESS).unlink(missing_ok=True)
            remember_index(out, manifest)  # hashed as written: later opens need not hash again
            return manifest
        except BaseException as exc:
            committed = checkpoint.read_progress(work) if work.exists() else None
            if committed is None or committed.rows == 0:
                shutil.rmtree(work, ignore_errors=True)
            else:
                log.warning("kept %s sentences of this build in %s: run the same command again "
                            "to resume", f"{committed.rows:,}", work)
            full = (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or (
                isinstance(exc, StorageError) and str(exc).startswith("disk full"))
            if full:
                where = f"; {committed.rows:,} sentences are committed" if committed else ""
                raise StorageError(f"disk full while building {out}{where}: free space and run "
                                   "the same command again to resume") from exc
            if isinstance(exc, OSError):
                raise storage_error(exc, work, "building") from exc
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
        "generation": 1,
        "model": model_record(encoder),
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
            "store_records": "CRC32 (big-endian) of key + JSON, then the JSON",
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
                      (EMBEDDINGS, TOKENS, DOCS, FAISS, LMDB_DATA)},
        "versions": library_versions(),
    }
    return write_index_manifest(tmp, manifest)
