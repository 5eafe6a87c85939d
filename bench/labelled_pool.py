"""The labelled-pool format of `tapt bench recall`, and seed subsets.

    POOL.jsonl(.gz)        one sentence per line: {"text": ..., "domain": ..., "doc": ..., "pos": ...}
    SEEDS_DIR/<domain>.jsonl.gz   seed sentences of one domain (same fields; never in the pool)
`domain` is the oracle label; consecutive records with the same `doc` form one document (in
`pos` order), which is what segments are cut from. The pool is indexed with `--no-split`.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tapt.errors import InputError


@dataclass(frozen=True)
class SeedSet:
    domain: str
    path: Path
    texts: list[str]


def read_seed_sets(seeds_dir: Path, domains: list[str] | None = None) -> list[SeedSet]:
    """Every `<domain>.jsonl(.gz)` of the seeds directory (or the listed domains), sorted."""
    files = sorted(list(seeds_dir.glob("*.jsonl.gz")) + list(seeds_dir.glob("*.jsonl")))
    if not files:
        raise InputError(f"{seeds_dir}: no <domain>.jsonl(.gz) seed files")
    out = []
    for path in files:
        domain = path.name.split(".")[0]
        if domains and domain not in domains:
            continue
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            texts = [json.loads(line)["text"] for line in fh if line.strip()]
        if not texts:
            raise InputError(f"{path}: no seed sentences")
        out.append(SeedSet(domain, path, texts))
    return out


def seed_subset(n_total: int, size: int, repeat: int) -> np.ndarray:
    """A seeded random subset of `size` seed sentences (all of them, in order, when size >= n)."""
    if size >= n_total:
        return np.arange(n_total)
    rng = np.random.default_rng(1000 * size + repeat)
    return np.sort(rng.choice(n_total, size=size, replace=False))
