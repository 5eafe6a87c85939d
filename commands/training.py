"""`tapt train` and `tapt eval-mlm`: continued masked-LM pretraining and its held-out loss."""

from __future__ import annotations

import json
import signal

import click

from tapt import api
from tapt.commands.common import (_STATE, CLICK_SETTINGS, TaptCommand, _domain_errors,
                                  _Interrupted)
from tapt.commands.options import SEED, _config_options


_SELECTIONS = click.option(
    "--selection", "selections", required=True, multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Selection JSONL from `tapt select` (repeatable; all from one index).")
_TASK_TEXT = click.option(
    "--task", multiple=True, metavar="PATH",
    help="Task text mixed into training: files or folders in any corpus format, URLs, or - for "
         "standard input (repeatable; a path given twice is read once).")
_OUT = click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
                    help="Model directory to write (checkpoints go to OUT/checkpoints).")
_EVAL_TEXT = click.option(
    "--eval-text", multiple=True, metavar="PATH",
    help="Held-out text for the masked-LM loss during training, read like --task (repeatable).")


@click.command("train", cls=TaptCommand, context_settings=CLICK_SETTINGS)
@_config_options("train", "model", _SELECTIONS, _TASK_TEXT, "mix", "weights", "steps", "epochs",
                 "batch_size", "max_length", "lr", "warmup", "weight_decay", "mlm_probability",
                 _OUT, "resume", _EVAL_TEXT, "text_field", "eval_every", "eval_batch_size",
                 "save_every", "keep_checkpoints", "delete_checkpoints", "seed", "device",
                 click.option("--json", "as_json", is_flag=True,
                              help="Print one JSON object instead of the summary."))
@click.pass_context
@_domain_errors
def train_command(ctx, selections, task, out, eval_text, as_json, **config) -> None:
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
            list(selections), out, task={"files": list(task)} if task else None,
            eval_text={"files": list(eval_text)} if eval_text else None,
            progress=ctx.obj["progress"], **config)
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


@click.command("eval-mlm", cls=TaptCommand, context_settings=CLICK_SETTINGS)
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
