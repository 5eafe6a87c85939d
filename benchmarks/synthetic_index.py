"""A real tapt index of synthetic rows, for selection benchmarks at sizes no encoder reaches here.

Every row is a point of a seeded mixture of `clusters` Gaussian blobs on the unit sphere (its
cluster's random unit centre + isotropic noise of norm ~`noise`, renormalised) with a seeded
synthetic sentence: words drawn from a Zipf distribution over a made-up vocabulary, a share of
them (`topic_share`) from its cluster's own Zipf-ranked topic words, so a cluster's sentences
share wording as its embeddings share direction.

The index is built by tapt's own build stages (`tapt.indexer.building.stages` through
`indexer.building.pipeline`), only the embed stage is replaced by the synthetic rows:

    corpus    the sentences, one `.jsonl` file per shard (one record = one sentence = one
              document), written under `WORK/corpus/` and removed once the index is built
    prepare   `stages.prepare_shard`: text store, document offsets, lexical ids
    embed     replaced: the rows are written as the shard's `embeddings.npy` (float16, as a
              sharded build stores them), `tokens.npy` (words + 2) and `embedded.json`
    train     `stages.train_shared` (through `pipeline.index_stages`): the FAISS template that
              `index_choice.choose_index` picks for the row count and `memory`, trained on a
              seeded sample across shards, and the int8 code scales
    index     `stages.index_shard`: each shard's FAISS part (global ids) and int8 codes
    publish   `pipeline.publish`: the search calibration (`nprobe` for recall@100 >= 0.95 after
              rescoring, as `tapt index build` calibrates it) and the top manifest

The result opens as a `tapt.indexer.index.Index` (`WORK/index`); the cluster of every row is kept
beside it (`WORK/labels.npy`, int32), for precision figures.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tapt import Index
from tapt.extend import Stage

# internal: the index built by tapt's own build stages from synthetic rows that no encoder embeds
from tapt.indexer.ann.index_choice import DEFAULT_MEMORY, choose_index
from tapt.indexer.building import stages
from tapt.indexer.building.checkpoint import Plan
from tapt.indexer.building.executors import LocalExecutor
from tapt.indexer.building.pipeline import (
    BuildConfig,
    Built,
    index_stages,
    plan_shards,
    publish,
    scan_corpus,
)

# internal: the built index recorded as verified, as a build does
from tapt.indexer.store.integrity import remember_index

# internal: the synthetic rows written into the shards' own files
from tapt.indexer.store.manifest import EMBEDDINGS, TOKENS, shard_name
from tapt.indexer.store.npy import NpyAppender, write_npy

# internal: those files written as tapt writes them (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

log = logging.getLogger("synthetic_index")
CHUNK = 1 << 18
MADE = "made.json"
MARK = ".tapt-synthetic-index"   # marks a work directory this module made (all of it is ours)


@dataclass(frozen=True)
class Spec:
    """Everything that decides the synthetic index (recorded in `WORK/made.json`)."""

    rows: int
    shards: int
    dim: int = 384
    clusters: int = 2000
    noise: float = 1.2
    seed: int = 0
    vocab: int = 50_000
    topic_words: int = 100
    topic_share: float = 0.3
    zipf: float = 1.1
    min_words: int = 6
    max_words: int = 24
    memory: str = DEFAULT_MEMORY


def centres(spec: Spec) -> np.ndarray:
    """The clusters' unit centres."""
    out = np.random.default_rng(spec.seed).standard_normal((spec.clusters, spec.dim),
                                                           dtype=np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def blob_rows(rng: np.random.Generator, centre_rows: np.ndarray, labels: np.ndarray,
              noise: float) -> np.ndarray:
    """Unit rows near the centres of `labels`."""
    dim = centre_rows.shape[1]
    x = centre_rows[labels] + rng.standard_normal((len(labels), dim), dtype=np.float32) * (
        noise / np.sqrt(dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _letters(n: int) -> str:
    """Bijective base-26 numeral of n >= 1 in lowercase letters (a, b, .., z, aa, ab, ..)."""
    out = []
    while n > 0:
        n, r = divmod(n - 1, 26)
        out.append(chr(97 + r))
    return "".join(reversed(out))


class Sentences:
    """The synthetic sentence generator of a spec: its vocabulary, the general Zipf law over it,
    and each cluster's topic words."""

    def __init__(self, spec: Spec) -> None:
        rng = np.random.default_rng([spec.seed, 7])
        numbers = rng.choice(26 ** 4, size=spec.vocab, replace=False) + 27  # 2 to 4+ letters
        self.words = np.array([_letters(int(n)) for n in numbers], dtype=object)
        weights = 1.0 / np.arange(1, spec.vocab + 1) ** spec.zipf
        self.general = np.cumsum(weights / weights.sum())
        topic = 1.0 / np.arange(1, spec.topic_words + 1) ** spec.zipf
        self.topic = np.cumsum(topic / topic.sum())
        self.topics = rng.integers(0, spec.vocab, size=(spec.clusters, spec.topic_words))
        self.spec = spec

    def make(self, rng: np.random.Generator, labels: np.ndarray) -> tuple[list[str], np.ndarray]:
        """One sentence per label, and the number of words of each."""
        spec = self.spec
        lengths = rng.integers(spec.min_words, spec.max_words + 1, size=len(labels))
        owner = np.repeat(labels, lengths)
        general = np.minimum(np.searchsorted(self.general, rng.random(len(owner))),
                             spec.vocab - 1)
        rank = np.minimum(np.searchsorted(self.topic, rng.random(len(owner))),
                          spec.topic_words - 1)
        ids = np.where(rng.random(len(owner)) < spec.topic_share, self.topics[owner, rank],
                       general)
        tokens = self.words[ids].tolist()
        ends = np.cumsum(lengths).tolist()
        starts = [0] + ends[:-1]
        return [" ".join(tokens[a:b]) for a, b in zip(starts, ends)], lengths


class SyntheticModel:
    """What `pipeline.publish` records of the model that embedded the rows: here, none (the rows
    are synthetic; the fingerprint names the spec)."""

    spec = None
    max_length = 128
    device = "cpu"
    backend = "synthetic"

    def __init__(self, spec: Spec) -> None:
        self.name = f"synthetic-blobs-{spec.clusters}x{spec.dim}"
        self.dim = spec.dim
        self.weights_sha256 = hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()
                                             ).hexdigest()


def _write_corpus(work: Path, spec: Spec, sentences: Sentences) -> tuple[list[Path], np.ndarray]:
    """Each shard's sentences (`corpus/NNNNNN.jsonl`) and rows (`corpus/NNNNNN.emb.npy`,
    `NNNNNN.tok.npy`); returns the files and every row's cluster."""
    corpus = work / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed + 100)
    centre_rows = centres(spec)
    per = -(-spec.rows // spec.shards)
    files, labels_all = [], []
    for s in range(spec.shards):
        n = min(per, spec.rows - s * per)
        name = shard_name(s)
        with atomic_write(corpus / f"{name}.jsonl", "w") as text, \
                NpyAppender(corpus / f"{name}.emb.npy", np.float16, (spec.dim,)) as emb, \
                NpyAppender(corpus / f"{name}.tok.npy", np.int32, ()) as tok:
            for start in range(0, n, CHUNK):
                labels = rng.integers(0, spec.clusters, size=min(CHUNK, n - start))
                emb.append(blob_rows(rng, centre_rows, labels, spec.noise).astype(np.float16))
                lines, lengths = sentences.make(rng, labels)
                text.write("".join(f'{{"text": "{line}"}}\n' for line in lines))
                tok.append((lengths + 2).astype(np.int32))
                labels_all.append(labels.astype(np.int32))
        files.append(corpus / f"{name}.jsonl")
        log.info("synthetic shard %s: %s rows written", name, f"{n:,}")
    return files, np.concatenate(labels_all)


def make_index(work: Path, spec: Spec, progress: bool = False, model: Any = None
               ) -> dict[str, Any]:
    """Build `work/index` for `spec` (skipped when `work/made.json` records the same spec and
    model); returns the made.json record (spec, seconds per step, bytes per file). `model`: the
    encoder the manifest records (default: none, `SyntheticModel`); a real one of `spec.dim`
    dimensions lets requests give their task as sentences, embedded by it (the rows stay
    synthetic)."""
    model = model if model is not None else SyntheticModel(spec)
    done = work / MADE
    if work.is_dir() and any(work.iterdir()) and not (work / MARK).is_file():
        raise SystemExit(f"Error: {work} is not empty and was not made by this benchmark; give "
                         "another --work")
    if done.is_file():
        made = json.loads(done.read_text())
        if (made.get("spec") == asdict(spec) and made.get("model", f"synthetic-blobs-"
                f"{spec.clusters}x{spec.dim}") == model.name and (work / "index").is_dir()):
            return made
    if (work / "index").exists() or done.exists():
        raise SystemExit(f"Error: {work} holds a synthetic index of another spec; give another "
                         "--work (or remove that directory)")
    work.mkdir(parents=True, exist_ok=True)
    (work / MARK).touch()
    building = work / "index.building"
    if building.exists():   # an interrupted run of this function: its own directory
        shutil.rmtree(building)
    shutil.rmtree(work / "corpus", ignore_errors=True)
    building.mkdir(parents=True)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    files, labels = _write_corpus(work, spec, Sentences(spec))
    seconds["generate"] = time.perf_counter() - t0
    config = BuildConfig(split=False, doc_field=None, shards=spec.shards, progress=progress,
                         embedding_dtype="float16", codes="int8", memory=spec.memory)
    scan = scan_corpus([str(f) for f in files], config)
    groups = plan_shards(scan, config)
    plan = Plan(hashlib.sha256(json.dumps(asdict(spec)).encode()).hexdigest(),
                [{"name": shard_name(i), "files": g} for i, g in enumerate(groups)], "float16")
    runner = LocalExecutor(progress)
    t0 = time.perf_counter()
    tasks = [stages.PrepareTask(str(building), s["name"], tuple(scan.pieces[i] for i in s["files"]),
                                scan.options, False) for s in plan.shards]
    prepared = dict(zip([t.shard for t in tasks], runner.map(
        Stage("prepare", stages.prepare_shard, unit="shard"), tasks)))
    seconds["prepare"] = time.perf_counter() - t0
    names, offsets, embedded, at = [], [], {}, 0
    for s in plan.shards:
        name = s["name"]
        directory = stages.shard_path(building, name)
        rows = int(prepared[name]["rows"])
        tokens = np.load(work / "corpus" / f"{name}.tok.npy")
        if rows != len(tokens):
            raise RuntimeError(f"shard {name}: prepare kept {rows} of {len(tokens)} sentences")
        os.replace(work / "corpus" / f"{name}.emb.npy", directory / EMBEDDINGS)
        with atomic_write(directory / TOKENS, "wb") as fh:
            write_npy(fh, tokens)
        embedded[name] = {"rows": rows, "tokens": int(tokens.sum()), "truncated": 0,
                          "embed_seconds": 0.0}
        write_json_atomic(directory / stages.EMBEDDED, embedded[name])
        names.append(name)
        offsets.append(at)
        at += rows
    built = Built(names, offsets, prepared, embedded, list(names), 0, at)
    choice = choose_index(at, spec.dim, spec.memory, "auto", seed=spec.seed)
    log.info("faiss index: %s", choice.reason)
    t0 = time.perf_counter()
    results, shared = index_stages(building, built, choice, "int8", runner, "float16")
    seconds["train_and_index"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    manifest = publish(building, built, results, shared, choice, config, scan,
                       [str(f) for f in files], model, plan, 0.0)
    seconds["calibrate_and_publish"] = time.perf_counter() - t0
    os.replace(building, work / "index")
    remember_index(work / "index", manifest)
    shutil.rmtree(work / "corpus")
    with atomic_write(work / "labels.npy", "wb") as fh:
        write_npy(fh, labels)
    made = {"spec": asdict(spec), "model": model.name, "factory": choice.factory,
            "reason": choice.reason,
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "train_seconds": manifest["faiss"]["train"].get("seconds"),
            "bytes": Index(work / "index").disk_bytes()}
    write_json_atomic(done, made)
    return made
