"""One path per operation: the command line goes through the public API only, every command has
its Python entry point, every task-taking call reads tasks by one rule, and `train`'s held-out
loss is `evaluate_mlm`'s."""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path

import numpy as np
import pytest

import tapt
from conftest import HashingEncoder
from tapt import api
from tapt.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "cli.py"
COMMANDS = sorted((ROOT / "commands").glob("*.py"))    # the commands cli.py assembles
INTERNAL = ("tapt.indexer", "tapt.retriever", "tapt.trainer", "tapt.modeling", "tapt.util")

# every command of the command line -> what it calls in Python
ENTRY_POINTS = {
    "index build": api.Index.build,
    "index add": api.Index.add,
    "index info": api.Index.info_path,
    "index serve": api.serve,
    "index verify": api.Index.verify_path,
    "index repair": api.Index.repair_path,
    "index upgrade": api.Index.upgrade_path,
    "index reindex": api.Index.reindex,
    "index recall": api.Index.recall,
    "select": api.Index.select,
    "eval": api.evaluate,
    "export": api.export,
    "train": api.train,
    "pretrain": api.pretrain,
    "model-path": api.model_path,
    "eval-mlm": api.evaluate_mlm,
    "bench recall": api.bench_recall,
    "bench downstream": api.bench_downstream,
    "bench clusters": api.Index.cluster_purity,
    "detectors rank": api.Index.rank_detectors,
    "plot domains": api.Index.plot_domains,
    "plot scores": api.plot_scores,
    "show": api.show,
}


def _imported_modules(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add("." * node.level + node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_cli_imports_only_the_public_api():
    """At module level and inside every function, in cli.py and in the commands package:
    tapt.api and tapt.errors (and the commands), nothing deeper; no command imports tapt.cli.
    The one exception is the registry every extension, commands included, registers in."""
    assert COMMANDS
    registry = {"tapt.util.registry", "tapt.util.registry.Registry"}
    for path in (CLI, *COMMANDS):
        modules = _imported_modules(ast.parse(path.read_text(encoding="utf-8"))) - registry
        deeper = sorted(m for m in modules if m.startswith(INTERNAL) or m.startswith("."))
        assert not deeper, (path.name, deeper)
        tapt_modules = {m.split(".")[1] for m in modules if m.startswith("tapt.")}
        assert tapt_modules <= {"api", "errors", "commands"}, (path.name, tapt_modules)
        assert path == CLI or "cli" not in tapt_modules, path.name


def _commands(group, prefix=""):
    import click

    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group) and path != "select":
            yield from _commands(command, path + " ")
        else:
            yield path


def test_every_command_has_its_python_entry_point():
    from tapt.cli import cli

    assert sorted(_commands(cli)) == sorted(ENTRY_POINTS)
    for entry in ENTRY_POINTS.values():
        assert callable(entry) and entry.__doc__ and "Args:" in entry.__doc__, entry
    assert sorted(cli.commands["select"].commands) == sorted(tapt.method_names())


# ------------------------------------------------------------------------- one task rule

@pytest.fixture(scope="module")
def task(medical_task):
    return medical_task.read_text(encoding="utf-8").splitlines()[:12]


def test_select_takes_every_task_form_alike(fake_index, medical_task, task, monkeypatch):
    pd = pytest.importorskip("pandas")
    ix = tapt.Index.open(fake_index)

    def ids(form):
        return ix.select("centroid", task=form, budget="20sent").ids

    as_text = ids(task)
    for form in (np.array(task), pd.Series(task), tuple(task)):
        assert np.array_equal(ids(form), as_text)
    as_file = ids(medical_task)
    for form in ([medical_task], [str(medical_task)], {"files": [str(medical_task)]}):
        assert np.array_equal(ids(form), as_file)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(medical_task.read_bytes())))
    assert np.array_equal(ids("-"), as_file)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, fake_index, task):
    pytest.importorskip("torch")
    from tiny_model import write_tiny_bert

    base = tmp_path_factory.mktemp("parity")
    model = write_tiny_bert(base / "tiny", task, hidden_size=32, layers=1, max_positions=64)
    ix = tapt.Index.open(fake_index)
    sel = ix.select("centroid", task=task, budget="20sent",
                    out=base / "sel.jsonl")
    return {"model": str(model), "sel": sel, "base": base}


def test_train_and_evaluate_mlm_take_the_task_forms_of_select(tiny, task, tmp_path):
    pd = pytest.importorskip("pandas")
    text_file = tmp_path / "heldout.txt"
    text_file.write_text("\n".join(task) + "\n", encoding="utf-8")
    losses = {kind: tapt.evaluate_mlm(form, model=tiny["model"], max_length=32)["loss"]
              for kind, form in (("list", task), ("array", np.array(task)),
                                 ("series", pd.Series(task)), ("file", text_file),
                                 ("files", {"files": [str(text_file)]}))}
    assert len({round(v, 10) for v in losses.values()}) == 1, losses
    manifest = tapt.train(tiny["sel"], tmp_path / "m", model=tiny["model"], task=task, steps=1,
                          batch_size=4, max_length=32, progress=False)
    assert manifest["steps"] == 1
    assert [t["path"] for t in manifest["task"]] == ["<strings>"]
    with pytest.raises(InputError) as err:
        tapt.train(tiny["sel"], tmp_path / "x", model=tiny["model"], task=["nope.txt"], steps=1)
    assert err.value.param == "task" and "no such file" in str(err.value)
    with pytest.raises(InputError) as err:
        tapt.evaluate_mlm(np.ones((2, 4), dtype=np.float32), model=tiny["model"])
    assert err.value.param == "texts"


def test_train_held_out_loss_is_evaluate_mlms_by_default(tiny, task, tmp_path):
    manifest = tapt.train(tiny["sel"], tmp_path / "m", model=tiny["model"], eval_text=task,
                          steps=1, batch_size=4, max_length=32, progress=False)
    first = manifest["evals"][0]
    assert first["step"] == 0
    report = tapt.evaluate_mlm(task, model=tiny["model"], max_length=32)
    assert first["loss"] == pytest.approx(report["loss"], rel=1e-6)
    assert first["tokens"] == report["tokens"]
    last = manifest["evals"][-1]
    again = tapt.evaluate_mlm(task, model=str(tmp_path / "m"), max_length=32)
    assert last["loss"] == pytest.approx(again["loss"], rel=1e-5)
    assert json.loads(json.dumps(manifest))["evals"] == manifest["evals"]


def test_select_command_writes_what_index_select_writes(fake_index, medical_task, tmp_path,
                                                        monkeypatch):
    """`tapt select` is `Index.select(..., out=...)`: the same selection file, line for line."""
    from click.testing import CliRunner

    from tapt.cli import cli
    from tapt.indexer.index import Index as IndexBase

    monkeypatch.setattr(IndexBase, "load_encoder", lambda self, *a, **k: HashingEncoder())
    monkeypatch.setattr("tapt.indexer.encoding.encoder.load_encoder", lambda *a, **k: HashingEncoder())
    for method, options, params in (("centroid", ["--budget", "20sent"], {"budget": "20sent"}),
                                    ("knn", ["--k", "5"], {"k": 5})):
        by_cli = tmp_path / f"{method}-cli.jsonl"
        result = CliRunner().invoke(cli, ["-q", "select", method, str(fake_index), "--task",
                                          str(medical_task), *options, "--out", str(by_cli)])
        assert result.exit_code == 0, result.output
        by_api = tmp_path / f"{method}-api.jsonl"
        tapt.Index.open(fake_index).select(method, {"files": [str(medical_task)]},
                                           out=by_api, **params)
        assert by_cli.read_text() == by_api.read_text()
        cli_manifest = json.loads(Path(f"{by_cli}.manifest.json").read_text())
        api_manifest = json.loads(Path(f"{by_api}.manifest.json").read_text())
        for key in ("method", "params", "budget", "task", "counts"):
            assert cli_manifest[key] == api_manifest[key], key
