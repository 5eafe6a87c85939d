"""Torch training pieces shared by `tapt train` and the Domain-Finetune classifier
(`tapt.retriever.learned.finetune_classifier`): the device choice, bf16 autocast on a GPU, AdamW with BERT's
decay groups and a linear warmup/decay schedule, and quieting transformers' load report. torch
is imported lazily (this is `util`)."""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager, Iterator

from tapt.errors import InputError


def resolve_device(name: str) -> Any:
    """torch.device for 'cpu' / 'cuda'; refuses 'cuda' on a machine without a usable GPU."""
    import torch

    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise InputError("cuda was given but no CUDA GPU is available to torch",
                             param="device")
        return torch.device("cuda")
    raise InputError(f"must be cpu or cuda, got {name!r}", param="device")


def autocast(device: Any) -> ContextManager:
    """bf16 autocast on a GPU that supports it; nothing on CPU (keeps CPU runs exact)."""
    import torch

    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def make_optimizer(model: Any, lr: float, weight_decay: float, warmup: float,
                   total_steps: int, prefix_lr: dict[str, float] | None = None
                   ) -> tuple[Any, Any]:
    """AdamW (no decay on biases and LayerNorm weights); linear warmup over `warmup` x
    `total_steps`, then linear decay to 0.

    Args:
        model: A torch module; only parameters that require gradients are optimised.
        lr: Peak learning rate.
        weight_decay: Decoupled weight decay of the matrices.
        warmup: Fraction of the steps spent warming up, in [0, 1).
        total_steps: Optimizer steps of the whole run.
        prefix_lr: Another peak learning rate for the parameters whose name starts with a
            prefix (e.g. a freshly initialised head: {"head.": 1e-3}).

    Returns:
        (optimizer, scheduler).
    """
    import torch
    from transformers import get_linear_schedule_with_warmup

    groups: dict[tuple[float, bool], list] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        rate = next((v for p, v in (prefix_lr or {}).items() if name.startswith(p)), lr)
        decays = not (param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name)
        groups.setdefault((rate, decays), []).append(param)
    optimizer = torch.optim.AdamW(
        [{"params": params, "lr": rate, "weight_decay": weight_decay if decays else 0.0}
         for (rate, decays), params in sorted(groups.items(), key=lambda kv: (-kv[0][1],
                                                                               kv[0][0]))],
        lr=lr,
    )
    warmup_steps = round(warmup * total_steps)
    return optimizer, get_linear_schedule_with_warmup(optimizer, warmup_steps, total_steps)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' own load report; we log one clear warning instead."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)
        if bars:
            hf_logging.enable_progress_bar()
