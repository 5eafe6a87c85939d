"""Training runs on a tiny random BERT: learning, exact resume, weights, refusals, eval-mlm, CLI."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
from pathlib import Path

import pytest

from tapt.errors import InputError, OutputError
from tapt.retriever.selections.file_format import SelectedSegment, write_selection
from tapt.trainer.config import TrainConfig
from tapt.trainer.loop import TrainingInterrupted, train
from tapt.trainer.plan import mix_counts
from tiny_model import write_tiny_bert

os.environ.setdefault("HF_HUB_OFFLINE", "1")

NOUNS = "cat dog bird fish horse cow".split()
VERBS = "sees likes chases eats".split()
ADJS = "big small red old".split()


def sentence(rng: random.Random) -> str:
    return f"the {rng.choice(ADJS)} {rng.choice(NOUNS)} {rng.choice(VERBS)} the {rng.choice(NOUNS)} ."


def selection_manifest(uuid: str = "uuid-1") -> dict:
    return {"method": "knn", "params": {"k": 5},
            "index": {"path": "idx", "uuid": uuid, "manifest_sha256": "0" * 64, "model": "tiny"},
            "task": {"files": ["task.txt"], "sha256": "0" * 64, "sentences": 10},
            "counts": {"segments": 0}, "segment_size": 4}


def make_selection(path: Path, n: int, seed: int, weight: float = 1.0, uuid: str = "uuid-1") -> Path:
    rng = random.Random(seed)
    segments = []
    for i in range(n):
        sents = [sentence(rng) for _ in range(rng.randint(2, 5))]
        segments.append(SelectedSegment(i, i, 1.0 - i / n, weight, "knn", i, (8 * i, 8 * i + len(sents)),
                                        " ".join(sents), sents))
    write_selection(path, segments, selection_manifest(uuid))
    return path


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A tiny model, two selections (weights 1 and 0.5), task and held-out text."""
    base = tmp_path_factory.mktemp("trainer")
    rng = random.Random(0)
    texts = [sentence(rng) for _ in range(200)]
    model = write_tiny_bert(base / "model", texts, hidden_size=32, layers=2, max_positions=64)
    (base / "task.txt").write_text("\n".join(sentence(rng) for _ in range(12)) + "\n")
    (base / "heldout.txt").write_text("\n".join(sentence(rng) for _ in range(16)) + "\n")
    return {
        "base": base,
        "model": str(model),
        "sel": str(make_selection(base / "sel.jsonl", 24, seed=1)),
        "half": str(make_selection(base / "half.jsonl", 24, seed=1, weight=0.5)),
        "other": str(make_selection(base / "other.jsonl", 24, seed=2)),
        "task": str(base / "task.txt"),
        "heldout": str(base / "heldout.txt"),
    }


def config(env, out, **kw) -> TrainConfig:
    args = dict(selections=(env["sel"],), out=str(out), model=env["model"], steps=10, batch_size=4,
                max_length=32, lr=2e-3, save_every=100, progress=False)
    args.update(kw)
    return TrainConfig(**args)


def test_loss_decreases_and_output_is_a_model(env, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out = tmp_path / "run"
    manifest = train(config(env, out, steps=40, batch_size=8, eval_text=(env["heldout"],),
                            eval_every=20, task=(env["task"],), mix="1:2"))
    curve = manifest["loss_curve"]
    assert len(curve) == 40
    assert sum(curve[-5:]) / 5 < sum(curve[:5]) / 5 - 0.2
    assert [e["step"] for e in manifest["evals"]] == [0, 20, 40]
    assert manifest["evals"][-1]["loss"] < manifest["evals"][0]["loss"]
    examples = manifest["examples"]
    assert examples["task"] == 12 and examples["selection"] >= 24
    assert examples["per_epoch"] == sum(mix_counts(12, examples["selection"], (1, 2)))
    on_disk = json.loads((out / "training_manifest.json").read_text())
    assert on_disk["steps"] == 40 and on_disk["train_loss"] == pytest.approx(manifest["train_loss"])
    assert {"python", "torch", "transformers", "numpy"} <= set(on_disk["versions"])
    assert on_disk["selections"][0]["manifest_sha256"] and on_disk["arguments"]["lr"] == 2e-3
    assert not [p for p in out.iterdir() if p.name.startswith(".final-tmp")]
    AutoModelForMaskedLM.from_pretrained(out)
    AutoTokenizer.from_pretrained(out)


def test_resume_reproduces_the_uninterrupted_run(env, tmp_path):
    kw = dict(eval_text=(env["heldout"],), eval_every=3, save_every=3)
    reference = train(config(env, tmp_path / "ref", **kw))

    def crash(step, loss):  # dies after step 7: the last checkpoint is step-6
        if step == 7:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError):
        train(config(env, tmp_path / "crashed", **kw), on_step=crash)
    assert (tmp_path / "crashed" / "checkpoints" / "step-6").is_dir()
    resumed = train(config(env, tmp_path / "crashed", resume=True, **kw))
    assert resumed["resumed_at"] == [6]
    assert resumed["loss_curve"] == reference["loss_curve"]
    assert resumed["evals"] == reference["evals"]

    def ctrl_c(step, loss):
        if step == 4:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(TrainingInterrupted) as caught:
        train(config(env, tmp_path / "interrupted", **kw), on_step=ctrl_c)
    assert caught.value.step == 4 and caught.value.checkpoint.name == "step-4"
    assert not (tmp_path / "interrupted" / "training_manifest.json").exists()
    again = train(config(env, tmp_path / "interrupted", resume=True, **kw))
    assert again["loss_curve"] == reference["loss_curve"]


@pytest.fixture(scope="module")
def partial_run(env, tmp_path_factory):
    out = tmp_path_factory.mktemp("partial") / "run"

    def stop(step, loss):
        if step == 2:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        train(config(env, out, save_every=1), on_step=stop)
    return out


def test_a_damaged_checkpoint_never_resumes(env, tmp_path):
    """A byte flipped in a checkpoint's weights fails its recorded checksum: resuming refuses
    it (it used to resume and train on the damaged weights)."""
    out = tmp_path / "run"

    def stop(step, loss):
        if step == 3:                      # after step 2's checkpoint
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        train(config(env, out, save_every=2), on_step=stop)
    weights = out / "checkpoints" / "step-2" / "model.pt"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(InputError, match="step-2 is damaged: model.pt does not match"):
        train(config(env, out, save_every=2, resume=True))
    assert weights.read_bytes() == bytes(data)      # left as it was, for the user to look at


@pytest.mark.parametrize("change", [
    {"lr": 1e-3}, {"batch_size": 2}, {"max_length": 24}, {"seed": 1}, {"weights": "continuous"},
    {"selections": "other"}, {"task": "task"}, {"model": "other-model"}, {"steps": 20},
    {"eval_text": "heldout"},
])
def test_resume_with_another_configuration_is_refused(env, partial_run, change):
    change = dict(change)
    if change.get("selections") == "other":
        change["selections"] = (env["other"],)
    if change.get("task") == "task":
        change["task"] = (env["task"],)
    if change.get("eval_text") == "heldout":          # its losses would mix two held-out sets
        change["eval_text"] = (env["heldout"],)
    if change.get("model") == "other-model":
        other = env["base"] / "model2"
        if not other.exists():
            write_tiny_bert(other, [sentence(random.Random(9)) for _ in range(50)], seed=1)
        change["model"] = str(other)
    before = sorted(p.name for p in (partial_run / "checkpoints").iterdir())
    with pytest.raises(InputError, match="another configuration"):
        train(config(env, partial_run, save_every=1, resume=True, **change))
    with pytest.raises(OutputError, match="`resume`"):
        train(config(env, partial_run, save_every=1))
    assert sorted(p.name for p in (partial_run / "checkpoints").iterdir()) == before


def test_continuous_weights_scale_the_loss(env, tmp_path):
    discrete = train(config(env, tmp_path / "d", selections=(env["half"],), steps=1))
    continuous = train(config(env, tmp_path / "c", selections=(env["half"],), steps=1,
                              weights="continuous"))
    assert continuous["loss_curve"][0] == pytest.approx(0.5 * discrete["loss_curve"][0], rel=1e-6)
    sample = train(config(env, tmp_path / "s", selections=(env["half"],), steps=None, epochs=1,
                          weights="sample", delete_checkpoints=True, save_every=2))
    assert sample["steps"] == sample["examples"]["steps_per_epoch"] == len(sample["loss_curve"])
    assert not (tmp_path / "s" / "checkpoints").exists()


def test_bad_inputs_are_refused_and_nothing_is_written(env, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    no_tok = tmp_path / "no-tokenizer"
    no_tok.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tok / name).write_bytes((Path(env["model"]) / name).read_bytes())
    gpt = tmp_path / "gpt"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=60, bos_token_id=0,
                               eos_token_id=0)).save_pretrained(gpt)
    (gpt / "vocab.json").write_text("{}")
    empty = tmp_path / "empty.jsonl"
    write_selection(empty, [], selection_manifest())
    afile = tmp_path / "afile"
    afile.write_text("x")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    cases = [
        ({"model": str(no_tok)}, "tokenizer"),
        ({"model": str(gpt)}, "not a masked-LM"),
        ({"model": str(tmp_path / "missing-model")}, "does not exist"),
        ({"selections": (str(empty),)}, "no segments"),
        ({"out": str(afile / "sub")}, "not a directory"),
        ({"out": str(afile)}, "is a file, not a training directory"),
        ({"out": str(occupied)}, "not a training directory as tapt wrote it.*never replaced"),
        ({"out": str(occupied), "resume": True},
         "not a training directory as tapt wrote it.*never replaced"),
        ({"max_length": 100}, "exceeds"),
        ({"eval_text": (str(tmp_path / "nope.txt"),)}, "does not exist"),
    ]
    for change, message in cases:
        out = change.pop("out", str(tmp_path / "out"))
        with pytest.raises((InputError, OutputError), match=message):
            train(config(env, out, **change))
        assert not (tmp_path / "out").exists(), change
    assert [p.name for p in occupied.iterdir()] == ["notes.txt"]


def test_failed_fresh_run_leaves_nothing(env, tmp_path):
    def boom(step, loss):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        train(config(env, tmp_path / "out"), on_step=boom)
    assert not (tmp_path / "out").exists()


def test_base_encoder_gets_a_tied_head(env, tmp_path, caplog):
    from transformers import BertModel

    from tapt.modeling.mlm import load_mlm

    full, _, _ = load_mlm(env["model"])
    BertModel(full.config).save_pretrained(tmp_path / "base")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "base" / name).write_bytes((Path(env["model"]) / name).read_bytes())
    with caplog.at_level(logging.WARNING, logger="tapt.modeling.mlm"):
        model, _, info = load_mlm(str(tmp_path / "base"))
    assert info["head_initialised"] and "newly initialised" in caplog.text
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_eval_mlm_fixed_masks_and_pseudo_perplexity(env, tmp_path):
    from tapt.trainer.evaluate import evaluate_text

    first = evaluate_text(env["model"], [env["heldout"]], max_length=32, batch_size=8, seed=0)
    second = evaluate_text(env["model"], [env["heldout"]], max_length=32, batch_size=8, seed=0)
    assert first == second and first["tokens"] > 0
    assert first["perplexity"] == pytest.approx(2.718281828 ** first["loss"], rel=1e-6)
    pseudo = evaluate_text(env["model"], [env["heldout"]], max_length=32, pseudo=True)
    assert pseudo["method"] == "pseudo-perplexity" and pseudo["tokens"] == 16 * 7
    with pytest.raises(InputError):
        evaluate_text(env["model"], [str(tmp_path / "missing.txt")])
    with pytest.raises(InputError, match="exceeds what .* accepts") as err:   # not a crash
        evaluate_text(env["model"], [env["heldout"]], max_length=4096)
    assert err.value.param == "max_length"


def test_cli_train_and_eval_mlm(env, tmp_path):
    from click.testing import CliRunner

    from tapt.cli import cli

    out = tmp_path / "cli-run"
    runner = CliRunner()
    result = runner.invoke(cli, ["-q", "train", "--model", env["model"], "--selection", env["sel"],
                                 "--task", env["task"], "--mix", "1:1", "--steps", "3",
                                 "--batch-size", "4", "--max-length", "32", "--lr", "1e-3",
                                 "--out", str(out), "--eval-text", env["heldout"]])
    assert result.exit_code == 0, result.output
    assert (out / "training_manifest.json").is_file() and "3 steps" in result.output
    result = runner.invoke(cli, ["eval-mlm", "--model", str(out), "--text", env["heldout"],
                                 "--max-length", "32", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["tokens"] > 0 and report["perplexity"] > 1
    again = runner.invoke(cli, ["train", "--model", env["model"], "--selection", env["sel"],
                                "--steps", "3", "--out", str(out)])
    assert again.exit_code != 0 and "--resume" in again.output
    both = runner.invoke(cli, ["train", "--model", env["model"], "--selection", env["sel"],
                               "--out", str(tmp_path / "x")])
    assert both.exit_code != 0 and "--steps" in both.output


def test_task_and_held_out_text_use_the_corpus_readers(env, tmp_path):
    """--task from standard input and a Parquet --eval-text with its own column, read and split
    by the corpus readers; the same task file twice is read once."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from tapt.cli import cli
    from tapt.trainer.evaluate import evaluate_text

    task_text = Path(env["task"]).read_text()
    heldout = [line for line in Path(env["heldout"]).read_text().splitlines() if line]
    pq.write_table(pa.table({"body": heldout, "n": list(range(len(heldout)))}),
                   tmp_path / "heldout.parquet")
    from_parquet = evaluate_text(env["model"], [str(tmp_path / "heldout.parquet")], max_length=32,
                                 batch_size=8, text_field="body")
    from_text = evaluate_text(env["model"], [env["heldout"]], max_length=32, batch_size=8)
    assert from_parquet["loss"] == from_text["loss"] and from_parquet["tokens"] == from_text["tokens"]

    out = tmp_path / "stdin-run"
    result = CliRunner().invoke(cli, ["-q", "train", "--model", env["model"], "--selection",
                                      env["sel"], "--task", "-", "--steps", "2", "--batch-size", "4",
                                      "--max-length", "32", "--out", str(out)], input=task_text)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "training_manifest.json").read_text())
    assert [t["path"] for t in manifest["task"]] == ["<stdin>"]
    twice = train(TrainConfig(model=env["model"], selections=(env["sel"],),
                              task=(env["task"], env["task"]), steps=2, batch_size=4,
                              max_length=32, out=str(tmp_path / "twice"), progress=False))
    assert twice["examples"]["task"] == manifest["examples"]["task"]
    assert twice["task"][0]["sha256"] == manifest["task"][0]["sha256"]


def test_a_diverging_run_fails_instead_of_saving_a_nan_model(env, tmp_path):
    from tapt.errors import TaptError

    out = tmp_path / "run"
    with pytest.raises(TaptError, match="training diverged: the loss is (nan|inf)"):
        train(config(env, out, steps=6, lr=1e30))
    assert not out.exists()               # a fresh run that failed leaves nothing behind
