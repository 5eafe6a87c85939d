"""One name per setting: every field of every settings class is a keyword of its Python call and
an option of its command under the same name (the flag its name with `-` for `_`), with one
default, the class's; the call forwards the fields it does not take itself mechanically."""

from __future__ import annotations

import dataclasses
import inspect
import logging

import click
import pytest

from tapt import api
from tapt.api.options import config_fields, config_settings, renamed_settings, settings_keywords
from tapt.cli import cli
from tapt.errors import InputError

# each settings class: its Python call, its command, and the keywords its call takes itself
KINDS = {
    "build": (api.Index.build, ("index", "build"), ()),
    "add": (api.Index.add, ("index", "add"), ()),
    "train": (api.train, ("train",), ("selections", "out", "task_texts", "eval_texts")),
    "pretrain": (api.pretrain, ("pretrain",), ("out",)),
    "recall": (api.bench_recall, ("bench", "recall"), ()),
    "downstream": (api.bench_downstream, ("bench", "downstream"), ()),
    # centroid's command has every option a method can have beside its own parameters
    "select": (api.Index.select, ("select", "centroid"), ("self", "method", "task", "explicit")),
    "serve": (api.serve, ("index", "serve"), ("path",)),
}
# options of a command that are another kind's settings: `select --executor ray` serves the
# index for the one selection, with `index serve`'s settings under their names (and build's
# and add's executor options are the executors' own, `_elsewhere`)
ELSEWHERE = {"select": "serve"}


def _command(path: tuple[str, ...]) -> click.Command:
    command = cli
    for name in path:
        command = command.commands[name]
    return command


def _default(option: click.Option):
    """An option's default as the command receives it when the option is not given."""
    if option.default is None or type(option.default).__name__ != "Sentinel":
        return option.default
    return () if option.multiple else (False if option.is_flag else None)   # click's unset


def _settings_class(kind: str) -> type:
    from tapt.api.options import _settings_class

    return _settings_class(kind)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_call_restates_no_default_and_forwards_every_field(kind):
    entry, _, internal = KINDS[kind]
    fields = settings_keywords(kind)
    params = inspect.signature(entry).parameters
    assert any(p.kind is p.VAR_KEYWORD for p in params.values()), kind
    own = {name: p.default for name, p in params.items() if name in fields}
    for name, default in own.items():
        assert default == fields[name], (kind, name, default, fields[name])
    # every field the call does not take itself is accepted as a keyword, under its name
    forwarded = {name: default for name, default in fields.items()
                 if name not in own and name not in internal}
    assert config_settings(kind, _settings_class(kind), forwarded, [*own, *internal]) \
        == forwarded


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_command_has_each_option_under_the_fields_name_and_default(kind):
    entry, path, _ = KINDS[kind]
    fields = settings_keywords(kind)
    options = {p.name: p for p in _command(path).params if isinstance(p, click.Option)}
    keywords = set(inspect.signature(entry).parameters)
    described = {desc["name"] for desc in config_fields(kind)}
    assert described <= set(options), (kind, described - set(options))
    for name, option in options.items():
        if name in fields:
            assert _default(option) == fields[name], (kind, name, option.default, fields[name])
            flag = "--" + name.replace("_", "-")
            assert flag in option.opts, (kind, name, option.opts)
        else:   # an option of the call's own (a keyword of the same name), or of the CLI only
            assert name in keywords or name in _elsewhere(kind, path) or name in {
                "as_json", "help", "quiet", "verbose", "executor", "requests_file"}, (kind, name)


def _elsewhere(kind: str, path: tuple[str, ...]) -> set[str]:
    """The options of the command that are the parameters of a selection method, or the
    settings of another kind (`ELSEWHERE`), under their names there."""
    from tapt.api.options import executor_fields

    names = set(settings_keywords(ELSEWHERE[kind])) if kind in ELSEWHERE else set()
    if kind in ("build", "add"):    # the executors' options (`Executor.Options`)
        names |= {desc["name"] for desc in executor_fields()}
    if kind == "select":
        names |= {param["name"] for param in api.options.method_params(path[-1])}
    return names


def test_build_options_have_the_command_lines_names_and_defaults():
    from tapt.api.options import executor_fields

    described = {desc["name"]: desc["executor"] for desc in executor_fields()}
    assert described == {"ray_address": "ray", "ray_workers": "ray", "gpus_per_worker": "ray",
                         "ray_timeout": "ray", "ray_retries": "ray"}
    for path in (("index", "build"), ("index", "add")):
        options = {p.name: p for p in _command(path).params}
        for name in described:       # an executor's option: a flag of its name, default None
            assert _default(options[name]) is None and options[name].opts[0] == \
                "--" + name.replace("_", "-")
    assert settings_keywords("train")["eval_batch_size"] == \
        inspect.signature(api.evaluate_mlm).parameters["batch_size"].default


def test_an_old_name_is_taken_for_one_release_with_a_warning(caplog):
    from tapt.bench.recall_config import RecallConfig
    from tapt.indexer.building.build_config import BuildConfig

    assert renamed_settings(RecallConfig) == {"contexts": "context"}   # as `select --context`
    assert renamed_settings(BuildConfig) == {"index_type": "index"}
    with caplog.at_level(logging.WARNING, logger="tapt"):
        got = config_settings("build", BuildConfig, {"index_type": "hnsw"}, ())
    assert got == {"index": "hnsw"}
    assert ["`index_type` is now `index`; the old name goes in the next release"] == \
        [r.getMessage() for r in caplog.records]
    with pytest.raises(InputError) as err:
        config_settings("build", BuildConfig, {"index_type": "hnsw", "index": "flat"}, ())
    assert err.value.param == "index_type"


def test_serve_takes_the_old_address_for_one_release_with_a_warning(caplog, fake_index):
    from tapt.api.serve_settings import ServeSettings

    assert renamed_settings(ServeSettings) == {"address": "ray_address"}
    with caplog.at_level(logging.WARNING, logger="tapt"):
        got = config_settings("serve", ServeSettings, {"address": "auto"}, ())
    assert got == {"ray_address": "auto"}
    assert ["`address` is now `ray_address`; the old name goes in the next release"] == \
        [r.getMessage() for r in caplog.records]
    with pytest.raises(InputError) as err:       # refused before Ray is imported
        api.serve(fake_index, address="auto", token_file="t")
    assert err.value.param == "token_file"


def test_the_select_command_forwards_its_settings_by_name(fake_index, medical_task, tmp_path):
    from click.testing import CliRunner

    out = tmp_path / "sel.jsonl"
    args = ["select", "centroid", str(fake_index), "-t", str(medical_task), "-b", "7",
            "--seed", "3", "--segment-size", "2", "--context", "sentence", "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    want = api.Index.open(fake_index).select("centroid", medical_task, "7", seed=3,
                                             segment_size=2, context="sentence")
    got = api.Selection.read(out)
    assert got.ids.tolist() == want.ids.tolist() and got.manifest["segment_size"] == 2
    result = CliRunner().invoke(cli, [*args[:-2], "--actors", "2", "-o", str(out)])
    assert result.exit_code != 0 and "only applies with" in result.output


def test_served_index_takes_the_actors_settings_with_serves_defaults(caplog, fake_index):
    from tapt.api.serve_settings import ACTOR_SETTINGS, HTTP_SETTINGS, ServeSettings

    params = inspect.signature(api.ServedIndex).parameters
    assert set(params) == {"path", "grid", "settings"}     # no default restated
    assert set(ACTOR_SETTINGS) | set(HTTP_SETTINGS) == set(settings_keywords("serve"))
    assert not set(ACTOR_SETTINGS) & set(HTTP_SETTINGS)
    assert config_settings("serve", ServeSettings, dict.fromkeys(ACTOR_SETTINGS),
                           HTTP_SETTINGS) == dict.fromkeys(ACTOR_SETTINGS)
    with caplog.at_level(logging.WARNING, logger="tapt"), pytest.raises(InputError) as err:
        api.ServedIndex(fake_index, address="auto", http="127.0.0.1:8000")   # before Ray
    assert err.value.param == "http" and "unknown keyword" in err.value.message
    assert ["`address` is now `ray_address`; the old name goes in the next release"] == \
        [r.getMessage() for r in caplog.records]


def test_every_executor_takes_its_options_under_their_names():
    from tapt.indexer.building.executor_base import EXECUTORS
    from tapt.indexer.building.executors import executor_names

    for name in executor_names():
        executor = EXECUTORS[name]
        params = inspect.signature(executor).parameters
        for field in dataclasses.fields(executor.Options) if executor.Options else ():
            assert field.name in params, (name, field.name)
            assert "keyword" not in field.metadata, (name, field.name)   # no second name


@pytest.mark.parametrize("old,new,value", [
    ("address", "ray_address", "auto"), ("workers", "ray_workers", 0),
    ("timeout", "ray_timeout", float("inf")), ("retries", "ray_retries", -1)])
def test_the_ray_executor_takes_the_old_names_of_its_options_for_one_release(caplog, old, new,
                                                                            value):
    from tapt.indexer.building.executors.ray_executor import RayExecutor

    params = inspect.signature(RayExecutor).parameters
    assert new in params and old not in params
    with pytest.raises(InputError) as err:      # refused before Ray is imported
        RayExecutor(**{old: value, new: value})
    assert err.value.param == old and f"give `{new}` only" in err.value.message
    if new == "ray_address":
        return
    with caplog.at_level(logging.WARNING, logger="tapt"), pytest.raises(InputError) as err:
        RayExecutor(**{old: value})             # out of range: refused under its new name
    assert err.value.param == new
    assert [f"`{old}` is now `{new}`; the old name goes in the next release"] == \
        [r.getMessage() for r in caplog.records]


def test_select_offers_serves_settings_from_their_fields():
    described = config_fields("serve", command="select")
    assert [desc["name"] for desc in described] == ["ray_address", "actors", "cpus_per_actor"]
    serve_defaults = settings_keywords("serve")
    for path in (("select", "centroid"), ("select", "knn")):
        options = {p.name: p for p in _command(path).params}
        for desc in described:      # not given: serve's own default applies
            option = options[desc["name"]]
            assert option.opts == [desc["flag"]] and option.help == desc["help"]
            assert option.default is None
    assert serve_defaults["cpus_per_actor"] == 1.0 and "[default: 1]" in described[2]["help"]
