"""The selection methods and the option metadata the command line builds its options from, so
that its choices and defaults are the library's own. The commands import this module (`from
tapt.api import options`); of its names only `method_names` and `describe_methods` are part of
the public API (`tapt.__all__`)."""

from __future__ import annotations

from typing import Any, Iterable

from tapt.api.rooms import LIMITS  # noqa: F401 - the defaults of `index serve --http`'s limits
from tapt.retriever.ranking.document_pooling import CONTEXTS  # noqa: F401 - "sentence", "document"
from tapt.trainer.config import MLM_EVAL_BATCH  # noqa: F401 - masked-LM loss batch


def method_specs() -> list[Any]:
    """The registered selection methods' specifications, in listing order (what the command
    line builds `tapt select NAME` from: `name`, `summary`, `help`, `budget`, `Params`, ...).

    Returns:
        The method objects.
    """
    from tapt.retriever.methods import methods

    return list(methods())


def method_names() -> tuple[str, ...]:
    """The selection methods `Index.select` accepts, in listing order.

    Returns:
        The method names.

    Examples:
        >>> names = tapt.method_names()
        >>> names[:3], "fused" in names
        (('centroid', 'knn', 'iforest'), True)
    """
    from tapt.retriever.methods import method_names as names

    return names()


def describe_methods() -> list[dict[str, Any]]:
    """Every selection method and its parameters.

    Returns:
        One dict per method, in listing order: `name`, `summary`, `budget` ("required",
            "optional" or "none"), `needs_text`, `needs_embeddings`, and `params` (each
            parameter's default by name).
    """
    import dataclasses

    from tapt.retriever.methods import methods

    return [{"name": m.name, "summary": m.summary, "budget": m.budget,
             "needs_text": m.needs_text, "needs_embeddings": m.needs_embeddings,
             "params": {f.name: f.default for f in dataclasses.fields(m.Params)}}
            for m in methods()]


def default_memory() -> str:
    """The default RAM budget of a FAISS index (`memory`).

    Returns:
        "auto": half the memory available where the index is built.
    """
    from tapt.indexer.ann.index_choice import DEFAULT_MEMORY

    return DEFAULT_MEMORY


def parse_memory(value: str | int) -> int:
    """A size like 8G, 512M or 1.5G in bytes, as `memory` takes it.

    Args:
        value: The size.

    Returns:
        Bytes.

    Raises:
        InputError: not a size.
    """
    from tapt.indexer.ann.index_choice import parse_memory as parse

    return parse(value)


def executor_names() -> list[str]:
    """The executors a build or add can run on (`executor`).

    Returns:
        Their names.
    """
    from tapt.indexer.building.executors import executor_names as names

    return list(names())


def executor_fields() -> list[dict[str, Any]]:
    """The options of every registered executor (`Executor.Options`), as the command line
    makes `tapt index build`'s and `index add`'s options from them.

    Returns:
        One dict per option, as `config_fields` describes a field, plus `executor`: the name
            of the executor it applies with.
    """
    from tapt.indexer.building.executors import EXECUTORS, executor_names

    out = []
    for name in executor_names():
        options = EXECUTORS[name].Options
        if options is not None:
            out += [{**desc, "executor": name} for desc in config_fields("executor", options)]
    return out


def format_fields() -> list[dict[str, Any]]:
    """The reading settings that only some corpus formats read (`Format.options`), as
    `config_fields` describes the build's fields.

    Returns:
        One dict per setting, in the build's field order, as `config_fields` describes a field,
            plus `formats`: the names of the registered formats that read it, in listing order.
    """
    from tapt.indexer.reading import formats

    readers: dict[str, list[str]] = {}
    for fmt in formats.FORMATS:
        for name in fmt.options:
            readers.setdefault(name, []).append(fmt.name)
    return [{**desc, "formats": readers[desc["name"]]} for desc in config_fields("build")
            if desc["name"] in readers]


def input_formats() -> list[str]:
    """The corpus formats files can be forced to (`input_format`).

    Returns:
        Their names.
    """
    from tapt.indexer.reading import formats

    return list(formats.names())


def method_params(method: Any) -> list[dict[str, Any]]:
    """The parameters of a selection method, as options are made from them.

    Args:
        method: A method name or specification (`method_specs()`).

    Returns:
        One dict per parameter, in order: name, kind (int, float, str or bool), default,
            choices (None when free), minimum, maximum, help and short (a one-letter flag
            or None).
    """
    import dataclasses
    import typing

    from tapt.retriever.methods import get_method
    from tapt.retriever.methods.params import param_choices, param_type

    spec = get_method(method) if isinstance(method, str) else method
    hints = typing.get_type_hints(spec.Params)
    out = []
    for field in dataclasses.fields(spec.Params):
        meta = field.metadata
        out.append({"name": field.name, "kind": param_type(hints[field.name])[0],
                    "default": field.default, "choices": param_choices(field, hints[field.name]),
                    "minimum": meta.get("minimum"), "maximum": meta.get("maximum"),
                    "help": meta["help"], "short": meta.get("short")})
    return out


CONFIG_KINDS = ("build", "add", "train", "pretrain", "recall", "downstream", "select", "serve")


def config_fields(kind: str, config: type | None = None,
                  command: str | None = None) -> list[dict[str, Any]]:
    """The options of `index build`, `index add`, `train`, `pretrain`, `bench recall`, `bench
    downstream`, `select METHOD` or `index serve` that are fields of their settings dataclass
    (`BuildConfig`, `TrainConfig`, `PretrainConfig`, `RecallConfig`, `DownstreamConfig`,
    `SelectSettings`, `ServeSettings`), as the command line makes its options from them:
    each field whose metadata has a `help` (for "add": an `add` entry too, whose keys override
    the build's; `from_index`: defaults to what the index was built with).

    Args:
        kind: "build", "add", "train", "pretrain", "recall", "downstream", "select" or "serve".
        config: The dataclass to describe instead of the kind's own (a variant of it).
        command: Another command that offers some of the kind's fields ("select" for the
            serve settings `select --executor ray` takes): only the fields with an entry of
            that name in their metadata, whose keys override the field's own (as "add" does
            for the build's; a `default` there is the option's, None: the field's own
            default applies unless the option is given).

    Returns:
        One dict per option, in field order: name (the field's), flag ("--segment-size", or
            "--split/--no-split"), kind (int, float, str or bool), default, choices (None when
            free), minimum, maximum, min_open (the minimum excluded), metavar, short (a
            one-letter flag or None), required (on the command line), path (None, or the
            keywords of a `click.Path` the value is: exists, file_okay, dir_okay),
            show_default and help.

    Raises:
        InputError: an unknown kind.
    """
    import dataclasses
    import typing

    config = config or _settings_class(kind)
    hints = typing.get_type_hints(config)
    kinds = {bool: bool, int: int, float: float}
    out = []
    entry = command or ("add" if kind == "add" else None)
    for field in dataclasses.fields(config):
        meta = dict(field.metadata)
        if "help" not in meta or (entry is not None and entry not in meta):
            continue
        if entry is not None:
            meta.update(meta[entry])
        default = meta.get("default", field.default)
        if meta.get("from_index"):
            default, meta["show_default"] = None, False
            meta["help"] += " [default: the index's]"
        hint = typing.get_args(hints[field.name]) or (hints[field.name],)
        choices = meta.get("choices")
        if callable(choices):       # registries filled at import (formats, executors)
            choices = choices()
        out.append({"name": field.name,
                    "flag": meta.get("flag", "--" + field.name.replace("_", "-")),
                    "kind": str if meta.get("type") == "str" else kinds.get(hint[0], str),
                    "default": default, "choices": tuple(choices) if choices else None,
                    "minimum": meta.get("minimum"), "maximum": meta.get("maximum"),
                    "min_open": meta.get("min_open", False), "metavar": meta.get("metavar"),
                    "short": meta.get("short"), "required": meta.get("required", False),
                    "path": meta.get("path"),
                    "show_default": meta.get("show_default", False), "help": meta["help"]})
    return out


def settings_keywords(kind: str, config: type | None = None) -> dict[str, Any]:
    """The keywords a call of `kind` forwards to its settings class, each with its default:
    every field of the class (for "add": those `index add` offers, defaulting to the index's own
    setting where the field says so, and `progress`), so a field added to the class is a
    keyword of the call, and its default is the class's, with no other edit.

    Args:
        kind: "build", "add", "train", "pretrain", "recall" or "downstream".
        config: The dataclass to describe instead of the kind's own (a variant of it).

    Returns:
        Default by keyword, in field order.
    """
    import dataclasses

    config = config or _settings_class(kind)
    out = {}
    for field in dataclasses.fields(config):
        meta = field.metadata
        if not field.init or (kind == "add" and "add" not in meta and field.name != "progress"):
            continue
        default = (field.default_factory() if field.default is dataclasses.MISSING
                   and field.default_factory is not dataclasses.MISSING else field.default)
        if default is dataclasses.MISSING:      # required: an argument of the call's own
            continue
        if kind == "add" and meta.get("add", {}).get("from_index"):
            default = None
        out[field.name] = default
    return out


def renamed_settings(config: type) -> dict[str, str]:
    """Old spellings of renamed settings (a field's `was` metadata), accepted for one release
    with a warning: the new name by the old."""
    import dataclasses

    return {field.metadata["was"]: field.name for field in dataclasses.fields(config)
            if "was" in field.metadata}


def config_settings(kind: str, config: type, settings: dict[str, Any],
                    explicit: Iterable[str]) -> dict[str, Any]:
    """The settings a call forwards to its settings class beyond its own keywords
    (`**settings`), checked: each a keyword of `settings_keywords` that no explicit keyword
    sets; an old spelling of a renamed one is taken under its new name, with a warning.

    Args:
        kind: "build", "add", "train", "pretrain", "recall" or "downstream".
        config: The settings dataclass (`BuildConfig`, `TrainConfig`, ...).
        settings: The keywords given beyond the call's own.
        explicit: The fields the call's own keywords set.

    Returns:
        `settings`, checked, under the fields' names.

    Raises:
        InputError: a keyword that is no such field (named), or a setting given under both its
            old and its new name.
    """
    from tapt.errors import InputError
    from tapt.util.checks import did_you_mean, renamed

    allowed = set(settings_keywords(kind, config)) - set(explicit)
    out = renamed(settings, renamed_settings(config))
    for name in out:
        if name not in allowed:
            raise InputError(f"unknown keyword `{name}`"
                             f"{did_you_mean(name, [*allowed, *explicit])}", param=name)
    return out


def _settings_class(kind: str) -> type:
    """The settings dataclass of a kind of call."""
    from tapt.errors import InputError

    if kind not in CONFIG_KINDS:
        raise InputError(f"must be one of {', '.join(CONFIG_KINDS)}, got {kind!r}", param="kind")
    if kind == "train":
        from tapt.trainer.config import TrainConfig as config
    elif kind == "pretrain":
        from tapt.trainer.pretrain import PretrainConfig as config
    elif kind == "recall":
        from tapt.bench.recall_config import RecallConfig as config
    elif kind == "downstream":
        from tapt.bench.downstream_config import DownstreamConfig as config
    elif kind == "select":
        from tapt.retriever.selections.settings import SelectSettings as config
    elif kind == "serve":
        from tapt.api.serve_settings import ServeSettings as config
    else:
        from tapt.indexer.building.build_config import BuildConfig as config
    return config
