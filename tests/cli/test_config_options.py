"""The options of `index build`, `index add` and `train` that are config fields come from the
fields' metadata (`tapt.api.options.config_fields`), through one helper (`_config_options`), and reach the
config through the commands and `Index.build` / `Index.add` / `tapt.train` with no other edit."""

import dataclasses
import importlib.util
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from conftest import HashingEncoder, write_labelled_corpus
from tapt import api
from tapt.api import options
from tapt.commands import common
from tapt.commands.index import index_add, index_build
from tapt.commands.options import _config_options
from tapt.commands.training import train_command
from tapt.errors import InputError
from tapt.indexer.building import add as add_module
from tapt.indexer.building import build_config
from tapt.indexer.building.build_config import BuildConfig
from tapt.trainer import config as train_config
from tapt.trainer.config import TrainConfig

COMMANDS = {"build": (index_build, BuildConfig), "add": (index_add, BuildConfig),
            "train": (train_command, TrainConfig)}


def _with_new_field(made: list | None = None):
    """BuildConfig plus one field, `beam_width`, declared the way a new option would be; every
    config made is appended to `made`."""

    @dataclasses.dataclass
    class ThrowawayConfig(BuildConfig):
        beam_width: int = dataclasses.field(default=3, metadata={
            "help": "Beams per shard.", "minimum": 1, "show_default": True,
            "add": {"help": "Beams per new shard."}})

        def __post_init__(self) -> None:
            super().__post_init__()
            if made is not None:
                made.append(self)

    return ThrowawayConfig


def _fresh_index_commands():
    """The `tapt index` command module as written, read again (its options are made on import);
    what it registers, under another module's name, is kept out of the command registry."""
    path = Path(importlib.util.find_spec("tapt.commands.index").origin)
    spec = importlib.util.spec_from_file_location("_fresh_index_commands", path)
    fresh = importlib.util.module_from_spec(spec)
    registered = common.COMMANDS.by_name
    common.COMMANDS.by_name = {}
    try:
        spec.loader.exec_module(fresh)
    finally:
        common.COMMANDS.by_name = registered
    return fresh


@pytest.fixture()
def new_field(monkeypatch, tmp_path):
    """BuildConfig swapped for the variant with `beam_width` where the API and the add stage
    look it up, the model for the hashing encoder, and a small corpus; yields (configs made,
    corpus path)."""
    made: list = []
    variant = _with_new_field(made)
    monkeypatch.setattr(build_config, "BuildConfig", variant)
    monkeypatch.setattr(add_module, "BuildConfig", variant)
    monkeypatch.setattr("tapt.indexer.encoding.encoder.load_encoder",
                        lambda *a, **k: HashingEncoder())
    corpus = tmp_path / "corpus.jsonl"
    write_labelled_corpus(corpus, docs_per_topic=2)
    return made, corpus


@pytest.mark.parametrize("kind", sorted(COMMANDS))
def test_every_generated_option_is_a_config_field(kind):
    command, config = COMMANDS[kind]
    fields = {f.name: f for f in dataclasses.fields(config)}
    params = {p.name: p for p in command.params}
    described = options.config_fields(kind)
    assert described
    for desc in described:
        field, option = fields[desc["name"]], params[desc["name"]]
        assert option.opts + option.secondary_opts == desc["flag"].split("/")
        own = {**field.metadata, **(field.metadata["add"] if kind == "add" else {})}
        assert option.help == desc["help"] and desc["help"].startswith(own["help"])
        default = None if own.get("from_index") else field.default
        assert option.default == default
        assert (option.show_default or False) == desc["show_default"]
    # no hand-written option shadows a config field
    shadowing = set(params) & {n for n, f in fields.items() if "help" in f.metadata}
    assert shadowing == {d["name"] for d in described}


def test_unknown_names_in_a_layout_are_refused():
    with pytest.raises(KeyError, match="no_such_field"):
        _config_options("build", "segment_size", "no_such_field")


def test_a_new_field_becomes_an_option_through_the_helper():
    config = _with_new_field()

    @click.command()
    @_config_options("build", "segment_size", config=config)
    def command(**kwargs):
        click.echo(repr(kwargs["beam_width"]))

    option = {p.name: p for p in command.params}["beam_width"]
    assert option.opts == ["--beam-width"] and option.default == 3
    assert isinstance(option.type, click.IntRange) and option.type.min == 1
    assert [p.name for p in command.params][0] == "segment_size"
    assert CliRunner().invoke(command, ["--beam-width", "5"]).output == "5\n"
    assert CliRunner().invoke(command, ["--beam-width", "0"]).exit_code == 2


def test_a_new_field_appears_in_index_build_without_another_edit(monkeypatch):
    monkeypatch.setattr(build_config, "BuildConfig", _with_new_field())
    fresh = _fresh_index_commands()

    for command, help_text in ((fresh.index_build, "Beams per shard."),
                               (fresh.index_add, "Beams per new shard.")):
        option = {p.name: p for p in command.params}["beam_width"]
        assert option.help == help_text and option.default == 3
        shown = CliRunner().invoke(command, ["--help"], terminal_width=100).output
        assert "--beam-width" in shown and "[default: 3]" in shown
    # the real commands are untouched
    assert "beam_width" not in {p.name for p in index_build.params}


def test_a_new_field_reaches_the_config_from_the_command_line(new_field, tmp_path):
    made, corpus = new_field
    fresh = _fresh_index_commands()
    out = tmp_path / "idx"
    result = CliRunner().invoke(fresh.index_build, [str(corpus), "--out", str(out), "--no-split",
                                                    "--beam-width", "5"], obj={"progress": False})
    assert result.exit_code == 0, result.output
    assert [c.beam_width for c in made] == [5]

    more = tmp_path / "more.jsonl"
    write_labelled_corpus(more, docs_per_topic=2, seed=7)
    result = CliRunner().invoke(fresh.index_add, [str(out), str(more), "--beam-width", "6"],
                                obj={"progress": False})
    assert result.exit_code == 0, result.output
    assert made[-1].beam_width == 6


def test_a_new_field_is_a_keyword_of_the_api(new_field, tmp_path):
    made, corpus = new_field
    ix = api.Index.build(corpus, tmp_path / "idx", split=False, progress=False,
                         model="hashing-test", beam_width=7)
    assert [c.beam_width for c in made] == [7]
    more = tmp_path / "more.jsonl"
    write_labelled_corpus(more, docs_per_topic=2, seed=7)
    ix.add(more, progress=False, beam_width=8)
    assert made[-1].beam_width == 8
    for keyword in ("window", "codes", "no_such_field"):     # not options of `index add`
        with pytest.raises(InputError) as err:
            ix.add(more, **{keyword: "int8"})
        assert err.value.param == keyword


def test_a_new_train_field_is_a_keyword_of_train(monkeypatch, tmp_path):
    @dataclasses.dataclass(frozen=True)
    class ThrowawayTrainConfig(TrainConfig):
        beam_width: int = dataclasses.field(default=3, metadata={"help": "Beams."})

    monkeypatch.setattr(train_config, "TrainConfig", ThrowawayTrainConfig)
    monkeypatch.setattr("tapt.trainer.loop.train", lambda config, on_step=None: config)
    monkeypatch.setattr("tapt.trainer.inputs.check_selections", lambda paths: None)
    selection = tmp_path / "sel.jsonl"
    selection.write_text("")
    config = api.train(selection, tmp_path / "model", steps=1, beam_width=4)
    assert isinstance(config, ThrowawayTrainConfig) and config.beam_width == 4


@pytest.mark.parametrize("keyword", ["beam_width", "window", "index", "max_grad_norm_x"])
def test_unknown_keywords_are_refused_by_name(tmp_path, keyword):
    with pytest.raises(InputError) as err:
        api.Index.build(tmp_path / "none.jsonl", tmp_path / "idx", **{keyword: 1})
    assert err.value.param == keyword and keyword in str(err.value)
    with pytest.raises(InputError) as err:
        api.train(tmp_path / "sel.jsonl", tmp_path / "model", **{keyword: 1})
    assert err.value.param == keyword
