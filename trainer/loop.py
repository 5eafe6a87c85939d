"""`tapt train`: continued masked-LM pretraining on selections (and task text), its checkpoints,
resume and manifest; the steps themselves are taken by the one loop (`tapt.modeling.loop`).

A plain torch loop rather than `transformers.Trainer`, on purpose: exact resume is simple here (the
data position is a pure function of the step number, see `trainer.plan`, and the masking generator is
re-seeded from (seed, step), so a checkpoint only needs model/optimizer/scheduler/RNG states and the
step), and per-example loss weights (TADPOLE's lambda) are one multiplication (`modeling.mlm`). With
Trainer both need a custom sampler, collator and `compute_loss`, and its resume skips batches of a
re-shuffled dataloader instead of restoring a position.
"""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

from tapt.errors import InputError, StorageError, TaptError, TrainingInterrupted
from tapt.trainer.config import TrainConfig

logger = logging.getLogger(__name__)

StepCallback = Callable[[int, float], None]


class _StopOnSigint:
    """First Ctrl-C asks the loop to stop after the current step (and save); a second one aborts.
    SIGTERM does the same where the program handles it (the CLI does; a plain Python process
    keeps the default, to die): the step in progress ends, its checkpoint is saved."""

    def __init__(self) -> None:
        self.requested = False
        self.signum = signal.SIGINT
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            previous = self._previous.get(signum)
            if signum == signal.SIGTERM and callable(previous):
                previous(signum, frame)
            raise KeyboardInterrupt
        self.requested = True
        self.signum = signum
        # info (shown unless -q): the one Error line that follows says what was saved
        logger.info("%s: saving a checkpoint after this step (again to abort now)",
                    "interrupt" if signum == signal.SIGINT else "SIGTERM")

    def __enter__(self) -> "_StopOnSigint":
        if threading.current_thread() is threading.main_thread():
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._handle)
            if callable(signal.getsignal(signal.SIGTERM)):
                self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, previous in self._previous.items():
            if previous is not None:
                signal.signal(signum, previous)


def _model_identity(info: dict[str, Any]) -> dict[str, Any]:
    from tapt.util.files import sha256_file

    if info.get("path") is None:        # made here (`tapt pretrain`): its shape is its identity
        return {"name": info["name"], "architecture": info.get("shape")}
    config = Path(info["path"]) / "config.json"
    return {"name": info["name"], "config_sha256": sha256_file(config) if config.is_file() else None}


def _diverged(lr: float, resuming: bool) -> Callable[[float, int, float], Exception]:
    def error(value: float, step: int, _: float) -> Exception:
        return TaptError(f"training diverged: the loss is {value} at step {step}; lower --lr "
                         f"(now {lr:g})"
                         + (", or the checkpoint resumed from is damaged: resume from an "
                            "earlier one or start again" if resuming else ""))
    return error


def _final_loss(curve: list[float]) -> float | None:
    tail = curve[-min(len(curve), 20):]
    return sum(tail) / len(tail) if tail else None


def train(config: TrainConfig, *, on_step: StepCallback | None = None) -> dict[str, Any]:
    """Run (or resume) continued masked-LM pretraining; returns the training manifest.

    `on_step(step, loss)` is called after every completed optimizer step (for tests and tooling).
    Raises InputError for bad inputs (before anything is written), TrainingInterrupted after Ctrl-C.
    """
    import torch

    from tapt.modeling import mlm
    from tapt.trainer.data import document_examples, segment_examples
    from tapt.trainer.inputs import check_task_matches, load_selections, read_texts
    from tapt.trainer.outdir import check_output, training_inputs
    from tapt.trainer.plan import TrainingPlan
    from tapt.util.training import resolve_device

    out = Path(config.out)
    inputs = training_inputs(config)
    check_output(out, None, config.resume, inputs)  # cheap refusals before the slow loading
    resolve_device(config.device)
    segments, selection_records = load_selections(config.selections, config.progress)
    task = read_texts(config.task, config.task_texts, config.text_field, "task text", "task")
    task_docs = task.documents if task else []
    task_hashes = task.file_sha256 if task else []
    check_task_matches(selection_records, task_hashes, task.sha256 if task else None)
    held_out = read_texts(config.eval_text, config.eval_texts, config.text_field,
                          "held-out text", "eval_text")
    eval_docs = held_out.documents if held_out else []

    torch.manual_seed(config.seed)  # the head of a base encoder is initialised reproducibly
    model, tokenizer, model_info = mlm.load_mlm(config.model, warn=False)
    mlm.check_max_length(model, config.max_length, model_info["name"])
    selection_examples = segment_examples(segments, tokenizer, config.max_length, config.progress)
    task_examples = document_examples(task_docs, tokenizer, config.max_length, "task",
                                      config.progress)
    eval_examples = document_examples(eval_docs, tokenizer, config.max_length, "eval",
                                      config.progress)
    if selection_examples or not task_examples:
        plan = TrainingPlan(selection_examples, task_examples, ratio=config.mix_ratio,
                            weights=config.weights, seed=config.seed,
                            batch_size=config.batch_size)
    else:       # the task's text alone (TAPT)
        plan = TrainingPlan(task_examples, [], ratio=None, weights="discrete", seed=config.seed,
                            batch_size=config.batch_size)
    identity = {
        "selections": [r["selection_sha256"] for r in selection_records],
        "task": task_hashes,
        # its losses are compared across the run: another held-out text may not resume it
        **({"eval_text": held_out.file_sha256} if held_out else {}),
    }
    record = {
        "arguments": config.to_dict(),
        "selections": selection_records,
        "task": [{"path": p, "sha256": h} for p, h in zip(task.files, task.file_sha256)]
        if task else [],
        "eval_text": [{"path": p, "sha256": h}
                      for p, h in zip(held_out.files, held_out.file_sha256)]
        if held_out else [],
        "examples": {"selection": len(selection_examples), "task": len(task_examples)},
    }
    return run(config, model, tokenizer, model_info, plan, eval_examples, identity, record,
               inputs, on_step=on_step)


def run(config: Any, model: Any, tokenizer: Any, model_info: dict[str, Any], plan: Any,
        eval_examples: list[Any], identity: dict[str, Any], record: dict[str, Any],
        inputs: list[Path], *, on_step: StepCallback | None = None) -> dict[str, Any]:
    """Train `model` on `plan`'s batches into `config.out`: the output directory and its
    refusals, resume from the newest checkpoint, the held-out loss, checkpoints, Ctrl-C and
    SIGTERM, the manifest and the final model (what `tapt train` and `tapt pretrain` share).

    Args:
        config: The run's settings (`TrainConfig`'s fields: out, steps or epochs, batch_size,
            lr, warmup, weight_decay, max_grad_norm, mlm_probability, seed, device, weights,
            resume, eval_every, eval_batch_size, save_every, keep_checkpoints,
            delete_checkpoints, progress; and `identity_fields()`).
        model: The masked LM to train (on the CPU; moved to the device here).
        tokenizer: Its tokenizer (saved with it).
        model_info: `load_mlm`'s info (name, path, architecture, head_initialised, warnings).
        plan: The `TrainingPlan` of the examples.
        eval_examples: Held-out examples (none: no held-out loss).
        identity: What else defines the run beyond its settings, model and data.
        record: The inputs' part of the manifest.
        inputs: The paths the run reads (never its output).
        on_step: Called with (step, loss) after every step.

    Returns:
        The training manifest.
    """
    import torch

    from tapt.modeling import mlm
    from tapt.modeling.loop import Loop, Schedule
    from tapt.trainer.checkpoint import checkpoint_dirs, load_checkpoint, save_checkpoint
    from tapt.trainer.evaluate import mlm_loss
    from tapt.trainer.manifest import TRAINING_FORMAT, TRAINING_FORMAT_VERSION, identity_hash
    from tapt.trainer.outdir import finished_manifest, prepare_output, write_final_model
    from tapt.util.training import resolve_device
    from tapt.util.versions import library_versions

    out = Path(config.out)
    device = resolve_device(config.device)
    total_steps = config.steps or plan.steps_per_epoch * int(config.epochs or 0)
    identity = {**config.identity_fields(), "model": _model_identity(model_info), **identity,
                "data_sha256": plan.fingerprint()}
    created = not out.exists()
    try:
        resuming = prepare_output(out, identity, config.resume, inputs)
        for warning in model_info.get("warnings", []):    # after the refusals: not before an error
            logger.warning("%s", warning)
        if resuming:
            done = finished_manifest(out)
            if done is not None and done.get("steps") == total_steps:
                logger.info("%s already holds the finished run (%d steps); nothing to do", out,
                            total_steps)
                return done

        model.to(device)
        loop = Loop(model, Schedule(total_steps, config.lr, config.weight_decay, config.warmup,
                                    config.max_grad_norm), device, desc="train",
                    progress=config.progress, diverged=_diverged(config.lr, resuming))
        collator = mlm.MaskingCollator(tokenizer, config.mlm_probability,
                                       model.get_input_embeddings().weight.shape[0])
        state: dict[str, Any] = {"loss_curve": [], "evals": [], "seconds": 0.0, "resumed_at": []}
        step = 0
        checkpoints = checkpoint_dirs(out) if resuming else []
        if checkpoints:
            state = load_checkpoint(checkpoints[-1], model, loop.optimizer, loop.scheduler,
                                    str(device))
            if state.get("identity_sha256") != identity_hash(identity):
                raise InputError(f"checkpoint {checkpoints[-1]} belongs to another configuration")
            step = int(state["step"])
            state["resumed_at"] = list(state.get("resumed_at", [])) + [step]
            logger.info("resuming from %s (step %d of %d)", checkpoints[-1], step, total_steps)

        def evaluate(at: int) -> None:
            if not eval_examples or any(e["step"] == at for e in state["evals"]):
                return
            result = mlm_loss(model, collator, eval_examples, batch_size=config.eval_batch_size,
                              seed=config.seed, device=device)
            state["evals"].append({"step": at, "loss": result.loss, "perplexity": result.perplexity,
                                   "tokens": result.tokens})
            logger.info("step %d: eval loss %.4f (perplexity %.2f, %d tokens)",
                        at, result.loss, result.perplexity, result.tokens)

        def checkpoint(at: int) -> Path:
            epoch, position = plan.position(at)
            return save_checkpoint(out, at, model, loop.optimizer, loop.scheduler, {
                **state, "format": TRAINING_FORMAT, "epoch": epoch, "position": position,
                "total_steps": total_steps, "identity_sha256": identity_hash(identity),
            }, keep=config.keep_checkpoints)

        started = time.monotonic()
        seconds_before = float(state.get("seconds", 0.0))
        use_weights = config.weights == "continuous"

        def loss_of(at: int) -> Any:
            batch = collator(plan.batch(at),
                             torch.Generator().manual_seed(mlm.derived_seed(config.seed, at)))
            return mlm.masked_lm_loss(model, batch["input_ids"].to(device),
                                      batch["attention_mask"].to(device),
                                      batch["labels"].to(device), per_example=True,
                                      weights=batch["weights"] if use_weights else None)

        if step == 0:
            evaluate(0)
        with _StopOnSigint() as stop:
            def after(at: int, value: float) -> None:
                state["loss_curve"].append(value)
                state["seconds"] = seconds_before + time.monotonic() - started
                if config.eval_every and at % config.eval_every == 0:
                    evaluate(at)
                if on_step is not None:
                    on_step(at, value)
                # a SIGTERM stops even at the last step: the rest would not finish in time
                if stop.requested and (at < total_steps or stop.signum == signal.SIGTERM):
                    raise TrainingInterrupted(at, checkpoint(at), stop.signum)

            loop.run(loss_of, start=step, on_step=after, checkpoint=checkpoint,
                     checkpoint_every=config.save_every,
                     postfix=lambda curve: f"loss={_final_loss(curve[-10:]):.4f}")
        step = total_steps
        evaluate(step)

        manifest = {
            "format": TRAINING_FORMAT,
            "format_version": TRAINING_FORMAT_VERSION,
            "model": {k: model_info.get(k)
                      for k in ("name", "path", "architecture", "head_initialised", "shape")
                      if k != "shape" or "shape" in model_info},
            **record,
            "examples": {**record.get("examples", {}), "eval": len(eval_examples),
                         "per_epoch": plan.epoch_size, "steps_per_epoch": plan.steps_per_epoch},
            "identity_sha256": identity_hash(identity),
            "identity": identity,
            "steps": step,
            "epochs": step / plan.steps_per_epoch,
            "train_loss": _final_loss(state["loss_curve"]),
            "loss_curve": state["loss_curve"],
            "evals": state["evals"],
            "eval_loss": state["evals"][-1]["loss"] if state["evals"] else None,
            "seconds": round(float(state["seconds"]), 3),
            "resumed_at": state.get("resumed_at", []),
            "device": str(device),
            "versions": library_versions(),
        }
        write_final_model(out, model, tokenizer, manifest)
    except TrainingInterrupted:
        raise
    except StorageError as exc:
        kept = checkpoint_dirs(out)
        if created and not kept:
            shutil.rmtree(out, ignore_errors=True)  # a failed fresh run leaves nothing behind
        if not kept:
            raise
        raise StorageError(f"{exc}, adding `resume` to continue from checkpoint {kept[-1]} "
                           "(kept)", param=exc.param) from exc
    except BaseException:
        if created and not checkpoint_dirs(out):
            shutil.rmtree(out, ignore_errors=True)  # a failed fresh run leaves nothing behind
        raise
    if config.delete_checkpoints:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    logger.info("trained %d steps in %.1fs; model written to %s", step, state["seconds"], out)
    return manifest
