"""`tapt bench downstream`: fine-tuned classification accuracy after continued pretraining on
each condition's selection."""

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
              help="A field of --labelled (e.g. doc) whose examples stay on one side of the "
                   "train/test split.")
@click.option("--task", type=click.Path(exists=True), default=None,
              help="The unlabelled task text the selections are made for [default: the texts "
                   "of --labelled].")
@click.option("--oracle-field", default="domain", show_default=True,
              help="The index's metadata field that marks the domain's own rows.")
@click.option("--oracle-value", default=None,
              help="Its value for the domain (e.g. quotes); needed by the oracle condition.")
@click.option("--conditions", default="none,random,centroid,fused,oracle", show_default=True,
              help="Comma-separated: none (no continued pretraining), oracle (the domain's "
                   "own rows), or selection methods.")
@click.option("--seeds", default="0", show_default=True,
              help="Comma-separated seeds (split, selection, pretraining and fine-tuning).")
@click.option("--budget", default="2000sent", show_default=True,
              help="Selection budget of every condition (2000sent, 0.01, 500, 1Mtok).")
@click.option("--steps", default=200, show_default=True, type=click.IntRange(min=1),
              help="Continued-pretraining steps (the same for every condition).")
@click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1),
              help="Continued-pretraining examples per step.")
@click.option("--max-length", default=64, show_default=True, type=click.IntRange(min=8),
              help="Tokens per example, in pretraining and fine-tuning.")
@click.option("--lr", default=1e-4, show_default=True, type=float,
              help="Continued-pretraining peak learning rate.")
@click.option("--train-size", default=200, show_default=True, type=click.IntRange(min=1),
              help="Labelled training examples (stratified by label, seeded).")
@click.option("--test-size", default=400, show_default=True, type=click.IntRange(min=1),
              help="Labelled test examples (stratified by label, seeded).")
@click.option("--ft-epochs", default=3, show_default=True, type=click.IntRange(min=1),
              help="Fine-tuning passes over the training split.")
@click.option("--ft-steps", default=None, type=click.IntRange(min=1),
              help="Fine-tuning steps instead of --ft-epochs.")
@click.option("--ft-batch-size", default=16, show_default=True, type=click.IntRange(min=1),
              help="Fine-tuning examples per step.")
@click.option("--ft-lr", default=5e-5, show_default=True, type=float,
              help="Fine-tuning peak learning rate of the encoder (the new head's is 1e-3).")
@click.option("--model", default=None,
              help="Masked-LM model to start from [default: the index's model].")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(["cpu", "cuda"]))
@click.option("--keep-models", is_flag=True,
              help="Keep each run's continued-pretrained model (default: deleted once scored; "
                   "loss curves are kept).")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
              help="Report folder: report.json, report.md, runs/ (new, empty, or an earlier "
                   "report of the same settings, which is resumed).")
@click.pass_context
def downstream(ctx, index_path, labelled, text_field, label_field, group_field, task,
               oracle_field, oracle_value, conditions, seeds, budget, steps, batch_size,
               max_length, lr, train_size, test_size, ft_epochs, ft_steps, ft_batch_size, ft_lr,
               model, device, keep_models, out) -> None:
    """Test accuracy and macro-F1 of a classifier fine-tuned after continued pretraining on
    each condition's selection (none, random, methods, the oracle), over seeds.

    Every (condition, seed) writes its completion record under OUT/runs/; running the same
    command again skips the finished runs.

    \b
    Example:
      python benchmarks/downstream_tasks.py quotes --out quotes-labelled.jsonl
      tapt bench downstream --index .cache/pool-index --labelled quotes-labelled.jsonl \\
          --group-field doc --oracle-value quotes --seeds 0,1,2 --budget 2000sent \\
          --steps 200 --out downstream-quotes
    """
    report = api.bench_downstream(
        index_path, labelled, out, task=task, text_field=text_field, label_field=label_field,
        group_field=group_field, oracle_field=oracle_field, oracle_value=oracle_value,
        conditions=conditions, seeds=seeds, budget=budget, steps=steps, batch_size=batch_size,
        max_length=max_length, lr=lr, train_size=train_size, test_size=test_size,
        ft_epochs=ft_epochs, ft_steps=ft_steps, ft_batch_size=ft_batch_size, ft_lr=ft_lr,
        model=model, device=device, keep_models=keep_models,
        progress=(ctx.obj or {}).get("progress", True))
    for row in report["aggregate"]:
        click.echo(f"{row['condition']:<10} accuracy {row['accuracy']['mean']:.3f} ± "
                   f"{row['accuracy']['std']:.3f}  macro-F1 {row['macro_f1']['mean']:.3f} ± "
                   f"{row['macro_f1']['std']:.3f}  ({len(row['seeds'])} seed(s))")
    click.echo(f"-> {Path(out) / 'report.md'}")
