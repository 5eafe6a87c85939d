"""TrainConfig: every argument of `tapt train`, validated when constructed."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tapt.errors import InputError
from tapt.util.checks import whole_number

WEIGHT_MODES = ("discrete", "continuous", "sample")
DEVICES = ("cpu", "cuda")

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


@dataclass(frozen=True)
class TrainConfig:
    """Arguments of one training run; raises InputError on any value that cannot work."""

    selections: tuple[str, ...]
    out: str
    model: str | None = None
    task: tuple[str, ...] = ()
    mix: str | None = None
    weights: str = "discrete"
    steps: int | None = None
    epochs: int | None = None
    batch_size: int = 16
    max_length: int = 128
    lr: float = 1e-4
    warmup: float = 0.06
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    mlm_probability: float = 0.15
    seed: int = 0
    device: str = "cpu"
    resume: bool = False
    eval_text: tuple[str, ...] = ()
    text_field: str = "text"  # the field/column with the text in --task and --eval-text
    eval_every: int = 0
    save_every: int = 200
    keep_checkpoints: int = 2
    delete_checkpoints: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("selections", "task", "eval_text"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            object.__setattr__(self, name, tuple(str(v) for v in (value or ())))
        if not isinstance(self.text_field, str) or not self.text_field:
            raise InputError("must name a field or column", param="text_field")
        if not self.selections:
            raise InputError("give at least one selection file", param="selections")
        if not self.out:
            raise InputError("is required", param="out")
        if self.weights not in WEIGHT_MODES:
            raise InputError(f"must be one of {', '.join(WEIGHT_MODES)}, got {self.weights!r}",
                             param="weights")
        if (self.steps is None) == (self.epochs is None):
            raise InputError("give exactly one of `steps` and `epochs`")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps <= 0):
            raise InputError(f"must be a positive whole number, got {self.steps!r}",
                             param="steps")
        if self.epochs is not None and (not isinstance(self.epochs, int) or self.epochs <= 0):
            raise InputError(f"must be a positive whole number, got {self.epochs!r}",
                             param="epochs")
        if self.batch_size <= 0:
            raise InputError(f"must be positive, got {self.batch_size}", param="batch_size")
        if self.max_length < 8:
            raise InputError(f"must be at least 8 tokens, got {self.max_length}",
                             param="max_length")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"must be a positive number, got {self.lr}", param="lr")
        if not (0.0 <= self.warmup < 1.0):
            raise InputError(f"is a fraction of the steps in [0, 1), got {self.warmup}",
                             param="warmup")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise InputError(f"must be >= 0, got {self.weight_decay}", param="weight_decay")
        if not (math.isfinite(self.max_grad_norm) and self.max_grad_norm >= 0):
            raise InputError(f"must be >= 0 (0 = no clipping), got {self.max_grad_norm}",
                             param="max_grad_norm")
        if not (0.0 < self.mlm_probability < 1.0):
            raise InputError(f"must be in (0, 1), got {self.mlm_probability}",
                             param="mlm_probability")
        whole_number(self.seed, "seed", minimum=0)
        if self.device not in DEVICES:
            raise InputError(f"must be one of {', '.join(DEVICES)}, got {self.device!r}",
                             param="device")
        if self.eval_every < 0:
            raise InputError(f"must be >= 0 (0 = only at the start and end), got "
                             f"{self.eval_every}", param="eval_every")
        if self.save_every <= 0:
            raise InputError(f"must be positive, got {self.save_every}", param="save_every")
        if self.keep_checkpoints <= 0:
            raise InputError(f"must be positive, got {self.keep_checkpoints}",
                             param="keep_checkpoints")
        if self.mix is not None:
            if not self.task:
                raise InputError("needs `task` (it is the task:selection ratio)", param="mix")
            parse_mix(self.mix)
        if self.task and self.mix is None:
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
        return out
