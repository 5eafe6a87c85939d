"""What publishing a build or an add writes besides the FAISS calibration: the top manifest's
shard entries, the corpus vocabulary (in a task: the union reads every shard's vocabulary), the
int8 codes section, and what the plan gives the calibration's tasks."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tapt.indexer.building import stages
from tapt.indexer.building.build_plan import TASK_BASE, BuildPlan
from tapt.indexer.building.executor_base import Executor, Stage
from tapt.indexer.reading.lexical import write_union
from tapt.indexer.store.manifest import VOCAB
from tapt.util.files import sha256_file

VOCABULARY_BYTES = 512 << 20   # the union's buckets and blocks (`lexical.write_union`)


def shard_entries(work: Path, names: list[str], offsets: list[int],
                  results: dict[str, dict[str, Any]], segment_size: int,
                  counted: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The top manifest's list of shards: offsets, counts and the SHA-256 of each shard.json
    (`counted`: segments known already, by shard: counted by its prepare task, or an add's
    index's own; the others are cut here from the shard's document offsets)."""
    entries, doc_at, seg_at = [], 0, 0
    for name, offset in zip(names, offsets):
        m = results[name]["manifest"]
        segments = (counted or {}).get(name)
        if segments is None:
            segments = stages.segments_of(stages.shard_path(work, name), segment_size)
        entries.append({"name": name, "row_offset": offset, "rows": m["rows"],
                        "doc_offset": doc_at, "documents": m["documents"],
                        "segment_offset": seg_at, "segments": segments, "tokens": m["tokens"],
                        "shard_sha256": results[name]["sha256"]})
        doc_at += m["documents"]
        seg_at += segments
    return entries


def counted_segments(built: Any) -> dict[str, int]:
    """The segments each new shard's prepare task counted."""
    return {name: int(p["segments"]) for name, p in built.prepared.items() if "segments" in p}


@dataclass(frozen=True)
class VocabularyTask:
    """The corpus vocabulary of `names`' shards (and of `base`, an add's index's) into
    `work`'s `vocab.npy`."""

    work: str
    names: tuple[str, ...]
    base: bool = False


def write_vocabulary(task: VocabularyTask) -> str:
    """Write the corpus vocabulary (sorted union of the shards' word hashes, and the one
    `work` holds already where `base`: the vocabulary before an add) in bounded memory
    (`lexical.write_union`); its SHA-256."""
    work = Path(task.work)
    shards = (np.load(stages.shard_path(work, n) / VOCAB, mmap_mode="r")[2:] for n in task.names)
    base = [np.load(work / VOCAB, mmap_mode="r")] if task.base else []
    write_union(work / VOCAB, itertools.chain(base, shards))
    return sha256_file(work / VOCAB)


def top_vocabulary(work: Path, names: list[str], base: bool = False,
                   runner: Executor | None = None) -> str:
    """`write_vocabulary` in one task of `runner` (default: in this process): the union reads
    every shard's vocabulary, on a worker rather than the driver. Its SHA-256."""
    task = VocabularyTask(str(work), tuple(names), base)
    if runner is None:
        return write_vocabulary(task)
    return runner.map(Stage("publish", write_vocabulary, unit="index",
                            memory=TASK_BASE + VOCABULARY_BYTES), [task])[0]


def calibrate_memory(plan: BuildPlan | None) -> int:
    """What a calibration task asks for: the plan's (0 without one)."""
    return plan.task_memory.get("calibrate", 0) if plan is not None else 0


def codes_section(scale: list[float] | None) -> dict[str, Any] | None:
    """The top manifest's `codes`: int8 codes x scale approximate each embedding row."""
    if scale is None:
        return None
    return {"dtype": "int8", "file": "codes.npy", "scale": [float(x) for x in scale],
            "rule": "code = clip(round(x / scale), -127, 127) per dimension; scale = the "
                    "largest |x| of a seeded sample of rows / 127"}
