"""The select/export command line on the fake index (the hashing encoder stands in for the model):
one-line errors, --json, stdin and stdout, output safety, degenerate tasks, exports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import HashingEncoder
from tapt.cli import cli
from tapt.indexer.index import Index


@pytest.fixture(autouse=True)
def hashing_model(monkeypatch):
    """The fake index was built with the hashing encoder: `load_encoder` returns it."""
    monkeypatch.setattr(Index, "load_encoder", lambda self, *a, **k: HashingEncoder())
    monkeypatch.setattr("tapt.indexer.encoding.encoder.load_encoder", lambda *a, **k: HashingEncoder())


def tapt(*args, input=None):
    return CliRunner().invoke(cli, ["-q", *map(str, args)], input=input)


def error_line(result) -> str:
    """The run failed with exactly one line of output, `Error: ...`; returns it."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0, result.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


def test_every_method_is_a_command_with_its_parameters():
    from tapt.retriever.methods import methods

    group = cli.commands["select"]
    assert sorted(group.commands) == sorted(m.name for m in methods())
    knn = {p.name: p for p in group.commands["knn"].params}
    assert knn["k"].default == 50 and "-k" in knn["k"].opts and not knn["budget"].required
    iforest = {p.name: p for p in group.commands["iforest"].params}
    assert set(iforest["prerank"].type.choices) >= {"centroid", "knn", "classifier", "fused"}
    assert "auto" in iforest["detector"].type.choices and iforest["C"].opts == ["--C"]
    assert "task" not in {p.name for p in group.commands["random"].params}
    assert group.commands["centroid"].params[0].name == "idx"


def test_usage_errors_are_one_line_with_the_help_hint(fake_index, medical_task, tmp_path):
    out = tmp_path / "s.jsonl"
    line = error_line(tapt("select", "centroid", fake_index, "--task", medical_task, "--out", out))
    assert "Missing option '--budget'" in line and "(see 'tapt select centroid -h')" in line
    line = error_line(tapt("select", "knn", fake_index, "--task", medical_task, "--k", "x",
                           "--out", out))
    assert "'--k'" in line and "not a valid integer" in line
    assert "No such option" in error_line(tapt("select", "knn", fake_index, "--nope"))
    assert "No such command 'magic'" in error_line(tapt("select", "magic"))
    line = error_line(tapt("select", "iforest", fake_index, "--task", medical_task, "--budget",
                           "0.2", "--alpha", "1", "--out", out))
    assert line == "Error: --alpha: only applies with --weights continuous"
    assert not out.exists()


def test_internal_errors_interrupts_and_tracebacks(fake_index, medical_task, tmp_path,
                                                   monkeypatch):
    import tapt.retriever.selections.make as select

    args = ["select", "centroid", fake_index, "--task", medical_task, "--budget", "3", "--out",
            tmp_path / "s.jsonl"]

    def boom(*a, **k):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(select, "make_selection", boom)
    line = error_line(tapt(*args))
    assert line == ("Error: internal error: RuntimeError: boom second line (run with -vv for "
                    "the traceback)")
    verbose = CliRunner().invoke(cli, ["-vv", *map(str, args)])
    assert verbose.exit_code == 1 and "Traceback" in verbose.output
    assert verbose.output.strip().splitlines()[-1].startswith("Error: internal error")

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(select, "make_selection", interrupt)
    result = tapt(*args)
    assert error_line(result) == "Error: interrupted" and result.exit_code == 130
    assert not (tmp_path / "s.jsonl").exists()


def test_a_closed_stdout_ends_quietly(fake_index, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tapt.cli", "select", "random", str(fake_index),
                             "--budget", "1.0", "--out", "-"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "TAPT_CACHE_DIR": "off"})
    proc.stdout.close()                                    # like `| head` that has had enough
    stderr = proc.stderr.read().decode()
    assert proc.wait() == 141 and "Error" not in stderr and "Traceback" not in stderr, stderr


def test_select_json_stdout_and_stdin(fake_index, medical_task, tmp_path):
    out = tmp_path / "sel.jsonl"
    result = tapt("select", "centroid", fake_index, "--task", medical_task, "--budget", "5",
                  "--out", out, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["method"] == "centroid" and report["output"] == str(out)
    assert report["counts"]["segments"] == 5 and "total_seconds" in report["timings"]
    assert report["manifest"] == f"{out}.manifest.json" and Path(report["manifest"]).is_file()
    piped = CliRunner().invoke(cli, ["-q", "select", "centroid", str(fake_index), "--task", "-",
                                     "--budget", "5", "--out", "-", "--json"],
                               input=medical_task.read_text())
    assert piped.exit_code == 0, piped.output
    lines = piped.stdout.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [json.loads(line)["id"] for line in
                                                          out.read_text().splitlines()]
    summary = json.loads(piped.stderr)
    assert summary["output"] == "-" and summary["manifest"] is None
    assert summary["task"]["files"] == ["<stdin>"] and summary["task"]["sentences"] == 40
    jsonl_task = "".join(json.dumps({"body": t}) + "\n" for t in medical_task.read_text().split("\n")
                         if t)
    fielded = CliRunner().invoke(cli, ["-q", "select", "centroid", str(fake_index), "-t", "-",
                                       "--text-field", "body", "--budget", "5", "--out", "-"],
                                 input=jsonl_task)
    assert fielded.exit_code == 0, fielded.output
    assert fielded.stdout == piped.stdout
    assert "<stdin>: holds no text" in error_line(CliRunner().invoke(
        cli, ["select", "centroid", str(fake_index), "-t", "-", "--budget", "5", "--out", "-"],
        input=""))


def test_select_never_overwrites_inputs_or_foreign_files(fake_index, medical_task, tmp_path):
    task_bytes = medical_task.read_bytes()
    manifest = (Path(fake_index) / "manifest.json").read_bytes()
    base = ["select", "centroid", fake_index, "--task", medical_task, "--budget", "3"]
    assert "also an input" in error_line(tapt(*base, "--out", medical_task, "--overwrite"))
    # the manifest written beside --out X is X.manifest.json: never an input either
    task_named_like_a_manifest = tmp_path / "t3.jsonl.manifest.json"
    task_named_like_a_manifest.write_bytes(task_bytes)
    line = error_line(tapt("select", "centroid", fake_index, "--task", task_named_like_a_manifest,
                           "--budget", "3", "--out", tmp_path / "t3.jsonl", "--overwrite"))
    assert "the selection's manifest" in line and "also an input" in line
    assert task_named_like_a_manifest.read_bytes() == task_bytes
    assert not (tmp_path / "t3.jsonl").exists()
    assert "--out:" in error_line(tapt(*base, "--out", Path(fake_index) / "manifest.json",
                                       "--overwrite"))
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    line = error_line(tapt(*base, "--out", notes))
    assert "never replaces a file it did not write" in line and notes.read_text() == "mine"
    line = error_line(tapt(*base, "--out", notes, "--overwrite"))    # whatever the flags
    assert "never replaces" in line and notes.read_text() == "mine"
    sel = tmp_path / "sel.jsonl"
    assert tapt(*base, "--out", sel).exit_code == 0
    assert tapt("select", "random", fake_index, "--budget", "4", "--out", sel).exit_code == 0
    assert json.loads(sel.read_text().splitlines()[0])["method"] == "random"
    assert medical_task.read_bytes() == task_bytes
    assert (Path(fake_index) / "manifest.json").read_bytes() == manifest
    assert not list(tmp_path.glob(".*"))


@pytest.mark.parametrize("args,message", [
    (["iforest", "--budget", "0.2"], "--task: iforest needs at least 2 task sentences, the task "
                                     "has 1"),
    (["auto", "--budget", "0.2"], "--task: auto needs at least 4"),
    (["centroid", "--budget", "0.0000001"], "--budget: 0.0000001 of 111 segments rounds to none"),
    (["centroid", "--budget", "0.5sent"], "--budget: '0.5sent' is less than one sentence"),
])
def test_degenerate_requests_fail_in_one_line(fake_index, tmp_path, args, message):
    one = tmp_path / "one.txt"
    one.write_text("Patient with fever and kidney lesion.\n")
    method, *rest = args
    line = error_line(tapt("select", method, fake_index, "--task", one, *rest, "--out",
                           tmp_path / "s.jsonl"))
    assert message in line
    assert not (tmp_path / "s.jsonl").exists()


def test_export_command(fake_index, medical_task, tmp_path):
    import pandas as pd

    sel = tmp_path / "sel.jsonl"
    assert tapt("select", "fused", fake_index, "--task", medical_task, "--budget", "40sent",
                "--out", sel).exit_code == 0
    result = tapt("export", sel, "--out", tmp_path / "train.parquet", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["format"] == "parquet"
    df = pd.read_parquet(tmp_path / "train.parquet")
    assert df["domain"].eq("medical").mean() > 0.8
    ok = tapt("export", sel, "--format", "hf", "--out", tmp_path / "ds")
    assert ok.exit_code == 0 and "as hf" in ok.output
    assert "also an input" in error_line(tapt("export", sel, "--format", "jsonl", "--out", sel,
                                              "--overwrite"))
    manifest_bytes = Path(f"{sel}.manifest.json").read_bytes()
    assert "also an input" in error_line(tapt("export", sel, "--format", "jsonl", "--out",
                                              f"{sel}.manifest.json", "--overwrite"))
    assert Path(f"{sel}.manifest.json").read_bytes() == manifest_bytes
    assert "--format" in error_line(tapt("export", sel, "--out", tmp_path / "train.bin"))
    piped = tapt("export", sel, "--format", "txt", "--out", "-")
    assert piped.exit_code == 0 and len(piped.stdout.splitlines()) == len(df)
    assert "as txt -> -" in piped.stderr
    assert "line format" in error_line(tapt("export", sel, "--format", "parquet", "--out", "-"))


def test_index_build_and_add_json(tmp_path, labelled_corpus):
    out = tmp_path / "idx"
    result = tapt("index", "build", labelled_corpus[0], "--out", out, "--no-split",
                  "--segment-size", "4", "--json")
    assert result.exit_code == 0, result.output
    built = json.loads(result.stdout)
    assert built["index"] == str(out) and built["manifest"]["counts"]["sentences"] == 380
    more = tmp_path / "more.txt"
    more.write_text("A brand new document about a ship in a storm.\n")
    result = tapt("index", "add", out, more, "--json")
    assert result.exit_code == 0, result.output
    added = json.loads(result.stdout)
    assert added["added"]["sentences"] == 1 and added["counts"]["sentences"] == 381


def test_eval_refuses_a_selection_edited_after_it_was_written(fake_index, medical_task, tmp_path):
    sel = tmp_path / "sel.jsonl"
    assert tapt("select", "centroid", fake_index, "--task", medical_task, "--budget", "6",
                "--out", sel).exit_code == 0
    ok = tapt("eval", sel, "--index", fake_index, "--label", "medical", "--json")
    assert ok.exit_code == 0, ok.output
    lines = sel.read_text().splitlines(keepends=True)
    sel.write_text("".join(lines[: len(lines) // 2]))
    line = error_line(tapt("eval", sel, "--index", fake_index, "--label", "medical"))
    assert "does not match its manifest" in line


def test_an_interrupted_build_is_one_error_line(labelled_corpus, tmp_path):
    """What was kept and what to run is the Error line; with -q nothing else is printed (run
    as a process: the log lines go to the real stderr)."""
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parents[1])!r})
from conftest import HashingEncoder
import tapt.indexer.encoding.encoder
from tapt.cli import main

class Interrupted(HashingEncoder):
    parts = 0
    def encode(self, texts, batch_size=64):
        self.parts += 1
        if self.parts == 3:
            raise KeyboardInterrupt
        return super().encode(texts, batch_size)

tapt.indexer.encoding.encoder.load_encoder = lambda *a, **k: Interrupted()
sys.argv = ["tapt", "-q", "index", "build", {str(labelled_corpus[0])!r}, "--out",
            {str(tmp_path / "idx")!r}, "--no-split", "--part-size", "40"]
main()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TAPT_CACHE_DIR": "off"})
    assert done.returncode == 130, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert re.fullmatch(r"Error: interrupted: [1-9][\d,]* embedded sentences of this build are "
                        r"kept in .*/\.idx\.building; run the same command again to resume",
                        lines[0]), lines


def test_a_doc_field_no_record_has_is_reported(labelled_corpus, tmp_path, monkeypatch, caplog):
    import tapt.indexer.encoding.encoder
    from tapt.indexer.building.pipeline import doc_field_joined_nothing
    from tapt.indexer.index import Index

    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder", lambda *a, **k: HashingEncoder())
    for field, warned in (("nodoc", True), ("doc", False)):
        out = tmp_path / field
        with caplog.at_level("WARNING"):
            caplog.clear()
            result = CliRunner().invoke(cli, ["-q", "index", "build", str(labelled_corpus[0]),
                                              "--out", str(out), "--no-split", "--doc-field",
                                              field])
        assert result.exit_code == 0, result.output
        assert ("joined no records" in caplog.text) is warned
        assert doc_field_joined_nothing(Index(out).manifest) is warned


def test_sigterm_is_one_error_line_and_leaves_nothing(fake_index, medical_task, tmp_path):
    """A job scheduler's stop (SIGTERM) cleans up as Ctrl-C does: exit 143, one Error line."""
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(Path(__file__).parents[1])!r})
from conftest import HashingEncoder
import tapt.indexer.encoding.encoder
from tapt.retriever.selections import make as select
from tapt.cli import main

def stopped(*a, **k):
    os.kill(os.getpid(), signal.SIGTERM)
    raise AssertionError("SIGTERM did not stop the command")

tapt.indexer.encoding.encoder.load_encoder = lambda *a, **k: HashingEncoder()
select.make_selection = stopped
sys.argv = ["tapt", "select", "centroid", {str(fake_index)!r}, "--task", {str(medical_task)!r},
            "--budget", "3", "--out", {str(tmp_path / "s.jsonl")!r}]
main()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 143 and lines == ["Error: terminated (SIGTERM)"], done.stderr
    assert not any(tmp_path.iterdir())
