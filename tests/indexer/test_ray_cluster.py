"""Builds on Ray's own multi-node test cluster (`ray.cluster_utils.Cluster`): three nodes of one
CPU on this machine, each with a custom resource that steers a build's steps to it.

Skipped when Ray is not installed. The cluster lives for this module only (another module's
Ray, such as the serving tests' cluster, is never alive at the same time).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from build_worker import assert_same_index  # noqa: E402
from conftest import HashingEncoder, write_split_corpus  # noqa: E402
from ray_worker import CONFIG, ship_by_value  # noqa: E402
from tapt.indexer.building import checkpoint  # noqa: E402
from tapt.indexer.building.executors.ray_executor import RayExecutor  # noqa: E402
from tapt.indexer.building.pipeline import BuildConfig, build_index  # noqa: E402

SUPPORT = Path(__file__).resolve().parents[1] / "support"
# Where each step runs: the head prepares (and tokenises), "model" embeds, "faiss" trains and
# indexes; every node has one CPU.
STEER = {"prepare": {"prep": 0.01}, "assemble": {"prep": 0.01}, "embed": {"model": 0.01},
         "train": {"faiss": 0.01}, "index": {"faiss": 0.01}}


@pytest.mark.parametrize("options,param", [
    ({"resources": {"embedding": {"gpu": 1}}}, "resources"),
    ({"resources": {"embed": {"gpu_box": 0}}}, "resources"),
    ({"resources": {"embed": ["gpu_box"]}}, "resources"),
    ({"ray_workers": 2, "min_workers": 3}, "min_workers"), ({"min_workers": 0}, "min_workers")])
def test_pool_and_steering_options_are_checked_before_connecting(options, param):
    from tapt.errors import InputError

    with pytest.raises(InputError) as err:
        RayExecutor(progress=False, **options)
    assert err.value.param == param


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():            # another module's connection: not shared
        ray.shutdown()
    made = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"prep": 1}, "include_dashboard": False})
    nodes = {"prep": made.head_node}
    for name in ("model", "faiss"):
        nodes[name] = made.add_node(num_cpus=1, resources={name: 1})
    made.wait_for_nodes()
    ray.init(address=made.address, logging_level="WARNING", log_to_driver=False)
    ship_by_value()
    cloudpickle_by_value()
    try:
        yield made, nodes
    finally:
        ray.shutdown()
        made.shutdown()


def cloudpickle_by_value() -> None:
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    return [str(p) for p in write_split_corpus(tmp_path_factory.mktemp("cluster-corpus"),
                                               parts=3, docs_per_topic=6)]


@pytest.fixture(scope="module")
def local_index(tmp_path_factory, corpus) -> Path:
    out = tmp_path_factory.mktemp("cluster-local") / "idx"
    build_index(corpus, out, HashingEncoder(), BuildConfig(**CONFIG))
    return out


SETTINGS = ("TAPT_PROBE_SETTING", "HF_PROBE_SETTING")


def seen_here() -> str:
    """Where a task or actor runs and what it was given: its node, the two settings, and
    whether Ray reserved memory for it."""
    context = ray.get_runtime_context()
    given = context.get_assigned_resources().get("memory", 0) > 0
    return json.dumps([context.get_node_id(), *(os.environ.get(k) for k in SETTINGS), given])


def on_node(fn, *args):
    """`fn(*args)` and where it ran (`seen_here`; wraps a stage's function)."""
    return fn(*args), seen_here()


class NodeEncoder(HashingEncoder):
    """Appends where it embeds (`seen_here`) to `log`, once per part."""

    def __init__(self, log: str) -> None:
        super().__init__()
        self.log = log

    def encode(self, texts, batch_size: int = 64):
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(seen_here() + "\n")
        return super().encode(texts, batch_size)


class NodeProbe(RayExecutor):
    """Records where each stage's tasks ran (`seen_here`), from inside the tasks (the embed
    stage's model actors record theirs through `NodeEncoder`)."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.seen: dict[str, set[str]] = {}

    def map(self, stage, tasks, encoder=None):
        if stage.needs_encoder:
            return super().map(stage, tasks, encoder)
        probed = dataclasses.replace(stage, fn=functools.partial(on_node, stage.fn))
        out = super().map(probed, tasks, encoder)
        self.seen[stage.name] = {seen for _, seen in out}
        return [result for result, _ in out]


def test_steps_on_three_nodes_with_the_drivers_settings_build_the_local_index(
        cluster, corpus, local_index, tmp_path, monkeypatch):
    """Each step on its node, asking Ray for memory, with tapt's and Hugging Face's settings
    that only the driver's environment holds (the nodes were started before they were set);
    the node the FAISS work runs on is asked what it offers, there."""
    made, nodes = cluster
    monkeypatch.setenv("TAPT_PROBE_SETTING", "driver-only")
    monkeypatch.setenv("HF_PROBE_SETTING", "driver-only-hf")
    bare = ray.remote(num_cpus=0, resources={"model": 0.01})(
        lambda: [os.environ.get(k) for k in SETTINGS])
    assert ray.get(bare.remote()) == [None, None]        # not in the nodes' own environment
    log = tmp_path / "embedded-on.log"
    runner = NodeProbe(progress=False, resources=STEER, ray_workers=2)
    build_index(corpus, tmp_path / "idx", NodeEncoder(str(log)),
                BuildConfig(**CONFIG, executor="ray"), executor=runner)
    want = {name: node.node_id for name, node in nodes.items()}

    def seen(node: str) -> set[str]:
        return {json.dumps([want[node], "driver-only", "driver-only-hf", True])}

    assert runner.seen["prepare"] == runner.seen["assemble"] == seen("prep")
    assert set(log.read_text().split("\n")[:-1]) == seen("model")
    assert runner.seen["train"] == runner.seen["index"] == seen("faiss")
    assert len(set(want.values())) == 3
    assert runner.node_facts("index")["node_id"] == want["faiss"]
    assert_same_index(local_index, tmp_path / "idx")


def test_real_model_tokenised_apart_builds_the_local_bytes(cluster, tmp_path):
    """The packaged model (ONNX on the CPU): parts tokenised in CPU tasks on the head node, the
    forward pass in an actor on another node; the same index, byte for byte."""
    from tapt.indexer.encoding.encoder import load_encoder, tokenizing_of

    encoder = load_encoder(None, device="cpu")
    assert tokenizing_of(encoder) is not None           # the tokens travel, not the texts
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"Sentence {i} is about topic {i % 5}, "
                                                  + "and more words " * (i % 7)}) + "\n"
                              for i in range(24)))
    config = dict(CONFIG, shards=1, part_size=16, batch_size=8)
    build_index([str(corpus)], tmp_path / "local", encoder, BuildConfig(**config))
    runner = RayExecutor(progress=False, resources={"tokenize": {"prep": 0.01},
                                                    "embed": {"model": 0.01}})
    build_index([str(corpus)], tmp_path / "ray", encoder,
                BuildConfig(**config, executor="ray"), executor=runner)
    assert_same_index(tmp_path / "local", tmp_path / "ray")


DRIVER = """
import sys
sys.path[:0] = {paths!r}
from ray_worker import CONFIG, LoggingEncoder, ship_by_value
from tapt.errors import TaptError
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.building.executors.ray_executor import RayExecutor

runner = RayExecutor(ray_address={address!r}, progress=False, ray_workers=1,
                     resources={{"embed": {{"victim": 0.01}}}})
ship_by_value()
try:
    build_index({corpus!r}, {out!r}, LoggingEncoder({log!r}, delay=0.25),
                BuildConfig(**CONFIG, executor="ray"), executor=runner)
except TaptError as exc:
    sys.exit(f"Error: {{exc}}")
finally:
    runner.close()
"""


def _driver(address: str, corpus: list[str], out: Path, log: Path) -> list[str]:
    paths = [str(SUPPORT), str(SUPPORT.parent), str(SUPPORT.parents[1])]
    code = DRIVER.format(paths=paths, address=address, corpus=corpus, out=str(out),
                         log=str(log))
    return [sys.executable, "-c", code]


def test_a_node_removed_mid_build_fails_once_then_the_rerun_resumes(cluster, corpus,
                                                                    local_index, tmp_path):
    """The node of the model actor goes away after the first part is committed: the build
    ends with one Error: line and no traceback, as soon as Ray reports the actor lost or no
    node can run it any more (not after a stall timeout: the driver keeps the default hour,
    so a loaded machine's slow parts never end it); the same command, once a node offers the
    resource again, embeds only the parts missing and builds the local index."""
    made, _ = cluster
    victim = made.add_node(num_cpus=1, resources={"victim": 1})
    made.wait_for_nodes()
    out, work = tmp_path / "idx", tmp_path / ".idx.building"
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    removed, ended = threading.Event(), threading.Event()

    def remove_after_first_part() -> None:
        while not ended.is_set():        # as long as the build runs, however slowly
            if work.is_dir() and checkpoint.committed_rows(work) > 0:
                made.remove_node(victim, allow_graceful=False)
                removed.set()
                return
            time.sleep(0.05)

    remover = threading.Thread(target=remove_after_first_part, daemon=True)
    remover.start()
    try:
        failed = subprocess.run(_driver(made.address, corpus, out, first), capture_output=True,
                                text=True, timeout=900)
    finally:
        ended.set()
    remover.join(timeout=5)
    assert removed.is_set(), failed.stderr[-2000:]
    errors = [line for line in failed.stderr.splitlines() if line.startswith("Error:")]
    assert failed.returncode == 1 and len(errors) == 1, failed.stderr[-2000:]
    assert "run the same command again" in errors[0]
    assert "Traceback" not in failed.stderr, failed.stderr[-2000:]
    committed = checkpoint.committed_rows(work)
    total = sum(int(n) for n in first.read_text().split()) if first.exists() else 0
    assert 0 < committed <= total and not out.exists()

    made.add_node(num_cpus=1, resources={"victim": 1})     # the machine is back
    made.wait_for_nodes()
    rerun = subprocess.run(_driver(made.address, corpus, out, second), capture_output=True,
                           text=True, timeout=900)
    assert rerun.returncode == 0 and "Traceback" not in rerun.stderr, rerun.stderr[-2000:]
    from tapt.indexer.index import Index

    redone = sum(int(n) for n in second.read_text().split())
    assert redone == Index(local_index).n_sentences - committed   # finished parts kept
    assert_same_index(local_index, out)
