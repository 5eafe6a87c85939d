"""TrainConfig: every argument of `tapt train`, validated when constructed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tapt.errors import InputError
from tapt.util.checks import choice, flag, path_list, path_text, real_number, shown, whole_number

WEIGHT_MODES = ("discrete", "continuous", "sample")
DEVICES = ("cpu", "cuda")
COMPARISONS = ("random", "task")

# Fields that define a run: resuming with any of them changed is refused (see `identity_fields`).
IDENTITY_FIELDS = (
    "mix",
    "weights",
    "steps",
    "epochs",
    "batch_size",
    "max_length",
    "lr",
    "warmup",
    "weight_decay",
    "max_grad_norm",
    "mlm_probability",
    "seed",
)


# Sequences per batch of a masked-LM loss, the default of `tapt eval-mlm` and of `tapt train`'s
# held-out loss: masks are drawn per batch, so only the same batch gives both the same masks.
MLM_EVAL_BATCH = 32
MAX_SEED = 2**32 - 1   # what torch, numpy and python's random all accept
MAX_COUNT = 2**31 - 1  # steps, sizes, lengths: larger is never meant, and overflows C longs


def check_mlm_settings(max_length: Any, batch_size: Any, mlm_probability: Any, seed: Any,
                       device: Any) -> None:
    """The settings `tapt train` and `tapt eval-mlm` share, refused (naming each) unless they
    can work."""
    whole_number(batch_size, "batch_size", maximum=MAX_COUNT)
    if isinstance(max_length, (int, np.integer)) and not isinstance(max_length, bool) \
            and max_length < 8:
        raise InputError(f"must be at least 8 tokens, got {max_length}", param="max_length")
    whole_number(max_length, "max_length", minimum=8, maximum=MAX_COUNT)
    real_number(mlm_probability, "mlm_probability", low=0.0, high=1.0, low_open=True,
                high_open=True)
    if whole_number(seed, "seed", minimum=0) > MAX_SEED:
        raise InputError(f"must be in 0..{MAX_SEED}, got {shown(seed)}", param="seed")
    choice(device, "device", DEVICES)


def parse_mix(mix: str) -> tuple[int, int]:
    """'task:selection' such as '1:1' or '1:3' -> (1, 1) / (1, 3); both parts positive integers."""
    parts = str(mix).split(":")
    if len(parts) != 2:
        raise InputError(f"must look like TASK:SELECTION (e.g. 1:1), got {mix!r}", param="mix")
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError as exc:
        raise InputError(f"must be two whole numbers like 1:1, got {mix!r}",
                         param="mix") from exc
    if a <= 0 or b <= 0:
        raise InputError(f"both parts must be positive, got {mix!r}", param="mix")
    return a, b


# The settings every masked-LM run has (`tapt train`, `tapt pretrain`): one default and one help
# text each, whichever command offers them.
_RUN_SETTINGS: dict[str, tuple[Any, dict[str, Any]]] = {
    "warmup": (0.06, {"help": "Fraction of steps of linear warmup (then linear decay to 0).",
                      "show_default": True}),
    "weight_decay": (0.01, {"help": "AdamW weight decay (none on biases and LayerNorm).",
                            "show_default": True}),
    "max_grad_norm": (1.0, {}),
    "mlm_probability": (0.15, {"help": "Share of tokens masked.", "show_default": True}),
    "device": ("cpu", {"help": "cuda trains with bf16 autocast where supported.",
                       "choices": DEVICES, "show_default": True}),
    "resume": (False, {"help": "Continue the run in --out from its last checkpoint."}),
    "save_every": (200, {"help": "Checkpoint every N steps.", "show_default": True}),
    "keep_checkpoints": (2, {"help": "How many of the newest checkpoints to keep.",
                             "show_default": True}),
    "delete_checkpoints": (False, {"help": "Delete OUT/checkpoints once the run has finished."}),
}


def run_setting(name: str, **metadata: Any) -> Any:
    """The dataclass field of a setting every masked-LM run has (its one default and help),
    with `metadata` added or replaced."""
    default, meta = _RUN_SETTINGS[name]
    return field(default=default, metadata={**meta, **metadata})


def check_run_settings(config: Any) -> None:
    """The checks of the settings every masked-LM run has (`run_setting`: length, batch,
    masking, seed, device, learning rate and schedule, checkpoints), its flags made booleans:
    what `TrainConfig` and `PretrainConfig` both run on themselves.

    Raises:
        InputError: a setting out of its range, naming it.
    """
    check_mlm_settings(config.max_length, config.batch_size, config.mlm_probability,
                       config.seed, config.device)
    real_number(config.lr, "lr", low=0.0, low_open=True, what="a positive number")
    real_number(config.warmup, "warmup", low=0.0, high=1.0, high_open=True,
                what="a fraction of the steps in [0, 1)")
    real_number(config.weight_decay, "weight_decay", low=0.0, what="a number >= 0")
    real_number(config.max_grad_norm, "max_grad_norm", low=0.0,
                what="a number >= 0 (0 = no clipping)")
    whole_number(config.save_every, "save_every", maximum=MAX_COUNT)
    whole_number(config.keep_checkpoints, "keep_checkpoints", maximum=MAX_COUNT)
    for name in ("resume", "delete_checkpoints", "progress"):
        object.__setattr__(config, name, flag(getattr(config, name), name))


@dataclass(frozen=True)
class TrainConfig:
    """Arguments of one training run; raises InputError on any value that cannot work."""

    selections: tuple[str, ...]
    out: str
    model: str | None = field(default=None, metadata={
        "help": "Masked-LM model directory or hub name (BERT, RoBERTa, DistilBERT...) [default: "
                "the packaged all-MiniLM-L6-v2, MLM head newly initialised]."})
    task: tuple[str, ...] = ()
    mix: str | None = field(default=None, metadata={
        "help": "TASK:SELECTION examples ratio with --task [default: 1:1]."})
    weights: str = field(default="discrete", metadata={
        "help": "discrete: ignore weights; continuous: scale each example's loss by its lambda; "
                "sample: draw examples with probability proportional to lambda.",
        "choices": WEIGHT_MODES, "show_default": True})
    steps: int | None = field(default=None, metadata={
        "help": "Optimizer steps (or give --epochs)."})
    epochs: int | None = field(default=None, metadata={"help": "Passes over the (mixed) data."})
    batch_size: int = field(default=16, metadata={
        "help": "Examples per optimizer step.", "show_default": True})
    max_length: int = field(default=128, metadata={
        "help": "Tokens per example; consecutive sentences of one segment are packed up to it.",
        "show_default": True})
    lr: float = field(default=1e-4, metadata={"help": "Peak learning rate.", "show_default": True})
    warmup: float = run_setting("warmup")
    weight_decay: float = run_setting("weight_decay")
    max_grad_norm: float = run_setting("max_grad_norm")
    mlm_probability: float = run_setting("mlm_probability")
    seed: int = field(default=0, metadata={
        "help": "Seed of data order, masks and head initialisation.", "minimum": 0,
        "maximum": MAX_SEED, "show_default": True})
    device: str = run_setting("device")
    resume: bool = run_setting("resume")
    eval_text: tuple[str, ...] = ()
    text_field: str = field(default="text", metadata={
        "help": "Field/column with the text in --task and --eval-text (JSONL, Parquet, CSV/TSV, "
                "Arrow, HF datasets).", "show_default": True})
    eval_every: int = field(default=0, metadata={
        "help": "Evaluate every N steps (0: only at the start and the end).",
        "show_default": True})
    eval_batch_size: int = field(default=MLM_EVAL_BATCH, metadata={
        "help": "Sequences per batch of the held-out loss (eval-mlm's --batch-size: the same "
                "masks, so the same loss for the same model).", "show_default": True})
    save_every: int = run_setting("save_every")
    keep_checkpoints: int = run_setting("keep_checkpoints")
    delete_checkpoints: bool = run_setting("delete_checkpoints")
    progress: bool = True
    task_texts: tuple[str, ...] = ()   # or the task's text itself, one document per string
    eval_texts: tuple[str, ...] = ()   # or the held-out text itself
    compare: tuple[str, ...] = ()      # the same run on random rows / the task alone, beside it

    def __post_init__(self) -> None:
        for name in ("selections", "task", "eval_text"):
            object.__setattr__(self, name, path_list(getattr(self, name), name))
        for name, paths in (("task_texts", "task"), ("eval_texts", "eval_text")):
            texts = getattr(self, name)
            if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
                raise InputError(f"must be a list of strings, got {shown(texts)}", param=paths)
            if texts and getattr(self, paths):
                raise InputError("give files or text, not both", param=paths)
            object.__setattr__(self, name, tuple(texts))
        if not isinstance(self.text_field, str) or not self.text_field:
            raise InputError(f"must name a field or column, got {shown(self.text_field)}",
                             param="text_field")
        if isinstance(self.compare, str) or not isinstance(self.compare, (list, tuple)):
            raise InputError(f"must be a list of {' or '.join(COMPARISONS)}, got "
                             f"{shown(self.compare)}", param="compare")
        object.__setattr__(self, "compare", tuple(dict.fromkeys(
            choice(c, "compare", COMPARISONS) for c in self.compare)))
        if self.compare and not (self.eval_text or self.eval_texts):
            raise InputError("a comparison is measured on held-out text: give `eval_text`",
                             param="compare")
        if "task" in self.compare and not (self.task or self.task_texts):
            raise InputError("comparing with the task alone needs the task's text: give `task`",
                             param="compare")
        if "task" in self.compare and not self.selections:
            raise InputError("this run trains on the task alone already; compare it with "
                             "random rows instead", param="compare")
        if "random" in self.compare and not self.selections:
            raise InputError("comparing with random rows needs a selection (its index and "
                             "size)", param="compare")
        if not self.selections and not (self.task or self.task_texts):
            raise InputError("give at least one selection file (or task text alone to train on "
                             "the task's own text)", param="selections")
        if self.out is None or (isinstance(self.out, str) and not self.out):
            raise InputError("is required", param="out")
        object.__setattr__(self, "out", path_text(self.out, "out"))
        if self.model is not None:
            object.__setattr__(self, "model", path_text(self.model, "model"))
        if self.mix is not None and not isinstance(self.mix, str):
            raise InputError(f"must look like TASK:SELECTION (e.g. 1:1), got {shown(self.mix)}",
                             param="mix")
        choice(self.weights, "weights", WEIGHT_MODES)
        if (self.steps is None) == (self.epochs is None):
            raise InputError("give exactly one of `steps` and `epochs`")
        if self.steps is not None:
            whole_number(self.steps, "steps", maximum=MAX_COUNT)
        if self.epochs is not None:
            whole_number(self.epochs, "epochs", maximum=MAX_COUNT)
        check_run_settings(self)
        whole_number(self.eval_every, "eval_every", minimum=0, maximum=MAX_COUNT)
        whole_number(self.eval_batch_size, "eval_batch_size", maximum=MAX_COUNT)
        for name in IDENTITY_FIELDS + ("eval_every", "eval_batch_size", "save_every",
                                       "keep_checkpoints"):
            value = getattr(self, name)     # numpy scalars as plain numbers: JSON for the manifest
            if isinstance(value, (np.integer, np.floating)):
                object.__setattr__(self, name, value.item())
        if self.mix is not None:
            if not (self.task or self.task_texts):
                raise InputError("needs `task` (it is the task:selection ratio)", param="mix")
            if not self.selections:
                raise InputError("needs a selection (it is the task:selection ratio; without "
                                 "one the task's text is all there is)", param="mix")
            parse_mix(self.mix)
        if (self.task or self.task_texts) and self.selections and self.mix is None:
            object.__setattr__(self, "mix", "1:1")

    @property
    def mix_ratio(self) -> tuple[int, int] | None:
        """(task, selection) parts of --mix, or None without --task."""
        return parse_mix(self.mix) if self.mix is not None else None

    def identity_fields(self) -> dict[str, Any]:
        """The hyper-parameters that must not change on --resume (data identities are added by the loop)."""
        return {name: getattr(self, name) for name in IDENTITY_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        """All arguments, JSON-ready (for the training manifest)."""
        out = asdict(self)
        for name in ("selections", "task", "eval_text"):
            out[name] = list(out[name])
        for name in ("task_texts", "eval_texts"):     # recorded by their hash with the inputs
            if out.pop(name):
                out[name] = len(getattr(self, name))
        return out
