"""`tapt index serve --http` (`tapt.serve(..., http=...)`) on Ray Serve for real: the replica
holds the served index (two serving actors over three shards), answers as the local index does,
shows the page, and goes on answering when an actor hangs (stopped with SIGSTOP): that request
fails with 503 within its time, the actor is replaced, the next request is answered. SIGTERM
stops the server in one line (exit 143), its actors with it.

Moore-Lewis needs no model, so the replica loads none. Skipped without Ray Serve."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("ray.serve")

import tapt  # noqa: E402
from benchmarks.serve_http import _actor_processes  # noqa: E402
from conftest import HashingEncoder, write_split_corpus  # noqa: E402
from http_service import call, free_port  # noqa: E402
from ray_worker import CONFIG  # noqa: E402
from tapt.indexer.building.pipeline import BuildConfig, build_index  # noqa: E402

ASK = {"method": "moore-lewis", "budget": "6",
       "task": ["Licence copyright warranty liability.", "Contract clause party agreement."]}


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("http-serve")
    corpus = [str(p) for p in write_split_corpus(base, parts=3, docs_per_topic=6)]
    build_index(corpus, base / "idx", HashingEncoder(), BuildConfig(**CONFIG))
    return base / "idx"


def _started(url: str, server: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, server.communicate()
        try:
            if call(url, "GET", "/health", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError("the server did not start")


def test_ray_serve_answers_as_the_local_index_and_outlives_a_hung_actor(index_dir):
    want = tapt.Index.open(index_dir).select(ASK["method"], ASK["task"], ASK["budget"])
    before = set(_actor_processes())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tapt_command = Path(sys.executable).with_name("tapt")
    server = subprocess.Popen(
        [str(tapt_command), "index", "serve", str(index_dir), "--http", f"127.0.0.1:{port}",
         "--no-auth", "--actors", "2", "--cpus-per-actor", "0.5", "--request-timeout", "16"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _started(url, server)
        status, health, _ = call(url, "GET", "/health")
        assert status == 200 and health["actors"] == 2, health
        status, answer, _ = call(url, "POST", "/select", {**ASK, "id": 1})
        assert status == 200 and answer["ids"] == [int(i) for i in want.ids], answer
        status, page, _ = call(url, "GET", "/")
        assert status == 200 and b"page.js" in page
        assert call(url, "GET", "/openapi.json")[1]["paths"]["/select"]
        actors = sorted(set(_actor_processes()) - before)
        assert len(actors) == 2
        os.kill(actors[0], signal.SIGSTOP)      # hung: alive, never answering
        try:
            status, answer, _ = call(url, "POST", "/select", {**ASK, "id": 2})
        finally:
            try:
                os.kill(actors[0], signal.SIGCONT)
            except ProcessLookupError:          # killed and replaced by then
                pass
        assert status == 503 and answer["id"] == 2, answer
        assert "did not answer" in answer["error"]
        status, answer, _ = call(url, "POST", "/select", {**ASK, "id": 3})
        assert status == 200 and answer["ids"] == [int(i) for i in want.ids], answer
        assert call(url, "GET", "/health")[1]["status"] == "ok"
        assert actors[0] not in _actor_processes()
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=120)
        assert server.returncode == 143, err
        assert out == "" and err.rstrip().splitlines()[-1] == "Error: terminated (SIGTERM)"
        assert "Traceback" not in err and "SIGTERM received" not in err
        assert not set(_actor_processes()) - before
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
