"""`tapt bench downstream`: cross-validated classification accuracy after equal-compute
continued pretraining on each condition's data."""

from __future__ import annotations

from pathlib import Path

import click

from tapt import api
from tapt.commands.common import CLICK_SETTINGS, TaptCommand


@click.command("downstream", cls=TaptCommand, context_settings=CLICK_SETTINGS)
@click.option("--index", "index_path", required=True,
              type=click.Path(exists=True, file_okay=False), help="The index to select from.")
@click.option("--labelled", required=True, type=click.Path(exists=True, dir_okay=False),
              help="JSON Lines (.jsonl or .jsonl.gz) of labelled examples: text and label.")
@click.option("--text-field", default="text", show_default=True,
              help="The field with the text in --labelled (and a JSONL --task).")
@click.option("--label-field", default="label", show_default=True,
              help="The field with the label in --labelled.")
@click.option("--group-field", default=None,
              help="A field of --labelled (e.g. doc) whose examples stay in one fold.")
@click.option("--task", type=click.Path(exists=True), default=None,
              help="The unlabelled task text the selections are made for [default: the texts "
                   "of --labelled].")
@click.option("--task-name", default=None,
              help="The task's name in the report [default: the labelled file's name].")
@click.option("--oracle-field", default="domain", show_default=True,
              help="The index's metadata field that marks the domain's own rows.")
@click.option("--oracle-value", default=None,
              help="Its value for the domain (e.g. quotes); needed by the oracle condition.")
@click.option("--conditions", default=",".join(api.downstream.CONDITIONS), show_default=True,
              help="Comma-separated: none (the starting model as it is), random (random rows: "
                   "the control), task (the task's own text), oracle (the domain's own rows), "
                   "or selection methods.")
@click.option("--seeds", default="0", show_default=True,
              help="Comma-separated seeds (folds, selection, pretraining and fine-tuning).")
@click.option("--folds", default=5, show_default=True, type=click.IntRange(min=2),
              help="Folds of the cross-validation by document: every example is tested once "
                   "per seed.")
@click.option("--budget", default="10000sent", show_default=True,
              help="Selection budget of every condition (10000sent, 0.01, 500, 1Mtok).")
@click.option("--model", default=None,
              help="Masked LM to start from (directory or hub name) [default: a general model "
                   "of the index made by `tapt pretrain` at --preset, cached].")
@click.option("--preset", default="cpu", show_default=True,
              type=click.Choice(["tiny", "cpu", "gpu"]),
              help="Size of the general model made when --model is not given.")
@click.option("--steps", default=300, show_default=True, type=click.IntRange(min=1),
              help="Continued-pretraining steps (the same for every condition).")
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1),
              help="Continued-pretraining examples per step.")
@click.option("--max-length", default=64, show_default=True, type=click.IntRange(min=8),
              help="Tokens per example, in pretraining, evaluation and fine-tuning.")
@click.option("--lr", default=2e-4, show_default=True, type=float,
              help="Continued-pretraining peak learning rate.")
@click.option("--ft-mode", default="full", show_default=True,
              type=click.Choice(["full", "probe"]),
              help="full: the encoder fine-tuned with a linear head; probe: a logistic "
                   "regression on its frozen features (seconds instead of minutes on a CPU).")
@click.option("--ft-epochs", default=3, show_default=True, type=click.IntRange(min=1),
              help="Fine-tuning passes over each fold's training examples.")
@click.option("--ft-steps", default=None, type=click.IntRange(min=1),
              help="Fine-tuning steps instead of --ft-epochs.")
@click.option("--ft-batch-size", default=16, show_default=True, type=click.IntRange(min=1),
              help="Fine-tuning examples per step.")
@click.option("--ft-lr", default=1e-4, show_default=True, type=float,
              help="Fine-tuning peak learning rate of the encoder (the new head's is 1e-3).")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(["cpu", "cuda"]))
@click.option("--keep-models", is_flag=True,
              help="Keep each run's continued-pretrained model (default: deleted once scored; "
                   "loss curves are kept).")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
              help="Report folder: report.json, report.md, gains.png, runs/ (new, empty, or an "
                   "earlier report of the same settings, which is resumed).")
@click.pass_context
def downstream(ctx, index_path, labelled, out, **settings) -> None:
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
    report = api.bench_downstream(index_path, labelled, out,
                                  progress=(ctx.obj or {}).get("progress", True), **settings)
    for row in report["aggregate"]:
        vs = row.get("accuracy_vs_random")
        tail = "" if not vs else (f"  vs random {vs['delta']:+.3f} "
                                  f"[{vs['ci_low']:+.3f}, {vs['ci_high']:+.3f}]")
        click.echo(f"{row['condition']:<10} accuracy {row['accuracy']:.3f}{tail}")
    click.echo(f"-> {Path(out) / 'report.md'}")
