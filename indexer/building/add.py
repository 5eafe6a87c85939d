"""`tapt index add`: append new documents to an index as new shards, skipping documents it
already holds.

The add builds a new generation in a hidden sibling directory (`.NAME.adding`): the index's
shards are hard-linked into it unchanged (their ids never change), and the new documents become
new shards after them, through the same resumable stages as a build (`pipeline.run_stages`), so a
killed add resumes. Documents whose normalised sentences the index (or an earlier new shard)
holds are skipped, by the hashes every shard stores. New shards reuse the index's FAISS template
(the trained quantizer of an IVF index) and code scales; the search parameter is calibrated again
on the whole. When it is complete the new generation and the index are exchanged in one atomic
rename (`renameat2(RENAME_EXCHANGE)` on Linux): a reader sees the old index or the new one, never
a mix.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tapt.errors import InputError
from tapt.indexer.ann.index_choice import choice_from_manifest
from tapt.indexer.building import checkpoint, stages
from tapt.indexer.building.ann_build import calibrated_faiss
from tapt.indexer.building.build_plan import BuildPlan, TaskMemory, Workers, plan_add, task_memory
from tapt.indexer.building.executors import EncoderSource, Executor, Stage, make_executor
from tapt.indexer.building.generations import (
    carry,
    check_kept,
    check_replaceable,
    check_unchanged,
    discard_previous,
    exchange,
    mirror,
    user_entries,
)
from tapt.indexer.building.pipeline import (
    BuildConfig,
    Shared,
    corpus_paths,
    drop_training_files,
    index_stages,
    plan_shards,
    run_stages,
    scan_corpus,
    warn_invalid_utf8,
)
from tapt.indexer.building.publishing import (
    calibrate_memory,
    codes_section,
    counted_segments,
    shard_entries,
    top_vocabulary,
)
from tapt.indexer.encoding.encoder import Encoder, LazyEncoder
from tapt.indexer.index import Index
from tapt.indexer.reading.lexical import doc_hash, normalise_for_identity  # noqa: F401 - where add's callers look
from tapt.indexer.reading.reader import CorpusScan, InputSpec
from tapt.indexer.store.integrity import check_checksum, remember_index
from tapt.indexer.store.manifest import (
    DOC_HASHES,
    FAISS,
    INDEX_FORMAT_VERSION,
    MANIFEST_NAME,
    SHARDS,
    VOCAB,
    read_shard_manifest,
    shard_name,
    write_index_manifest,
)
from tapt.util.safety import check_output, is_tapt_index
from tapt.util.versions import utc_now

log = logging.getLogger(__name__)


def check_add_inputs(index_path: Path, inputs: list[InputSpec] | CorpusScan) -> None:
    """`index add` writes the index: no local input may be it, lie inside it, or contain it."""
    check_output(os.path.realpath(index_path), what="index", inputs=corpus_paths(inputs),
                 directory=True, ours=is_tapt_index, param="idx")  # a link's index, updated


def _recorded_batch_size(manifest: dict[str, Any]) -> int | None:
    """The batch size the index was built with, if one was given (None: by device)."""
    recorded = manifest.get("build", {}).get("batch_size")
    return recorded if isinstance(recorded, int) and recorded > 0 else None


def add_to_index(path: str | Path, inputs: list[InputSpec], encoder: Encoder | LazyEncoder,
                 batch_size: int | None = None, restart: bool = False,
                 progress: bool = True, *, text_field: str | None = None,
                 doc_field: str | None = None, text_docs: str | None = None,
                 input_format: str | None = None, hf_split: str | None = None,
                 strict: bool = False, invalid_utf8: str | None = None,
                 shards: int | None = None,
                 shard_size: int | str | None = None, executor: Executor | str | None = None,
                 encoder_spec: Any = None, **settings: Any) -> dict[str, Any]:
    """Append the documents of `inputs` that the index does not hold yet, as new shards;
    returns the new manifest. When every document is already in the index, nothing is written:
    the index keeps its generation (selections made from it stay valid), and the returned
    manifest is the index's with this add's record (`"unchanged": true`) appended in memory.

    The reading options (`text_field`, `doc_field`, `text_docs`, `invalid_utf8`) default to the
    index's; the others are as for a build (`tapt.indexer.reading.reader.scan_inputs`). `shards` /
    `shard_size` split the new files into several shards (default: one). `settings`: other
    `BuildConfig` fields, by name. A `LazyEncoder` is loaded once the inputs are scanned.
    """
    # absolute, as the stages may run elsewhere; a symbolic link IDX: the index it names is
    # updated and the link kept (swapping at the link's name would replace the link)
    index = Index(os.path.realpath(path))
    check_replaceable(index.path)
    check_add_inputs(index.path, list(inputs))
    if not isinstance(encoder, LazyEncoder):
        index.check_encoder(encoder)
    old = index.manifest
    ingest = old["ingest"]
    config = BuildConfig(segment_size=old["segment_size"],
                         batch_size=batch_size or _recorded_batch_size(old),
                         part_size=old["build"].get("window", 4096),
                         split=ingest["split_sentences"],
                         text_field=text_field or ingest["text_field"],
                         doc_field=ingest["doc_field"] if doc_field is None else doc_field,
                         text_docs=text_docs or ingest["text_docs"], input_format=input_format,
                         hf_split=hf_split, strict=strict, progress=progress,
                         invalid_utf8=invalid_utf8 or ingest.get("invalid_utf8", "error"),
                         embedding_dtype=old["files"]["embeddings"].get("dtype", "float32"),
                         shards=shards, shard_size=shard_size, **settings)
    runner, owned = make_executor(executor, progress)
    with contextlib.closing(runner) if owned else contextlib.nullcontext():
        return _add(index, list(inputs), encoder, config, runner, restart, encoder_spec)


def _add(index: Index, inputs: list[InputSpec], encoder: Encoder, config: BuildConfig,
         runner: Executor, restart: bool, encoder_spec: Any) -> dict[str, Any]:
    """`add_to_index` once its options are read and its executor made."""
    old = index.manifest
    scan = scan_corpus(inputs, config, runner)
    check_add_inputs(index.path, scan)
    if isinstance(encoder, LazyEncoder):
        encoder = encoder.get()
        index.check_encoder(encoder)
    groups = plan_shards(scan, config)
    first = len(index.shards)
    wanted = checkpoint.fingerprint({
        "inputs": scan.identity(),
        "index": index.manifest_sha256, "batch_size": config.batch_size,
        "read": [config.text_field, config.doc_field, config.text_docs, config.input_format,
                 config.hf_split] + ([config.invalid_utf8] if config.invalid_utf8 != "error"
                                     else []),
        "groups": groups,
        "store_format": INDEX_FORMAT_VERSION,
    })
    old_shards = [(s.name, s.rows) for s in index.shards]
    new_names = [shard_name(first + i) for i in range(len(groups))]
    with checkpoint.BuildLock(index.path):
        check_unchanged(index.path, index.manifest_sha256)
        kept = user_entries(index.path)
        _check_free(index.path, kept, new_names)
        for shard in index.shards:   # the hashes that decide what is skipped must be sound:
            # hashed once per version of the file (a stamp), not on every add
            check_checksum(shard.directory / DOC_HASHES,
                           shard.extra["checksums"].get(DOC_HASHES),
                           shard.extra["where"] + DOC_HASHES, index.path, once=True)
        work, plan = checkpoint.prepare_work_dir(index.path, wanted, restart, kind="adding")
        earlier = checkpoint.committed_rows(work) if plan is not None else 0  # resumed rows
        failures = checkpoint.keep_or_discard(
            work, "add", "adding to the index in", "kept this add's %s embedded sentences in %s: "
            "run the same command again to resume", earlier)
        with failures:
            start = time.perf_counter()
            if plan is None:
                mirror(index.path, work, (MANIFEST_NAME,), kept)
                plan = checkpoint.Plan(
                    wanted, [{"name": name, "files": g} for name, g in zip(new_names, groups)],
                    config.embedding_dtype, base_rows=index.n_sentences,
                    base_docs=int(old["counts"]["documents"]), sessions=1)
            else:
                carry(index.path, work, kept)   # what a user put there since the last session
                plan.sessions += 1
            checkpoint.write_plan(work, plan)
            planned: dict[str, Any] = {}
            workers = Workers.of(runner, encoder, config.part_size,
                                 index_docs=int(old["counts"]["documents"]))

            def before_embed(rows: dict[str, int], pending: list[int]) -> TaskMemory | None:
                added = sum(rows.values())
                if not added:       # nothing new: nothing to plan
                    return None
                planned["choice"], planned["plan"] = plan_add(
                    old.get("faiss", {}), index.n_sentences + added, added, encoder.dim,
                    config.memory, work, pending, config.embedding_dtype,
                    codes=bool(old.get("codes")),
                    written=[stages.shard_path(work, n) for n in rows],
                    part_rows=max([s.rows for s in index.shards] + list(rows.values())),
                    workers=workers)
                return planned["plan"].tasks()

            built = run_stages(work, scan, plan, config, runner,
                               EncoderSource(encoder, encoder_spec), encoder.dim, old_shards,
                               dedupe_against=tuple(str(stages.shard_path(work, n))
                                                    for n, _ in old_shards),
                               before_embed=before_embed,
                               prepare_memory=task_memory(None, 0, encoder.dim, workers).prepare)
            if built.rows == index.n_sentences:  # every document is already there
                shutil.rmtree(work, ignore_errors=True)
                return _unchanged(old, inputs, plan, built, time.perf_counter() - start)
            choice = choice_from_manifest(old.get("faiss", {}), built.rows, encoder.dim)
            shared = _shared_of(index, work, runner, planned["plan"].task_memory["index"])
            results, _ = index_stages(work, built, choice, "none", runner,
                                      config.embedding_dtype, shared, run=plan.fingerprint,
                                      memory=planned["plan"].tasks())
            for name, _ in old_shards:
                manifest_path = stages.shard_path(work, name) / "shard.json"
                results[name] = {"manifest": read_shard_manifest(manifest_path.parent,
                                                                 index.path),
                                 "sha256": hashlib.sha256(manifest_path.read_bytes()).hexdigest()}
            manifest = _new_manifest(work, index, built, results, choice, config, scan, inputs,
                                     plan, time.perf_counter() - start, runner,
                                     planned.get("plan"))
            drop_training_files(work)
            manifest = write_index_manifest(work, manifest)
            check_kept(index.path, work, kept)
            exchange(work, index.path)
        discard_previous(work, index.path)  # now the previous generation
        remember_index(index.path, manifest)
    return manifest


def _check_free(index_dir: Path, kept: list[str], new_names: list[str]) -> None:
    """Refuse an add whose new shards would land where the index holds shard folders its
    manifest does not list (a newer generation's, left by restoring an older copy over it; or a
    copy): they are neither reused as this add's work nor deleted."""
    taken = {f"{SHARDS}/{name}" for name in new_names}
    stray = [rel for rel in kept if "/".join(rel.split("/")[:2]) in taken]
    if stray:
        raise InputError(f"index {index_dir} holds {', '.join(stray[:5])}, which its manifest "
                         "does not list (left by restoring an older copy of the index over a "
                         "newer one, or copied there): tapt neither reuses nor deletes it; move "
                         "it out of the index and run the command again")


@dataclass(frozen=True)
class TemplateTask:
    """The trained, empty template of an index's FAISS part, written to `out`."""

    part: str
    out: str


def write_template(task: TemplateTask) -> str:
    """Write the template (quantizer and codebooks, no rows) of an IVF part; its SHA-256."""
    from tapt.indexer.ann.faiss_index import read_faiss_index, template_of, write_faiss

    write_faiss(template_of(read_faiss_index(Path(task.part))), Path(task.out))
    return hashlib.sha256(Path(task.out).read_bytes()).hexdigest()


def _shared_of(index: Index, work: Path, runner: Executor, memory: int = 0) -> Shared:
    """What new shards share with the index's: its FAISS template (an IVF part emptied, in a
    task: one part loaded there, not here) so the new parts use the same coarse quantizer and
    codebooks, and its code scales."""
    template = template_sha = None
    if index.manifest.get("faiss", {}).get("part_ids") == "global":
        template = str(work / stages.TRAINED)
        # the part by the index's path: its shards' own paths name this process's handle
        part = Path(index.path) / SHARDS / index.shards[0].name / FAISS
        template_sha = runner.map(Stage("train", write_template, unit="index", memory=memory),
                                  [TemplateTask(str(part), template)])[0]
    scale = (index.manifest.get("codes") or {}).get("scale")
    return Shared(template, template_sha, 0.0, scale)


def _duplicates(built: Any, plan: checkpoint.Plan) -> int:
    """Documents this add skipped because the index holds them already."""
    return sum(int(built.prepared[s["name"]].get("duplicates", 0)) for s in plan.shards)


def _unchanged(old: dict[str, Any], inputs: list[InputSpec], plan: checkpoint.Plan,
               built: Any, seconds: float) -> dict[str, Any]:
    """An add that found nothing new: the index stays as it is (the same generation, so its
    selections stay valid); its manifest is returned with this add's record appended to the
    history in memory only (`unchanged`: true)."""
    duplicates = _duplicates(built, plan)
    log.info("nothing new to add: %s duplicate documents skipped; the index is unchanged",
             f"{duplicates:,}")
    return {**old, "history": list(old.get("history", [])) + [{
        "added": utc_now(), "sources": [str(p) for p in inputs], "shards": [],
        "documents": 0, "sentences": 0, "duplicate_documents_skipped": duplicates,
        "embed_seconds": 0.0, "seconds": round(seconds, 2), "sessions": plan.sessions,
        "unchanged": True}]}


def _new_manifest(work: Path, index: Index, built, results: dict[str, dict[str, Any]], choice,
                  config: BuildConfig, scan: CorpusScan, inputs, plan: checkpoint.Plan,
                  seconds: float, runner: Executor | None = None,
                  build_plan: BuildPlan | None = None) -> dict[str, Any]:
    """The new generation's manifest: the index's identity and history, every shard, this add
    (its calibration kept where it still holds: `ann_build.calibrated_faiss`)."""
    old = index.manifest
    counted = {e["name"]: int(e["segments"]) for e in old["shards"] if "segments" in e}
    shards = shard_entries(work, built.names, built.row_offsets, results, config.segment_size,
                           {**counted, **counted_segments(built)})
    vocab_sha = top_vocabulary(work, built.new, base=(work / VOCAB).is_file(), runner=runner)
    faiss_info = calibrated_faiss(work, built.names, built.row_offsets, choice, built.rows,
                                  float((old.get("faiss", {}).get("train") or {})
                                        .get("seconds") or 0), config.progress, runner,
                                  previous=old.get("faiss"),
                                  memory=calibrate_memory(build_plan))
    calibration = (faiss_info.get("search") or {}).get("sample") or {}
    for key in ("reindexed", "previous", "requested", "memory_budget_bytes", "reason"):
        if key in old.get("faiss", {}):
            faiss_info[key] = old["faiss"][key]
    faiss_info["bytes"] = sum(r["manifest"]["faiss"]["bytes"] for r in results.values())
    new = [results[n]["manifest"] for n in built.new]
    added_rows = sum(m["rows"] for m in new)
    added_docs = sum(m["documents"] for m in new)
    duplicates = _duplicates(built, plan)
    merged = dict(old)
    merged["generation"] = int(old.get("generation", 1)) + 1
    merged.pop("same_content_as", None)  # new rows: earlier manifests name other content
    merged["updated"] = utc_now()
    merged["shards"] = shards
    merged["faiss"] = faiss_info
    merged["codes"] = codes_section((old.get("codes") or {}).get("scale"))
    merged["files"] = {**old["files"], "embeddings": {**old["files"]["embeddings"],
                                                      "shape": [built.rows, index.dim]}}
    merged["lexical"] = {**old.get("lexical", {}),
                         "vocabulary": int(len(np.load(work / VOCAB, mmap_mode="r")))}
    merged["checksums"] = {**(old.get("checksums") or {}), VOCAB: vocab_sha}
    merged["ingest"] = {**old["ingest"],
                        "sources": old["ingest"]["sources"] + [str(p) for p in inputs],
                        "files": old["ingest"]["files"] + scan.manifest_files()}
    if config.invalid_utf8 != "error":     # the index may now hold replaced bytes
        merged["ingest"]["invalid_utf8"] = config.invalid_utf8
    replaced = sum(int(built.prepared[s["name"]].get("invalid_utf8_records", 0))
                   for s in plan.shards)
    warn_invalid_utf8(replaced)
    merged["counts"] = {
        "files": old["counts"]["files"] + len(scan.files),
        "documents": old["counts"]["documents"] + added_docs,
        "sentences": built.rows,
        "segments": sum(s["segments"] for s in shards),
        "tokens": old["counts"]["tokens"] + sum(m["tokens"] for m in new),
        "truncated_sentences": old["counts"]["truncated_sentences"]
        + sum(m["truncated_sentences"] for m in new),
        "skipped_blank_records": old["counts"]["skipped_blank_records"]
        + sum(int(built.prepared[s["name"]].get("skipped_blank_records", 0))
              for s in plan.shards),
        "invalid_utf8_records": int(old["counts"].get("invalid_utf8_records", 0)) + replaced}
    merged["history"] = list(old.get("history", [])) + [{
        "added": merged["updated"], "sources": [str(p) for p in inputs],
        "shards": built.new, "documents": added_docs, "sentences": added_rows,
        "duplicate_documents_skipped": duplicates,
        "embed_seconds": round(sum(float(built.embedded[n].get("embed_seconds") or 0)
                                   for n in built.new), 2),
        "seconds": round(seconds, 2), "sessions": plan.sessions,
        "calibration": None if not calibration else
        "kept" if calibration.get("reused") else "recalibrated",
        "plan": build_plan.record() if build_plan is not None else None,
    }]
    return merged
