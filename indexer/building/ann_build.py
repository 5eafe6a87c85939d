"""Building a FAISS index and calibrating its search: the step of a build (and of add and
reindex) that uses both `faiss_index` (the index types) and `ann_recall` (recall measured against
exact ground truth), above them.

The calibration of a sharded index runs shard by shard in the build's executor, nothing of a
shard on the driver: one task per shard computes the exact top-k of the query sample in it
(`shard_truth`), and one task per shard and candidate factor loads its FAISS part once and
searches it at every value of the sweep (`shard_sweep`), rescoring its candidates exactly from
its own rows. Each step's candidates are merged across shards as a search of the whole index
would merge them (the best `rescore_k` by their approximate similarity, ties by id, then the
best k of those by the exact one) through the executor's `reduce` (`ShardSweep`): on Ray, by
merge tasks on the cluster, so the driver receives one factor's merged candidates, whatever
the rows or the shards; in one process, shard after shard as they finish. The same recalls,
so the same calibration, as one process searching every part."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from tapt.indexer.ann.ann_recall import (
    CALIBRATION_K,
    calibration_queries,
    ground_truth,
    recall_at_k,
    reusable,
)
from tapt.indexer.ann.ann_recall import calibrate as calibrate_search
from tapt.indexer.ann.faiss_index import (
    FLAT_FACTORY,
    build_part,
    faiss_section,
    ids_are_global,
    read_faiss_index,
    read_quantizer,
    search_part,
    set_search_param,
    shares_quantizer,
    train_template,
    with_quantizer,
    write_faiss,
)
from tapt.indexer.ann.index_choice import IndexChoice, choice_from_manifest, rescore_k
from tapt.indexer.ann.rescore import Candidates, best_of, exact_of, exact_top, merge_candidates
from tapt.indexer.ann.topk_merge import merge_topk
from tapt.indexer.building import stages
from tapt.indexer.building.executor_base import MERGE_FANIN, Executor, Stage
from tapt.indexer.store.manifest import EMBEDDINGS, FAISS, QUANTIZER
from tapt.indexer.store.shards import RowView
from tapt.util.files import sha256_file

log = logging.getLogger(__name__)
# what a merge task of the calibration holds, in parts' results: the parts it is given, the
# merged result and the temporaries of one merge
MERGE_PARTS = MERGE_FANIN + 4


def _merge_stage(fn, part_bytes: int) -> Stage:
    """The calibration's merge stage of `Executor.reduce`: `fn` on results of `part_bytes`."""
    return Stage("calibrate", fn, unit="merge", memory=MERGE_PARTS * part_bytes)


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
                runner: Executor | None = None, memory: int = 0) -> np.ndarray:
    """The exact top-k ids of `queries` over every shard: one task per shard through `runner`
    (Ray: tasks in parallel over the cluster; local: one after another, FAISS's threads each),
    merged as they finish (ties by ascending id). `memory`: what a task asks for."""
    from tapt.indexer.building.executors import LocalExecutor

    runner = runner or LocalExecutor(progress=False)
    tasks = [TruthTask(str(work), name, int(offset), queries, int(k))
             for name, offset in zip(names, offsets)]
    merge = _merge_stage(partial(merge_topk, k=k), len(queries) * k * 12)  # float32 + int64
    return runner.reduce(Stage("calibrate", shard_truth, unit="shard", memory=memory), tasks,
                         merge)[1]


@dataclass(frozen=True)
class SweepTask:
    """One shard's part of the calibration sweep at one candidate factor.

    Attributes:
        work: The directory holding `shards/`.
        shard: The shard's name; row_offset: its first global row id.
        queries: The calibration queries (float32, L2-normalised).
        choice: The index's type (its search parameter and sweep).
        rows: Rows of the whole index (how many candidates a search fetches: `rescore_k`).
        k: The recall's k.
        factor: Candidates fetched per result (x k).
        quantizer: The index's `faiss.quantizer` record where its parts share one (None: each
            part holds its own).
    """

    work: str
    shard: str
    row_offset: int
    queries: np.ndarray
    choice: IndexChoice
    rows: int
    k: int
    factor: int
    quantizer: dict[str, Any] | None = None


def shard_sweep(task: SweepTask) -> list[Candidates]:
    """For each value of the sweep, the shard's `rescore_k` best candidates of every query by
    its FAISS part (loaded once), best first, with global ids, their approximate similarities
    and their exact ones from the shard's rows (`rescore.exact_topk`, every row checked)."""
    choice = task.choice
    directory = stages.shard_path(task.work, task.shard)
    part = read_faiss_index(directory / FAISS)
    if task.quantizer is not None:
        quantizer = read_quantizer(Path(task.work) / QUANTIZER, int(task.quantizer["lists"]),
                                   task.queries.shape[1], task.work)
        part = with_quantizer(part, quantizer, task.work, f"{task.shard}/{FAISS}")
    rows = np.load(directory / EMBEDDINGS, mmap_mode="r")
    width = rescore_k(task.k, choice.kind, task.rows, task.factor)
    base = 0 if ids_are_global(choice) else task.row_offset
    found = []
    for value in choice.search_sweep:
        set_search_param(part, choice.search_param, value)
        sims, ids = search_part(part, task.queries, width, base)
        found.append((ids, sims.astype(np.float32)))
    # one exact similarity per query and candidate, however many values found it
    exact = np.split(exact_of(rows, task.queries, np.concatenate([f[0] for f in found], axis=1),
                              offset=task.row_offset), len(found), axis=1)
    return [(ids, sims, e) for (ids, sims), e in zip(found, exact)]


class ShardSweep:
    """`steps` of `ann_recall.calibrate` computed shard by shard (see the module docstring):
    the first step asked at a factor runs one `SweepTask` per shard at that factor, whose
    candidates are merged per value as the tasks finish."""

    def __init__(self, work: Path, names: list[str], offsets: list[int], queries: np.ndarray,
                 truth: np.ndarray, choice: IndexChoice, rows: int, runner: Executor,
                 memory: int = 0, quantizer: dict[str, Any] | None = None) -> None:
        self.work, self.names, self.offsets = work, names, offsets
        self.quantizer = quantizer
        self.queries, self.truth, self.choice, self.rows = queries, truth, choice, rows
        self.runner, self.memory = runner, memory
        self.k = truth.shape[1]
        self._factor: int | None = None
        self._merged: list[Candidates] = []
        self.seconds = 0.0

    def __call__(self, factor: int, value: int) -> dict[str, Any]:
        if self._factor != factor:
            self._run(factor)
        found = self._merged[self.choice.search_sweep.index(value)]
        _, ids = exact_top(found, self.k)
        approx = best_of(found, self.k, 1)[0]          # the search's own top k, ranked
        return {"value": value, "recall": round(recall_at_k(ids, self.truth), 4),
                "raw_recall": round(recall_at_k(approx, self.truth), 4),
                "candidates": int(found[0].shape[1])}

    def _run(self, factor: int) -> None:
        width = rescore_k(self.k, self.choice.kind, self.rows, factor)
        tasks = [SweepTask(str(self.work), name, int(offset), self.queries, self.choice,
                           int(self.rows), int(self.k), int(factor), self.quantizer)
                 for name, offset in zip(self.names, self.offsets)]
        t0 = time.perf_counter()
        # ids, approximate and exact similarities of `width` candidates per query and value
        merge = _merge_stage(partial(merge_sweeps, width=width),
                             len(self.choice.search_sweep) * len(self.queries) * width * 16)
        stage = Stage("calibrate", shard_sweep, unit="shard", memory=self.memory)
        self._merged = self.runner.reduce(stage, tasks, merge)
        self._factor = factor
        self.seconds += time.perf_counter() - t0


def merge_sweeps(parts: list[list[Candidates]], width: int) -> list[Candidates]:
    """Several shards' `shard_sweep` candidates merged, value by value: the best `width` of
    each query by approximate similarity (`merge_candidates`: whatever the order of the parts,
    the same candidates)."""
    return [merge_candidates(found, width) for found in zip(*parts)]


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
                     previous: dict[str, Any] | None = None, memory: int = 0) -> dict[str, Any]:
    """The top manifest's `faiss` section, its search parameter calibrated on every shard.

    Args:
        work: The directory holding `shards/`.
        names: Every shard, in row order; offsets: their first global row ids.
        choice: The index's type.
        ntotal: Rows in all.
        train_seconds: Recorded in the section.
        progress: Show a progress bar.
        runner: Runs the calibration's tasks (the exact top-k of the sample and the sweep, one
            task per shard; default: in this process).
        previous: The `faiss` section of the generation an add builds on: its calibration is
            kept when it still holds (`ann_recall.reusable`: same factory, rows grown by at
            most GROWTH_SHARE), else the search is calibrated again on a new sample.
        memory: What each calibration task asks its executor for (the plan's).

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
    from tapt.indexer.building.executors import LocalExecutor

    runner = runner or LocalExecutor(progress=False)
    view = RowView([np.load(stages.shard_path(work, n) / EMBEDDINGS, mmap_mode="r")
                    for n in names])
    t0 = time.perf_counter()
    queries, _ = calibration_queries(view, choice)
    truth = exact_truth(work, names, offsets, queries, CALIBRATION_K, runner, memory)
    truth_seconds = time.perf_counter() - t0
    sweep = ShardSweep(work, names, offsets, queries, truth, choice, ntotal, runner, memory,
                       info.get("quantizer"))
    info = dict(info)
    info["search"] = calibrate_search(None, view, choice, progress=progress,
                                      truth=(queries, truth), steps=sweep)
    info["rescore"] = {**info["rescore"], "factor": info["search"]["rescore_factor"]}
    info["search"]["sample"]["truth_seconds"] = round(truth_seconds, 2)
    info["search"]["sample"]["parts"] = "shard by shard, each part loaded once per factor"
    return info
