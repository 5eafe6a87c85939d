"""The plan of a build or add (index type, RAM and disk checked before the embed stage, the
default memory budget from the machine) and the search calibration on a seeded sample (exact
top-k shard by shard, stored in the manifest, kept or redone by `index add`)."""

from __future__ import annotations

import shutil
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

from conftest import HashingEncoder, write_labelled_corpus, write_split_corpus
from tapt.errors import InputError
from tapt.indexer.ann import index_choice
from tapt.indexer.ann.ann_recall import GROWTH_SHARE, ground_truth, sample_queries
from tapt.indexer.building import ann_build
from tapt.indexer.building.add import add_to_index
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.index import Index
from tapt.util import machine

G = 1 << 30
Usage = namedtuple("Usage", "total used free")


def _config(**changes) -> BuildConfig:
    return BuildConfig(**{"segment_size": 4, "split": False, "progress": False, "part_size": 64,
                          "batch_size": 64, **changes})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "corpus.jsonl"
    write_labelled_corpus(path, docs_per_topic=12, seed=0)
    return path


def test_a_build_over_the_memory_budget_refuses_before_embedding(corpus, tmp_path):
    encoder = HashingEncoder()
    with pytest.raises(InputError) as refused:
        build_index([corpus], tmp_path / "idx", encoder, _config(memory="4K"))
    assert encoder.calls == 0                       # nothing was embedded
    assert refused.value.param == "memory" and "`memory`" in refused.value.message
    assert "\n" not in str(refused.value)
    with pytest.raises(InputError) as refused:      # a type asked for that does not fit
        build_index([corpus], tmp_path / "idx", encoder, _config(memory="4K", index="hnsw"))
    assert encoder.calls == 0 and "`index` ivfpq" in refused.value.message
    assert not (tmp_path / "idx").exists()


def test_a_build_over_the_free_disk_refuses_before_preparing(corpus, tmp_path, monkeypatch):
    """Planned from the scan's record counts first: nothing is read twice."""
    encoder = HashingEncoder()
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10 * G, 10 * G - 1000, 1000))
    with pytest.raises(InputError) as refused:
        build_index([corpus], tmp_path / "idx", encoder, _config())
    assert encoder.calls == 0 and "`out` on another disk" in refused.value.message
    assert refused.value.message.endswith("nothing was prepared")
    assert not list((tmp_path / ".idx.building").glob("shards/*"))


def test_a_build_over_the_free_disk_refuses_before_embedding(corpus, tmp_path, monkeypatch):
    """Where the scan's counts fit and the prepared sentences do not (here: the check before
    prepare left out), the plan made after prepare refuses, the prepared shards kept."""
    from tapt.indexer.building import pipeline

    encoder = HashingEncoder()
    monkeypatch.setattr(pipeline, "plan_before_prepare", lambda *args: None)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10 * G, 10 * G - 1000, 1000))
    with pytest.raises(InputError) as refused:
        build_index([corpus], tmp_path / "idx", encoder, _config())
    assert encoder.calls == 0 and "`out` on another disk" in refused.value.message
    assert "1000 B free" in refused.value.message and "\n" not in str(refused.value)
    assert refused.value.message.endswith("nothing was embedded")
    assert list((tmp_path / ".idx.building" / "shards").glob("*/prepared.json"))   # kept
    monkeypatch.undo()          # space again: the same command resumes from the prepared shards
    manifest = build_index([corpus], tmp_path / "idx", encoder, _config())
    plan = manifest["build"]["plan"]
    assert plan["rows"] == manifest["counts"]["sentences"] == plan["new_rows"]
    assert plan["factory"] == "Flat" and 0 < plan["disk_bytes"] <= plan["disk_free_bytes"]
    assert plan["ram_bytes"] == plan["index_bytes"] == plan["rows"] * 64 * 4


def test_a_task_no_node_can_hold_is_refused_before_preparing(corpus, tmp_path):
    """An executor whose largest node offers a task less than the plan's: refused before
    anything is read again, naming what makes the task smaller where an option does."""
    from tapt.indexer.building.build_plan import TASK_BASE, TaskMemory, check_tasks
    from tapt.indexer.building.executors import LocalExecutor

    class SmallNodes(LocalExecutor):
        def task_memory_limit(self):
            return TASK_BASE + (1 << 20)

    encoder = HashingEncoder()
    with pytest.raises(InputError) as refused:
        build_index([corpus], tmp_path / "idx", encoder, _config(),
                    executor=SmallNodes(progress=False))
    assert encoder.calls == 0 and refused.value.message.endswith("nothing was prepared")
    assert "a prepare task needs about" in refused.value.message
    assert not list((tmp_path / ".idx.building").glob("shards/*"))
    fits = TaskMemory(*([TASK_BASE] * 8))
    check_tasks(fits, TASK_BASE, "x")
    for step, param in (("index", "shard_size"), ("calibrate", "shard_size"),
                        ("train", "memory"), ("embed", "executor")):
        with pytest.raises(InputError) as refused:
            check_tasks(TaskMemory(**{**fits.record(), step: TASK_BASE + 1}), TASK_BASE, "x")
        assert refused.value.param == param and f"a {step} task" in refused.value.message


def test_the_default_memory_budget_follows_the_machine(corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(index_choice, "available_memory", lambda: 6 * G)
    budget, source = index_choice.memory_budget("auto")
    assert budget == int(6 * G * machine.MEMORY_SHARE) and "6.0 GB available" in source
    assert index_choice.memory_budget("2G") == (2 * G, "given")
    monkeypatch.setattr(index_choice, "available_memory", lambda: None)
    assert index_choice.memory_budget("auto")[0] == index_choice.FALLBACK_MEMORY
    monkeypatch.setattr(index_choice, "available_memory", lambda: 40_000)    # a tiny machine
    encoder = HashingEncoder()
    with pytest.raises(InputError, match="auto: 50% of 39.1 KB available"):
        build_index([corpus], tmp_path / "idx", encoder, _config())
    assert encoder.calls == 0
    monkeypatch.setattr(index_choice, "available_memory", lambda: 3 * G)
    manifest = build_index([corpus], tmp_path / "idx", encoder, _config())
    assert manifest["build"]["plan"]["memory_budget_bytes"] == int(3 * G * machine.MEMORY_SHARE)
    assert manifest["faiss"]["memory_budget_bytes"] == int(3 * G * machine.MEMORY_SHARE)


def test_available_memory_reads_meminfo_and_the_cgroup_limit(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n")
    assert machine._meminfo_available(str(meminfo)) == 8_000_000 * 1024
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("max\n")
    assert machine._cgroup_room(str(v2)) is None                  # no limit
    (v2 / "memory.max").write_text(f"{4 * G}\n")
    (v2 / "memory.current").write_text(f"{G}\n")
    assert machine._cgroup_room(str(v2)) == 3 * G
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{2 * G}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{G // 2}\n")
    assert machine._cgroup_room(str(tmp_path / "v1")) == 3 * G // 2
    monkeypatch.setattr(machine, "_meminfo_available", lambda: 8 * G)
    monkeypatch.setattr(machine, "_cgroup_room", lambda: 3 * G)
    assert machine.available_memory() == 3 * G                    # the smaller one


def test_cli_refusal_names_the_flag_and_json_shows_the_plan(corpus, tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    import tapt.indexer.encoding.encoder
    from tapt.cli import cli

    encoder = HashingEncoder()
    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder", lambda *a, **k: encoder)
    run = lambda *args: CliRunner().invoke(cli, ["-q", *map(str, args)],  # noqa: E731
                                           catch_exceptions=False)
    result = run("index", "build", corpus, "--out", tmp_path / "idx", "--no-split",
                 "--memory", "8K")
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 1 and len(errors) == 1, result.output
    assert errors[0].startswith("Error: --memory: 8.0 KB is too small") and "give --memory" \
        in errors[0] and encoder.calls == 0
    result = run("index", "build", corpus, "--out", tmp_path / "idx", "--no-split", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output.splitlines()[-1])["manifest"]["build"]["plan"]
    assert plan["memory_source"].startswith("auto: 50% of") and plan["kind"] == "flat"


# ----------------------------------------------------------------------------- calibration


@pytest.fixture(scope="module")
def hnsw_index(tmp_path_factory) -> tuple[Path, list[Path]]:
    base = tmp_path_factory.mktemp("calibrated")
    parts = write_split_corpus(base, parts=3, docs_per_topic=12, seed=0)
    out = base / "idx"
    build_index(parts, out, HashingEncoder(), _config(index="hnsw", shards=3))
    return out, parts


def test_calibration_is_stored_with_its_sample_and_deterministic(hnsw_index, tmp_path):
    out, parts = hnsw_index
    search = Index(out).manifest["faiss"]["search"]
    sample = search["sample"]
    rows = Index(out).n_sentences
    assert sample["rows"] == rows and sample["seed"] == 1 and sample["reused"] is False
    assert sample["queries"] == search["queries"] == min(200, rows)
    assert sample["factory"] == Index(out).manifest["faiss"]["factory"]
    again = build_index(parts, tmp_path / "again", HashingEncoder(),
                        _config(index="hnsw", shards=3))["faiss"]["search"]
    timing = ("truth_seconds", "sweep_seconds")
    assert {k: v for k, v in again.items() if k != "sample"} == \
        {k: v for k, v in search.items() if k != "sample"}
    assert {k: v for k, v in again["sample"].items() if k not in timing} == \
        {k: v for k, v in sample.items() if k not in timing}


def test_the_shard_by_shard_truth_equals_one_pass_over_every_row(hnsw_index):
    out, _ = hnsw_index
    index = Index(out)
    names = [s.name for s in index.shards]
    assert len(names) == 3
    view = np.asarray(index.embeddings, dtype=np.float32)
    queries = sample_queries(view, 50, seed=3)
    merged = ann_build.exact_truth(out, names, [s.row_offset for s in index.shards], queries, 20)
    _, whole = ground_truth(view, queries, 20)
    np.testing.assert_array_equal(np.sort(merged, axis=1), np.sort(whole, axis=1))



@pytest.fixture(scope="module")
def ivfpq_index(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("calibrated-ivfpq")
    parts = write_split_corpus(base, parts=3, docs_per_topic=60, seed=1)
    out = base / "idx"
    build_index(parts, out, HashingEncoder(), _config(index="ivfpq", shards=3))
    return out


@pytest.mark.parametrize("kind", ["hnsw", "ivfpq"])
def test_the_sweep_shard_by_shard_equals_one_search_of_every_part(kind, request):
    """The calibration's tasks (each shard's part loaded once per factor, its candidates
    rescored from its own rows, merged across shards) record what one process searching every
    part at once records: the same sweep, recalls and choice."""
    from tapt.indexer.ann.faiss_index import ShardedFaiss, ids_are_global
    from tapt.indexer.ann.index_choice import choice_from_manifest

    out = request.getfixturevalue("hnsw_index")[0] if kind == "hnsw" else \
        request.getfixturevalue("ivfpq_index")
    index = Index(out)
    names, offsets = [s.name for s in index.shards], [s.row_offset for s in index.shards]
    choice = choice_from_manifest(index.manifest["faiss"], index.n_sentences, index.dim)
    tasks = ann_build.calibrated_faiss(out, names, offsets, choice, index.n_sentences, 0.0,
                                       False)["search"]
    assert tasks["sample"]["parts"].startswith("shard by shard")
    parts = ShardedFaiss([index.faiss_part(i) for i in range(len(names))], offsets,
                         ids_are_global(choice))
    queries, _ = ann_build.calibration_queries(index.embeddings, choice)
    truth = ann_build.exact_truth(out, names, offsets, queries, 100)
    info = ann_build.faiss_section(choice, index.n_sentences, 0.0)
    whole = ann_build.calibrate_section(info, parts, index.embeddings, choice,
                                        truth=(queries, truth))["search"]
    assert len(tasks["sweep"]) > (1 if kind == "ivfpq" else 0)
    for key in ("sweep", "default", "recall", "rescore_factor"):
        assert tasks[key] == whole[key], key


def test_the_sweeps_merged_in_any_tree_are_the_same_candidates(ivfpq_index):
    """`merge_sweeps` as a reduce uses it (any grouping, any order: the tree of merge tasks on
    a cluster) keeps the same candidates as folding the shards in row order, ranked alike."""
    from tapt.indexer.ann.index_choice import choice_from_manifest, rescore_k
    from tapt.indexer.ann.rescore import best_of

    index = Index(ivfpq_index)
    choice = choice_from_manifest(index.manifest["faiss"], index.n_sentences, index.dim)
    queries, _ = ann_build.calibration_queries(index.embeddings, choice)
    width = rescore_k(100, choice.kind, index.n_sentences, 4)
    parts = [ann_build.shard_sweep(ann_build.SweepTask(
        str(ivfpq_index), s.name, s.row_offset, queries, choice, index.n_sentences, 100, 4))
        for s in index.shards]
    assert len(parts) == 3 and parts[0][0][0].shape[1] == width
    folded = ann_build.merge_sweeps([ann_build.merge_sweeps(parts[:2], width), parts[2]], width)
    tree = ann_build.merge_sweeps([parts[2], ann_build.merge_sweeps([parts[1], parts[0]], width)],
                                  width)
    at_once = ann_build.merge_sweeps(parts[::-1], width)
    for a, b, c in zip(folded, tree, at_once):
        for x, y, z in zip(best_of(a, width, 1), best_of(b, width, 1), best_of(c, width, 1)):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)


@pytest.mark.slow
def test_the_sweep_on_ray_merged_by_tasks_equals_the_local_one(ivfpq_index, monkeypatch):
    """The calibration on Ray, its candidates merged by merge tasks two at a time (a tree two
    levels deep over 3 shards), records the sweep and choice of the local calibration."""
    ray = pytest.importorskip("ray")
    from ray_worker import ship_by_value
    from tapt.indexer.ann.index_choice import choice_from_manifest
    from tapt.indexer.building.executors import ray_executor

    index = Index(ivfpq_index)
    names, offsets = [s.name for s in index.shards], [s.row_offset for s in index.shards]
    choice = choice_from_manifest(index.manifest["faiss"], index.n_sentences, index.dim)
    local = ann_build.calibrated_faiss(ivfpq_index, names, offsets, choice, index.n_sentences,
                                       0.0, False)["search"]
    monkeypatch.setattr(ray_executor, "MERGE_FANIN", 2)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        ship_by_value()
        remote = ann_build.calibrated_faiss(ivfpq_index, names, offsets, choice,
                                            index.n_sentences, 0.0, False,
                                            runner=ray_executor.RayExecutor(progress=False)
                                            )["search"]
    finally:
        ray.shutdown()
    for key in ("sweep", "default", "recall", "rescore_factor"):
        assert remote[key] == local[key], key


def test_a_sharded_index_is_sized_by_its_largest_part(hnsw_index, tmp_path):
    """The budget holds one shard's part, not the whole index: a build that fits part by part
    is made, with the calibration of the index held whole."""
    out, parts = hnsw_index
    held = Index(out)
    rows, largest = held.n_sentences, max(s.rows for s in held.shards)
    m = int(held.manifest["faiss"]["params"]["M"])
    part_bytes = index_choice.hnsw_bytes(largest, held.dim, m)
    assert part_bytes < index_choice.hnsw_bytes(rows, held.dim, m)
    choice = index_choice.choose_index(rows, held.dim, part_bytes, "hnsw", part_rows=largest)
    assert choice.part_rows == largest and choice.held_bytes == part_bytes
    assert "its largest part" in choice.reason
    with pytest.raises(InputError, match="is too small"):
        index_choice.choose_index(rows, held.dim, part_bytes, "hnsw")       # as one part
    manifest = build_index(parts, tmp_path / "parts", HashingEncoder(),
                           _config(index="hnsw", shards=3, memory=part_bytes))
    assert manifest["build"]["plan"]["part_rows"] == largest
    assert manifest["build"]["plan"]["index_bytes"] == part_bytes
    search, whole = manifest["faiss"]["search"], held.manifest["faiss"]["search"]
    assert search["sweep"] == whole["sweep"] and search["default"] == whole["default"]
    assert manifest["faiss"]["factory"] == held.manifest["faiss"]["factory"]


def _copy(index: Path, tmp_path: Path) -> Path:
    out = tmp_path / "idx"
    shutil.copytree(index, out)
    return out


def test_add_keeps_the_calibration_until_the_rows_grow_past_the_share(hnsw_index, tmp_path,
                                                                      monkeypatch):
    out = _copy(hnsw_index[0], tmp_path)
    before = Index(out).manifest["faiss"]["search"]
    calls = []
    truth = ann_build.exact_truth
    monkeypatch.setattr(ann_build, "exact_truth", lambda *a, **k: calls.append(1) or truth(*a, **k))
    small = tmp_path / "small.jsonl"
    write_labelled_corpus(small, docs_per_topic=1, seed=11)
    manifest = add_to_index(out, [small], HashingEncoder(), progress=False)
    grown = manifest["counts"]["sentences"]
    assert grown <= before["sample"]["rows"] * (1 + GROWTH_SHARE) and grown > \
        before["sample"]["rows"]
    assert calls == [] and manifest["history"][-1]["calibration"] == "kept"
    assert manifest["faiss"]["search"]["default"] == before["default"]
    assert manifest["faiss"]["search"]["sample"]["reused"] is True
    assert manifest["history"][-1]["plan"]["rows"] == grown
    big = tmp_path / "big.jsonl"
    write_labelled_corpus(big, docs_per_topic=12, seed=12)
    manifest = add_to_index(out, [big], HashingEncoder(), progress=False)
    assert calls == [1] and manifest["history"][-1]["calibration"] == "recalibrated"
    sample = manifest["faiss"]["search"]["sample"]
    assert sample["rows"] == manifest["counts"]["sentences"] and sample["reused"] is False


def test_an_add_over_the_free_disk_refuses_before_embedding(hnsw_index, tmp_path, monkeypatch):
    out = _copy(hnsw_index[0], tmp_path)
    before = (out / "manifest.json").read_bytes()
    more = tmp_path / "more.jsonl"
    write_labelled_corpus(more, docs_per_topic=2, seed=13)
    encoder = HashingEncoder()
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10 * G, 10 * G - 10, 10))
    with pytest.raises(InputError, match="the index's filesystem has 10 B free"):
        add_to_index(out, [more], encoder, progress=False)
    assert encoder.calls == 0 and (out / "manifest.json").read_bytes() == before


@pytest.mark.slow
def test_the_truth_tasks_run_on_ray_as_locally(hnsw_index):
    ray = pytest.importorskip("ray")
    from ray_worker import ship_by_value
    from tapt.indexer.building.executors.ray_executor import RayExecutor

    out, _ = hnsw_index
    index = Index(out)
    names, offsets = [s.name for s in index.shards], [s.row_offset for s in index.shards]
    queries = sample_queries(np.asarray(index.embeddings, dtype=np.float32), 40, seed=5)
    local = ann_build.exact_truth(out, names, offsets, queries, 30)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        ship_by_value()
        remote = ann_build.exact_truth(out, names, offsets, queries, 30,
                                       RayExecutor(progress=False))
    finally:
        ray.shutdown()
    np.testing.assert_array_equal(remote, local)
