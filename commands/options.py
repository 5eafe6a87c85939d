"""What several commands share: option decorators, the options of method parameters
(`_param_option`, from `tapt.api.method_params`) and small parsers of option values."""

from __future__ import annotations

import click

from tapt import api


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

        try:
            return api.parse_memory(value)
        except InputError as exc:
            self.fail(exc.message, param, ctx)


def _faiss_options(func=None, *, keep: bool = False):
    """--index, --memory and --opq: which FAISS index to build (see indexer/ann/index_choice.py);
    `keep` (reindex): --index keep, the index's current type, is the default."""
    DEFAULT_MEMORY = api.default_memory()

    if func is None:
        return lambda f: _faiss_options(f, keep=keep)
    kinds = ["auto", "flat", "hnsw", "ivfpq"]
    options = [
        click.option("--index", "index_type", default="keep" if keep else "auto",
                     show_default=True, type=click.Choice(["keep"] * keep + kinds),
                     help=("FAISS index: keep = the index's current type (and its --memory "
                           "and --opq unless given); " if keep else "FAISS index: ")
                     + "auto = Flat up to 100k sentences, HNSW up to 500k, IVF-PQ "
                       "above (or whatever fits --memory); approximate ones are rescored "
                       "exactly from the stored embeddings."),
        click.option("--memory", default=None if keep else DEFAULT_MEMORY,
                     show_default=f"the current one with keep, else {DEFAULT_MEMORY}" if keep
                     else True, type=_MemoryType(),
                     help="RAM budget for the FAISS index (8G, 512M, ...)."),
        click.option("--opq", is_flag=True, help="IVF-PQ: rotate with OPQ before quantising "
                                                 "(slower to train)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _shard_options(func):
    """--shards / --shard-size / --executor: how a build or add splits and runs its work."""
    options = [
        click.option("--shards", type=click.IntRange(min=1), default=None,
                     help="Split the input files into this many shards (whole files each, "
                          "about equal record counts) [default: one shard]."),
        click.option("--shard-size", default=None, metavar="COUNT",
                     help="Or: start a new shard before a file would take the shard past this "
                          "many input records (2M, 500k, ...)."),
        click.option("--executor", default="local", show_default=True,
                     type=click.Choice(api.executor_names()),
                     help="What runs the build's stages (local: this process; ray: a Ray "
                          "cluster, see --ray-address; needs pip install 'tapt[ray]')."),
        click.option("--ray-address", "address", default=None, metavar="auto|HOST:PORT",
                     help="--executor ray: the cluster to join [default: RAY_ADDRESS, else a "
                          "local cluster on this machine]."),
        click.option("--ray-workers", "workers", type=click.IntRange(min=1), default=None,
                     help="--executor ray: embedding actors [default: GPUs / "
                          "--gpus-per-worker, or the cluster's CPUs - 1]."),
        click.option("--gpus-per-worker", type=click.FloatRange(min=0), default=None,
                     help="--executor ray: GPUs per embedding actor (0.5: two per GPU) "
                          "[default: 0, CPU actors]."),
        click.option("--ray-timeout", "timeout", type=click.FloatRange(min=0, min_open=True),
                     default=None, metavar="SECONDS",
                     help="--executor ray: fail a stage when no task of it finishes for this "
                          "long (the cluster lost its workers, or cannot place them) "
                          "[default: 3600]."),
        click.option("--ray-retries", "retries", type=click.IntRange(min=0), default=None,
                     help="--executor ray: restarts of a dead embedding actor and retries of "
                          "a task whose worker died [default: 3]."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _input_options(add: bool = False):
    """How corpus files are read (see indexer/reading/formats): shared by `index build` and `index add`."""
    index_default = " [default: the index's]"
    options = [
        click.option("--text-field", default=None if add else "text", show_default=not add,
                     help="Field (JSONL) or column (Parquet, CSV/TSV, Arrow, HF datasets) with "
                          "the text." + (index_default if add else "")),
        click.option("--doc-field", default=None if add else "doc", show_default=not add,
                     help="Field/column whose equal consecutive values join records into one "
                          "document ('' = none)." + (index_default if add else "")),
        click.option("--text-docs", default=None if add else "auto", show_default=not add,
                     type=click.Choice(["auto", "line", "block"]),
                     help="Plain text: one document per line, or per blank-line block."
                          + (index_default if add else "")),
        click.option("--input-format", default=None, type=click.Choice(api.input_formats()),
                     help="Read every input file as this format (files without a telling "
                          "extension) [default: by extension]."),
        click.option("--hf-dataset", "hf_datasets", multiple=True, metavar="NAME[:CONFIG]",
                     help="Also read this Hugging Face Hub dataset, streamed (needs the "
                          "datasets package and a network; repeatable)."),
        click.option("--hf-split", default=None,
                     help="Split of --hf-dataset [default: train] and of DatasetDict folders "
                          "[default: their only split]."),
        click.option("--strict", is_flag=True,
                     help="Refuse folders holding files of no known format (default: skip "
                          "them and list them at INFO)."),
        click.option("--invalid-utf8", default=None if add else "error", show_default=not add,
                     type=click.Choice(["error", "replace"]),
                     help="Text that is not valid UTF-8, or holds NUL: stop at its file and "
                          "line (error), or read each invalid byte (and NUL) as U+FFFD and count "
                          "the records (replace)." + (index_default if add else "")),
    ]

    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


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
    `tapt.api.method_params`)."""
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


def _ints(spec: str, option: str) -> list[int]:
    try:
        return [int(x) for x in spec.split(",") if x.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{spec!r}: use comma-separated integers", param_hint=option) from exc
