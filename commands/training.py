"""`tapt train` and `tapt eval-mlm`: continued masked-LM pretraining and its held-out loss."""

from __future__ import annotations

import json
import signal

import click

from tapt import api
from tapt.api import options
from tapt.commands.common import (
    _STATE,
    CLICK_SETTINGS,
    TaptCommand,
    _domain_errors,
    _Interrupted,
    register,
)
from tapt.commands.options import SEED, _config_options

_SELECTIONS = click.option(
    "--selection", "selections", multiple=True, type=click.Path(exists=True, dir_okay=False),
    help="Selection JSONL from `tapt select` (repeatable; all from one index). Without one, "
         "the run trains on the --task text alone (TAPT).")
_TASK_TEXT = click.option(
    "--task", multiple=True, metavar="PATH",
    help="Task text mixed into training: files or folders in any corpus format, URLs, or - for "
         "standard input (repeatable; a path given twice is read once).")
_OUT = click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
                    help="Model directory to write (checkpoints go to OUT/checkpoints).")
_COMPARE = click.option(
    "--compare", multiple=True, type=click.Choice(["random", "task"]),
    help="Make the same run (model, steps, batch, length, lr, seed) on random rows of the "
         "selection's index (as many sentences) and/or on the --task text alone, into "
         "OUT/compare/, and set its held-out loss beside this run's with the paired difference "
         "and its 95% interval (needs --eval-text; repeatable).")
_EVAL_TEXT = click.option(
    "--eval-text", multiple=True, metavar="PATH",
    help="Held-out text for the masked-LM loss during training, read like --task (repeatable).")


@register
@click.command("train", cls=TaptCommand, context_settings=CLICK_SETTINGS)
@_config_options("train", "model", _SELECTIONS, _TASK_TEXT, "mix", "weights", "steps", "epochs",
                 "batch_size", "max_length", "lr", "warmup", "weight_decay", "mlm_probability",
                 _OUT, "resume", _EVAL_TEXT, "text_field", "eval_every", "eval_batch_size",
                 "save_every", "keep_checkpoints", "delete_checkpoints", "seed", "device",
                 _COMPARE,
                 click.option("--json", "as_json", is_flag=True,
                              help="Print one JSON object instead of the summary."))
@click.pass_context
@_domain_errors
def train_command(ctx, selections, task, out, eval_text, compare, as_json, **config) -> None:
    """Continue masked-LM pretraining of a model on selected segments (and task text).

    \b
    Examples:
      tapt train --selection sel.jsonl --steps 1000 --out model-tapt
      tapt train --model ./bert --selection knn.jsonl --task task.jsonl --mix 1:1 \\
          --epochs 3 --eval-text heldout.txt --eval-every 200 --out model-knn
      tapt train --selection weighted.jsonl --weights continuous --steps 2000 --out m --resume
      tapt train --selection sel.jsonl --steps 300 --eval-text heldout.jsonl \\
          --compare random --out model-sel          # did the selection beat random rows?
      tapt train --task task.jsonl --steps 300 --out model-tapt   # the task's text alone
    """
    from tapt.api import train
    from tapt.errors import TrainingInterrupted

    try:
        manifest = train(
            list(selections), out, task={"files": list(task)} if task else None,
            eval_text={"files": list(eval_text)} if eval_text else None,
            progress=ctx.obj["progress"], compare=compare, **config)
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
    comparison = manifest.get("comparison")
    if comparison:
        loss = comparison["loss"]
        click.echo(f"held-out loss on {comparison['held_out_documents']:,} documents (same "
                   f"masks): this run {loss['selection']:.4f}")
        for kind, d in comparison["against"].items():
            verdict = ("lower" if d["ci_high"] < 0 else "higher" if d["ci_low"] > 0
                       else "no clear difference")
            click.echo(f"  vs {kind:<6} {loss[kind]:.4f}: {d['delta']:+.4f} "
                       f"[{d['ci_low']:+.4f}, {d['ci_high']:+.4f}] 95% CI ({verdict})")


@register
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
@click.option("--batch-size", default=options.MLM_EVAL_BATCH, show_default=True, type=int,
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


@register
@click.command("pretrain", cls=TaptCommand, context_settings=CLICK_SETTINGS)
@click.argument("index_path", metavar="INDEX", type=click.Path(exists=True, file_okay=False))
@_config_options("pretrain", _OUT, "preset", "model", "tokenizer", "vocab_size", "hidden_size",
                 "layers", "heads", "intermediate_size", "max_length", "sample", "steps",
                 "batch_size", "lr", "warmup", "weight_decay", "mlm_probability", "seed",
                 "device", "resume", "save_every", "keep_checkpoints", "delete_checkpoints",
                 click.option("--json", "as_json", is_flag=True,
                              help="Print one JSON object instead of the summary."))
@click.pass_context
@_domain_errors
def pretrain_command(ctx, index_path, out, as_json, **config) -> None:
    """Train a general masked LM of an index's corpus on a random sample of its rows: a new
    BERT of a named size (--preset) with a WordPiece vocabulary learnt from the sample, or
    --model continued on the sample (warms a newly initialised head on general text).

    The model directory it writes is the starting point to give `tapt train --model`,
    `tapt eval-mlm --model` and `tapt bench downstream --model`.

    \b
    Examples:
      tapt pretrain idx --out general --preset tiny          # seconds: try it
      tapt pretrain idx --out general --preset cpu           # tens of minutes on 2 cores
      tapt pretrain idx --out general --preset gpu --device cuda
      tapt pretrain idx --out warm --model ./bert-base --steps 300   # warm a new head
    """
    from tapt.api import pretrain
    from tapt.errors import TrainingInterrupted

    try:
        manifest = pretrain(index_path, out, progress=ctx.obj["progress"], **config)
    except TrainingInterrupted as exc:
        if exc.signum == signal.SIGTERM:
            _STATE["terminated"] = True
        raise _Interrupted(f"{exc}; continue with the same arguments plus --resume") from exc
    if as_json:
        click.echo(json.dumps({"out": out, **{k: v for k, v in manifest.items()
                                               if k != "loss_curve"}}))
        return
    sample = manifest["pretrain"]["sample"]
    curve = manifest["loss_curve"]
    first = sum(curve[:20]) / len(curve[:20]) if curve else float("nan")
    click.echo(f"pretrained {manifest['steps']:,} steps in {manifest['seconds']:.0f} s on "
               f"{sample['sentences']:,} sampled sentences: train loss {first:.4f} -> "
               f"{manifest['train_loss']:.4f} -> {out}")


@register
@click.command("model-path", cls=TaptCommand, context_settings=CLICK_SETTINGS)
@click.argument("model", required=False)
@_domain_errors
def model_path_command(model) -> None:
    """Print the local directory of a model argument: by default the packaged
    all-MiniLM-L6-v2 (model and tokenizer), for your own Hugging Face code offline.

    \b
    Examples:
      tapt model-path
      python -c "from transformers import AutoTokenizer; AutoTokenizer.from_pretrained('$(tapt model-path)')"
    """
    click.echo(api.model_path(model))
