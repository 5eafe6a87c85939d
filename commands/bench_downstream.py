"""`tapt bench downstream`: cross-validated classification accuracy after equal-compute
continued pretraining on each condition's data."""

from __future__ import annotations

from pathlib import Path

import click

from tapt.commands.bench import bench
from tapt.commands.common import CLICK_SETTINGS, TaptCommand
from tapt.commands.options import _config_options


@bench.command("downstream", cls=TaptCommand, context_settings=CLICK_SETTINGS)
@click.option("--index", "index", required=True,
              type=click.Path(exists=True, file_okay=False), help="The index to select from.")
@click.option("--labelled", required=True, type=click.Path(exists=True, dir_okay=False),
              help="JSON Lines (.jsonl or .jsonl.gz) of labelled examples: text and label.")
@_config_options("downstream", "text_field", "label_field", "group_field", "task",
                 "task_name", "oracle_field", "oracle_value", "conditions", "seeds", "folds",
                 "budget", "model", "preset", "steps", "batch_size", "max_length", "lr",
                 "ft_mode", "ft_epochs", "ft_steps", "ft_batch_size", "ft_lr", "device",
                 "keep_models",
                 click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
                              help="Report folder: report.json, report.md, gains.png, runs/ "
                                   "(new, empty, or an earlier report of the same settings, "
                                   "which is resumed)."))
@click.pass_context
def downstream(ctx, index, labelled, out, **settings) -> None:
    """Cross-validated accuracy on a labelled task after equal-compute continued pretraining
    on each condition's data: none, random (the control), task (TAPT), selection methods and
    the oracle, with paired differences from random and 95% bootstrap intervals.

    By default every condition starts from a general model of the index trained from scratch
    (`tapt pretrain --preset`), made once and cached. Every (condition, seed) writes its
    completion record under OUT/runs/; running the same command again skips the finished runs.

    \b
    Example:
      python benchmarks/downstream_tasks.py quotes --out quotes-labelled.jsonl
      tapt bench downstream --index .cache/pool-index --labelled quotes-labelled.jsonl \\
          --group-field doc --oracle-value quotes --seeds 0,1,2 --out downstream-quotes
    """
    from tapt.api import bench_downstream

    report = bench_downstream(index, labelled, out,
                                  progress=(ctx.obj or {}).get("progress", True), **settings)
    for row in report["aggregate"]:
        vs = row.get("accuracy_vs_random")
        tail = "" if not vs else (f"  vs random {vs['delta']:+.3f} "
                                  f"[{vs['ci_low']:+.3f}, {vs['ci_high']:+.3f}]")
        click.echo(f"{row['condition']:<10} accuracy {row['accuracy']:.3f}{tail}")
    click.echo(f"-> {Path(out) / 'report.md'}")
