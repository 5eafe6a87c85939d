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


CONFIG_KINDS = ("build", "add", "train", "pretrain", "downstream")


def config_fields(kind: str, config: type | None = None) -> list[dict[str, Any]]:
    """The options of `index build`, `index add`, `train` or `pretrain` that are fields of
    their config dataclass (`BuildConfig`, `TrainConfig`, `PretrainConfig`), as the command line
    makes its options from them:
    each field whose metadata has a `help` (for "add": an `add` entry too, whose keys override
    the build's; `from_index`: defaults to what the index was built with).

    Args:
        kind: "build", "add", "train" or "pretrain".
        config: The dataclass to describe instead of the kind's own (a variant of it).

    Returns:
        One dict per option, in field order: name (the field's), flag ("--segment-size", or
            "--split/--no-split"), kind (int, float, str or bool), default, choices (None when
            free), minimum, maximum, metavar, show_default and help.

    Raises:
        InputError: an unknown kind.
    """
    import dataclasses
    import typing

    from tapt.errors import InputError

    if kind not in CONFIG_KINDS:
        raise InputError(f"must be one of {', '.join(CONFIG_KINDS)}, got {kind!r}", param="kind")
    if config is None:
        if kind == "train":
            from tapt.trainer.config import TrainConfig as config
        elif kind == "pretrain":
            from tapt.trainer.pretrain import PretrainConfig as config
        elif kind == "downstream":
            from tapt.trainer.downstream_config import DownstreamConfig as config
        else:
            from tapt.indexer.building.build_config import BuildConfig as config
    hints = typing.get_type_hints(config)
    kinds = {bool: bool, int: int, float: float}
    out = []
    for field in dataclasses.fields(config):
        meta = dict(field.metadata)
        if "help" not in meta or (kind == "add" and "add" not in meta):
            continue
        if kind == "add":
            meta.update(meta["add"])
        default = field.default
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
                    "metavar": meta.get("metavar"),
                    "show_default": meta.get("show_default", False), "help": meta["help"]})
    return out


def config_settings(kind: str, config: type, settings: dict[str, Any],
                    explicit: Iterable[str]) -> dict[str, Any]:
    """The config fields a call takes as keywords beyond its own (`**settings`): every option
    of the kind's command that is a field (`config_fields`) and that no explicit keyword sets,
    so a field added to the config is a keyword of the call with no other edit.

    Args:
        kind: "build", "add" or "train".
        config: The config dataclass (`BuildConfig`, `TrainConfig`, or a variant of it).
        settings: The keywords given beyond the call's own.
        explicit: The fields the call's own keywords set.

    Returns:
        `settings`, checked.

    Raises:
        InputError: a keyword that is no such field (named).
    """
    from tapt.errors import InputError
    from tapt.util.checks import did_you_mean

    allowed = {desc["name"] for desc in config_fields(kind, config)} - set(explicit)
    for name in settings:
        if name not in allowed:
            raise InputError(f"unknown keyword `{name}`"
                             f"{did_you_mean(name, [*allowed, *explicit])}", param=name)
    return settings
