"""`tapt.bench_downstream` and `tapt bench downstream` on the hashing-encoder index and a tiny
BERT: every condition, the cross-validated report and its intervals, resume, refusals, the
general model made and cached by `tapt.pretrain`."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import COMMON, TOPICS, HashingEncoder, make_sentence
from tapt import api
from tapt.bench.downstream_config import CONDITIONS
from tapt.errors import InputError, TaptError
from tiny_model import write_tiny_bert

SMALL = dict(budget="40sent", steps=3, batch_size=4, max_length=16, folds=4,
             ft_epochs=1, ft_batch_size=6, oracle_value="medical", group_field="doc",
             progress=False)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def hashing_model(monkeypatch):
    """The fake index was built with the hashing encoder: every model a selection loads is it."""
    monkeypatch.setattr("tapt.indexer.encoding.encoder.load_encoder",
                        lambda *a, **k: HashingEncoder())


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
    return api.bench_downstream(fake_index, env["labelled"], out, model=env["model"], **settings)


def test_every_condition_report_and_resume(fake_index, env, monkeypatch):
    import tapt.bench.downstream_finetune as downstream

    out = env["base"] / "report"
    report = run(fake_index, env, out)
    assert [r["condition"] for r in report["aggregate"]] == list(CONDITIONS)
    assert report["examples"] == 48 and report["groups"] == 16 and report["folds"] == 4
    for row in report["aggregate"]:
        assert 0.0 <= row["accuracy"] <= 1.0 and 0.0 <= row["macro_f1"] <= 1.0
        assert row["seeds"] == [0] and row["mlm_loss"] > 0
    by = {r["condition"]: r for r in report["aggregate"]}
    assert "selection_sentences" not in by["none"] and "selection_sentences" not in by["task"]
    assert by["oracle"]["domain_share"] == 1.0          # only the domain's own rows
    assert by["random"]["selection_sentences"] >= 40
    assert by["task"]["mlm_trained_on_test_text"] and not by["fused"]["mlm_trained_on_test_text"]
    for c in ("task", "centroid", "knn", "fused", "oracle", "none"):
        vs = by[c]["accuracy_vs_random"]
        assert vs["ci_low"] <= vs["delta"] <= vs["ci_high"], (c, vs)
    assert "accuracy_vs_random" not in by["random"] and "accuracy_vs_none" in by["fused"]
    assert set(by["fused"]["oracle_share"]) >= {"share", "share_ci_low", "share_ci_high"}
    assert "oracle_share" not in by["random"] and "oracle_share" not in by["oracle"]
    records = {r["condition"]: r for r in report["records"]}
    assert set(records) == set(CONDITIONS) - {"random"}
    assert set(records["fused"]) >= {"task", "condition", "delta_vs_random", "ci_low", "ci_high",
                                     "oracle_share", "share_ci_low"}
    assert len(report["per_fold"]["fused"]["vs_random"][0]) == 4      # [seed][fold]
    record = json.loads((out / "runs" / "centroid-seed0" / "result.json").read_text())
    assert len(record["pretrain"]["loss_curve"]) == 3
    assert len(record["predicted"]) == 48 and len(record["finetune_loss_curves"]) == 4
    assert not (out / "runs" / "centroid-seed0" / "model").exists()   # deleted once scored
    assert (out / "report.md").read_text().count("\n| ") == 1 + len(CONDITIONS)
    assert json.loads((out / "report.json").read_text())["aggregate"] == report["aggregate"]

    calls = []
    real = downstream.finetune_classifier
    monkeypatch.setattr(downstream, "finetune_classifier",
                        lambda *a, **k: calls.append(k["seed"]) or real(*a, **k))
    again = run(fake_index, env, out, seeds="0,1", conditions="none,random")
    assert len(calls) == 2 * 4               # seed 0 of both was done: only seed 1 runs
    assert again["aggregate"][0]["accuracy_per_seed"][0] == by["none"]["accuracy"]


def test_every_example_is_tested_once_per_seed_by_folds_of_whole_documents():
    from tapt.bench.downstream_data import LabelledSet, group_folds

    rng = random.Random(3)
    groups = [f"d{g}" for g in range(30) for _ in range(rng.randint(1, 6))]
    labels = np.array([int(g[1:]) % 3 for g in groups])
    data = LabelledSet([f"t{i}" for i in range(len(groups))], labels, ["a", "b", "c"], groups,
                       "0")
    folds = group_folds(data, 5, seed=0)
    assert sorted(set(folds.tolist())) == [0, 1, 2, 3, 4]
    for g in set(groups):                    # a document never straddles two folds
        assert len({int(f) for f, h in zip(folds, groups) if h == g}) == 1
    for label in range(3):                   # each label spread over the folds
        per_fold = np.bincount(folds[labels == label], minlength=5)
        assert per_fold.max() - per_fold.min() <= 6
    assert (group_folds(data, 5, seed=0) == folds).all()
    assert not (group_folds(data, 5, seed=1) == folds).all()
    with pytest.raises(InputError, match="fewer than the 40 folds"):
        group_folds(data, 40, seed=0)


def test_intervals_cover_a_known_difference_and_the_share():
    from tapt.bench import downstream_stats as stats

    rng = np.random.default_rng(0)
    n, groups = 2000, np.repeat(np.arange(400), 5)
    truth = {"random": 0.60, "oracle": 0.70, "method": 0.68}
    correct = {c: (rng.random((3, n)) < p).astype(float) for c, p in truth.items()}
    num = {c: stats.group_totals(v, groups, 400) for c, v in correct.items()}
    den = {c: stats.group_totals(np.ones((3, n)), groups, 400) for c in correct}
    resampled = stats.resample_ratio(num, den, draws=2000, seed=0)
    gain = stats.difference(resampled, "oracle", "random")
    assert gain["ci_low"] > 0.04 and gain["ci_high"] < 0.16          # 0.10, resolved
    assert gain["ci_low"] < gain["delta"] < gain["ci_high"]
    share = stats.oracle_share(resampled, "method")
    assert share["share_ci_low"] < 0.8 < share["share_ci_high"]      # truth: 0.8
    same = stats.difference(resampled, "random", "random")
    assert same == {"delta": 0.0, "ci_low": 0.0, "ci_high": 0.0}


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
    with pytest.raises(InputError, match="fewer than the 40 folds"):
        run(fake_index, env, tmp_path / "c", folds=40)
    with pytest.raises(InputError, match="tiny general model's 64 positions") as err:
        api.bench_downstream(fake_index, env["labelled"], tmp_path / "e",
                             **{**SMALL, "max_length": 128, "preset": "tiny"})
    assert err.value.param == "max_length" and not (tmp_path / "e").exists()
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
                                      "--folds", "4",
                                      "--oracle-value", "medical", "--out", str(foreign)])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert result.output.startswith("Error: ") and (foreign / "notes.txt").read_text() == "mine"
