"""What several commands share: option decorators, the options of method parameters
(`_param_option`, from `tapt.api.options.method_params`) and of config fields
(`_config_options`, from `tapt.api.options.config_fields`), and small parsers of option values."""

from __future__ import annotations

import click

from tapt.api import options as api_options

_BACKEND_HELP = ("Encoder backend: torch, or the model exported once to ONNX (fp32, or int8 by dynamic "
                 "quantisation; CPU only). auto = onnx (fp32: faster than torch on a CPU, same "
                 "selections) on CPU, torch on CUDA; onnx-int8 is faster still, but its selections "
                 "differ by a few percent (see the Performance docs).")


def _backend_option(default_help: str = _BACKEND_HELP):
    return click.option("--backend", default="auto", show_default=True,
                        type=click.Choice(["auto", "torch", "onnx", "onnx-int8"]), help=default_help)


SEED = click.IntRange(0, 2**32 - 1)      # every seeded library here accepts this range


class _MemoryType(click.ParamType):
    """A size like 8G, 512M or 1.5G, in bytes."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        from tapt.errors import InputError

        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"          # resolved where the build runs (half its available memory)
        try:
            return api_options.parse_memory(value)
        except InputError as exc:
            self.fail(exc.message, param, ctx)


def _faiss_options(func=None, *, keep: bool = False):
    """--index, --memory and --opq: which FAISS index to build (see indexer/ann/index_choice.py);
    `keep` (reindex): --index keep, the index's current type, is the default."""
    DEFAULT_MEMORY = api_options.default_memory()

    if func is None:
        return lambda f: _faiss_options(f, keep=keep)
    kinds = ["auto", "flat", "hnsw", "ivfpq"]
    options = [
        click.option("--index", "index", default="keep" if keep else "auto",
                     show_default=True, type=click.Choice(["keep"] * keep + kinds),
                     help=("FAISS index: keep = the index's current type (and its --memory "
                           "and --opq unless given); " if keep else "FAISS index: ")
                     + "auto = Flat up to 100k sentences, HNSW up to 500k, IVF-PQ "
                       "above (or whatever fits --memory); approximate ones are rescored "
                       "exactly from the stored embeddings."),
        click.option("--memory", default=None if keep else DEFAULT_MEMORY,
                     show_default=f"the current one with keep, else {DEFAULT_MEMORY}" if keep
                     else True, type=_MemoryType(),
                     help="RAM budget for the FAISS index (8G, 512M, ...; auto = half the memory "
                          "available where the build runs)."),
        click.option("--opq", is_flag=True, default=False, help="IVF-PQ: rotate with OPQ before quantising "
                                                 "(slower to train)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _executor_options(func):
    """The options of every registered executor (`Executor.Options`, described by
    `tapt.api.options.executor_fields`): a build's or add's, not config fields."""
    for desc in reversed(api_options.executor_fields()):
        func.__dict__.setdefault("__click_params__", []).append(_config_option(desc))
    return func


_HF_DATASET = click.option(
    "--hf-dataset", "hf_datasets", multiple=True, metavar="NAME[:CONFIG]",
    help="Also read this Hugging Face Hub dataset, streamed (needs the datasets package and a "
         "network; repeatable).")


def _inputs(corpus: tuple[str, ...], hf_datasets: tuple[str, ...]) -> list[str]:
    """CORPUS arguments, refused when there are none and no --hf-dataset either."""
    if not corpus and not hf_datasets:
        raise click.UsageError("give CORPUS files, folders or URLs, or --hf-dataset")
    return list(corpus)


_BUDGET_HELP = "0.2 = 20% of segments; 5000 = segments; 20000sent = sentences; 2Mtok = tokens."


_TASK = click.option("--task", "-t", required=True, multiple=True, metavar="PATH",
                     help="Task text: files or folders in any corpus format, URLs, or - for "
                          "standard input (repeatable).")


def _flags_in_text(text: str) -> str:
    """Help text with `param` names written as flags."""
    import re

    return re.sub(r"`([a-z][a-z0-9_]*)`", lambda m: "--" + m.group(1).replace("_", "-"), text)


def _param_option(param: dict) -> click.Option:
    """The click option of one method parameter (type, default, choices and help from
    `tapt.api.options.method_params`)."""
    kind, choices = param["kind"], param["choices"]
    minimum, maximum = param["minimum"], param["maximum"]
    bounded = minimum is not None or maximum is not None
    if choices is not None:
        type_ = click.Choice([str(c) for c in choices])
    elif kind is int:
        type_ = click.IntRange(min=minimum, max=maximum) if bounded else click.INT
    elif kind is float:
        type_ = click.FloatRange(min=minimum, max=maximum) if bounded else click.FLOAT
    else:
        type_ = click.STRING
    name = param["name"]
    flags = ["--" + name.replace("_", "-")] + ([param["short"]] if param["short"] else [])
    if kind is bool:
        return click.Option(flags + [name], is_flag=True, default=param["default"],
                            help=_flags_in_text(param["help"]))
    return click.Option(flags + [name], type=type_, default=param["default"],
                        show_default=param["default"] is not None,
                        help=_flags_in_text(param["help"]))


def _config_option(desc: dict) -> click.Option:
    """The click option of one config field (flag, type, default, help from
    `tapt.api.options.config_fields`)."""
    kind, choices = desc["kind"], desc["choices"]
    minimum, maximum = desc["minimum"], desc["maximum"]
    bounded = minimum is not None or maximum is not None
    decls = [desc["flag"], *([desc["short"]] if desc.get("short") else []), desc["name"]]
    if kind is bool:
        return click.Option(decls, is_flag=True, default=desc["default"],
                            show_default=desc["show_default"], help=desc["help"])
    if choices is not None:
        type_ = click.Choice([str(c) for c in choices])
    elif desc.get("path") is not None:
        type_ = click.Path(**desc["path"])
    elif kind is int:
        type_ = (click.IntRange(min=minimum, max=maximum, min_open=desc.get("min_open", False))
                 if bounded else click.INT)
    elif kind is float:
        type_ = (click.FloatRange(min=minimum, max=maximum,
                                  min_open=desc.get("min_open", False))
                 if bounded else click.FLOAT)
    else:
        type_ = click.STRING
    return click.Option(decls, type=type_, default=desc["default"], metavar=desc["metavar"],
                        required=desc.get("required", False),
                        show_default=desc["show_default"], help=desc["help"])


def _config_options(kind: str, *layout, config: type | None = None):
    """A decorator giving a command the options of its config's fields (`kind`: "build", "add"
    or "train"), placed as `layout` lists them among hand-written option decorators; a field
    `layout` does not name comes after them, so a new field needs no edit here to become an
    option (its value reaches the command under the field's name).

    Args:
        kind: Which command's fields (`tapt.api.options.config_fields`).
        *layout: Field names and decorators of other options, in the order `--help` lists them.
        config: The dataclass to describe instead of the kind's own.

    Returns:
        The decorator.
    """
    fields = {desc["name"]: desc for desc in api_options.config_fields(kind, config)}
    unknown = [name for name in layout if isinstance(name, str) and name not in fields]
    if unknown:
        raise KeyError(f"not options of {kind}: {', '.join(unknown)}")
    items = list(layout) + [name for name in fields if name not in layout]

    def attach(option: click.Option):
        def decorate(func):
            func.__dict__.setdefault("__click_params__", []).append(option)
            return func
        return decorate

    def decorate(func):
        for item in reversed(items):
            if isinstance(item, str):
                item = attach(_config_option(fields[item]))
            func = item(func)
        return func

    return decorate


def _ints(spec: str, option: str) -> list[int]:
    try:
        return [int(x) for x in spec.split(",") if x.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{spec!r}: use comma-separated integers", param_hint=option) from exc
