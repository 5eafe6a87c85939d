"""What a waiting Ray stage checks when nothing finished for a while (`Watch.check`): a stall
past the executor's timeout, or work that no alive node can run any more. Ray itself is not
started: the executor asks a stand-in for the cluster's nodes."""

from __future__ import annotations

from tapt.errors import TaptError
from tapt.indexer.building import ray_cluster
from tapt.indexer.building.executors.ray_executor import RayExecutor
from tapt.indexer.building.ray_cluster import Watch


class Nodes:
    """`ray.nodes()` of a cluster whose alive nodes are `alive` (resource dicts); counts calls."""

    def __init__(self, *alive: dict[str, float]) -> None:
        self.alive, self.calls = list(alive), 0

    def nodes(self) -> list[dict]:
        self.calls += 1
        return [{"Alive": True, "Resources": r} for r in self.alive] + [
            {"Alive": False, "Resources": {"CPU": 64.0, "gpu-node": 1.0}}]


def executor(ray: Nodes, timeout: float = 3600.0) -> RayExecutor:
    out = object.__new__(RayExecutor)          # no connection: only the node checks are used
    out.ray, out.ray_timeout = ray, timeout
    return out


def test_the_unplaceable_needs_are_found_with_one_ask_of_the_nodes():
    ray = Nodes({"CPU": 16.0, "memory": 8e9}, {"CPU": 4.0, "index-node": 1.0})
    needs = [{"CPU": 1.0, "memory": 4e9}, {"CPU": 2.0, "index-node": 1.0},
             {"CPU": 8.0, "index-node": 1.0}, {"CPU": 1.0, "gpu-node": 1.0},
             {"CPU": 1.0, "GPU": 0.0}]
    missing = executor(ray)._unplaceable(needs)
    assert missing == [{"CPU": 8.0, "index-node": 1.0}, {"CPU": 1.0, "gpu-node": 1.0}]
    assert ray.calls == 1
    assert executor(ray)._unplaceable([]) == [] and ray.calls == 1


def test_a_stage_whose_work_lost_its_nodes_ends_after_the_grace_and_not_before(monkeypatch):
    ray = Nodes({"CPU": 4.0, "index-node": 1.0})
    watch = Watch(executor(ray), "index", [{"CPU": 4.0, "index-node": 1.0}], "shard")
    assert watch.check() is None
    ray.alive = [{"CPU": 4.0}]                  # the index node is gone
    monkeypatch.setattr(ray_cluster, "LOST_AFTER", 3600.0)
    assert watch.check() is None and watch.lost is not None     # within the grace: wait on
    monkeypatch.setattr(ray_cluster, "LOST_AFTER", 0.0)
    error = watch.check()
    assert isinstance(error, TaptError)
    assert "no alive node" in error.message and "index-node 1" in error.message
    assert "run the same command again" in error.message
    ray.alive = [{"CPU": 4.0, "index-node": 1.0}]    # a node came back: the clock restarts
    assert watch.check() is None and watch.lost is None


def test_a_stage_with_no_progress_for_the_timeout_ends_whatever_the_nodes():
    ray = Nodes({"CPU": 4.0})
    watch = Watch(executor(ray, timeout=5.0), "embed", [{"CPU": 1.0}], "part")
    assert watch.check() is None
    watch.since -= 6.0
    error = watch.check()
    assert isinstance(error, TaptError) and "no embed part finished in 5 s" in error.message
    watch.progressed()
    assert watch.check() is None


def test_a_stage_without_needs_never_asks_the_nodes():
    ray = Nodes()
    assert Watch(executor(ray), "prepare", [], "piece").check() is None
    assert ray.calls == 0
