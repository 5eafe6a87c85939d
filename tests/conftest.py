"""Shared fixtures: a deterministic fake encoder, small labelled corpora, a real-model index."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "data" / "sample"

TOPICS = {
    "medical": "patient fever tumour clinical dose therapy kidney liver syndrome cardiac lesion "
               "biopsy infection chronic acute symptom diagnosis muscle nerve tissue".split(),
    "legal": "licence copyright warranty liability contract clause party agreement notice "
             "permission redistribution patent damages terms software grant court".split(),
    "sea": "ship harbour sail wave captain anchor island storm tide crew deck ocean coral fish "
           "whale boat shore".split(),
}
COMMON = "the a of and to in is that with for on as by this it be".split()


class HashingEncoder:
    """Mean of per-word dense random vectors (seeded by the word's hash), L2-normalised.

    Deterministic and model-free; dense like a real encoder's output, so topics form blobs.
    """

    name = "hashing-test"
    spec = None
    max_length = 12
    device = "cpu"

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls = 0

    @property
    def weights_sha256(self) -> str:
        return hashlib.sha256(f"hashing-{self.dim}".encode()).hexdigest()

    def _word(self, word: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.md5(word.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).normal(size=self.dim)

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float64)
        for word in re.findall(r"\w+", text.lower()):
            vec += self._word(word)
        norm = np.linalg.norm(vec)
        return vec / norm if norm else vec

    def encode(self, texts, batch_size: int = 64) -> np.ndarray:
        self.calls += 1
        return np.asarray([self._vector(t) for t in texts], dtype=np.float32).reshape(-1, self.dim)

    def token_counts(self, texts) -> np.ndarray:
        return np.asarray([len(t.split()) + 2 for t in texts], dtype=np.int32)


def make_sentence(rng: random.Random, topic: str) -> str:
    words = [rng.choice(TOPICS[topic]) if rng.random() < 0.8 else rng.choice(COMMON)
             for _ in range(rng.randint(6, 12))]
    return " ".join(words).capitalize() + "."


def write_labelled_corpus(path: Path, docs_per_topic: int = 12, seed: int = 0) -> list[dict]:
    """JSONL, one sentence a record, documents of 1-20 sentences, topics interleaved by document."""
    rng = random.Random(seed)
    docs = [(t, i) for t in TOPICS for i in range(docs_per_topic)]
    rng.shuffle(docs)
    records = []
    for topic, i in docs:
        for pos in range(rng.randint(1, 20)):
            records.append({"text": make_sentence(rng, topic), "domain": topic,
                            "doc": f"{topic}:{i}", "pos": pos})
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
    return records


def write_task(path: Path, topic: str, n: int = 40, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    lines = [make_sentence(rng, topic) for _ in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


@pytest.fixture(scope="session", autouse=True)
def _task_cache(tmp_path_factory) -> None:
    """Task-embedding cache of this test session only (never the user's ~/.cache/tapt)."""
    os.environ["TAPT_CACHE_DIR"] = str(tmp_path_factory.mktemp("task-cache"))


@pytest.fixture()
def encoder() -> HashingEncoder:
    return HashingEncoder()


@pytest.fixture(scope="session")
def labelled_corpus(tmp_path_factory) -> tuple[Path, list[dict]]:
    path = tmp_path_factory.mktemp("corpus") / "pool.jsonl"
    return path, write_labelled_corpus(path)


@pytest.fixture(scope="session")
def fake_index(tmp_path_factory, labelled_corpus):
    """An index of the labelled corpus built with the hashing encoder (segments of 4)."""
    from tapt.indexer.build import BuildConfig, build_index

    out = tmp_path_factory.mktemp("idx") / "index"
    build_index([labelled_corpus[0]], out, HashingEncoder(),
                BuildConfig(segment_size=4, split=False, progress=False, window=64))
    return out


@pytest.fixture(scope="session")
def medical_task(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("task") / "medical.txt"
    write_task(path, "medical")
    return path


@pytest.fixture(scope="session")
def real_sample(tmp_path_factory) -> tuple[Path, Path]:
    """A 300-sentence prefix of the bundled real sample and 60 medical seed sentences."""
    base = tmp_path_factory.mktemp("real")
    pool, task = base / "pool.jsonl", base / "medical.jsonl"
    with gzip.open(SAMPLE / "pool.jsonl.gz", "rt", encoding="utf-8") as src, open(pool, "w") as out:
        for i, line in enumerate(src):
            if i >= 300:
                break
            out.write(line)
    with gzip.open(SAMPLE / "seeds" / "medical.jsonl.gz", "rt", encoding="utf-8") as src, \
            open(task, "w") as out:
        for i, line in enumerate(src):
            if i >= 60:
                break
            out.write(line)
    return pool, task
