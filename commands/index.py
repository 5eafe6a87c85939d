"""`tapt index`: build, add, info, serve, verify, repair, upgrade, reindex and recall."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys

import click

from tapt import api
from tapt.commands.common import (
    CLICK_SETTINGS,
    CommandGroup,
    ValueRefused,
    _domain_errors,
    _Interrupted,
    register,
)
from tapt.commands.options import (
    _HF_DATASET,
    SEED,
    _backend_option,
    _config_options,
    _executor_options,
    _faiss_options,
    _inputs,
)
from tapt.errors import InputError, Interrupted

_DEVICE = click.option("--device", default="auto", show_default=True,
                       type=click.Choice(["auto", "cpu", "cuda"]),
                       help="Device that embeds the corpus (auto: cuda when torch sees a GPU).")
_JSON = click.option("--json", "as_json", is_flag=True,
                     help="Print one JSON object instead of the summary.")


@register
@click.group(cls=CommandGroup, context_settings=CLICK_SETTINGS)
def index() -> None:
    """Build and inspect corpus indexes."""


@index.command("build", context_settings=CLICK_SETTINGS)
@click.argument("corpus", nargs=-1)
@click.option("--out", "-o", required=True, type=click.Path(), help="Index directory to create.")
@click.option("--model", default=None, help="Sentence-transformers model directory or hub name "
              "[default: the packaged all-MiniLM-L6-v2].")
@_config_options("build", "segment_size", "batch_size", _DEVICE, _backend_option(), "split",
                  "text_field", "doc_field", "text_docs", "input_format", _HF_DATASET,
                  "hf_split", "strict", "invalid_utf8", "overwrite", "restart",
                  "embedding_dtype", "shards", "shard_size", "executor", _executor_options, "part_size",
                  "codes", _JSON, _faiss_options)
@click.pass_context
@_domain_errors
def index_build(ctx, corpus, out, model, device, backend, hf_datasets, as_json,
                **config) -> None:
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
            hf_datasets=hf_datasets, progress=ctx.obj["progress"], **config)
    except Interrupted as exc:
        raise _Interrupted(str(exc)) from exc
    manifest = ix.manifest
    if (ctx.get_parameter_source("doc_field") == click.core.ParameterSource.COMMANDLINE
            and ix.doc_field_joined_nothing()):
        logging.getLogger("tapt.cli").warning(
            "--doc-field %r joined no records: no record has it, so every record is its own "
            "document (check the field's name; '' turns joining off)", config["doc_field"])
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
@_config_options("add", "batch_size", _DEVICE,
                  _backend_option("Encoder backend [auto: the one IDX was built with, where "
                                  "the device allows]."),
                  "text_field", "doc_field", "text_docs", "input_format", _HF_DATASET,
                  "hf_split", "strict", "invalid_utf8", "shards", "shard_size", "executor",
                  _executor_options, "restart", _JSON)
@click.pass_context
@_domain_errors
def index_add(ctx, idx, corpus, model, device, backend, hf_datasets, as_json,
              **config) -> None:
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
        last = ix.add(inputs, model=model, device=device, backend=backend,
                      hf_datasets=hf_datasets, progress=ctx.obj["progress"], **config)
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
@_config_options("serve", "ray_address", "actors", "cpus_per_actor", "hold", click.option(
    "--requests", "requests_file", type=click.File("rb"), default="-", show_default=True,
    help="File of requests, one UTF-8 JSON object per line ('-': standard input)."))
@click.pass_context
@_domain_errors
def index_serve(ctx, idx, requests_file, **settings) -> None:
    """Hold IDX's shards in Ray actors and answer selection requests, one JSON per line.

    A request: {"method": "centroid", "task": "task.jsonl" | {"files": [...]} | ["a task
    sentence", ...], "budget": "0.2", "params": {"k": 50}, "out": "sel.jsonl", "id": 7}
    (`params`, `segment_size`, `seed`, `out`, `overwrite` and `id` are optional). Each answer
    is one JSON line on standard output: the selected segment ids in rank order and counts
    (the selection file too, with "out"; with "out": "-", as select --out -, no file: the
    selection's lines in the answer, under "selection"), or {"id": ..., "error": ...}. A
    number JSON cannot spell (NaN, 1e999) is refused; a line that is not UTF-8 or longer than
    32 MiB is answered with an error and the next is read. Paths are used as written (no ~ or
    $VARIABLE). Exit status 1 when a request failed.
    Needs Ray: pip install 'tapt[ray]'.

    With --http HOST:PORT the same requests come over HTTP on Ray Serve (POST /select; the
    task as sentences, or as paths under --task-root; "out" only under --out-root, answered
    with a download link), with GET /health, GET /index, GET /openapi.json and a page at / to
    look through a selection. Every request carries the bearer token of --token-file, unless
    --no-auth on a loopback address; bodies, tasks, budgets, requests in flight and their time
    are bounded (4xx, or 503 past the time or when an actor died: it is replaced).

    \b
    Examples:
      echo '{"method": "knn", "task": "task.txt", "params": {"k": 20}}' | tapt index serve idx
      tapt index serve idx --http 127.0.0.1:8000 --no-auth      # then open the page
      tapt index serve idx --http 0.0.0.0:8000 --token-file ~/.tapt-token --out-root sels/
      tapt index serve idx --ray-address auto --requests requests.jsonl > answers.jsonl
      tapt index serve idx --hold codes < requests.jsonl  # "params": {"scan": "codes"}
    """
    from tapt.api import serve
    from tapt.api.served import answer_line, answer_stream

    if settings["http"] is not None:
        if ctx.get_parameter_source("requests_file") == click.core.ParameterSource.COMMANDLINE:
            raise InputError("answers HTTP, not the requests of `requests_file`: give one "
                             "of them", param="http")
        handlers = _signal_handlers()
        with _stdout_for_answers(), serve(      # Ray's own lines go to standard error
                idx, **settings) as server:
            _restore(handlers)
            click.echo(f"serving {idx} at {server.url} (the page at {server.url}/, the API at "
                       f"{server.url}/openapi.json); Ctrl-C stops", err=True)
            server.wait()
        return
    failed = answered = 0
    handlers = _signal_handlers()
    with _stdout_for_answers() as answers, serve(idx, **settings) as served:
        _restore(handlers)
        if ctx.obj["progress"]:
            click.echo(f"serving {idx}: {served.n_sentences:,} sentences in "
                       f"{len(served.shards)} shard(s) on {len(served.servers.actors)} Ray "
                       "actor(s); one JSON request per line", err=True)
        for reply in answer_stream(served, requests_file):
            answered += 1
            failed += "error" in reply
            answers.write(answer_line(reply) + "\n")
            answers.flush()
    if failed:
        raise click.ClickException(f"{failed} of {answered} request(s) failed (see their "
                                   "\"error\" in the output)")


def _signal_handlers() -> dict[int, object]:
    """The command line's own handlers of SIGTERM and SIGINT, before Ray connects (Ray puts its
    own in their place: a stack dump and an abort)."""
    return {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}


def _restore(handlers: dict[int, object]) -> None:
    """Put the command line's handlers back: SIGTERM stops a server in one line (143)."""
    for sig, handler in handlers.items():
        if callable(handler):
            signal.signal(sig, handler)


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
@click.option("--sample", default=200, show_default=True, type=click.IntRange(min=1),
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
def index_reindex(ctx, idx, index, memory, opq, codes) -> None:
    """Change IDX's FAISS index type (every shard's part) and its int8 codes from its stored
    embeddings (no re-embedding).

    The new index and manifest replace the old ones in one atomic swap; readers see either.

    \b
    Examples:
      tapt index reindex idx --index hnsw
      tapt index reindex idx --index auto --memory 512M
      tapt index reindex idx --codes int8      # the same FAISS type, int8 codes added
    """
    info = api.Index.open(idx).reindex(index, memory, opq=opq, codes=codes,
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
        raise ValueRefused("values must be positive integers", ctx=ctx, param=param)
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
