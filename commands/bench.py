"""`tapt bench` (recall against oracle selections, cluster purity) and `tapt plot`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tapt import api
from tapt.commands.common import CLICK_SETTINGS, CommandGroup, _domain_errors, register
from tapt.commands.options import SEED, _config_options, _ints


@register
@click.group(cls=CommandGroup, context_settings=CLICK_SETTINGS)
def bench() -> None:
    """Benchmark selection methods against oracle labels."""


@bench.command("recall", context_settings=CLICK_SETTINGS)
@_config_options("recall", "pool",
                 click.option("--seeds", required=True,
                              type=click.Path(exists=True, file_okay=False),
                              help="Directory of <domain>.jsonl.gz seed files."),
                 "index", "methods", "seed_sizes", "budgets", "repeats", "segment_sizes",
                 "domains", "context", "label_field", "cache",
                 click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
                              help="Results directory: recall.json, recall.md, pr-<domain>.png "
                                   "(new, empty, or an earlier results directory)."))
@click.pass_context
@_domain_errors
def bench_recall_command(ctx, seeds, out, methods, seed_sizes, segment_sizes, domains, context,
                         **settings) -> None:
    """Precision, recall and F1 of every method against oracle selections, DSIR beside them.

    \b
    Example:
      tapt bench recall --pool corpus/pool.jsonl.gz \\
          --seeds corpus/seeds --index .cache/pool-index \\
          --methods all --seed-sizes 100,500,2000 --budgets oracle,0.5x,2x --repeats 3 \\
          --out benchmarks/results/recall
    """
    report = api.bench_recall(
        out, seeds=seeds, methods=[m.strip() for m in methods.split(",") if m.strip()],
        seed_sizes=_ints(seed_sizes, "--seed-sizes"),
        segment_sizes=_ints(segment_sizes, "--segment-sizes"),
        domains=domains.split(",") if domains else None, context=context,
        progress=ctx.obj["progress"], **settings)
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


@register
@click.group(cls=CommandGroup, context_settings=CLICK_SETTINGS)
def plot() -> None:
    """Pictures of an index."""


@plot.command("domains", context_settings=CLICK_SETTINGS)
@click.argument("idx", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False),
              help="PNG to write (replaces only a plot tapt wrote, never another file).")
@click.option("--selection", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Overlay this selection's sentences.")
@click.option("--label-field", default="domain", show_default=True)
@click.option("--color-by", default=None, metavar="FIELD|score",
              help="Colour the points by this metadata field (source for a corpus without "
                   "labels), or by score: the --selection's sentences by their segment's "
                   "score [default: --label-field].")
@click.option("--sample", default=8000, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=SEED)
@_domain_errors
def plot_domains_command(idx, out, selection, label_field, color_by, sample, seed) -> None:
    """2-D PCA map of the embeddings coloured by label, any metadata field or score, a
    selection overlaid.

    \b
    Examples:
      tapt plot domains idx --out map.png --selection sel.jsonl
      tapt plot domains idx --out map.png --color-by source        # a corpus without labels
      tapt plot domains idx --out map.png --selection sel.jsonl --color-by score
    """
    info = api.Index.open(idx).plot_domains(out, selection=selection, label_field=label_field,
                                            sample=sample, seed=seed, color_by=color_by)
    click.echo(f"drew {info['sentences']:,} sentences"
               + (f" and {info['selected_drawn']:,} selected" if selection else "") + f" -> {out}")


@plot.command("scores", context_settings=CLICK_SETTINGS)
@click.argument("selection", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False),
              help="PNG to write (replaces only a plot tapt wrote, never another file).")
@click.option("--bins", default=40, show_default=True, type=click.IntRange(1, 1000),
              help="Bars of the histogram.")
@_domain_errors
def plot_scores_command(selection, out, bins) -> None:
    """A selection's score distribution with its budget's cut (a selection made with
    --explain also draws a random sample of the corpus's segment scores).

    \b
    Example:
      tapt select centroid idx --task task.txt --budget 2000sent --explain --out sel.jsonl
      tapt plot scores sel.jsonl --out scores.png
    """
    info = api.plot_scores(selection, out, bins=bins)
    click.echo(f"drew {info['selected']:,} selected and {info['sampled']:,} sampled scores, "
               f"cut at {info['cut']:.4g} -> {out}")
