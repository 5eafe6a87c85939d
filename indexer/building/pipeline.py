"""`tapt index build`: corpus -> shards of whole files -> sentences -> embeddings -> FAISS parts.

The build runs in stages (see `stages`) behind an executor (see `executors`): prepare every
shard (read, split, text store, offsets, lexical ids), embed every part of every shard, assemble
each shard's embeddings, train what the shards share (one FAISS template, int8 code scales),
index every shard, calibrate the search on the whole, and publish the top manifest last.

Everything is written into a hidden work directory beside the target (`.NAME.building`) that is
renamed into place only when the build has finished, so no half-written index is ever visible
under its name. Each finished piece of work leaves a completion record (see `checkpoint`): a build
that is killed, runs out of disk or is interrupted keeps its finished pieces, and the same command
resumes from them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import resource
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tapt.errors import InputError, OutputError, StorageError
from tapt.indexer.ann.index_choice import IndexChoice
from tapt.indexer.building import checkpoint, dedupe, stages
from tapt.indexer.building.ann_build import calibrated_faiss, quantizer_checksums
from tapt.indexer.building.build_config import BuildConfig
from tapt.indexer.building.build_plan import (
    TASK_BASE,
    BuildPlan,
    TaskMemory,
    Workers,
    plan_build,
    task_memory,
)
from tapt.indexer.building.executors import EncoderSource, Executor, Stage, make_executor
from tapt.indexer.building.publishing import (
    calibrate_memory,
    codes_section,
    counted_segments,
    shard_entries,
    top_vocabulary,
)
from tapt.indexer.encoding.encoder import Encoder, model_fingerprint, model_record
from tapt.indexer.reading.formats import ReadOptions
from tapt.indexer.reading.reader import CorpusScan, InputSpec
from tapt.indexer.store.integrity import remember_index
from tapt.indexer.store.manifest import (
    EMBEDDINGS,
    INDEX_FORMAT,
    INDEX_FORMAT_VERSION,
    SHARDS,
    VOCAB,
    index_foreign_entries,
    shard_name,
    write_index_manifest,
    written_version,
)
from tapt.util.checks import path_text
from tapt.util.files import fsync_path, parents_of, real_path
from tapt.util.safety import check_output, check_usable, enclosing_index, is_tapt_index
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger(__name__)


LARGE_ROWS = 1_000_000  # embedding_dtype auto: float16 from this many records, or when sharded


def plan_shards(scan: CorpusScan, config: BuildConfig) -> list[list[int]]:
    """Consecutive groups of the scan's pieces (whole files, or byte ranges of a large line
    file; reading order kept, so global ids follow the files as in an unsharded build):
    `shards` groups of about equal record counts, or a new group whenever the next piece would
    take the group past `shard_size` records. Pieces whose record count is unknown (streams)
    count as the average of the others."""
    n = len(scan.pieces)
    known = [f.scanned.records for f in scan.pieces if f.scanned is not None
             and f.scanned.records is not None]
    fill = (sum(known) / len(known)) if known else 1.0
    sizes = [float(f.scanned.records) if f.scanned is not None and f.scanned.records is not None
             else fill for f in scan.pieces]
    if config.shard_size is not None:
        groups: list[list[int]] = [[]]
        total = 0.0
        for i, size in enumerate(sizes):
            if groups[-1] and total + size > int(config.shard_size):
                groups.append([])
                total = 0.0
            groups[-1].append(i)
            total += size
        return groups
    wanted = min(config.shards or 1, n)
    if wanted < (config.shards or 1):
        log.warning("%d shards asked for, but the corpus has %d input file(s) and piece(s) of "
                    "files (`piece_size`): a shard holds whole ones, so the index gets %d "
                    "shard(s)", config.shards, n, wanted)
    if wanted == 1:
        return [list(range(n))]
    cumulative = np.cumsum(sizes)
    total = float(cumulative[-1])
    groups, start = [], 0
    for g in range(1, wanted):
        target = total * g / wanted
        end = int(np.searchsorted(cumulative, target, side="left")) + 1
        end = max(end, start + 1)
        end = min(end, n - (wanted - g))   # leave at least one file per later group
        groups.append(list(range(start, end)))
        start = end
    groups.append(list(range(start, n)))
    return [g for g in groups if g]


def resolve_dtype(config: BuildConfig, scan: CorpusScan, shards: int) -> str:
    """`embedding_dtype` auto: float16 when the index has more than one shard or its corpus at
    least LARGE_ROWS records (half the disk and page cache; selections measured in
    docs/scale.md), else float32."""
    if config.embedding_dtype != "auto":
        return config.embedding_dtype
    records = scan.records
    return "float16" if shards > 1 or (records is not None and records >= LARGE_ROWS) \
        else "float32"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def scan_corpus(inputs: list[InputSpec], config: BuildConfig, runner: Executor | None = None
                ) -> CorpusScan:
    """The up-front scan of a build's or an add's inputs, read as `config` says, in tasks of
    `runner` (default: in this process; `scanning.scan_corpus`)."""
    from tapt.indexer.building.executors import LocalExecutor
    from tapt.indexer.building.scanning import scan_corpus as scan_in_tasks

    options = ReadOptions(config.text_field, config.doc_field, config.text_docs,
                          config.input_format, config.hf_split, config.strict,
                          config.invalid_utf8)
    return scan_in_tasks(inputs, options, runner or LocalExecutor(config.progress),
                         config.piece_size, TASK_BASE)


def pieces_identity(scan: CorpusScan) -> dict[str, Any]:
    """What a build's or add's fingerprint adds for files read in pieces: their byte ranges
    (nothing where none is split, as before pieces)."""
    spans = [[i, *p.span] for i, p in enumerate(scan.pieces) if p.span is not None]
    return {"pieces": spans} if spans else {}


def local_inputs(inputs: list[InputSpec] | CorpusScan) -> list[Path]:
    """The local paths among inputs (of a scan: every local file it reads); URLs, Hub datasets
    and standard input have no place on this disk to protect."""
    if isinstance(inputs, CorpusScan):
        return [f.source.local for f in inputs.files if f.source.local is not None]
    return [Path(path_text(spec, "corpus")) for spec in inputs if isinstance(spec, (str, Path))
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


def warn_invalid_utf8(records: int) -> None:
    """The warning of a build or add that read invalid UTF-8 as U+FFFD (`invalid_utf8`)."""
    if records:
        log.warning("%d record(s) held bytes that are not valid UTF-8 or NUL, read as U+FFFD "
                    "(--invalid-utf8 replace; counted in the manifest's invalid_utf8_records)",
                    records)


def replaceable_index(path: Path) -> bool:
    """A directory `--overwrite` may replace: a tapt index holding only what tapt wrote."""
    return is_tapt_index(path) and not index_foreign_entries(path)


def doc_field_joined_nothing(manifest: dict[str, Any]) -> bool:
    """Whether a build read with a `doc_field` joined no records: every record read is its own
    document (the field is absent everywhere: a misspelled name, most likely). Only known when
    every input's record count is (a streamed Hub dataset's is not)."""
    ingest, counts = manifest["ingest"], manifest["counts"]
    records = [f.get("records") for f in ingest.get("files", [])]
    if not ingest.get("doc_field") or not records or None in records:
        return False
    return counts["documents"] == sum(records) - counts.get("skipped_blank_records", 0)


def check_index_output(out: str | Path, inputs: list[InputSpec] | CorpusScan,
                       overwrite: bool) -> Path:
    """The output rule of `index build`: `out` is new, an empty directory, or (with `overwrite`)
    a tapt index holding nothing else; never an input, inside one, or around one; and no input
    is inside a tapt index. Returns `out` resolved."""
    inputs = corpus_paths(inputs)
    check_usable(out)
    target = real_path(out)
    if target.is_dir() and is_tapt_index(target):
        extra = index_foreign_entries(target)
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
    inputs: list[InputSpec], out: str | Path, encoder: Encoder | None,
    config: BuildConfig | None = None, executor: Executor | str | None = None,
    encoder_spec: Any = None,
) -> dict[str, Any]:
    """Build an index directory at `out` (resuming an interrupted build of it) and return its
    manifest.

    Args:
        inputs: Corpus files, folders, URLs or HubDataset specs.
        out: The index directory to create.
        encoder: The model, loaded in this process; None: loaded from `encoder_spec` once the
            corpus is scanned (a mistake in the corpus is refused before the model loads).
        config: The build's options.
        executor: What runs the stages (default: `config.executor`, "local").
        encoder_spec: How workers in other processes load the model (`executors.EncoderSpec`).

    Raises:
        OutputError: `out` may not be written (see `check_index_output`).
        StorageError: the disk filled up or refused a write (finished work is kept).
    """
    config = config or BuildConfig()
    if encoder is None and encoder_spec is None:
        raise InputError("give the model: an encoder, or the spec to load it from",
                         param="encoder")
    model_spec = encoder.spec if encoder is not None else encoder_spec.model
    model_dir = [model_spec] if model_spec and Path(model_spec).is_dir() else []
    check_index_output(out, [*inputs, *model_dir], config.overwrite)
    out = Path(os.path.abspath(out))    # the stages may run where the working directory differs
    with parents_of(out) as parent:    # those it makes are removed again if the build fails
        if not os.access(parent, os.W_OK):
            raise StorageError(f"cannot write into {parent}; choose a writable location")
        runner, owned = make_executor(executor or config.executor, config.progress)
        with contextlib.closing(runner) if owned else contextlib.nullcontext():
            return _build(inputs, out, parent, encoder, config, runner, encoder_spec)


def _build(inputs: list[InputSpec], out: Path, parent: Path, encoder: Encoder,
           config: BuildConfig, runner: Executor, encoder_spec: Any) -> dict[str, Any]:
    """`build_index` once the output is checked and the executor made."""
    scan = scan_corpus(inputs, config, runner)
    check_index_output(out, scan, config.overwrite)
    encoder = encoder if encoder is not None else encoder_spec.load()
    groups = plan_shards(scan, config)
    dtype = resolve_dtype(config, scan, len(groups))
    wanted = checkpoint.fingerprint({
        "inputs": scan.identity(),
        "model": [encoder.name, model_fingerprint(encoder), encoder.dim, encoder.max_length],
        "config": {k: v for k, v in vars(config).items()
                   if k not in ("overwrite", "restart", "progress", "index", "memory", "opq",
                                "strict", "executor", "batch_size", "embedding_dtype", "codes",
                                "piece_size")
                   and not (k == "invalid_utf8" and v == "error")},  # as builds before it
        "dtype": dtype, "groups": groups, **pieces_identity(scan),
        "store_format": INDEX_FORMAT_VERSION,
    })
    with checkpoint.BuildLock(out):
        work, plan = checkpoint.prepare_work_dir(out, wanted, config.restart)
        earlier = checkpoint.committed_rows(work) if plan is not None else 0  # resumed rows
        failures = checkpoint.keep_or_discard(
            work, "build", "building", "kept %s embedded sentences of this build in %s: run "
            "the same command again to resume", earlier, prepared=stages.PREPARED,
            disk_full=lambda committed: f"disk full while building {out}; {committed:,} "
            "sentences are committed: free space and run the same command again to resume")
        with failures:
            workers = Workers.of(runner, encoder, config.part_size)
            if plan is None:     # a new build: refused before anything is prepared
                plan_before_prepare(scan, groups, encoder.dim, config, work, dtype, workers)
                plan = checkpoint.Plan(wanted, [{"name": shard_name(i), "files": g}
                                                for i, g in enumerate(groups)], dtype)
            else:
                plan.sessions += 1
                log.info("resuming the build in %s: %s sentences embedded", work,
                         f"{checkpoint.committed_rows(work):,}")
            checkpoint.write_plan(work, plan)
            start = time.perf_counter()
            source = EncoderSource(encoder, encoder_spec)
            planned: dict[str, Any] = {}

            def before_embed(rows: dict[str, int], pending: list[int]) -> TaskMemory:
                planned["choice"], planned["plan"] = plan_build(
                    sum(rows.values()), encoder.dim, config, work, pending,
                    plan.embedding_dtype, [stages.shard_path(work, n) for n in rows],
                    part_rows=max(rows.values(), default=0) or None, workers=workers)
                return planned["plan"].tasks()

            built = run_stages(work, scan, plan, config, runner, source, encoder.dim,
                               before_embed=before_embed,
                               prepare_memory=task_memory(None, 0, encoder.dim, workers).prepare)
            if built.rows == 0:
                raise InputError("the corpus holds no sentences")
            choice = planned["choice"]
            memory = planned["plan"].tasks()
            results, shared = index_stages(work, built, choice, config.codes, runner, dtype,
                                           run=plan.fingerprint, memory=memory)
            manifest = publish(work, built, results, shared, choice, config, scan, inputs,
                               encoder, plan, time.perf_counter() - start,
                               runner=runner, build_plan=planned["plan"])
            if out.exists() or out.is_symlink():
                check_index_output(out, [], config.overwrite)  # still ours after the long build
                old = parent / f".{out.name}.old-{os.getpid()}"
                os.replace(out, old)
                os.replace(work, out)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(work, out)
            remember_index(out, manifest)  # hashed as written: later opens need not hash again
            return manifest


def plan_before_prepare(scan: CorpusScan, groups: list[list[int]], dim: int,
                        config: BuildConfig, work: Path, dtype: str, workers: Workers) -> None:
    """Refuse, before anything is read again, a build whose plan cannot fit even at the scan's
    record counts (a lower bound of its sentences: `plan_build(before_prepare=True)`): its
    FAISS part, a task a node cannot hold, the disk. Skipped where a streamed input's count is
    not known."""
    counts = [[scan.pieces[i].scanned.records for i in g] for g in groups]
    if not counts or any(c is None for group in counts for c in group):
        return
    shard_records = [sum(group) for group in counts]
    if sum(shard_records):
        plan_build(sum(shard_records), dim, config, work, shard_records, dtype,
                   part_rows=max(shard_records), workers=workers, before_prepare=True)


@dataclass
class Built:
    """The shards a build or add holds after prepare, embed and assemble."""

    names: list[str]            # every shard with rows, in row order (an add's old ones first)
    row_offsets: list[int]
    prepared: dict[str, dict[str, Any]]
    embedded: dict[str, dict[str, Any]]
    new: list[str]              # the shards this build or add made
    base_rows: int = 0
    rows: int = 0               # every shard's rows


def run_stages(work: Path, scan: CorpusScan, plan: checkpoint.Plan, config: BuildConfig,
               runner: Executor, source: EncoderSource, dim: int,
               old: list[tuple[str, int]] = (), dedupe_against: tuple[str, ...] = (),
               before_embed: Callable[[dict[str, int], list[int]], TaskMemory | None]
               | None = None, prepare_memory: int = 0) -> Built:
    """Prepare, embed and assemble the plan's shards (skipping finished ones); `old`: (name,
    rows) of the shards an add appends to, whose rows come first; `dedupe_against`: shard
    directories whose documents are skipped (an add), one shard after another;
    `before_embed({new shard: rows}, [rows of each shard not embedded yet])`: called once every
    shard is prepared and before anything is embedded (the build's plan and its checks; it
    returns the memory of the later stages' tasks); `prepare_memory`: a prepare task's."""
    shard_root = work / SHARDS
    shard_root.mkdir(exist_ok=True)
    for leftover in shard_root.glob(".*.preparing-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    run = plan.fingerprint
    tasks = [stages.PrepareTask(str(work), s["name"], tuple(scan.pieces[i] for i in s["files"]),
                                scan.options, config.split,
                                records=sum(scan.pieces[i].scanned.records or 0
                                            for i in s["files"]), run=run,
                                segment_size=config.segment_size)
             for s in plan.shards]
    prepare = Stage("prepare", stages.prepare_shard, unit="rec", weight=lambda t: t.records or 1,
                    memory=prepare_memory)
    prepared = {t.shard: r for t in tasks
                if (r := stages.prepared_record(work, t.shard, run)) is not None}  # resumed
    if dedupe_against:   # an add: each new shard skips the index's documents, in parallel
        tasks = [dataclasses.replace(t, dedupe_against=tuple(dedupe_against)) for t in tasks]
    todo = [t for t in tasks if t.shard not in prepared]
    prepared.update(zip([t.shard for t in todo], runner.map(prepare, todo)))
    if dedupe_against and len(tasks) > 1:
        _skip_repeats(work, tasks, prepared, runner, prepare)
    for name, p in prepared.items():
        if p["rows"] == 0:   # a shard of blank or duplicate documents holds nothing: not kept
            shutil.rmtree(stages.shard_path(work, name), ignore_errors=True)
    new = [s["name"] for s in plan.shards if prepared[s["name"]]["rows"] > 0]
    pending = [name for name in new if not stages.run_record(
        stages.shard_path(work, name) / stages.EMBEDDED, run, work)]
    memory = None
    if before_embed is not None:
        memory = before_embed({name: int(prepared[name]["rows"]) for name in new},
                              [int(prepared[name]["rows"]) for name in pending])
    window = max(1, config.part_size)
    embed_tasks, assemble_tasks = [], []
    for name in pending:
        rows = int(prepared[name]["rows"])
        parts = math.ceil(rows / window)
        for p in range(parts):
            if not stages.run_record(stages.part_record_path(work, name, p), run, work):
                embed_tasks.append(stages.EmbedTask(str(work), name, p, p * window,
                                                    min(rows, (p + 1) * window),
                                                    config.batch_size, plan.embedding_dtype,
                                                    run))
        assemble_tasks.append(stages.AssembleTask(str(work), name, parts, rows, dim,
                                                  plan.embedding_dtype, run))
    runner.map(Stage("embed", stages.embed_part, needs_encoder=True, unit="sent",
                     weight=lambda t: t.rows, memory=memory.embed if memory else 0,
                     steps_memory=memory.steps() if memory else (),
                     part_memory=memory.part if memory else 0), embed_tasks, source)
    runner.map(Stage("assemble", stages.assemble_shard, unit="shard",
                     memory=memory.assemble if memory else 0), assemble_tasks)
    embedded = {}
    for name in new:
        embedded[name] = stages.assemble_shard(stages.AssembleTask(  # the records (done: cheap)
            str(work), name, 0, int(prepared[name]["rows"]), dim, plan.embedding_dtype, run))
    names, offsets, at = [], [], 0
    for name, rows in old:
        names.append(name)
        offsets.append(at)
        at += rows
    base_rows = at
    for name in new:
        names.append(name)
        offsets.append(at)
        at += int(prepared[name]["rows"])
    return Built(names, offsets, prepared, embedded, new, base_rows, at)


def _skip_repeats(work: Path, tasks: list[stages.PrepareTask],
                  prepared: dict[str, dict[str, Any]], runner: Executor, prepare: Stage) -> None:
    """The new shards of an add, prepared in parallel against the index alone, that hold a
    document an earlier new shard holds too (`dedupe.repeated_documents`, one task) are
    prepared again, one after another, skipping the earlier new shards' documents as well: the
    documents a sequential add keeps (a document of several new shards stays in the first)."""
    repeats = runner.map(Stage("prepare", dedupe.repeated_documents, unit="index",
                               memory=prepare.memory),
                         [dedupe.RepeatsTask(str(work), tuple(t.shard for t in tasks))])[0]
    earlier = tuple(tasks[0].dedupe_against)
    for task, repeated in zip(tasks, repeats):
        if repeated:
            log.info("shard %s repeats %d document(s) of an earlier new shard: prepared again "
                     "without them", task.shard, repeated)
            shutil.rmtree(stages.shard_path(work, task.shard))  # this run's (its record's)
            redo = dataclasses.replace(task, dedupe_against=earlier)
            prepared[task.shard] = runner.map(prepare, [redo])[0]
        earlier += (str(stages.shard_path(work, task.shard)),)


@dataclass
class Shared:
    """What the shards of one index share: the FAISS template and the int8 code scales."""

    template: str | None = None
    template_sha256: str | None = None
    train_seconds: float = 0.0
    code_scale: list[float] | None = None


def index_stages(work: Path, built: Built, choice: IndexChoice, codes: str, runner: Executor,
                 dtype: str, shared: Shared | None = None,
                 keep_checksums: dict[str, dict[str, str]] | None = None, run: str = "",
                 memory: TaskMemory | None = None
                 ) -> tuple[dict[str, dict[str, Any]], Shared]:
    """Train what the new shards share (unless an add passes the index's own `shared`) and
    build each new shard's FAISS part; returns ({shard: index_shard result}, what was shared).
    `run`: the build's or add's fingerprint (its finished parts are reused); `memory`: what
    each task asks for (the plan's)."""
    if shared is None:
        trained = runner.map(Stage("train", stages.train_shared, unit="index",
                                   whole_node=True, memory=memory.train if memory else 0),
                             [stages.TrainTask(str(work), tuple(built.new), choice, codes,
                                               run=run)])[0]
        shared = Shared(trained["template"], trained["template_sha256"],
                        trained["train_seconds"], trained["code_scale"])
    template, template_sha, code_scale = shared.template, shared.template_sha256, \
        shared.code_scale
    tasks = [stages.IndexTask(str(work), name, built.row_offsets[built.names.index(name)],
                              choice, template, template_sha,
                              tuple(code_scale) if code_scale is not None else None,
                              built.prepared[name], built.embedded[name], dtype,
                              tuple(sorted((keep_checksums or {}).get(name, {}).items())), run)
             for name in built.new]
    results = runner.map(Stage("index", stages.index_shard, unit="shard", whole_node=True,
                               memory=memory.index if memory else 0), tasks)
    return {r["manifest"]["shard"]: r for r in results}, shared


def drop_training_files(work: Path) -> None:
    for leftover in (stages.TRAINED, stages.TRAIN_RECORD):
        (work / leftover).unlink(missing_ok=True)


def publish(work: Path, built: Built, results: dict[str, dict[str, Any]], shared: Shared,
            choice: IndexChoice, config: BuildConfig, scan: CorpusScan, inputs: list[InputSpec],
            encoder: Encoder, plan: checkpoint.Plan, seconds: float,
            runner: Executor | None = None, build_plan: BuildPlan | None = None
            ) -> dict[str, Any]:
    """Write the top manifest (last) into the work directory; returns it (`runner`: runs the
    calibration's per-shard tasks; `build_plan`: recorded as `build.plan`)."""
    shards = shard_entries(work, built.names, built.row_offsets, results, config.segment_size,
                           counted_segments(built))
    vocab_sha = top_vocabulary(work, built.names, runner=runner)
    t0 = time.perf_counter()
    faiss_info = calibrated_faiss(work, built.names, built.row_offsets, choice, built.rows,
                                  shared.train_seconds, config.progress, runner,
                                  memory=calibrate_memory(build_plan))
    calibrate_seconds = time.perf_counter() - t0
    faiss_info["bytes"] = sum(r["manifest"]["faiss"]["bytes"] for r in results.values())
    faiss_info["build_seconds"] = round(sum(r["manifest"]["faiss"]["seconds"]
                                            for r in results.values()), 2)
    tokens = sum(r["manifest"]["tokens"] for r in results.values())
    truncated = sum(r["manifest"]["truncated_sentences"] for r in results.values())
    if truncated:
        log.warning("%d of %d sentences are longer than the model's %d tokens and were truncated "
                    "for embedding", truncated, built.rows, encoder.max_length)
    replaced = sum(int(p.get("invalid_utf8_records", 0)) for p in built.prepared.values())
    warn_invalid_utf8(replaced)
    embed_seconds = sum(float(e.get("embed_seconds") or 0) for e in built.embedded.values())
    manifest = {
        "format": INDEX_FORMAT,
        "format_version": written_version(faiss_info),
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
            "invalid_utf8": config.invalid_utf8,
            "sources": [str(p) for p in inputs],
            "files": scan.manifest_files(),
        },
        "counts": {
            "files": len(scan.files),
            "documents": sum(s["documents"] for s in shards),
            "sentences": built.rows,
            "segments": sum(s["segments"] for s in shards),
            "tokens": tokens,
            "truncated_sentences": truncated,
            "skipped_blank_records": sum(int(p.get("skipped_blank_records", 0))
                                         for p in built.prepared.values()),
            "invalid_utf8_records": replaced,
        },
        "shards": shards,
        "faiss": faiss_info,
        "codes": codes_section(shared.code_scale),
        "files": {
            "embeddings": {"file": EMBEDDINGS, "dtype": plan.embedding_dtype,
                           "shape": [built.rows, encoder.dim]},
            "layout": f"{SHARDS}/NNNNNN/ (shard.json, text.lmdb, docs.npy, tokens.npy, "
                      "embeddings.npy, index.faiss, lexical ids); global row = the shard's "
                      "row_offset + its local row",
            "store_records": "CRC32 (big-endian) of local key + JSON, then the JSON",
            "vocabulary": VOCAB,
        },
        "lexical": {"tokens": r"\w+|[^\w\s] of the lowercased text",
                    "hash": "first 8 bytes (little-endian) of BLAKE2b of the word, UTF-8",
                    "vocabulary": int(len(np.load(work / VOCAB, mmap_mode="r")))},
        "build": {
            "seconds": round(seconds, 2),
            "embed_seconds": round(embed_seconds, 2),
            "faiss_seconds": faiss_info["build_seconds"],
            "sentences_per_second": round(built.rows / embed_seconds, 1) if embed_seconds
            else None,
            "peak_rss_mb": round(_peak_rss_mb(), 1),
            "device": encoder.device,
            "backend": getattr(encoder, "backend", "torch"),
            "dtype": getattr(encoder, "dtype", "float32"),
            "batch_size": config.batch_size or "auto",
            "window": config.part_size,
            "shards": len(shards),
            "sessions": plan.sessions,
            "calibrate_seconds": round(calibrate_seconds, 2),
            "plan": build_plan.record() if build_plan is not None else None,
        },
        "checksums": {VOCAB: vocab_sha, **quantizer_checksums(work, faiss_info)},
        "versions": library_versions(),
    }
    drop_training_files(work)
    fsync_path(work / SHARDS)
    return write_index_manifest(work, manifest)
