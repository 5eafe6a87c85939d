"""What the benchmarks over the labelled pool's seed tasks share (`sentence_only`,
`mixed_documents`, `neighbour_context`): their common arguments, the opened pool and the header
of their result files."""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tapt import Index

# internal: the labelled pool's seed sets, the tasks of every script sharing this
from tapt.bench.labelled_pool import SeedSet, read_seed_sets

# internal: bench recall's evaluation state (index, labels, views) the scripts cut with
from tapt.bench.recall import Shared

# internal: each row's label, the oracle of every task
from tapt.retriever.evaluation.oracle import sentence_labels

# internal: the results' version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--index, --seeds, --out, --sizes and --domains."""
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--seeds", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", default="100,2000")
    parser.add_argument("--domains", default=None)


@dataclass
class LabelledPool:
    """The labelled pool's index, every sentence's label, the recall benchmark's shared state
    and the seed sets of the asked domains."""

    index: Index
    labels: np.ndarray
    shared: Shared
    seed_sets: list[SeedSet]

    @classmethod
    def open(cls, args: argparse.Namespace, label_field: str = "domain") -> "LabelledPool":
        index = Index(args.index)
        labels = sentence_labels(index, label_field, progress=True)
        return cls(index, labels, Shared(index=index, labels=labels),
                   read_seed_sets(args.seeds, args.domains.split(",") if args.domains else None))


def result_header(module: str, argv: list[str] | None, index: Index) -> dict[str, Any]:
    """The first keys of a result file: when, the command that regenerates it, where and with
    what it ran, and the pool's rows."""
    return {
        "created": utc_now(),
        "command": f"python -m benchmarks.{module} " + shlex.join(
            sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()} {platform.processor() or platform.system()}, "
                   f"{os.cpu_count()} CPUs",
        "versions": library_versions(), "rows": index.n_sentences,
    }
