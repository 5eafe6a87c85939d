"""`tapt.train(compare=...)` / `tapt train --compare`: the same run on random rows of the index
and on the task alone, each set beside the run on held-out text with a paired interval; the
task-only run (TAPT); and `tapt model-path`."""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

from conftest import COMMON, TOPICS, make_sentence
from tapt import api
from tapt.errors import InputError
from tiny_model import write_tiny_bert

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def env(tmp_path_factory, fake_index):
    base = tmp_path_factory.mktemp("compare")
    texts = [" ".join(words) for words in TOPICS.values()] + [" ".join(COMMON)]
    model = write_tiny_bert(base / "bert", texts * 3, hidden_size=16, layers=1,
                            max_positions=32)
    rng = random.Random(2)
    task = [make_sentence(rng, "medical") for _ in range(12)]
    heldout = [make_sentence(rng, "medical") for _ in range(10)]
    sel = api.Index.open(fake_index).select("centroid", task=task, budget="40sent",
                                            progress=False)
    sel.write(base / "sel.jsonl")
    return {"base": base, "model": str(model), "task": task, "heldout": heldout,
            "sel": str(base / "sel.jsonl")}


SMALL = dict(steps=3, batch_size=4, max_length=32, progress=False)


def test_a_run_is_set_beside_random_rows_and_the_task_alone(env):
    out = env["base"] / "run"
    manifest = api.train(env["sel"], out, model=env["model"], task=env["task"],
                         eval_text=env["heldout"], compare=["random", "task"], **SMALL)
    comparison = manifest["comparison"]
    assert set(comparison["loss"]) == {"selection", "random", "task"}
    assert comparison["held_out_documents"] == 10
    for kind in ("random", "task"):
        d = comparison["against"][kind]
        assert d["ci_low"] <= d["delta"] <= d["ci_high"]
        assert d["delta"] == pytest.approx(comparison["loss"]["selection"]
                                           - comparison["loss"][kind], abs=1e-4)
        done = json.loads((out / "compare" / kind / "training_manifest.json").read_text())
        assert done["steps"] == 3 and done["arguments"]["lr"] == manifest["arguments"]["lr"]
    random_run = json.loads((out / "compare" / "random" / "training_manifest.json").read_text())
    assert random_run["selections"][0]["method"] == "random"
    task_run = json.loads((out / "compare" / "task" / "training_manifest.json").read_text())
    assert task_run["selections"] == [] and task_run["examples"]["task"] > 0
    assert json.loads((out / "comparison.json").read_text()) == comparison


@pytest.mark.parametrize("settings, message", [
    ({"compare": ["random"]}, "held-out text"),
    ({"compare": ["task"], "eval_text": ["a held out sentence."]}, "task's text"),
    ({"compare": ["best"], "eval_text": ["x y z."]}, "must be one of random, task"),
])
def test_a_comparison_that_cannot_be_made_is_refused_first(env, settings, message):
    out = env["base"] / "refused"
    with pytest.raises(InputError, match=message) as err:
        api.train(env["sel"], out, model=env["model"], **{**SMALL, **settings})
    assert err.value.param == "compare" and not out.exists()


def test_the_task_alone_trains_and_mix_needs_a_selection(env):
    manifest = api.train([], env["base"] / "tapt", model=env["model"], task=env["task"],
                         **SMALL)
    assert manifest["steps"] == 3 and manifest["examples"]["selection"] == 0
    with pytest.raises(InputError, match="needs a selection"):
        api.train([], env["base"] / "mixed", model=env["model"], task=env["task"], mix="1:1",
                  **SMALL)
    with pytest.raises(InputError, match="task text alone"):
        api.train([], env["base"] / "nothing", model=env["model"], **SMALL)


def test_the_command_prints_the_comparison(env):
    from tapt.cli import cli

    heldout = env["base"] / "heldout.txt"
    heldout.write_text("\n".join(env["heldout"]) + "\n")
    result = CliRunner().invoke(cli, ["-q", "train", "--selection", env["sel"], "--model",
                                      env["model"], "--steps", "2", "--batch-size", "4",
                                      "--max-length", "32", "--eval-text", str(heldout),
                                      "--compare", "random", "--out",
                                      str(env["base"] / "cli")])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[1].startswith("held-out loss on 10 documents (same masks): this run ")
    assert lines[2].lstrip().startswith("vs random") and "95% CI" in lines[2]


def test_model_path_names_the_packaged_model_for_hugging_face_code():
    from transformers import AutoTokenizer

    path = api.model_path()
    assert AutoTokenizer.from_pretrained(path)("hello")["input_ids"][0] == 101
    with pytest.raises(InputError):
        api.model_path("no-such-model-here")
