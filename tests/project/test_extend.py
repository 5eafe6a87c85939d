"""One way to extend: a method, a format and an executor, each registered from a module of its
own through `tapt.extend`, exactly as docs/development.md shows them (its examples are what runs
here), and the registries every kind shares."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tapt
import tapt.extend
from conftest import write_labelled_corpus
from tapt.commands.common import COMMANDS
from tapt.errors import InputError
from tapt.indexer.building.executor_base import EXECUTORS
from tapt.indexer.building.executors import executor_names, get_executor
from tapt.indexer.encoding.registered import ENCODERS
from tapt.indexer.reading import formats
from tapt.retriever.methods.registry import METHODS
from tapt.util.registry import Registry

PAGE = Path(__file__).resolve().parents[2] / "docs" / "development.md"
SETTINGS = {"segment_size": 4, "split": False, "progress": False, "part_size": 64}


def example(kind: str) -> str:
    """The Python example of the page's section `### A new KIND`."""
    section = PAGE.read_text(encoding="utf-8").split(f"\n### A new {kind}\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    """Imports the page's example of a kind as a user's module of its own; what it registered
    is gone afterwards."""
    for registry in (METHODS, formats.FORMATS, EXECUTORS, ENCODERS):
        registry.load()
        monkeypatch.setattr(registry, "by_name", dict(registry.by_name))
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def load(kind: str):
        names.append(f"my_{kind}")
        (tmp_path / f"{names[-1]}.py").write_text(example(kind), encoding="utf-8")
        return importlib.import_module(names[-1])

    yield load
    for name in names:
        sys.modules.pop(name, None)


def test_the_public_names_are_the_registered_ones():
    assert tapt.extend.register_method is importlib.import_module(
        "tapt.retriever.methods.registry").register
    assert tapt.extend.register_format is formats.register
    assert tapt.extend.register_executor is importlib.import_module(
        "tapt.indexer.building.executor_base").register
    assert all(hasattr(tapt.extend, name) for name in tapt.extend.__all__)


def test_a_new_method_from_a_module_of_ones_own(user_module, fake_index, medical_task):
    module = user_module("method")
    assert "nearest" in tapt.method_names()
    assert type(METHODS["nearest"]) is module.Nearest
    ix = tapt.Index.open(fake_index)
    task = medical_task.read_text().splitlines()
    got = ix.select("nearest", task=task, budget="50sent", floor=-1.0)
    same = ix.select("density", task=task, budget="50sent", m=1)
    assert len(got.ids) > 0 and got.ids.tolist() == same.ids.tolist()
    with pytest.raises(InputError) as err:
        ix.select("nearest", task=task, budget="50sent", floor=-2.0)
    assert err.value.param == "floor"


def test_a_new_format_from_a_module_of_ones_own(user_module, tmp_path):
    user_module("format")
    notes = tmp_path / "notes.md"
    notes.write_text("# Ward notes\n\nThe patient slept well.\n## Later\nThe fever fell.\n",
                     encoding="utf-8")
    assert "markdown" in formats.names() and formats.names()[:2] == ["jsonl", "text"]
    assert formats.known().index("markdown (.md/.markdown") > formats.known().index("hf-disk")
    ix = tapt.Index.build([notes], tmp_path / "idx", model="hashing-test", **SETTINGS)
    assert ix.n_sentences == 2
    plain = tmp_path / "notes.txt"
    plain.write_text(notes.read_text(encoding="utf-8"), encoding="utf-8")
    forced = tapt.Index.build([plain], tmp_path / "forced", model="hashing-test",
                              input_format="markdown", **SETTINGS)
    assert forced.n_sentences == 2


def test_a_new_executor_from_a_module_of_ones_own(user_module, tmp_path, medical_task):
    module = user_module("executor")
    assert executor_names() == ("local", "ray", "processes")
    assert isinstance(get_executor("processes", processes=1), module.ProcessesExecutor)
    corpus = tmp_path / "pool.jsonl"
    write_labelled_corpus(corpus)
    task = medical_task.read_text().splitlines()
    mine = module.ProcessesExecutor(processes=2)
    selections = []
    try:
        for executor in ("local", "processes", mine):
            out = tmp_path / f"idx-{len(selections)}"
            ix = tapt.Index.build([corpus], out, model="hashing-test", executor=executor,
                                  **SETTINGS)
            sel = ix.select("centroid", task=task, budget="50sent")
            selections.append((sel.ids.tolist(), np.asarray(sel.scores).tobytes()))
        assert mine.pool is not None       # the stages that embed nothing ran on its pool
    finally:
        mine.close()
    assert mine.pool is None and selections[0] == selections[1] == selections[2]


def test_a_new_encoder_from_a_module_of_ones_own(user_module, tmp_path, medical_task):
    module = user_module("encoder")
    corpus = tmp_path / "pool.jsonl"
    write_labelled_corpus(corpus)
    built = tapt.Index.build([corpus], tmp_path / "idx", model="char-trigrams", **SETTINGS)
    assert built.manifest["model"]["name"] == "char-trigrams" and built.dim == 256
    ix = tapt.Index.open(built.path)           # loads the encoder by the name it recorded
    task = medical_task.read_text().splitlines()
    mine = module.CharTrigrams()
    assert np.array_equal(ix.embed(task[:3]), mine.encode(task[:3]))
    by_text = ix.select("centroid", task=task, budget="50sent")
    by_rows = ix.select("centroid", task=mine.encode(task), budget="50sent")
    assert len(by_text) > 0 and by_text.ids.tolist() == by_rows.ids.tolist()
    rows = ix.store.records(by_text.sentence_rows.tolist())
    assert np.mean([r["meta"]["domain"] == "medical" for r in rows]) > 0.8

    @tapt.extend.register_encoder
    class NoEncoder:
        name = "no-encoder"

    with pytest.raises(InputError, match="NoEncoder is not an encoder: it has no encode") as err:
        tapt.Index.build([corpus], tmp_path / "none", model="no-encoder", **SETTINGS)
    assert err.value.param == "model" and not (tmp_path / "none").exists()


def test_every_kind_registers_the_same_way(tmp_path, monkeypatch):
    """One Registry: discovery of the package's modules, listing in `order` then name, a taken
    name refused, the same class again (a module imported twice) replacing itself."""
    package = tmp_path / "plugins_for_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("raise AssertionError('infrastructure is not imported')")
    (package / "_private.py").write_text("raise AssertionError('private modules are not')")
    for name, order in (("beta", 1), ("alpha", 1), ("first", 0)):
        (package / f"{name}.py").write_text(
            "from plugins_for_test import REGISTRY\n"
            f"class {name.title()}:\n    order = {order}\n"
            f"REGISTRY.add({name!r}, {name.title()}())\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("plugins_for_test")
    module.REGISTRY = Registry("plugin", "plugins_for_test", ("helpers",))
    try:
        assert module.REGISTRY.names() == ("first", "alpha", "beta")
        with pytest.raises(KeyError):
            module.REGISTRY["gamma"]
        with pytest.raises(ValueError, match="two plugins are called 'alpha'"):
            module.REGISTRY.add("alpha", object())
        again = type(module.REGISTRY["alpha"])
        module.REGISTRY.add("alpha", again())
        assert module.REGISTRY["alpha"] is not None
    finally:
        for name in [m for m in sys.modules if m.startswith("plugins_for_test")]:
            sys.modules.pop(name)


def test_the_commands_are_the_registered_ones():
    from tapt.cli import cli

    assert set(cli.commands) == set(COMMANDS.names())
    assert {"index", "select", "eval", "export", "show", "train", "pretrain", "eval-mlm",
            "model-path", "bench", "detectors", "plot"} == set(cli.commands)
    assert "downstream" in cli.commands["bench"].commands


def test_the_docs_tables_are_the_registries(user_module):
    """docs/formats.md's table of formats and docs/ray.md's of executor options are generated
    (docs/hooks/extensions.py): one row per registered format in the registry's order, with its
    suffixes and whether compressed files are read, and one per executor option, a new
    format's or executor's included."""
    sys.path.insert(0, str(PAGE.parent / "hooks"))
    try:
        hook = importlib.import_module("extensions")
    finally:
        sys.path.remove(str(PAGE.parent / "hooks"))
    assert "\n<!-- tapt-formats -->\n" in (PAGE.parent / "formats.md").read_text()
    assert "\n<!-- tapt-executor-options -->\n" in (PAGE.parent / "ray.md").read_text()
    user_module("format")
    user_module("executor")
    rows = [[cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip("|"))]
            for line in hook.formats_table().splitlines()[2:]]     # `\|`: in a cell
    registered = list(formats.FORMATS)
    assert [row[0] for row in rows][-1] == "markdown" and len(rows) == len(registered)
    for (_, extensions, compressed, *_, options), fmt in zip(rows, registered):
        flags = [] if options == "-" else [cell.strip("`").split()[0]
                                           for cell in options.split(", ")]
        assert flags == ["--" + name.replace("_", "-") for name in fmt.options], fmt.name
        if fmt.suffixes:
            assert extensions == ", ".join(f"`{s}`" for s in fmt.suffixes), fmt.name
            assert (compressed == "yes") == fmt.compressible, fmt.name
        else:
            assert "folder" in extensions if fmt.folder else "--hf-dataset" in extensions
    options = hook.executor_options_table().splitlines()[2:]
    cells = [re.split(r"(?<!\\)\|", line)[2].strip() for line in options]   # `\|`: in a cell
    assert cells == ["ray"] * 5 + ["processes"]
    assert options[-1] == "| `--processes N` | processes | worker processes [default: 2]. |"


# the reading settings every format applies: the reader's own (input_format, strict, doc_field
# joining), or read alike by every format of records (text_field, invalid_utf8)
EVERY_FORMAT = {"text_field", "doc_field", "input_format", "strict", "invalid_utf8"}


def test_a_formats_own_settings_are_declared_by_the_formats_that_read_them():
    """Each other reading setting is declared (`Format.options`) by exactly the formats whose
    module reads it, and is a documented option of `index build`; the docs' table lists it."""
    import dataclasses
    import inspect

    from tapt.api.options import config_fields, format_fields

    own = {f.name for f in dataclasses.fields(formats.ReadOptions)} - EVERY_FORMAT
    assert own == {"text_docs", "hf_split"}
    assert own <= {desc["name"] for desc in config_fields("build")}
    by_module: dict[str, set[str]] = {}
    for fmt in formats.FORMATS:
        assert set(fmt.options) <= own, fmt.name
        by_module.setdefault(type(fmt).__module__, set()).update(fmt.options)
    for module, declared in by_module.items():
        source = inspect.getsource(sys.modules[module])
        read = set(re.findall(r"\boptions\.(\w+)", source)) & own
        assert read == declared, module
    readers = {desc["name"]: desc["formats"] for desc in format_fields()}
    assert readers == {"text_docs": ["text"], "hf_split": ["hf-disk", "hf-hub"]}


def test_an_executors_options_are_keywords_and_refused_with_another(user_module, tmp_path):
    module = user_module("executor")
    made = []
    monkey = module.ProcessesExecutor.__init__

    def init(self, processes=2):
        made.append(processes)
        monkey(self, processes)

    module.ProcessesExecutor.__init__ = init
    corpus = tmp_path / "pool.jsonl"
    write_labelled_corpus(corpus, docs_per_topic=2)
    ix = tapt.Index.build([corpus], tmp_path / "idx", model="hashing-test",
                          executor="processes", processes=1, **SETTINGS)
    assert made == [1] and ix.n_sentences > 0
    for executor, option in (("local", {"processes": 2}), ("processes", {"ray_workers": 2})):
        with pytest.raises(InputError, match="only applies with `executor`") as err:
            tapt.Index.build([corpus], tmp_path / "no", model="hashing-test",
                             executor=executor, **option, **SETTINGS)
        assert err.value.param == next(iter(option)) and not (tmp_path / "no").exists()