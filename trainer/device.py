"""Device choice: CPU by default; CUDA with bf16 autocast when asked for and available."""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

from tapt.errors import InputError


def resolve_device(name: str) -> torch.device:
    """torch.device for 'cpu' / 'cuda'; refuses 'cuda' on a machine without a usable GPU."""
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise InputError("cuda was given but no CUDA GPU is available to torch", param="device")
        return torch.device("cuda")
    raise InputError(f"must be cpu or cuda, got {name!r}", param="device")


def autocast(device: torch.device) -> ContextManager:
    """bf16 autocast on a GPU that supports it; nothing on CPU (keeps CPU runs exact)."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
