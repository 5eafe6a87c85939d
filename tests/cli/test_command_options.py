"""Options every command shares, wherever they are given, and the exit status of a bad option
value: -q, -v and --json before or after the command's name; a number out of its option's range
is status 1 like every value the library refuses, a value that is not a number status 2."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from conftest import HashingEncoder
from tapt.cli import cli
from tapt.indexer.index import Index


@pytest.fixture(autouse=True)
def hashing_model(monkeypatch):
    monkeypatch.setattr(Index, "load_encoder", lambda self, *a, **k: HashingEncoder())
    monkeypatch.setattr("tapt.indexer.encoding.encoder.load_encoder",
                        lambda *a, **k: HashingEncoder())


def _commands(command: click.Command, path: tuple[str, ...] = ()):
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, command


def test_every_command_takes_quiet_and_verbose_after_its_name():
    for path, command in _commands(cli):
        opts = {o for p in command.params for o in getattr(p, "opts", [])}
        assert {"-q", "--quiet", "-v", "--verbose"} <= opts, path


def test_quiet_after_the_command_hides_the_progress_bars(fake_index, medical_task, tmp_path):
    args = ["select", "centroid", str(fake_index), "--task", str(medical_task), "--budget", "3",
            "--out", str(tmp_path / "s.jsonl")]
    loud = CliRunner().invoke(cli, args)
    quiet = CliRunner().invoke(cli, [*args, "-q", "--overwrite"])
    assert loud.exit_code == quiet.exit_code == 0, (loud.output, quiet.output)
    assert "score centroid: " in loud.output
    assert "score centroid" not in quiet.output and "selected 3 segments" in quiet.output


def test_json_before_the_command_is_its_json(fake_index, medical_task, tmp_path):
    result = CliRunner().invoke(cli, ["-q", "--json", "select", "centroid", str(fake_index),
                                      "--task", str(medical_task), "--budget", "3",
                                      "--out", str(tmp_path / "s.jsonl")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["counts"]["segments"] == 3
    refused = CliRunner().invoke(cli, ["--json", "index", "repair", str(fake_index)])
    assert refused.exit_code == 2 and "has no --json" in refused.output


def test_no_option_keeps_a_bare_click_range():
    """Every number range is one that refuses out-of-range values with status 1."""
    for path, command in _commands(cli):
        for param in command.params:
            assert not isinstance(param.type, click.types._NumberRangeBase), (path, param.name)


@pytest.mark.parametrize("args", [
    ["select", "knn", "IDX", "--task", "TASK", "--k", "0"],
    ["select", "centroid", "IDX", "--task", "TASK", "--budget", "3", "--segment-size", "0"],
    ["select", "centroid", "IDX", "--task", "TASK", "--budget", "3", "--seed", "-1"],
    ["index", "verify", "IDX", "--sample", "0"],
    ["index", "recall", "IDX", "--values", "0,3"],
])
def test_a_value_out_of_range_is_status_1_and_not_a_number_status_2(args, fake_index,
                                                                    medical_task, tmp_path):
    """The last option of `args` gets the bad value; `--budget 0` (the library's refusal) is
    status 1 too."""
    argv = [str(fake_index) if a == "IDX" else str(medical_task) if a == "TASK" else a
            for a in args]
    out = ["--out", str(tmp_path / "s.jsonl")] if argv[0] == "select" else []
    for value, status in ((argv[-1], 1), ("x", 2)):
        result = CliRunner().invoke(cli, ["-q", *argv[:-1], value, *out])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == status, (value, result.output)
        assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
        if status == 1:
            assert lines[0].startswith(f"Error: {argv[-2]}: "), result.output
    budget = CliRunner().invoke(cli, ["-q", "select", "centroid", str(fake_index), "--task",
                                      str(medical_task), "--budget", "0",
                                      "--out", str(tmp_path / "s.jsonl")])
    assert budget.exit_code == 1, budget.output
