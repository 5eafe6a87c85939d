"""`tapt.serve` on Ray's own multi-node test cluster (`ray.cluster_utils.Cluster`): a head node
and two nodes that offer an `index-node` resource, each with its own CPUs, started once for this
module. The serving actors are placed on the index nodes by that resource; each opens and
verifies only its own shard (reported by the actor itself, from the files it compared with
their checksums), and the served selections equal the local ones.

Skipped when Ray is not installed (`pip install 'tapt[ray]'`; `make test` installs it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tapt  # noqa: E402
from conftest import HashingEncoder, write_split_corpus, write_task  # noqa: E402
from ray_worker import CONFIG, ship_by_value  # noqa: E402
from tapt.indexer.building.pipeline import BuildConfig, build_index  # noqa: E402

NODE = "index-node"


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        nodes.add_node(num_cpus=1, resources={NODE: 2})
    ray.init(address=nodes.address, logging_level="WARNING", log_to_driver=False)
    ship_by_value()
    nodes.wait_for_nodes()
    yield nodes
    ray.shutdown()
    nodes.shutdown()


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("serving-cluster")
    corpus = [str(p) for p in write_split_corpus(base, parts=3, docs_per_topic=6)]
    out = base / "idx"
    build_index(corpus, out, HashingEncoder(), BuildConfig(**CONFIG))
    return out


# (method, budget, params): every one at sentence context, so that a budget's cut is made by
# the actors (`ShardServers.top`, `lexicon_top`), knn searching every actor's FAISS part
RUNS = (("centroid", "25sent", {"segment_size": 5}), ("moore-lewis", "12", {"segment_size": 3}),
        ("knn", None, {"k": 4}))


def test_actors_on_index_nodes_open_only_their_shards_and_select_as_local(
        cluster, index_dir, tmp_path, monkeypatch):
    from tapt.retriever.methods import segments

    monkeypatch.setattr(segments, "STREAM_SHARE", 1.0)   # every budget of this small index streams
    local = tapt.Index.open(index_dir)
    task = write_task(tmp_path / "task.txt", "legal", n=30)
    want = [local.select(m, task, b, context="sentence", **p)
            for m, b, p in RUNS]
    index_nodes = {n["NodeID"] for n in ray.nodes() if n["Resources"].get(NODE)}
    assert len(index_nodes) == 2
    # a 64-row grid puts rows on every actor; the last block of shard 0's and 1's rows runs
    # into the next shard, which the actor maps without verifying it (its own actor does)
    with tapt.ServedIndex(index_dir, actors=3, cpus_per_actor=0.5, grid=64,
                          resources={NODE: 1}) as served:
        reports = served.actor_reports()
        assert {r["node"] for r in reports} <= index_nodes
        assert len({r["node"] for r in reports}) == 2          # both nodes serve
        for i, report in enumerate(reports):
            own = f"{i:06d}"
            assert report["shards"] == [own] and report["verified"] == [own], report
            assert report["rows"][1] > report["rows"][0]
            assert report["process_s"] >= 0 and report["cpu_s"] >= 0 and report["began_at"] > 0
            for name, files in report["checked"].items():
                if name != own:      # only the next shard's offsets and token counts
                    assert name in report["reached"] and name > own
                    assert files == ["docs.npy", "tokens.npy"], report
        cuts = []
        top, lexicon_top = served.servers.top, served.servers.lexicon_top
        served.servers.top = lambda *a, **k: (cuts.append("top"), top(*a, **k))[1]
        served.servers.lexicon_top = lambda *a, **k: (cuts.append("lexicon"),
                                                      lexicon_top(*a, **k))[1]
        for (method, budget, params), expected in zip(RUNS, want):
            got = served.select(method, task, budget,
                                context="sentence", **params)
            assert [s.id for s in got] == [s.id for s in expected] and len(got), method
            # blocks of 64 rows have other shapes than in one process: the last bit may differ
            np.testing.assert_allclose([s.score for s in got], [s.score for s in expected],
                                       rtol=0, atol=1e-6)
        assert cuts == ["top", "lexicon"]
        # what only requests need was made ready after the start, by every actor
        assert [set(steps) for steps in served.warmed(120)] == [{"torch", "held", "parts"}] * 3
        assert sum(served.servers.ray.get([a.nbytes.remote() for a in served.servers.actors])
                   ) == sum(r["rows"][1] - r["rows"][0] for r in reports) * local.dim * \
            local.embeddings.dtype.itemsize
