"""`tapt.train` and `tapt.evaluate_mlm` (`tapt train`, `tapt eval-mlm`)."""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from tapt.errors import InputError
from tapt.retriever.selections.selection import Selection
from tapt.trainer.config import MLM_EVAL_BATCH

from .arguments import PathLike, Task, is_series


def _selection_paths(selections) -> list[str]:
    from tapt.util.checks import path_text, shown

    if selections is None or not isinstance(selections, (list, tuple, str, os.PathLike,
                                                          Selection)):
        raise InputError(f"must be a selection file, a written Selection or a list of them, "
                         f"got {shown(selections)}", param="selections")
    items = selections if isinstance(selections, (list, tuple)) else [selections]
    out = []
    for item in items:
        if isinstance(item, Selection):
            if item.path is None:
                raise InputError("a Selection must be written first (Selection.write) so "
                                 "that the run can record and check it", param="selections")
            out.append(str(item.path))
        else:
            out.append(path_text(item, "selections"))
    return out


def train(selections: PathLike | Selection | Sequence[PathLike | Selection], out: PathLike, *,
          model: str | None = None, task: Task | None = (),
          mix: str | None = None, weights: str = "discrete", steps: int | None = None,
          epochs: int | None = None, batch_size: int = 16, max_length: int = 128,
          lr: float = 1e-4, warmup: float = 0.06, weight_decay: float = 0.01,
          max_grad_norm: float = 1.0, mlm_probability: float = 0.15, resume: bool = False,
          eval_text: Task | None = (), text_field: str = "text",
          eval_every: int = 0, eval_batch_size: int = MLM_EVAL_BATCH,
          save_every: int = 200, keep_checkpoints: int = 2, delete_checkpoints: bool = False,
          seed: int = 0, device: str = "cpu", progress: bool = True,
          on_step: Callable[[int, float], None] | None = None,
          **settings: Any) -> dict[str, Any]:
    """Continue masked-LM pretraining of a model on selected segments (`tapt train`).

    Args:
        selections: Selection files (or written `Selection`s), all from one index.
        out: The model directory to write (checkpoints go to OUT/checkpoints).
        model: Masked-LM model directory or hub name (default: the packaged all-MiniLM-L6-v2
            with a newly initialised MLM head).
        task: Task text mixed into training: files or folders in any corpus format, or the
            text itself, in any form `Index.select` takes (a list of strings: one document
            each).
        mix: TASK:SELECTION examples ratio with `task` (default 1:1).
        weights: discrete (ignore weights), continuous (scale each example's loss by its
            weight) or sample (draw examples in proportion to their weight).
        steps: Optimizer steps (or give `epochs`).
        epochs: Passes over the (mixed) data.
        batch_size: Examples per step.
        max_length: Tokens per example.
        lr: Peak learning rate (linear warmup, then linear decay to 0).
        warmup: Fraction of the steps of warmup.
        weight_decay: AdamW weight decay.
        max_grad_norm: Gradient clipping norm (0 = none).
        mlm_probability: Share of tokens masked.
        resume: Continue the run in `out` from its last checkpoint.
        eval_text: Held-out text for the masked-LM loss during training, in the same forms.
        text_field: The field or column with the text in `task` and `eval_text` files.
        eval_every: Evaluate every N steps (0: at the start and the end).
        eval_batch_size: Sequences per batch of the held-out loss (as `evaluate_mlm`'s
            `batch_size`: the same masks, so the same loss for the same model).
        save_every: Checkpoint every N steps.
        keep_checkpoints: How many of the newest checkpoints to keep.
        delete_checkpoints: Delete OUT/checkpoints once the run has finished.
        seed: Seed of data order, masks and head initialisation.
        device: cpu or cuda.
        progress: Show a progress bar.
        on_step: Called with (step, loss) after every optimizer step.
        **settings: Any other option of `tapt train` that is a `TrainConfig` field, by the
            field's name.

    Returns:
        The training manifest (steps, losses, evaluations, inputs and their hashes).

    Raises:
        InputError: an argument of the wrong type or out of range (named), or an input that
            cannot work (before anything is written).
        StorageError: the disk filled up or refused a write (the newest checkpoint is kept).
        TrainingInterrupted: Ctrl-C; a checkpoint was saved (resume with `resume=True`).
    """
    from tapt.trainer import config as train_config
    from tapt.trainer.inputs import check_selections
    from tapt.util.checks import shown
    from tapt.trainer.loop import train as run_training

    from .options import config_settings

    if on_step is not None and not callable(on_step):
        raise InputError(f"must be a function of (step, loss), got {shown(on_step)}",
                         param="on_step")
    selection_paths = tuple(_selection_paths(selections))
    task_paths, task_texts = _text_form(task, "task")
    eval_paths, eval_texts = _text_form(eval_text, "eval_text")
    own = dict(
        selections=selection_paths, out=out, model=model,
        task=task_paths, task_texts=task_texts, mix=mix, weights=weights, steps=steps,
        epochs=epochs, batch_size=batch_size, max_length=max_length, lr=lr, warmup=warmup,
        weight_decay=weight_decay, max_grad_norm=max_grad_norm, mlm_probability=mlm_probability,
        seed=seed, device=device, resume=resume,
        eval_text=eval_paths, eval_texts=eval_texts, text_field=text_field,
        eval_every=eval_every, eval_batch_size=eval_batch_size,
        save_every=save_every, keep_checkpoints=keep_checkpoints,
        delete_checkpoints=delete_checkpoints, progress=progress)
    config_class = train_config.TrainConfig     # looked up here: tests swap in a variant
    config = config_class(**own, **config_settings("train", config_class, settings, own))
    check_selections(config.selections)     # from the manifests, before torch is imported
    return run_training(config, on_step=on_step)


def evaluate_mlm(texts: Task, *, model: str | None = None,
                 max_length: int = 128, batch_size: int = MLM_EVAL_BATCH, seed: int = 0,
                 mlm_probability: float = 0.15, pseudo: bool = False, device: str = "cpu",
                 text_field: str = "text") -> dict[str, Any]:
    """Masked-LM loss and perplexity of a model on held-out text (`tapt eval-mlm`).

    The same seed masks the same tokens for every model that shares a tokenizer.

    Args:
        texts: Held-out text: files or folders in any corpus format, URLs, "-" for stdin, or
            the text itself, in any form `Index.select` takes a task (a list of strings: one
            document each).
        model: Masked-LM model directory or hub name (default: the packaged model).
        max_length: Tokens per sequence.
        batch_size: Sequences per batch (masks are drawn per batch; `train` scores its
            held-out text with the same default).
        seed: Masking seed.
        mlm_probability: Share of tokens masked.
        pseudo: Pseudo-perplexity instead: every token masked in turn (small inputs only).
        device: cpu or cuda.
        text_field: The field or column with the text.

    Returns:
        loss, perplexity, tokens, examples, method and the settings.

    Raises:
        InputError: an argument of the wrong type or out of range (named), or text or a model
            that cannot be used.
    """
    from tapt.util.checks import shown
    from tapt.trainer.evaluate import evaluate_text

    if texts is None or not (isinstance(texts, (str, os.PathLike, list, tuple, np.ndarray, dict))
                             or is_series(texts)):
        raise InputError(f"must be a file, folder or URL of held-out text or a list of them, "
                         f"got {shown(texts)}", param="texts")
    paths, strings = _text_form(texts, "texts")
    return evaluate_text(model, list(paths), max_length=max_length,
                         batch_size=batch_size, seed=seed, mlm_probability=mlm_probability,
                         pseudo=pseudo, device=device, text_field=text_field, strings=strings)


def _text_form(value: Any, param: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(paths, strings) of a task or held-out text, told apart by the rule every task-taking
    call follows (`retriever.tasks.forms.task_form`); nothing for None or an empty list."""
    from tapt.retriever.tasks.forms import task_form
    from tapt.util.checks import path_list

    if value is None or (isinstance(value, (list, tuple)) and not value):
        return (), ()
    kind, items = task_form(value, param)
    if kind == "embeddings":
        raise InputError("training and the masked-LM loss read text: give files or strings, "
                         "not embeddings", param=param)
    return (path_list(items, param), ()) if kind == "files" else ((), tuple(items))

