"""tapt: choose continued-pretraining data for a task from a corpus embedded once.

The command line only: parsing, terminal output and turning domain errors into one-line
messages. The work happens in `indexer`, `retriever` and `trainer`.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from pathlib import Path

import click

from indexer.errors import TaptError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _domain_errors(func):
    """Turn tapt's own errors into a one-line `Error: ...` and exit status 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except TaptError as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="tapt")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Warnings and errors only, no progress bars.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """Select task-like continued-pretraining data from a corpus indexed once.

    \b
      tapt index build corpus/ --out idx          # embed a corpus once
      tapt select centroid idx --task task.txt --budget 0.2 --out sel.jsonl
      tapt eval sel.jsonl --index idx --label-field domain --label medical
    """
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if verbose < 2:
        for noisy in ("sentence_transformers", "transformers", "faiss", "httpx", "huggingface_hub"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    ctx.obj = {"progress": not quiet}


# ----------------------------------------------------------------------------- index


@cli.group(context_settings=CONTEXT)
def index() -> None:
    """Build and inspect corpus indexes."""


@index.command("build", context_settings=CONTEXT)
@click.argument("corpus", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", "-o", required=True, type=click.Path(), help="Index directory to create.")
@click.option("--model", default=None, help="Sentence-transformers model directory or hub name "
              "[default: the packaged all-MiniLM-L6-v2].")
@click.option("--segment-size", default=15, show_default=True, type=int,
              help="Sentences per segment (the selection unit).")
@click.option("--batch-size", default=64, show_default=True, type=int)
@click.option("--device", default="auto", show_default=True,
              type=click.Choice(["auto", "cpu", "cuda"]))
@click.option("--split/--no-split", default=True, show_default=True,
              help="Split records into sentences (--no-split: each record is one sentence).")
@click.option("--text-field", default="text", show_default=True, help="JSONL field with the text.")
@click.option("--doc-field", default="doc", show_default=True,
              help="JSONL field whose equal consecutive values join records into one document.")
@click.option("--text-docs", default="auto", show_default=True,
              type=click.Choice(["auto", "line", "block"]),
              help="Plain text: one document per line, or per blank-line block.")
@click.option("--overwrite", is_flag=True, help="Replace an existing index at --out.")
@click.pass_context
@_domain_errors
def index_build(ctx, corpus, out, model, segment_size, batch_size, device, split, text_field,
                doc_field, text_docs, overwrite) -> None:
    """Embed CORPUS (files or directories of .txt/.jsonl, optionally .gz) into an index.

    \b
    Examples:
      tapt index build data/sample/pool.jsonl.gz --out idx --no-split
      tapt index build wiki/ --out wiki-idx --model ./my-st-model --device cuda
    """
    from indexer.build import BuildConfig, build_index
    from indexer.encoder import SentenceTransformerEncoder

    config = BuildConfig(segment_size=segment_size, batch_size=batch_size, split=split,
                         text_field=text_field, doc_field=doc_field or None, text_docs=text_docs,
                         overwrite=overwrite, progress=ctx.obj["progress"])
    if Path(out).exists() and not overwrite:
        raise click.UsageError(f"{out} already exists (use --overwrite to replace it)")
    encoder = SentenceTransformerEncoder(model, device=device)
    manifest = build_index(list(corpus), out, encoder, config)
    counts, build = manifest["counts"], manifest["build"]
    click.echo(
        f"indexed {counts['sentences']:,} sentences ({counts['segments']:,} segments, "
        f"{counts['documents']:,} documents) in {build['seconds']:.0f} s "
        f"({build['sentences_per_second']} sentences/s, peak RSS {build['peak_rss_mb']:.0f} MB) "
        f"-> {out}"
    )


@index.command("info", context_settings=CONTEXT)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest and sizes as JSON.")
@_domain_errors
def index_info(idx, as_json) -> None:
    """Show an index's counts, model, dimensions, sizes, FAISS type and versions.

    \b
    Example:
      tapt index info idx
    """
    from indexer.index import Index

    ix = Index(idx)
    sizes = ix.disk_bytes()
    if as_json:
        click.echo(json.dumps({**ix.manifest, "disk_bytes": sizes}, indent=2))
        return
    m = ix.manifest
    c = m["counts"]
    lines = [
        f"index      {idx}  (format {m['format_version']}, uuid {m['uuid']}, created {m['created']})",
        f"model      {m['model']['name']}  dim {m['model']['dim']}, max {m['model']['max_length']} "
        f"tokens, weights sha256 {m['model']['weights_sha256'][:16]}",
        f"counts     {c['documents']:,} documents, {c['sentences']:,} sentences, "
        f"{c['segments']:,} segments of <= {m['segment_size']}, {c['tokens']:,} tokens",
        f"skipped    {c['skipped_blank_records']:,} blank records; "
        f"{c['truncated_sentences']:,} sentences truncated for embedding",
        f"faiss      {m['faiss']['factory']} ({m['faiss']['metric']}), {m['faiss']['ntotal']:,} rows",
        f"build      {m['build']['seconds']} s, {m['build']['sentences_per_second']} sentences/s on "
        f"{m['build']['device']}, peak RSS {m['build']['peak_rss_mb']} MB",
        "disk       " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items()),
        "versions   " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
    ]
    click.echo("\n".join(lines))


# ----------------------------------------------------------------------------- select


def _select_options(func):
    """Options every selection method shares."""
    options = [
        click.argument("idx", type=click.Path(exists=True, file_okay=False)),
        click.option("--out", "-o", required=True, type=click.Path(dir_okay=False),
                     help="Selection JSONL to write (its manifest goes beside it)."),
        click.option("--segment-size", type=int, default=None,
                     help="Re-cut segments at this size [default: the index's]."),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--model", default=None,
                     help="Model directory if the index's recorded one cannot be found."),
        click.option("--device", default="auto", show_default=True,
                     type=click.Choice(["auto", "cpu", "cuda"])),
    ]
    for option in reversed(options):
        func = option(func)
    return func


_TASK = click.option("--task", "-t", required=True, multiple=True, type=click.Path(exists=True),
                     help="Task text: .txt/.jsonl(.gz) files or directories (repeatable).")
_BUDGET_HELP = "0.2 = 20% of segments; 5000 = segments; 20000sent = sentences; 2Mtok = tokens."


def _run_select(ctx, idx, out, task, model, device, **params) -> None:
    from indexer.index import Index
    from retriever.select import SelectConfig, run_selection

    config = SelectConfig(**params)
    ix = Index(idx)
    encoder = ix.load_encoder(model, device) if config.method != "random" else None
    manifest = run_selection(ix, config, out, list(task) if task else None, encoder)
    counts, info = manifest["counts"], manifest["info"]
    extra = "".join(f", {k.replace('_', ' ')} {v}" for k, v in info.items())
    click.echo(
        f"{config.method}: selected {counts['segments']:,} segments ({counts['sentences']:,} "
        f"sentences, {counts['tokens']:,} tokens) of {counts['corpus_segments']:,} in "
        f"{manifest['timings']['total_seconds']:.2f} s{extra} -> {out}"
    )


@cli.group(context_settings=CONTEXT)
def select() -> None:
    """Select task-like segments from an index."""


@select.command("centroid", context_settings=CONTEXT)
@_select_options
@_TASK
@click.option("--budget", "-b", required=True, help=_BUDGET_HELP)
@click.pass_context
@_domain_errors
def select_centroid(ctx, idx, out, segment_size, seed, model, device, task, budget) -> None:
    """Rank segments by cosine to the task's mean embedding (Domain-Cosine).

    \b
    Example:
      tapt select centroid idx --task task.jsonl --budget 0.2 --out sel.jsonl
    """
    _run_select(ctx, idx, out, task, model, device, method="centroid", budget=budget,
                seed=seed, segment_size=segment_size)


@select.command("knn", context_settings=CONTEXT)
@_select_options
@_TASK
@click.option("--k", "-k", default=50, show_default=True, type=int,
              help="Neighbours per task sentence.")
@click.option("--budget", "-b", default=None, help=_BUDGET_HELP + " [default: the whole union]")
@click.pass_context
@_domain_errors
def select_knn(ctx, idx, out, segment_size, seed, model, device, task, k, budget) -> None:
    """Union of each task sentence's k nearest corpus sentences (kNN-TAPT).

    \b
    Example:
      tapt select knn idx --task task.jsonl --k 50 --out sel.jsonl
    """
    _run_select(ctx, idx, out, task, model, device, method="knn", budget=budget, k=k,
                seed=seed, segment_size=segment_size)


@select.command("iforest", context_settings=CONTEXT)
@_select_options
@_TASK
@click.option("--budget", "-b", required=True, help=_BUDGET_HELP)
@click.option("--candidates", default="10x", show_default=True,
              help="Candidates to rescore: 10x the budget, a segment count, or all.")
@click.option("--prerank", default="centroid", show_default=True,
              type=click.Choice(["centroid", "knn"]), help="How candidates are pre-ranked.")
@click.option("--k", "-k", default=50, show_default=True, type=int,
              help="Neighbours per task sentence for --prerank knn.")
@click.option("--weights", default="discrete", show_default=True,
              type=click.Choice(["discrete", "continuous"]),
              help="continuous: weight = sigmoid(C * (alpha - z)), z the standardised anomaly.")
@click.option("--C", "C", default=4.0, show_default=True, type=float)
@click.option("--alpha", default=0.0, show_default=True, type=float)
@click.option("--pca", default=0, show_default=True, type=int,
              help="Fit the forest in a PCA projection of this many dimensions (0 = off).")
@click.pass_context
@_domain_errors
def select_iforest(ctx, idx, out, segment_size, seed, model, device, task, budget, candidates,
                   prerank, k, weights, C, alpha, pca) -> None:
    """Rescore candidates with an Isolation Forest fitted on the task (TADPOLE).

    \b
    Examples:
      tapt select iforest idx --task task.jsonl --budget 0.2 --out sel.jsonl
      tapt select iforest idx --task task.jsonl --budget 1.0 --candidates all \\
          --weights continuous --C 4 --alpha 0 --out weighted.jsonl
    """
    source = click.get_current_context().get_parameter_source
    if weights == "discrete" and any(
        source(p) == click.core.ParameterSource.COMMANDLINE for p in ("C", "alpha")
    ):
        raise click.UsageError("--C and --alpha only apply with --weights continuous")
    _run_select(ctx, idx, out, task, model, device, method="iforest", budget=budget,
                candidates=candidates, prerank=prerank, k=k, weights=weights, C=C, alpha=alpha,
                pca=pca, seed=seed, segment_size=segment_size)


@select.command("random", context_settings=CONTEXT)
@_select_options
@click.option("--budget", "-b", required=True, help=_BUDGET_HELP)
@click.pass_context
@_domain_errors
def select_random(ctx, idx, out, segment_size, seed, model, device, budget) -> None:
    """Uniformly random segments: the baseline every method must beat.

    \b
    Example:
      tapt select random idx --budget 0.2 --seed 1 --out random.jsonl
    """
    _run_select(ctx, idx, out, None, model, device, method="random", budget=budget, seed=seed,
                segment_size=segment_size)


# ----------------------------------------------------------------------------- eval


@cli.command("eval", context_settings=CONTEXT)
@click.argument("selections", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--index", "idx", required=True, type=click.Path(exists=True, file_okay=False))
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
    from retriever.evaluate import evaluate_selections

    rows = evaluate_selections(list(selections), idx, label_field, label)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    click.echo(f"{'selection':<28} {'method':<9} {'segments':>8} {'sentences':>9} "
               f"{'precision':>9} {'recall':>7} {'F1':>6} {'time s':>7}")
    for row in rows:
        click.echo(f"{Path(row['selection']).name:<28} {row['method']:<9} {row['segments']:>8,} "
                   f"{row['selected']:>9,} {row['precision']:>9.3f} {row['recall']:>7.3f} "
                   f"{row['f1']:>6.3f} {row['seconds']:>7.2f}")


def main() -> None:
    cli(prog_name="tapt")


if __name__ == "__main__":
    main()
