"""`tapt.serve(..., http=...)` on Ray Serve for real: the replica holds the served index (two
serving actors over three shards), answers as the local index does, shows the page, and goes
on answering when an actor hangs (stopped with SIGSTOP): that request fails with 503 within
its time, the actor is replaced, the next request is answered.

Moore-Lewis needs no model, so the replica loads none. Skipped without Ray Serve."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("ray.serve")

import tapt  # noqa: E402
from conftest import HashingEncoder, write_split_corpus  # noqa: E402
from http_service import call, free_port  # noqa: E402
from ray_worker import CONFIG  # noqa: E402
from tapt.indexer.building.pipeline import BuildConfig, build_index  # noqa: E402

ASK = {"method": "moore-lewis", "budget": "6",
       "task": ["Licence copyright warranty liability.", "Contract clause party agreement."]}


def _actor_processes() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"ray::ShardServer" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("http-serve")
    corpus = [str(p) for p in write_split_corpus(base, parts=3, docs_per_topic=6)]
    build_index(corpus, base / "idx", HashingEncoder(), BuildConfig(**CONFIG))
    return base / "idx"


def test_ray_serve_answers_as_the_local_index_and_outlives_a_hung_actor(index_dir):
    want = tapt.Index.open(index_dir).select(ASK["method"], ASK["task"], ASK["budget"])
    before = set(_actor_processes())
    with tapt.serve(index_dir, http=f"127.0.0.1:{free_port()}", no_auth=True, actors=2,
                    cpus_per_actor=0.5, request_timeout=16) as server:
        status, health, _ = call(server.url, "GET", "/health")
        assert status == 200 and health["actors"] == 2, health
        status, answer, _ = call(server.url, "POST", "/select", {**ASK, "id": 1})
        assert status == 200 and answer["ids"] == [int(i) for i in want.ids], answer
        status, page, _ = call(server.url, "GET", "/")
        assert status == 200 and b"page.js" in page
        assert call(server.url, "GET", "/openapi.json")[1]["paths"]["/select"]
        actors = sorted(set(_actor_processes()) - before)
        assert len(actors) == 2
        os.kill(actors[0], signal.SIGSTOP)      # hung: alive, never answering
        try:
            status, answer, _ = call(server.url, "POST", "/select", {**ASK, "id": 2})
        finally:
            try:
                os.kill(actors[0], signal.SIGCONT)
            except ProcessLookupError:          # killed and replaced by then
                pass
        assert status == 503 and answer["id"] == 2, answer
        assert "did not answer" in answer["error"]
        status, answer, _ = call(server.url, "POST", "/select", {**ASK, "id": 3})
        assert status == 200 and answer["ids"] == [int(i) for i in want.ids], answer
        assert call(server.url, "GET", "/health")[1]["status"] == "ok"
        assert actors[0] not in _actor_processes()
