"""Building a FAISS index and calibrating its search: the step of a build (and of add and
reindex) that uses both `faiss_index` (the index types) and `ann_recall` (recall measured against
exact ground truth), above them."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tapt.util.files import sha256_file

from . import stages
from .executor_base import Executor, Stage
from ..ann.ann_recall import CALIBRATION_K, calibration_queries, ground_truth, reusable
from ..ann.ann_recall import calibrate as calibrate_search
from ..ann.faiss_index import (FLAT_FACTORY, PartByPart, ShardedFaiss, build_part, faiss_section,
                               ids_are_global, read_faiss_index, read_quantizer,
                               shares_quantizer, train_template, with_quantizer, write_faiss)
from ..ann.topk_merge import merge_topk
from ..ann.index_choice import IndexChoice, choice_from_manifest
from ..store.manifest import EMBEDDINGS, QUANTIZER
from ..store.shards import RowView

log = logging.getLogger(__name__)


def calibrate_section(info: dict[str, Any], index, embeddings: np.ndarray, choice: IndexChoice,
                      progress: bool = False,
                      truth: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """`info` with the default search parameter calibrated on the whole (sharded) index
    (`truth`: the sample's queries and exact top-k, where computed shard by shard)."""
    if not choice.approximate:
        return info
    info = dict(info)
    info["search"] = calibrate_search(index, embeddings, choice, progress=progress, truth=truth)
    info["rescore"] = {**info["rescore"], "factor": info["search"]["rescore_factor"]}
    return info


@dataclass(frozen=True)
class TruthTask:
    """The exact top-k of the calibration queries within one shard (global row ids).

    Attributes:
        work: The directory holding `shards/`.
        shard: The shard's name.
        row_offset: Its first global row id.
        queries: The calibration queries (float32, L2-normalised).
        k: How many neighbours.
    """

    work: str
    shard: str
    row_offset: int
    queries: np.ndarray
    k: int


def shard_truth(task: TruthTask) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, global ids) of the exact top-k of `task.queries` in one shard, read from
    its memory-mapped embeddings block by block."""
    rows = np.load(stages.shard_path(task.work, task.shard) / EMBEDDINGS, mmap_mode="r")
    sims, ids = ground_truth(rows, task.queries, task.k)
    ids = np.where(ids >= 0, ids + task.row_offset, -1)
    return np.ascontiguousarray(sims, dtype=np.float32), ids.astype(np.int64)


def exact_truth(work: Path, names: list[str], offsets: list[int], queries: np.ndarray, k: int,
                runner: Executor | None = None) -> np.ndarray:
    """The exact top-k ids of `queries` over every shard: one task per shard through `runner`
    (Ray: tasks in parallel over the cluster; local: one after another, FAISS's threads each),
    merged (ties by ascending id)."""
    from .executors import LocalExecutor

    runner = runner or LocalExecutor(progress=False)
    tasks = [TruthTask(str(work), name, int(offset), queries, int(k))
             for name, offset in zip(names, offsets)]
    parts = runner.map(Stage("calibrate", shard_truth, unit="shard"), tasks)
    return merge_topk(parts, k)[1]


def build_faiss_index(embeddings: np.ndarray, path: Path, choice: IndexChoice | str = FLAT_FACTORY,
                      progress: bool = True, calibrate: bool = True) -> dict[str, Any]:
    """One FAISS index over all of `embeddings` (a one-shard index's part), trained, added,
    calibrated and written (fsynced) to `path`; returns its `faiss` section. `choice` may be a
    bare factory string (old manifests)."""
    n, dim = embeddings.shape
    if isinstance(choice, str):
        choice = choice_from_manifest({"factory": choice}, n, dim)
    t0 = time.perf_counter()
    template, train_seconds = train_template(embeddings, choice)
    index = build_part(embeddings, choice, template, 0, progress)
    info = faiss_section(choice, index.ntotal, train_seconds)
    if calibrate:
        info = calibrate_section(info, index, embeddings, choice, progress)
    info["file"] = path.name
    info["bytes"] = write_faiss(index, path)
    info["build_seconds"] = round(time.perf_counter() - t0, 2)
    return info


def quantizer_record(work: Path, choice: IndexChoice) -> dict[str, Any]:
    """The top manifest's `faiss.quantizer`: the coarse quantizer every part shares, stored
    once beside the manifest (its SHA-256 goes with the other checksums:
    `quantizer_checksums`)."""
    return {"file": QUANTIZER, "lists": int(choice.params["nlist"]),
            "kind": str(choice.params.get("quantizer", "flat")),
            "bytes": (work / QUANTIZER).stat().st_size}


def quantizer_checksums(work: Path, faiss_info: dict[str, Any]) -> dict[str, str]:
    """{QUANTIZER: its SHA-256} for a manifest's `checksums` where the index stores its
    quantizer once, else nothing."""
    return {QUANTIZER: sha256_file(work / QUANTIZER)} if faiss_info.get("quantizer") else {}


def calibrated_faiss(work: Path, names: list[str], offsets: list[int], choice: IndexChoice,
                     ntotal: int, train_seconds: float, progress: bool,
                     runner: Executor | None = None,
                     previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The top manifest's `faiss` section, its search parameter calibrated on every shard.

    Args:
        work: The directory holding `shards/`.
        names: Every shard, in row order; offsets: their first global row ids.
        choice: The index's type.
        ntotal: Rows in all.
        train_seconds: Recorded in the section.
        progress: Show a progress bar.
        runner: Runs the exact top-k of the calibration sample, one task per shard.
        previous: The `faiss` section of the generation an add builds on: its calibration is
            kept when it still holds (`ann_recall.reusable`: same factory, rows grown by at
            most GROWTH_SHARE), else the search is calibrated again on a new sample.

    Returns:
        The section.
    """
    info = faiss_section(choice, ntotal, train_seconds)
    if shares_quantizer(choice):
        info["quantizer"] = quantizer_record(work, choice)
    if not choice.approximate:
        return info
    old = (previous or {}).get("search")
    if reusable(old, choice, ntotal):
        info["search"] = {**old, "sample": {**old["sample"], "reused": True}}
        info["rescore"] = {**info["rescore"], "factor": int(old["rescore_factor"])}
        log.info("kept the calibrated %s = %s (calibrated on %s rows; %s now)", old["param"],
                 old["default"], f"{old['sample']['rows']:,}", f"{ntotal:,}")
        return info
    view = RowView([np.load(stages.shard_path(work, n) / EMBEDDINGS, mmap_mode="r")
                    for n in names])
    t0 = time.perf_counter()
    queries, _ = calibration_queries(view, choice)
    truth = exact_truth(work, names, offsets, queries, CALIBRATION_K, runner)
    truth_seconds = time.perf_counter() - t0
    paths = [stages.shard_path(work, n) / "index.faiss" for n in names]
    quantizer = (read_quantizer(work / QUANTIZER, info["quantizer"]["lists"], view.shape[1], work)
                 if "quantizer" in info else None)

    def part(i: int):
        return with_quantizer(read_faiss_index(paths[i]), quantizer, work)

    budget = choice.memory_budget_bytes
    if budget is None or sum(p.stat().st_size for p in paths) <= budget:
        searched = ShardedFaiss([part(i) for i in range(len(paths))], offsets,
                                ids_are_global(choice))
    else:   # the parts outgrow the budget: one at a time, as the index's own searches do
        searched = PartByPart(part, offsets, ids_are_global(choice))
    info = calibrate_section(info, searched, view, choice, progress, truth=(queries, truth))
    info["search"]["sample"]["truth_seconds"] = round(truth_seconds, 2)
    info["search"]["sample"]["parts"] = ("one at a time" if isinstance(searched, PartByPart)
                                         else "held")
    return info
