"""Seeded fuzz: random bytes flipped and files cut in a small index; every command answers
exactly as before or fails with exactly one `Error:` line (no signal, no traceback, no wrong
answer). See tests/support/index_fuzz.py; benchmarks/hostile_input.py runs a larger sample."""

from __future__ import annotations

import collections

import pytest

from index_fuzz import FILES, SHARDS, fuzz

FAILURES = ("WRONG", "TRACEBACK", "SIGNAL", "MESSY")
# With hashing on open turned off (as for files above the hashing limit without a cache), these
# files are guarded by structure, CRCs and the seal alone; embeddings.npy and index.faiss then
# rely on range, length and agreement checks, which a sign flip can pass (docs/reference/reliability.md).
# Lexical ids (like embeddings) are guarded by their checksums and range checks only.
STRUCTURAL = ("manifest.json", *(f"shards/{s}/{name}" for s in SHARDS for name in (
    "shard.json", "docs.npy", "tokens.npy", "text.lmdb/data.mdb")))


def _check(outcomes):
    bad = [o for o in outcomes if o.verdict in FAILURES]
    assert not bad, "\n".join(f"seed {o.seed} {o.command} [{o.damage}]: {o.verdict} {o.detail}"
                              for o in bad[:10])
    counts = collections.Counter(o.verdict for o in outcomes)
    assert counts["error"] > 0 and counts["same"] + counts["repaired"] > 0, counts


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def test_fuzz_every_file(base):
    # every file is checked on open, so a damaged index answers nothing; seed 15 damages an
    # index.faiss, which `index repair` rebuilds (the trial that answers again after damage)
    _check(fuzz(base, [*range(8), 15], files=FILES))


def test_fuzz_without_hashing_on_open(base):
    _check(fuzz(base, list(range(100, 110)), {"TAPT_HASH_ON_OPEN": "0"}, STRUCTURAL))


@pytest.mark.slow
def test_fuzz_many_trials(base):
    _check(fuzz(base, list(range(1000, 1150))))
    _check(fuzz(base, list(range(2000, 2150)), {"TAPT_HASH_ON_OPEN": "0"}, STRUCTURAL))
