"""Serve answers are always valid JSON (issue 27, class 7): a request holding a number JSON
cannot spell (NaN, an infinity, `1e999`) is refused with an error answer, never echoed; every
answer is written as strict JSON; and `"out": "-"` means what `tapt select --out -` means (the
selection's lines, here in the answer), never a file named `-`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import tapt
import tapt.indexer.encoding.encoder
from conftest import HashingEncoder
from hostile_cases import _RESTORE, _fake_ray
from tapt.api.served import answer_line, answer_request
from tapt.cli import cli


def strict(line: str):
    """Parse JSON as any strict reader does: NaN and infinities are not JSON."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    value = json.loads(line, parse_constant=refuse)
    json.dumps(value, allow_nan=False)      # 1e999 parses as inf: not JSON either
    return value


@pytest.fixture()
def index(fake_index, monkeypatch, tmp_path):
    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder",
                        lambda spec=None, device="auto", backend="auto", threads=None, **_:
                        HashingEncoder())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "task.txt").write_text("Patient fever therapy dose.\nKidney biopsy lesion.\n")
    return tapt.Index.open(fake_index)


REQUEST = '"method": "centroid", "task": "task.txt", "budget": "3"'


@pytest.mark.parametrize("text,where,echo", [
    ('{"id": 1e999, ' + REQUEST + "}", "id: ", None),
    ('{"id": -1e999, ' + REQUEST + "}", "id: ", None),
    ('{"id": NaN, ' + REQUEST + "}", "id: ", None),
    ('{"id": Infinity, ' + REQUEST + "}", "id: ", None),
    ('{"id": 7, ' + REQUEST.replace('"3"', "1e999") + "}", "budget: ", 7),
    ('{"id": "a", "method": "knn", "task": "task.txt", "params": {"k": NaN}}', "params.k: ", "a"),
    ('{"id": 8, "method": "knn", "task": "task.txt", "params": {"k": 3, "x": [1, [-1e400]]}}',
     "params.x[1][0]: ", 8),
    ('{"id": 9, ' + REQUEST + ', "seed": Infinity}', "seed: ", 9),
])
def test_a_number_json_cannot_spell_is_refused_not_echoed(index, text, where, echo):
    answer = answer_request(index, text)
    line = answer_line(answer)
    assert strict(line) == answer and answer["id"] == echo
    assert answer["error"].startswith(where) and "finite number" in answer["error"], answer


def test_python_requests_are_held_to_the_same_rules(index):
    assert "not NaN" in answer_request(index, {"id": float("nan"), "method": "random"})["error"]
    assert "not bool" in answer_request(index, {"id": True, "method": "random"})["error"]
    looped: dict = {"id": 1, "method": "random"}
    looped["params"] = looped
    assert "nested more than" in answer_request(index, looped)["error"]
    deep = "[" * 100_000 + "]" * 100_000
    assert answer_request(index, deep) == {
        "id": None, "error": "request: not a JSON object (nested too deeply)"}
    # ids JSON can carry are echoed as they are
    for rid in ("x", 0, -3, 2.5, 10 ** 30, None):
        assert answer_request(index, {"id": rid, "method": "nope"})["id"] == rid


def test_an_answer_is_always_strict_json(index):
    broken = {"id": 3, "method": "centroid", "ids": [1], "seconds": float("inf")}
    assert strict(answer_line(broken)) == {
        "id": 3, "error": "request: its answer cannot be written as JSON (ValueError: Out of "
                          "range float values are not JSON compliant)"}
    assert strict(answer_line({"id": float("nan"), "x": object()}))["id"] is None


def test_out_dash_answers_the_lines_select_writes_to_stdout(index, tmp_path):
    answer = answer_request(index, '{"id": 1, ' + REQUEST + ', "out": "-"}')
    assert answer["out"] == "-" and "error" not in answer, answer
    assert not (tmp_path / "-").exists() and not (tmp_path / "-.manifest.json").exists()
    run = CliRunner().invoke(cli, ["-q", "select", "centroid", str(index.path), "--task",
                                   "task.txt", "--budget", "3", "--out", "-"])
    assert run.exit_code == 0, run.output
    lines = [strict(line) for line in run.output.splitlines() if line.startswith("{")]
    assert answer["selection"] == lines and len(lines) == answer["segments"] == 3
    assert [s["id"] for s in lines] == answer["ids"]
    strict(answer_line(answer))
    # a file path still writes the file; "-" needs no overwrite to be answered again
    again = answer_request(index, '{"id": 2, ' + REQUEST + ', "out": "-", "overwrite": true}')
    assert again["selection"] == lines
    written = answer_request(index, '{"id": 3, ' + REQUEST + ', "out": "sel.jsonl"}')
    assert "selection" not in written and Path(written["out"]).is_file()


def test_cli_serve_writes_only_strict_json_lines(index, tmp_path):
    requests = ['{"id": 1e999, ' + REQUEST + "}", '{"id": NaN}',
                '{"id": 2, ' + REQUEST + ', "out": "-"}', "[" * 5000 + "]" * 5000]
    (tmp_path / "requests.jsonl").write_text("\n".join(requests) + "\n")
    _fake_ray(tmp_path)                   # the actors in this process, no Ray cluster
    try:
        run = CliRunner().invoke(cli, ["-q", "index", "serve", str(index.path), "--requests",
                                       "requests.jsonl"])
    finally:
        while _RESTORE:
            _RESTORE.pop()()
    lines = run.output.strip().splitlines()
    assert run.exit_code == 1 and lines[-1].startswith("Error: 3 of 4 request(s) failed")
    answers = [strict(line) for line in lines[:-1]]
    assert [a["id"] for a in answers] == [None, None, 2, None]
    assert answers[2]["out"] == "-" and len(answers[2]["selection"]) == 3
    assert not (tmp_path / "-").exists()
