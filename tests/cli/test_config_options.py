"""The options of `index build`, `index add` and `train` that are config fields come from the
fields' metadata (`tapt.api.config_fields`), through one helper (`_config_options`)."""

import dataclasses
import importlib.util
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tapt import api
from tapt.commands.index import index_add, index_build
from tapt.commands.options import _config_options
from tapt.commands.training import train_command
from tapt.indexer.building import build_config
from tapt.indexer.building.build_config import BuildConfig
from tapt.trainer.config import TrainConfig

COMMANDS = {"build": (index_build, BuildConfig), "add": (index_add, BuildConfig),
            "train": (train_command, TrainConfig)}


def _with_new_field():
    """BuildConfig plus one field, `beam_width`, declared the way a new option would be."""

    @dataclasses.dataclass
    class ThrowawayConfig(BuildConfig):
        beam_width: int = dataclasses.field(default=3, metadata={
            "help": "Beams per shard.", "minimum": 1, "show_default": True,
            "add": {"help": "Beams per new shard."}})

    return ThrowawayConfig


@pytest.mark.parametrize("kind", sorted(COMMANDS))
def test_every_generated_option_is_a_config_field(kind):
    command, config = COMMANDS[kind]
    fields = {f.name: f for f in dataclasses.fields(config)}
    params = {p.name: p for p in command.params}
    described = api.config_fields(kind)
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
    path = Path(importlib.util.find_spec("tapt.commands.index").origin)
    spec = importlib.util.spec_from_file_location("_fresh_index_commands", path)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)           # the command module as written, read again

    for command, help_text in ((fresh.index_build, "Beams per shard."),
                               (fresh.index_add, "Beams per new shard.")):
        option = {p.name: p for p in command.params}["beam_width"]
        assert option.help == help_text and option.default == 3
        shown = CliRunner().invoke(command, ["--help"], terminal_width=100).output
        assert "--beam-width" in shown and "[default: 3]" in shown
    # the real commands are untouched
    assert "beam_width" not in {p.name for p in index_build.params}
