"""Device choice: CPU by default; CUDA with bf16 autocast when asked for and available (the code
lives in `tapt.util.training`, shared with the Domain-Finetune classifier)."""

from __future__ import annotations

from tapt.util.training import autocast, resolve_device

__all__ = ["autocast", "resolve_device"]
