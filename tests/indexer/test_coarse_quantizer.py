"""The IVF coarse quantizer: an HNSW graph over the centroids from HNSW_QUANTIZER_LISTS lists on,
stored once per index (format 4) while format 3 indexes with one in every part still open, add
and repair; and its k-means and row assignment through torch (the path a GPU without faiss-gpu
takes), run here on the CPU."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from conftest import HashingEncoder, write_labelled_corpus, write_task
from tapt.errors import IndexFormatError
from tapt.indexer.ann import coarse, index_choice
from tapt.indexer.ann import faiss_index as fi
from tapt.indexer.ann.ann_recall import ground_truth, recall_at_k
from tapt.indexer.ann.index_choice import choose_index
from tapt.indexer.building import reindex as reindex_module
from tapt.indexer.building.add import add_to_index
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.building.reindex import reindex
from tapt.indexer.building.repair import repair_index
from tapt.indexer.building.verify import verify_index
from tapt.indexer.index import Index
from tapt.indexer.store.manifest import QUANTIZER, read_index_manifest
from tapt.retriever.selections.make import SelectConfig, rank


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """~1,700 sentences in two input files (two shards), the hashing encoder, Flat."""
    base = tmp_path_factory.mktemp("coarse")
    write_labelled_corpus(base / "a.jsonl", docs_per_topic=30, seed=3)
    write_labelled_corpus(base / "b.jsonl", docs_per_topic=30, seed=4)
    write_task(base / "task.txt", "medical", n=40, seed=5)
    build_index([base / "a.jsonl", base / "b.jsonl"], base / "idx", HashingEncoder(),
                BuildConfig(segment_size=4, split=False, progress=False, part_size=512, shards=2))
    return base


@pytest.fixture()
def idx(built, tmp_path):
    out = tmp_path / "idx"
    shutil.copytree(built / "idx", out)
    return out


def _task(built) -> np.ndarray:
    texts = [line for line in (built / "task.txt").read_text().splitlines() if line]
    return HashingEncoder().encode(texts)


def _raw_part(idx, shard: str = "000000"):
    return fi.read_faiss_index(idx / "shards" / shard / "index.faiss")


def test_the_plan_takes_an_hnsw_quantizer_where_brute_force_dominates():
    small = choose_index(10_000_000, 384, "64G")
    below = choose_index(300_000_000, 384, "64G")       # 32,768 lists: brute force measured faster
    large = choose_index(600_000_000, 384, "64G")
    assert small.factory == "IVF8192,PQ192x4fs" and small.params["quantizer"] == "flat"
    assert below.factory == "IVF32768,PQ192x4fs" and below.params["quantizer"] == "flat"
    assert large.factory == "IVF65536_HNSW32,PQ192x4fs"
    assert large.params["quantizer"] == "hnsw" and large.params["shared_quantizer"]
    # the graph's links are counted in the estimate, once per held part
    flat_like = index_choice.ivfpq_bytes(600_000_000, 384, 65536, 192)
    assert large.estimated_bytes == flat_like + 65536 * (32 * 2 * 4 + 8 + 16)


def test_the_graph_is_searched_wider_from_131072_lists_on():
    """efSearch 64 when rows are added below 131,072 lists, 128 from there (measured: 96.8%
    of rows in their nearest of 262,144 lists at 64); a search takes at least twice nprobe."""
    at_1e9 = choose_index(1_000_000_000, 384, "64G")
    at_1e10 = choose_index(10_000_000_000, 384, "1T")
    assert at_1e9.params["nlist"] == 65536 and at_1e9.params["quantizer_efSearch"] == 64
    assert at_1e10.params["nlist"] == 262144 and at_1e10.params["quantizer_efSearch"] == 128
    assert coarse.search_ef(8, 65536) == 64 and coarse.search_ef(8, 262144) == 128
    assert coarse.search_ef(100, 262144) == 200


def test_an_ivf_index_stores_its_quantizer_once(idx, built, monkeypatch):
    monkeypatch.setattr(index_choice, "HNSW_QUANTIZER_LISTS", 16)
    exact, _ = rank(Index(idx), SelectConfig(method="knn", k=10), _task(built))
    manifest = reindex(idx, "ivfpq", progress=False)
    faiss_info = manifest["faiss"]
    assert manifest["format_version"] == 4 and "_HNSW32," in faiss_info["factory"]
    assert faiss_info["quantizer"]["file"] == QUANTIZER and (idx / QUANTIZER).is_file()
    assert faiss_info["quantizer"]["kind"] == "hnsw" and QUANTIZER in manifest["checksums"]
    for shard in ("000000", "000001"):
        assert coarse.stand_in(_raw_part(idx, shard))        # no quantizer in the part's file
    ix = Index(idx)
    assert all(coarse.attached(ix.faiss_part(i)) is ix.shared_quantizer for i in range(2))
    wide, _ = rank(ix, SelectConfig(method="knn", k=10, nprobe=1024), _task(built))
    assert wide.segments.tolist() == exact.segments.tolist()
    assert verify_index(idx).ok
    # a tapt that reads only format 3 refuses it (it would search parts without a quantizer)
    with pytest.raises(IndexFormatError, match="format version 4.*upgrade tapt"):
        read_index_manifest(idx, (3,))


def test_a_lost_or_damaged_quantizer_is_refused_and_repaired(idx, monkeypatch):
    monkeypatch.setattr(index_choice, "HNSW_QUANTIZER_LISTS", 16)
    reindex(idx, "ivfpq", progress=False)
    recorded = Index(idx).manifest["faiss"]
    (idx / QUANTIZER).write_bytes(b"\0" * recorded["quantizer"]["bytes"])
    with pytest.raises(IndexFormatError, match="quantizer.faiss does not match"):
        Index(idx).search(np.ones((1, 32), dtype=np.float32) / np.sqrt(32), 5)
    report = verify_index(idx)
    assert {f.check for f in report.findings if not f.ok} == {f"checksum {QUANTIZER}", "faiss"}
    (idx / QUANTIZER).unlink()
    with pytest.raises(IndexFormatError, match="quantizer.faiss is missing; run tapt index "
                                               "repair"):
        Index(idx)
    done = repair_index(idx, progress=False)
    assert "000000, 000001" in done[0] and verify_index(idx).ok
    assert Index(idx).manifest["faiss"]["params"] == recorded["params"]


def test_a_format_3_index_with_a_quantizer_in_every_part_opens_adds_and_reindexes(
        idx, built, tmp_path, monkeypatch):
    """An index an earlier tapt built (format 3: each IVF part holds its quantizer) is read as
    it is; an add keeps its layout, a reindex moves it to one stored quantizer."""
    chosen = choose_index

    def as_before(*args, **kwargs):
        choice = chosen(*args, **kwargs)
        return dataclasses.replace(choice, params={**choice.params, "shared_quantizer": False})

    monkeypatch.setattr(reindex_module, "choose_index", as_before)
    manifest = reindex(idx, "ivfpq", progress=False)
    assert manifest["format_version"] == 3 and "quantizer" not in manifest["faiss"]
    assert not (idx / QUANTIZER).exists() and not coarse.stand_in(_raw_part(idx))
    assert coarse.attached(Index(idx).faiss_part(0)) is None
    more = tmp_path / "more.jsonl"
    write_labelled_corpus(more, docs_per_topic=2, seed=11)
    added = add_to_index(idx, [more], HashingEncoder(), progress=False)
    assert added["format_version"] == 3 and "quantizer" not in added["faiss"]
    assert not coarse.stand_in(_raw_part(idx, "000002")) and verify_index(idx).ok
    exact = Index(idx).search(_task(built), 10, nprobe=1024)
    monkeypatch.undo()
    moved = reindex(idx, "keep", progress=False)
    assert moved["format_version"] == 4 and (idx / QUANTIZER).is_file()
    np.testing.assert_array_equal(Index(idx).search(_task(built), 10, nprobe=1024)[1], exact[1])


def _rows(n: int = 40_000, d: int = 64, seed: int = 13) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((200, d))
    rows = (centres[rng.integers(0, 200, n)] + 0.9 * rng.standard_normal((n, d))).astype(
        np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    queries = rows[rng.choice(n, 300, replace=False)] + 0.05 * rng.standard_normal(
        (300, d)).astype(np.float32)
    return rows, queries / np.linalg.norm(queries, axis=1, keepdims=True)


TORCH_RECALL_TOLERANCE = 0.02     # recall@10 after exact rescoring, nprobe 4 and 16


def test_torch_kmeans_and_assignment_match_faiss_within_the_tolerance(monkeypatch):
    """The torch path (a GPU without faiss-gpu), run on the CPU: an index of the same kind,
    whose recall after rescoring is FAISS's own path's within TORCH_RECALL_TOLERANCE (k-means
    starts from other seeds' points); from one trained template both adds write the same
    bytes (the same lists, ids and codes)."""
    import faiss

    rows, queries = _rows()
    choice = choose_index(len(rows), rows.shape[1], "1G", "ivfpq")
    _, truth = ground_truth(rows, queries, 10)
    recalls, templates = {}, {}
    for device in (None, "cpu"):
        monkeypatch.setattr(coarse, "torch_device", lambda device=device: device)
        template, _ = fi.train_template(rows, choice)
        part = fi.build_part(rows, choice, template, 0)
        assert type(part) is faiss.IndexIVFPQFastScan and part.ntotal == len(rows)
        info = {"factory": choice.factory, "kind": "ivfpq", "params": choice.params}
        recalls[device] = [recall_at_k(fi.knn_search(part, rows, queries, 10, info,
                                                     nprobe=p)[1], truth) for p in (4, 16)]
        templates[device] = template
    assert np.allclose(recalls[None], recalls["cpu"], atol=TORCH_RECALL_TOLERANCE), recalls
    assert min(recalls["cpu"]) >= 0.9
    written = []
    for device in (None, "cpu"):
        monkeypatch.setattr(coarse, "torch_device", lambda device=device: device)
        written.append(faiss.serialize_index(fi.build_part(rows, choice, templates[None], 0)))
    np.testing.assert_array_equal(written[0], written[1])


def test_the_torch_path_is_taken_only_with_a_gpu_and_without_faiss_gpu(monkeypatch):
    import faiss
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert coarse.torch_device() == "cuda"
    monkeypatch.setenv("TAPT_FAISS_GPU", "0")
    assert coarse.torch_device() is None
    monkeypatch.delenv("TAPT_FAISS_GPU")
    monkeypatch.setattr(faiss, "StandardGpuResources", object, raising=False)
    assert coarse.torch_device() is None             # faiss-gpu does both steps itself
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert coarse.torch_device() is None
    opq = faiss.index_factory(64, "OPQ16,IVF64,PQ16x4fs", faiss.METRIC_INNER_PRODUCT)
    assert not coarse.torch_handles(opq)             # OPQ keeps FAISS's own path
