"""The stages of a sharded build, as plain functions of small picklable tasks.

    prepare   (PrepareTask)           read, validate, split and segment one shard's files; write
                                      its text store, document offsets and hashes, lexical ids
    embed     (EmbedTask, encoder)    embed one part (a fixed range of a shard's rows); write its
                                      embeddings and token counts, then its completion record
    assemble  (AssembleTask)          join a shard's parts into embeddings.npy and tokens.npy
    train     (TrainTask)             train the one FAISS template (coarse quantizer, codebooks)
                                      and the int8 code scales on a seeded sample of every shard
    index     (IndexTask)             build a shard's FAISS part (global ids) and codes; seal it
                                      with shard.json

Each function is idempotent: it returns the existing completion record when its work is done,
and writes everything under temporary names renamed into place, so a retried task (another
process, another machine of a Ray cluster) writes the same files. Every completion record names
the run that wrote it (`run`: the build's or add's fingerprint: its inputs and their hashes, its
settings, the generation an add builds on), and only a record of this run counts as done: a
shard folder copied or restored into a work directory is refused (`ForeignRecord`), never
reused and never deleted. All paths in tasks are strings
and every task is a frozen dataclass, so executors can pickle them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from tapt.errors import InputError
from tapt.indexer.ann.faiss_index import (
    build_part,
    ids_are_global,
    read_faiss_index,
    shares_quantizer,
    train_template,
    write_faiss,
    write_quantizer,
)
from tapt.indexer.ann.index_choice import IndexChoice
from tapt.indexer.building import checkpoint
from tapt.indexer.building.checkpoint import ForeignRecord
from tapt.indexer.building.dedupe import DocHashes
from tapt.indexer.encoding.encoder import encode_counted, preferred_batch_size
from tapt.indexer.reading.formats import InputFile, ReadOptions
from tapt.indexer.reading.lexical import LexicalWriter, doc_hash
from tapt.indexer.reading.reader import CorpusScan, Document, iter_documents
from tapt.indexer.reading.splitter import SentenceSplitter, segment_offsets
from tapt.indexer.store.codes import code_scale, encode_codes
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
    QUANTIZER,
    SHARDS,
    STORE,
    TOKENS,
    VOCAB,
    read_shard_manifest,
    write_shard_manifest,
)
from tapt.indexer.store.npy import NpyAppender, write_npy
from tapt.indexer.store.text_store import TextStore, TextStoreWriter, close_reader
from tapt.util.files import atomic_write, fsync_path, read_regular, sha256_file, write_json_atomic
from tapt.util.progress import report_progress

log = logging.getLogger(__name__)

PREPARED = "prepared.json"
EMBEDDED = "embedded.json"
PARTS = "parts"
TRAINED = "faiss.trained"
TRAIN_RECORD = "train.json"
_STORE_BATCH = 4096
_PROGRESS_EVERY = 1000     # records read between two reports of the prepare stage's progress
SHARD_FILES = (DOCS, DOC_HASHES, VOCAB, BIGRAMS, LEXICAL, LEXICAL_OFFSETS, EMBEDDINGS, TOKENS,
               FAISS, LMDB_DATA)


def shard_path(work: str | Path, shard: str) -> Path:
    return Path(work) / SHARDS / shard


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(read_regular(path))
    except (OSError, ValueError):
        return None


def foreign_record(path: Path, work: str | Path) -> ForeignRecord:
    """The refusal of a completion record that another run wrote (or of a stage folder that
    holds none): tapt neither reuses nor deletes it."""
    shard = path if path.is_dir() else next(
        (p for p in path.parents if p.parent.name == SHARDS), path.parent)
    return ForeignRecord(f"{shard} was not written by this build or add (a shard folder copied or "
                      f"restored there, or left by another run): tapt neither reuses nor deletes "
                      f"it; move it out of {work} and run the command again")


def run_record(path: Path, run: str, work: str | Path) -> dict[str, Any] | None:
    """The completion record at `path` if this run (`run`) wrote it; None when there is none.

    Raises:
        ForeignRecord: the record names another run, or none (an older tapt's, or copied).
    """
    record = _read_json(path)
    if record is None:
        return None
    if not run or (isinstance(record, dict) and record.get("run") == run):
        return record
    raise foreign_record(path, work)


# ----------------------------------------------------------------------------- prepare


@dataclass(frozen=True)
class PrepareTask:
    """One shard's input files and how to read them.

    Attributes:
        work: The build's work directory.
        shard: The shard's name (`000003`).
        files: Its input files, in reading order (as the scan found them).
        options: How the files are read.
        split: Split records into sentences.
        dedupe_against: Shard directories whose documents this shard skips (`index add`: the
            index's shards and the add's earlier shards); documents repeated within the shard
            are skipped too.
        records: The scan's record count (progress only).
        run: The build's or add's fingerprint, recorded in every completion record.
        segment_size: The index's segment size: the record counts the shard's segments
            (0: not counted here).
    """

    work: str
    shard: str
    files: tuple[InputFile, ...]
    options: ReadOptions
    split: bool
    dedupe_against: tuple[str, ...] = ()
    records: int = 0
    run: str = ""
    segment_size: int = 0


def _sentences(doc: Document, doc_index: int, split: SentenceSplitter) -> Iterator[dict[str, Any]]:
    pos = 0
    for rec in doc.records:
        for sentence in split(rec.text):
            yield {"text": sentence, "doc": doc_index, "pos": pos, "doc_key": doc.key,
                   "source": doc.source, "meta": rec.meta}
            pos += 1


def prepared_record(work: str | Path, shard: str, run: str = "") -> dict[str, Any] | None:
    """The completion record of a shard this run prepared, or None (see `run_record`)."""
    return run_record(shard_path(work, shard) / PREPARED, run, work)


def prepare_shard(task: PrepareTask) -> dict[str, Any]:
    """Read one shard's files into its directory; returns its `prepared.json` record."""
    final = shard_path(task.work, task.shard)
    done = run_record(final / PREPARED, task.run, task.work)
    if done is not None:
        return done
    if final.exists() or final.is_symlink():  # prepared folders appear whole, by rename
        raise foreign_record(final, task.work)
    temp = final.parent / f".{task.shard}.preparing-{os.getpid()}"
    if temp.exists():
        shutil.rmtree(temp)
    temp.mkdir(parents=True)
    t0 = time.perf_counter()
    try:
        record = _prepare_into(temp, task)
        record["seconds"] = round(time.perf_counter() - t0, 2)
        write_json_atomic(temp / PREPARED, record)
        fsync_path(temp)
        os.replace(temp, final)
        fsync_path(final.parent)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return record


def _prepare_into(out: Path, task: PrepareTask) -> dict[str, Any]:
    splitter = SentenceSplitter(split=task.split)
    scan = CorpusScan(list(task.files), task.options)
    dedupe = DocHashes(task.dedupe_against) if task.dedupe_against else None
    writer = TextStoreWriter(out / STORE)
    lexical = LexicalWriter()
    ends = _Column(out / DOCS, np.int64)          # document offsets, from 0
    hashes = _Column(out / DOC_HASHES, np.uint8, (16,))
    ends.add(0)
    batch: list[dict[str, Any]] = []
    rows = duplicates = docs_read = documents = 0
    try:
        reported = records_read = 0
        for doc in iter_documents(scan):
            docs_read += 1
            records_read += len(doc.records)
            if records_read - reported >= _PROGRESS_EVERY:
                report_progress(records_read - reported)    # the stage's unit: records
                reported = records_read
            found = list(_sentences(doc, documents, splitter))
            if not found:
                continue
            digest = doc_hash(r["text"] for r in found)
            if dedupe is not None and dedupe.seen(digest):
                duplicates += 1
                continue
            for r in found:
                lexical.add(r["text"])
            batch.extend(found)
            rows += len(found)
            documents += 1
            ends.add(rows)
            hashes.add(np.frombuffer(digest, dtype=np.uint8))
            if len(batch) >= _STORE_BATCH:
                writer.put_many(rows - len(batch), batch)
                batch = []
        if batch:
            writer.put_many(rows - len(batch), batch)
    finally:
        writer.close()
    ends.close()
    hashes.close()
    counted = {"segments": segments_of(out, task.segment_size)} if task.segment_size else {}
    lexical.write({"vocab": out / VOCAB, "bigrams": out / BIGRAMS, "lexical": out / LEXICAL,
                   "lexical_offsets": out / LEXICAL_OFFSETS})
    blank = sum(f.scanned.blank if f.scanned is not None and f.scanned.exact else f.blank_read
                for f in task.files)
    return {"run": task.run, "shard": task.shard, "rows": rows, "documents": documents,
            "documents_read": docs_read, "duplicates": duplicates, "skipped_blank_records": blank,
            "invalid_utf8_records": sum(f.invalid_utf8_read for f in task.files),
            "files": [f.name for f in task.files], **counted}


class _Column:
    """One value (of `shape`) per document, appended in blocks to a `.npy` file that is written
    under a temporary name and renamed into place by `close` (the prepare stage holds nothing
    per document)."""

    BLOCK = 1 << 16

    def __init__(self, path: Path, dtype: type, shape: tuple[int, ...] = ()) -> None:
        self.path, self.temp = path, path.parent / f".{path.name}.tmp-{os.getpid()}"
        self.out = NpyAppender(self.temp, dtype, shape)
        self.held: list[Any] = []

    def add(self, value: Any) -> None:
        self.held.append(value)
        if len(self.held) >= self.BLOCK:
            self._flush()

    def _flush(self) -> None:
        if self.held:
            self.out.append(np.array(self.held, dtype=self.out.dtype).reshape(
                -1, *self.out.row_shape))
            self.held = []

    def close(self) -> None:
        self._flush()
        self.out.sync()
        self.out.close()
        os.replace(self.temp, self.path)


def _save(path: Path, array: np.ndarray) -> None:
    with atomic_write(path, "wb") as fh:
        write_npy(fh, array)


# ----------------------------------------------------------------------------- embed


@dataclass(frozen=True)
class EmbedTask:
    """Rows [start, stop) of one shard, embedded as one part."""

    work: str
    shard: str
    part: int
    start: int
    stop: int
    batch_size: int | None  # None: the encoder's `preferred_batch_size`
    dtype: str
    run: str = ""

    @property
    def rows(self) -> int:
        return self.stop - self.start


def part_record_path(work: str | Path, shard: str, part: int) -> Path:
    return shard_path(work, shard) / PARTS / f"part-{part:06d}.json"


def embed_part(task: EmbedTask, encoder) -> dict[str, Any]:
    """Embed one part; returns its completion record (`parts/part-PPPPPP.json`). The same as
    `part_done`, `part_texts`, `encode_counted` and `save_part` one after another (`steps`: how
    the Ray executor runs them apart: reading and tokenising on CPUs, the model in actors)."""
    done = part_done(task)
    if done is not None:
        return done
    texts = part_texts(task)
    t0 = time.perf_counter()
    embeddings, counts = encode_counted(encoder, texts,
                                        batch_size=task.batch_size or preferred_batch_size(encoder),
                                        on_rows=report_progress)     # the bar moves by rows
    return save_part(task, embeddings, counts, time.perf_counter() - t0, encoder.dim,
                     encoder.max_length)


def part_done(task: EmbedTask) -> dict[str, Any] | None:
    """The part's completion record of this run, if it has one."""
    return run_record(part_record_path(task.work, task.shard, task.part), task.run, task.work)


def part_texts(task: EmbedTask) -> list[str]:
    """The part's texts, from the shard's text store."""
    directory = shard_path(task.work, task.shard)
    (directory / PARTS).mkdir(exist_ok=True)
    store = directory / STORE
    try:
        return TextStore(store, label=directory).texts(range(task.start, task.stop))
    finally:
        close_reader(store)


def save_part(task: EmbedTask, embeddings, counts, seconds: float, dim: int, max_length: int
              ) -> dict[str, Any]:
    """Write the part's embeddings and token counts, then its completion record; returns it."""
    embeddings, counts = np.asarray(embeddings), np.asarray(counts, dtype=np.int32)
    if embeddings.shape != (task.rows, dim) or counts.shape != (task.rows,):
        raise ValueError(f"the encoder returned {embeddings.shape} embeddings and "
                         f"{counts.shape} token counts for {task.rows} texts")
    parts = shard_path(task.work, task.shard) / PARTS
    sums = {}
    for prefix, array in (("emb", embeddings.astype(task.dtype)), ("tok", counts)):
        path = parts / f"{prefix}-{task.part:06d}.npy"
        _save(path, array)
        sums[f"{prefix}_sha256"] = sha256_file(path)     # checked as the shard is assembled
    record = {"run": task.run, "part": task.part, "start": task.start, "stop": task.stop, "rows": task.rows,
              "tokens": int(counts.sum()),
              "truncated": int((counts > max_length).sum()),
              "embed_seconds": round(seconds, 3), **sums}
    checkpoint.commit_part(part_record_path(task.work, task.shard, task.part), record)
    return record


embed_part.steps = (part_done, part_texts, save_part)  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- assemble


@dataclass(frozen=True)
class AssembleTask:
    """Join one shard's parts into its embeddings and token counts."""

    work: str
    shard: str
    parts: int
    rows: int
    dim: int
    dtype: str
    run: str = ""


def assemble_shard(task: AssembleTask) -> dict[str, Any]:
    """Returns the shard's `embedded.json` record (rows, tokens, truncated, embedding seconds)."""
    directory = shard_path(task.work, task.shard)
    done = run_record(directory / EMBEDDED, task.run, task.work)
    if done is not None:
        shutil.rmtree(directory / PARTS, ignore_errors=True)
        return done
    parts = directory / PARTS
    records = [run_record(part_record_path(task.work, task.shard, p), task.run, task.work)
               for p in range(task.parts)]
    if None in records:
        raise InputError(f"{parts}: a part to assemble has no completion record; run the "
                         "command again")
    for name, prefix, dtype, shape in ((EMBEDDINGS, "emb", task.dtype, (task.dim,)),
                                       (TOKENS, "tok", np.int32, ())):
        temp = directory / f".{name}.tmp-{os.getpid()}"
        try:
            with NpyAppender(temp, dtype, shape) as out:
                for p, record in enumerate(records):
                    out.append(checkpoint.kept_part(
                        part_record_path(task.work, task.shard, p), record,
                        parts / f"{prefix}-{p:06d}.npy", f"{prefix}_sha256", dtype, shape))
                out.sync()
            os.replace(temp, directory / name)
        finally:
            temp.unlink(missing_ok=True)
    record = {"run": task.run, "rows": task.rows, "tokens": sum(r["tokens"] for r in records),
              "truncated": sum(r["truncated"] for r in records),
              "embed_seconds": round(sum(r["embed_seconds"] for r in records), 3)}
    write_json_atomic(directory / EMBEDDED, record)
    fsync_path(directory)
    shutil.rmtree(parts, ignore_errors=True)
    return record


# ----------------------------------------------------------------------------- train


@dataclass(frozen=True)
class TrainTask:
    """Train what every shard shares: the FAISS template and the int8 code scales.

    Attributes:
        work: The directory holding `shards/` (a build's work directory, or a new generation).
        shards: The shards' names, in row order.
        choice: The FAISS index to build.
        codes: "int8" to compute code scales, "none".
        out: Where the trained template goes (default: `work`), and the coarse quantizer of an
            index that stores it once (`QUANTIZER`).
        run: The build's fingerprint ("" where the directory is new each time: reindex).
    """

    work: str
    shards: tuple[str, ...]
    choice: IndexChoice
    codes: str = "none"
    out: str | None = None
    run: str = ""


def train_shared(task: TrainTask) -> dict[str, Any]:
    """Returns {"template": path or None, "template_sha256", "train_seconds", "code_scale",
    "quantizer_sha256": of `QUANTIZER` where the index stores its quantizer once}."""
    from tapt.indexer.store.shards import RowView

    out = Path(task.out or task.work)
    wanted = {"factory": task.choice.factory, "seed": task.choice.seed,
              "train_size": task.choice.train_size, "codes": task.codes,
              "shards": list(task.shards), "run": task.run}
    done = _read_json(out / TRAIN_RECORD)
    if done is not None and done.get("wanted") == wanted:
        return done
    view = RowView([np.load(shard_path(task.work, s) / EMBEDDINGS, mmap_mode="r")
                    for s in task.shards])
    template, seconds = train_template(view, task.choice)
    record: dict[str, Any] = {"wanted": wanted, "template": None, "template_sha256": None,
                              "train_seconds": round(seconds, 2), "code_scale": None,
                              "quantizer_sha256": None}
    if template is not None:
        write_faiss(template, out / TRAINED)
        record["template"] = str(out / TRAINED)
        record["template_sha256"] = sha256_file(out / TRAINED)
        if shares_quantizer(task.choice):
            write_quantizer(template, out / QUANTIZER)
            record["quantizer_sha256"] = sha256_file(out / QUANTIZER)
    if task.codes == "int8":
        record["code_scale"] = code_scale(view, task.choice.seed).tolist()
    write_json_atomic(out / TRAIN_RECORD, record)
    return record


# ----------------------------------------------------------------------------- index


@dataclass(frozen=True)
class IndexTask:
    """Build one shard's FAISS part (and codes) and seal the shard.

    Attributes:
        work: The directory holding `shards/`.
        shard: The shard's name.
        row_offset: Its first global row id (fixed from here on).
        choice: The FAISS index to build.
        template: The trained template (`train_shared`), or None.
        template_sha256: Its SHA-256 (a sealed shard records what it was built from).
        code_scale: int8 code scales, or None for no codes.
        prepared: The shard's `prepared.json` record; embedded: its `embedded.json` record.
        keep_checksums: Checksums of files that did not change (reindex), not hashed again.
        run: The build's or add's fingerprint: a sealed shard.json is reused only where this
            run prepared the shard ("" where the directory is new each time: reindex).
    """

    work: str
    shard: str
    row_offset: int
    choice: IndexChoice
    template: str | None
    template_sha256: str | None
    code_scale: tuple[float, ...] | None
    prepared: dict[str, Any]
    embedded: dict[str, Any]
    dtype: str
    keep_checksums: tuple[tuple[str, str], ...] = ()
    run: str = ""


def index_shard(task: IndexTask) -> dict[str, Any]:
    """Returns {"manifest": the shard's sealed shard.json, "sha256": of its bytes}."""
    directory = shard_path(task.work, task.shard)
    wanted = {"row_offset": task.row_offset, "factory": task.choice.factory,
              "template_sha256": task.template_sha256,
              "codes": task.code_scale is not None}
    existing = _sealed(directory)
    if existing is not None and existing[0].get("built") == wanted and (
            not task.run or prepared_record(task.work, task.shard, task.run) is not None):
        return {"manifest": existing[0], "sha256": existing[1]}
    embeddings = np.load(directory / EMBEDDINGS, mmap_mode="r")
    template = read_faiss_index(Path(task.template)) if task.template else None
    t0 = time.perf_counter()
    part = build_part(embeddings, task.choice, template, task.row_offset)
    shared = shares_quantizer(task.choice)
    faiss_bytes = write_faiss(part, directory / FAISS, without_quantizer=shared)
    faiss_seconds = time.perf_counter() - t0
    files = list(SHARD_FILES)
    if task.code_scale is not None:
        scale = np.asarray(task.code_scale, dtype=np.float32)
        temp = directory / f".{CODES}.tmp-{os.getpid()}"
        try:
            with NpyAppender(temp, np.int8, (embeddings.shape[1],)) as out:
                for start in range(0, len(embeddings), 65536):
                    out.append(encode_codes(embeddings[start:start + 65536], scale))
                out.sync()
            os.replace(temp, directory / CODES)
        finally:
            temp.unlink(missing_ok=True)
        files.append(CODES)
    else:
        (directory / CODES).unlink(missing_ok=True)
    kept = dict(task.keep_checksums)
    checksums = {name: kept.get(name) or sha256_file(directory / name) for name in files}
    checksums[FAISS] = sha256_file(directory / FAISS)
    if CODES in checksums:
        checksums[CODES] = sha256_file(directory / CODES)
    prepared, embedded = task.prepared, task.embedded
    manifest = {
        "shard": task.shard, "built": wanted,
        "rows": int(prepared["rows"]), "documents": int(prepared["documents"]),
        "tokens": int(embedded["tokens"]), "truncated_sentences": int(embedded["truncated"]),
        "duplicate_documents_skipped": int(prepared.get("duplicates", 0)),
        "skipped_blank_records": int(prepared.get("skipped_blank_records", 0)),
        "invalid_utf8_records": int(prepared.get("invalid_utf8_records", 0)),
        "input_files": prepared.get("files", []),
        "embeddings": {"dtype": task.dtype, "shape": [int(prepared["rows"]),
                                                      int(embeddings.shape[1])]},
        "faiss": {"factory": task.choice.factory, "ntotal": int(part.ntotal),
                  "bytes": faiss_bytes, "ids": "global" if ids_are_global(task.choice)
                  else "local", "id_base": task.row_offset if ids_are_global(task.choice)
                  else 0, "seconds": round(faiss_seconds, 2),
                  **({"quantizer": f"shared: ../../{QUANTIZER}"} if shared else {})},
        "codes": {"dtype": "int8"} if task.code_scale is not None else None,
        "embed_seconds": embedded.get("embed_seconds"),
        "checksums": checksums,
    }
    sealed, sha = write_shard_manifest(directory, manifest)
    fsync_path(directory)
    return {"manifest": sealed, "sha256": sha}


def _sealed(directory: Path) -> tuple[dict[str, Any], str] | None:
    import hashlib

    from tapt.errors import IndexFormatError

    path = directory / "shard.json"
    if not path.is_file():
        return None
    with contextlib.suppress(IndexFormatError, OSError):
        manifest = read_shard_manifest(directory, directory)
        return manifest, hashlib.sha256(path.read_bytes()).hexdigest()
    return None


def segments_of(directory: Path, segment_size: int) -> int:
    """Segments of a shard at a segment size (they never cross documents, so never shards)."""
    return len(segment_offsets(np.load(directory / DOCS), segment_size)) - 1
