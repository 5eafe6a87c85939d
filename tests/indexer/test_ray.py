"""The Ray executor and `tapt index serve` on a local 2-CPU Ray cluster (started once here).

Skipped when Ray is not installed (`pip install 'tapt[ray]'`; `make test` installs it).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tapt  # noqa: E402
from build_worker import assert_same_index  # noqa: E402
from conftest import HashingEncoder, write_split_corpus, write_task  # noqa: E402
from ray_worker import (  # noqa: E402
    CONFIG,
    WORKER,
    CrashingEncoder,
    add_where,
    pid_source,
    ship_by_value,
    square_where,
    with_faiss_threads,
)
from tapt.errors import TaptError  # noqa: E402
from tapt.indexer.building import checkpoint  # noqa: E402
from tapt.indexer.building.executors.ray_executor import ExecutorError, RayExecutor  # noqa: E402
from tapt.indexer.building.pipeline import BuildConfig, build_index  # noqa: E402
from tapt.indexer.index import Index  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    ship_by_value()
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    return [str(p) for p in write_split_corpus(tmp_path_factory.mktemp("ray-corpus"), parts=3,
                                               docs_per_topic=6)]


@pytest.fixture(scope="module")
def local_index(tmp_path_factory, corpus) -> Path:
    out = tmp_path_factory.mktemp("ray-local") / "idx"
    build_index(corpus, out, HashingEncoder(), BuildConfig(**CONFIG))
    return out


def _ray_build(corpus, out, encoder, **options):
    runner = RayExecutor(progress=False, **options)
    return build_index(corpus, out, encoder, BuildConfig(**CONFIG, executor="ray"),
                       executor=runner)


def test_ray_build_equals_local(cluster, corpus, local_index, tmp_path):
    manifest = _ray_build(corpus, tmp_path / "idx", HashingEncoder())
    assert len(manifest["shards"]) == 3
    assert_same_index(local_index, tmp_path / "idx")
    task = write_task(tmp_path / "task.txt", "medical", n=20)
    local, built = tapt.Index.open(local_index), tapt.Index.open(tmp_path / "idx")
    for method in ("centroid", "knn"):
        a = local.select(method, task, budget="10")
        b = built.select(method, task, budget="10")
        assert _ids(a) == _ids(b) and len(a) == 10


def test_parts_grouped_in_ray_data_rows_build_the_local_index(cluster, corpus, local_index,
                                                              tmp_path, monkeypatch):
    """Several consecutive parts per row of the embed pipeline (what keeps the driver's
    scheduling flat however many parts a build has): each part still its own files."""
    from tapt.indexer.building.executors import ray_executor

    monkeypatch.setattr(ray_executor, "ROWS", 2)
    parts = sum(-(-s.rows // CONFIG["part_size"]) for s in Index(local_index).shards)
    assert ray_executor.part_groups(parts) > 1
    _ray_build(corpus, tmp_path / "idx", HashingEncoder())
    assert_same_index(local_index, tmp_path / "idx")


def test_ray_add_equals_local_add(cluster, corpus, tmp_path):
    from tapt.indexer.building.add import add_to_index

    for name, executor in (("local", "local"), ("ray", RayExecutor(progress=False))):
        build_index(corpus[:2], tmp_path / name, HashingEncoder(),
                    BuildConfig(**{**CONFIG, "shards": 2}))
        add_to_index(tmp_path / name, corpus[2:], HashingEncoder(), progress=False,
                     executor=executor)
    assert len(Index(tmp_path / "ray").shards) == 3
    assert_same_index(tmp_path / "local", tmp_path / "ray")


class _ThreadsProbe(RayExecutor):
    """Records the FAISS threads each whole-node task ran with, by stage."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.seen: dict[str, list[int]] = {}

    def map(self, stage, tasks, encoder=None):
        if not stage.whole_node:
            return super().map(stage, tasks, encoder)
        probed = dataclasses.replace(stage, fn=functools.partial(with_faiss_threads, stage.fn))
        out = super().map(probed, tasks, encoder)
        self.seen[stage.name] = [threads for _, threads in out]
        return [result for result, _ in out]


def test_train_and_index_tasks_get_a_nodes_cores(cluster, corpus, local_index, tmp_path):
    import faiss

    node_cpus = max(int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"])
    driver_threads = faiss.omp_get_max_threads()
    runner = _ThreadsProbe(progress=False)
    build_index(corpus, tmp_path / "idx", HashingEncoder(), BuildConfig(**CONFIG, executor="ray"),
                executor=runner)
    assert runner.seen == {"train": [node_cpus], "index": [node_cpus] * 3}
    assert faiss.omp_get_max_threads() == driver_threads      # the driver's is left as it was
    assert_same_index(local_index, tmp_path / "idx")


def test_worker_killed_once_is_retried(cluster, corpus, local_index, tmp_path):
    _ray_build(corpus, tmp_path / "idx", CrashingEncoder(str(tmp_path / "crashed")))
    assert (tmp_path / "crashed").exists()  # an actor did die mid-part
    assert_same_index(local_index, tmp_path / "idx")


def test_worker_always_killed_is_one_error_then_resumes(cluster, corpus, local_index, tmp_path):
    with pytest.raises(ExecutorError, match=r"embed stage failed .* run the same command again"):
        _ray_build(corpus, tmp_path / "idx", CrashingEncoder(str(tmp_path / "m"), always=True),
                   ray_retries=1)
    assert (tmp_path / ".idx.building").is_dir() and not (tmp_path / "idx").exists()
    _ray_build(corpus, tmp_path / "idx", HashingEncoder())
    assert_same_index(local_index, tmp_path / "idx")


def test_killed_driver_resumes_without_redoing_parts(cluster, corpus, local_index, tmp_path):
    out, work = tmp_path / "idx", tmp_path / ".idx.building"
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    child = subprocess.Popen([sys.executable, str(WORKER), cluster, ",".join(corpus), str(out),
                              str(first)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    committed = 0
    while child.poll() is None:          # however long a loaded machine takes to get there
        committed = checkpoint.committed_rows(work) if work.is_dir() else 0
        if committed >= 32:   # two parts or more embedded, the rest not yet
            break
        time.sleep(0.05)
    assert child.poll() is None, child.communicate()[1][-2000:]
    child.send_signal(signal.SIGKILL)
    child.communicate()
    committed = checkpoint.committed_rows(work)
    total = Index(local_index).n_sentences
    assert 0 < committed < total and not out.exists()
    rerun = subprocess.run([sys.executable, str(WORKER), cluster, ",".join(corpus), str(out),
                            str(second)], capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    redone = sum(int(n) for n in second.read_text().split())
    assert redone == total - committed   # only the parts missing at the kill were embedded
    assert_same_index(local_index, out)
    assert Index(out).manifest["build"]["sessions"] == 2


@pytest.mark.parametrize("flag,value", [("--ray-workers", "2"), ("--ray-timeout", "30"),
                                        ("--ray-retries", "0")])
def test_cli_ray_options_need_the_ray_executor(tmp_path, corpus, flag, value):
    from click.testing import CliRunner

    from tapt.cli import cli

    result = CliRunner().invoke(cli, ["-q", "index", "build", *corpus, "--out",
                                      str(tmp_path / "x"), flag, value])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {flag}: only applies with --executor ray"
    assert not (tmp_path / "x").exists()


def test_cli_ray_options_reach_the_executor(tmp_path, corpus, monkeypatch):
    """Each --ray-* option given is passed to the Ray executor; one not given keeps its
    default."""
    from click.testing import CliRunner

    from tapt.cli import cli
    from tapt.indexer.building import executors

    seen = {}

    def fake(name, **options):
        seen.update(options, name=name)
        raise TaptError("stopped before the build")

    monkeypatch.setattr(executors, "get_executor", fake)
    result = CliRunner().invoke(cli, ["-q", "index", "build", *corpus, "--out",
                                      str(tmp_path / "x"), "--executor", "ray",
                                      "--ray-timeout", "42.5", "--ray-retries", "0",
                                      "--ray-workers", "3"])
    assert result.output.strip() == "Error: stopped before the build"
    assert seen == {"name": "ray", "progress": False, "ray_timeout": 42.5, "ray_retries": 0,
                    "ray_workers": 3}


def test_cli_build_with_the_packaged_model(cluster, tmp_path):
    """The user's path: `tapt index build --executor ray` joins the cluster, and each actor
    loads the model from the build's spec."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"Sentence number {i} about topic {i % 3}."})
                              + "\n" for i in range(24)))
    out = subprocess.run([sys.executable, "-m", "tapt.cli", "-q", "index", "build", str(corpus),
                          "--out", str(tmp_path / "idx"), "--no-split", "--executor", "ray",
                          "--ray-address", cluster, "--shards", "1", "--part-size", "10", "--batch-size", "8",
                          "--json"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    manifest = json.loads(out.stdout)["manifest"]
    assert manifest["counts"]["sentences"] == 24 and manifest["model"]["dim"] == 384
    assert manifest["build"]["window"] == 10    # three embed parts of at most 10 rows


def test_the_embed_pipeline_is_run_by_an_actor_not_the_driver(cluster, tmp_path):
    """The stage's pipeline is made, planned and run in a `PipelineRunner` actor (its
    datasource is made and read-planned there, not in this process), and the driver gets
    every row once."""
    from tapt.indexer.building.ray_pipeline import rows_within

    log = tmp_path / "pids"
    source = pid_source(str(log), blocks=5, rows=40)

    def dataset():
        with open(log, "a") as f:
            f.write(f"made {os.getpid()}\n")
        return ray.data.read_datasource(source)

    watch = RayExecutor(progress=False)._watch("embed", [], "part")
    rows = [int(r["i"]) for r in rows_within(ray, dataset, watch, "embed")]
    assert sorted(rows) == list(range(200))
    lines = log.read_text().splitlines()
    made = [line.split()[1] for line in lines if line.startswith("made ")]
    planned = [line for line in lines if not line.startswith("made ")]
    assert made and planned and str(os.getpid()) not in made + planned


def test_a_failed_pipeline_task_is_its_own_error_from_the_actor(cluster):
    """A Ray Data task's own TaptError reaches the driver through the pipeline's actor as
    itself (one error line, not Ray's wrapping)."""
    from tapt.errors import InputError
    from tapt.indexer.building.ray_pipeline import rows_within

    def fail_on_seven(batch):
        if 7 in batch["id"]:
            raise InputError("row 7 is bad", param="corpus")
        return batch

    watch = RayExecutor(progress=False)._watch("embed", [], "part")
    with pytest.raises(InputError, match="row 7 is bad"):
        list(rows_within(ray, lambda: ray.data.range(20, override_num_blocks=4).map_batches(
            fail_on_seven), watch, "embed"))


def test_a_stalled_pipeline_ends_in_the_executors_timeout(cluster):
    """A pipeline whose task hangs ends with the stall's one error once `ray_timeout` seconds
    pass without a row (the actor answers empty in time), not when the task would end."""
    from tapt.indexer.building.ray_pipeline import rows_within

    def hang(batch):
        time.sleep(120)
        return batch

    watch = RayExecutor(progress=False, ray_timeout=3)._watch("embed", [], "part")
    started = time.monotonic()
    with pytest.raises(ExecutorError, match="no embed part finished in 3 s"):
        list(rows_within(ray, lambda: ray.data.range(4, override_num_blocks=1).map_batches(
            hang), watch, "embed"))
    assert time.monotonic() - started < 60


class _CountingGets:
    """The `ray` module of an executor, counting the objects it fetches (`get`)."""

    def __init__(self, real) -> None:
        self.real, self.fetched = real, []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def get(self, refs, **options):
        value = self.real.get(refs, **options)
        self.fetched.append(value)
        return value


def test_reduce_merges_on_the_workers_and_fetches_only_the_last(cluster):
    """20 results merged by merge tasks of at most MERGE_FANIN (8) parts each, none in the
    driver: the driver fetches the tasks' flags and one result, the same as the local fold."""
    from tapt.indexer.building.executor_base import MERGE_FANIN, Stage
    from tapt.indexer.building.executors import LocalExecutor

    stage, merge = Stage("calibrate", square_where), Stage("calibrate", add_where, memory=1 << 20)
    tasks = [i for i in range(21) if i != 13]
    runner = RayExecutor(progress=False)
    runner.ray = counting = _CountingGets(runner.ray)
    total, pids, widest = runner.reduce(stage, tasks, merge)
    assert total == sum(i * i for i in tasks) == LocalExecutor(progress=False).reduce(
        stage, tasks, merge)[0]
    assert os.getpid() not in pids and 2 <= widest <= MERGE_FANIN
    results = [v for v in counting.fetched if v is not True]
    assert results == [(total, pids, widest)] and len(counting.fetched) > len(tasks)
    assert runner.reduce(stage, [3], merge)[0] == 9 and runner.reduce(stage, [], merge) is None


def test_a_failed_reduce_task_is_its_own_error_at_once(cluster):
    """A task of a reduce that raises ends it with its own error when it fails, while the
    slower tasks still run (not when the merges would reach it)."""
    from tapt.errors import InputError
    from tapt.indexer.building.executor_base import Stage

    started = time.monotonic()
    with pytest.raises(InputError, match="task 13 is bad"):
        RayExecutor(progress=False).reduce(
            Stage("calibrate", functools.partial(square_where, slow=60)), [1, 13, 2],
            Stage("calibrate", add_where))
    assert time.monotonic() - started < 45


def test_pool_leaves_a_cpu_for_ray_data(cluster, caplog):
    runner = RayExecutor(ray_workers=8, progress=False)
    assert runner.pool_size() == 1   # 2 CPUs: one actor, one CPU for Ray Data's tasks (#44687)
    assert "ray issue 44687" in caplog.text
    with pytest.raises(TaptError, match="GPU"):
        RayExecutor(gpus_per_worker=1, progress=False).pool_size()


def test_without_ray_one_error(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(TaptError, match=r"pip install 'tapt\[ray\]'"):
        RayExecutor(progress=False)


def test_plain_import_does_not_import_ray():
    code = ("import sys, tapt.cli, tapt.api, tapt.indexer.building.pipeline, tapt.indexer.building.executors; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.fixture(scope="module")
def one_shard_index(tmp_path_factory, corpus) -> Path:
    out = tmp_path_factory.mktemp("ray-one") / "idx"
    build_index(corpus, out, HashingEncoder(),
                BuildConfig(**{**CONFIG, "shards": 1}, embedding_dtype="float16"))
    return out


METHODS = (("centroid", "12", {}), ("distance", "12", {}), ("density", "12", {"m": 3}),
           ("classifier", "40sent", {}), ("knn", None, {"k": 5}), ("fused", "12", {}),
           ("centroid", "0.3", {"segment_size": 3}), ("distance", "25sent", {"segment_size": 5}),
           ("density", "400tok", {"m": 2}), ("centroid", "30sent", {"segment_size": 1}),
           ("centroid", "1.0", {"segment_size": 5}),   # every segment: those actors share too
           ("classifier", None, {"rounds": 0}), ("centroid", "20sent", {"context": "document"}),
           ("moore-lewis", "12", {}), ("moore-lewis", "300tok", {"segment_size": 3}),
           ("iforest", "12", {"prerank": "fused"}),
           ("iforest", "12", {"prerank": "centroid", "detector": "knn-dist",
                              "candidates": "2x"}))
# a budget's cut at sentence context: each actor cuts its own segments (`ShardServers.top`),
# also for iforest's candidates from a row-scorer pre-ranking (`Method.top_segments`)
CUT_BY_ACTORS = {i for i, (m, b, p) in enumerate(METHODS)
                 if (m in ("centroid", "distance", "density", "classifier")
                     or p.get("prerank") == "centroid")
                 and b is not None and p.get("context", "sentence") == "sentence"}


def _sentence(params: dict) -> dict:
    """The params at sentence context unless they name one (the default context `auto` pools
    documents on this corpus, whose cuts do not stream)."""
    return {"context": "sentence", **params}


def _served_calls(served) -> dict[str, int]:
    remote = {"score": 0, "search": 0, "top": 0, "lexicon": 0, "lexicon_top": 0, "hold": 0}
    for name, obj, attr in (("score", served.servers, "scores"),
                            ("search", served.servers, "search"),
                            ("top", served.servers, "top"),
                            ("lexicon", served.servers, "lexicon_scores"),
                            ("lexicon_top", served.servers, "lexicon_top"),
                            ("hold", served.servers, "hold_scores"),
                            ("hold", served.servers, "hold_lexicon")):
        setattr(obj, attr, _counted(remote, name, getattr(obj, attr)))
    return remote


def _check_fan_out(i: int, method: str, before: dict[str, int], remote: dict[str, int]) -> None:
    if i in CUT_BY_ACTORS:      # the budget's cut by the actors
        assert remote["top"] > before["top"], method
        # no score per sentence crosses Ray: the classifier's fit (its pre-ranking and each
        # self-training round) keeps its scores in the actors (`remote_scores`)
        fit_scans = 3 + 1 if method == "classifier" else 0
        assert remote["score"] == before["score"], method
        assert remote["hold"] == before["hold"] + fit_scans, method
    elif method == "knn":      # each actor searches and rescores its own candidates
        assert remote["search"] > before["search"]
    elif method == "moore-lewis":   # each actor cuts its shards' segments by their lexical ids
        assert remote["lexicon_top"] > before["lexicon_top"], method
        assert remote["lexicon"] == before["lexicon"], method     # no score per sentence
    elif method in ("fused", "iforest"):        # each actor scores its lexical ids
        # and its rows by the classifier (iforest's fused pre-ranking), and keeps the scores
        assert remote["hold"] > before["hold"], method
        if method == "fused":                   # no score per sentence crosses Ray
            assert (remote["score"], remote["lexicon"]) == (before["score"],
                                                            before["lexicon"]), method
    else:
        assert remote["score"] > before["score"] and remote["top"] == before["top"], method


def test_served_selection_equals_unsharded_select(cluster, local_index, one_shard_index,
                                                  tmp_path, monkeypatch):
    from tapt.retriever.methods import segments

    monkeypatch.setattr(segments, "STREAM_SHARE", 1.0)   # every budget of this small corpus streams
    one = tapt.Index.open(one_shard_index)
    task = write_task(tmp_path / "task.txt", "legal", n=30)
    want = [one.select(m, task, b, **_sentence(p))
            for m, b, p in METHODS]
    # The default scoring grid: this small index's rows all score on the first actor, every
    # FAISS search fans out to the 3; the same selection, score for score
    with tapt.serve(local_index, actors=3, cpus_per_actor=0.5) as served:
        assert len(served.shards) == 3 and len(served.servers.actors) == 3
        remote = _served_calls(served)
        for i, (method, budget, params) in enumerate(METHODS):
            before = dict(remote)
            got = served.select(method, task, budget,
                                **_sentence(params))
            assert _ids(got) == _ids(want[i]) and len(got) > 0, method
            assert [s.score for s in got] == [s.score for s in want[i]], method
            assert got.manifest["index"] == served.identity()
            _check_fan_out(i, method, before, remote)
    # A 64-row grid puts rows on every actor, and actors' rows begin and end inside segments
    # (whose pieces the driver joins); blocks then have other shapes than in one process (BLAS
    # may round the last bit differently), the ranking is the same
    with tapt.ServedIndex(local_index, actors=3, cpus_per_actor=0.5, grid=64) as served:
        starts = [served.servers.ray.get(a.score.remote(len)) for a in served.servers.actors]
        assert all(n > 0 for _, n in starts) and sum(n for _, n in starts) == 230
        assert all(start % 64 == 0 for start, _ in starts)
        assert [tuple(s) for s in served.servers.spans] == [(a, a + n) for a, n in starts]
        offsets = served.segments(5)
        assert any(b not in offsets for b, _ in starts[1:])   # an actor begins mid-segment
        remote = _served_calls(served)
        for i, (method, budget, params) in enumerate(METHODS):
            before = dict(remote)
            got = served.select(method, task, budget,
                                **_sentence(params))
            assert _ids(got) == _ids(want[i]), method
            np.testing.assert_allclose([s.score for s in got],
                                       [s.score for s in want[i]], rtol=0, atol=1e-6)
            _check_fan_out(i, method, before, remote)


def test_actors_holding_codes_select_as_one_process_in_half_the_ram(cluster, corpus,
                                                                     local_index, tmp_path,
                                                                     monkeypatch):
    """`hold` codes: the actors keep int8 codes in RAM (half the bytes of the float16 rows) and
    score them for `scan` codes (centroid, the classifier's fit and scores, fused's classifier
    half), or cut their candidates on them as a stream; exact scans read the rows from the
    memory maps. All select as `Index.select` does, score for score."""
    from tapt.retriever.methods import segments

    out = tmp_path / "codes-idx"
    build_index(corpus, out, HashingEncoder(),
                BuildConfig(**CONFIG, codes="int8", embedding_dtype="float16"))
    index = tapt.Index.open(out)
    task = write_task(tmp_path / "task.txt", "medical", n=20)
    runs = [("centroid", "30sent", {"scan": "codes"}), ("centroid", "30sent", {}),
            ("centroid", "0.2", {"scan": "codes"}), ("classifier", "30sent", {"scan": "codes"}),
            ("fused", "30sent", {"scan": "codes"})]
    want = [index.select(m, task, b, **_sentence(p))
            for m, b, p in runs]
    held = {}
    for hold in ("codes", "rows"):
        with tapt.serve(out, actors=3, cpus_per_actor=0.5, hold=hold) as served:
            scanned, kept = [], []
            scores, keep = served.servers.scores, served.servers.hold_scores
            served.servers.scores = lambda scorer, n, on="rows": (scanned.append(on),
                                                                 scores(scorer, n, on))[1]
            served.servers.hold_scores = lambda scorer, on="rows": (kept.append(on),
                                                                   keep(scorer, on))[1]
            for (method, budget, params), expected in zip(runs, want):
                got = served.select(method, task, budget,
                                    **_sentence(params))
                assert _ids(got) == _ids(expected) and len(got) > 0, (hold, method, params)
                assert [s.score for s in got] == [s.score for s in expected], (hold, params)
            # the two centroid code scans, and the classifier's four (pre-ranking, 3 rounds)
            # twice (classifier, fused's half), kept in the actors
            assert scanned.count("codes") == 2 and kept == ["codes"] * 8
            tops = []
            top = served.servers.top
            served.servers.top = lambda scorer, view, cut, on="rows": (tops.append(on),
                                                                      top(scorer, view, cut, on))[1]
            with monkeypatch.context() as patch:
                patch.setattr(segments, "STREAM_SHARE", 1.0)     # the candidates' cut streams
                got = served.select("centroid", task, "30sent",
                                    scan="codes", context="sentence")
            assert tops == ["codes"] and _ids(got) == _ids(want[0])
            assert [s.score for s in got] == [s.score for s in want[0]]
            held[hold] = sum(served.servers.ray.get([a.nbytes.remote()
                                                     for a in served.servers.actors]))
    assert held["rows"] == index.n_sentences * index.dim * 2
    assert held["codes"] == index.n_sentences * index.dim


def test_holding_codes_needs_codes(local_index):
    with pytest.raises(TaptError, match="no int8 codes to hold: run tapt index reindex"):
        tapt.serve(local_index, hold="codes")


def test_serve_cli_answers_requests_line_by_line(cluster, local_index, one_shard_index,
                                                 tmp_path):
    task = tmp_path / "task.txt"
    write_task(task, "sea", n=20)
    requests = [{"id": 1, "method": "centroid", "task": str(task), "budget": "5"},
                {"id": 2, "method": "knn", "task": {"files": [str(task)]},
                 "params": {"k": 3}, "out": str(tmp_path / "knn.jsonl")},
                {"id": 3, "method": "centroid", "task": str(task), "budget": "-1"},
                "not json"]
    lines = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in requests)
    out = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "support" / "hashing_cli.py"), "-q",
                          "index", "serve", str(local_index), "--ray-address", cluster,
                          "--actors", "2"], input=lines, capture_output=True, text=True,
                         timeout=180)
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1] == \
        "Error: 2 of 4 request(s) failed (see their \"error\" in the output)"
    one = tapt.Index.open(one_shard_index)
    want = one.select("centroid", Path(task), "5")
    assert answers[0]["id"] == 1 and answers[0]["ids"] == _ids(want)
    knn = one.select("knn", [Path(task)], k=3)
    assert answers[1]["ids"] == _ids(knn) and Path(answers[1]["out"]).is_file()
    assert answers[2]["id"] == 3 and "budget" in answers[2]["error"]
    assert "request: not a JSON object" in answers[3]["error"]


def test_cli_select_on_ray_actors_equals_local(cluster, local_index, tmp_path):
    """`tapt select METHOD --executor ray` loads the shards into actors for one selection and
    writes the selection the local executor writes."""
    task = tmp_path / "task.txt"
    write_task(task, "sea", n=20)
    cli = str(Path(__file__).parents[1] / "support" / "hashing_cli.py")
    for method, extra in (("fused", ["--budget", "8"]), ("knn", ["-k", "3"])):
        written = {}
        for executor in ("local", "ray"):
            out = tmp_path / f"{method}-{executor}.jsonl"
            ray_args = ["--executor", "ray", "--ray-address", cluster, "--actors", "2",
                        "--cpus-per-actor", "0.5"] if executor == "ray" else []
            run = subprocess.run([sys.executable, cli, "-q", "select", method, str(local_index),
                                  "--task", str(task), *extra, "--out", str(out), *ray_args],
                                 capture_output=True, text=True, timeout=180)
            assert run.returncode == 0, run.stderr
            written[executor] = out.read_text()
        assert written["ray"] == written["local"] and written["local"], method


@pytest.mark.parametrize("flag,value", [("--ray-address", "auto"), ("--actors", "2"),
                                        ("--cpus-per-actor", "1")])
def test_cli_select_ray_options_need_the_ray_executor(tmp_path, local_index, flag, value):
    from click.testing import CliRunner

    from tapt.cli import cli

    out = tmp_path / "sel.jsonl"
    result = CliRunner().invoke(cli, ["-q", "select", "random", str(local_index), "--budget",
                                      "3", "--out", str(out), flag, value])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {flag}: only applies with --executor ray"
    assert not out.exists()


def _counted(counts: dict[str, int], name: str, fn):
    def call(*args, **kwargs):
        counts[name] += 1
        return fn(*args, **kwargs)

    return call


def _ids(selection) -> list[int]:
    return [s.id for s in selection]


def test_an_address_nothing_answers_at_fails_in_seconds():
    import socket

    with socket.socket() as s:                      # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = ("from tapt.indexer.building.executors.ray_executor import ExecutorError, connect\n"
            "try:\n"
            f"    connect('127.0.0.1:{port}')\n"
            "except ExecutorError as exc:\n"
            "    print(exc.param, exc)\n")
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)       # a fresh process: this one may hold a cluster
    assert time.monotonic() - start < 60, "Ray's own retries took over"
    assert run.stdout.startswith("ray_address ") and "nothing answers there" in run.stdout, \
        run.stdout + run.stderr


@pytest.mark.parametrize("options,param", [
    ({"gpus_per_worker": 1.5}, "gpus_per_worker"),
    ({"ray_timeout": float("inf")}, "ray_timeout"), ({"ray_retries": 10 ** 12}, "ray_retries"),
    ({"ray_workers": 0}, "ray_workers"),
])
def test_ray_options_are_checked_before_connecting(options, param):
    from tapt.errors import InputError

    with pytest.raises(InputError) as err:
        RayExecutor(progress=False, **options)
    assert err.value.param == param


def test_local_inputs_are_read_through_absolute_paths(tmp_path, monkeypatch):
    """A Ray worker's working directory is not the driver's: relative inputs are opened by
    their absolute path, and still shown as given."""
    from tapt.indexer.reading.reader import iter_documents, scan_inputs

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("One sentence here.\n")
    monkeypatch.chdir(tmp_path)
    scan = scan_inputs(["corpus"])
    monkeypatch.chdir("/")
    docs = list(iter_documents(scan))
    assert [d.records[0].text for d in docs] == ["One sentence here."]
    assert scan.files[0].name == os.path.join("corpus", "a.txt")
    monkeypatch.chdir(tmp_path / "corpus")
    assert scan_inputs(["."]).files[0].name == "a.txt"     # as before: Path(".") / "a.txt"


def test_serve_answers_keep_stdout_to_themselves():
    """What Ray's processes write to file descriptor 1 goes to stderr while `index serve`
    answers: stdout holds only JSON lines."""
    code = ("import os, sys\n"
            "from tapt.commands.index import _stdout_for_answers\n"
            "with _stdout_for_answers() as answers:\n"
            "    os.write(1, b'(raylet) a worker died\\n')\n"
            "    print('a library print')\n"
            "    answers.write('{\"id\": 1}\\n')\n"
            "print('after')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ['{"id": 1}', "after"]
    assert "(raylet) a worker died" in run.stderr and "a library print" in run.stderr
