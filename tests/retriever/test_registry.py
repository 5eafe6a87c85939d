"""The method registry: one file per method, everything else derived from it; validated params."""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import HashingEncoder
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.methods import (
    auto_candidates,
    base,
    get_method,
    method_names,
    methods,
    prerank_choices,
    registry,
)
from tapt.retriever.selections.make import SelectConfig, rank


def documented_example() -> str:
    """The one-file method of `tapt.retriever.methods.base`'s docstring."""
    lines = base.__doc__.split("properties:\n\n", 1)[1].split("\n\nSaved as", 1)[0]
    return textwrap.dedent(lines)


def test_each_method_is_one_module():
    package = Path(registry.__file__).parent
    modules = {p.stem for p in package.glob("*.py")} - {"__init__"} - registry._INFRASTRUCTURE
    by_module = {type(m).__module__.rsplit(".", 1)[1] for m in methods()}
    assert by_module == modules and len(methods()) == len(modules)
    assert list(method_names()) == [m.name for m in sorted(methods(),
                                                          key=lambda m: (m.order, m.name))]
    assert method_names()[:3] == ("centroid", "knn", "iforest")   # the listing's first choices


def test_derived_lists():
    # each list follows from the methods' own flags, so a new method needs no edit here
    assert prerank_choices() == tuple(m.name for m in methods() if m.can_prerank)
    assert auto_candidates() == tuple(m for m in methods() if m.auto_candidate)
    assert all(type(m).scorer is not base.Method.scorer for m in auto_candidates())
    assert {"centroid", "knn", "fused"} <= set(prerank_choices()) and "random" not in \
        prerank_choices()
    assert {"centroid", "distance", "density", "classifier"} <= {m.name for m in auto_candidates()}
    assert {"knn", "classifier", "auto"} <= {m.name for m in methods() if m.budget == "optional"}
    assert {"moore-lewis", "fused"} <= {m.name for m in methods() if m.needs_text}
    assert {"random", "moore-lewis"} <= {m.name for m in methods() if not m.needs_embeddings}


@pytest.fixture()
def added_method(tmp_path, monkeypatch):
    """A new method as one file on the methods package's path, found by the registry."""
    import tapt.retriever.methods as package

    (tmp_path / "maxcos.py").write_text(documented_example())
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    monkeypatch.setattr(registry.METHODS, "loaded", False)
    yield get_method("maxcos")
    registry.METHODS.by_name.pop("maxcos", None)
    sys.modules.pop(f"{package.__name__}.maxcos", None)   # so the next use imports it anew


def test_a_new_method_is_one_file(added_method, fake_index, medical_task, tmp_path, monkeypatch):
    from tapt.bench.recall import all_methods
    from tapt.commands.selecting import _select_command

    assert "maxcos" in method_names() and added_method not in auto_candidates()
    assert "maxcos" in prerank_choices() and "maxcos" in all_methods()
    ix = Index(fake_index)
    texts = medical_task.read_text().splitlines()
    task = HashingEncoder().encode(texts)
    ranking, _ = rank(ix, SelectConfig("maxcos", "50sent", segment_size=1), task, texts)
    same, _ = rank(ix, SelectConfig("density", "50sent", segment_size=1, m=1), task, texts)
    assert ranking.segments.tolist() == same.segments.tolist()
    pre, _ = rank(ix, SelectConfig("iforest", "50sent", segment_size=1, prerank="maxcos",
                                   candidates="2x"), task, texts)
    assert len(pre.segments) > 0
    monkeypatch.setattr(Index, "load_encoder", lambda self, *a, **k: HashingEncoder())
    command = _select_command(added_method)
    assert {"floor", "task", "budget", "out"} <= {p.name for p in command.params}
    result = CliRunner().invoke(command, [str(fake_index), "--task", str(medical_task),
                                          "--budget", "10", "--floor", "0.1",
                                          "--out", str(tmp_path / "s.jsonl"), "--json"],
                                obj={"progress": False})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["params"]["floor"] == 0.1



def development_diff() -> dict[str, str]:
    """The files the diff of docs/development.md adds: path -> text."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "development.md").read_text()
    diff = page.split("```diff\n", 1)[1].split("```", 1)[0]
    files = {}
    for part in diff.split("diff --git ")[1:]:
        path = part.split("+++ b/", 1)[1].split("\n", 1)[0]
        body = part.split("@@\n", 1)[1].splitlines()
        assert all(line.startswith("+") for line in body), path   # only new files
        files[path] = "\n".join(line[1:] for line in body) + "\n"
    return files


def test_the_documented_diff_adds_a_method(added_method, fake_index, medical_task):
    files = development_diff()
    assert set(files) == {"retriever/methods/maxcos.py", "tests/retriever/test_maxcos.py"}
    assert files["retriever/methods/maxcos.py"].strip() == documented_example().strip()
    namespace: dict = {}
    exec(compile(files["tests/retriever/test_maxcos.py"], "test_maxcos.py", "exec"), namespace)
    namespace["test_maxcos_is_density_with_one_neighbour"](fake_index, medical_task)


def test_a_new_method_gets_a_guide_section_without_a_page_edit(added_method):
    import importlib.util

    pytest.importorskip("mkdocs")
    docs = Path(__file__).resolve().parents[2] / "docs"
    spec = importlib.util.spec_from_file_location("methods_hook", docs / "hooks" / "methods.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = (docs / "guide" / "selecting.md").read_text(encoding="utf-8")
    rendered = hook.on_page_markdown(page, None, None, None)
    assert "### `maxcos`" in rendered and added_method.summary in rendered
    assert "tapt-method" not in rendered

def test_params_are_validated():
    iforest = get_method("iforest")
    converted = iforest.make_params({"C": 2, "weights": "continuous"}).C
    assert converted == 2.0 and isinstance(converted, float)
    for values, param, message in [
        ({"k": "5"}, "k", "must be an integer"), ({"k": 0}, "k", "at least 1"),
        ({"k": True}, "k", "must be an integer"), ({"C": float("nan")}, "C", "finite"),
        ({"weights": "heavy"}, "weights", "not one of discrete, continuous"),
        ({"prerank": "random"}, "prerank", "not one of"),
        ({"candidates": "lots"}, "candidates", "use 10x"),
        ({"nope": 1}, "nope", "has no parameter `nope`"),
        ({"C": 3.0}, "C", "only applies with `weights` continuous"),
    ]:
        with pytest.raises(InputError, match=message) as err:
            iforest.make_params(values)
        assert err.value.param == param, values
    assert iforest.make_params({"C": 3.0, "weights": "continuous"}).C == 3.0
    assert iforest.make_params({"C": 3.0}, explicit=()).C == 3.0     # not given by the user
    assert get_method("knn").make_params({"nprobe": None}).nprobe is None
    with pytest.raises(InputError, match="random takes no budget|needs a budget"):
        SelectConfig("random")
    with pytest.raises(InputError) as err:
        SelectConfig("centroid", "5", segment_size=0)
    assert err.value.param == "segment_size"


def test_registration_rules():
    @dataclasses.dataclass(frozen=True)
    class Clashing(base.Params):
        budget: int = base.param(1, "A name every selection uses.")

    class Bad(base.Method):
        name = "test-bad"
        summary = "x"
        Params = Clashing

    with pytest.raises(ValueError, match="taken by every selection"):
        registry.register(Bad)

    class Nameless(base.Method):
        summary = "x"

    with pytest.raises(ValueError, match="needs a `name`"):
        registry.register(Nameless)

    class Twin(base.Method):
        name = "centroid"
        summary = "another centroid"

    with pytest.raises(ValueError, match="two methods"):
        registry.register(Twin)
    assert type(get_method("centroid")).__name__ == "Centroid"


def test_sentence_scores_and_budget_dependence(fake_index, medical_task):
    ix = Index(fake_index)
    texts = medical_task.read_text().splitlines()
    task = HashingEncoder().encode(texts)
    ctx = base.RankingInputs(ix, base.SegmentView.of(ix, 1), None, 0, task, texts)
    classifier = get_method("classifier")
    assert not classifier.depends_on_budget(classifier.make_params({"rounds": 0}))
    assert classifier.depends_on_budget(classifier.make_params())
    assert get_method("centroid").scores_sentences and not get_method("iforest").scores_sentences
    scores, _ = get_method("knn").sentence_scores(ctx, get_method("knn").make_params({"k": 3}))
    assert np.isfinite(scores).sum() <= 3 * len(texts) and np.isneginf(scores).any()


def test_rounds_are_bounded_and_a_model_parameter_that_names_no_model_is_refused_at_once(
        tmp_path):
    from tapt.errors import InputError
    from tapt.retriever.methods.params import MAX_ROUNDS
    from tapt.retriever.methods.registry import get_method

    for name in ("fused", "classifier", "fused-learned", "auto", "finetune"):
        params = get_method(name).Params
        assert params(rounds=MAX_ROUNDS).rounds == MAX_ROUNDS
        with pytest.raises(InputError, match=f"must be at most {MAX_ROUNDS}") as refused:
            params(rounds=MAX_ROUNDS + 1)
        assert refused.value.param == "rounds"
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    for name, field in (("centroid", "tuned_model"), ("perplexity", "lm_model"),
                        ("finetune", "finetune_model"), ("task-model", "task_model")):
        params = get_method(name).Params
        with pytest.raises(InputError, match="does not exist") as refused:
            params(**{field: str(tmp_path / "gone")})
        assert refused.value.param == field
        with pytest.raises(InputError, match="holds no model"):
            params(**{field: str(tmp_path)})
        assert getattr(params(**{field: str(tmp_path / "model")}), field) == str(
            tmp_path / "model")


def test_fused_learned_expand_above_one_is_its_own_mistake():
    from tapt.errors import InputError
    from tapt.retriever.methods.registry import get_method

    with pytest.raises(InputError, match="must be at most 1") as refused:
        get_method("fused-learned").Params(expand=2)
    assert refused.value.param == "expand"
