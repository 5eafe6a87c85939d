"""The HTTP answers of a served index (`api.service.SelectionService`) and its rooms
(`api.rooms`), on a real loopback socket (uvicorn in this process, over a local index; the Ray
Serve deployment answers through the same service: tests/api/test_http_ray_serve.py).

Every refusal is its own 4xx with one line, and nothing outside the rooms is read or written:
the task's and the output's paths are checked before the selection opens anything."""

from __future__ import annotations

import http.client
import json
import os
import threading
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import tapt  # noqa: E402
import tapt.indexer.encoding.encoder  # noqa: E402
from conftest import HashingEncoder  # noqa: E402
from http_service import call, running  # noqa: E402
from tapt.api.rooms import is_loopback, rooms  # noqa: E402
from tapt.api.service import SelectionService  # noqa: E402
from tapt.errors import InputError  # noqa: E402

TOKEN = "s3cret-token-of-the-tests-0123"
TASK = ["Patient fever therapy dose.", "Kidney biopsy lesion chronic."]
ASK = {"method": "centroid", "task": TASK, "budget": "4"}


@pytest.fixture()
def setup(fake_index, tmp_path, monkeypatch):
    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder",
                        lambda spec=None, device="auto", backend="auto", threads=None, **_:
                        HashingEncoder())
    (tmp_path / "token").write_text(TOKEN + "\n")
    tasks, outs, outside = tmp_path / "tasks", tmp_path / "outs", tmp_path / "outside"
    for folder in (tasks, outs, outside):
        folder.mkdir()
    (tasks / "task.txt").write_text("\n".join(TASK) + "\n")
    (outside / "secret.txt").write_text("Patient fever secret words.\n")
    (tasks / "leak.txt").symlink_to(outside / "secret.txt")
    (outs / "away").symlink_to(outside)
    (tasks / "sub").mkdir()
    (tasks / "sub" / "d").symlink_to(outside)              # a folder link leading out
    (tasks / "files").mkdir()
    (tasks / "files" / "leak.txt").symlink_to(outside / "secret.txt")
    (tasks / "inner").mkdir()
    (tasks / "inner" / "task.txt").write_text("\n".join(TASK) + "\n")
    (tasks / "inner" / "again").symlink_to(tasks / "inner")    # a loop, inside
    return {"index": tapt.Index.open(fake_index), "dir": tmp_path, "tasks": tasks,
            "outs": outs, "outside": outside}


def service(setup, **limits):
    bounds = rooms("127.0.0.1", token_file=setup["dir"] / "token", task_root=setup["tasks"],
                   out_root=setup["outs"], **limits)
    return SelectionService(setup["index"], bounds)


def test_a_token_is_asked_for_everything_but_health_the_schema_and_the_page(setup):
    with running(service(setup)) as base:
        for path in ("/index", "/context?start=0&stop=1"):
            status, body, headers = call(base, "GET", path)
            assert status == 401 and headers["www-authenticate"] == "Bearer", body
        assert call(base, "POST", "/select", ASK)[0] == 401
        assert call(base, "POST", "/select", ASK, token="wrong-" + TOKEN)[0] == 401
        assert call(base, "POST", "/select", ASK, headers={"Authorization": TOKEN})[0] == 401
        status, answer, _ = call(base, "POST", "/select", {**ASK, "id": 5}, token=TOKEN)
        assert status == 200 and answer["id"] == 5 and len(answer["ids"]) == 4, answer
        assert call(base, "GET", "/health")[:2] == (200, {"status": "ok", "actors": 0,
                                                          "in_flight": 0})
        status, schema, _ = call(base, "GET", "/openapi.json")
        assert status == 200 and schema["openapi"].startswith("3.")
        assert {"/select", "/health", "/index", "/context", "/files/{name}"} <= set(
            schema["paths"])
        assert schema["components"]["schemas"]["Request"]["properties"]["task"]
        status, page, headers = call(base, "GET", "/")
        assert status == 200 and b"<title>tapt" in page
        assert "default-src 'self'" in headers["content-security-policy"]
        status, summary, _ = call(base, "GET", "/index", token=TOKEN)
        assert summary["sentences"] == setup["index"].n_sentences and "fused" in \
            summary["methods"] and summary["limits"]["task_files"] is True
        assert str(setup["dir"]) not in json.dumps(summary)      # no server path
        assert call(base, "GET", "/nowhere")[0] == 404
        assert call(base, "GET", "/select")[0] == 405


def test_the_settings_are_refused_before_anything_starts(setup, tmp_path):
    for host in ("0.0.0.0", "192.168.1.4", "example.org", "::"):
        with pytest.raises(InputError, match="only on a loopback address"):
            rooms(host, no_auth=True)
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"))
    with pytest.raises(InputError, match="a bearer token is required"):
        rooms("0.0.0.0")
    (tmp_path / "short").write_text("abc")
    with pytest.raises(InputError, match="at least 16"):
        rooms("0.0.0.0", token_file=tmp_path / "short")
    with pytest.raises(InputError, match="not both"):
        rooms("127.0.0.1", token_file=setup["dir"] / "token", no_auth=True)
    with pytest.raises(InputError, match="is not a folder"):
        rooms("127.0.0.1", no_auth=True, task_root=tmp_path / "none")
    with pytest.raises(InputError, match="positive number"):
        rooms("127.0.0.1", no_auth=True, max_body=0)
    assert rooms("127.0.0.1", no_auth=True).allows(None)


@pytest.mark.parametrize("request_,status,says", [
    ({**ASK, "task": "/etc/passwd"}, 403, "not a path inside"),
    ({**ASK, "task": "../outside/secret.txt"}, 403, "not a path inside"),
    ({**ASK, "task": "leak.txt"}, 403, "leads out"),
    ({**ASK, "task": {"files": ["task.txt", "../outside/secret.txt"]}}, 403, "not a path"),
    ({**ASK, "task": "~/x"}, 403, "not a path inside"),
    ({**ASK, "task": "sub/*/*"}, 403, "leads out"),
    ({**ASK, "task": "sub"}, 403, "leads out"),
    ({**ASK, "task": "files"}, 403, "leads out"),
    ({**ASK, "task": "**/secret*"}, 403, "leads out"),
    ({**ASK, "task": {"files": ["task.txt", "files"]}}, 403, "leads out"),
    ({**ASK, "params": {"tuned_model": "/work/model"}}, 403, "params.tuned_model: '/work"),
    ({**ASK, "params": {"lm_model": "../outside"}}, 403, "not a path inside"),
    ({**ASK, "params": {"task_model": "sub/d"}}, 403, "leads out"),
    ({**ASK, "params": {"finetune_model": 7}}, 400, "a path is a non-empty string"),
    ({**ASK, "out": "/tmp/sel.jsonl"}, 403, "not a path inside"),
    ({**ASK, "out": "../outside/sel.jsonl"}, 403, "not a path inside"),
    ({**ASK, "out": "away/sel.jsonl"}, 403, "leads out"),
    ({**ASK, "budget": None}, 400, "budget: required"),
    ({**ASK, "budget": "1e9sent"}, 413, "at most 100,000"),
    ({**ASK, "budget": "30000"}, 413, "may reach 120,000 sentences"),
    ({**ASK, "budget": "lots"}, 400, "not understood"),
    ({**ASK, "task": ["a sentence."] * 2001}, 413, "at most 2,000"),
    ({**ASK, "task": ["x" * 2_000_001]}, 413, "at most 1,048,576 bytes"),
    ([1, 2], 400, "a JSON object"),
    ({**ASK, "method": "nope"}, 400, "nope"),
])
def test_refusals_are_4xx_and_touch_nothing_outside(setup, request_, status, says):
    before = sorted(p.name for p in setup["outside"].iterdir())
    with running(service(setup)) as base:
        got, answer, _ = call(base, "POST", "/select", request_, token=TOKEN)
    assert got == status and says in answer["error"], answer
    assert "\n" not in answer["error"] and "secret words" not in json.dumps(answer)
    assert sorted(p.name for p in setup["outside"].iterdir()) == before
    assert sorted(p.name for p in setup["outs"].iterdir()) == ["away"]


def test_a_task_folder_or_pattern_inside_the_room_is_let_through(setup):
    from tapt.api.rooms import task_inside

    root = setup["tasks"].resolve()
    assert task_inside(root, "inner") == root / "inner"
    assert task_inside(root, "inner/*.txt") == root / "inner" / "*.txt"
    assert task_inside(root, "task.*") == root / "task.*"
    assert task_inside(root, "inner/**") == root / "inner" / "**"     # round its loop once


def test_a_task_pattern_reaching_too_many_entries_is_refused(setup, monkeypatch):
    from tapt.api import rooms as rooms_module

    monkeypatch.setattr(rooms_module, "MAX_TASK_ENTRIES", 2)
    with pytest.raises(rooms_module.Refused, match="reaches more than 2 files") as refused:
        rooms_module.task_inside(setup["tasks"].resolve(), "inner")
    assert refused.value.status == 413


def test_bodies_are_bounded_however_they_come(setup):
    with running(service(setup, max_body=2000)) as base:
        big = json.dumps({**ASK, "task": ["word " * 100] * 5}).encode()
        status, answer, _ = call(base, "POST", "/select", raw=big, token=TOKEN)
        assert status == 413 and "at most 2,000 bytes" in answer["error"]
        host, port = base.rsplit("/", 1)[-1].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)     # no Content-Length
        conn.request("POST", "/select", body=iter([big[:1500], big[1500:]]),
                     headers={"Authorization": f"Bearer {TOKEN}"}, encode_chunked=True)
        response = conn.getresponse()
        assert response.status == 413 and b"at most 2,000 bytes" in response.read()
        conn.close()
        for raw in (b"{not json", b'{"a": ' * 3000, b"\xff\xfe"):
            status, answer, _ = call(base, "POST", "/select", raw=raw, token=TOKEN)
            assert status in (400, 413) and "error" in answer, raw[:10]
        status, answer, _ = call(base, "POST", "/select", token=TOKEN,
                                 raw=b'{"method": "random", "budget": "2", "seed": NaN}')
        assert status == 400 and "finite number" in answer["error"]


def test_task_files_and_outputs_inside_the_rooms(setup):
    outs = setup["outs"]
    with running(service(setup)) as base:
        status, answer, _ = call(base, "POST", "/select",
                                 {**ASK, "task": "task.txt", "out": "mine/sel.jsonl"}, token=TOKEN)
        assert status == 200 and answer["out"] == "mine/sel.jsonl", answer
        assert answer["download"] == "/files/mine/sel.jsonl"
        assert (outs / "mine" / "sel.jsonl").is_file()
        status, data, headers = call(base, "GET", answer["download"], token=TOKEN)
        assert status == 200 and data == (outs / "mine" / "sel.jsonl").read_bytes()
        assert call(base, "GET", answer["download"])[0] == 401
        assert call(base, "GET", "/files/%2e%2e/outside/secret.txt", token=TOKEN)[0] == 403
        assert call(base, "GET", "/files/away/secret.txt", token=TOKEN)[0] == 403
        assert call(base, "GET", "/files/nothing.jsonl", token=TOKEN)[0] == 404
        # the rows in the answer, with why each was picked
        status, answer, _ = call(base, "POST", "/select", {**ASK, "out": "-", "explain": True,
                                                           "params": {"context": "sentence"}},
                                 token=TOKEN)
        assert status == 200 and len(answer["selection"]) == 4
        assert answer["explain"]["parts"] == ["centroid"] and answer["explain"]["sample"]
        assert answer["selection"][0]["explain"]["nearest"][0]["sentence"] in TASK
        rows = answer["selection"][0]["rows"]
        status, context, _ = call(base, "GET", f"/context?start={rows[0]}&stop={rows[1]}"
                                               "&around=2", token=TOKEN)
        assert status == 200 and context["rows"] == answer["selection"][0]["sentences"]
        assert call(base, "GET", "/context?start=0&stop=5000", token=TOKEN)[0] == 400
    no_rooms = SelectionService(setup["index"], rooms("127.0.0.1", no_auth=True))
    with running(no_rooms) as base:
        for request_ in ({**ASK, "task": "task.txt"}, {**ASK, "out": "sel.jsonl"}):
            status, answer, _ = call(base, "POST", "/select", request_)
            assert status == 403 and "no files of its own" in answer["error"]
        assert call(base, "POST", "/select", ASK)[0] == 200


def test_requests_in_flight_and_their_time_are_bounded(setup):
    svc = service(setup, max_concurrent=1, request_timeout=1.5)
    with running(svc) as base:
        svc._turn.acquire()            # a selection under way
        try:
            first: list = []
            waiting = threading.Thread(target=lambda: first.append(
                call(base, "POST", "/select", ASK, token=TOKEN)))
            waiting.start()
            deadline = time.monotonic() + 10
            while svc._in_flight < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            status, answer, headers = call(base, "POST", "/select", ASK, token=TOKEN)
            assert status == 429 and headers["retry-after"] == "1", answer
            waiting.join(30)
            assert first[0][0] == 503, first        # its time ran out waiting for its turn
            assert any(w in first[0][1]["error"] for w in ("busy", "within 1.5 s")), first
            assert call(base, "GET", "/health")[1]["status"] == "busy"
        finally:
            svc._turn.release()
        assert call(base, "POST", "/select", ASK, token=TOKEN)[0] == 200


def test_a_lost_actor_is_a_503_and_the_server_goes_on(setup, monkeypatch):
    from tapt.retriever.serving.actors import Unavailable

    svc = service(setup)
    healed = []
    real = svc.index.select
    failing = iter([True])

    def select(*args, **kwargs):
        if next(failing, False):
            raise Unavailable("a serving actor died during the score step")
        return real(*args, **kwargs)

    monkeypatch.setattr(svc.index, "select", select)
    monkeypatch.setattr(svc.index, "heal", lambda timeout: healed.append(timeout) or ["dead"],
                        raising=False)
    with running(svc) as base:
        status, answer, _ = call(base, "POST", "/select", {**ASK, "id": "a"}, token=TOKEN)
        assert status == 503 and answer == {"id": "a", "error": "a serving actor died during "
                                                                "the score step"}
        assert healed == [10.0] and svc.failures == 1
        assert call(base, "POST", "/select", ASK, token=TOKEN)[0] == 200


def test_the_cli_refuses_no_auth_off_loopback_in_one_line(fake_index, tmp_path):
    from click.testing import CliRunner

    from tapt.cli import cli

    run = CliRunner().invoke
    result = run(cli, ["index", "serve", str(fake_index), "--http", "0.0.0.0:8123", "--no-auth"])
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert result.output.startswith("Error: --no-auth: only on a loopback address")
    result = run(cli, ["index", "serve", str(fake_index), "--http", "0.0.0.0:8123"])
    assert result.exit_code == 1 and "--token-file" in result.output
    result = run(cli, ["index", "serve", str(fake_index), "--http", "nowhere"])
    assert result.exit_code == 1 and "is not HOST:PORT" in result.output
    result = run(cli, ["index", "serve", str(fake_index), "--max-budget", "5"], input="")
    assert result.exit_code == 1 and "Error: --max-budget: only applies with --http" in \
        result.output
    assert not os.listdir(tmp_path)


def test_a_selection_past_the_request_time_stops_and_frees_the_server(setup, monkeypatch):
    from tapt.retriever.methods.random import Random
    from tapt.util.progress import report_step

    def endless(self, ctx, params):        # a method that would run for hours, step by step
        while True:
            report_step("one more round")
            time.sleep(0.05)

    monkeypatch.setattr(Random, "rank", endless)
    with running(service(setup, request_timeout=3)) as base:
        begun = time.monotonic()
        status, answer, _ = call(base, "POST", "/select", {**ASK, "method": "random"},
                                 token=TOKEN)
        assert status == 503 and "did not finish within 3 s" in answer["error"], answer
        # the work stops at its next step: the next request gets its turn at once
        status, answer, _ = call(base, "POST", "/select", ASK, token=TOKEN)
        assert status == 200 and len(answer["ids"]) == 4, answer
        assert time.monotonic() - begun < 30


def test_a_body_that_comes_too_slowly_is_refused_and_frees_its_place(setup):
    import socket

    with running(service(setup, request_timeout=2, max_concurrent=1)) as base:
        host, port = base.rsplit("/", 1)[-1].split(":")
        slow = socket.create_connection((host, int(port)), timeout=30)
        slow.sendall(b"POST /select HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"method\":")
        begun = time.monotonic()
        reply = slow.recv(4096)
        assert b" 408 " in reply.split(b"\r\n")[0] and b"did not arrive within 2 s" in reply
        assert time.monotonic() - begun < 15
        slow.close()
        status, answer, _ = call(base, "POST", "/select", ASK, token=TOKEN)
        assert status == 200, answer


def test_an_error_answer_names_no_server_folder(setup):
    with running(service(setup)) as base:
        status, answer, _ = call(base, "POST", "/select", {**ASK, "task": "nothing/here.txt"},
                                 token=TOKEN)
        assert 400 <= status < 500 and "nothing/here.txt" in answer["error"], answer
        status, other, _ = call(base, "POST", "/select", {**ASK, "params": {"scan": "codes"}},
                                token=TOKEN)
        assert 400 <= status < 500, other
    index = str(setup["index"].path)
    for said in (answer["error"], other["error"]):
        assert str(setup["dir"]) not in said and os.path.realpath(setup["dir"]) not in said
        assert index not in said and os.path.realpath(index) not in said
    assert "the served index" in other["error"], other


def test_a_downloaded_manifest_names_no_server_folder(setup):
    with running(service(setup)) as base:
        status, answer, _ = call(base, "POST", "/select",
                                 {**ASK, "task": "task.txt", "out": "mine/m.jsonl"}, token=TOKEN)
        assert status == 200, answer
        stored = (setup["outs"] / "mine" / "m.jsonl.manifest.json").read_text()
        status, data, headers = call(base, "GET", "/files/mine/m.jsonl.manifest.json",
                                     token=TOKEN)
    assert status == 200 and "m.jsonl.manifest.json" in headers["content-disposition"]
    text = data.decode() if isinstance(data, bytes) else json.dumps(data)
    json.loads(text)
    index = str(setup["index"].path)
    assert os.path.realpath(setup["dir"]) in stored or str(setup["dir"]) in stored
    for server in (str(setup["dir"]), os.path.realpath(setup["dir"]), index,
                   os.path.realpath(index)):
        assert server not in text
