"""tapt: choose continued-pretraining data for a task from a corpus embedded once.

The command line only: parsing, terminal output and turning every failure into one line,
`Error: ...`, and a non-zero exit status. Every command calls the Python API (`tapt.api`, whose
option metadata its options are built from) and nothing deeper: an import-linter contract in
pyproject.toml and tests/api/test_api_parity.py keep it so.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import inspect
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path


def _stopped_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM while the command line is still importing (before `main` installs
    its handlers, and before anything is written): one line, not an import's traceback."""
    interrupted = signum == signal.SIGINT
    os.write(2, b"Error: interrupted\n" if interrupted else b"Error: terminated (SIGTERM)\n")
    os._exit(130 if interrupted else 143)


if (os.path.basename(sys.argv[0] if sys.argv else "") == "tapt"   # the console script only
        and threading.current_thread() is threading.main_thread()):
    signal.signal(signal.SIGINT, _stopped_while_starting)
    signal.signal(signal.SIGTERM, _stopped_while_starting)

import click  # noqa: E402 - after the handlers above: importing takes a few tenths of a second

from tapt import api
from tapt.api import CONTEXTS
from tapt.errors import Interrupted, TaptError

CLICK_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
_STATE = {"verbose": 0}  # -v count of the running invocation, for tracebacks of internal errors
# SIGTERM: `terminated` once one arrived; `stopping` once _Terminated was raised or the command's
# outcome is decided (later signals only set `terminated`); `reported` once an Error line is out
_STATE.update(terminated=False, stopping=False, reported=False, code=None)


def _flag_of(param: str, ctx: click.Context | None = None) -> str:
    """A command's flag for a library parameter name (`budget` -> `--budget`)."""
    ctx = ctx or click.get_current_context(silent=True)
    for option in (ctx.command.params if ctx is not None else []):
        if option.name == param and isinstance(option, click.Option):
            longs = [o for o in option.opts if o.startswith("--")]
            return (longs or option.opts)[0]
        if option.name == param:
            return option.human_readable_name
    return "--" + param.replace("_", "-")


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


def _tapt_error(exc: TaptError, ctx: click.Context | None = None) -> click.ClickException:
    """A tapt error as a one-line ClickException naming this command's flags."""
    return click.ClickException(_one_line(exc.render(lambda p: _flag_of(p, ctx))))


def _domain_errors(func):
    """Turn tapt's own errors into a one-line `Error: ...` and exit status 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except TaptError as exc:
            raise _tapt_error(exc) from exc

    return wrapper


class _Interrupted(click.ClickException):
    """Ctrl-C: exit 130 like an interrupted shell job, with one line saying what was kept."""

    exit_code = 130


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler's stop, `kill`), raised where the process is, so that every
    cleanup that runs for Ctrl-C runs for it too; the command exits 143 with one Error line."""


def _importing(frame: object) -> bool:
    """True while Python imports a module: an exception raised there may reach the importing
    code (C code in particular) as an ImportError, then reported as a missing package."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _on_sigterm(signum: int, frame: object) -> None:
    """Raise _Terminated where the process is, once; inside an import, a moment later (the
    signal is sent again until it lands outside one)."""
    _STATE["terminated"] = True
    if _STATE["stopping"]:          # raised once already, or at exit: the exit status says it
        return
    first = _STATE.setdefault("deferred", time.monotonic())
    if _importing(frame) and time.monotonic() - first < 5:     # an import that hangs: not forever
        again = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM))
        again.daemon = True
        again.start()
        return
    _STATE["stopping"] = True
    raise _Terminated()


def _interrupted_at_exit(signum: int, frame: object) -> None:
    _STATE["interrupted"] = True


def _terminated_at_exit() -> None:
    """The last atexit handler of the `tapt` command (`main` ran): a SIGTERM (or Ctrl-C) while
    the interpreter exits is status 143 (130) and the one line, never a traceback of an atexit
    handler and status 0. The process then ends here: past this point the interpreter restores
    the default handlers, and a SIGTERM during its teardown would kill it."""
    if _STATE["code"] is None:       # imported as a library, not run as the command
        return
    code = _STATE["code"] if isinstance(_STATE["code"], int) else 1
    logging.shutdown()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stdout.flush()
    if _STATE["terminated"] and code != 143:
        code, what = 143, b"terminated (SIGTERM)"
    elif _STATE.get("interrupted") and code not in (130, 143):
        code, what = 130, b"interrupted"
    else:
        what = b""
    if what and not _STATE["reported"]:
        os.write(2, b"Error: " + what + b" as the command finished; what it wrote is complete\n")
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.flush()
    os._exit(code)


atexit.register(_terminated_at_exit)    # at import: it runs after every atexit handler since


def _terminated(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, _Terminated):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class _BrokenPipe(Exception):
    """Whoever read stdout stopped reading (`tapt ... | head`)."""


class TaptCommand(click.Command):
    """A command whose failures become one line: tapt errors name this command's flags,
    Ctrl-C exits 130."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TaptError as exc:
            raise _tapt_error(exc, ctx) from exc
        except KeyboardInterrupt as exc:
            raise _Interrupted("interrupted") from exc
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise _BrokenPipe() from exc
            raise


class TaptGroup(click.Group):
    """The command tree: subcommands are `TaptCommand`s, and `main` prints every failure as
    one `Error:` line (usage errors point to the command's -h; internal errors say how to see
    the traceback, which -vv prints)."""

    command_class = TaptCommand
    group_class = type

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        _STATE.update(verbose=0, stopping=False, reported=False)
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, _stopped_while_starting)):
            signal.signal(signal.SIGTERM, _on_sigterm)  # run without `main` (cli.main(args=...))
        if sys.stdout is None:               # started with stdout closed (>&-): nothing to show
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            sys.stdout.flush()               # a closed pipe shows here, not at interpreter exit
        except click.exceptions.NoArgsIsHelpError as exc:
            # `tapt` or `tapt select` alone asks for the help: shown as -h shows it, status 0
            # (not a failure; a failure is one Error line, see docs/reference/reliability.md)
            click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
            code = 0
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} -h')" if exc.ctx is not None else ""
            code = _fail(_one_line(exc.format_message()) + hint, exc.exit_code)
        except click.ClickException as exc:
            message, code = _one_line(exc.format_message()), exc.exit_code
            if isinstance(exc, _Interrupted) and (_terminated(exc) or _STATE["terminated"]):
                rest = (message[len("interrupted"):] if message.startswith("interrupted")
                        else f": {message}")
                message, code = "terminated (SIGTERM)" + rest, 143
            code = _fail(message, code)
        except (click.Abort, KeyboardInterrupt) as exc:
            code = (_fail("terminated (SIGTERM)", 143) if _terminated(exc) or _STATE["terminated"]
                    else _fail("interrupted", 130))
        except _BrokenPipe:
            code = _quiet_broken_pipe()
        except BrokenPipeError:
            code = _quiet_broken_pipe()
        except OSError as exc:
            if exc.filename is not None or exc.errno not in _STDOUT_ERRNOS:
                code = _internal(exc)
            else:                            # stdout on a full disk (> /dev/full), a dead tty
                _quiet_broken_pipe()
                code = _fail(f"cannot write standard output: {exc.strerror or exc}", 1)
        except Exception as exc:  # noqa: BLE001 - the last resort: one line, traceback at -vv
            code = _internal(exc)
        _STATE["stopping"] = True
        if _STATE["terminated"] and code not in (141, 143):
            # a SIGTERM that some code swallowed, or that came as the command finished
            code = _fail("terminated (SIGTERM) as the command finished; what it wrote is "
                         "complete" if code == 0 else "terminated (SIGTERM)", 143)
        sys.exit(code if isinstance(code, int) else 0)


# errors of a write with no file name: standard output (the commands name every file they write)
_STDOUT_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EBADF, errno.EDQUOT, errno.EFBIG)


def _internal(exc: BaseException) -> int:
    """An error no layer turned into a message: one line, the traceback with -vv."""
    if _STATE["verbose"] >= 2:
        traceback.print_exception(exc, file=sys.stderr)
    return _fail(f"internal error: {type(exc).__name__}: {_one_line(exc)} (run with -vv "
                 "for the traceback)", 1)


def _fail(message: str, code: int) -> int:
    """Print the command's one Error line (once) and return its exit status; after a SIGTERM,
    whatever failed reports the termination (an import it broke is no missing package)."""
    _STATE["stopping"] = True
    if _STATE["terminated"] and code != 143:
        message, code = "terminated (SIGTERM)", 143
    if not _STATE["reported"]:
        _STATE["reported"] = True
        click.echo(f"Error: {message}", err=True)
    return code


def _quiet_broken_pipe() -> int:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests): nothing to flush
        pass
    return 141  # 128 + SIGPIPE, as a shell reports a reader that went away


@click.group("tapt", cls=TaptGroup, context_settings=CLICK_SETTINGS)
@click.version_option(package_name="tapt")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug and tracebacks).")
@click.option("-q", "--quiet", is_flag=True, help="Warnings and errors only, no progress bars.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """Select task-like continued-pretraining data from a corpus indexed once.

    \b
      tapt index build corpus/ --out idx          # embed a corpus once
      tapt select centroid idx --task task.txt --budget 0.2 --out sel.jsonl
      tapt export sel.jsonl --format parquet --out train.parquet
      tapt eval sel.jsonl --index idx --label-field domain --label medical
    """
    _STATE["verbose"] = verbose
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if verbose < 2:
        for noisy in ("sentence_transformers", "transformers", "faiss", "httpx", "huggingface_hub"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    ctx.obj = {"progress": not quiet}


# ----------------------------------------------------------------------------- index


@cli.group(context_settings=CLICK_SETTINGS)
def index() -> None:
    """Build and inspect corpus indexes."""


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


@index.command("build", context_settings=CLICK_SETTINGS)
@click.argument("corpus", nargs=-1)
@click.option("--out", "-o", required=True, type=click.Path(), help="Index directory to create.")
@click.option("--model", default=None, help="Sentence-transformers model directory or hub name "
              "[default: the packaged all-MiniLM-L6-v2].")
@click.option("--segment-size", default=15, show_default=True, type=int,
              help="Sentences per segment (the selection unit).")
@click.option("--batch-size", default=None, type=click.IntRange(min=1),
              help="Sentences per encoder batch [default: 1024 on CUDA, 64 on the CPU].")
@click.option("--device", default="auto", show_default=True,
              type=click.Choice(["auto", "cpu", "cuda"]),
              help="Device that embeds the corpus (auto: cuda when torch sees a GPU).")
@_backend_option()
@click.option("--split/--no-split", default=True, show_default=True,
              help="Split records into sentences (--no-split: each record is one sentence).")
@_input_options()
@click.option("--overwrite", is_flag=True,
              help="Replace an existing tapt index at --out (never anything else).")
@click.option("--restart", is_flag=True,
              help="Discard an interrupted build of --out instead of resuming it.")
@click.option("--embedding-dtype", default="auto", show_default=True,
              type=click.Choice(["auto", "float32", "float16"]),
              help="Stored embeddings: float16 halves their disk and page-cache size (cosine "
                   "error ~5e-5 at most); scoring always computes in float32. auto = float16 "
                   "when the index has several shards or its corpus 1M records or more, else "
                   "float32.")
@_shard_options
@click.option("--part-size", "window", default="4096", show_default=True, metavar="ROWS",
              help="Sentences per embed part: the unit a resumed build redoes and a Ray embed "
                   "task embeds (64k for corpora of 10^9 sentences and more, so a Ray driver "
                   "tracks fewer parts).")
@click.option("--codes", default="none", show_default=True, type=click.Choice(["none", "int8"]),
              help="Also store int8 codes of the embeddings, for `select --scan codes` on "
                   "indexes too large to scan exactly (1 byte per dimension per sentence).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the summary.")
@_faiss_options
@click.pass_context
@_domain_errors
def index_build(ctx, corpus, out, model, segment_size, batch_size, device, backend, split, text_field,
                doc_field, text_docs, input_format, hf_datasets, hf_split, strict, invalid_utf8,
                overwrite,
                restart, embedding_dtype, shards, shard_size, executor, address, workers,
                gpus_per_worker, timeout, retries, window, codes, as_json, index_type, memory,
                opq) -> None:
    """Embed CORPUS (files, folders, fsspec URLs, or quoted glob patterns of them) into an index.

    Formats, chosen by extension: JSONL (.jsonl/.ndjson/.jl/.json), plain text (.txt) and
    CSV/TSV, each optionally compressed (.gz/.zst/.bz2/.xz); Parquet; Arrow IPC; Hugging Face
    save_to_disk folders; Hub datasets with --hf-dataset. Other fields and columns are kept as
    metadata. URLs (s3://, gs://, hf://, https://) need their fsspec backend installed.

    Every input is checked before anything is embedded. The index is a set of shards, each a
    group of whole input files (one shard unless --shards or --shard-size say otherwise), built
    in stages (prepare, embed in parts, assemble, train, index, publish) by an executor; every
    finished shard and part is recorded: if a build is killed or runs out of disk, the same
    command resumes it (no sentence lost, none embedded twice).

    \b
    Examples:
      tapt index build data/sample/pool.jsonl.gz --out idx --no-split
      tapt index build shards/ --out web-idx --text-field text   # *.parquet, *.jsonl.zst ...
      tapt index build 'fineweb/data/CC-MAIN-2024-*/*.parquet' --out fw-idx
      tapt index build web/ --out web-idx --shard-size 2M        # ~2M records per shard
      tapt index build wiki/ --out wiki-idx --model ./my-st-model --device cuda
      tapt index build --hf-dataset allenai/c4:en --hf-split validation --out c4-idx
    """
    try:
        ix = api.Index.build(
            _inputs(corpus, hf_datasets), out, model=model, device=device, backend=backend,
            segment_size=segment_size, batch_size=batch_size, split=split,
            text_field=text_field, doc_field=doc_field, text_docs=text_docs,
            input_format=input_format, hf_datasets=hf_datasets, hf_split=hf_split,
            strict=strict, invalid_utf8=invalid_utf8, overwrite=overwrite, restart=restart,
            embedding_dtype=embedding_dtype, shards=shards, shard_size=shard_size, codes=codes,
            executor=executor, index_type=index_type, memory=memory, opq=opq, part_size=window,
            ray_address=address, ray_workers=workers, gpus_per_worker=gpus_per_worker,
            ray_timeout=timeout, ray_retries=retries, progress=ctx.obj["progress"])
    except Interrupted as exc:
        raise _Interrupted(str(exc)) from exc
    manifest = ix.manifest
    if (ctx.get_parameter_source("doc_field") == click.core.ParameterSource.COMMANDLINE
            and ix.doc_field_joined_nothing()):
        logging.getLogger("tapt.cli").warning(
            "--doc-field %r joined no records: no record has it, so every record is its own "
            "document (check the field's name; '' turns joining off)", doc_field)
    if as_json:
        click.echo(json.dumps({"index": out, "manifest": manifest}))
        return
    counts, build = manifest["counts"], manifest["build"]
    click.echo(
        f"indexed {counts['sentences']:,} sentences ({counts['segments']:,} segments, "
        f"{counts['documents']:,} documents, {len(manifest['shards'])} shard(s)) in "
        f"{build['seconds']:.0f} s "
        f"({build['sentences_per_second']} sentences/s, peak RSS {build['peak_rss_mb']:.0f} MB"
        f"{', resumed' if build.get('sessions', 1) > 1 else ''}) -> {out}"
    )
    click.echo(f"faiss {_faiss_summary(manifest['faiss'])}")


def _faiss_summary(info: dict) -> str:
    """One line about an index's FAISS section (old manifests have factory, metric, ntotal)."""
    line = f"{info['factory']} ({info.get('metric', 'inner_product')}), {info['ntotal']:,} rows"
    search = info.get("search")
    if search:
        line += (f"; {search['param']} {search['default']} by default (recall@{search['k']} "
                 f"{search['recall']:.3f} vs exact on {search['queries']} sampled queries), "
                 "candidates rescored exactly")
    if info.get("reason"):
        # the reason counts the rows the type was chosen for; `index add` grows the index since
        grown = f"n = {info['ntotal']:,} " not in info["reason"]
        line += f"; chosen{' when built' if grown else ''}: {info['reason']}"
    return line


@index.command("add", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.argument("corpus", nargs=-1)
@click.option("--model", default=None, help="The index's model directory, if it moved.")
@click.option("--batch-size", default=None, type=click.IntRange(min=1),
              help="Sentences per encoder batch [default: the build's, else 1024 on CUDA "
                   "and 64 on the CPU].")
@click.option("--device", default="auto", show_default=True,
              type=click.Choice(["auto", "cpu", "cuda"]),
              help="Device that embeds the corpus (auto: cuda when torch sees a GPU).")
@_backend_option("Encoder backend [auto: the one IDX was built with, where the device allows].")
@_input_options(add=True)
@_shard_options
@click.option("--restart", is_flag=True,
              help="Discard an interrupted add of IDX instead of resuming it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the summary.")
@click.pass_context
@_domain_errors
def index_add(ctx, idx, corpus, model, batch_size, device, backend, text_field, doc_field,
              text_docs, input_format, hf_datasets, hf_split, strict, invalid_utf8, shards,
              shard_size, executor, address, workers, gpus_per_worker, timeout, retries, restart,
              as_json) -> None:
    """Append the documents of CORPUS that IDX does not hold yet, as new shards (same model
    and settings).

    CORPUS is read as by `tapt index build` (any of its formats, folders, URLs, --hf-dataset).
    Existing shards and ids never change; documents whose sentences are already in the index
    are skipped.
    The add is crash-safe like a build (run it again to resume) and readers see the old index
    until the new one is complete.

    \b
    Example:
      tapt index add idx more-news/ more.jsonl.gz
    """
    inputs = _inputs(corpus, hf_datasets)
    ix = api.Index.open(idx)
    try:
        last = ix.add(inputs, model=model, device=device, backend=backend, batch_size=batch_size,
               text_field=text_field, doc_field=doc_field, text_docs=text_docs,
               input_format=input_format, hf_datasets=hf_datasets, hf_split=hf_split,
               strict=strict, invalid_utf8=invalid_utf8, shards=shards, shard_size=shard_size,
               executor=executor, restart=restart, ray_address=address, ray_workers=workers,
               gpus_per_worker=gpus_per_worker, ray_timeout=timeout, ray_retries=retries,
               progress=ctx.obj["progress"])
    except Interrupted as exc:
        raise _Interrupted(str(exc)) from exc
    manifest = ix.manifest      # an add that added nothing leaves the index as it was
    if as_json:
        click.echo(json.dumps({"index": idx, "added": last, "counts": manifest["counts"],
                               "generation": manifest.get("generation")}))
        return
    if last.get("unchanged"):
        click.echo(f"nothing added ({last['duplicate_documents_skipped']:,} duplicate documents "
                   f"skipped: all are in the index already) -> {idx} is unchanged (generation "
                   f"{manifest.get('generation', 1)}, {manifest['counts']['sentences']:,} "
                   "sentences)")
        return
    click.echo(f"added {last['sentences']:,} sentences ({last['documents']:,} documents in "
               f"{len(last.get('shards', []))} new shard(s), "
               f"{last['duplicate_documents_skipped']:,} duplicate documents skipped) -> {idx} "
               f"now holds {manifest['counts']['sentences']:,} sentences")


@index.command("info", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest and sizes as JSON.")
@_domain_errors
def index_info(idx, as_json) -> None:
    """Show an index's counts, model, dimensions, sizes, FAISS type and versions.

    \b
    Example:
      tapt index info idx
    """
    info = api.Index.info_path(idx)  # shows old formats too
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    m, sizes = info, info["disk_bytes"]
    c = m["counts"]
    lines = [
        f"index      {idx}  (format {m['format_version']}, uuid {m['uuid']}, created {m['created']})",
        f"model      {m['model']['name']}  dim {m['model']['dim']}, max {m['model']['max_length']} "
        f"tokens, weights sha256 {m['model']['weights_sha256'][:16]}; embeddings "
        f"{m['files']['embeddings'].get('dtype', 'float32')}",
        f"counts     {c['documents']:,} documents, {c['sentences']:,} sentences, "
        f"{c['segments']:,} segments of <= {m['segment_size']}, {c['tokens']:,} tokens",
        f"skipped    {c['skipped_blank_records']:,} blank records; "
        f"{c['truncated_sentences']:,} sentences truncated for embedding"
        + (f"; {c['invalid_utf8_records']:,} records with invalid UTF-8 read as U+FFFD"
           if c.get("invalid_utf8_records") else ""),
        f"faiss      {_faiss_summary(m['faiss'])}",
        *([f"shards     {len(m['shards'])}: " + ", ".join(
            f"{e['name']} ({e['rows']:,} rows from {e['row_offset']:,})" for e in m["shards"][:4])
           + (f" and {len(m['shards']) - 4} more" if len(m["shards"]) > 4 else "")
           + ("; int8 codes" if m.get("codes") else "")] if m.get("shards") else
          [f"shards     none: format {m['format_version']}, run tapt index upgrade {idx}"]),
        f"build      {m['build']['seconds']} s, {m['build']['sentences_per_second']} sentences/s on "
        f"{m['build']['device']} ({m['build'].get('backend', 'torch')}"
        f"{', ' + m['build']['dtype'] if m['build'].get('dtype', 'float32') != 'float32' else ''}), "
        f"peak RSS {m['build']['peak_rss_mb']} MB",
        *([f"adds       generation {m.get('generation', 1)}, last {m['history'][-1]['added']}: "
           f"{m['history'][-1]['sentences']:,} sentences added, "
           f"{m['history'][-1]['duplicate_documents_skipped']:,} duplicate documents skipped"]
          if m.get("history") else []),
        "disk       " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items()),
        "versions   " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
    ]
    click.echo("\n".join(lines))


@index.command("serve", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.option("--ray-address", "address", default=None, metavar="auto|HOST:PORT",
              help="The Ray cluster [default: RAY_ADDRESS, else a local cluster on this "
                   "machine].")
@click.option("--actors", type=click.IntRange(min=1), default=None,
              help="Ray actors holding the shards (consecutive groups) [default: one per "
                   "shard].")
@click.option("--cpus-per-actor", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="CPUs Ray reserves for each actor.")
@click.option("--hold", type=click.Choice(["rows", "codes"]), default="rows", show_default=True,
              help="What the actors keep in RAM: the float16 embeddings, or the int8 codes "
                   "(half the RAM; for --scan codes of the methods that have it: "
                   "other scans then read the embeddings from disk).")
@click.option("--requests", "requests_file", type=click.File("r", encoding="utf-8"),
              default="-", show_default=True,
              help="File of requests, one JSON object per line ('-': standard input).")
@click.pass_context
@_domain_errors
def index_serve(ctx, idx, address, actors, cpus_per_actor, hold, requests_file) -> None:
    """Hold IDX's shards in Ray actors and answer selection requests, one JSON per line.

    A request: {"method": "centroid", "task": "task.jsonl" | {"files": [...]} | ["a task
    sentence", ...], "budget": "0.2", "params": {"k": 50}, "out": "sel.jsonl", "id": 7}
    (`params`, `segment_size`, `seed`, `out`, `overwrite` and `id` are optional). Each answer
    is one JSON line on standard output: the selected segment ids in rank order and counts
    (the selection file too, with "out"; with "out": "-", as select --out -, no file: the
    selection's lines in the answer, under "selection"), or {"id": ..., "error": ...}. A
    number JSON cannot spell (NaN, 1e999) is refused. Exit status 1 when a request failed.
    Needs Ray: pip install 'tapt[ray]'.

    \b
    Examples:
      echo '{"method": "knn", "task": "task.txt", "params": {"k": 20}}' | tapt index serve idx
      tapt index serve idx --ray-address auto --requests requests.jsonl > answers.jsonl
      tapt index serve idx --hold codes < requests.jsonl  # "params": {"scan": "codes"}
    """
    from tapt.api import answer_line, answer_request, serve

    failed = answered = 0
    with _stdout_for_answers() as answers, serve(
            idx, address=address, actors=actors, cpus_per_actor=cpus_per_actor,
            hold=hold) as served:
        if ctx.obj["progress"]:
            click.echo(f"serving {idx}: {served.n_sentences:,} sentences in "
                       f"{len(served.shards)} shard(s) on {len(served.servers.actors)} Ray "
                       "actor(s); one JSON request per line", err=True)
        for line in requests_file:
            if not line.strip():
                continue
            reply = answer_request(served, line)
            answered += 1
            failed += "error" in reply
            answers.write(answer_line(reply) + "\n")
            answers.flush()
    if failed:
        raise click.ClickException(f"{failed} of {answered} request(s) failed (see their "
                                   "\"error\" in the output)")


@contextlib.contextmanager
def _stdout_for_answers():
    """A stream on standard output for the answers alone: while it is open, file descriptor 1,
    which Ray's processes inherit and its log lines are written to, points at standard error, so
    nothing can fall between two JSON lines."""
    try:
        out, err = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):      # not a real file (a test's runner)
        yield sys.stdout
        return
    sys.stdout.flush()
    saved = os.dup(out)
    os.dup2(err, out)
    stream = os.fdopen(os.dup(saved), "w", encoding="utf-8", buffering=1)
    previous, sys.stdout = sys.stdout, sys.stderr
    try:
        yield stream
    finally:
        sys.stdout = previous
        os.dup2(saved, out)
        os.close(saved)
        try:
            stream.close()
        except OSError:         # a reader that went away: the error already under way says so
            pass


@index.command("verify", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.option("--deep", is_flag=True, help="Also re-embed a sample of stored sentences.")
@click.option("--sample", default=200, show_default=True, type=int,
              help="Rows sampled for the row-level checks.")
@click.option("--model", default=None, help="The index's model directory, for --deep.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per check.")
@click.pass_context
@_domain_errors
def index_verify(ctx, idx, deep, sample, model, as_json) -> None:
    """Check checksums, counts and row agreement of an index; name the repair for each fault.

    Exit status 1 when anything is wrong.

    \b
    Examples:
      tapt index verify idx
      tapt index verify idx --deep --json
    """
    if sample < 1:
        raise click.BadParameter("must be at least 1", param_hint="--sample")
    report = api.Index.verify_path(idx, deep=deep, sample=sample, model=model,
                          progress=ctx.obj["progress"])
    for f in report.findings:
        if as_json:
            click.echo(json.dumps({"check": f.check, "ok": f.ok, "detail": f.detail,
                                   "repair": f.repair, "shard": f.shard}))
        else:
            name = f"{f.shard}: {f.check}" if f.shard else f.check
            click.echo(f"{'ok ' if f.ok else 'BAD'}  {name:<34} {f.detail}"
                       + (f"\n     -> {f.repair}" if f.repair else ""))
    if not report.ok:
        bad = [f"{f.shard}: {f.check}" if f.shard else f.check
               for f in report.findings if not f.ok]
        raise click.ClickException(f"{idx} failed {len(bad)} check(s): {', '.join(bad)}")


@index.command("repair", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.pass_context
@_domain_errors
def index_repair(ctx, idx) -> None:
    """Rebuild what can be rebuilt without re-embedding (the FAISS index from the embeddings).

    \b
    Example:
      tapt index repair idx && tapt index verify idx
    """
    done = api.Index.repair_path(idx, progress=ctx.obj["progress"])
    click.echo("; ".join(done) if done else f"{idx}: nothing to repair")


@index.command("upgrade", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.pass_context
@_domain_errors
def index_upgrade(ctx, idx) -> None:
    """Bring an index of an older format to this tapt's format (3, sharded), without
    re-embedding.

    The index becomes one shard: its files are hard-linked, format 1's text records are
    rewritten with checksums, and the lexical ids and document hashes format 3 stores are
    computed from the stored text. The files are checked against their recorded checksums
    first, and the upgraded index replaces the old one in one atomic swap. Selections made from
    it stay valid.

    \b
    Example:
      tapt index upgrade idx && tapt index verify idx
    """
    manifest, changed = api.Index.upgrade_path(idx, progress=ctx.obj["progress"])
    if not changed:
        click.echo(f"{idx}: already format {manifest['format_version']}; nothing to do")
        return
    click.echo(f"{idx}: format {manifest['upgraded']['from_format']} -> "
               f"{manifest['format_version']} ({manifest['counts']['sentences']:,} sentences in "
               "one shard, text records with checksums, lexical ids stored)")


@index.command("reindex", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@_faiss_options(keep=True)
@click.option("--codes", default="keep", show_default=True,
              type=click.Choice(["keep", "none", "int8"]),
              help="int8: (re)compute int8 codes of the embeddings for `select --scan codes`; "
                   "none: drop them.")
@click.pass_context
@_domain_errors
def index_reindex(ctx, idx, index_type, memory, opq, codes) -> None:
    """Change IDX's FAISS index type (every shard's part) and its int8 codes from its stored
    embeddings (no re-embedding).

    The new index and manifest replace the old ones in one atomic swap; readers see either.

    \b
    Examples:
      tapt index reindex idx --index hnsw
      tapt index reindex idx --index auto --memory 512M
      tapt index reindex idx --codes int8      # the same FAISS type, int8 codes added
    """
    info = api.Index.open(idx).reindex(index_type, memory, opq=opq, codes=codes,
                                       progress=ctx.obj["progress"])
    click.echo(f"{idx}: {info.get('previous')} -> {_faiss_summary(info)} "
               f"({info['build_seconds']} s, {info['bytes'] / 2**20:.1f} MiB)")


def _int_list(ctx, param, value):
    if value is None:
        return None
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("use comma-separated integers, e.g. 16,32,64") from None
    if not out or min(out) < 1:
        raise click.BadParameter("values must be positive integers")
    return out


@index.command("recall", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.option("--queries", default=1000, show_default=True, type=click.IntRange(min=1),
              help="Sampled corpus rows (moved off the corpus by noise) used as queries.")
@click.option("--k", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--values", default=None, callback=_int_list,
              help="nprobe / efSearch values to sweep [default: the index type's sweep].")
@click.option("--seed", default=0, show_default=True, type=SEED)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
@_domain_errors
def index_recall(ctx, idx, queries, k, values, seed, as_json) -> None:
    """Recall@k of IDX's FAISS index against exact search, and time per query, per nprobe or
    efSearch value (candidates rescored exactly, as selections do).

    \b
    Examples:
      tapt index recall idx
      tapt index recall idx --queries 500 --k 50 --values 8,16,32,64 --json
    """
    report = api.Index.open(idx).recall(queries=queries, k=k, values=values, seed=seed,
                                        progress=ctx.obj["progress"])
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"{idx}: {report['factory']} ({report['kind']}), recall@{report['k']} against exact "
               f"search, {report['queries']} sampled queries; exact search "
               f"{report['exact_ms_per_query']:.2f} ms/query")
    name = report["param"] or "-"
    click.echo(f"{name:>9}  recall@{report['k']:<4} ann-only  candidates  ms/query")
    for row in report["sweep"]:
        mark = " *" if report["default"] and row["value"] == report["default"] else "  "
        value = "exact" if row["value"] is None else str(row["value"])
        click.echo(f"{value:>9}{mark}  {row['recall']:<10.4f} {row['raw_recall']:<9.4f} "
                   f"{row['candidates']:<11} {row['ms_per_query']:.3f}")
    if report["default"]:
        click.echo("* the recorded default; ann-only = the approximate ranking before exact "
                   "rescoring")


# ----------------------------------------------------------------------------- select

_BUDGET_HELP = "0.2 = 20% of segments; 5000 = segments; 20000sent = sentences; 2Mtok = tokens."


def _search_options(func):
    """--nprobe / --ef-search: how wide an approximate FAISS search is (default: recorded)."""
    func = click.option("--ef-search", type=click.IntRange(min=1), default=None,
                        help="HNSW indexes: efSearch [default: the index's calibrated one].")(func)
    return click.option("--nprobe", type=click.IntRange(min=1), default=None,
                        help="IVF indexes: inverted lists searched per query [default: the "
                             "index's calibrated one, recall@100 >= 0.95].")(func)


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


def _select_command(method) -> click.Command:
    """`tapt select NAME`: arguments from what the method needs, options from its Params."""
    fields = api.method_params(method)
    params: list[click.Parameter] = [click.Argument(["idx"], type=click.Path(exists=True,
                                                                           file_okay=False))]
    if method.needs_embeddings or method.needs_text:
        params += [
            click.Option(["--task", "-t"], required=True, multiple=True, metavar="PATH",
                         help="Task text: files or folders in any corpus format, URLs, or - for "
                              "standard input (repeatable)."),
            click.Option(["--text-field"], default="text", show_default=True,
                         help="Field/column with the task's text (JSONL, Parquet, CSV/TSV, ...)."),
        ]
    if method.budget == "required":
        params.append(click.Option(["--budget", "-b"], required=True, help=_BUDGET_HELP))
    elif method.budget == "optional":
        params.append(click.Option(["--budget", "-b"], default=None,
                                   help=f"{_BUDGET_HELP} [default: {method.budget_help}]"))
    params += [_param_option(f) for f in fields]
    params += [
        click.Option(["--out", "-o"], required=True, type=click.Path(dir_okay=False, allow_dash=True),
                     help="Selection JSONL to write (its manifest goes beside it); - writes the "
                          "JSONL lines to stdout (no manifest then; the summary goes to stderr)."),
        click.Option(["--overwrite"], is_flag=True,
                     help="Replace a selection tapt wrote at --out that was edited since (an "
                          "unchanged one is always replaced; a file tapt did not write, or an "
                          "input, never is)."),
        click.Option(["--json", "as_json"], is_flag=True,
                     help="Print one JSON object: method, counts, timings, output, info."),
        click.Option(["--segment-size"], type=click.IntRange(min=1), default=None,
                     help="Re-cut segments at this size [default: the index's]."),
        click.Option(["--seed"], type=SEED, default=0, show_default=True,
                     help="Seed of every random choice (the same seed gives the same selection)."),
        click.Option(["--executor"], type=click.Choice(["local", "ray"]), default="local",
                     show_default=True,
                     help="local: this process; ray: the index's shards loaded into Ray actors "
                          "for this selection, which score and search them (as `tapt index "
                          "serve`; the same selection; needs pip install 'tapt[ray]')."),
        click.Option(["--ray-address", "address"], default=None, metavar="auto|HOST:PORT",
                     help="--executor ray: the cluster to join [default: RAY_ADDRESS, else a "
                          "local cluster on this machine]."),
        click.Option(["--actors"], type=click.IntRange(min=1), default=None,
                     help="--executor ray: actors holding the shards [default: one per "
                          "shard]."),
        click.Option(["--cpus-per-actor"], type=click.FloatRange(min=0, min_open=True),
                     default=None, help="--executor ray: CPUs Ray reserves for each actor "
                                        "[default: 1]."),
    ]
    if method.pools_documents(method.make_params()):
        params.append(click.Option(
            ["--context"], type=click.Choice(CONTEXTS), default="sentence",
            show_default=True,
            help="document: score each sentence by its whole document's (shrunk) mean score, "
                 "so documents are kept or dropped together; usually more precise when corpus "
                 "documents are about one thing each (web pages, articles, books)."))
    if method.needs_embeddings:
        params += [
            click.Option(["--model"], default=None,
                         help="Model directory if the index's recorded one cannot be found."),
            click.Option(["--device"], default="auto", show_default=True,
                         type=click.Choice(["auto", "cpu", "cuda"]),
                         help="Device that embeds the task."),
            click.Option(["--backend"], default="auto", show_default=True,
                         type=click.Choice(["auto", "torch", "onnx", "onnx-int8"]),
                         help="Backend that embeds the task [auto: the one the index was built "
                              "with, where the device allows]."),
            click.Option(["--batch-size"], type=click.IntRange(min=1), default=64,
                         show_default=True, help="Task sentences per encoder batch."),
        ]

    def callback(**kw) -> None:
        ctx = click.get_current_context()
        values = {f["name"]: kw.pop(f["name"]) for f in fields}
        given = {name for name in values if ctx.get_parameter_source(name)
                 == click.core.ParameterSource.COMMANDLINE}
        _run_select(ctx, method, values, given, **kw)

    return TaptCommand(method.name, params=params, callback=callback, context_settings=CLICK_SETTINGS,
                       help=f"{method.summary}\n\n{_flags_in_text(inspect.cleandoc(method.help))}",
                       short_help=method.summary)


def _run_select(ctx: click.Context, method, values: dict, given: set, *, idx, out, overwrite,
                as_json, segment_size, seed, executor="local", address=None, actors=None,
                cpus_per_actor=None, task=(), text_field="text", budget=None, model=None,
                device="auto", backend="auto", batch_size=64, context="sentence") -> None:
    from contextlib import nullcontext

    from tapt.errors import InputError

    if executor != "ray":
        for name, value in (("address", address), ("actors", actors),
                            ("cpus_per_actor", cpus_per_actor)):
            if value is not None:
                raise InputError("only applies with `executor` ray", param=name)
    ix = (api.serve(idx, address=address, actors=actors,
                    cpus_per_actor=1.0 if cpus_per_actor is None else cpus_per_actor)
          if executor == "ray" else api.Index.open(idx))
    with ix if executor == "ray" else nullcontext(ix):
        selection = ix.select(method.name, {"files": list(task)} if task else None, budget,
                              segment_size=segment_size, seed=seed, context=context,
                              text_field=text_field, model=model, device=device,
                              backend=backend, batch_size=batch_size,
                              progress=ctx.obj["progress"], out=None if out == "-" else out,
                              overwrite=overwrite, explicit=given, **values)
    if out == "-":
        selection.write_lines(click.get_text_stream("stdout"))
    manifest, to_stderr = selection.manifest, out == "-"
    if as_json:
        click.echo(json.dumps({"method": manifest["method"], "output": out,
                               "manifest": None if out == "-" else str(Path(f"{out}.manifest.json")),
                               "counts": manifest["counts"], "timings": manifest["timings"],
                               "budget": manifest["budget"], "params": manifest["params"],
                               "task": manifest["task"], "info": manifest["info"],
                               "warnings": manifest["warnings"]}, default=str), err=to_stderr)
        return
    counts, info = manifest["counts"], manifest["info"]
    scalars = {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool))}
    extra = "".join(f", {k.replace('_', ' ')} {v}" for k, v in scalars.items())
    if len(scalars) < len(info):
        extra += " (--json for the details)"
    click.echo(
        f"{selection.method}: selected {counts['segments']:,} segments ({counts['sentences']:,} "
        f"sentences, {counts['tokens']:,} tokens) of {counts['corpus_segments']:,} in "
        f"{manifest['timings']['total_seconds']:.2f} s{extra} -> {out}", err=to_stderr)


@cli.group(context_settings=CLICK_SETTINGS)
def select() -> None:
    """Select task-like segments from an index (one command per method)."""


def _add_select_commands() -> None:
    for method in api.method_specs():
        select.add_command(_select_command(method))


_add_select_commands()


# ----------------------------------------------------------------------------- eval


@cli.command("eval", context_settings=CLICK_SETTINGS)
@click.argument("selections", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--index", "idx", required=True, type=click.Path(exists=True, file_okay=False),
              help="The index the selections were made from.")
@click.option("--label-field", default="domain", show_default=True,
              help="Metadata field holding the oracle label.")
@click.option("--label", required=True, help="The label that counts as relevant (the task's).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per selection.")
@_domain_errors
def evaluate(selections, idx, label_field, label, as_json) -> None:
    """Precision/recall/F1 of selections against the index's oracle labels (in sentences).

    \b
    Example:
      tapt eval sel-*.jsonl --index idx --label-field domain --label medical
    """
    rows = api.evaluate(list(selections), idx, label=label, label_field=label_field)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    names = [Path(row["selection"]).name for row in rows]
    wide = max([28, *map(len, names)])             # columns stay aligned for any name
    method = max([9, *(len(row["method"]) for row in rows)])
    click.echo(f"{'selection':<{wide}} {'method':<{method}} {'segments':>8} {'sentences':>9} "
               f"{'precision':>9} {'recall':>7} {'F1':>6} {'time s':>7}")
    for name, row in zip(names, rows):
        click.echo(f"{name:<{wide}} {row['method']:<{method}} {row['segments']:>8,} "
                   f"{row['selected']:>9,} {row['precision']:>9.3f} {row['recall']:>7.3f} "
                   f"{row['f1']:>6.3f} {row['seconds']:>7.2f}")


@cli.command("export", context_settings=CLICK_SETTINGS)
@click.argument("selection", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", default=None, type=click.Choice(["jsonl", "parquet", "hf", "txt"]),
              help="jsonl, parquet, hf (a datasets save_to_disk folder) or txt (one segment per "
                   "line, weights dropped) [default: from --out's suffix].")
@click.option("--out", "-o", required=True, type=click.Path(allow_dash=True),
              help="File to write (a folder for --format hf); - writes jsonl or txt to stdout.")
@click.option("--overwrite", is_flag=True,
              help="Replace an export tapt wrote at --out that may have changed since (a "
                   "jsonl export, a filtered parquet one); a file tapt did not write, or an "
                   "input, never is.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def export_command(selection, fmt, out, overwrite, as_json) -> None:
    """Write a selection as training data: one example per segment with its text and weight,
    plus score, rank, ids, document key, source file and the corpus metadata.

    \b
    parquet loads with pandas.read_parquet, hf with datasets.load_from_disk; `meta` and
    `sentence_meta` are JSON text there (jsonl keeps them as objects).

    \b
    Examples:
      tapt export sel.jsonl --format parquet --out train.parquet
      tapt export sel.jsonl --format hf --out train-ds
      tapt export sel.jsonl --format txt --out train.txt
    """
    to_stdout = out == "-"
    done = api.export(selection, click.get_text_stream("stdout") if to_stdout else out, fmt,
                      overwrite=overwrite)      # printed as given, as select prints
    fmt = done.pop("format")
    counts = done
    if as_json:
        click.echo(json.dumps({"selection": selection, "format": fmt, "output": out, **counts}),
                   err=to_stdout)
        return
    click.echo(f"exported {counts['segments']:,} segments ({counts['sentences']:,} sentences) as "
               f"{fmt} -> {out}", err=to_stdout)


# --- trainer commands ---


@cli.command("train", context_settings=CLICK_SETTINGS)
@click.option("--model", default=None, help="Masked-LM model directory or hub name (BERT, RoBERTa, "
              "DistilBERT...) [default: the packaged all-MiniLM-L6-v2, MLM head newly initialised].")
@click.option("--selection", "selections", required=True, multiple=True,
              type=click.Path(exists=True, dir_okay=False),
              help="Selection JSONL from `tapt select` (repeatable; all from one index).")
@click.option("--task", multiple=True, metavar="PATH",
              help="Task text mixed into training: files or folders in any corpus format, "
                   "URLs, or - for standard input (repeatable; a path given twice is read once).")
@click.option("--mix", default=None, help="TASK:SELECTION examples ratio with --task [default: 1:1].")
@click.option("--weights", default="discrete", show_default=True,
              type=click.Choice(["discrete", "continuous", "sample"]),
              help="discrete: ignore weights; continuous: scale each example's loss by its "
                   "lambda; sample: draw examples with probability proportional to lambda.")
@click.option("--steps", type=int, default=None, help="Optimizer steps (or give --epochs).")
@click.option("--epochs", type=int, default=None, help="Passes over the (mixed) data.")
@click.option("--batch-size", default=16, show_default=True, type=int,
              help="Examples per optimizer step.")
@click.option("--max-length", default=128, show_default=True, type=int,
              help="Tokens per example; consecutive sentences of one segment are packed up to it.")
@click.option("--lr", default=1e-4, show_default=True, type=float,
              help="Peak learning rate.")
@click.option("--warmup", default=0.06, show_default=True, type=float,
              help="Fraction of steps of linear warmup (then linear decay to 0).")
@click.option("--weight-decay", default=0.01, show_default=True, type=float,
              help="AdamW weight decay (none on biases and LayerNorm).")
@click.option("--mlm-probability", default=0.15, show_default=True, type=float,
              help="Share of tokens masked.")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
              help="Model directory to write (checkpoints go to OUT/checkpoints).")
@click.option("--resume", is_flag=True, help="Continue the run in --out from its last checkpoint.")
@click.option("--eval-text", multiple=True, metavar="PATH",
              help="Held-out text for the masked-LM loss during training, read like --task "
                   "(repeatable).")
@click.option("--text-field", default="text", show_default=True,
              help="Field/column with the text in --task and --eval-text (JSONL, Parquet, "
                   "CSV/TSV, Arrow, HF datasets).")
@click.option("--eval-every", default=0, show_default=True, type=int,
              help="Evaluate every N steps (0: only at the start and the end).")
@click.option("--eval-batch-size", default=api.MLM_EVAL_BATCH, show_default=True, type=int,
              help="Sequences per batch of the held-out loss (eval-mlm's --batch-size: the "
                   "same masks, so the same loss for the same model).")
@click.option("--save-every", default=200, show_default=True, type=int,
              help="Checkpoint every N steps.")
@click.option("--keep-checkpoints", default=2, show_default=True, type=int,
              help="How many of the newest checkpoints to keep.")
@click.option("--delete-checkpoints", is_flag=True,
              help="Delete OUT/checkpoints once the run has finished.")
@click.option("--seed", default=0, show_default=True, type=SEED,
              help="Seed of data order, masks and head initialisation.")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(["cpu", "cuda"]),
              help="cuda trains with bf16 autocast where supported.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the summary.")
@click.pass_context
@_domain_errors
def train_command(ctx, model, selections, task, mix, weights, steps, epochs, batch_size, max_length,
                  lr, warmup, weight_decay, mlm_probability, out, resume, eval_text, text_field,
                  eval_every, eval_batch_size, save_every, keep_checkpoints,
                  delete_checkpoints, seed, device, as_json) -> None:
    """Continue masked-LM pretraining of a model on selected segments (and task text).

    \b
    Examples:
      tapt train --selection sel.jsonl --steps 1000 --out model-tapt
      tapt train --model ./bert --selection knn.jsonl --task task.jsonl --mix 1:1 \\
          --epochs 3 --eval-text heldout.txt --eval-every 200 --out model-knn
      tapt train --selection weighted.jsonl --weights continuous --steps 2000 --out m --resume
    """
    from tapt.api import train
    from tapt.errors import TrainingInterrupted

    try:
        manifest = train(
            list(selections), out, model=model, task={"files": list(task)} if task else None,
            mix=mix, weights=weights,
            steps=steps, epochs=epochs, batch_size=batch_size, max_length=max_length, lr=lr,
            warmup=warmup, weight_decay=weight_decay, mlm_probability=mlm_probability,
            resume=resume, eval_text={"files": list(eval_text)} if eval_text else None,
            text_field=text_field, eval_every=eval_every, eval_batch_size=eval_batch_size,
            save_every=save_every, keep_checkpoints=keep_checkpoints,
            delete_checkpoints=delete_checkpoints, seed=seed, device=device,
            progress=ctx.obj["progress"])
    except TrainingInterrupted as exc:
        if exc.signum == signal.SIGTERM:
            _STATE["terminated"] = True     # the trainer's handler took it: exit 143
        raise _Interrupted(f"{exc}; continue with the same arguments plus --resume") from exc
    if as_json:
        click.echo(json.dumps({"out": out, **{k: v for k, v in manifest.items()
                                               if k != "loss_curve"}}))
        return
    evals = manifest["evals"]
    tail = (f", eval loss {evals[0]['loss']:.4f} -> {evals[-1]['loss']:.4f} "
            f"(perplexity {evals[-1]['perplexity']:.2f})" if evals else "")
    click.echo(f"trained {manifest['steps']:,} steps in {manifest['seconds']:.0f} s: "
               f"train loss {manifest['train_loss']:.4f}{tail} -> {out}")


@cli.command("eval-mlm", context_settings=CLICK_SETTINGS)
@click.option("--model", default=None, help="Masked-LM model directory or hub name "
              "[default: the packaged all-MiniLM-L6-v2].")
@click.option("--text", "texts", required=True, multiple=True, metavar="PATH",
              help="Held-out text: files or folders in any corpus format, URLs, or - for "
                   "standard input (repeatable).")
@click.option("--text-field", default="text", show_default=True,
              help="Field/column with the text (JSONL, Parquet, CSV/TSV, Arrow, HF datasets).")
@click.option("--max-length", default=128, show_default=True, type=int,
              help="Tokens per sequence.")
@click.option("--batch-size", default=api.MLM_EVAL_BATCH, show_default=True, type=int,
              help="Sequences per batch (masks are drawn per batch; train's held-out loss uses "
                   "the same default).")
@click.option("--seed", default=0, show_default=True, type=SEED,
              help="Masking seed: the same seed masks the same tokens for every model.")
@click.option("--mlm-probability", default=0.15, show_default=True, type=float,
              help="Share of tokens masked.")
@click.option("--pseudo-perplexity", "pseudo", is_flag=True,
              help="Mask every token in turn (Salazar et al. 2020): one pass per token, small inputs.")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(["cpu", "cuda"]))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_domain_errors
def eval_mlm_command(model, texts, text_field, max_length, batch_size, seed, mlm_probability, pseudo,
                     device, as_json) -> None:
    """Masked-LM loss and perplexity of a model on held-out text (fixed, seeded masks).

    \b
    Examples:
      tapt eval-mlm --model model-knn --text heldout.txt
      tapt eval-mlm --model model-knn --text small.txt --pseudo-perplexity --json
    """
    from tapt.api import evaluate_mlm

    report = evaluate_mlm({"files": list(texts)}, model=model, max_length=max_length,
                          batch_size=batch_size, seed=seed, mlm_probability=mlm_probability,
                          pseudo=pseudo, device=device, text_field=text_field)
    if as_json:
        click.echo(json.dumps(report))
        return
    kind = "pseudo-log-likelihood loss" if pseudo else "masked-LM loss"
    click.echo(f"{report['model']}: {kind} {report['loss']:.4f}, perplexity "
               f"{report['perplexity']:.2f} over {report['tokens']:,} scored tokens "
               f"({report['examples']:,} sequences of <= {max_length} tokens)")


# --- benchmark and detector commands ---


def _ints(spec: str, option: str) -> list[int]:
    try:
        return [int(x) for x in spec.split(",") if x.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{spec!r}: use comma-separated integers", param_hint=option) from exc


@cli.group(context_settings=CLICK_SETTINGS)
def bench() -> None:
    """Benchmark selection methods against oracle labels."""


@bench.command("recall", context_settings=CLICK_SETTINGS)
@click.option("--pool", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Labelled pool JSONL(.gz): text, domain, doc, pos (indexed if no --index).")
@click.option("--seeds", "seeds_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="Directory of <domain>.jsonl.gz seed files.")
@click.option("--index", "index_path", type=click.Path(exists=True, file_okay=False), default=None,
              help="An index of the pool (built with --no-split) to reuse.")
@click.option("--methods", default="all", show_default=True,
              help="Comma-separated names, or all: every selection method at its defaults, "
                   "the benchmark's named variants of them and the dsir baseline (an unknown "
                   "name lists them all).")
@click.option("--seed-sizes", default="100,500,2000", show_default=True)
@click.option("--budgets", default="oracle,0.5x,2x", show_default=True,
              help="Multiples of the oracle's size in sentences.")
@click.option("--repeats", default=3, show_default=True, type=int,
              help="Seed subsets per seed size smaller than the seed file.")
@click.option("--segment-sizes", default="1,15", show_default=True,
              help="Segment sizes for methods that score sentences (others rank at size 1).")
@click.option("--domains", default=None, help="Only these domains (comma-separated).")
@click.option("--context", "contexts", default="sentence", show_default=True,
              type=click.Choice([*CONTEXTS, "both"]),
              help="How methods that score sentences are cut: by each sentence's own score, "
                   "by its document's (rows named METHOD+document, see select --context), or "
                   "both side by side.")
@click.option("--label-field", default="domain", show_default=True)
@click.option("--cache", default=".cache/bench", show_default=True, type=click.Path(file_okay=False),
              help="Seed embeddings, DSIR features and a built index are kept here (a new, "
                   "empty or earlier bench cache directory).")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
              help="Results directory: recall.json, recall.md, pr-<domain>.png (new, empty, or "
                   "an earlier results directory).")
@click.pass_context
@_domain_errors
def bench_recall_command(ctx, pool, seeds_dir, index_path, methods, seed_sizes, budgets, repeats,
                         segment_sizes, domains, contexts, label_field, cache, out) -> None:
    """Precision, recall and F1 of every method against oracle selections, DSIR beside them.

    \b
    Example:
      tapt bench recall --pool corpus/pool.jsonl.gz \\
          --seeds corpus/seeds --index .cache/pool-index \\
          --methods all --seed-sizes 100,500,2000 --budgets oracle,0.5x,2x --repeats 3 \\
          --out benchmarks/results/recall
    """
    report = api.bench_recall(
        out, seeds=seeds_dir, pool=pool, index=index_path,
        methods=[m.strip() for m in methods.split(",") if m.strip()],
        seed_sizes=_ints(seed_sizes, "--seed-sizes"), budgets=budgets, repeats=repeats,
        segment_sizes=_ints(segment_sizes, "--segment-sizes"),
        domains=domains.split(",") if domains else None,
        contexts=CONTEXTS if contexts == "both" else (contexts,), label_field=label_field,
        cache=cache, progress=ctx.obj["progress"])
    best = max((r for r in report["aggregate"] if r["domain"] == "all" and r["segment_size"] == 1),
               key=lambda r: r["f1"])
    click.echo(f"{len(report['results']):,} results in {report['seconds']:.0f} s; best mean F1 "
               f"{best['f1']:.3f} ({best['method']}, {best['seeds']} seeds, budget "
               f"{best['budget']}) -> {Path(out) / 'recall.md'}")


@bench.command("clusters", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.option("--k", "ks", default="5,10,15", show_default=True, help="Numbers of clusters.")
@click.option("--label-field", default="domain", show_default=True)
@click.option("--sample", default=20000, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=SEED)
@click.option("--json", "as_json", is_flag=True)
@_domain_errors
def bench_clusters_command(idx, ks, label_field, sample, seed, as_json) -> None:
    """GMM cluster purity of the embeddings against domain labels (Aharoni & Goldberg Table 1).

    \b
    Example:
      tapt bench clusters .cache/pool-index --k 5,10,15
    """
    rows = api.Index.open(idx).cluster_purity(_ints(ks, "--k"), label_field=label_field,
                                              sample=sample, seed=seed)
    if as_json:
        click.echo(json.dumps(rows))
        return
    for row in rows:
        click.echo(f"k={row['k']:<4} purity {row['purity']:.3f}  ({row['sentences']:,} sentences, "
                   f"{row['labels']} labels)")


@cli.group(context_settings=CLICK_SETTINGS)
def detectors() -> None:
    """Novelty detectors for a task."""


@detectors.command("rank", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@_TASK
@click.option("--pca", default=0, show_default=True, type=click.IntRange(min=0),
              help="Fit every detector in a PCA projection of this many dimensions (0 = off).")
@click.option("--seed", default=0, show_default=True, type=SEED)
@click.option("--model", default=None, help="The index's model directory, if it moved.")
@click.option("--device", default="auto", show_default=True,
              type=click.Choice(["auto", "cpu", "cuda"]), help="Device that embeds the task.")
@_backend_option("Backend that embeds the task [auto: the index's].")
@click.option("--text-field", default="text", show_default=True,
              help="Field/column with the task's text (JSONL, Parquet, CSV/TSV, ...).")
@click.option("--json", "as_json", is_flag=True, help="Print the detectors' scores as JSON.")
@_domain_errors
def detectors_rank_command(idx, task, pca, seed, model, device, backend, text_field,
                           as_json) -> None:
    """Which detector separates this task from the corpus best (TADPOLE Table 1 protocol).

    \b
    Example:
      tapt detectors rank idx --task task.jsonl
    """
    rows = api.Index.open(idx).rank_detectors({"files": list(task)}, pca=pca, seed=seed,
                                              model=model, device=device, backend=backend,
                                              text_field=text_field)
    if as_json:
        click.echo(json.dumps(rows))
        return
    click.echo(f"{'detector':<12} {'F1':>6} {'AUC':>6}   (90/10 task split vs as many random "
               "corpus sentences)")
    for row in rows:
        click.echo(f"{row['name']:<12} {row['f1']:>6.3f} {row['auc']:>6.3f}")


@cli.group(context_settings=CLICK_SETTINGS)
def plot() -> None:
    """Pictures of an index."""


@plot.command("domains", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False),
              help="PNG to write (replaces only a plot tapt wrote, never another file).")
@click.option("--selection", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Overlay this selection's sentences.")
@click.option("--label-field", default="domain", show_default=True)
@click.option("--sample", default=8000, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=SEED)
@_domain_errors
def plot_domains_command(idx, out, selection, label_field, sample, seed) -> None:
    """2-D PCA map of the embeddings coloured by label, a selection overlaid.

    \b
    Example:
      tapt plot domains idx --out map.png --selection sel.jsonl
    """
    info = api.Index.open(idx).plot_domains(out, selection=selection, label_field=label_field,
                                            sample=sample, seed=seed)
    click.echo(f"drew {info['sentences']:,} sentences"
               + (f" and {info['selected_drawn']:,} selected" if selection else "") + f" -> {out}")


def main() -> None:
    """The `tapt` console script: every outcome is an exit status, every failure one line."""
    _STATE.update(terminated=False, stopping=False, reported=False, code=None,
                  interrupted=False)
    _STATE.pop("deferred", None)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)   # Ctrl-C: KeyboardInterrupt
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        cli(prog_name="tapt")
        code = 0
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt as exc:    # a signal after the command's own handling, before exit
        code = (_fail("terminated (SIGTERM)", 143) if _terminated(exc) or _STATE["terminated"]
                else _fail("interrupted", 130))
    _STATE["stopping"] = True
    _STATE["code"] = code
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupted_at_exit)  # no KeyboardInterrupt in atexit
    sys.exit(code)


if __name__ == "__main__":
    main()
