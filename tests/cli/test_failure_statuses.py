"""Issue 27, class 5: every failure is one `Error:` line with the right exit status.

A full disk while `tapt train` saves, wrong-typed arguments of `tapt.train` and
`tapt.evaluate_mlm`, SIGTERM at any moment (inside an import, during training, at exit, in a
resumed build), usage errors against the statuses docs/reference/reliability.md lists, and a
budget too large for a float."""

from __future__ import annotations

import errno
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import tapt
from hashing_cli import one_error, run  # noqa: F401 - fixtures
from tapt.cli import cli
from tapt.errors import BudgetError, Interrupted, StorageError, TaptError
from tapt.retriever.ranking.budget import parse_budget

TESTS = Path(__file__).resolve().parents[1]
HERE = TESTS / "support"
ROOT = TESTS.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random BERT and a selection to train it on."""
    import torch

    from hostile_cases import _tiny_training

    torch.set_num_threads(1)
    base = tmp_path_factory.mktemp("tiny")
    model, sel = _tiny_training(base)
    return {"model": str(model), "sel": str(sel), "base": base}


def _train_argv(tiny, out, *extra) -> list[str]:
    return ["-q", "train", "--model", tiny["model"], "--selection", tiny["sel"], "--steps", "3",
            "--batch-size", "4", "--max-length", "32", *extra, "--out", str(out)]


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("WARNING")]


# ------------------------------------------------------------------ a) full disk while saving


def test_torch_and_safetensors_write_errors_are_storage_errors(tmp_path):
    """torch.save's RuntimeError (its OSError only the context) and safetensors' error text
    both become the one "disk full ... nothing was replaced" message."""
    from tapt.trainer.storage import write_failure, writing

    with pytest.raises(StorageError, match="disk full .* nothing was replaced"):
        with writing(tmp_path / "ckpt"):
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError:
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected "
                                   "pos 576 vs 534") from None
    text = "Error while serializing: I/O error: No space left on device (os error 28)"
    assert str(write_failure(RuntimeError(text), tmp_path)).startswith("disk full while")
    other = write_failure(RuntimeError("[enforce fail at x.cc] boom\nmore"), tmp_path)
    assert "boom" in str(other) and "\n" not in str(other)


def test_full_disk_while_training_is_one_line_and_leaves_nothing(tiny, tmp_path):
    """A real full filesystem (tmpfs, root only): the checkpoint's and the final model's
    writes are one StorageError line, nothing half-written remains."""
    import faultfs

    for size, extra in (("256k", ("--save-every", "1")), ("64k", ())):
        disk = tmp_path / f"disk-{size}"
        with faultfs.full_disk(disk, size) as mounted:
            if mounted is None:
                pytest.skip("a full disk needs root (tmpfs) here")
            result = CliRunner().invoke(cli, _train_argv(tiny, disk / "model", *extra))
            lines = _error_lines(result.output)
            assert result.exit_code == 1 and len(lines) == 1, result.output
            assert lines[0].startswith("Error: disk full while writing"), lines
            assert "nothing was replaced" in lines[0] and "RuntimeError" not in lines[0]
            assert list(disk.iterdir()) == [], list(disk.rglob("*"))


def test_full_disk_after_a_checkpoint_keeps_it_and_says_resume(tiny, tmp_path, monkeypatch):
    """The disk fills at the second checkpoint: the first is kept, complete; the message says
    how to continue; no temporary checkpoint folder remains."""
    from tapt.trainer import checkpoint

    calls = {"n": 0}
    real = checkpoint.torch_save

    def fill_on_second_checkpoint(obj, path):
        calls["n"] += 1
        if calls["n"] > 3:      # model, optimizer and rng of the first checkpoint went through
            Path(path).write_bytes(b"PK half")      # as torch leaves it on a full disk
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError:     # torch's own error, the OSError only its context
                raise RuntimeError(  # noqa: B904 - as torch raises it
                    "[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
        real(obj, path)

    monkeypatch.setattr(checkpoint, "torch_save", fill_on_second_checkpoint)
    out = tmp_path / "model"
    with pytest.raises(StorageError) as caught:
        tapt.train(tiny["sel"], out, model=tiny["model"], steps=3, batch_size=4, max_length=32,
                   save_every=1, progress=False)
    message = str(caught.value)
    assert message.startswith("disk full while writing") and "resume" in message, message
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == ["step-1"], kept


# ------------------------------------------------------------- b) wrong types in the train API

TRAIN_BAD = [
    ("selections", None), ("selections", 5), ("selections", [None]), ("selections", ["s", 3]),
    ("out", None), ("out", 3), ("model", 5), ("model", ""), ("task", [None]), ("task", 3),
    ("eval_text", [1]), ("mix", 5), ("weights", None), ("weights", ["discrete"]),
    ("steps", "x"), ("steps", -1), ("steps", 1.5), ("steps", True), ("steps", None),
    ("epochs", "2"), ("batch_size", None), ("batch_size", "8"), ("batch_size", 0),
    ("max_length", None), ("max_length", 4), ("max_length", 64.0), ("lr", "x"), ("lr", None),
    ("lr", math.nan), ("lr", -1), ("lr", 10**400), ("warmup", None), ("warmup", math.inf),
    ("weight_decay", math.inf), ("weight_decay", "0"), ("max_grad_norm", "1"),
    ("max_grad_norm", -0.5), ("mlm_probability", 2), ("mlm_probability", math.nan),
    ("resume", "yes"), ("resume", None), ("text_field", None), ("text_field", ""),
    ("eval_every", -1), ("eval_every", "x"), ("save_every", 0), ("save_every", None),
    ("keep_checkpoints", None), ("keep_checkpoints", 0), ("delete_checkpoints", None),
    ("seed", -1), ("seed", 2**40), ("seed", "x"), ("seed", None), ("device", None),
    ("device", "tpu"), ("progress", None), ("on_step", 5), ("steps", 10**400),
    ("epochs", 10**400), ("batch_size", 10**400), ("max_length", 10**30),
    ("save_every", 10**400), ("eval_every", 10**400), ("keep_checkpoints", 10**400),
]


@pytest.mark.parametrize("param,value", TRAIN_BAD, ids=[f"{p}={v!r}"[:40] for p, v in TRAIN_BAD])
def test_train_refuses_a_wrong_value_naming_it(param, value, tmp_path):
    kwargs = {"selections": [str(tmp_path / "s.jsonl")], "out": tmp_path / "out", "steps": 1}
    if param == "epochs":
        kwargs.pop("steps")
    kwargs[param] = value
    with pytest.raises(TaptError) as caught:
        tapt.train(**kwargs)
    assert param in str(caught.value) or param == "steps", str(caught.value)
    assert not (tmp_path / "out").exists()


EVAL_BAD = [
    ("texts", None), ("texts", 5), ("texts", [None]), ("texts", []), ("model", 3),
    ("max_length", "x"), ("max_length", 2), ("batch_size", 0), ("batch_size", None),
    ("seed", None), ("seed", -3), ("mlm_probability", math.nan), ("mlm_probability", "0.1"),
    ("pseudo", None), ("device", 1), ("text_field", 3),
]


@pytest.mark.parametrize("param,value", EVAL_BAD, ids=[f"{p}={v!r}"[:40] for p, v in EVAL_BAD])
def test_evaluate_mlm_refuses_a_wrong_value_naming_it(param, value, tmp_path):
    (tmp_path / "t.txt").write_text("Some held-out text.\n")
    kwargs = {"texts": str(tmp_path / "t.txt"), param: value}
    with pytest.raises(TaptError) as caught:
        tapt.evaluate_mlm(**kwargs)
    assert param in str(caught.value), str(caught.value)


# ------------------------------------------------------------------------------- c) SIGTERM


def _script(tmp_path: Path, body: str, argv: list[str]) -> subprocess.CompletedProcess:
    """Run the `tapt` command line (its handlers as the console script installs them) after
    `body` has patched what it needs; returns the finished process."""
    script = tmp_path / "run_tapt.py"
    script.write_text(f"""
import os, signal, sys, time, atexit
sys.path.insert(0, {str(HERE)!r}); sys.path.insert(0, {str(TESTS)!r})
sys.argv = ["tapt", *{argv!r}]
from tapt.cli import main
from hashing_cli import patch_encoder
patch_encoder()
{body}
main()
""")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=ENV, cwd=tmp_path)


def test_sigterm_inside_a_lazy_import_is_terminated_not_a_missing_package(tmp_path,
                                                                          fake_index,
                                                                          medical_task):
    """C code that imports a module reports whatever stopped it as ImportError (numpy's
    import_array does); a SIGTERM there is still 143 and the terminated line."""
    (tmp_path / "slowpkg.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(0.3)\n")
    body = f"""
sys.path.insert(0, {str(tmp_path)!r})
from tapt.errors import InputError
from tapt.retriever.selections import make

def make_selection(*a, **k):
    try:
        try:
            import slowpkg
        except BaseException as exc:          # what an extension module's init does
            raise ImportError("slowpkg failed to import") from exc
    except ImportError as exc:
        raise InputError("the package slowpkg is not installed: pip install slowpkg") from exc
    time.sleep(5)
    raise AssertionError("SIGTERM did not stop the command")

make.make_selection = make_selection
"""
    done = _script(tmp_path, body, ["select", "centroid", str(fake_index), "--task",
                                    str(medical_task), "--budget", "3", "--out",
                                    str(tmp_path / "s.jsonl")])
    lines = _error_lines(done.stdout + done.stderr)
    assert done.returncode == 143, (done.returncode, done.stderr)
    assert lines == ["Error: terminated (SIGTERM)"], done.stderr
    assert not (tmp_path / "s.jsonl").exists()


def test_sigterm_swallowed_by_a_library_still_exits_143(tmp_path, fake_index, medical_task):
    """Code that turns the stop into its own error (here a TaptError) does not hide it."""
    body = """
from tapt.errors import InputError
from tapt.retriever.selections import make

def make_selection(*a, **k):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except BaseException as exc:
        raise InputError("some package is missing") from exc

make.make_selection = make_selection
"""
    done = _script(tmp_path, body, ["select", "centroid", str(fake_index), "--task",
                                    str(medical_task), "--budget", "3", "--out",
                                    str(tmp_path / "s.jsonl")])
    assert done.returncode == 143, done.stderr
    assert _error_lines(done.stdout + done.stderr) == ["Error: terminated (SIGTERM)"]


@pytest.mark.parametrize("name,status,line", [("SIGTERM", 143, "terminated (SIGTERM)"),
                                               ("SIGINT", 130, "interrupted")])
def test_sigterm_at_exit_is_143_with_one_line_and_no_atexit_traceback(tmp_path, fake_index, name,
                                                                     status, line):
    """A SIGTERM (or Ctrl-C) while the interpreter runs its atexit handlers: not exit 0 with
    "Exception ignored in atexit callback" and a traceback."""
    body = f"""
from tapt.indexer import index as index_module

real_open = index_module.Index.__init__

def stop_at_exit():
    os.kill(os.getpid(), signal.{name})
    time.sleep(0.3)

def opening(self, *a, **k):
    atexit.register(stop_at_exit)     # as a library the command imports registers its own
    real_open(self, *a, **k)

index_module.Index.__init__ = opening
"""
    done = _script(tmp_path, body, ["index", "info", str(fake_index)])
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode == status, (done.returncode, done.stderr)
    errors = [text for text in done.stderr.splitlines() if text.startswith("Error")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: {line}"), done.stderr


def test_sigterm_during_training_saves_a_checkpoint_and_says_so(tiny, tmp_path):
    """SIGTERM in a training step: the step ends, its checkpoint is saved, exit 143 with the
    one line naming the checkpoint and --resume."""
    body = """
import tapt.modeling.mlm as loss_module
real = loss_module.masked_lm_loss
calls = {"n": 0}

def loss(*a, **k):
    calls["n"] += 1
    if calls["n"] == 2:
        os.kill(os.getpid(), signal.SIGTERM)
    return real(*a, **k)

loss_module.masked_lm_loss = loss
"""
    out = tmp_path / "model"
    done = _script(tmp_path, body, _train_argv(tiny, out, "--save-every", "100"))
    lines = _error_lines(done.stdout + done.stderr)
    assert done.returncode == 143, (done.returncode, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: terminated (SIGTERM) at step 2"), lines
    assert "--resume" in lines[0] and (out / "checkpoints" / "step-2" / "state.json").is_file()


def test_sigterm_message_counts_what_this_run_kept(tmp_path):
    """A resumed build that is stopped again says what *this* run kept, apart from what the
    earlier runs kept."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Sentence number {i} about topic {i % 7}.\n" for i in range(3000)))
    body = """
import conftest
calls = {"n": 0}
real = conftest.HashingEncoder.encode
STOP_AT = int(os.environ["STOP_AT"])

def encode(self, texts, *a, **k):
    calls["n"] += 1
    if calls["n"] == STOP_AT:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(2)
    return real(self, texts, *a, **k)

conftest.HashingEncoder.encode = encode
"""
    argv = ["-q", "index", "build", str(corpus), "--out", str(tmp_path / "idx"),
            "--batch-size", "100", "--part-size", "500"]
    lines = []
    # a part of 500 texts is embedded in 5 chunks of one batch each (the bar moves by rows):
    # the 11th call is in the third part, two parts committed
    for stop_at in ("11", "1", "11"):
        ENV["STOP_AT"] = stop_at
        try:
            done = _script(tmp_path, body, argv)
        finally:
            ENV.pop("STOP_AT")
        assert done.returncode == 143, done.stderr
        lines.append(_error_lines(done.stderr))
    counts = [[int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?= embedded)", ln[0])]
              for ln in lines]
    assert len(lines[0]) == 1 and "of this build are kept" in lines[0][0], lines[0]
    assert "before this run kept anything" in lines[1][0], lines[1]
    assert counts[1] == counts[0], (counts, lines)   # what the first run kept, not more
    assert "this run kept" in lines[2][0] and "with those of earlier runs" in lines[2][0], lines


def test_interrupted_message_apart_from_earlier_runs():
    assert "of this build are kept" in str(Interrupted("build", 10, "w"))
    assert "before this run kept anything; the 10 " in str(Interrupted("build", 10, "w", 10))
    assert "this run kept 5 more" in str(Interrupted("add", 15, "w", 10))


# ------------------------------------------------------------------------ d) exit statuses


def _documented_statuses() -> dict[str, int]:
    """The reliability page's exit-status table: {first words of 'when': status}."""
    page = (ROOT / "docs" / "reference" / "reliability.md").read_text(encoding="utf-8")
    table = page.split("## Exit statuses", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells and cells[0].isdigit():
            rows[cells[1]] = int(cells[0])
    return rows


def _status_for(rows: dict[str, int], words: str) -> int:
    [status] = [s for when, s in rows.items() if when.startswith(words)]
    return status


def test_exit_statuses_are_the_documented_ones(run, fake_index, medical_task, tmp_path):
    """The page and the code agree: usage errors, ordinary failures, Ctrl-C and SIGTERM."""
    from tapt.cli import _Interrupted

    rows = _documented_statuses()
    usage = _status_for(rows, "a usage error")
    failure = _status_for(rows, "any failure")
    assert (usage, failure) == (2, 1)
    assert _status_for(rows, "interrupted by Ctrl-C") == _Interrupted.exit_code == 130
    assert _status_for(rows, "terminated by SIGTERM") == 143
    page = (ROOT / "docs" / "reference" / "reliability.md").read_text(encoding="utf-8")
    assert "exit status 1;" not in page   # the old, wrong promise
    for argv in (["select", "centroid", fake_index, "--bogus"],          # unknown option
                 ["select", "centroid", "--task", medical_task],          # missing argument
                 ["select", "centroid", fake_index, "--task", medical_task, "--budget", "3",
                  "--context", "paragraph", "--out", tmp_path / "s.jsonl"],   # bad choice
                 ["eval-mlm"],                                             # missing option
                 ["train", "--selection", "s.jsonl", "--steps", "x", "--out", "m"],
                 ["no-such-command"]):
        result = run(*argv)
        lines = _error_lines(result.output)
        assert result.exit_code == usage, (argv, result.output)
        assert len(lines) == 1 and lines[0].startswith("Error: "), (argv, result.output)
    failed = run("select", "centroid", fake_index, "--task", medical_task, "--budget", "0",
                 "--out", tmp_path / "s.jsonl")
    assert failed.exit_code == failure
    assert len(_error_lines(failed.output)) == 1
    for argv in ([], ["select"], ["index"]):                 # help, asked for by giving nothing
        shown = CliRunner().invoke(cli, argv)
        assert shown.exit_code == _status_for(rows, "the command did what") == 0, shown.output
        assert "Usage:" in shown.output and "Error" not in shown.output


def test_a_usage_error_from_the_console_script_is_status_2(tmp_path):
    done = subprocess.run([sys.executable, str(HERE / "hashing_cli.py"), "select", "centroid",
                           "--no-such-flag"], capture_output=True, text=True, env=ENV)
    assert done.returncode == 2 and _error_lines(done.stderr)[0].startswith("Error: "), done
    assert len(_error_lines(done.stderr)) == 1


# --------------------------------------------------------------------- e) budgets too large


@pytest.mark.parametrize("spec", ["1e400", "1e400sent", "1e400tok", "1e400seg", "2e308k",
                                  "1" + "0" * 400, "0." + "9" * 400 + "e400"])
def test_a_budget_too_large_for_a_float_says_so(spec):
    with pytest.raises(BudgetError) as caught:
        parse_budget(spec)
    assert "too large" in str(caught.value) and "positive" not in str(caught.value)
    assert len(str(caught.value)) < 200


def test_counts_and_sizes_too_large_for_a_float_say_so():
    from tapt.errors import InputError
    from tapt.indexer.ann.index_choice import parse_memory
    from tapt.indexer.building.build_config import parse_count

    for parse, spec in ((parse_count, "1" + "0" * 400), (parse_count, 10**400),
                        (parse_memory, "1" + "0" * 400), (parse_memory, 10**400)):
        with pytest.raises(InputError, match="too large"):
            parse(spec)
    from tapt.bench.recall import parse_budgets

    with pytest.raises(InputError, match="too large"):
        parse_budgets("oracle,1e400x")


def test_a_budget_too_large_on_the_command_line_and_in_the_api(run, fake_index, medical_task,
                                                               tmp_path):
    result = run("select", "centroid", fake_index, "--task", medical_task, "--budget", "1e400",
                 "--out", tmp_path / "s.jsonl")
    one_error(result, "--budget", "too large")
    result = run("select", "centroid", fake_index, "--task", medical_task, "--budget", "3",
                 "--segment-size", "1" + "0" * 400, "--out", tmp_path / "s.jsonl")
    one_error(result, "--segment-size", "too large")

    with pytest.raises(BudgetError, match="too large"):
        tapt.Index.open(fake_index).select("centroid", task=["a task sentence"],
                                           budget=10**400)
    assert "too small" in str(pytest.raises(BudgetError, parse_budget, "1e-400").value)
