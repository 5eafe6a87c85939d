"""`tapt index reindex`: change an index's FAISS type (and int8 codes) from its stored embeddings,
no re-embedding.

Crash-safe like `tapt index add`: a new generation is written into a temporary directory
(`.NAME.reindexing`) that hard-links every other file of the index; there the FAISS template is
trained on a seeded sample across all shards and every shard's part is built (stages `train` and
`index`, run by an executor), its `shard.json` sealed again, the search calibrated on the whole,
and the new manifest written; then the new generation is swapped in with the index in one atomic
directory exchange (`generations`). A reader sees the old index or the new one, never a mix; a
killed reindex leaves the index untouched (the next reindex removes the leftover directory). Rows
and text do not change, so selections made before stay valid.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from tapt.errors import InputError
from tapt.indexer.ann.faiss_index import shares_quantizer
from tapt.indexer.ann.index_choice import DEFAULT_MEMORY, KINDS, IndexChoice, choose_index
from tapt.indexer.building import stages
from tapt.indexer.building.ann_build import calibrated_faiss, quantizer_checksums
from tapt.indexer.building.build_plan import TaskMemory, Workers, check_tasks, task_memory
from tapt.indexer.building.executors import Executor, make_executor
from tapt.indexer.building.generations import replace_generation
from tapt.indexer.building.pipeline import Built, Shared, drop_training_files, index_stages
from tapt.indexer.building.publishing import codes_section
from tapt.indexer.index import Index
from tapt.indexer.store.manifest import (
    CODES,
    FAISS,
    MANIFEST_NAME,
    QUANTIZER,
    SHARD_MANIFEST,
    SHARDS,
    read_shard_manifest,
    write_index_manifest,
    written_version,
)
from tapt.util.versions import utc_now

log = logging.getLogger(__name__)

CODE_CHOICES = ("keep", "none", "int8")


def rebuild_parts(index: Index, choice: IndexChoice, kind: str, progress: bool = True,
                  keep: tuple[str, ...] = (), extra: dict[str, Any] | None = None,
                  shards: list[str] | None = None, codes: str = "keep",
                  executor: Executor | str | None = None) -> dict[str, Any]:
    """Swap in a new generation of `index` whose FAISS parts (of `shards`, default all) are
    built as `choice` from the stored embeddings; `keep` names keys of the old `faiss` section
    carried over, `extra` is added to the new one. Parts not rebuilt keep their files; the
    template of rebuilt IVF parts is that of a kept part (the same quantizer), else trained
    again. Returns the new manifest (which lists the old one under `same_content_as`)."""
    old = index.manifest
    previous = index.manifest_sha256
    names = [s.name for s in index.shards]
    rebuild = list(names if shards is None else shards)
    if codes not in CODE_CHOICES:
        raise InputError(f"must be one of {', '.join(CODE_CHOICES)}", param="codes")
    codes = ("int8" if old.get("codes") else "none") if codes == "keep" else codes
    if codes == "int8" and not old.get("codes"):
        rebuild = list(names)   # new code scales: every shard gets codes
    skip = [MANIFEST_NAME] + [f"{SHARDS}/{n}/{f}" for n in rebuild
                              for f in (FAISS, SHARD_MANIFEST, CODES)]
    runner, owned = make_executor(executor, progress)
    memory = task_memory(choice, max(s.rows for s in index.shards), index.dim,
                         Workers(limit=runner.task_memory_limit()))
    try:
        check_tasks(memory, runner.task_memory_limit(), "the index is unchanged")
    except BaseException:
        if owned:
            runner.close()
        raise

    def write(work: Path) -> dict[str, Any]:
        kept = [n for n in names if n not in rebuild]
        shared = None
        if kept and codes == ("int8" if old.get("codes") else "none"):
            shared = _shared_from_kept(index, kept, choice, work)
        built = Built(names, [s.row_offset for s in index.shards],
                      {s.name: {"rows": s.rows, "documents": s.documents,
                                "duplicates": s.manifest.get("duplicate_documents_skipped", 0),
                                "skipped_blank_records": s.manifest.get(
                                    "skipped_blank_records", 0),
                                "invalid_utf8_records": s.manifest.get(
                                    "invalid_utf8_records", 0),
                                "files": s.manifest.get("input_files", [])}
                       for s in index.shards},
                      {s.name: {"tokens": s.manifest.get("tokens"),
                                "truncated": s.manifest.get("truncated_sentences", 0),
                                "embed_seconds": s.manifest.get("embed_seconds")}
                       for s in index.shards}, rebuild, 0, index.n_sentences)
        if shared is None:
            built_all = Built(**{**vars(built), "new": names})
            results, shared = _index_with_checksums(work, built_all, choice, codes, runner,
                                                    index, None, memory)
            # parts not asked for are rebuilt too when the template had to be trained again
        else:
            results, _ = _index_with_checksums(work, built, choice, codes, runner, index, shared,
                                               memory)
        if not shares_quantizer(choice):    # a quantizer in each IVF part, or no IVF at all
            (work / QUANTIZER).unlink(missing_ok=True)      # a link to the old generation's
        for name in names:
            if name not in results:
                path = work / SHARDS / name / SHARD_MANIFEST
                results[name] = {"manifest": read_shard_manifest(path.parent, index.path),
                                 "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        info = calibrated_faiss(work, names, [s.row_offset for s in index.shards], choice,
                                index.n_sentences, shared.train_seconds, progress, runner,
                                memory=memory.calibrate)
        for key in keep:
            if key in old.get("faiss", {}):
                info[key] = old["faiss"][key]
        info.update(extra or {})
        info["bytes"] = sum(r["manifest"]["faiss"]["bytes"] for r in results.values())
        info["build_seconds"] = round(sum(results[n]["manifest"]["faiss"].get("seconds", 0)
                                          for n in rebuild if n in results), 2)
        drop_training_files(work)
        manifest = dict(old)
        manifest["format_version"] = written_version(info)
        manifest["checksums"] = {**{k: v for k, v in (old.get("checksums") or {}).items()
                                    if k != QUANTIZER}, **quantizer_checksums(work, info)}
        manifest["faiss"] = info
        manifest["codes"] = codes_section(shared.code_scale)
        manifest["shards"] = [{**entry, "shard_sha256": results[entry["name"]]["sha256"]}
                              for entry in old["shards"]]
        manifest["same_content_as"] = list(old.get("same_content_as") or []) + [previous]
        return write_index_manifest(work, manifest)

    try:
        return replace_generation(index.path, kind, skip, write, based_on=previous)
    finally:
        if owned:
            runner.close()


def _index_with_checksums(work: Path, built: Built, choice: IndexChoice, codes: str,
                          runner: Executor, index: Index, shared: Shared | None,
                          memory: TaskMemory | None = None):
    """`index_stages` over `built.new`, reusing the recorded checksums of unchanged files
    (`memory`: what each task asks for)."""
    results, shared = index_stages(work, built, choice, codes, runner,
                                   index.manifest["files"]["embeddings"].get("dtype", "float32"),
                                   shared, keep_checksums={
                                       s.name: {k: v for k, v in s.extra["checksums"].items()
                                                if k not in (FAISS, CODES)}
                                       for s in index.shards}, memory=memory)
    return results, shared


def _shared_from_kept(index: Index, kept: list[str], choice: IndexChoice, work: Path
                      ) -> Shared | None:
    """The template of a kept IVF part (so rebuilt parts share its quantizer), or a Shared
    without template for types that need none; None when nothing can be reused."""
    from tapt.indexer.ann.faiss_index import template_of, write_faiss

    scale = (index.manifest.get("codes") or {}).get("scale")
    if choice.kind != "ivfpq":
        return Shared(None, None, 0.0, scale)
    if index.manifest.get("faiss", {}).get("factory") != choice.factory:
        return None
    part = index.faiss_part([s.name for s in index.shards].index(kept[0]))  # with its quantizer
    path = work / stages.TRAINED
    write_faiss(template_of(part), path)
    return Shared(str(path), hashlib.sha256(path.read_bytes()).hexdigest(), 0.0, scale)


def reindex(path: str | Path, index_type: str = "keep", memory: str | int | None = None,
            opq: bool = False, progress: bool = True, codes: str = "keep",
            executor: Executor | str | None = None) -> dict[str, Any]:
    """Rebuild the FAISS parts of `path` as `index_type` within `memory` (and its int8 codes:
    `codes` keep, none or int8); returns the manifest.

    Args:
        path: The index.
        index_type: keep (the index's current type, its memory budget and OPQ unless given),
            auto, flat, hnsw or ivfpq.
        memory: RAM budget for the FAISS index (default: the recorded one with keep, else
            DEFAULT_MEMORY).
        opq: IVF-PQ: rotate with OPQ before quantising.
        progress: Show progress bars.
        codes: keep, none or int8.
        executor: Where the parts are rebuilt (default: this process).

    Returns:
        The new manifest.
    """
    index = Index(path)  # friendly errors for a missing, damaged or foreign index
    recorded = index.manifest.get("faiss", {})
    if index_type == "keep":
        index_type = recorded.get("kind") if recorded.get("kind") in KINDS else "auto"
        opq = opq or str(recorded.get("factory", "")).startswith("OPQ")
        if memory is None:
            memory = recorded.get("memory_budget_bytes") or DEFAULT_MEMORY
    choice = choose_index(index.n_sentences, index.dim,
                          DEFAULT_MEMORY if memory is None else memory, index_type, opq=opq,
                          part_rows=max(s.rows for s in index.shards))
    log.info("reindexing %s: %s", path, choice.reason)
    previous = index.manifest.get("faiss", {}).get("factory")
    manifest = rebuild_parts(index, choice, "reindexing", progress, codes=codes,
                             extra={"reindexed": utc_now(), "previous": previous},
                             executor=executor)
    log.info("%s: %s -> %s", path, previous, manifest["faiss"]["factory"])
    return manifest
