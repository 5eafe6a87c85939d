"""`tapt select` (one command per method, built from the registry), `eval`, `export`, `show`
and `detectors rank`."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import click

from tapt import api
from tapt.api import options
from tapt.commands.common import CLICK_SETTINGS, CommandGroup, TaptCommand, _domain_errors, register
from tapt.commands.options import (
    _TASK,
    SEED,
    _backend_option,
    _config_option,
    _flags_in_text,
    _param_option,
)


def _select_command(method) -> click.Command:
    """`tapt select NAME`: arguments from what the method needs, options from its Params and
    from the fields of `SelectSettings` (`tapt.api.options.config_fields("select")`)."""
    fields = options.method_params(method)
    settings = {desc["name"]: desc for desc in options.config_fields("select")}

    def setting(name: str) -> click.Option:
        return _config_option(settings[name])

    params: list[click.Parameter] = [click.Argument(["idx"], type=click.Path(exists=True,
                                                                           file_okay=False))]
    if method.needs_embeddings or method.needs_text:
        params += [
            click.Option(["--task", "-t"], required=True, multiple=True, metavar="PATH",
                         help="Task text: files or folders in any corpus format, URLs, or - for "
                              "standard input (repeatable)."),
            setting("text_field"),
        ]
    budget_help = settings["budget"]["help"]
    if method.budget == "required":
        params.append(click.Option(["--budget", "-b"], required=True, help=budget_help))
    elif method.budget == "optional":
        params.append(click.Option(["--budget", "-b"], default=None,
                                   help=f"{budget_help} [default: {method.budget_help}]"))
    params += [_param_option(f) for f in fields]
    params += [
        setting("out"),
        setting("overwrite"),
        click.Option(["--json", "as_json"], is_flag=True,
                     help="Print one JSON object: method, counts, timings, output, info."),
        setting("explain"),
        setting("segment_size"),
        setting("seed"),
        click.Option(["--executor"], type=click.Choice(["local", "ray"]), default="local",
                     show_default=True,
                     help="local: this process; ray: the index's shards loaded into Ray actors "
                          "for this selection, which score and search them (as `tapt index "
                          "serve`; the same selection; needs pip install 'tapt[ray]')."),
        # `tapt index serve`'s settings (`ServeSettings`), applying with --executor ray only
        *map(_config_option, options.config_fields("serve", command="select")),
    ]
    if method.pools_documents(method.make_params()):
        params.append(setting("context"))
    if method.needs_embeddings:
        params += [setting(name) for name in ("model", "device", "backend", "batch_size")]

    def callback(**kw) -> None:
        ctx = click.get_current_context()
        values = {f["name"]: kw.pop(f["name"]) for f in fields}
        given = {name for name in values if ctx.get_parameter_source(name)
                 == click.core.ParameterSource.COMMANDLINE}
        _run_select(ctx, method, values, given, **kw)

    return TaptCommand(method.name, params=params, callback=callback, context_settings=CLICK_SETTINGS,
                       help=f"{method.summary}\n\n{_flags_in_text(inspect.cleandoc(method.help))}",
                       short_help=method.summary)


def _run_select(ctx: click.Context, method, values: dict, given: set, *, idx, as_json,
                executor="local", task=(), **settings) -> None:
    """One selection: the `SelectSettings` fields among `settings` forwarded by name to
    `Index.select`; the others are `ServeSettings` fields, for --executor ray."""
    from contextlib import nullcontext

    from tapt.errors import InputError

    out = settings["out"]
    serving = {desc["name"]: settings.pop(desc["name"])
               for desc in options.config_fields("serve", command="select")}
    serving = {name: value for name, value in serving.items() if value is not None}
    if executor != "ray" and serving:
        raise InputError("only applies with `executor` ray", param=next(iter(serving)))
    ix = api.serve(idx, **serving) if executor == "ray" else api.Index.open(idx)
    with ix if executor == "ray" else nullcontext(ix):
        selection = ix.select(method.name, {"files": list(task)} if task else None,
                              **{**settings, "out": None if out == "-" else out},
                              progress=ctx.obj["progress"], explicit=given, **values)
    if out == "-":
        selection.write_lines(click.get_text_stream("stdout"))
    manifest, to_stderr = selection.manifest, out == "-"
    if as_json:
        click.echo(json.dumps({"method": manifest["method"], "output": out,
                               "manifest": None if out == "-" else str(Path(f"{out}.manifest.json")),
                               "counts": manifest["counts"], "timings": manifest["timings"],
                               "budget": manifest["budget"], "params": manifest["params"],
                               "task": manifest["task"], "info": manifest["info"],
                               "context": manifest.get("context"),
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
        f"{manifest['timings']['total_seconds']:.2f} s{extra}{_context_note(manifest)} "
        f"-> {out}", err=to_stderr)


def _context_note(manifest: dict) -> str:
    """`; context: document (auto: 48,847 documents, 3.8 sentences each, ...)` for methods
    that pool sentence scores (nothing for the others)."""
    context = manifest.get("context") or {}
    if not context or "does not pool" in context.get("reason", ""):
        return ""
    return f"; context: {context['name']} ({context['reason']})"


@register
@click.group(cls=CommandGroup, context_settings=CLICK_SETTINGS)
def select() -> None:
    """Select task-like segments from an index (one command per method)."""


def _add_select_commands() -> None:
    for method in options.method_specs():
        select.add_command(_select_command(method))


_add_select_commands()


@register
@click.command("eval", cls=TaptCommand, context_settings=CLICK_SETTINGS)
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


@register
@click.command("export", cls=TaptCommand, context_settings=CLICK_SETTINGS)
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
    """Write a selection as training data: one example per segment with its text, weight and
    score, tapt's provenance under tapt_ names (rank, ids, document key, source file) and every
    corpus field as a column of its own, under its own name and type.

    \b
    parquet loads with pandas.read_parquet, hf with datasets.load_from_disk.

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


@register
@click.group(cls=CommandGroup, context_settings=CLICK_SETTINGS)
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


@register
@click.command("show", cls=TaptCommand, context_settings=CLICK_SETTINGS)
@click.argument("selection", type=click.Path(exists=True, dir_okay=False))
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0),
              help="Segments listed, best first.")
@click.option("--field", default="source", show_default=True,
              help="The share is counted by this field: source, doc_key or any corpus field.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show_command(selection, top, field, as_json) -> None:
    """The top segments of a selection with the parts of their scores (select with
    --explain), and its share by a metadata field.

    \b
    Examples:
      tapt select fused idx --task task.txt --budget 2000sent --explain --out sel.jsonl
      tapt show sel.jsonl --top 5 --field domain
    """
    report = api.show(selection, top=top, field=field)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False))
        return
    counts = report["counts"]
    click.echo(f"{report['method']}: {counts.get('segments', 0):,} segments, "
               f"{counts.get('sentences', 0):,} sentences; cut at score "
               + (f"{report['cut']:.4f}" if report["cut"] is not None else "-"))
    parts = report["parts"]
    if not parts:
        click.echo("(no parts of the scores: select with --explain to keep them)")
    click.echo(" ".join([f"{'rank':>5} {'score':>8}", *(f"{p[:9]:>9}" for p in parts),
                         f"  {field[:16]:<16} text"]))
    for row in report["top"]:
        text = row["text"] if len(row["text"]) <= 70 else row["text"][:67] + "..."
        cells = [f"{row['parts'].get(p, float('nan')):>9.3f}" for p in parts]
        click.echo(" ".join([f"{row['rank']:>5} {row['score']:>8.4f}", *cells,
                             f"  {row[field][:16]:<16} {text}"]))
        if row["document"] is not None:
            click.echo(f"{'':>15}its sentences' own score {row['own']:.4f}, its document's "
                       f"{row['document']:.4f}")
        if row["nearest"]:
            click.echo(f"{'':>15}nearest task sentence: {row['nearest'][0]}")
    click.echo(f"\nshare by {field}:")
    for share in report["share"]:
        click.echo(f"  {share['value'][:40]:<40} {share['segments']:>7,} segments "
                   f"{share['sentences']:>8,} sentences {100 * share['share']:>6.1f}%")
