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

from tapt.extend import register_encoder

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


@register_encoder
class HashingEncoder:
    """Mean of per-word dense random vectors (seeded by the word's hash), L2-normalised.

    Deterministic and model-free; dense like a real encoder's output, so topics form blobs.
    Registered as the model "hashing-test": an index built with it loads it by that name.
    """

    name = "hashing-test"
    spec = None
    max_length = 12
    device = "cpu"

    def __init__(self, dim: int = 64, device: str = "cpu", backend: str = "auto") -> None:
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


def loading(monkeypatch, encoder, name: str = HashingEncoder.name) -> None:
    """Loading the model `name` gives this very `encoder` (a test counting its calls)."""
    from tapt.indexer.encoding.registered import ENCODERS

    ENCODERS.load()
    monkeypatch.setitem(ENCODERS.by_name, name, lambda **_: encoder)


def shard_file(index: Path, name: str, shard: int | str = 0) -> Path:
    """A file of one shard of an index (`shard_file(idx, "embeddings.npy")`: shard 000000's)."""
    label = shard if isinstance(shard, str) else f"{shard:06d}"
    return Path(index) / "shards" / label / name


def shard_checksums(index: Path, shard: int | str = 0) -> dict[str, str]:
    """The checksums a shard's `shard.json` records."""
    return json.loads(shard_file(index, "shard.json", shard).read_text())["checksums"]


def reseal_shard(index: Path, shard: int | str = 0, **changes) -> None:
    """Record new checksums (name=sha256 pairs) in a shard's `shard.json` and seal it and the top
    manifest again, as a careful forger would (what tapt must still catch by its other checks)."""
    from tapt.indexer.store.manifest import (
        read_index_manifest,
        write_index_manifest,
        write_shard_manifest,
    )

    path = shard_file(index, "shard.json", shard)
    manifest = json.loads(path.read_text())
    manifest["checksums"].update(changes)
    _, sha = write_shard_manifest(path.parent, manifest)
    top = read_index_manifest(Path(index))
    for entry in top["shards"]:
        if entry["name"] == path.parent.name:
            entry["shard_sha256"] = sha
    write_index_manifest(Path(index), top)


def make_legacy(index: Path, version: int) -> None:
    """Turn a one-shard index into one as tapt wrote format `version` (1 or 2): one directory,
    no shards or lexical ids; format 1 without record checksums or a sealed manifest."""
    import shutil

    from tapt.indexer.index import Index
    from tapt.indexer.store.manifest import write_index_manifest
    from tapt.indexer.store.text_store import TextStoreWriter
    from tapt.util.files import sha256_file

    index = Path(index)
    ix = Index(index)
    records = ix.store.records(range(ix.n_sentences))
    manifest = json.loads(json.dumps(ix.manifest))
    shard = ix.shards[0].manifest
    del ix
    for name in ("embeddings.npy", "tokens.npy", "docs.npy", "index.faiss", "text.lmdb"):
        shutil.move(str(shard_file(index, name)), str(index / name))
    shutil.rmtree(index / "shards")
    (index / "vocab.npy").unlink()
    checksums = {k: v for k, v in shard["checksums"].items()
                 if k in ("embeddings.npy", "tokens.npy", "docs.npy", "index.faiss",
                          "text.lmdb/data.mdb")}
    if version == 1:
        shutil.rmtree(index / "text.lmdb")
        writer = TextStoreWriter(index / "text.lmdb", checksummed=False)
        writer.put_many(0, records)
        writer.close()
        checksums["text.lmdb/data.mdb"] = sha256_file(index / "text.lmdb" / "data.mdb")
    for key in ("shards", "codes", "lexical", "self_sha256", "same_content_as"):
        manifest.pop(key, None)
    manifest["format_version"] = version
    manifest["faiss"].pop("part_ids", None)
    manifest["faiss"]["bytes"] = shard["faiss"]["bytes"]
    manifest["files"] = {"embeddings": manifest["files"]["embeddings"], "tokens": "tokens.npy",
                         "documents": "docs.npy", "store": "text.lmdb", "faiss": "index.faiss",
                         **({"store_records": "CRC32 (big-endian) of key + JSON, then the JSON"}
                            if version == 2 else {})}
    manifest["checksums"] = checksums
    if version == 1:
        manifest["model"] = {k: v for k, v in manifest["model"].items()
                             if k not in ("fingerprint", "config")}
        (index / "manifest.json").write_text(json.dumps(manifest, indent=2))
    else:
        write_index_manifest(index, manifest)


def write_split_corpus(base: Path, parts: int = 3, docs_per_topic: int = 12, seed: int = 0
                       ) -> list[Path]:
    """The labelled corpus of `write_labelled_corpus`, cut at document boundaries into `parts`
    files (so an index of them can have `parts` shards)."""
    records = write_labelled_corpus(base / "whole.jsonl", docs_per_topic, seed)
    (base / "whole.jsonl").unlink()
    starts = [0] + [i for i in range(1, len(records)) if records[i]["doc"] != records[i - 1]["doc"]]
    cuts = [starts[round(len(starts) * k / parts)] for k in range(parts)] + [len(records)]
    paths = []
    for k in range(parts):
        path = base / f"part-{k}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for record in records[cuts[k]:cuts[k + 1]]:
                fh.write(json.dumps(record) + "\n")
        paths.append(path)
    return paths


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


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run fastest single-threaded, and do not fight other jobs for the cores
    (`pytestmark = pytest.mark.usefixtures("one_torch_thread")` in a module that trains)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
    from tapt.indexer.building.pipeline import BuildConfig, build_index

    out = tmp_path_factory.mktemp("idx") / "index"
    build_index([labelled_corpus[0]], out, HashingEncoder(),
                BuildConfig(segment_size=4, split=False, progress=False, part_size=64))
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
