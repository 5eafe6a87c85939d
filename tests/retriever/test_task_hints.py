"""An unknown task-file suffix is refused with the fixes the command has: never
`--input-format` on a command without that option (issue 27, class 9)."""

from __future__ import annotations

import pytest

from hashing_cli import one_error, run  # noqa: F401 - fixtures
from tapt.errors import InputError
from tapt.indexer.reading.reader import read_text, scan_inputs
from tapt.retriever.tasks.forms import task_from_files
from tapt.retriever.tasks.reading import load_task


@pytest.fixture()
def odd_task(tmp_path):
    path = tmp_path / "task.md"
    path.write_text("Patient fever dose.\nKidney biopsy lesion therapy.\n")
    return path


def _command(run, name, fake_index, odd_task, tmp_path, medical_task):
    if name == "select":
        return ["select", "centroid", fake_index, "--task", odd_task, "--budget", "5",
                "--out", tmp_path / "sel.jsonl"]
    if name == "detectors":
        return ["detectors", "rank", fake_index, "--task", odd_task]
    if name == "eval-mlm":
        return ["eval-mlm", "--model", tmp_path / "no-model", "--text", odd_task]
    made = run("select", "centroid", fake_index, "--task", medical_task, "--budget", "5",
               "--out", tmp_path / "made.jsonl")
    assert made.exit_code == 0, made.output
    return ["train", "--selection", tmp_path / "made.jsonl", "--task", odd_task,
            "--steps", "1", "--out", tmp_path / "model"]


@pytest.mark.parametrize("command", ["select", "detectors", "eval-mlm", "train"])
def test_task_commands_never_name_an_option_they_lack(run, fake_index, odd_task, tmp_path,
                                                      medical_task, command):
    argv = _command(run, command, fake_index, odd_task, tmp_path, medical_task)
    result = run(*argv)
    line = one_error(result, "task.md: unknown format", "suffix of its format",
                     "standard input")
    assert "input-format" not in line and "input_format" not in line


def test_the_reader_names_input_format_only_for_callers_that_offer_it(odd_task):
    for read in (lambda: read_text([odd_task]), lambda: task_from_files([odd_task], True)):
        with pytest.raises(InputError) as err:
            read()
        assert "input_format" not in err.value.message
        assert "suffix of its format" in err.value.message and " - " in err.value.message
    for read in (lambda: scan_inputs([odd_task]), lambda: load_task([odd_task])):
        with pytest.raises(InputError, match="`input_format`"):
            read()
    assert load_task([odd_task], input_format="text").sentences[0] == "Patient fever dose."


def test_index_build_still_names_its_option(run, odd_task, tmp_path):
    one_error(run("index", "build", odd_task, "--out", tmp_path / "idx"), "--input-format")


def test_select_reads_the_task_from_standard_input_as_the_hint_says(fake_index, odd_task,
                                                                    tmp_path, monkeypatch):
    from click.testing import CliRunner

    import tapt.indexer.encoding.encoder
    from conftest import HashingEncoder
    from tapt.cli import cli

    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder",
                        lambda spec=None, device="auto", backend="auto", threads=None, **_:
                        HashingEncoder())
    result = CliRunner().invoke(cli, ["-q", "select", "centroid", str(fake_index), "--task", "-",
                                      "--budget", "5", "--out", str(tmp_path / "sel.jsonl")],
                                input=odd_task.read_text())
    assert result.exit_code == 0, result.output
