"""Approximate FAISS indexes (HNSW, IVF-PQ): recall at the calibrated defaults, exact rescoring in
knn, `tapt index reindex` / `recall`, verify and repair on them, and the CLI flags."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

import tapt.indexer.encoding.encoder
import tapt.indexer.index as index_module
from conftest import HashingEncoder, shard_checksums, shard_file, write_labelled_corpus, write_task
from tapt.cli import cli
from tapt.indexer.ann.ann_recall import ground_truth, recall_at_k, sample_queries
from tapt.indexer.ann.faiss_index import knn_search, read_faiss_index
from tapt.indexer.ann.index_choice import choose_index
from tapt.indexer.building.ann_build import build_faiss_index
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.building.reindex import reindex
from tapt.indexer.building.repair import repair_index
from tapt.indexer.building.verify import verify_index
from tapt.indexer.index import Index
from tapt.indexer.store.manifest import write_index_manifest
from tapt.retriever.scoring import arrays
from tapt.retriever.selections.make import SelectConfig, rank
from tapt.util.files import sha256_file


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    """4,000 unit vectors in 40 clusters (32 dims), memory-mapped like stored embeddings."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(40, 32))
    x = centers[rng.integers(0, 40, 4000)] + rng.normal(scale=0.6, size=(4000, 32))
    path = tmp_path_factory.mktemp("vectors") / "embeddings.npy"
    np.save(path, (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))
    return np.load(path, mmap_mode="r")


@pytest.mark.parametrize("kind", ["hnsw", "ivfpq"])
def test_approximate_index_reaches_recall_at_its_default(vectors, tmp_path, kind):
    choice = choose_index(len(vectors), 32, "1G", kind)
    info = build_faiss_index(vectors, tmp_path / "index.faiss", choice, progress=False)
    assert info["kind"] == kind and info["search"]["param"] == choice.search_param
    assert info["search"]["recall"] >= 0.96 and info["train"]["seed"] == 0
    index = read_faiss_index(tmp_path / "index.faiss")
    queries = sample_queries(vectors, 200, seed=7)
    _, truth = ground_truth(vectors, queries, 10)
    sims, ids = knn_search(index, vectors, queries, 10, info)
    assert recall_at_k(ids, truth) >= 0.9
    exact = np.einsum("qkd,qd->qk", np.asarray(vectors)[ids], queries)
    np.testing.assert_allclose(sims, exact, atol=1e-5)           # final scores are exact
    assert (np.diff(sims, axis=1) <= 1e-6).all()


@pytest.fixture(scope="module")
def big_index(tmp_path_factory):
    """~1,900 sentences with the hashing encoder (enough rows for IVF-PQ)."""
    base = tmp_path_factory.mktemp("big")
    write_labelled_corpus(base / "pool.jsonl", docs_per_topic=60, seed=3)
    write_task(base / "task.txt", "medical", n=40, seed=4)
    build_index([base / "pool.jsonl"], base / "idx", HashingEncoder(),
                BuildConfig(segment_size=4, split=False, progress=False, part_size=512))
    return base / "idx"


@pytest.fixture()
def idx(big_index, tmp_path):
    out = tmp_path / "idx"
    shutil.copytree(big_index, out)
    return out


@pytest.fixture()
def task_file(big_index):
    return big_index.parent / "task.txt"


def _task(path):
    return HashingEncoder().encode(path.read_text().splitlines())


def test_knn_through_an_approximate_index_equals_exact_knn(idx, task_file):
    task = _task(task_file)
    config = SelectConfig(method="knn", k=10)
    exact, _ = rank(Index(idx), config, task)
    assert Index(idx).manifest["faiss"]["kind"] == "flat"
    for kind, wide in (("ivfpq", {"nprobe": 1024}), ("hnsw", {"ef_search": 512})):
        reindex(idx, kind, progress=False)
        approx, _ = rank(Index(idx), SelectConfig(method="knn", k=10, **wide), task)
        assert approx.segments.tolist() == exact.segments.tolist(), kind
        np.testing.assert_allclose(approx.scores, exact.scores, atol=1e-6)
        default, _ = rank(Index(idx), config, task)       # the calibrated default, same top
        assert default.segments[:20].tolist() == exact.segments[:20].tolist(), kind


def test_reindex_keeps_the_faiss_type_unless_asked(idx):
    """`--codes int8` alone (the default `--index keep`) keeps an HNSW index HNSW with its
    memory budget; it used to fall back to auto (Flat at this size)."""
    reindex(idx, "hnsw", memory="64M", progress=False)
    before = Index(idx).manifest["faiss"]
    assert before["kind"] == "hnsw" and before["memory_budget_bytes"] == 64 * 2**20
    after = reindex(idx, codes="int8", progress=False)
    assert after["faiss"]["factory"] == before["factory"]
    assert after["faiss"]["memory_budget_bytes"] == before["memory_budget_bytes"]
    assert after["codes"]["dtype"] == "int8"
    assert reindex(idx, "auto", progress=False)["faiss"]["kind"] == "flat"


def test_reindex_round_trip_verify_and_repair(idx):
    before = Index(idx).manifest
    before_sums = shard_checksums(idx)
    for kind in ("ivfpq", "hnsw", "flat"):
        manifest = reindex(idx, kind, progress=False)
        faiss_info = manifest["faiss"]
        assert faiss_info["kind"] == kind and faiss_info["ntotal"] == before["counts"]["sentences"]
        assert manifest["uuid"] == before["uuid"]
        sums = shard_checksums(idx)
        assert sums["index.faiss"] == sha256_file(shard_file(idx, "index.faiss"))
        assert sums["embeddings.npy"] == before_sums["embeddings.npy"]
        assert not list(idx.parent.glob(".idx.*")), "reindex left a work directory"
        report = verify_index(idx)
        assert report.ok, [f for f in report.findings if not f.ok]
        if kind != "flat":
            assert "search" in faiss_info and faiss_info["previous"]
    reindex(idx, "ivfpq", progress=False)
    recorded = Index(idx).manifest["faiss"]
    shard_file(idx, "index.faiss").unlink()
    done = repair_index(idx, progress=False)
    assert done and recorded["factory"] in done[0]
    repaired = Index(idx).manifest["faiss"]
    assert (repaired["factory"], repaired["params"], repaired["train"]["sample"]) == (
        recorded["factory"], recorded["params"], recorded["train"]["sample"])
    assert verify_index(idx).ok


def test_old_flat_manifest_still_works(idx, task_file):
    manifest = json.loads((idx / "manifest.json").read_text())
    manifest["faiss"] = {k: manifest["faiss"][k] for k in ("factory", "metric", "ntotal", "file",
                                                           "bytes")}
    write_index_manifest(idx, manifest)  # as an older tapt wrote it, sealed
    ix = Index(idx)
    sims, ids = ix.search(_task(task_file), 5)
    assert ids.shape == (40, 5) and (ids >= 0).all()
    assert verify_index(idx).ok
    shard_file(idx, "index.faiss").unlink()
    assert repair_index(idx, progress=False) and verify_index(idx).ok


def test_centroid_scores_stream_float16_embeddings():
    rng = np.random.default_rng(2)
    rows = rng.normal(size=(1000, 16)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    query = arrays.centroid(rows[:10])
    half = arrays.centroid_scores(rows.astype(np.float16), query, chunk=300)
    assert half.dtype == np.float32
    np.testing.assert_allclose(half, rows @ query, atol=2e-3)


def test_float16_centroid_paths_agree_on_a_read_only_memmap(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(5000, 16)).astype(np.float32)   # not a multiple of the 2,048-row step
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    np.save(tmp_path / "e.npy", rows.astype(np.float16))
    mm = np.load(tmp_path / "e.npy", mmap_mode="r")
    query = arrays.centroid(rows[:10])
    exact = mm.astype(np.float32) @ query
    fast = arrays.centroid_scores(mm, query)                 # torch's cast
    monkeypatch.setitem(__import__("sys").modules, "torch", None)
    slow = arrays.centroid_scores(mm, query)                 # numpy's cast, no torch
    np.testing.assert_allclose(fast, exact, atol=1e-5)
    np.testing.assert_allclose(slow, exact, atol=1e-5)
    assert not mm.flags.writeable


def cli_run(*args):
    return CliRunner().invoke(cli, ["-q", *map(str, args)], catch_exceptions=False)


def test_cli_build_flags_and_errors(big_index, tmp_path, monkeypatch):
    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder", lambda *a, **k: HashingEncoder())
    pool = big_index.parent / "pool.jsonl"
    out = tmp_path / "hnsw-idx"
    result = cli_run("index", "build", pool, "--out", out, "--no-split", "--index", "hnsw",
                     "--memory", "512M")
    assert result.exit_code == 0, result.output
    assert "faiss HNSW32" in result.output
    faiss_info = Index(out).manifest["faiss"]
    assert faiss_info["memory_budget_bytes"] == 512 << 20 and faiss_info["requested"] == "hnsw"
    for bad in (["--memory", "8X"], ["--memory", "-1G"], ["--index", "annoy"]):
        result = cli_run("index", "build", pool, "--out", tmp_path / "no", "--no-split", *bad)
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert result.exit_code == 2 and len(errors) == 1, result.output
        assert not (tmp_path / "no").exists()
    result = cli_run("index", "reindex", out, "--index", "flat", "--memory", "1K")
    assert result.exit_code == 1 and result.output.startswith("Error: --memory: 1.0 KB is too small")
    assert result.output.count("\n") == 1


def test_cli_reindex_recall_info_and_search_flags(idx, task_file, tmp_path, monkeypatch):
    monkeypatch.setattr(index_module.Index, "load_encoder",
                        lambda self, model=None, device="auto", backend="auto": HashingEncoder())
    result = cli_run("index", "reindex", idx, "--index", "ivfpq")
    assert result.exit_code == 0 and "Flat -> IVF" in result.output, result.output
    assert "nprobe" in cli_run("index", "info", idx).output
    report = json.loads(cli_run("index", "recall", idx, "--queries", "50", "--k", "10",
                                "--values", "1,4,1024", "--json").output)
    assert report["param"] == "nprobe" and report["k"] == 10
    assert [r["value"] for r in report["sweep"]][-1] == 1024
    assert report["sweep"][-1]["recall"] >= 0.95
    assert "recall@10" in cli_run("index", "recall", idx, "--queries", "20", "--k", "10").output
    task = task_file
    ok = cli_run("select", "knn", idx, "--task", task, "--k", "5", "--nprobe", "8",
                 "--out", tmp_path / "sel.jsonl")
    assert ok.exit_code == 0, ok.output
    bad = cli_run("select", "knn", idx, "--task", task, "--ef-search", "64",
                  "--out", tmp_path / "bad.jsonl")
    assert bad.exit_code == 1 and bad.output.startswith("Error: --ef-search: does not apply")
    assert bad.output.count("\n") == 1 and not (tmp_path / "bad.jsonl").exists()
    zero = cli_run("select", "knn", idx, "--task", task, "--nprobe", "0", "--out",
                   tmp_path / "zero.jsonl")
    assert zero.exit_code == 1 and zero.output.startswith("Error: --nprobe"), zero.output


def test_add_keeps_the_requested_index_type(idx, tmp_path):
    from tapt.indexer.building.add import add_to_index

    reindex(idx, "hnsw", memory="256M", progress=False)
    more = tmp_path / "more.jsonl"
    write_labelled_corpus(more, docs_per_topic=2, seed=11)
    manifest = add_to_index(idx, [more], HashingEncoder(), progress=False)
    faiss_info = manifest["faiss"]
    assert faiss_info["kind"] == "hnsw" and faiss_info["requested"] == "hnsw"
    assert faiss_info["memory_budget_bytes"] == 256 << 20
    assert faiss_info["ntotal"] == manifest["counts"]["sentences"]
    assert verify_index(idx).ok


def test_float16_embeddings_select_verify_add_like_float32(tmp_path, labelled_corpus, medical_task):
    """float16 storage: half the bytes, same selections (up to ties), verify and add keep working."""
    from tapt.indexer.building.add import add_to_index
    from tapt.indexer.building.pipeline import BuildConfig, build_index
    from tapt.indexer.building.verify import verify_index
    from tapt.indexer.index import Index
    from tapt.retriever.selections.make import SelectConfig, rank
    from tapt.retriever.tasks.reading import load_task

    corpus, _ = labelled_corpus
    encoder = HashingEncoder()
    built = {}
    for dtype in ("float32", "float16"):
        build_index([corpus], tmp_path / dtype, encoder,
                    BuildConfig(progress=False, split=False, embedding_dtype=dtype))
        built[dtype] = Index(tmp_path / dtype)
    half, full = built["float16"], built["float32"]
    assert half.embeddings.dtype == np.float16 and half.manifest["files"]["embeddings"]["dtype"] == "float16"
    assert shard_file(tmp_path / "float16", "embeddings.npy").stat().st_size < \
        0.6 * shard_file(tmp_path / "float32", "embeddings.npy").stat().st_size
    assert verify_index(tmp_path / "float16").ok
    task = encoder.encode(load_task([str(medical_task)], split=False).sentences)
    for method in ("centroid", "knn", "iforest"):
        config = SelectConfig(method=method, budget="0.3", seed=0)
        picked = [set(rank(ix, config, task)[0].segments.tolist()) for ix in (half, full)]
        assert len(picked[0] & picked[1]) >= 0.9 * len(picked[1]), method
    extra = tmp_path / "extra.txt"
    extra.write_text("a brand new document about cardiology and a stent\n", encoding="utf-8")
    add_to_index(tmp_path / "float16", [extra], encoder, progress=False)
    grown = Index(tmp_path / "float16")
    assert grown.embeddings.dtype == np.float16 and grown.n_sentences == half.n_sentences + 1
    assert verify_index(tmp_path / "float16").ok


@pytest.mark.parametrize("factory", ["IVF16,Flat", "IVF16,PQ8x4fs", "IVF16,SQ8"])
def test_parts_with_one_quantizer_are_assigned_once_with_the_same_results(factory):
    """Parts trained as one index (a sharded build) are searched with one coarse assignment
    of the queries (`search_preassigned`): the same neighbours and similarities as searching
    each part on its own; parts with different quantizers keep the per-part search."""
    import faiss

    from tapt.indexer.ann.faiss_index import ShardedFaiss

    rng = np.random.default_rng(5)
    data = rng.standard_normal((3000, 32)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    template = faiss.index_factory(32, factory, faiss.METRIC_INNER_PRODUCT)
    template.train(data[:2000])
    parts = []
    for start in range(0, 3000, 1000):
        part = faiss.clone_index(template)
        part.add_with_ids(data[start:start + 1000], np.arange(start, start + 1000))
        part.nprobe = 4
        parts.append(part)
    queries = rng.standard_normal((50, 32)).astype(np.float32)
    shared = ShardedFaiss(parts, [0, 1000, 2000], global_ids=True)
    alone = ShardedFaiss(parts, [0, 1000, 2000], global_ids=True)
    alone._shared = False
    assert shared.shares_quantizer()
    got, want = shared.search(queries, 20), alone.search(queries, 20)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])

    other = faiss.index_factory(32, factory, faiss.METRIC_INNER_PRODUCT)
    other.train(data[1000:])                       # another quantizer: not shared
    other.add_with_ids(data[:10], np.arange(3000, 3010))
    other.nprobe = 4
    assert not ShardedFaiss(parts + [other], [0, 1000, 2000, 3000], True).shares_quantizer()


def test_merged_results_are_the_best_k_of_every_part_in_order():
    """`merge_topk` (a partition per query, then a sort of the best k) returns exactly what a
    two-key sort of every part's results returns: similarity descending, ties by ascending id,
    missing results (-1) last."""
    from tapt.indexer.ann.topk_merge import merge_topk

    rng = np.random.default_rng(10)
    for _trial in range(60):
        nq, parts = int(rng.integers(1, 6)), int(rng.integers(2, 5))
        results, base = [], 0
        for _ in range(parts):
            width = int(rng.integers(0, 30))
            sims = rng.integers(-3, 3, (nq, width)).astype(np.float32) / 2   # many ties
            ids = base + rng.permuted(np.tile(np.arange(width), (nq, 1)), axis=1)
            ids[rng.random((nq, width)) < 0.2] = -1
            sims[ids < 0] = -np.inf
            results.append((sims, ids.astype(np.int64)))
            base += 1000
        sims = np.concatenate([r[0] for r in results], axis=1)
        ids = np.concatenate([r[1] for r in results], axis=1)
        valid = ids >= 0
        full = np.lexsort((np.where(valid, ids, np.iinfo(np.int64).max),
                           -np.where(valid, sims, -np.inf)), axis=-1)
        for k in (1, 5, 17, 200):
            got_sims, got_ids = merge_topk(results, k)
            want = full[:, :k]
            np.testing.assert_array_equal(got_ids, np.take_along_axis(ids, want, axis=1))
            np.testing.assert_array_equal(got_sims, np.take_along_axis(sims, want, axis=1))


def test_merge_keys_and_fallback_agree():
    """The packed-key merge equals the two-key sort it replaces for near-ties of every kind
    (fast-scan similarities repeat, +0.0 and -0.0, ids far above 2^32 with a narrow spread);
    NaN, float64 and ids spread over 2^32 take the two-key sort and still rank NaN last."""
    from tapt.indexer.ann.topk_merge import _merge_lexsort, merge_topk

    rng = np.random.default_rng(11)
    for trial in range(200):
        nq, parts = int(rng.integers(1, 6)), int(rng.integers(1, 5))
        base = int(rng.choice([0, 10**10]))
        spread = 1000 if trial % 5 else 2**33            # every fifth: ids over 2^32 apart
        results = []
        for p in range(parts):
            width = int(rng.integers(0, 25))
            sims = rng.integers(-3, 3, (nq, width)).astype(np.float32) / 2
            sims[rng.random((nq, width)) < 0.1] = -0.0
            ids = base + p * spread + rng.permuted(np.tile(np.arange(width), (nq, 1)), axis=1)
            ids[rng.random((nq, width)) < 0.2] = -1
            sims[ids < 0] = -np.inf
            if trial % 7 == 0 and width:
                sims[0, 0] = np.nan
            if trial % 11 == 0:
                sims = sims.astype(np.float64)
            results.append((sims, ids.astype(np.int64)))
        width = sum(r[1].shape[1] for r in results)
        for k in (1, 4, 30):
            got_sims, got_ids = merge_topk(results, k)
            want_sims, want_ids = _merge_lexsort(results, min(k, width))
            np.testing.assert_array_equal(got_ids, want_ids)
            np.testing.assert_array_equal(got_sims, want_sims)
            assert (got_sims[got_ids < 0] == -np.inf).all()


def test_merging_in_groups_equals_one_merge():
    """Parts merged a few at a time (bounded memory at hundreds of shards) give the one-merge
    answer, ties and missing results included."""
    from tapt.indexer.ann.topk_merge import merge_in_groups, merge_topk

    rng = np.random.default_rng(12)
    for _trial in range(40):
        nq, parts = int(rng.integers(1, 5)), int(rng.integers(1, 12))
        results = []
        for p in range(parts):
            width = int(rng.integers(0, 9))
            sims = rng.integers(-2, 3, (nq, width)).astype(np.float32) / 2
            ids = p * 100 + rng.permuted(np.tile(np.arange(width), (nq, 1)), axis=1)
            ids[rng.random((nq, width)) < 0.2] = -1
            sims[ids < 0] = -np.inf
            results.append((sims, ids.astype(np.int64)))
        for k in (1, 3, 10):
            want = merge_topk(results, k)
            for group in (2, 3, 16):
                got = merge_in_groups(iter(results), k, group=group)
                np.testing.assert_array_equal(got[1], want[1])
                np.testing.assert_array_equal(got[0], want[0])


def test_faiss_gpu_steps_leave_the_cpu_index_they_would_build(tmp_path, monkeypatch):
    """With faiss-gpu and a GPU (simulated: a CPU copy stands in for every GPU index), k-means
    assignment and the adds' coarse assignment run on "the GPU" and the written index is the
    one a CPU build writes; the index keeps its own quantizer and no clustering index."""
    import faiss

    from tapt.indexer.ann import faiss_index as fi
    from tapt.indexer.ann.index_choice import choice_from_manifest

    handed = []

    def to_gpus(index):
        copy = faiss.clone_index(index)
        handed.append(copy)
        return copy

    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", to_gpus, raising=False)
    monkeypatch.setattr(faiss, "StandardGpuResources", object, raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    rng = np.random.default_rng(13)
    rows = rng.standard_normal((3000, 32)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    for factory in ("IVF32,Flat", "IVF32,PQ16x4fs"):
        choice = choice_from_manifest({"factory": factory}, len(rows), 32)
        assert fi.faiss_gpus() == 1
        template, _ = fi.train_template(rows, choice)
        part = fi.build_part(rows, choice, template, 0)
        assert len(handed) == 2            # the training's k-means, the adds' assignment
        ivf = faiss.extract_index_ivf(part)
        assert ivf.clustering_index is None
        assert all(int(ivf.quantizer.this) != int(h.this) for h in handed)
        gpu_bytes = faiss.serialize_index(part)
        monkeypatch.setenv("TAPT_FAISS_GPU", "0")
        assert fi.faiss_gpus() == 0
        template, _ = fi.train_template(rows, choice)
        cpu_bytes = faiss.serialize_index(fi.build_part(rows, choice, template, 0))
        assert len(handed) == 2
        np.testing.assert_array_equal(gpu_bytes, cpu_bytes)
        monkeypatch.delenv("TAPT_FAISS_GPU")
        handed.clear()
