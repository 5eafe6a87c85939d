"""Fault injection for index builds: a child build to kill, the kill loop, a row-for-row check.

Run as `python build_worker.py CORPUS[,CORPUS...] OUT [WINDOW] [DELAY] [SHARDS]` it is the child.

Builds with the deterministic hashing encoder, small parts, and a short sleep per part so that a
parent can kill it at random moments. Prints `committed ROWS` after every part's completion
record, so the parent can aim its kills into the middle of the build. Exits 0 once the index is
complete.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: conftest
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository

from conftest import HashingEncoder  # noqa: E402
from tapt.indexer.building import checkpoint  # noqa: E402
from tapt.indexer.building.pipeline import BuildConfig, build_index  # noqa: E402
from tapt.indexer.index import Index  # noqa: E402

WORKER = Path(__file__).resolve()

_commit = checkpoint.commit_part


def _announced_commit(path, record) -> None:
    _commit(path, record)
    work = Path(path).parents[3]
    sys.stdout.write(f"committed {checkpoint.committed_rows(work)}\n")
    sys.stdout.flush()


class SlowEncoder(HashingEncoder):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def encode(self, texts, batch_size: int = 64):
        time.sleep(self.delay)
        return super().encode(texts, batch_size)


def main(corpus: str, out: str, window: int = 32, delay: float = 0.01, shards: int = 1) -> None:
    checkpoint.commit_part = _announced_commit
    build_index(corpus.split(","), out, SlowEncoder(delay),
                BuildConfig(segment_size=4, split=False, progress=False, part_size=window,
                            batch_size=min(window, 64), shards=shards))


def assert_same_content(a: Path, b: Path) -> None:
    """Row for row, whatever the sharding: embeddings, token counts, document offsets, every
    stored record, lexical ids, FAISS rows and counts."""
    x, y = Index(a), Index(b)
    assert x.n_sentences == y.n_sentences
    np.testing.assert_array_equal(np.asarray(x.embeddings), np.asarray(y.embeddings))
    np.testing.assert_array_equal(np.asarray(x.tokens), np.asarray(y.tokens))
    np.testing.assert_array_equal(x.doc_offsets, y.doc_offsets)
    ids = range(x.n_sentences)
    assert x.store.records(ids) == y.store.records(ids)
    assert len(x.store) == len(y.store) == x.n_sentences
    assert x.faiss.ntotal == y.faiss.ntotal == x.n_sentences
    assert x.manifest["counts"] == y.manifest["counts"]
    rows = np.arange(x.n_sentences)
    for got, want in zip(x.lexicon.pairs(rows), y.lexicon.pairs(rows)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(x.lexicon.vocabulary, y.lexicon.vocabulary)


def assert_same_index(a: Path, b: Path) -> None:
    """`assert_same_content`, the same shards, and every file byte for byte (LMDB's bytes
    depend on its transaction history: its records are compared instead)."""
    assert_same_content(a, b)
    x, y = Index(a), Index(b)
    assert x.manifest["shards"] and [
        {k: v for k, v in s.items() if k != "shard_sha256"} for s in x.manifest["shards"]] == [
        {k: v for k, v in s.items() if k != "shard_sha256"} for s in y.manifest["shards"]]
    for sx, sy in zip(x.shards, y.shards):
        same = {k: v for k, v in sx.manifest["checksums"].items()
                if not k.startswith("text.lmdb")}
        assert same == {k: v for k, v in sy.manifest["checksums"].items() if k in same}, sx.name
    assert x.manifest["checksums"] == y.manifest["checksums"]


def kill_and_resume(corpus: Path | list[Path], out: Path, rng: random.Random, kills: int,
                    delay: float = 0.02, window: int = 32, shards: int = 1) -> list[int]:
    """Run the build in a child and SIGKILL it `kills` times, each at a random moment after a
    random number of its commits (so mid-write too), then let it finish. Returns the committed
    row counts seen just before each kill."""
    seen = []
    for attempt in range(kills + 1):
        corpora = ",".join(map(str, corpus if isinstance(corpus, list) else [corpus]))
        child = subprocess.Popen([sys.executable, str(WORKER), corpora, str(out), str(window),
                                  str(delay), str(shards)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        if attempt < kills:
            wanted, last = rng.randint(1, 3), None
            for _ in range(wanted):
                line = child.stdout.readline()
                if not line:
                    break
                last = int(line.split()[1])
            time.sleep(rng.uniform(0, delay * 1.5))
            child.send_signal(signal.SIGKILL)
            child.communicate()
            if last is not None:
                seen.append(last)
            continue
        _, err = child.communicate(timeout=120)
        if child.returncode != 0:
            raise AssertionError(f"worker failed: {err[-2000:]}")
    return seen


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], args[1], *([int(args[2])] if len(args) > 2 else []),
         *([float(args[3])] if len(args) > 3 else []), *([int(args[4])] if len(args) > 4 else []))
