"""What a served index makes of each request line and of its own state: a line that is not
UTF-8, a bare carriage return, an over-long line, a task given as a URL or an empty path, keys
of the request put into `params`, lone surrogates, paths a shell would have expanded; a closed
`ServedIndex`, resources the cluster cannot supply, an address that names another cluster."""

from __future__ import annotations

import io
import json
import types

import pytest
from click.testing import CliRunner
from test_serve_answers import index  # noqa: F401 - the fixture: the fake index, a task file

import tapt
import tapt.indexer.encoding.encoder
from conftest import HashingEncoder
from hostile_cases import _RESTORE, _fake_ray
from tapt.api.served import answer_request, answer_stream
from tapt.cli import cli
from tapt.errors import InputError
from tapt.indexer.building.executors.ray_executor import ExecutorError

REQUEST = '"method": "centroid", "task": "task.txt", "budget": "3"'


@pytest.fixture()
def fake_ray(tmp_path):
    _fake_ray(tmp_path)                   # the actors in this process, no Ray cluster
    yield
    while _RESTORE:
        _RESTORE.pop()()


def _answers(index, data: bytes, limit: int = 1 << 20) -> list[dict]:
    return list(answer_stream(index, io.BytesIO(data), limit))


def test_a_line_that_is_not_utf8_is_answered_and_the_next_one_too(index):
    first, second = _answers(index, b'{"id": 1, "method": "caf\xe9"}\n{"id": 2, '
                             + REQUEST.encode() + b"}\n")
    assert first == {"id": None, "error": "request: not valid UTF-8 (byte 25); send requests "
                                          "as UTF-8 JSON"}
    assert second["id"] == 2 and second["segments"] == 3


def test_a_bare_carriage_return_does_not_split_a_request(index):
    answers = _answers(index, b'{"id": 1,\r' + REQUEST.encode() + b"}\r\n\n")
    assert len(answers) == 1 and answers[0]["segments"] == 3, answers


def test_a_line_longer_than_the_limit_is_one_error_and_reading_goes_on(index):
    long = b'{"id": 1, "task": ["' + b"x" * 5000 + b'"]}\n'
    answers = _answers(index, long + b'{"id": 2, ' + REQUEST.encode() + b"}\n", limit=1000)
    assert answers[0] == {"id": None, "error": "request: longer than 1,000 bytes; give a "
                                               "long task as a file's path"}
    assert answers[1]["id"] == 2 and answers[1]["segments"] == 3


def test_the_cli_answers_a_bad_line_and_goes_on(index, tmp_path, fake_ray):
    (tmp_path / "requests.jsonl").write_bytes(b'{"id": "\xff"}\n{"id": 2, ' + REQUEST.encode()
                                              + b"}\n")
    run = CliRunner().invoke(cli, ["-q", "index", "serve", str(index.path), "--requests",
                                   "requests.jsonl"])
    lines = run.output.strip().splitlines()
    assert run.exit_code == 1 and lines[-1].startswith("Error: 1 of 2 request(s) failed")
    assert [json.loads(line)["id"] for line in lines[:-1]] == [None, 2]


def test_a_task_url_is_read_as_select_reads_it(index, tmp_path):
    url = (tmp_path / "task.txt").as_uri()
    answer = answer_request(index, {"id": 1, "method": "centroid", "task": url, "budget": "3"})
    assert answer.get("segments") == 3, answer
    same = answer_request(index, {"id": 2, "method": "centroid", "task": "task.txt",
                                  "budget": "3"})
    assert answer["ids"] == same["ids"]
    files = answer_request(index, {"id": 3, "method": "centroid", "task": {"files": [url]},
                                   "budget": "3"})
    assert files["ids"] == same["ids"]


@pytest.mark.parametrize("task", ["", {"files": [""]}, {"files": ["task.txt", " "]}])
def test_an_empty_task_path_is_refused(index, task):
    answer = answer_request(index, {"id": 1, "method": "centroid", "task": task, "budget": "3"})
    assert "is an empty path" in answer["error"] and answer["error"].startswith("task: ")


@pytest.mark.parametrize("key", ["seed", "method", "budget", "task", "out"])
def test_a_request_key_inside_params_is_named(index, key):
    answer = answer_request(index, {"id": 1, "method": "centroid", "task": "task.txt",
                                    "budget": "3", "params": {key: 1}})
    assert answer["error"] == (f"params.{key}: {key} is a key of the request, not a method "
                               "parameter: give it beside params")


def test_a_server_setting_inside_params_is_refused(index):
    answer = answer_request(index, {"id": 1, "method": "centroid", "task": "task.txt",
                                    "budget": "3", "params": {"model": "/elsewhere"}})
    assert answer["error"].startswith("params.model: model is not a parameter a request sets")
    context = answer_request(index, {"id": 2, "method": "centroid", "task": "task.txt",
                                     "budget": "3", "params": {"context": "sentence"}})
    assert context["segments"] == 3


@pytest.mark.parametrize("text,where", [
    ('{"id": 1, "method": "cen\\ud800troid"}', "method: "),
    ('{"id": 1, ' + REQUEST + ', "out": "s\\udfff.jsonl"}', "out: "),
    ('{"id": 1, ' + REQUEST + ', "params": {"\\ud800": 1}}', "params: "),
    ('{"id": 1, "method": "centroid", "task": ["fever \\udc00"], "budget": "3"}', "task[0]: "),
])
def test_a_lone_surrogate_is_refused_by_where_it_is(index, text, where):
    answer = answer_request(index, text)
    assert answer["error"].startswith(where) and "lone surrogate" in answer["error"], answer
    assert "Error" not in answer["error"] and "codec" not in answer["error"]


@pytest.mark.parametrize("out", ["~/sel.jsonl", "$HOME/sel.jsonl", "${HOME}/s.jsonl"])
def test_paths_a_shell_would_expand_are_refused_not_taken_literally(index, tmp_path, out):
    answer = answer_request(index, {"id": 1, "method": "centroid", "task": "task.txt",
                                    "budget": "3", "out": out})
    assert "used as written, never expanded" in answer["error"], answer
    assert not (tmp_path / "~").exists() and not (tmp_path / "$HOME").exists()
    task = answer_request(index, {"id": 1, "method": "centroid", "task": out, "budget": "3"})
    assert "used as written" in task["error"]


def test_a_closed_served_index_refuses_to_answer(fake_index, fake_ray, monkeypatch, tmp_path):
    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder",
                        lambda *a, **k: HashingEncoder())
    served = tapt.serve(fake_index)
    assert len(served.select("centroid", task=["Patient fever therapy dose."],
                             budget="3")) == 3
    served.close()
    with pytest.raises(InputError, match="the served index is closed"):
        served.select("centroid", task=["Patient fever therapy dose."], budget="3")
    with pytest.raises(InputError, match="closed"):
        served.score_rows(lambda rows: rows[:, 0])
    answer = answer_request(served, {"id": 1, "method": "random", "budget": "3"})
    assert answer["error"].startswith("the served index is closed")


def test_resources_the_cluster_cannot_supply_are_refused(fake_index, fake_ray):
    with pytest.raises(InputError, match="the resource 'index-node'.*offers 0"):
        tapt.serve(fake_index, resources={"index-node": 1})
    for bad in ({"index-node": 0}, {"index-node": "1"}, ["index-node"], {"": 1}):
        with pytest.raises(InputError, match="resources"):
            tapt.serve(fake_index, resources=bad)


def test_an_address_naming_another_cluster_is_refused_when_connected(monkeypatch):
    from tapt.indexer.building import ray_cluster

    context = types.SimpleNamespace(gcs_address="127.0.0.1:6379")
    ray = types.SimpleNamespace(is_initialized=lambda: True,
                                get_runtime_context=lambda: context)
    monkeypatch.setattr(ray_cluster, "import_ray", lambda *a, **k: ray)
    assert ray_cluster.connect(None) is False
    assert ray_cluster.connect("auto") is False
    assert ray_cluster.connect("127.0.0.1:6379") is False
    assert ray_cluster.connect("localhost:6379") is False
    with pytest.raises(ExecutorError, match="connected to the Ray cluster at 127.0.0.1:6379 "
                                            "already; 10.255.0.1:6380 names another"):
        ray_cluster.connect("10.255.0.1:6380")
    with pytest.raises(ExecutorError, match="names another"):
        ray_cluster.connect("127.0.0.1:7000")

