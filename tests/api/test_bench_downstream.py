"""`tapt.bench_downstream` and `tapt bench downstream` on the hashing-encoder index and a tiny
BERT: all five conditions, the report, resume, refusals."""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

from conftest import COMMON, TOPICS, HashingEncoder, make_sentence
from tapt import api
from tapt.errors import InputError, TaptError
from tapt.trainer.tiny_model import write_tiny_bert

SMALL = dict(budget="40sent", steps=3, batch_size=4, max_length=16, train_size=12,
             test_size=12, ft_epochs=1, ft_batch_size=6, oracle_value="medical",
             group_field="doc", progress=False)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("downstream")
    texts = [" ".join(words) for words in TOPICS.values()] + [" ".join(COMMON)]
    model = write_tiny_bert(base / "bert", texts * 3, hidden_size=16, layers=1,
                            max_positions=32)
    rng = random.Random(5)
    rows = [{"text": make_sentence(rng, topic), "label": topic, "doc": f"{topic}:{d}"}
            for topic in ("medical", "legal") for d in range(8) for _ in range(3)]
    labelled = base / "labelled.jsonl"
    labelled.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"base": base, "model": str(model), "labelled": str(labelled)}


def run(fake_index, env, out, **kw):
    settings = {**SMALL, **kw}
    return api.bench_downstream(fake_index, env["labelled"], out, model=env["model"],
                                encoder=HashingEncoder(), **settings)


def test_five_conditions_report_and_resume(fake_index, env, monkeypatch):
    import tapt.trainer.downstream as downstream

    out = env["base"] / "report"
    report = run(fake_index, env, out)
    assert [r["condition"] for r in report["aggregate"]] == list(api.downstream.CONDITIONS)
    for row in report["aggregate"]:
        assert 0.0 <= row["accuracy"]["mean"] <= 1.0 and 0.0 <= row["macro_f1"]["mean"] <= 1.0
        assert row["seeds"] == [0]
    by = {r["condition"]: r for r in report["aggregate"]}
    assert "selection_sentences" not in by["none"]
    assert by["oracle"]["oracle_share"] == 1.0          # only the domain's own rows
    assert by["random"]["selection_sentences"] >= 40
    assert "accuracy_vs_none" in by["fused"]
    record = json.loads((out / "runs" / "centroid-seed0" / "result.json").read_text())
    assert len(record["pretrain"]["loss_curve"]) == 3
    assert len(record["finetune"]["loss_curve"]) == record["finetune"]["steps"] == 2
    assert not (out / "runs" / "centroid-seed0" / "model").exists()   # deleted once scored
    assert (out / "report.md").read_text().count("\n| ") == 6       # header + 5 conditions
    assert json.loads((out / "report.json").read_text())["aggregate"] == report["aggregate"]

    calls = []
    real = downstream.finetune_classifier
    monkeypatch.setattr(downstream, "finetune_classifier",
                        lambda *a, **k: calls.append(k["seed"]) or real(*a, **k))
    again = run(fake_index, env, out, seeds="0,1", conditions="none,random")
    assert calls == [1, 1]                   # seed 0 of both was done: only seed 1 runs
    assert again["aggregate"][0]["accuracy_per_seed"][0] == by["none"]["accuracy"]["mean"]
    assert [r["resumed"] for r in again["runs"]] == [True, True, False, False]


def test_a_folder_of_another_configuration_is_refused(fake_index, env):
    out = env["base"] / "other"
    run(fake_index, env, out, conditions="none")
    with pytest.raises(InputError, match="another configuration .*steps"):
        run(fake_index, env, out, conditions="none", steps=4)


def test_refusals_before_work(fake_index, env, tmp_path):
    with pytest.raises(InputError, match="unknown condition"):
        run(fake_index, env, tmp_path / "a", conditions="none,magic")
    with pytest.raises(InputError, match="needs the domain's value"):
        run(fake_index, env, tmp_path / "b", oracle_value=None)
    with pytest.raises(TaptError, match="not understood"):
        run(fake_index, env, tmp_path / "d", budget="lots")
    with pytest.raises(InputError, match="too few"):
        run(fake_index, env, tmp_path / "c", test_size=40)
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


def test_command_line_errors_are_one_line(fake_index, env, tmp_path):
    from tapt.cli import cli

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a b", "label": "x"}\n{"text": "c d", "lab": "y"}\n')
    result = CliRunner().invoke(cli, ["bench", "downstream", "--index", str(fake_index),
                                      "--labelled", str(bad), "--oracle-value", "medical",
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: --label-field: line 2 of labelled file {bad} has no label in field 'label'"]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    result = CliRunner().invoke(cli, ["bench", "downstream", "--index", str(fake_index),
                                      "--labelled", env["labelled"], "--group-field", "doc",
                                      "--train-size", "12", "--test-size", "12",
                                      "--oracle-value", "medical", "--out", str(foreign)])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert result.output.startswith("Error: ") and (foreign / "notes.txt").read_text() == "mine"
