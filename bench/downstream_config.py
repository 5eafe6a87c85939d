"""DownstreamConfig: every setting of `tapt bench downstream` (`tapt.bench_downstream`), its
default and help in one place, validated when constructed (InputError naming the setting)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tapt.bench.downstream_finetune import FINETUNE_MODES, FinetuneSettings
from tapt.errors import InputError
from tapt.modeling.scratch import PRESETS
from tapt.trainer.config import DEVICES, MAX_COUNT
from tapt.util.checks import (
    choice,
    path_text,
    real_number,
    shown,
    whole_number,
    whole_numbers,
)

CONDITIONS = ("none", "random", "task", "centroid", "knn", "fused", "oracle")
NOT_METHODS = ("none", "task", "oracle")


def _conditions(value: Any) -> tuple[str, ...]:
    from tapt.retriever.methods import method_names

    if isinstance(value, str):
        value = [c.strip() for c in value.split(",") if c.strip()]
    if not isinstance(value, (list, tuple)):
        raise InputError(f"must be a list of conditions, got {shown(value)}", param="conditions")
    known = (*NOT_METHODS, *method_names())
    out: list[str] = []
    for c in value:
        if not isinstance(c, str) or c not in known:
            raise InputError(f"unknown condition {shown(c)}; conditions are none, task, oracle "
                             f"or a selection method ({', '.join(known[3:])})",
                             param="conditions")
        if c not in out:
            out.append(c)
    if not out:
        raise InputError("give at least one condition", param="conditions")
    return tuple(out)


def _seeds(value: Any) -> tuple[int, ...]:
    out = tuple(dict.fromkeys(whole_numbers(value, "seeds", minimum=0)))
    if not out:
        raise InputError("give at least one seed", param="seeds")
    return out


def _help(text: str, **more: Any) -> dict[str, Any]:
    return {"help": text, **more}


@dataclass(frozen=True)
class DownstreamConfig:
    """The settings of one downstream benchmark (see `tapt.bench_downstream`)."""

    task: Any = field(default=None, metadata=_help(
        "The unlabelled task text the selections are made for: a file (or, in Python, a list "
        "of strings) [default: the texts of --labelled]."))
    task_name: str | None = field(default=None, metadata=_help(
        "The task's name in the report [default: the labelled file's name]."))
    text_field: str = field(default="text", metadata=_help(
        "The field with the text in --labelled (and a JSONL --task).", show_default=True))
    label_field: str = field(default="label", metadata=_help(
        "The field with the label in --labelled.", show_default=True))
    group_field: str | None = field(default=None, metadata=_help(
        "A field of --labelled (e.g. doc) whose examples stay in one fold."))
    oracle_field: str = field(default="domain", metadata=_help(
        "The index's metadata field that marks the domain's own rows.", show_default=True))
    oracle_value: str | None = field(default=None, metadata=_help(
        "Its value for the domain (e.g. quotes); needed by the oracle condition."))
    conditions: Any = field(default=",".join(CONDITIONS), metadata=_help(
        "Comma-separated: none (the starting model as it is), random (random rows: the "
        "control), task (the task's own text), oracle (the domain's own rows), or selection "
        "methods.", show_default=True, type="str"))
    seeds: Any = field(default="0", metadata=_help(
        "Comma-separated seeds (folds, selection, pretraining and fine-tuning).",
        show_default=True, type="str"))
    folds: int = field(default=5, metadata=_help(
        "Folds of the cross-validation by document: every example is tested once per seed.",
        show_default=True, minimum=2))
    budget: str = field(default="10000sent", metadata=_help(
        "Selection budget of every condition (10000sent, 0.01, 500, 1Mtok).",
        show_default=True))
    model: str | None = field(default=None, metadata=_help(
        "Masked LM to start from (directory or hub name) [default: a general model of the "
        "index made by `tapt pretrain` at --preset, cached]."))
    preset: str = field(default="cpu", metadata=_help(
        "Size of the general model made when --model is not given.", choices=tuple(PRESETS),
        show_default=True))
    steps: int = field(default=300, metadata=_help(
        "Continued-pretraining steps (the same for every condition).", show_default=True,
        minimum=1))
    batch_size: int = field(default=32, metadata=_help(
        "Continued-pretraining examples per step.", show_default=True, minimum=1))
    max_length: int = field(default=64, metadata=_help(
        "Tokens per example, in pretraining, evaluation and fine-tuning.", show_default=True,
        minimum=8))
    lr: float = field(default=2e-4, metadata=_help(
        "Continued-pretraining peak learning rate.", show_default=True))
    ft_mode: str = field(default="full", metadata=_help(
        "full: the encoder fine-tuned with a linear head; probe: a logistic regression on its "
        "frozen features (seconds instead of minutes on a CPU).", choices=FINETUNE_MODES,
        show_default=True))
    ft_epochs: int = field(default=3, metadata=_help(
        "Fine-tuning passes over each fold's training examples.", show_default=True,
        minimum=1))
    ft_steps: int | None = field(default=None, metadata=_help(
        "Fine-tuning steps instead of --ft-epochs.", minimum=1))
    ft_batch_size: int = field(default=16, metadata=_help(
        "Fine-tuning examples per step.", show_default=True, minimum=1))
    ft_lr: float = field(default=1e-4, metadata=_help(
        "Fine-tuning peak learning rate of the encoder (the new head's is 1e-3).",
        show_default=True))
    device: str = field(default="cpu", metadata=_help(
        "Where models train: cpu or cuda.", choices=DEVICES, show_default=True))
    keep_models: bool = field(default=False, metadata=_help(
        "Keep each run's continued-pretrained model (default: deleted once scored; loss "
        "curves are kept)."))

    def __post_init__(self) -> None:
        from tapt.retriever.ranking.budget import parse_budget

        object.__setattr__(self, "conditions", _conditions(self.conditions))
        object.__setattr__(self, "seeds", _seeds(self.seeds))
        for name in ("text_field", "label_field", "oracle_field"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise InputError(f"must name a field, got {shown(getattr(self, name))}",
                                 param=name)
        whole_number(self.folds, "folds", minimum=2, maximum=MAX_COUNT)
        whole_number(self.steps, "steps", maximum=MAX_COUNT)
        whole_number(self.batch_size, "batch_size", maximum=MAX_COUNT)
        real_number(self.lr, "lr", low=0.0, low_open=True)
        choice(self.device, "device", DEVICES)
        choice(self.preset, "preset", tuple(PRESETS))
        if self.model is not None:
            object.__setattr__(self, "model", path_text(self.model, "model"))
        if not isinstance(self.budget, str):
            raise InputError(f"must be a budget such as 10000sent, got {shown(self.budget)}",
                             param="budget")
        parse_budget(self.budget)
        self.finetune()                     # its own checks, naming ft_* settings
        if self.model is None and self.max_length > PRESETS[self.preset]["max_length"]:
            raise InputError(f"must be at most the {self.preset} general model's "
                             f"{PRESETS[self.preset]['max_length']} positions, got "
                             f"{self.max_length}", param="max_length")
        if "oracle" in self.conditions and self.oracle_value is None:
            raise InputError("the oracle condition needs the domain's value of the oracle "
                             f"field ({self.oracle_field})", param="oracle_value")

    def finetune(self) -> FinetuneSettings:
        """How each fold's classifier is trained."""
        return FinetuneSettings(mode=self.ft_mode, epochs=self.ft_epochs, steps=self.ft_steps,
                                batch_size=self.ft_batch_size, lr=self.ft_lr,
                                max_length=self.max_length)

    def to_dict(self) -> dict[str, Any]:
        """The settings, JSON-ready."""
        out = asdict(self)
        out["conditions"], out["seeds"] = list(self.conditions), list(self.seeds)
        return out
