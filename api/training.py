"""`tapt.train` and `tapt.evaluate_mlm` (`tapt train`, `tapt eval-mlm`)."""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from tapt.api.arguments import PathLike, Task, is_series
from tapt.errors import InputError
from tapt.retriever.selections.selection import Selection
from tapt.trainer.config import MLM_EVAL_BATCH


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
          task: Task | None = (), eval_text: Task | None = (), compare: Sequence[str] = (),
          on_step: Callable[[int, float], None] | None = None, **settings: Any
          ) -> dict[str, Any]:
    """Continue masked-LM pretraining of a model on selected segments (`tapt train`).

    With `compare`, the same run (model, steps, batch, length, learning rate, seed, task
    mixing) is made again on `random` rows of the selection's index (as many sentences as the
    selection holds) and/or on the `task` text alone, into OUT/compare/<kind>/, and each is set
    beside this run on the held-out text: the loss of both with the same masks and the paired
    difference with its 95% bootstrap interval over the held-out documents (in the returned
    manifest's `comparison` and in OUT/comparison.json).

    Args:
        selections: Selection files (or written `Selection`s), all from one index.
        out: The model directory to write (checkpoints go to OUT/checkpoints).
        task: Task text mixed into training: files or folders in any corpus format, or the
            text itself, in any form `Index.select` takes (a list of strings: one document
            each).
        eval_text: Held-out text for the masked-LM loss during training, in the same forms.
        compare: "random" and/or "task": the runs to set beside this one (needs `eval_text`).
        on_step: Called with (step, loss) after every optimizer step.
        **settings: The run's settings, `TrainConfig`'s fields by name, each defaulting to the
            field's default (the options of `tapt train`, `-` for `_`): model (masked-LM
            directory or hub name; default: the packaged all-MiniLM-L6-v2 with a new MLM
            head), mix (TASK:SELECTION examples with `task`, default 1:1), weights (discrete,
            continuous or sample), steps or epochs, batch_size, max_length, lr, warmup,
            weight_decay, max_grad_norm (0: no clipping), mlm_probability, seed, device (cpu or
            cuda), resume, text_field (of `task` and `eval_text` files), eval_every (0: at the
            start and the end), eval_batch_size (as `evaluate_mlm`'s `batch_size`: the same
            masks), save_every, keep_checkpoints, delete_checkpoints, progress.

    Returns:
        The training manifest (steps, losses, evaluations, inputs and their hashes).

    Raises:
        InputError: an argument of the wrong type or out of range (named), or an input that
            cannot work (before anything is written).
        StorageError: the disk filled up or refused a write (the newest checkpoint is kept).
        TrainingInterrupted: Ctrl-C; a checkpoint was saved (resume with `resume=True`).
    """
    from tapt.api.options import config_settings
    from tapt.trainer.config import TrainConfig
    from tapt.trainer.inputs import check_selections
    from tapt.trainer.loop import train as run_training
    from tapt.util.checks import shown

    if on_step is not None and not callable(on_step):
        raise InputError(f"must be a function of (step, loss), got {shown(on_step)}",
                         param="on_step")
    selection_paths = tuple(_selection_paths(selections))
    task_paths, task_texts = _text_form(task, "task")
    eval_paths, eval_texts = _text_form(eval_text, "eval_text")
    own = dict(selections=selection_paths, out=out, task=task_paths, task_texts=task_texts,
               eval_text=eval_paths, eval_texts=eval_texts,
               compare=tuple([compare] if isinstance(compare, str) else compare or ()))
    config = TrainConfig(**own, **config_settings("train", TrainConfig, settings, own))
    check_selections(config.selections)     # from the manifests, before torch is imported
    manifest = run_training(config, on_step=on_step)
    if config.compare:
        manifest = {**manifest, "comparison": _compare(config, manifest)}
    return manifest


def _compare(config: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    """The comparison runs of `train(compare=...)` and their held-out losses beside the run's
    own, written to OUT/comparison.json."""
    import dataclasses
    from pathlib import Path

    from tapt.api.index import Index
    from tapt.bench.downstream_stats import difference, group_totals, resample_ratio
    from tapt.retriever.selections.file_format import read_manifest
    from tapt.trainer.evaluate import document_losses
    from tapt.trainer.inputs import read_texts
    from tapt.trainer.loop import train as run_training
    from tapt.util.files import write_json_atomic

    out = Path(config.out)
    held_out = read_texts(config.eval_text, config.eval_texts, config.text_field,
                          "held-out text", "eval_text")
    documents = [list(d) for d in held_out.documents]
    runs = {"selection": str(out)}
    for kind in config.compare:
        other = out / "compare" / kind
        change: dict[str, Any] = {"out": str(other), "compare": (), "resume": True,
                                  "delete_checkpoints": True}
        if kind == "random":
            first = manifest["selections"][0]["index"] or {}
            ix = Index.open(first.get("path", ""))
            ix.check_selection(manifest["selections"][0]["path"], first)
            # the counts the run's selections' manifests record (checked against the files
            # when the run read them): no selection is read again
            sentences = sum(int(read_manifest(r["path"])["counts"]["sentences"])
                            for r in manifest["selections"])
            sample = ix.select("random", budget=f"{sentences}sent", seed=config.seed,
                               progress=config.progress)
            path = out / "compare" / "random.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            sample.write(path, overwrite=True)
            change["selections"] = (str(path),)
        else:
            change.update(selections=(), mix=None)
        run_training(dataclasses.replace(config, **change))
        runs[kind] = str(other)
    losses = {name: document_losses(path, documents, max_length=config.max_length,
                                    batch_size=config.eval_batch_size, seed=config.seed,
                                    mlm_probability=config.mlm_probability,
                                    device=config.device)
              for name, path in runs.items()}
    groups = np.asarray(losses["selection"]["groups"], dtype=np.int64)
    n = len(documents)
    resampled = resample_ratio(
        {k: group_totals([v["loss_sums"]], groups, n) for k, v in losses.items()},
        {k: group_totals([v["tokens"]], groups, n) for k, v in losses.items()})
    report = {"held_out_documents": n, "models": runs,
              "loss": {k: round(v["loss"], 5) for k, v in losses.items()},
              "against": {kind: {k: round(v, 5) for k, v in
                                 difference(resampled, "selection", kind).items()}
                          for kind in config.compare},
              "interval": "95% bootstrap over the held-out documents (10,000 draws)"}
    write_json_atomic(out / "comparison.json", report)
    return report


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
    from tapt.trainer.evaluate import evaluate_text
    from tapt.util.checks import shown

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



GENERAL_SAMPLE_SEED = 0x67656E    # the general sample's seeds never coincide with a selection's


def pretrain(index: PathLike, out: PathLike, *, progress: bool = True,
             **settings: Any) -> dict[str, Any]:
    """Train a general masked LM of an index's corpus on a seeded random sample of its rows
    (`tapt pretrain`): a new BERT of a named size with a WordPiece vocabulary learnt from the
    sample, or, with `model`, an existing masked LM continued on the sample (which warms a
    newly initialised head on general text).

    The result is a model directory like `train`'s (Hugging Face `save_pretrained` files plus
    `training_manifest.json` with the loss curve and what was sampled): the starting point to
    give `train`, `evaluate_mlm` and `bench_downstream` as `model`.

    Args:
        index: The index whose rows are sampled.
        out: The model directory to write (checkpoints go to OUT/checkpoints).
        progress: Show progress bars.
        **settings: `PretrainConfig`'s fields by name: preset ("tiny", "cpu" (default),
            "gpu"), model, tokenizer ("wordpiece" or "index"), vocab_size, hidden_size,
            layers, heads, intermediate_size, max_length, sample (sentences), steps,
            batch_size, lr (each left out: the preset's), warmup, weight_decay,
            mlm_probability, seed, device, resume, save_every, keep_checkpoints,
            delete_checkpoints.

    Returns:
        The training manifest (`pretrain`: preset, shape, vocabulary, sample; `loss_curve`).

    Raises:
        InputError: a setting of the wrong type or out of range, or an unknown one (named).
        OutputError: `out` cannot be written or holds something else.
        TrainingInterrupted: Ctrl-C; a checkpoint was saved (resume with `resume=True`).

    Examples:
        >>> manifest = tapt.pretrain(idx, "general-tiny", preset="tiny", steps=2,
        ...                          progress=False)
        >>> manifest["steps"], manifest["pretrain"]["preset"]
        (2, 'tiny')
    """
    from tapt.api.index import Index
    from tapt.api.options import config_settings
    from tapt.trainer.outdir import check_output
    from tapt.trainer.pretrain import PretrainConfig, sample_record
    from tapt.trainer.pretrain import pretrain as run_pretrain
    from tapt.util.checks import path_text

    config = PretrainConfig(out=out, progress=progress,
                            **config_settings("pretrain", PretrainConfig, settings, ("out",)))
    index_path = path_text(index, "index")
    check_output(config.out, None, config.resume, [index_path])    # before the index opens
    ix = Index.open(index_path)
    seed = (config.seed + GENERAL_SAMPLE_SEED) % 2**32
    budget = f"{min(config.sample, ix.n_sentences)}sent"
    selection = ix.select("random", budget=budget, seed=seed, progress=config.progress)
    units = [list(seg.sentences) or [seg.text] for seg in selection]
    identity = {k: v for k, v in ix.identity().items() if k in ("uuid", "manifest_sha256")}
    model = ix.manifest["model"].get("source") or ix.manifest["model"]["name"]
    return run_pretrain(config, units, sample_record(units, identity, seed), [str(ix.path)],
                        index_model=model)


def model_path(model: str | None = None) -> str:
    """The local directory of a model argument: by default the packaged all-MiniLM-L6-v2 (its
    model and tokenizer files), for loading it in your own Hugging Face code offline
    (`AutoTokenizer.from_pretrained(tapt.model_path())`).

    Args:
        model: A model directory, the packaged default's name, or None.

    Returns:
        The directory.

    Raises:
        InputError: `model` is neither a local directory nor the packaged default (a hub name
            has no local directory until it is downloaded).
    """
    from pathlib import Path

    from tapt.indexer.encoding.models import DEFAULT_MODEL, resolve_model
    from tapt.util.files import real_path

    resolved = resolve_model(model)
    if not Path(resolved).is_dir():
        raise InputError(f"{model!r} is not a local model directory or the packaged default "
                         f"({DEFAULT_MODEL})", param="model")
    return str(real_path(resolved))
